// The pieces of `braid run` as plain values (pipeline/): the workload folder it writes for a
// converted seed, the user's build flags, and the resumable state of its steps. The whole flow
// through the binary is tests/cli/run_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "braid/pipeline/pipeline.hpp"
#include "braid/pipeline/pipeline_state.hpp"
#include "braid/pipeline/seed_workload.hpp"
#include "braid/pipeline/user_flags.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

namespace fs = std::filesystem;

struct TempFolder {
  fs::path dir;
  TempFolder() {
    static int n = 0;
    dir = fs::temp_directory_path() / ("braid_pipeline_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir);
  }
  ~TempFolder() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// A written file as YAML (its leading "# ..." comment is a YAML comment).
YAML::Node yaml_of(const std::string& text) { return YAML::Load(text); }

TEST(SeedWorkload, GeneratedForAProgramWithoutItsOwnWorkload) {
  TempFolder t;
  SeedWorkloadInput in;
  in.input = t.dir / "ring.cu";
  in.source = "int main() { cublasCreate(0); }";
  in.ranks = 4;
  in.uses_harness = true;
  in.flags.includes = {"/opt/inc"};
  in.flags.libs = {"-lfoo"};
  in.gate_status = "unverified";
  const SeedWorkloadFiles f = seed_workload_files(in);
  EXPECT_NE(f.workload_yaml.find("(generated)"), std::string::npos) << f.workload_yaml;
  const YAML::Node w = yaml_of(f.workload_yaml);
  EXPECT_EQ(w["name"].as<std::string>(), "ring");
  EXPECT_EQ(w["program"].as<std::string>(), "gen0.cu");
  EXPECT_EQ(w["evaluator"]["kind"].as<std::string>(), "gpu");
  EXPECT_EQ(w["evaluator"]["ranks"].as<int>(), 4);
  EXPECT_EQ(w["evaluator"]["args"].as<std::string>(), "--size 4096");
  ASSERT_EQ(w["evaluator"]["includes"].size(), 2u);  // the seed's folder, then -I
  EXPECT_EQ(w["evaluator"]["includes"][1].as<std::string>(), "/opt/inc");
  ASSERT_EQ(w["evaluator"]["libs"].size(), 2u);  // cuBLAS (the program uses it), then -l
  EXPECT_EQ(w["evaluator"]["libs"][0].as<std::string>(), "-lcublas");
  const YAML::Node c = yaml_of(f.config_yaml);
  EXPECT_EQ(c["num_generations"].as<int>(), 20);
  EXPECT_EQ(c["num_islands"].as<int>(), 2);
  EXPECT_NE(f.readme.find("Gate: unverified."), std::string::npos) << f.readme;
}

TEST(SeedWorkload, TheSeedFoldersOwnGpuWorkloadAndConfigAreKept) {
  TempFolder t;
  write_file_atomic(t.dir / "workload.yaml",
                    "name: mine\ntask: be quick\nevaluator:\n  kind: gpu\n  ranks: 8\n  includes: [sub/, /abs]\n");
  write_file_atomic(t.dir / "config.yaml", "num_generations: 7\n");
  SeedWorkloadInput in;
  in.input = t.dir / "seed.cu";
  in.ranks = 2;
  const SeedWorkloadFiles f = seed_workload_files(in);
  const YAML::Node w = yaml_of(f.workload_yaml);
  EXPECT_EQ(w["name"].as<std::string>(), "seed");
  EXPECT_EQ(w["task"].as<std::string>(), "be quick");
  EXPECT_EQ(w["evaluator"]["ranks"].as<int>(), 2);  // the run's ranks win
  ASSERT_EQ(w["evaluator"]["includes"].size(), 3u);
  EXPECT_EQ(w["evaluator"]["includes"][1].as<std::string>(), (fs::absolute(t.dir) / "sub").lexically_normal().string());
  EXPECT_EQ(w["evaluator"]["includes"][2].as<std::string>(), "/abs");
  const YAML::Node c = yaml_of(f.config_yaml);
  EXPECT_EQ(c["num_generations"].as<int>(), 7);
  EXPECT_EQ(c["max_parallel_jobs"].as<int>(), 1);
}

TEST(UserFlags, FoldersBecomeAbsoluteAndFlagsSplit) {
  UserFlags u;
  u.includes = {"inc"};
  u.defines = {"N=4"};
  u.lib_dirs = {"lib"};
  u.lib_names = {"m"};
  u.nvcc_flags = "-Xcompiler '-O3 -g'";
  const convert::BuildFlags b = to_build_flags(u);
  ASSERT_EQ(b.includes.size(), 1u);
  EXPECT_EQ(b.includes[0], fs::absolute("inc").string());
  EXPECT_EQ(b.defines, std::vector<std::string>{"N=4"});
  EXPECT_EQ(b.libs, (std::vector<std::string>{"-L" + fs::absolute("lib").string(), "-lm"}));
  EXPECT_EQ(b.extra, (std::vector<std::string>{"-Xcompiler", "-O3 -g"}));
}

// A program split over several files (`braid convert jacobi.cpp jacobi_kernels.cu`): the others
// are linked with it wherever it is linked (first among the link arguments, by absolute path); a
// missing one stops braid with its name.
TEST(UserFlags, OtherSourcesOfTheProgramAreLinkedWithIt) {
  TempFolder t;
  write_file_atomic(t.dir / "kernels.cu", "__global__ void k() {}\n");
  UserFlags u;
  u.sources = {(t.dir / "kernels.cu").string()};
  u.lib_names = {"m"};
  const convert::BuildFlags b = to_build_flags(u);
  EXPECT_EQ(b.libs, (std::vector<std::string>{fs::absolute(t.dir / "kernels.cu").lexically_normal().string(), "-lm"}));
  u.sources = {(t.dir / "missing.cu").string()};
  try {
    to_build_flags(u);
    FAIL() << "no error for a missing source";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.cu: no such file"), std::string::npos) << e.what();
  }
}

TEST(PipelineState, AStepIsDoneWhileItsOutputsKeepTheirHashesAndReopeningDropsLaterSteps) {
  TempFolder t;
  EXPECT_FALSE(is_pipeline_run(t.dir));
  PipelineState s(t.dir);
  EXPECT_FALSE(s.exists());
  write_file_atomic(t.dir / "a.txt", "one");
  s.finish("convert", {"a.txt"}, {{"method", "rules"}});
  s.finish("gate", {});
  EXPECT_TRUE(is_pipeline_run(t.dir));
  PipelineState again(t.dir);
  EXPECT_TRUE(again.done("convert"));
  EXPECT_EQ(again.info("convert").value("method", ""), "rules");
  write_file_atomic(t.dir / "a.txt", "changed");
  EXPECT_FALSE(again.done("convert"));
  EXPECT_TRUE(again.done("gate"));
  again.reopen_from("convert");
  EXPECT_FALSE(PipelineState(t.dir).done("gate"));
}

TEST(PipelineState, StoredOptionsComeBackForAContinuation) {
  TempFolder t;
  PipelineState s(t.dir);
  s.root()["input"] = "/x/seed.cu";
  s.root()["options"] = {{"ranks", 4},         {"gate", false},      {"build", true},           {"llm", "m"},
                         {"includes", {"/i"}}, {"nvcc_flags", "-g"}, {"gate_timeout_s", 300.0}, {"keep_headers", true}};
  s.save();
  const PipelineOptions o = stored_pipeline_options(t.dir);
  EXPECT_EQ(o.input, "/x/seed.cu");
  EXPECT_EQ(o.results, t.dir);
  EXPECT_EQ(o.ranks, 4);
  EXPECT_DOUBLE_EQ(o.gate_timeout_s, 300.0);
  EXPECT_TRUE(o.no_gate);
  EXPECT_FALSE(o.no_build);
  EXPECT_EQ(o.llm, "m");
  EXPECT_EQ(o.flags.includes, std::vector<std::string>{"/i"});
  EXPECT_EQ(o.flags.nvcc_flags, "-g");
  EXPECT_TRUE(o.flags.keep_headers);  // read again as the run read it
}

}  // namespace
}  // namespace braid
