// The driver of a cascade workload split into a driver and a worker (docs/sandbox.md, "Driver
// and worker"): trusted workload code that braid builds with workload.yaml's `driver_build`
// from the workload folder, once per content, into a cache outside every work folder (a
// candidate can neither rewrite nor replace it).
//
// Layout: <cache>/<key>/driver, the key over the command (before its placeholders are filled
// in) and every file directly in the workload folder, by name and content; files the driver
// takes from elsewhere are not part of it. Built in a temporary folder and renamed, so
// concurrent braids never see a half-written driver.
#pragma once
#include <filesystem>
#include <map>
#include <string>

namespace braid {

struct DriverBuild {
  std::filesystem::path binary;  // the driver, when it built
  std::string error;             // why it did not (the command's end and its errors)
};

// Builds the driver unless the cache has it: `command` is driver_build, its {workload_dir} this
// folder, {driver} the binary it must write; it runs in the workload folder with `env` added.
DriverBuild build_driver(const std::string& command, const std::filesystem::path& workload_dir,
                         const std::map<std::string, std::string>& env, double timeout_s,
                         const std::filesystem::path& cache_dir);

// $BRAID_CACHE_DIR/drivers, else $XDG_CACHE_HOME/braid/drivers, else ~/.cache/braid/drivers.
std::filesystem::path default_driver_cache_dir();

}  // namespace braid
