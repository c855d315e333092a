// The single-GPU serving-kernel workloads (workloads/serving_kernels/<op>): each loads as a 1-rank
// GPU workload whose sizes name valid shapes, its gen0.cu parses with the kernel itself inside the
// EVOLVE-BLOCK and a sane knob space, and a sampled knob vector compiles with nvcc (sm_90, -c).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <sstream>

#include "braid/eval/gpu_cascade.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/eval/nvcc_builder.hpp"
#include "braid/eval/workload.hpp"
#include "braid/program/program.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

namespace fs = std::filesystem;

fs::path op_dir(const std::string& op) { return fs::path(BRAID_SOURCE_DIR) / "workloads/serving_kernels" / op; }

Program gen0(const std::string& op) {
  const fs::path path = op_dir(op) / "gen0.cu";
  return Program::parse(read_file(path), path.string());
}

// Every knob vector of the program that satisfies its braid:require lines.
std::vector<std::map<std::string, std::string>> valid_vectors(const Program& p) {
  std::vector<std::map<std::string, std::string>> out;
  std::map<std::string, std::string> values;
  std::function<void(std::size_t)> walk = [&](std::size_t i) {
    if (i == p.knobs().size()) {
      if (!p.violated_constraint(values)) out.push_back(values);
      return;
    }
    for (const auto& v : p.knobs()[i].domain) {
      values[p.knobs()[i].name] = v;
      walk(i + 1);
    }
  };
  walk(0);
  return out;
}

// rows * 1000000 + width, as serving_kernels.cuh decodes a --size.
struct Shape {
  long long rows, width;
};
std::vector<Shape> sizes_of(const std::string& args) {
  std::vector<Shape> out;
  std::istringstream in(args);
  std::string word;
  while (in >> word)
    if (word == "--size" && in >> word) {
      const long long size = std::stoll(word);
      out.push_back({size / 1000000, size % 1000000});
    }
  return out;
}

class ServingKernel : public ::testing::TestWithParam<std::string> {};

TEST_P(ServingKernel, LoadsAsAOneRankGpuWorkloadWithValidShapes) {
  const std::string op = GetParam();
  WorkloadSpec spec = load_workload(op_dir(op));
  EXPECT_EQ(spec.name, op);
  EXPECT_EQ(spec.program, op_dir(op) / "gen0.cu");
  EXPECT_TRUE(fs::exists(op_dir(op) / "seed.cu"));
  EXPECT_TRUE(fs::exists(op_dir(op) / (op + ".cuh")));
  ASSERT_EQ(spec.evaluator["kind"], "gpu");
  GpuCascadeConfig c = GpuCascadeConfig::from_json(spec.evaluator, op_dir(op), "gen0.cu");
  EXPECT_EQ(c.ranks, 1);
  EXPECT_TRUE(c.verify_in_bench);
  for (const fs::path& inc : c.includes) EXPECT_TRUE(fs::is_directory(inc)) << inc;
  EXPECT_TRUE(fs::exists(fs::path(BRAID_SOURCE_DIR) / "workloads/serving_kernels/common/serving_kernels.cuh"));
  const std::vector<Shape> shapes = sizes_of(c.args);
  ASSERT_GE(shapes.size(), 2u) << c.args;
  for (const Shape& s : shapes) {
    EXPECT_GE(s.rows, 1);
    EXPECT_LE(s.rows, 16384);
    EXPECT_EQ(s.width % 8, 0) << s.width;
    if (op == "softmax") EXPECT_EQ(s.width, 128256);
    else if (op == "silu_mul") EXPECT_TRUE(s.width == 14336 || s.width == 28672) << s.width;
    else EXPECT_TRUE(s.width == 4096 || s.width == 8192) << s.width;
  }
  EXPECT_NE(c.args.find("--rtol"), std::string::npos);
  EXPECT_NE(c.args.find("--atol"), std::string::npos);
}

