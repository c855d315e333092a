// GPU health probe: after a killed or crashed run, before its GPUs are used again, a kernel on
// each GPU and an all-reduce across them (one rank per GPU, 2 ranks for a pair) must pass within
// the time limit (30 s); otherwise the caller quarantines those GPUs. GPUs are never reset.
// The probe is a small CUDA program (built once through the NvccBuilder's cache) that uses the
// device library's own bootstrap (braid/runtime.cuh), launched by the local launcher.
#pragma once
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid/eval/evaluator.hpp"
#include "braid/eval/nvcc_builder.hpp"

namespace braid {

struct ProbeOutcome {
  bool healthy = false;
  std::string detail;  // why not, or "ok"
  double wall_s = 0.0;
};

// The probe's source (for the builder and for tests).
const std::string& gpu_probe_source();

class GpuHealthProbe {
 public:
  GpuHealthProbe(std::shared_ptr<NvccBuilder> builder, std::filesystem::path work_dir, std::string arch,
                 double timeout_s = 30.0, double build_timeout_s = 300.0);
  // Thread-safe; probes run one at a time per probe object's folder.
  ProbeOutcome check(const std::vector<int>& gpus, const JobObserver& jobs = {});
  // Builds the probe (cached), so that a later check spends its time limit on the GPUs only.
  BuildResult build(const JobObserver& jobs = {});

 private:
  std::shared_ptr<NvccBuilder> builder_;
  std::filesystem::path work_dir_;
  std::string arch_;
  double timeout_s_;
  double build_timeout_s_;
  std::mutex mutex_;
  std::mutex build_mutex_;
  int sequence_ = 0;
};

}  // namespace braid
