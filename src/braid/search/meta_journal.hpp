// The meta memory: every meta_rec_interval generations done, the MetaSummarizer reads the
// children indexed since the last summary and the best program; its summary, scratchpad and
// recommendations are kept in meta_memory.json (meta_<N>.txt for people, meta last_meta_at for
// resume), and the recommendations go into the prompts of the proposals prepared after it.
// Search thread only.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "braid/mutate/agents.hpp"
#include "braid/search/population.hpp"
#include "braid/search/shared_database.hpp"

namespace braid {

class MetaJournal {
 public:
  // `summarizer` may be null (no summaries); `interval` <= 0 writes none either.
  MetaJournal(std::filesystem::path results, std::int64_t interval, MetaSummarizer* summarizer, SharedDatabase& db);

  // Where an earlier session left off: the recommendations of meta_memory.json, last_meta_at.
  void load();
  // A proposed child was indexed: the next summary reads it.
  void note(const ProgramRecord& rec);
  // Summarizes once `pop` has interval more generations done than at the last summary.
  void maybe_summarize(const Population& pop);

  // "1. ...\n2. ...\n" for the prompts; "" before the first summary.
  const std::string& recommendations() const { return recommendations_; }

 private:
  json read_memory() const;

  std::filesystem::path results_;
  std::int64_t interval_;
  MetaSummarizer* summarizer_;
  SharedDatabase& db_;
  std::vector<std::string> recent_ids_;  // since the last summary
  std::int64_t last_at_ = 0;
  std::string recommendations_;
};

}  // namespace braid
