// The Slurm backend without a cluster: workload.yaml's `evaluator.slurm` section, the state
// classification and what braid hands to sbatch. The cluster tests are slurm_test.sh.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>

#include "braid/eval/slurm_config.hpp"
#include "braid/eval/slurm_evaluator.hpp"
#include "braid/eval/slurm_jobs.hpp"
#include "braid/eval/workload.hpp"
#include "braid/util/error.hpp"

namespace braid {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::string& yaml) {
  try {
    read_slurm_section(YAML::Load(yaml), "workload.yaml");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(SlurmConfig, DefaultsAndValues) {
  json s = read_slurm_section(YAML::Load("{partition: gpu, account: proj, qos: high, time: '00:10:00', ranks: 16, "
                                         "gpus_per_task: 1, gpus_per_node: 8, sbatch_args: ['--constraint=h100']}"),
                              "workload.yaml");
  SlurmConfig c = SlurmConfig::from_json(s);
  EXPECT_EQ(c.partition, "gpu");
  EXPECT_EQ(c.time, "00:10:00");
  EXPECT_EQ(c.ranks, 16);
  EXPECT_EQ(c.node_count(), 2);  // 16 ranks x 1 GPU over 8-GPU nodes
  EXPECT_EQ(c.max_requeues, 3);
  ASSERT_EQ(c.sbatch_args.size(), 1u);
  EXPECT_EQ(SlurmConfig::from_json(read_slurm_section(YAML::Load("{}"), "w")).node_count(), 0);
}

TEST(SlurmConfig, BadValuesNameTheKeyAndLine) {
  EXPECT_NE(error_of("{partion: gpu}").find("unknown key 'partion'"), std::string::npos);
  EXPECT_NE(error_of("{ranks: 0}").find("'ranks' must be a whole number from 1"), std::string::npos);
  EXPECT_NE(error_of("{time: 'ten minutes'}").find("'time' must be a Slurm time limit"), std::string::npos);
  EXPECT_NE(error_of("{partition: '--all'}").find("may not start with '-'"), std::string::npos);
  EXPECT_NE(error_of("{sbatch_args: ['--output=x']}").find("may not set --output"), std::string::npos);
  EXPECT_NE(error_of("{gpus_per_task: 4, gpus_per_node: 2}").find("more than 'gpus_per_node'"), std::string::npos);
  EXPECT_NE(error_of("{nodes: 3, ranks: 2}").find("every node needs a rank"), std::string::npos);
  EXPECT_NE(error_of("partition: gpu\nranks: x\n").find("line 2: evaluator.slurm: 'ranks'"), std::string::npos);
}

TEST(SlurmConfig, TimeForms) {
  for (const char* ok : {"5", "5:30", "01:00:00", "1-0", "1-12:00", "2-00:00:00"}) EXPECT_TRUE(is_slurm_time(ok)) << ok;
  for (const char* bad : {"", "0", "00:00", "1h", "-5", "1:2:3:4"}) EXPECT_FALSE(is_slurm_time(bad)) << bad;
}

TEST(SlurmStates, MapOntoWhatBraidDoes) {
  EXPECT_EQ(classify_slurm_state("PENDING"), SlurmOutcome::Waiting);
  EXPECT_EQ(classify_slurm_state("RUNNING"), SlurmOutcome::Waiting);
  EXPECT_EQ(classify_slurm_state("COMPLETING"), SlurmOutcome::Waiting);
  EXPECT_EQ(classify_slurm_state("COMPLETED"), SlurmOutcome::Ended);
  EXPECT_EQ(classify_slurm_state("FAILED"), SlurmOutcome::Ended);
  EXPECT_EQ(classify_slurm_state("TIMEOUT"), SlurmOutcome::TimedOut);
  EXPECT_EQ(classify_slurm_state("OUT_OF_MEMORY"), SlurmOutcome::OutOfMemory);
  for (const char* s : {"PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "CANCELLED", "DEADLINE"})
    EXPECT_EQ(classify_slurm_state(s), SlurmOutcome::Requeue) << s;
}

TEST(SlurmWorkload, SectionValidatedWithTheCascade) {
  fs::path dir = fs::temp_directory_path() / "braid_slurm_workload_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "program.cpp") << "int main() {}\n";
  std::ofstream(dir / "workload.yaml") << "name: t\nprogram: program.cpp\nevaluator:\n  kind: cascade\n"
                                          "  build: \"g++ {program} -o {artifact}\"\n  run: \"{artifact}\"\n"
                                          "  slurm:\n    ranks: 2\n    qos: 7days\n    bogus: 1\n";
  try {
    load_workload(dir);
    FAIL() << "an unknown slurm key was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("line 10: evaluator.slurm: unknown key 'bogus'"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "workload.yaml") << "name: t\nprogram: program.cpp\nevaluator:\n  kind: cascade\n"
                                          "  build: \"g++ {program} -o {artifact}\"\n  run: \"{artifact} --seed {seed}\"\n"
                                          "  run_timeout_s: 100\n  slurm:\n    ranks: 2\n    gpus_per_task: 1\n    gpus_per_node: 1\n";
  WorkloadSpec spec = load_workload(dir);
  EXPECT_EQ(spec.evaluator["slurm"]["ranks"], 2);
  if (!SlurmClient::available()) GTEST_SKIP() << "no sbatch on PATH: the evaluator itself is not built here";
  auto evaluator = make_evaluator(spec);
  auto* slurm = dynamic_cast<SlurmEvaluator*>(evaluator.get());
  ASSERT_NE(slurm, nullptr);
  EXPECT_EQ(slurm->time_limit(), "3");  // 100 s run + 1 min, in whole minutes
  auto args = slurm->sbatch_args("abc", "/shared/abc");
  for (const char* want : {"--ntasks=2", "--nodes=2", "--gpus-per-task=1", "--no-requeue", "--job-name=braid-abc", "--time=3"})
    EXPECT_NE(std::find(args.begin(), args.end(), want), args.end()) << want;
  std::string script = slurm->job_script("/shared/abc", "42");
  EXPECT_NE(script.find("srun --ntasks=2 --kill-on-bad-exit=1 --nodes=2 --gpus-per-task=1 --label"), std::string::npos) << script;
  EXPECT_NE(script.find("step run 100 '/shared/abc/program.out' '--seed' '42'"), std::string::npos) << script;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace braid
