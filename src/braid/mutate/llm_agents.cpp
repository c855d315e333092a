#include "braid/util/text.hpp"
#include "braid/mutate/llm_agents.hpp"

#include <fmt/format.h>

#include <sstream>

#include "braid/mutate/llm_mutator.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/log.hpp"

namespace braid {
namespace {

std::string first_line(const std::string& s) {
  std::string t = trimmed(s);
  auto nl = t.find('\n');
  return nl == std::string::npos ? t : t.substr(0, nl);
}

std::string score_text(const ProgramRecord& r) {
  return r.correct ? fmt::format("{:.6g}", r.combined_score) : std::string("0 (") + std::string(to_string(r.failure)) + ")";
}

std::string render_list(const json& items) {
  std::string out;
  int i = 1;
  if (items.is_array())
    for (auto& it : items)
      if (it.is_string()) out += fmt::format("{}. {}\n", i++, it.get<std::string>());
  return trimmed(out);
}

}  // namespace

LlmFeedbackAgent::LlmFeedbackAgent(std::shared_ptr<LlmRuntime> runtime) : rt_(std::move(runtime)) {}

void LlmFeedbackAgent::note_outcome(const ProgramRecord& candidate, const ProgramRecord* parent) {
  rt_->selector->reward(candidate.model,
                        llm::improvement_reward(candidate.correct, candidate.combined_score,
                                                parent && parent->correct, parent ? parent->combined_score : 0.0));
}

std::string LlmFeedbackAgent::diagnose(const ProgramRecord& candidate, const ProgramRecord* parent) {
  if (rt_->feedback_model.empty()) return "";
  json metrics = candidate.public_metrics.is_object() ? candidate.public_metrics : json::object();
  std::string level = metrics.contains("level_reached") ? metrics["level_reached"].dump() : "?";
  metrics.erase("level_reached");
  metrics.erase("profile");  // its lines go in {{profile}}
  llm::PromptVars vars = {
      {"language", rt_->language},
      {"outcome", std::string(to_string(candidate.failure))},
      {"level", level},
      {"score", score_text(candidate)},
      {"parent_score", parent ? score_text(*parent) : "none (seed)"},
      {"metrics", metrics.empty() ? "" : elide(metrics.dump(), 1500)},
      {"profile", trimmed(profile_summary(candidate.public_metrics))},
      {"error", elide(trimmed(candidate.error_text), 2500)},
      {"change", candidate.code_diff.empty() ? "(none: seed program)" : elide(trimmed(candidate.code_diff), 3000)},
  };
  llm::LlmRequest req;
  req.purpose = "feedback";
  req.generation = candidate.generation;
  req.replay_key = "feedback/" + candidate.id;
  req.temperature = 0.0;
  req.max_tokens = rt_->settings.feedback_max_tokens;
  req.extra = rt_->settings.kwargs;
  req.system = rt_->prompts->render("feedback_system.md", {{"language", rt_->language}});
  req.messages = {{"user", rt_->prompts->render("feedback.md", vars)}};
  llm::LlmResponse resp = rt_->client(rt_->feedback_model).complete(req);
  if (!resp.ok()) return "";  // counted in the ledger; a candidate without feedback is fine
  return elide(trimmed(resp.text), 1500);
}

LlmMetaSummarizer::LlmMetaSummarizer(std::shared_ptr<LlmRuntime> runtime) : rt_(std::move(runtime)) {}

MetaUpdate parse_meta_answer(const std::string& answer, const json& previous_memory) {
  MetaUpdate u;
  u.scratchpad = previous_memory.is_object() ? previous_memory.value("scratchpad", json::object()) : json::object();
  auto open = answer.find('{');
  auto close = answer.rfind('}');
  if (open != std::string::npos && close != std::string::npos && close > open) {
    json j = json::parse(answer.substr(open, close - open + 1), nullptr, false);
    if (!j.is_discarded() && j.is_object()) {
      if (j.contains("summary") && j["summary"].is_string()) u.summary = j["summary"];
      if (j.contains("scratchpad") && (j["scratchpad"].is_object() || j["scratchpad"].is_string()))
        u.scratchpad = j["scratchpad"];
      if (j.contains("recommendations") && j["recommendations"].is_array())
        for (auto& r : j["recommendations"])
          if (r.is_string() && !trimmed(r.get<std::string>()).empty()) u.recommendations.push_back(trimmed(r.get<std::string>()));
      if (!u.summary.empty() || !u.recommendations.empty()) return u;
    }
  }
  // Not the JSON asked for: keep the prose as the summary and its list lines as recommendations.
  std::istringstream in(answer);
  for (std::string line; std::getline(in, line);) {
    std::string t = trimmed(line);
    std::size_t skip = 0;
    if (t.size() > 2 && (t[0] == '-' || t[0] == '*') && t[1] == ' ') skip = 2;
    else {
      while (skip < t.size() && std::isdigit(static_cast<unsigned char>(t[skip]))) ++skip;
      if (skip == 0 || skip + 1 >= t.size() || (t[skip] != '.' && t[skip] != ')')) skip = 0;
      else skip += 1;
    }
    if (skip > 0) u.recommendations.push_back(trimmed(t.substr(skip)));
  }
  u.summary = elide(trimmed(answer), 2000);
  return u;
}

MetaUpdate LlmMetaSummarizer::summarize(const std::vector<ProgramRecord>& recent, const ProgramRecord* best,
                                        const json& memory, std::int64_t generation) {
  std::string table;
  for (auto& r : recent) {
    table += fmt::format("- {} (generation {}, island {}, {} patch by {}): {}", r.id, r.generation, r.island_idx,
                         r.patch_type, r.model.empty() ? "?" : r.model, score_text(r));
    if (!r.text_feedback.empty()) table += "; feedback: " + elide(first_line(r.text_feedback), 300);
    else if (!r.error_text.empty()) table += "; error: " + elide(first_line(r.error_text), 300);
    table += "\n";
  }
  std::string best_text;
  if (best)
    best_text = fmt::format("{} with score {}\n```{}\n{}\n```", best->id, score_text(*best), rt_->language,
                            elide(best->code, 12000));
  std::string summaries;
  json mem = memory.is_object() ? memory : json::object();
  json past = mem.value("summaries", json::array());
  for (std::size_t i = past.size() > 3 ? past.size() - 3 : 0; i < past.size(); ++i)
    if (past[i].is_object())
      summaries += fmt::format("- generation {}: {}\n", past[i].value("generation", 0), past[i].value("summary", ""));
  json scratch = mem.value("scratchpad", json::object());
  llm::PromptVars vars = {
      {"generation", std::to_string(generation)},
      {"recent", table.empty() ? "(none)" : trimmed(table)},
      {"best", best_text},
      {"summaries", trimmed(summaries)},
      {"scratchpad", scratch.empty() ? "(empty)" : scratch.dump(2)},
      {"recommendations", render_list(mem.value("recommendations", json::array()))},
  };
  llm::LlmRequest req;
  req.purpose = "meta";
  req.generation = generation;
  req.replay_key = fmt::format("meta/g{}", generation);
  req.temperature = 0.0;
  req.max_tokens = rt_->settings.meta_max_tokens;
  req.extra = rt_->settings.kwargs;
  req.system = rt_->prompts->render("meta_system.md", {{"language", rt_->language}});
  req.messages = {{"user", rt_->prompts->render("meta.md", vars)}};
  llm::LlmResponse resp = rt_->client(rt_->meta_model).complete(req);
  if (!resp.ok()) {
    MetaUpdate u;
    u.summary = "(no meta-summary at generation " + std::to_string(generation) + ": " + resp.error_kind + ")";
    u.scratchpad = scratch;
    for (auto& r : mem.value("recommendations", json::array()))
      if (r.is_string()) u.recommendations.push_back(r);
    return u;
  }
  MetaUpdate u = parse_meta_answer(resp.text, mem);
  if (u.recommendations.empty())
    for (auto& r : mem.value("recommendations", json::array()))
      if (r.is_string()) u.recommendations.push_back(r);
  return u;
}

bool judge_novelty(LlmRuntime& rt, const std::string& candidate_code, const std::vector<std::string>& similar_codes) {
  if (rt.novelty_model.empty()) return true;
  std::string similar;
  for (std::size_t i = 0; i < similar_codes.size(); ++i)
    similar += fmt::format("## Program {}\n```{}\n{}\n```\n", i + 1, rt.language, elide(similar_codes[i], 12000));
  llm::LlmRequest req;
  req.purpose = "novelty";
  req.replay_key = "novelty/" + hash_hex(candidate_code);
  req.temperature = 0.0;
  req.max_tokens = rt.settings.novelty_max_tokens;
  req.extra = rt.settings.kwargs;
  req.system = rt.prompts->render("novelty_system.md", {{"language", rt.language}});
  req.messages = {{"user", rt.prompts->render("novelty.md", {{"language", rt.language},
                                                             {"candidate", elide(candidate_code, 12000)},
                                                             {"similar", trimmed(similar)}})}};
  llm::LlmResponse resp = rt.client(rt.novelty_model).complete(req);
  if (!resp.ok()) return true;
  std::string verdict = first_line(resp.text);
  for (auto& c : verdict) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return verdict.find("DUPLICATE") == std::string::npos;
}

}  // namespace braid
