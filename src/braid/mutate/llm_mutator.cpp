#include "braid/mutate/llm_mutator.hpp"
#include "braid/util/text.hpp"

#include <fmt/format.h>

#include <sstream>

#include "braid/util/log.hpp"

namespace braid {
namespace {

std::string status_of(const ProgramRecord& r) {
  if (r.correct) return fmt::format("score {:.6g}, correct", r.combined_score);
  return fmt::format("failed: {}", to_string(r.failure));
}

std::string metrics_line(const json& m) {
  if (!m.is_object() || m.empty()) return "";
  json shown = m;
  shown.erase("level_reached");
  shown.erase("profile");  // shown as lines of its own (profile_summary)
  std::string s = shown.dump();
  return s.size() > 1200 ? s.substr(0, 1200) + "..." : s;
}

std::string program_section(const ProgramRecord& r, const std::string& language, const std::string& title) {
  std::string s = fmt::format("## {} (id {}, generation {}, {})\n", title, r.id, r.generation, status_of(r));
  if (auto m = metrics_line(r.public_metrics); !m.empty()) s += "Metrics: " + m + "\n";
  if (auto p = profile_summary(r.public_metrics); !p.empty()) s += "Nsight Compute profile:\n" + trimmed(p) + "\n";
  if (!r.text_feedback.empty()) s += "Feedback: " + trimmed(r.text_feedback) + "\n";
  s += "```" + language + "\n" + r.code + (r.code.empty() || r.code.back() == '\n' ? "" : "\n") + "```\n";
  return s;
}

std::string failed_section(const ProgramRecord& r) {
  std::string s =
      fmt::format("## {} (generation {}, {} patch, {})\n", r.id, r.generation, r.patch_type, to_string(r.failure));
  if (!r.text_feedback.empty()) s += "Feedback: " + trimmed(r.text_feedback) + "\n";
  if (!r.error_text.empty()) s += "Error:\n```\n" + elide(trimmed(r.error_text), 1500) + "\n```\n";
  if (!r.code_diff.empty()) s += "Change that produced it:\n```\n" + elide(trimmed(r.code_diff), 2000) + "\n```\n";
  return s;
}

bool is_search_line(const std::string& line) {
  auto t = line.find_first_not_of(" \t");
  if (t == std::string::npos) return false;
  std::size_t n = 0;
  while (t + n < line.size() && line[t + n] == '<') ++n;
  return n >= 4 && line.find("SEARCH", t + n) != std::string::npos;
}

bool is_replace_end_line(const std::string& line) {
  auto t = line.find_first_not_of(" \t");
  if (t == std::string::npos) return false;
  std::size_t n = 0;
  while (t + n < line.size() && line[t + n] == '>') ++n;
  return n >= 4;
}

std::string block_markers(const Program& parent) {
  std::string out;
  std::istringstream in(parent.text());
  for (std::string line; std::getline(in, line);) {
    if (line.find("EVOLVE-BLOCK-START") != std::string::npos) out += trimmed(line) + "\n...\n";
    else if (line.find("EVOLVE-BLOCK-END") != std::string::npos) out += trimmed(line) + "\n\n";
  }
  return trimmed(out);
}

// Knob changes as a prompt lists them, one "- kName = value[, kOther = value]" line each.
std::string bullet_list(const std::vector<std::string>& changes) {
  std::string out;
  for (const auto& t : changes) out += "- " + t + "\n";
  return trimmed(out);
}

}  // namespace

std::string elide(const std::string& text, std::size_t max_chars) {
  if (text.size() <= max_chars) return text;
  std::size_t head = max_chars * 2 / 3, tail = max_chars - head;
  return text.substr(0, head) + "\n[... " + std::to_string(text.size() - head - tail) + " characters elided ...]\n" +
         text.substr(text.size() - tail);
}

std::optional<ExtractedPatch> extract_patch(PatchType requested, const std::string& answer, std::string* why) {
  std::vector<std::string> lines;
  {
    std::istringstream in(answer);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  std::optional<std::size_t> first_search, last_end;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (is_search_line(lines[i]) && !first_search) first_search = i;
    if (first_search && is_replace_end_line(lines[i])) last_end = i;
  }
  bool has_blocks =
      answer.find("EVOLVE-BLOCK-START") != std::string::npos && answer.find("EVOLVE-BLOCK-END") != std::string::npos;
  auto diff_text = [&] {
    std::size_t end = last_end.value_or(lines.size() - 1);
    std::string s;
    for (std::size_t i = *first_search; i <= end; ++i) s += lines[i] + "\n";
    return s;
  };
  if (requested == PatchType::Diff) {
    if (first_search) return ExtractedPatch{PatchType::Diff, diff_text()};
    if (has_blocks) return ExtractedPatch{PatchType::Full, answer};
  } else {
    if (has_blocks) return ExtractedPatch{requested, answer};
    if (first_search) return ExtractedPatch{PatchType::Diff, diff_text()};
  }
  if (why)
    *why = requested == PatchType::Diff
               ? "the answer has no SEARCH/REPLACE block (<<<<<<< SEARCH ... ======= ... >>>>>>> REPLACE)"
               : "the answer has no EVOLVE-BLOCK-START / EVOLVE-BLOCK-END markers and no SEARCH/REPLACE block";
  return std::nullopt;
}

LlmMutator::LlmMutator(std::shared_ptr<LlmRuntime> runtime) : rt_(std::move(runtime)) {}

std::string LlmMutator::system_message(const MutationContext& ctx) const {
  const std::string& api = rt_->settings.api_type_of(ctx.island);
  llm::PromptVars vars = {
      {"task_message", trimmed(ctx.system_message.empty() ? rt_->task_message : ctx.system_message)},
      {"language", ctx.language.empty() ? rt_->language : ctx.language},
      {"api_type", api},
      {"backend_context", trimmed(rt_->backend_context(api))},
      {"hardware", trimmed(rt_->hardware.describe())},
  };
  return rt_->prompts->render("system.md", vars);
}

std::string LlmMutator::user_message(const Program& parent, const MutationContext& ctx) const {
  const ProgramRecord& p = *ctx.parent;
  const std::string language = ctx.language.empty() ? rt_->language : ctx.language;
  std::string knobs;
  for (auto& k : parent.knobs()) {
    std::string domain;
    for (auto& v : k.domain) domain += (domain.empty() ? "" : "|") + v;
    knobs += fmt::format("- {} = {} ({})\n", k.name, k.value, domain);
  }
  std::string cross, top_k, inspirations, failed;
  for (std::size_t i = 0; i < ctx.cross_parents.size(); ++i)
    cross += program_section(*ctx.cross_parents[i], language, fmt::format("Program to combine {}", i + 1));
  for (std::size_t i = 0; i < ctx.top_k_inspirations.size(); ++i)
    top_k += program_section(*ctx.top_k_inspirations[i], language, fmt::format("Top program {}", i + 1));
  for (std::size_t i = 0; i < ctx.archive_inspirations.size(); ++i)
    inspirations += program_section(*ctx.archive_inspirations[i], language, fmt::format("Archive program {}", i + 1));
  for (auto* r : ctx.failed_neighbours) failed += failed_section(*r);

  std::string status = status_of(p);
  if (auto m = metrics_line(p.public_metrics); !m.empty()) status += "\nMetrics: " + m;
  if (ctx.best && ctx.best->id != p.id)
    status += fmt::format("\nBest program so far: {} with score {:.6g}", ctx.best->id, ctx.best->combined_score);

  llm::PromptVars patch_vars = {
      {"phase", std::string(to_string(ctx.phase))}, {"language", language}, {"block_markers", block_markers(parent)}};
  std::string patch_file = ctx.patch_type == PatchType::Diff   ? "patch_diff.md"
                           : ctx.patch_type == PatchType::Full ? "patch_full.md"
                                                               : "patch_cross.md";
  llm::PromptVars vars = {
      {"generation", std::to_string(ctx.generation)},
      {"phase", std::string(to_string(ctx.phase))},
      {"patch_type", std::string(to_string(ctx.patch_type))},
      {"language", language},
      {"parent_id", p.id},
      {"parent_status", status},
      {"parent_feedback", trimmed(p.text_feedback)},
      {"parent_profile", trimmed(profile_summary(p.public_metrics))},
      {"parent_error", p.correct ? "" : elide(trimmed(p.error_text), 3000)},
      {"parent_code", parent.text().empty() || parent.text().back() != '\n'
                          ? parent.text()
                          : parent.text().substr(0, parent.text().size() - 1)},
      {"knobs", trimmed(knobs)},
      {"taken_knob_changes", bullet_list(ctx.taken_knob_changes)},
      {"focus_knob_changes", bullet_list(ctx.focus_knob_changes)},
      {"focus_knob_pairs", bullet_list(ctx.focus_knob_pairs)},
      {"one_knob_changes_spent", ctx.one_knob_changes_spent ? "yes" : ""},
      {"cross_programs", trimmed(cross)},
      {"top_k", trimmed(top_k)},
      {"inspirations", trimmed(inspirations)},
      {"failed", trimmed(failed)},
      {"recommendations", trimmed(ctx.meta_recommendations)},
      // A failed call (timeout, 429 storm) is no lesson for the model; a rejected answer is.
      {"previous_error", ctx.previous_error.rfind("llm ", 0) == 0 ? "" : trimmed(ctx.previous_error)},
      {"patch_instructions", trimmed(rt_->prompts->render(patch_file, patch_vars))},
  };
  return rt_->prompts->render("mutate.md", vars);
}

Proposal LlmMutator::propose(const Program& parent, const MutationContext& ctx) {
  Proposal out;
  out.patch_type = ctx.patch_type;
  int attempt;
  std::optional<Turn> previous;
  {
    std::lock_guard lock(mu_);
    attempt = attempts_[ctx.generation]++;
    if (auto it = last_turn_.find(ctx.generation); it != last_turn_.end() && !ctx.previous_error.empty())
      previous = it->second;
    // Generations long finished need no memory.
    while (!attempts_.empty() && attempts_.begin()->first + 64 < ctx.generation) attempts_.erase(attempts_.begin());
    while (!last_turn_.empty() && last_turn_.begin()->first + 64 < ctx.generation) last_turn_.erase(last_turn_.begin());
  }

  llm::LlmRequest req;
  req.purpose = "mutate";
  req.generation = ctx.generation;
  req.replay_key = fmt::format("mutate/g{}/a{}", ctx.generation, attempt);
  req.temperature = ctx.temperature;
  req.max_tokens = ctx.phase == Phase::Explore ? rt_->settings.max_tokens_explore : rt_->settings.max_tokens_exploit;
  req.extra = rt_->settings.kwargs;
  req.system = system_message(ctx);
  std::string model;
  if (previous) {
    // Continue the conversation: the model sees its own answer and why it failed.
    model = previous->model;
    const std::string language = ctx.language.empty() ? rt_->language : ctx.language;
    llm::PromptVars patch_vars = {
        {"phase", std::string(to_string(ctx.phase))}, {"language", language}, {"block_markers", block_markers(parent)}};
    std::string patch_file = ctx.patch_type == PatchType::Diff   ? "patch_diff.md"
                             : ctx.patch_type == PatchType::Full ? "patch_full.md"
                                                                 : "patch_cross.md";
    llm::PromptVars retry_vars = {{"previous_error", trimmed(ctx.previous_error)},
                                  {"taken_knob_changes", bullet_list(ctx.taken_knob_changes)},
                                  {"focus_knob_changes", bullet_list(ctx.focus_knob_changes)},
                                  {"focus_knob_pairs", bullet_list(ctx.focus_knob_pairs)},
                                  {"one_knob_changes_spent", ctx.one_knob_changes_spent ? "yes" : ""},
                                  {"patch_instructions", trimmed(rt_->prompts->render(patch_file, patch_vars))}};
    req.messages = {{"user", previous->user},
                    {"assistant", previous->answer},
                    {"user", rt_->prompts->render("retry.md", retry_vars)}};
  } else {
    model = rt_->selector->models()[rt_->selector->pick()];
    req.messages = {{"user", user_message(parent, ctx)}};
  }
  out.model = model;

  llm::LlmResponse resp = rt_->client(model).complete(req);
  out.cost_usd = rt_->ledger->price(resp.model.empty() ? model : resp.model, resp.tokens_in, resp.tokens_out);
  if (!resp.ok()) {
    out.error = fmt::format("llm {}: {}", resp.error_kind, resp.error);
    out.rate_limited = resp.error_kind == "rate_limited";
    out.retry_after_s = resp.retry_after_s;
    return out;
  }
  {
    std::lock_guard lock(mu_);
    last_turn_[ctx.generation] = Turn{model, req.messages.front().content, resp.text};
    if (previous) last_turn_[ctx.generation].user = previous->user;
  }
  std::string why;
  auto patch = extract_patch(ctx.patch_type, resp.text, &why);
  if (!patch) {
    rt_->ledger->count_error("no_patch");
    mark_llm_call_error(rt_->db, req.replay_key, "no_patch", why);
    out.error = "no_patch: " + why;
    return out;
  }
  if (patch->type != ctx.patch_type)
    log::info("generation {}: asked for a {} patch, the answer is a {} patch; taken as such", ctx.generation,
              to_string(ctx.patch_type), to_string(patch->type));
  out.patch_type = patch->type;
  out.patch = std::move(patch->text);
  return out;
}

}  // namespace braid
