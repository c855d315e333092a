// L1 of the GPU cascade: nvcc with the workload's flags, through a content-addressed cache.
//
//   BuildInput{source, output, flags, includes, libs, arch} -> BuildResult{artifact | error}
//
// The command is: nvcc <arch gencode> <flags> -I<braid device headers> -I<NCCL headers>
// -I<includes> <source> -o <output> <libs> -L<NCCL> -lnccl -Xlinker -rpath,<NCCL's folder>.
// Builds of different candidates run in parallel, at most `max_parallel` at once (the CPUs);
// two builds of the same key wait for one another instead of compiling twice. Compiler errors
// are trimmed (diagnostics.hpp) to what the next mutation needs and stored in the cache.
#pragma once
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid/eval/compile_cache.hpp"
#include "braid/eval/evaluator.hpp"
#include "braid/platform/toolchain.hpp"

namespace braid {

struct BuildInput {
  std::filesystem::path source;                 // the candidate's file (e.g. work_dir/program.cu)
  std::filesystem::path output;                 // where the executable is placed
  std::string arch = "sm_90";                   // resolved: sm_90, sm_90a, ...
  std::vector<std::string> flags;               // compiler flags (optimisation, -std, -D...)
  std::vector<std::filesystem::path> includes;  // extra -I folders
  std::vector<std::string> libs;                // link arguments: -lcublas, -L..., paths
  bool link_nccl = true;
  double timeout_s = 300.0;
  std::string display_name;                     // how errors name the source ("program.cu")
  std::filesystem::path log_dir;                // build.stdout/.stderr go here when set
};

struct BuildResult {
  bool ok = false;
  bool timed_out = false;
  bool cached = false;                 // served from the cache, nvcc not run
  std::filesystem::path artifact;      // == BuildInput::output when ok
  std::string error;                   // trimmed compiler errors, or why nvcc did not run
  std::string cache_key;
  std::vector<std::string> command;
  double wall_s = 0.0;
};

// The default flags when a workload names none.
const std::vector<std::string>& default_nvcc_flags();

class NvccBuilder {
 public:
  NvccBuilder(CudaToolchain toolchain, std::filesystem::path cache_dir, int max_parallel = 0);

  // Thread-safe. Expected failures (compiler errors, timeout) are values.
  BuildResult build(const BuildInput& input, const JobObserver& jobs = {}, const std::string& what = "build");

  // The argv nvcc would run (without the cache lookup), for logs and tests.
  std::vector<std::string> command_for(const BuildInput& input, const std::filesystem::path& output) const;
  const CudaToolchain& toolchain() const { return toolchain_; }
  CompileCache& cache() { return cache_; }

 private:
  class Slot;
  CudaToolchain toolchain_;
  CompileCache cache_;
  int max_parallel_;
  std::filesystem::path nccl_link_dir_;  // holds libnccl.so (the library or a symlink to it)
  std::mutex mutex_;
  std::condition_variable slot_free_;
  int running_ = 0;
  std::map<std::string, std::shared_ptr<std::mutex>> key_locks_;
};

}  // namespace braid