TEST_P(ServingKernel, KernelIsInsideTheEvolveBlockAndTheKnobSpaceIsSane) {
  Program p = gen0(GetParam());
  ASSERT_TRUE(p.ok()) << p.error()->message;
  ASSERT_EQ(p.blocks().size(), 1u);
  const std::string_view block = p.block_text(0);
  // The candidate is all of it: kernel, launch and the four Candidate functions.
  for (const char* needle : {"__global__", "<<<", "Requirements requirements(", "void setup(", "void run(", "void teardown("})
    EXPECT_NE(block.find(needle), std::string_view::npos) << needle;
  const std::string frozen = p.text().substr(0, p.blocks()[0].begin) + p.text().substr(p.blocks()[0].end);
  EXPECT_EQ(frozen.find("__global__"), std::string::npos);
  EXPECT_NE(frozen.find("harness_main("), std::string::npos);

  EXPECT_GE(p.knobs().size(), 6u);
  std::set<std::string> names;
  for (const Knob& k : p.knobs()) {
    names.insert(k.name);
    EXPECT_GE(k.domain.size(), 2u) << k.name;
  }
  EXPECT_TRUE(names.count("kThreads") && names.count("kVec")) << "block size and vector width are knobs";
  EXPECT_FALSE(p.violated_constraint({}).has_value());  // the defaults are valid
  const auto valid = valid_vectors(p);
  // Wide enough to search, small enough that 60 evaluations see a real share of its good region.
  EXPECT_GE(valid.size(), 200u);
  EXPECT_LE(valid.size(), 20000u);
  // Every value of every knob is reachable in some valid vector.
  for (const Knob& k : p.knobs())
    for (const std::string& v : k.domain) {
      bool seen = false;
      for (const auto& vec : valid) seen = seen || vec.at(k.name) == v;
      EXPECT_TRUE(seen) << k.name << "=" << v << " is in no valid vector";
    }
}

// nvcc -c of one valid knob vector other than the defaults (drawn with a fixed seed per op),
// through a content-addressed cache in the build folder so reruns are instant.
TEST_P(ServingKernel, SampledKnobVectorCompiles) {
  std::string why;
  const auto toolchain = find_cuda_toolchain(&why);
  if (!toolchain) GTEST_SKIP() << "no nvcc: " << why;
  const std::string op = GetParam();
  Program p = gen0(op);
  ASSERT_TRUE(p.ok()) << p.error()->message;
  const auto valid = valid_vectors(p);
  ASSERT_GT(valid.size(), 1u);
  std::mt19937_64 rng(std::hash<std::string>{}(op));
  std::map<std::string, std::string> chosen;
  do chosen = valid[rng() % valid.size()];
  while (knob_key_of(chosen) == p.knob_key());
  const EditResult edited = with_knobs(p, chosen);
  ASSERT_TRUE(edited.ok()) << edited.error;
  SCOPED_TRACE(knob_key_of(chosen));

  const fs::path work = fs::current_path() / "serving-kernels-nvcc" / op;
  fs::create_directories(work);
  write_file_atomic(work / "gen0_sampled.cu", edited.text);
  NvccBuilder builder(*toolchain, work / "cache", 1);
  BuildInput in;
  in.source = work / "gen0_sampled.cu";
  in.output = work / "gen0_sampled.o";
  in.arch = "sm_90";
  in.flags = {"-O0", "-std=c++20", "--expt-relaxed-constexpr", "-c"};
  in.includes = {op_dir(op), op_dir(op) / "../common"};
  in.link_nccl = false;
  in.display_name = "gen0.cu";
  in.timeout_s = 600;
  const BuildResult r = builder.build(in);
  EXPECT_TRUE(r.ok) << r.error;
}

INSTANTIATE_TEST_SUITE_P(Ops, ServingKernel, ::testing::Values("add_rmsnorm", "silu_mul", "rope", "softmax"));

}  // namespace
}  // namespace braid
