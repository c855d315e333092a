// Files of `braid init`'s workload skeleton, embedded at build time from templates/workload/.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace braid::cli {
const std::vector<std::pair<std::string, std::string>>& workload_template_files();
}
