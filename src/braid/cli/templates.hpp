// Files of `braid init`'s workload skeleton, embedded at build time from templates/workload/, and
// of `braid init --kernelbench`'s workload from templates/kernelbench/.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace braid::cli {
const std::vector<std::pair<std::string, std::string>>& workload_template_files();
const std::vector<std::pair<std::string, std::string>>& kernelbench_template_files();
}
