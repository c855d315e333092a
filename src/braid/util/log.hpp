// Logging: spdlog, plain lines on stderr. The CLI's live status line lives in cli/.
#pragma once
#include <spdlog/spdlog.h>

namespace braid::log {
using spdlog::debug;
using spdlog::error;
using spdlog::info;
using spdlog::warn;
}  // namespace braid::log
