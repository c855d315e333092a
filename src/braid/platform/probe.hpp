// Internal to platform/: running a probe program (nvcc, nvidia-smi, python3) briefly.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "braid/util/subprocess.hpp"

namespace braid::platform_detail {

// A probe that hangs (a wedged driver) must not hang braid: a short limit and a short grace.
inline SubprocessResult run_probe(std::vector<std::string> argv, double timeout_s = 20.0) {
  SubprocessOptions options;
  options.argv = std::move(argv);
  options.timeout_s = timeout_s;
  options.kill_grace_s = 0.5;
  return run_subprocess(options);
}

}  // namespace braid::platform_detail
