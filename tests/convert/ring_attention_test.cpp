// workloads/ring_attention's seed through `braid convert`: the host-driven ring (per step a group
// of ncclSend/ncclRecv of the next K/V block) converts completely by rules, and the seed and its
// conversion compile with nvcc (-c, sm_90).
#include <gtest/gtest.h>

#include <filesystem>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/gate.hpp"
#include "braid/convert/transform.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/fs.hpp"

using namespace braid;

namespace {
const std::filesystem::path kDir = std::filesystem::path(BRAID_SOURCE_DIR) / "workloads/ring_attention";
}

TEST(RingAttentionSeed, ConvertsByRules) {
  const std::string src = read_file(kDir / "seed.cu");
  convert::Conversion c = convert::transform(convert::analyze("seed.cu", src), src);
  EXPECT_TRUE(c.complete()) << convert::conversion_to_text(c);
  // Per step one group: the sends of K and V (from the inputs at step 0, from the stage after)
  // and the two receives into the other stage.
  EXPECT_EQ(c.nccl_calls, 6);
  EXPECT_EQ(c.converted_calls, 6);
  // The replacements sit where the host calls were, inside the step loop, before the kernel.
  const std::size_t group = c.source.find("braid_converted::group_end");
  const std::size_t kernel = c.source.find("launch_attention_block");
  ASSERT_NE(group, std::string::npos);
  ASSERT_NE(kernel, std::string::npos);
  EXPECT_LT(group, kernel);
  // No host send/receive is left in the program's own code (the prelude after the includes
  // mentions the NCCL calls it stands for).
  const std::size_t run_at = c.source.find("void run(Context& c");
  ASSERT_NE(run_at, std::string::npos);
  EXPECT_EQ(c.source.find("ncclSend(", run_at), std::string::npos);
  EXPECT_EQ(c.source.find("ncclRecv(", run_at), std::string::npos);
}

class RingAttentionSeedCompiles : public ::testing::TestWithParam<std::string> {};

TEST_P(RingAttentionSeedCompiles, WithNvcc) {
  if (!find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const std::string src = read_file(kDir / "seed.cu");
  const std::string source = GetParam() == "seed" ? src : convert::transform(convert::analyze("seed.cu", src), src).source;
  const auto work = std::filesystem::current_path() / "ring-attention-nvcc" / GetParam();
  BuildResult r = convert::compile_only(source, work, GetParam(), kDir, {"-O0", "-std=c++20", "--expt-relaxed-constexpr"});
  EXPECT_TRUE(r.ok) << r.error;
}

INSTANTIATE_TEST_SUITE_P(Programs, RingAttentionSeedCompiles, ::testing::Values("seed", "seed_converted"));
