// The files of device/include/braid/converted/ (prelude.cuh, prelude_harness.cuh), embedded at
// build time by cmake/embed_templates.cmake: the text converted_prelude() inserts.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace braid::convert {
const std::vector<std::pair<std::string, std::string>>& converted_prelude_files();
}  // namespace braid::convert
