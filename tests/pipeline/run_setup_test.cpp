// pipeline/run_setup: the islands' backends checked against the machine on every run (knob or
// LLM operator), on faked machine facts; the refusal through the binary is tests/cli/bad_input_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "braid/pipeline/run_setup.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

namespace fs = std::filesystem;

WorkloadSpec gpu_workload(int ranks) {
  WorkloadSpec spec;
  spec.evaluator = json{{"kind", "gpu"}, {"ranks", ranks}};
  return spec;
}

SearchConfig islands(std::vector<std::string> api_types) {
  SearchConfig cfg;
  cfg.num_islands = int(api_types.size());
  cfg.island_api_types = std::move(api_types);
  return cfg;
}

// A machine with two NVLinked GPUs; `rdma` says whether it has an RDMA NIC.
llm::HardwareFacts machine(bool rdma) {
  llm::HardwareFacts hw;
  hw.gpu_name = "NVIDIA H100";
  hw.gpu_count = 2;
  hw.nvlink_links = 18;
  if (rdma) hw.rdma_devices = {"mlx5_0"};
  return hw;
}

TEST(IslandBackends, MatterWhereRanksRunOnThisMachinesGpus) {
  EXPECT_TRUE(backends_run_here(gpu_workload(2)));
  EXPECT_FALSE(backends_run_here(gpu_workload(1)));  // one rank: "cuda", talks to no one
  WorkloadSpec cascade;
  cascade.evaluator = json{{"kind", "cascade"}};
  EXPECT_FALSE(backends_run_here(cascade));
  WorkloadSpec slurm = gpu_workload(2);
  slurm.evaluator["slurm"] = json::object();  // its jobs run on other nodes
  EXPECT_FALSE(backends_run_here(slurm));
}

TEST(IslandBackends, SomeUnrunnableAreNamedAndTheOthersRun) {
  const auto out = check_island_backends(islands({"lsa", "gin", "host"}), gpu_workload(2), "c.yaml", machine(false));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].island, 1);
  EXPECT_EQ(out[0].api_type, "gin");
  EXPECT_NE(out[0].why.find("RDMA"), std::string::npos) << out[0].why;
  EXPECT_TRUE(check_island_backends(islands({"lsa", "gin"}), gpu_workload(2), "c.yaml", machine(true)).empty());
}

TEST(IslandBackends, NoneRunnableIsOneLineOfBadInput) {
  try {
    check_island_backends(islands({"gin", "hybrid"}), gpu_workload(2), "c.yaml", machine(false));
    FAIL() << "no runnable island accepted";
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("c.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("no island can run on this machine"), std::string::npos) << what;
    EXPECT_NE(what.find("island 1 (hybrid)"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// Without island_api_types every island has the config's api_type (the LLM key, read on every run).
TEST(IslandBackends, TheConfigsApiTypeWithoutPerIslandTypes) {
  SearchConfig cfg;
  cfg.num_islands = 2;
  cfg.llm = json{{"api_type", "gin"}};
  EXPECT_THROW(check_island_backends(cfg, gpu_workload(2), "c.yaml", machine(false)), UserError);
  cfg.llm = json{{"api_type", "lsa"}};
  EXPECT_TRUE(check_island_backends(cfg, gpu_workload(2), "c.yaml", machine(false)).empty());
  llm::HardwareFacts no_nvlink = machine(true);
  no_nvlink.nvlink_links = 0;
  EXPECT_EQ(check_island_backends(islands({"lsa", "gin"}), gpu_workload(2), "c.yaml", no_nvlink).size(), 1u);
}

// The knob mutator's run is checked too, before anything is written: the facts from a file.
TEST(IslandBackends, PrepareRunRefusesAKnobRunNoIslandOfWhichCanRun) {
  const fs::path dir = fs::temp_directory_path() / ("braid_run_setup_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_file_atomic(
      dir / "program.cu",
      "// EVOLVE-BLOCK-START knobs\nconstexpr int kTile = 16;  // braid:knob 8|16|32\n// EVOLVE-BLOCK-END\n");
  write_file_atomic(dir / "hw.json", machine(false).to_json().dump());
  WorkloadSpec spec = gpu_workload(2);
  spec.dir = dir;
  spec.program = dir / "program.cu";
  SearchConfig cfg = islands({"gin", "gin"});
  cfg.llm = json{{"hardware_facts", (dir / "hw.json").string()}};
  EvolveRequest req;
  req.llm = "none";
  try {
    prepare_run(req, spec, cfg);
    FAIL() << "a run with no runnable island was prepared";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("no island can run on this machine: island 0 (gin)"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace braid
