// The built-in cascade of workload.yaml's `evaluator: {kind: cascade, ...}`:
//   L1 build  -> build_failed (trimmed compiler errors) or timeout
//   L2 run    -> the program verifies itself and sends its verdict through the verdict
//                channel (verdict_channel.hpp); crash -> run_failed, timeout -> timeout,
//                correct=false or a record that fails braid's checks -> verify_failed
//   L3 bench  -> the same with metrics (combined_score); failure -> bench_failed
//                (verify_failed if it reports a wrong result)
// Metrics never come from stdout, nor from files a candidate drops: braid writes
// results/correct.json and metrics.json from the channel's record. A workload whose harness
// predates the channel (`verdict: files`) is read from those files, marked unverified-channel.
// Every step runs in the candidate sandbox (util/sandbox.hpp; workload keys sandbox,
// memory_limit_mb, max_processes, network); the level in force is stored with the result.
// Commands are split into words (no shell) and run in the work folder below, with
// BRAID_WORK_DIR, BRAID_RESULTS_DIR, BRAID_WORKLOAD_DIR and BRAID_SEED set; files of the
// workload are named through {workload_dir}.
//
// Work folder of one evaluation (EvalRequest::work_dir):
//   <program file>   the candidate (the workload's program file name, e.g. program.cpp)
//   <stem>.out       {artifact}
//   results/         {results_dir}: correct.json, metrics.json (braid writes correct.json with
//                    "failure" itself when the program could not)
//   logs/            build|run|bench .stdout/.stderr, capped (run.worker, bench.worker beside a driver)
//
// Driver and worker (docs/sandbox.md): with `driver_build` (a command writing {driver}) and
// `worker`, braid builds the workload's driver once (eval/driver_build.hpp) and every run and
// bench step starts two processes, each in its own sandbox, joined by a socket: the command
// (naming {driver}) holds the verdict channel and times and verifies; the worker (naming
// {artifact}) runs the candidate and holds nothing else. A worker that crashes or ends without
// answering is run_failed (bench_failed), one that hangs a timeout, a wrong or early answer
// verify_failed.
#pragma once
#include <filesystem>
#include <map>
#include <mutex>
#include <string>

#include "braid/eval/evaluator.hpp"
#include "braid/eval/verdict_channel.hpp"
#include "braid/eval/work_folder.hpp"
#include "braid/util/json.hpp"

namespace braid {

struct CascadeConfig {
  std::filesystem::path workload_dir;
  std::string program_filename = "program.cpp";
  std::string build;         // command templates with {program} {artifact} {work_dir} {workload_dir}
  std::string run;           // {seed} {results_dir}; bench may be empty (then run must write
  std::string bench;         // metrics.json itself)
  std::string driver_build;  // "" or the driver's build, writing {driver} (from {workload_dir})
  std::string worker;        // with driver_build: the candidate's process beside the driver
  double build_timeout_s = 60.0;
  double run_timeout_s = 30.0;
  double bench_timeout_s = 60.0;
  std::map<std::string, std::string> env;  // added to every command's environment
  std::size_t memory_limit_mb = 0;         // RLIMIT_AS of every command (workload.yaml); 0: none
  SandboxSettings sandbox;
  VerdictSource verdict = VerdictSource::Files;
  std::string harness_text;  // the workload's program, for channel_tampering

  // From a validated evaluator section (see load_workload).
  static CascadeConfig from_json(const json& section, const std::filesystem::path& workload_dir,
                                 const std::string& program_filename);
};

class CascadeEvaluator : public Evaluator {
 public:
  explicit CascadeEvaluator(CascadeConfig config);
  EvalResult evaluate(const EvalRequest& request, const JobObserver& jobs) override;
  std::string describe() const override;
  const CascadeConfig& config() const { return config_; }

 private:
  // The workload's driver, built on the first evaluation; "" and the error when it did not.
  std::pair<std::filesystem::path, std::string> driver();
  CascadeConfig config_;
  std::mutex driver_mutex_;
  std::filesystem::path driver_;
};

}  // namespace braid
