#include "braid/eval/nvcc_builder.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "braid/eval/diagnostics.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {

const std::vector<std::string>& default_nvcc_flags() {
  static const std::vector<std::string> flags = {"-O3", "-std=c++20", "--expt-relaxed-constexpr", "-lineinfo"};
  return flags;
}

NvccBuilder::NvccBuilder(CudaToolchain toolchain, std::filesystem::path cache_dir, int max_parallel)
    : toolchain_(std::move(toolchain)), cache_(std::move(cache_dir)),
      max_parallel_(max_parallel > 0 ? max_parallel : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {
  if (!toolchain_.nccl) return;
  nccl_link_dir_ = toolchain_.nccl->library.parent_path();
  if (toolchain_.nccl->library.filename() != "libnccl.so") {
    // A wheel holds only libnccl.so.2, which neither -lnccl finds nor nvcc accepts as an input
    // file: link through a libnccl.so symlink kept in the cache (the binary records the soname).
    nccl_link_dir_ = cache_.dir() / ("nccl_link_" + hash_hex(toolchain_.nccl->library.string()));
    std::filesystem::create_directories(nccl_link_dir_);
    const auto link = nccl_link_dir_ / "libnccl.so";
    std::error_code ec;
    if (std::filesystem::read_symlink(link, ec) != toolchain_.nccl->library) {
      std::filesystem::remove(link, ec);
      std::filesystem::create_symlink(toolchain_.nccl->library, link, ec);
      if (ec && !std::filesystem::exists(link)) throw SystemError("cannot link " + link.string() + ": " + ec.message());
    }
  }
}

std::vector<std::string> NvccBuilder::command_for(const BuildInput& input, const std::filesystem::path& output) const {
  std::vector<std::string> argv = {toolchain_.nvcc.string()};
  if (auto gencode = arch_flags(input.arch)) argv.insert(argv.end(), gencode->begin(), gencode->end());
  argv.insert(argv.end(), input.flags.begin(), input.flags.end());
  if (!toolchain_.device_include.empty()) argv.push_back("-I" + toolchain_.device_include.string());
  if (input.link_nccl && toolchain_.nccl) argv.push_back("-I" + toolchain_.nccl->include_dir.string());
  for (const auto& inc : input.includes) argv.push_back("-I" + inc.string());
  argv.push_back(input.source.string());
  argv.push_back("-o");
  argv.push_back(output.string());
  argv.insert(argv.end(), input.libs.begin(), input.libs.end());
  if (input.link_nccl && toolchain_.nccl) {
    argv.push_back("-L" + nccl_link_dir_.string());
    argv.push_back("-lnccl");
    argv.push_back("-Xlinker");
    argv.push_back("-rpath," + toolchain_.nccl->library.parent_path().string());
  }
  return argv;
}

BuildResult NvccBuilder::build(const BuildInput& input, const JobObserver& jobs, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  BuildResult result;
  auto finish = [&]() -> BuildResult {
    result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
  };
  if (!arch_flags(input.arch)) {
    result.error = "unknown GPU architecture '" + input.arch + "' (expected sm_90, sm_90a, ...)";
    return finish();
  }
  if (input.link_nccl && !toolchain_.nccl) {
    result.error = "NCCL not found (NCCL_HOME, a Python wheel nvidia/nccl, the CUDA toolkit, /usr; `braid env` lists the search); " + toolchain_.describe();
    return finish();
  }
  const std::string display = input.display_name.empty() ? input.source.filename().string() : input.display_name;

  // The key covers the whole command except where the source and output live.
  std::vector<std::string> key_flags = command_for(input, "OUT");
  key_flags.erase(key_flags.begin());  // nvcc's path: its identity is in compiler_identity
  key_flags.erase(std::remove(key_flags.begin(), key_flags.end(), input.source.string()), key_flags.end());
  std::vector<std::filesystem::path> include_dirs;
  if (!toolchain_.device_include.empty()) include_dirs.push_back(toolchain_.device_include);
  if (input.link_nccl && toolchain_.nccl) include_dirs.push_back(toolchain_.nccl->include_dir);
  include_dirs.insert(include_dirs.end(), input.includes.begin(), input.includes.end());
  // Device paths differ between machines; only what they hold belongs in the key.
  for (auto& flag : key_flags)
    for (const auto& dir : include_dirs) flag = replace_all(flag, dir.string(), "<inc>");
  std::string nccl_version;
  if (toolchain_.nccl) nccl_version = toolchain_.nccl->header_version + "/" + toolchain_.nccl->library_version;
  result.cache_key = compile_cache_key({input.source, include_dirs, key_flags, toolchain_.compiler_identity, nccl_version});
  result.command = command_for(input, input.output);

  std::shared_ptr<std::mutex> key_lock;
  {
    std::lock_guard lock(mutex_);
    auto& slot = key_locks_[result.cache_key];
    if (!slot) slot = std::make_shared<std::mutex>();
    key_lock = slot;
  }
  std::lock_guard same_key(*key_lock);
  if (auto hit = cache_.lookup(result.cache_key)) {
    result.cached = true;
    if (hit->ok) {
      CompileCache::materialize(hit->artifact, input.output);
      result.ok = true;
      result.artifact = input.output;
    } else {
      result.error = hit->error;
    }
    return finish();
  }

  {
    std::unique_lock lock(mutex_);
    slot_free_.wait(lock, [&] { return running_ < max_parallel_; });
    ++running_;
  }
  struct Release {
    NvccBuilder* self;
    ~Release() {
      {
        std::lock_guard lock(self->mutex_);
        --self->running_;
      }
      self->slot_free_.notify_one();
    }
  } release{this};

  const std::filesystem::path staging =
      input.output.parent_path() / (input.output.filename().string() + ".building" + std::to_string(::getpid()));
  SubprocessOptions options;
  options.argv = command_for(input, staging);
  options.cwd = input.source.parent_path();
  options.timeout_s = input.timeout_s;
  options.output_cap_bytes = 256 * 1024;
  if (!input.log_dir.empty()) {
    options.stdout_path = input.log_dir / "build.stdout";
    options.stderr_path = input.log_dir / "build.stderr";
  }
  long started_pgid = 0;
  if (jobs)
    options.on_start = [&](long pgid) {
      started_pgid = pgid;
      jobs(pgid, true, what);
    };
  SubprocessResult run = run_subprocess(options);
  if (jobs && started_pgid != 0) jobs(started_pgid, false, what);

  std::error_code ec;
  if (!run.started) {
    result.error = "nvcc " + run.describe_end();
    return finish();
  }
  if (run.timed_out) {
    std::filesystem::remove(staging, ec);
    result.timed_out = true;
    result.error = fmt::format("build timed out (limit {:g} s); nvcc's process group was killed", input.timeout_s);
    return finish();
  }
  if (!run.succeeded() || !std::filesystem::is_regular_file(staging, ec)) {
    std::filesystem::remove(staging, ec);
    std::string errors = trim_compiler_errors(run.stderr_text + run.stdout_text, input.source.string(), display);
    if (errors.find_first_not_of(" \n\t") == std::string::npos) errors = "nvcc " + run.describe_end();
    result.error = errors;
    // A crash of nvcc itself (signal) says nothing about the candidate: not cached.
    if (run.term_signal == 0) cache_.store_failure(result.cache_key, errors);
    return finish();
  }
  std::filesystem::rename(staging, input.output);
  cache_.store_artifact(result.cache_key, input.output, fmt::format("{}", fmt::join(result.command, " ")));
  result.ok = true;
  result.artifact = input.output;
  return finish();
}

}  // namespace braid
