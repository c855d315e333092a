// workload.yaml's `evaluator: {kind: external, command: "python3 evaluate.py", timeout_s: 120}`:
// runs `<command> --program_path P --results_dir D` in the workload folder and reads
// D/correct.json and D/metrics.json (the CUCo/ShinkaEvolve contract), so an existing
// evaluate.py works unchanged.
//
// Classification: timeout -> timeout; correct=false -> verify_failed, unless correct.json
// also carries a braid failure kind in "failure" (e.g. "build_failed"), which is then used;
// no usable metrics -> run_failed (with the exit status and stderr tail).
// The evaluator runs in the candidate sandbox (it runs the candidate). It may send the verdict
// through the verdict channel (verdict_channel.hpp), relaying its harness's record; otherwise
// the files are read and the result is marked unverified-channel.
#pragma once
#include <filesystem>
#include <map>
#include <string>

#include "braid/eval/evaluator.hpp"
#include "braid/eval/work_folder.hpp"
#include "braid/util/json.hpp"

namespace braid {

struct ExternalConfig {
  std::filesystem::path workload_dir;
  std::string program_filename = "program.cpp";
  std::string command;  // split into words; the same placeholders as the cascade may appear
  double timeout_s = 300.0;
  std::map<std::string, std::string> env;
  std::size_t memory_limit_mb = 0;  // RLIMIT_AS of the evaluator's processes (workload.yaml); 0: none
  SandboxSettings sandbox;
  std::string verdict = "auto";  // channel: a record through BRAID_RESULT_FD is required

  static ExternalConfig from_json(const json& section, const std::filesystem::path& workload_dir,
                                  const std::string& program_filename);
};

// The external evaluator's verdict in `results` (correct.json, metrics.json) into `result`:
// true when it is usable (correct, or a failure the evaluator reported, in braid's failure
// kind when correct.json names one); false when the files are missing or malformed (the
// failure is then run_failed). Shared by the local run and a Slurm job (slurm_kinds.hpp).
bool read_external_verdict(const std::filesystem::path& results, EvalResult& result);

class ExternalEvaluator : public Evaluator {
 public:
  explicit ExternalEvaluator(ExternalConfig config);
  EvalResult evaluate(const EvalRequest& request, const JobObserver& jobs) override;
  std::string describe() const override;

 private:
  ExternalConfig config_;
};

}  // namespace braid
