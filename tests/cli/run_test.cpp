// `braid run seed.cu` through the binary: each step's outputs, the state file, continuing after
// an interruption without redoing finished steps, `braid resume` of such a folder, the
// conversion summary in the run's record and report, and bad input (exit 2, one line, nothing
// written). No GPU is needed: --no-gate records the conversion as unverified, --no-build skips
// the nvcc check, and the evolve step either runs (GPU machine) or stops with the evaluator's
// one-line reason after the run is recorded.
#include <gtest/gtest.h>

#include <fstream>

#include "../e2e/e2e_support.hpp"
#include "braid/util/json.hpp"

namespace braid::test {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

json state_of(const fs::path& results) { return json::parse(slurp(results / "run_state.json")); }

// The evolve step on this machine: runs (GPUs present) or stops with the GPU evaluator's reason.
void expect_evolve_ran_or_needs_gpus(const Outcome& o) {
  if (o.code == 0) {
    EXPECT_NE(o.output.find("evolve:"), std::string::npos) << o.output;
    return;
  }
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("GPU"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("braid resume"), std::string::npos) << o.output;
}

class RunCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fresh_dir("run_cmd");
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(RunCommand, GemmSeedStepByStepThenContinues) {
  const fs::path seed = fs::path(BRAID_SOURCE_DIR) / "workloads/gemm_allgather/seed.cu";
  const fs::path results = root_ / "gemm";
  const std::vector<std::string> common = {"run", seed.string(), "-o", results.string(), "--no-gate", "--no-build", "-g", "1", "-j", "1", "--seed", "5"};

  // 1. Stop after the annotation (as if killed there).
  auto args = common;
  args.insert(args.end(), {"--until", "annotate"});
  Outcome first = run_braid(args);
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_NE(first.output.find("UNVERIFIED (--no-gate)"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("1 of 1 NCCL calls converted by rules"), std::string::npos) << first.output;
  const std::string converted = slurp(results / "convert/converted.cu");
  EXPECT_NE(converted.find("braid_converted::all_gather<0>"), std::string::npos);
  EXPECT_NE(slurp(results / "workload/gen0.cu").find("EVOLVE-BLOCK-START comm_0"), std::string::npos);
  EXPECT_EQ(json::parse(slurp(results / "convert/gate.json")).at("status"), "unverified");
  EXPECT_EQ(json::parse(slurp(results / "annotate/annotation.json")).at("method"), "rules");
  json st = state_of(results);
  for (const char* step : {"convert", "gate", "annotate"}) EXPECT_TRUE(st["steps"][step]["done"].get<bool>()) << step;
  EXPECT_FALSE(st["steps"].contains("workload"));
  EXPECT_FALSE(fs::exists(results / "evolution.db"));
  const auto converted_time = fs::last_write_time(results / "convert/converted.cu");
  const auto gen0_time = fs::last_write_time(results / "workload/gen0.cu");

  // 2. Again: finished steps are kept (same files, untouched), the rest runs.
  Outcome second = run_braid(common);
  expect_evolve_ran_or_needs_gpus(second);
  for (const char* step : {"convert:", "gate:", "annotate:"})
    EXPECT_NE(second.output.find(std::string(step) + std::string(9 - std::string(step).size(), ' ') + " done earlier (kept)"), std::string::npos)
        << step << "\n" << second.output;
  EXPECT_NE(second.output.find("unverified"), std::string::npos);
  EXPECT_EQ(fs::last_write_time(results / "convert/converted.cu"), converted_time);
  EXPECT_EQ(fs::last_write_time(results / "workload/gen0.cu"), gen0_time);
  const std::string yaml = slurp(results / "workload/workload.yaml");
  EXPECT_NE(yaml.find("kind: gpu"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("program: gen0.cu"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find((fs::path(BRAID_SOURCE_DIR) / "workloads/gemm_allgather").lexically_normal().string()), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("bench_args"), std::string::npos) << "the seed folder's own evaluator is kept";
  EXPECT_TRUE(fs::exists(results / "workload/config.yaml"));
  EXPECT_EQ(slurp(results / "workload/seed.cu"), slurp(seed));
  ASSERT_TRUE(fs::exists(results / "evolution.db"));
  st = state_of(results);
  EXPECT_TRUE(st["steps"]["record"]["done"].get<bool>());

  // 3. The report shows the conversion summary from the run's record.
  Outcome report = run_braid({"report", results.string(), "-o", (root_ / "report.html").string()});
  ASSERT_EQ(report.code, 0) << report.output;
  const std::string html = slurp(root_ / "report.html");
  EXPECT_NE(html.find("<h2>Conversion</h2>"), std::string::npos);
  EXPECT_NE(html.find("unverified (--no-gate)"), std::string::npos);
  EXPECT_NE(html.find("1 of 1"), std::string::npos);
  EXPECT_NE(html.find("rules: 2 blocks, 4 knobs"), std::string::npos);

  // 4. `braid resume` of a braid-run folder goes through the same steps.
  Outcome resumed = run_braid({"resume", results.string()});
  expect_evolve_ran_or_needs_gpus(resumed);
  EXPECT_NE(resumed.output.find("record:   done earlier (kept)"), std::string::npos) << resumed.output;
  EXPECT_EQ(fs::last_write_time(results / "convert/converted.cu"), converted_time);
}

TEST_F(RunCommand, CorpusProgramRedoesOnlyWhatChanged) {
  const fs::path seed = fs::path(BRAID_SOURCE_DIR) / "tests/convert/corpus/allreduce_after_kernel.cu";
  const fs::path results = root_ / "allreduce";
  const std::vector<std::string> args = {"run", seed.string(), "-o", results.string(), "--no-gate", "--no-build", "-g", "1", "--until", "record"};
  Outcome first = run_braid(args);
  ASSERT_EQ(first.code, 0) << first.output;
  const std::string yaml = slurp(results / "workload/workload.yaml");
  EXPECT_NE(yaml.find("kind: gpu"), std::string::npos);
  EXPECT_NE(yaml.find("NCCL_NVLS_ENABLE"), std::string::npos);

  // A killed run whose state lost the annotation step: convert and gate are kept, the rest redone.
  json st = state_of(results);
  st["steps"].erase("annotate");
  std::ofstream(results / "run_state.json") << st.dump(2);
  const auto converted_time = fs::last_write_time(results / "convert/converted.cu");
  Outcome second = run_braid(args);
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_NE(second.output.find("convert:  done earlier (kept)"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("annotate: 2 blocks, 4 knobs by rules"), std::string::npos) << second.output;
  EXPECT_EQ(fs::last_write_time(results / "convert/converted.cu"), converted_time);

  // An output edited by hand no longer matches its hash: that step and every later one run again.
  std::ofstream(results / "convert/converted.cu", std::ios::app) << "// edited\n";
  Outcome third = run_braid(args);
  ASSERT_EQ(third.code, 0) << third.output;
  EXPECT_NE(third.output.find("convert:  1 of 1 NCCL calls converted by rules"), std::string::npos) << third.output;
  EXPECT_EQ(slurp(results / "convert/converted.cu").find("// edited"), std::string::npos);
}

TEST_F(RunCommand, BadInputWritesNothing) {
  auto expect_refused = [&](std::vector<std::string> args, const std::string& what, const fs::path& results) {
    Outcome o = run_braid(args);
    EXPECT_EQ(o.code, 2) << o.output;
    std::string out = o.output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    EXPECT_EQ(out.find('\n'), std::string::npos) << "expected one line, got:\n" << o.output;
    EXPECT_NE(o.output.find(what), std::string::npos) << o.output;
    EXPECT_FALSE(fs::exists(results)) << o.output;
  };
  const fs::path results = root_ / "bad";
  expect_refused({"run", (root_ / "missing.cu").string(), "-o", results.string()}, "no such file", results);
  std::ofstream(root_ / "plain.cu") << "#include <cstdio>\nint main() { std::printf(\"hi\\n\"); return 0; }\n";
  expect_refused({"run", (root_ / "plain.cu").string(), "-o", results.string()}, "plain.cu", results);
  const fs::path seed = fs::path(BRAID_SOURCE_DIR) / "tests/convert/corpus/broadcast_root.cu";
  expect_refused({"run", seed.string(), "-o", results.string(), "--until", "nowhere"}, "--until", results);
  expect_refused({"run", seed.string(), "-o", results.string(), "--llm", "openai/gpt-test", "--no-gate"}, "", results);

  // A folder that holds another program's run is refused, and left as it was.
  const fs::path other = root_ / "other";
  Outcome ok = run_braid({"run", seed.string(), "-o", other.string(), "--no-gate", "--no-build", "--until", "convert"});
  ASSERT_EQ(ok.code, 0) << ok.output;
  const std::string state = slurp(other / "run_state.json");
  Outcome refused = run_braid({"run", (fs::path(BRAID_SOURCE_DIR) / "tests/convert/corpus/ring_sendrecv.cu").string(), "-o", other.string()});
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("another program"), std::string::npos) << refused.output;
  EXPECT_EQ(slurp(other / "run_state.json"), state);
}

}  // namespace
}  // namespace braid::test
