#include "braid/eval/driver_build.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <vector>

#include "braid/eval/diagnostics.hpp"
#include "braid/eval/gpu_cascade.hpp"
#include "braid/util/command_line.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {
namespace {

// The command and every regular file directly in the workload folder, by name and content.
std::string driver_key(const std::string& command, const std::filesystem::path& workload_dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(workload_dir, ec))
    if (entry.is_regular_file(ec)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::string text = command + "\n";
  for (const auto& f : files) text += f.filename().string() + "\n" + try_read_file(f).value_or("") + "\n";
  return hash_hex(text) + hash_hex(text, 17);
}

}  // namespace

std::filesystem::path default_driver_cache_dir() { return default_compile_cache_dir().parent_path() / "drivers"; }

DriverBuild build_driver(const std::string& command, const std::filesystem::path& workload_dir,
                         const std::map<std::string, std::string>& env, double timeout_s,
                         const std::filesystem::path& cache_dir) {
  DriverBuild out;
  const std::string folder = std::filesystem::absolute(workload_dir).string();
  // Not the folder's path: copies of one workload (tests, `braid init` twins) share a driver.
  const std::filesystem::path entry = cache_dir / driver_key(command, workload_dir);
  std::error_code ec;
  if (std::filesystem::is_regular_file(entry / "driver", ec)) {
    out.binary = entry / "driver";
    return out;
  }
  std::random_device rd;
  const std::filesystem::path staging = cache_dir / fmt::format("tmp-{}-{:08x}", ::getpid(), rd());
  std::filesystem::create_directories(staging, ec);
  if (ec) {
    out.error = "cannot create the driver cache " + staging.string() + ": " + ec.message();
    return out;
  }
  SubprocessOptions options;
  options.argv = command_argv(command, {{"driver", (staging / "driver").string()}, {"workload_dir", folder}});
  options.cwd = workload_dir;
  options.env_add = env;
  options.timeout_s = timeout_s;
  SubprocessResult build = run_subprocess(options);
  if (!build.succeeded() || !std::filesystem::is_regular_file(staging / "driver", ec)) {
    out.error = "the workload's driver did not build (driver_build " + build.describe_end() + ")\n" +
                tail_text(build.stderr_text + build.stdout_text, 3000);
    std::filesystem::remove_all(staging, ec);
    return out;
  }
  // Another braid may have put the same driver there first: either copy is the same.
  std::filesystem::rename(staging, entry, ec);
  if (ec) std::filesystem::remove_all(staging, ec);
  out.binary = entry / "driver";
  return out;
}

}  // namespace braid
