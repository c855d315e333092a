// The meta memory: every meta_rec_interval generations done, the MetaSummarizer reads the
// children indexed since the last summary and the best program; its summary, scratchpad and
// recommendations are kept in meta_memory.json (meta_<N>.txt for people, meta last_meta_at for
// resume), and the recommendations go into the prompts of the proposals prepared after it.
//
// A summarizer that asks a remote model answers on a thread of its own, so the search goes on
// evaluating and proposing meanwhile. Its inputs are copied when it is started (after the
// indexing of generation h) and its answer is taken up just before generation h + delay + 1 is
// indexed, waited for there if late: what each prompt sees depends on the generation order
// only, never on timing, so a replay repeats the run. Stopping drops an answer not taken up:
// nothing of it is written, and resume asks for that summary again.
// Search thread only (the summary's thread touches only its copied inputs).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "braid/mutate/agents.hpp"
#include "braid/search/population.hpp"
#include "braid/search/shared_database.hpp"

namespace braid {

class MetaJournal {
 public:
  // `summarizer` may be null (no summaries); `interval` <= 0 writes none either. `wake` is
  // called from the summary's thread when its answer is in.
  MetaJournal(std::filesystem::path results, std::int64_t interval, MetaSummarizer* summarizer, SharedDatabase& db,
              std::function<void()> wake);
  ~MetaJournal();  // drop()
  MetaJournal(const MetaJournal&) = delete;
  MetaJournal& operator=(const MetaJournal&) = delete;

  // Where an earlier session left off: the recommendations of meta_memory.json, last_meta_at.
  void load();
  // How many generations a remote summary's answer may trail the one whose indexing started it
  // (clamped to interval - 1, so that it is taken up before the next is due).
  void set_answer_delay(std::int64_t generations);
  // A proposed child was indexed: the next summary reads it.
  void note(const ProgramRecord& rec);
  // A remote summary's records get their diagnoses first (asked beside the search:
  // search/pending_feedback.hpp), on the summary's thread.
  void set_complete(std::function<void(ProgramRecord&)> complete) { complete_ = std::move(complete); }
  // After generation `generation` was indexed: summarizes (or starts a remote summary) once
  // `pop` has interval more generations done than at the last summary.
  void maybe_summarize(const Population& pop, std::int64_t generation);

  // Whether generation g may be indexed now: takes up the summary that must come before it
  // once answered; false while that answer is still awaited.
  bool take_up_before(std::int64_t g);
  // Whether indexing generation g waits for a summary's answer.
  bool blocks(std::int64_t g) const;
  bool answered() const;  // a summary's answer waits to be taken up
  // The run ends: waits for a summary still out and takes it up, unless `stopping` by then.
  void finish(const std::function<bool()>& stopping);
  // Stopping: a summary still out is joined and its answer discarded.
  void drop();

  // "1. ...\n2. ...\n" for the prompts; "" before the first summary.
  const std::string& recommendations() const { return recommendations_; }

 private:
  struct Started {
    std::int64_t done = 0;        // generations done when it was started
    std::int64_t take_up_at = 0;  // taken up before this generation is indexed
    json memory;                  // meta_memory.json as it was then
    std::future<MetaUpdate> answer;
    std::thread thread;
  };

  json read_memory() const;
  void apply(const MetaUpdate& u, const json& memory, std::int64_t done);
  void take_up();

  std::function<void(ProgramRecord&)> complete_;
  std::filesystem::path results_;
  std::int64_t interval_;
  MetaSummarizer* summarizer_;
  SharedDatabase& db_;
  std::function<void()> wake_;
  std::int64_t delay_ = 0;
  std::vector<std::string> recent_ids_;  // since the last summary
  std::int64_t last_at_ = 0;
  std::string recommendations_;
  std::optional<Started> started_;  // a remote summary not yet taken up
};

}  // namespace braid
