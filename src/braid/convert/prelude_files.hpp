// The files of device/include/braid/converted/ (prelude.cuh with its prelude_*.cuh parts written
// out in place, prelude_harness.cuh), embedded at build time by cmake/embed_templates.cmake: the
// text converted_prelude() inserts.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace braid::convert {
const std::vector<std::pair<std::string, std::string>>& converted_prelude_files();
}  // namespace braid::convert
