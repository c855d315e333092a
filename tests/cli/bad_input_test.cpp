// Bad input stops braid before it writes anything: one line naming the file and the problem,
// exit code 2.
#include <gtest/gtest.h>

#include <fstream>

#include "../e2e/e2e_support.hpp"

namespace braid::test {
namespace {

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fresh_dir("bad_input");
    std::filesystem::create_directories(root_);
    // A valid workload to break piece by piece.
    std::filesystem::copy(std::filesystem::path(BRAID_SOURCE_DIR) / "examples" / "matmul_cpu", root_ / "wl",
                          std::filesystem::copy_options::recursive);
    results_ = root_ / "results";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }
  std::string read(const std::filesystem::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }

  // Runs evolve and checks the contract: exit 2, one line, mentions `file` and `what`, no results.
  void expect_refused(std::vector<std::string> extra, const std::string& file, const std::string& what) {
    std::vector<std::string> args = {"evolve", (root_ / "wl").string(), "--results", results_.string(), "--generations", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto o = run_braid(args);
    EXPECT_EQ(o.code, 2) << o.output;
    std::string out = o.output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    EXPECT_EQ(out.find('\n'), std::string::npos) << "expected one line, got:\n" << o.output;
    EXPECT_NE(o.output.find(file), std::string::npos) << o.output;
    EXPECT_NE(o.output.find(what), std::string::npos) << o.output;
    EXPECT_FALSE(std::filesystem::exists(results_)) << "results written despite bad input";
  }

  std::filesystem::path root_, results_;
};

TEST_F(BadInput, MalformedConfig) {
  write(root_ / "bad.yaml", "num_islands: [2\n");
  expect_refused({"-c", (root_ / "bad.yaml").string()}, "bad.yaml", "line");
}

TEST_F(BadInput, UnknownConfigKey) {
  write(root_ / "bad.yaml", "num_generatoins: 5\n");
  expect_refused({"-c", (root_ / "bad.yaml").string()}, "bad.yaml", "num_generatoins");
}

TEST_F(BadInput, WrongConfigType) {
  write(root_ / "bad.yaml", "max_parallel_jobs: many\n");
  expect_refused({"-c", (root_ / "bad.yaml").string()}, "bad.yaml", "max_parallel_jobs");
}

TEST_F(BadInput, MissingWorkload) {
  auto o = run_braid({"evolve", (root_ / "nowhere").string(), "--results", results_.string()});
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.output.find("nowhere"), std::string::npos) << o.output;
  EXPECT_FALSE(std::filesystem::exists(results_));
}

TEST_F(BadInput, SeedWithoutEvolveBlock) {
  std::string text = read(root_ / "wl" / "program.cpp");
  for (const std::string marker : {"EVOLVE-BLOCK-START", "EVOLVE-BLOCK-END"})
    for (auto p = text.find(marker); p != std::string::npos; p = text.find(marker)) text.replace(p, marker.size(), "PLAIN-COMMENT");
  write(root_ / "wl" / "program.cpp", text);
  expect_refused({}, "program.cpp", "EVOLVE-BLOCK");
}

TEST_F(BadInput, KnobValueOutsideItsDomain) {
  std::string text = read(root_ / "wl" / "program.cpp");
  auto p = text.find("kBM = 32;");
  ASSERT_NE(p, std::string::npos);
  text.replace(p, 9, "kBM = 33;");
  write(root_ / "wl" / "program.cpp", text);
  expect_refused({}, "program.cpp", "33");
}

TEST_F(BadInput, UnknownWorkloadKey) {
  std::string yaml = read(root_ / "wl" / "workload.yaml");
  write(root_ / "wl" / "workload.yaml", yaml + "colour: blue\n");
  expect_refused({}, "workload.yaml", "colour");
}

// --ranks is for GPU workloads; on one it is applied before the GPUs are counted.
TEST_F(BadInput, RanksOverride) {
  expect_refused({"--ranks", "4"}, "workload.yaml", "--ranks applies to workloads whose evaluator is kind gpu");
  const auto gag_results = root_ / "gag";
  // 4096 ranks: more GPUs than any machine here has, so the override shows in the refusal.
  auto o = run_braid({"evolve", "workloads/gemm_allgather", "--results", gag_results.string(), "--ranks", "4096"});
  EXPECT_EQ(o.code, 2) << o.output;
  EXPECT_NE(o.output.find("needs 4096 GPUs"), std::string::npos) << o.output;
  EXPECT_FALSE(std::filesystem::exists(gag_results / "evolution.db"));
  for (const char* bad : {"0", "-3"}) {
    auto r = run_braid({"evolve", "workloads/gemm_allgather", "--results", gag_results.string(), "--ranks", bad});
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("--ranks"), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(gag_results / "evolution.db"));
  }
}

