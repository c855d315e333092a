#include "braid/search/meta_journal.hpp"

#include <algorithm>
#include <chrono>

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
                         SharedDatabase& db, std::function<void()> wake)
    : results_(std::move(results)), interval_(interval), summarizer_(summarizer), db_(db), wake_(std::move(wake)) {}

MetaJournal::~MetaJournal() { drop(); }

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

void MetaJournal::set_answer_delay(std::int64_t generations) {
  delay_ = std::max<std::int64_t>(0, std::min(generations, interval_ - 1));
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

void MetaJournal::maybe_summarize(const Population& pop, std::int64_t generation) {
  const std::int64_t done = pop.done_count();
  if (interval_ <= 0 || done - last_at_ < interval_ || !summarizer_ || started_) return;
  std::vector<ProgramRecord> recent;
  for (auto& id : recent_ids_)
    if (auto r = db_.get(id)) recent.push_back(std::move(*r));
  recent_ids_.clear();
  std::optional<ProgramRecord> best;
  if (!pop.ranked_all().empty()) best = db_.get(pop.at(pop.ranked_all().front()).id);
  json memory = read_memory();
  if (!summarizer_->remote()) {
    apply(summarizer_->summarize(recent, best ? &*best : nullptr, memory, done), memory, done);
    return;
  }
  // The thread owns copies of its inputs; the summarizer is thread-safe (remote()).
  std::promise<MetaUpdate> promise;
  Started s{done, generation + delay_ + 1, memory, promise.get_future(), {}};
  s.thread = std::thread([this, promise = std::move(promise), recent = std::move(recent), best = std::move(best),
                          memory = std::move(memory), done]() mutable {
    try {
      if (complete_) {
        for (ProgramRecord& r : recent) complete_(r);
        if (best) complete_(*best);
      }
      promise.set_value(summarizer_->summarize(recent, best ? &*best : nullptr, memory, done));
    } catch (...) {
      promise.set_exception(std::current_exception());
    }
    if (wake_) wake_();
  });
  started_ = std::move(s);
}

bool MetaJournal::blocks(std::int64_t g) const { return started_ && g >= started_->take_up_at && !answered(); }

bool MetaJournal::answered() const {
  return started_ && started_->answer.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

bool MetaJournal::take_up_before(std::int64_t g) {
  if (!started_ || g < started_->take_up_at) return true;
  if (!answered()) return false;
  take_up();
  return true;
}

void MetaJournal::finish(const std::function<bool()>& stopping) {
  if (!started_) return;
  started_->answer.wait();
  if (stopping()) drop();
  else take_up();
}

void MetaJournal::drop() {
  if (!started_) return;
  started_->thread.join();
  started_.reset();
}

// The answer is in: written as if the summary had been made when it was started (a summarizer
// that failed throws here, on the search thread, as an inline one would).
void MetaJournal::take_up() {
  Started s = std::move(*started_);
  started_.reset();
  s.thread.join();
  apply(s.answer.get(), s.memory, s.done);
}

void MetaJournal::apply(const MetaUpdate& u, const json& memory, std::int64_t done) {
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
  last_at_ = done;
  db_.set_meta("last_meta_at", std::to_string(done));
}

}  // namespace braid
