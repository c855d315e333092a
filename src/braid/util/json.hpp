#pragma once
#include <nlohmann/json.hpp>

namespace braid {
using json = nlohmann::json;
}