// Every run's islands are checked against the machine, the knob mutator's too: a GPU workload
// whose every island needs GIN, on (faked) facts of a machine without an RDMA NIC.
TEST_F(BadInput, NoIslandBackendCanRunHere) {
  const auto wl = root_ / "gpu";
  std::filesystem::create_directories(wl);
  std::filesystem::copy_file(std::filesystem::path(BRAID_SOURCE_DIR) / "tests" / "slurm" / "fake_gpu" / "program.cu",
                             wl / "program.cu");
  write(wl / "workload.yaml",
        "name: g\nprogram: program.cu\nlanguage: cuda\nevaluator:\n  kind: gpu\n  ranks: 2\n  arch: sm_90\n"
        "task: Pick the knobs.\n");
  write(root_ / "hw.json", "{\"gpu_name\": \"NVIDIA H100\", \"gpu_count\": 2, \"nvlink_links\": 18}\n");
  write(root_ / "gin.yaml", "num_islands: 2\nisland_api_types: [gin, gin]\nhardware_facts: " + (root_ / "hw.json").string() + "\n");
  auto o = run_braid({"evolve", wl.string(), "--results", results_.string(), "--generations", "2", "--llm", "none", "-c",
                      (root_ / "gin.yaml").string()});
  EXPECT_EQ(o.code, 2) << o.output;
  std::string out = o.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  EXPECT_EQ(out.find('\n'), std::string::npos) << "expected one line, got:\n" << o.output;
  EXPECT_NE(o.output.find("gin.yaml"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("no island can run on this machine: island 0 (gin): GIN needs an RDMA NIC"), std::string::npos)
      << o.output;
  EXPECT_FALSE(std::filesystem::exists(results_)) << "results written despite bad input";
}

TEST_F(BadInput, ResumeOfAFolderWithoutARun) {
  std::filesystem::create_directories(results_);
  auto o = run_braid({"resume", results_.string()});
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.output.find("evolution.db"), std::string::npos) << o.output;
  EXPECT_TRUE(std::filesystem::is_empty(results_));
}

TEST(Cli, VersionAndHelp) {
  auto v = run_braid({"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.output.find("braid "), std::string::npos);
  auto h = run_braid({"--help"});
  EXPECT_EQ(h.code, 0);
  for (const char* cmd : {"evolve", "resume", "init", "top", "show", "export"}) EXPECT_NE(h.output.find(cmd), std::string::npos) << cmd;
}

TEST(Cli, ParseErrorsAreOneBraidLineWithExitCode2) {
  auto unknown = run_braid({"frobnicate"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.output.find("braid: unknown command 'frobnicate' (commands: "), std::string::npos) << unknown.output;
  EXPECT_NE(unknown.output.find("evolve"), std::string::npos) << unknown.output;
  auto missing = run_braid({"top"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.output.find("braid: "), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("braid top --help"), std::string::npos) << missing.output;
  auto h = run_braid({"--help"});
  EXPECT_NE(h.output.find("Exit codes: 0 done"), std::string::npos) << h.output;
}

TEST(Cli, OneFlagNameForTheResultsFolderAndForHowMany) {
  // -r/--results on every command that writes a run; -n/--top on every command that lists some.
  for (const char* cmd : {"evolve", "run"}) {
    auto h = run_braid({cmd, "--help"});
    EXPECT_NE(h.output.find("-r,"), std::string::npos) << cmd;
    EXPECT_NE(h.output.find("--results"), std::string::npos) << cmd << "\n" << h.output;
  }
  for (const char* cmd : {"top", "rebench", "report"}) {
    auto h = run_braid({cmd, "--help"});
    EXPECT_NE(h.output.find("-n,--top"), std::string::npos) << cmd << "\n" << h.output;
  }
}

TEST(Cli, InitCreatesAWorkloadThatEvolves) {
  auto dir = fresh_dir("init");
  auto o = run_braid({"init", (dir / "wl").string()});
  ASSERT_EQ(o.code, 0) << o.output;
  for (const char* f : {"workload.yaml", "program.cpp", "config.yaml", "README.md"}) EXPECT_TRUE(std::filesystem::exists(dir / "wl" / f)) << f;
  auto run = run_braid({"evolve", (dir / "wl").string(), "--results", (dir / "r").string(), "--generations", "3", "--seed", "2"});
  EXPECT_EQ(run.code, 0) << run.output;
  auto again = run_braid({"init", (dir / "wl").string()});
  EXPECT_EQ(again.code, 2);  // never overwrites
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace braid::test
