#include "braid/search/activity_file.hpp"

#include <cmath>

#include "braid/util/fs.hpp"
#include "braid/util/json.hpp"
#include "braid/util/log.hpp"

namespace braid {

void ActivityFile::publish(const RunStatus& status) {
  json a = {{"in_flight", status.in_flight},
            {"proposing", status.proposing},
            {"proposals_asking", status.proposals_asking},
            {"proposal_wait_s", std::round(status.proposal_wait_s)},
            {"proposals_paused_s", std::round(status.proposals_paused_s)},
            {"note", status.note}};
  const std::string text = a.dump();
  const auto now = std::chrono::steady_clock::now();
  const auto since = now - written_at_;
  if (since < std::chrono::seconds(1) || (text == written_ && since < std::chrono::seconds(5))) return;
  written_ = text;
  written_at_ = now;
  a["updated_at"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  try {
    write_file_atomic(path_, a.dump());
  } catch (const std::exception& e) {
    if (!warned_) log::warn("{}: the live activity for `braid serve` is not written: {}", path_.string(), e.what());
    warned_ = true;
  }
}

void ActivityFile::remove() {
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

}  // namespace braid
