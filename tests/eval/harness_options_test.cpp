// The harness's command line (device/include/braid/harness/options.cuh) parsed on the host: it is
// plain C++, and braid passes it seeds drawn over the whole uint64 range.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "braid/harness/options.cuh"

namespace {

braid::dev::Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "harness");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return braid::dev::parse_options(static_cast<int>(argv.size()), argv.data());
}

TEST(HarnessOptions, SeedsAboveTwoToTheSixtyThreeAreKeptWhole) {
  // 2^63 and above were clamped to 2^63 - 1: every such seed drew the same inputs, and the verdict
  // channel refused the record (its seed was not the one braid passed).
  EXPECT_EQ(parse({"--size", "8", "--seed", "18109873000513284024"}).seed, 18109873000513284024ull);
  EXPECT_EQ(parse({"--size", "8", "--seed=18446744073709551615"}).seed, UINT64_MAX);
  EXPECT_EQ(parse({"--size", "8", "--seed", "0"}).seed, 0u);
}

TEST(HarnessOptions, SeedsOutOfRangeOrNegativeStopWithExitTwo) {
  EXPECT_EXIT(parse({"--size", "8", "--seed", "18446744073709551616"}), testing::ExitedWithCode(2), "--seed expects");
  EXPECT_EXIT(parse({"--size", "8", "--seed", "-1"}), testing::ExitedWithCode(2), "--seed expects");
  EXPECT_EXIT(parse({"--size", "99999999999999999999"}), testing::ExitedWithCode(2), "--size expects an integer");
}

}  // namespace
