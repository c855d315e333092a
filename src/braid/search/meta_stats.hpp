// The meta-summary without an LLM: statistics of what was tried, what won and what failed in
// the recent batch (patch types, failure kinds, knob values over- and under-represented among
// the best), kept in the same meta_memory.json shape the LLM summarizer uses.
#pragma once
#include "braid/mutate/agents.hpp"

namespace braid {

class StatsMetaSummarizer : public MetaSummarizer {
 public:
  MetaUpdate summarize(const std::vector<ProgramRecord>& recent, const ProgramRecord* best, const json& memory,
                       std::int64_t generation) override;
};

// Human-readable meta_N.txt content.
std::string render_meta_text(const MetaUpdate& u, std::int64_t generation);

}  // namespace braid
