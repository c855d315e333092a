// Each corpus program's conversion compiles with nvcc (-c: no GPU and no link needed), once per
// program through the builder's content-addressed cache in the build folder.
#include <gtest/gtest.h>

#include <filesystem>

#include "braid/convert/gate.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/fs.hpp"

using namespace braid::convert;

namespace {

class ConvertedCompiles : public ::testing::TestWithParam<std::string> {};

std::filesystem::path program_path(const std::string& name) {
  if (name == "gemm_allgather_seed") return std::filesystem::path(BRAID_SOURCE_DIR) / "workloads/gemm_allgather/seed.cu";
  return std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus" / (name + ".cu");
}

}  // namespace

TEST_P(ConvertedCompiles, WithNvcc) {
  if (!braid::find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const auto path = program_path(GetParam());
  const std::string src = braid::read_file(path);
  Conversion c = transform(analyze(path.filename().string(), src), src);
  ASSERT_GT(c.converted_calls, 0);
  // -O0 keeps CI's two cores free; the cache lives in the build folder so reruns are instant.
  const auto work = std::filesystem::current_path() / "convert-nvcc" / GetParam();
  braid::BuildResult r = compile_only(c.source, work, "converted", path.parent_path(), {"-O0", "-std=c++20", "--expt-relaxed-constexpr"});
  EXPECT_TRUE(r.ok) << r.error;
}

INSTANTIATE_TEST_SUITE_P(Corpus, ConvertedCompiles,
                         ::testing::Values("allreduce_after_kernel", "ring_sendrecv", "alltoallv_counts", "grouped_collectives", "two_streams",
                                           "loop_reduce_scatter", "broadcast_root", "alltoall_tokens", "gemm_allgather_seed"));
