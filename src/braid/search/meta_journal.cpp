#include "braid/search/meta_journal.hpp"

#include <fmt/format.h>

#include "braid/program/origin.hpp"
#include "braid/search/meta_stats.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/log.hpp"

namespace braid {
namespace {

std::string render_recommendations(const json& recs) {
  std::string out;
  int i = 1;
  for (const auto& r : recs)
    if (r.is_string()) out += fmt::format("{}. {}\n", i++, r.get<std::string>());
  return out;
}

}  // namespace

MetaJournal::MetaJournal(std::filesystem::path results, std::int64_t interval, MetaSummarizer* summarizer,
                         SharedDatabase& db)
    : results_(std::move(results)), interval_(interval), summarizer_(summarizer), db_(db) {}

void MetaJournal::load() {
  if (auto m = db_.meta("last_meta_at")) last_at_ = std::stoll(*m);
  auto mem = try_read_file(results_ / "meta_memory.json");
  if (!mem) return;
  try {
    json j = json::parse(*mem);
    recommendations_ = render_recommendations(j.value("recommendations", json::array()));
  } catch (...) {
    log::warn("meta_memory.json is not valid JSON; starting meta summaries afresh");
  }
}

void MetaJournal::note(const ProgramRecord& rec) {
  if (is_proposed(rec.patch_type)) recent_ids_.push_back(rec.id);
}

// The previous memory, or an empty object when there is none (or it is damaged).
json MetaJournal::read_memory() const {
  if (auto m = try_read_file(results_ / "meta_memory.json")) {
    try {
      return json::parse(*m);
    } catch (...) {
    }
  }
  return json::object();
}

void MetaJournal::maybe_summarize(const Population& pop) {
  const std::int64_t done = pop.done_count();
  if (interval_ <= 0 || done - last_at_ < interval_ || !summarizer_) return;
  std::vector<ProgramRecord> recent;
  for (auto& id : recent_ids_)
    if (auto r = db_.get(id)) recent.push_back(std::move(*r));
  std::optional<ProgramRecord> best;
  if (!pop.ranked_all().empty()) best = db_.get(pop.at(pop.ranked_all().front()).id);
  const json memory = read_memory();
  MetaUpdate u = summarizer_->summarize(recent, best ? &*best : nullptr, memory, done);
  json summaries = memory.value("summaries", json::array());
  summaries.push_back({{"generation", done}, {"summary", u.summary}});
  json history = memory.value("history", json::array());
  history.push_back({{"generation", done}, {"recommendations", u.recommendations}});
  json out = {{"summaries", summaries},
              {"scratchpad", u.scratchpad},
              {"recommendations", u.recommendations},
              {"history", history},
              {"generation", done}};
  write_file_atomic(results_ / "meta_memory.json", out.dump(2));
  write_file_atomic(results_ / fmt::format("meta_{}.txt", done), render_meta_text(u, done));
  recommendations_ = render_recommendations(out["recommendations"]);
  recent_ids_.clear();
  last_at_ = done;
  db_.set_meta("last_meta_at", std::to_string(done));
}

}  // namespace braid
