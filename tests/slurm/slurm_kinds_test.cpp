// The Slurm backend's evaluator kinds without a cluster: the job script and sbatch arguments an
// external and a GPU workload get, the sections they refuse, and how a finished job's files are
// judged (the same verdicts as the local evaluators). The cluster tests are slurm_test.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "braid/eval/slurm_evaluator.hpp"
#include "braid/eval/slurm_jobs.hpp"
#include "braid/eval/workload.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/error.hpp"

namespace braid {
namespace {

namespace fs = std::filesystem;

class SlurmKinds : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("braid_slurm_kinds_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "program.cpp") << "int main() {}\n";
    std::ofstream(dir_ / "program.cu") << "int main() {}\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write_yaml(const std::string& text) { std::ofstream(dir_ / "workload.yaml") << text; }

  std::string load_error(const std::string& text) {
    write_yaml(text);
    try {
      load_workload(dir_);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  }

  // The evaluator of workload.yaml, or null (the test skipped) where its tools are missing here.
  std::unique_ptr<Evaluator> slurm_evaluator(const std::string& text, bool needs_nvcc) {
    write_yaml(text);
    WorkloadSpec spec = load_workload(dir_);
    if (!SlurmClient::available()) return nullptr;
    if (needs_nvcc && !find_cuda_toolchain()) return nullptr;
    return make_evaluator(spec);
  }

  static bool has(const std::vector<std::string>& args, const std::string& want) {
    return std::find(args.begin(), args.end(), want) != args.end();
  }

  // A finished job's files: <name>.exit and what else the test writes.
  void file(const fs::path& path, const std::string& text) {
    fs::create_directories((job_ / path).parent_path());
    std::ofstream(job_ / path) << text;
  }

  fs::path dir_;
  fs::path job_ = fs::temp_directory_path() / "braid_slurm_kinds_job";
};

const char* kGpuYaml =
    "name: g\nprogram: program.cu\nevaluator:\n  kind: gpu\n  ranks: 4\n  gpus_per_rank: 2\n  arch: sm_90\n"
    "  args: \"--size 4096\"\n  bench_args: \"--iters 5\"\n  run_timeout_s: 60\n  bench_timeout_s: 120\n"
    "  launcher_args: [\"--mpi=pmix\"]\n  env: {NCCL_NVLS_ENABLE: \"0\"}\n"
    "  slurm:\n    partition: gpu\n    gpus_per_node: 4\n";

TEST_F(SlurmKinds, GpuWorkloadJobAsksForItsRanksAndGpus) {
  auto evaluator = slurm_evaluator(kGpuYaml, true);
  if (!evaluator) GTEST_SKIP() << "no sbatch or no nvcc here";
  auto* slurm = dynamic_cast<SlurmEvaluator*>(evaluator.get());
  ASSERT_NE(slurm, nullptr);
  EXPECT_EQ(slurm->time_limit(), "4");  // 60 + 120 s + 1 min, in whole minutes
  auto args = slurm->sbatch_args("abc", "/shared/abc");
  // 4 ranks x 2 GPUs over 4-GPU nodes: 2 nodes.
  for (const char* want :
       {"--ntasks=4", "--gpus-per-task=2", "--nodes=2", "--partition=gpu", "--time=4", "--no-requeue"})
    EXPECT_TRUE(has(args, want)) << want;

  const std::string script = slurm->job_script("/shared/abc", "42");
  // Every rank runs the harness under srun, its output per rank where the local launch keeps it.
  EXPECT_NE(
      script.find(
          "srun --ntasks=4 --kill-on-bad-exit=1 --nodes=2 --gpus-per-task=2 '--mpi=pmix' "
          "--output=\"logs/$name/rank%t.stdout\" --error=\"logs/$name/rank%t.stderr\" timeout -k 2 \"$limit\" \"$@\" "
          "2> \"logs/$name/srun.stderr\""),
      std::string::npos)
      << script;
  EXPECT_NE(script.find("rank_step verify 60 '/shared/abc/program.out' '--mode' 'verify' '--seed' '42' '--results_dir' "
                        "'/shared/abc/results' '--size' '4096'\nrc=$?\n"),
            std::string::npos)
      << script;
  // The bench runs only after a passed verify, with the bench arguments.
  EXPECT_NE(script.find(
                "then\n  rank_step bench 120 '/shared/abc/program.out' '--mode' 'bench' '--seed' '42' '--results_dir' "
                "'/shared/abc/results' '--size' '4096' '--iters' '5'\nfi\n"),
            std::string::npos)
      << script;
  for (const char* want :
       {"export BRAID_EVAL_DIR='/shared/abc'", "export BRAID_METRICS_PATH='/shared/abc/results/metrics.json'",
        "export BRAID_SEED='42'", "export NCCL_NVLS_ENABLE='0'", "BRAID_RUN_ID=\"slurm-$SLURM_JOB_ID-$name\""})
    EXPECT_NE(script.find(want), std::string::npos) << want;
  EXPECT_EQ(script.find("\nstep() {"), std::string::npos) << "no single-log steps in a GPU job";
  EXPECT_EQ(script.find("--label"), std::string::npos) << script;
}

TEST_F(SlurmKinds, GpuVerifyInBenchIsOneUngatedStep) {
  std::string yaml = kGpuYaml;
  yaml.replace(yaml.find("  slurm:"), 0, "  verify_in_bench: true\n");
  auto evaluator = slurm_evaluator(yaml, true);
  if (!evaluator) GTEST_SKIP() << "no sbatch or no nvcc here";
  auto* slurm = dynamic_cast<SlurmEvaluator*>(evaluator.get());
  const std::string script = slurm->job_script("/shared/abc", "7");
  EXPECT_EQ(script.find("rank_step verify"), std::string::npos) << script;
  EXPECT_NE(script.find("\nrank_step bench 120 '/shared/abc/program.out' '--mode' 'bench'"), std::string::npos)
      << script;
  EXPECT_EQ(script.find("if [ $rc -eq 0 ]"), std::string::npos) << script;
  EXPECT_EQ(slurm->time_limit(), "3");
}

TEST_F(SlurmKinds, GpuSectionRefusesWhatTheEvaluatorOwns) {
  const std::string head = "name: g\nprogram: program.cu\nevaluator:\n  kind: gpu\n  ranks: 2\n";
  EXPECT_NE(load_error(head + "  slurm:\n    ranks: 4\n").find("'ranks' is the evaluator's own with kind gpu"),
            std::string::npos);
  EXPECT_NE(load_error(head + "  slurm:\n    gpus_per_task: 2\n").find("'gpus_per_task' is the evaluator's own"),
            std::string::npos);
  EXPECT_NE(
      load_error(head + "  launcher: mpirun\n  slurm:\n    partition: gpu\n").find("does not go with a slurm section"),
      std::string::npos);
  EXPECT_NE(load_error(head + "  slurm:\n    nodes: 3\n").find("'nodes' (3) is more than the evaluator's ranks (2)"),
            std::string::npos);
  EXPECT_NE(load_error(head + "  gpus_per_rank: 4\n  slurm:\n    gpus_per_node: 2\n")
                .find("less than the evaluator's gpus_per_rank"),
            std::string::npos);
  EXPECT_NE(load_error(head + "  slurm:\n    partition: gpu\nprofile:\n  top_k: 2\n")
                .find("'profile' does not go with evaluator.slurm"),
            std::string::npos);
  write_yaml(head + "  gpus_per_rank: 2\n  slurm:\n    partition: gpu\n");
  WorkloadSpec spec = load_workload(dir_);
  EXPECT_EQ(spec.evaluator["slurm"]["ranks"], 2);
  EXPECT_EQ(spec.evaluator["slurm"]["gpus_per_task"], 2);
}

TEST_F(SlurmKinds, ExternalWorkloadRunsItsCommandOnceInTheWorkload) {
  const std::string yaml =
      "name: e\nprogram: program.cpp\nevaluator:\n  kind: external\n  command: \"python3 eval.py --fast\"\n  "
      "timeout_s: 150\n"
      "  slurm:\n    ranks: 2\n    gpus_per_task: 1\n";
  auto evaluator = slurm_evaluator(yaml, false);
  if (!evaluator) GTEST_SKIP() << "no sbatch here";
  auto* slurm = dynamic_cast<SlurmEvaluator*>(evaluator.get());
  ASSERT_NE(slurm, nullptr);
  EXPECT_EQ(slurm->time_limit(), "4");  // 150 s + 1 min
  auto args = slurm->sbatch_args("abc", "/shared/abc");
  for (const char* want : {"--ntasks=2", "--gpus-per-task=1", "--time=4"}) EXPECT_TRUE(has(args, want)) << want;
  const std::string script = slurm->job_script("/shared/abc", "3");
  // Once, in the workload folder, with the contract's two arguments; it may srun within the allocation.
  EXPECT_NE(script.find("\nonce external 150 '" + fs::absolute(dir_).lexically_normal().string() +
                        "' 'python3' 'eval.py' '--fast' '--program_path' '/shared/abc/program.cpp' '--results_dir' "
                        "'/shared/abc/results'\n"),
            std::string::npos)
      << script;
  EXPECT_EQ(script.find("srun"), std::string::npos) << script;
  EXPECT_NE(load_error("name: e\nprogram: program.cpp\nevaluator:\n  kind: external\n  command: x\n  verdict: channel\n"
                       "  slurm:\n    ranks: 1\n")
                .find("verdict 'channel' does not go with a slurm section"),
            std::string::npos);
}

TEST_F(SlurmKinds, GpuJobFilesJudgedLikeTheLocalLaunch) {
  auto evaluator = slurm_evaluator(kGpuYaml, true);
  if (!evaluator) GTEST_SKIP() << "no sbatch or no nvcc here";
  const SlurmJobKind& kind = dynamic_cast<SlurmEvaluator*>(evaluator.get())->kind();
  auto judged = [&]() {
    EvalResult r;
    kind.read_steps(job_, "slurm job 17", r);
    fs::remove_all(job_);
    return r;
  };

  // Verified and benchmarked: the bench's metrics.
  file("verify.exit", "0 10.0 11.5\n");
  file("verify/correct.json", R"({"correct": true})");
  file("bench.exit", "0 11.5 14.0\n");
  file("results/correct.json", R"({"correct": true})");
  file("results/metrics.json", R"({"combined_score": 2.5, "public": {"time_us": 40}})");
  EvalResult ok = judged();
  EXPECT_EQ(ok.failure, FailureKind::Ok) << ok.error_text;
  EXPECT_TRUE(ok.correct);
  EXPECT_DOUBLE_EQ(ok.combined_score, 2.5);
  EXPECT_EQ(ok.level_reached, 3);

  // A rank's wrong answer is the harness's verify_failed.
  file("verify.exit", "1 10 11\n");
  file("verify/correct.json", R"({"correct": false, "error": "rank 1: C[7] expected 1 got 2"})");
  file("logs/verify/srun.stderr", "srun: error: node1: task 1: Exited with exit code 1\n");
  EvalResult wrong = judged();
  EXPECT_EQ(wrong.failure, FailureKind::VerifyFailed);
  EXPECT_NE(wrong.error_text.find("rank 1: C[7] expected 1 got 2"), std::string::npos) << wrong.error_text;

  // A rank killed by a signal: run_failed naming the rank, from srun's messages.
  file("verify.exit", "139 10 11\n");
  file("logs/verify/srun.stderr", "srun: error: node1: task 3: Segmentation fault\n");
  file("logs/verify/rank3.stderr", "about to crash\n");
  EvalResult crash = judged();
  EXPECT_EQ(crash.failure, FailureKind::RunFailed);
  EXPECT_NE(crash.error_text.find("rank 3"), std::string::npos) << crash.error_text;
  EXPECT_NE(crash.error_text.find("SIGSEGV"), std::string::npos) << crash.error_text;
  EXPECT_NE(crash.error_text.find("slurm job 17"), std::string::npos) << crash.error_text;

  // The harness caught a NCCL error on rank 0 (and wrote no verdict).
  file("verify.exit", "1 10 11\n");
  file("logs/verify/srun.stderr", "srun: error: node1: task 0: Exited with exit code 1\n");
  file("logs/verify/rank0.stderr", "harness: NCCL error: unhandled system error\n");
  EvalResult nccl = judged();
  EXPECT_EQ(nccl.failure, FailureKind::RunFailed);
  EXPECT_NE(nccl.error_text.find("harness: NCCL error"), std::string::npos) << nccl.error_text;

  // The step's time limit (timeout(1) inside each task).
  file("verify.exit", "124 10 70\n");
  file("logs/verify/srun.stderr", "srun: error: node1: task 2: Exited with exit code 124\n");
  EvalResult hung = judged();
  EXPECT_EQ(hung.failure, FailureKind::Timeout);
  EXPECT_NE(hung.error_text.find("rank 2"), std::string::npos) << hung.error_text;

  // Verified, then the bench crashed: bench_failed at level 3.
  file("verify.exit", "0 10 11\n");
  file("verify/correct.json", R"({"correct": true})");
  file("bench.exit", "134 11 12\n");
  file("logs/bench/srun.stderr", "srun: error: node2: task 1: Aborted\n");
  EvalResult bench = judged();
  EXPECT_EQ(bench.failure, FailureKind::BenchFailed);
  EXPECT_EQ(bench.level_reached, 3);
  EXPECT_NE(bench.error_text.find("rank 1"), std::string::npos) << bench.error_text;

  // Slurm ended the script before the verify step said how it ended.
  file("slurm.out", "slurmstepd: error: something\n");
  EvalResult lost = judged();
  EXPECT_EQ(lost.failure, FailureKind::RunFailed);
  EXPECT_NE(lost.error_text.find("the verify step did not report its end"), std::string::npos) << lost.error_text;
}

TEST_F(SlurmKinds, ExternalJobFilesJudgedLikeTheLocalEvaluator) {
  auto evaluator = slurm_evaluator(
      "name: e\nprogram: program.cpp\nevaluator:\n  kind: external\n  command: \"python3 eval.py\"\n  timeout_s: 30\n  "
      "slurm:\n    ranks: 1\n",
      false);
  if (!evaluator) GTEST_SKIP() << "no sbatch here";
  const SlurmJobKind& kind = dynamic_cast<SlurmEvaluator*>(evaluator.get())->kind();
  auto judged = [&]() {
    EvalResult r;
    kind.read_steps(job_, "slurm job 9", r);
    fs::remove_all(job_);
    return r;
  };
  file("external.exit", "0 1 2\n");
  file("results/correct.json", R"({"correct": true})");
  file("results/metrics.json", R"({"combined_score": 1.25})");
  EvalResult ok = judged();
  EXPECT_EQ(ok.failure, FailureKind::Ok) << ok.error_text;
  EXPECT_EQ(ok.level_reached, 3);
  EXPECT_DOUBLE_EQ(ok.combined_score, 1.25);

  // The evaluator names the stage that failed, in braid's words.
  file("external.exit", "0 1 2\n");
  file("results/correct.json", R"({"correct": false, "error": "program.cpp:3: error: x", "failure": "build_failed"})");
  file("results/metrics.json", R"({"combined_score": 0})");
  EvalResult build = judged();
  EXPECT_EQ(build.failure, FailureKind::BuildFailed);
  EXPECT_EQ(build.level_reached, 1);

  file("external.exit", "124 1 31\n");
  EXPECT_EQ(judged().failure, FailureKind::Timeout);

  // No verdict at all: run_failed with how the evaluator ended and what it said.
  file("external.exit", "2 1 2\n");
  file("logs/external.stderr", "Traceback: no module named torch\n");
  EvalResult crashed = judged();
  EXPECT_EQ(crashed.failure, FailureKind::RunFailed);
  EXPECT_NE(crashed.error_text.find("external: exit code 2 (slurm job 9)"), std::string::npos) << crashed.error_text;
  EXPECT_NE(crashed.error_text.find("no module named torch"), std::string::npos) << crashed.error_text;
}

}  // namespace
}  // namespace braid
