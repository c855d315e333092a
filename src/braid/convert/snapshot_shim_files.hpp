// The files of device/snapshot/ (the differential gate's snapshot shim, snapshot_shim.cpp),
// embedded at build time by cmake/embed_templates.cmake, so the gate compiles the shim without
// braid's source tree (diff_gate.hpp: build_snapshot_shim).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace braid::convert {
const std::vector<std::pair<std::string, std::string>>& snapshot_shim_files();
}  // namespace braid::convert
