// `braid prompt-reference`: the backend context a mutation prompt carries for an API type (what
// mutate/backend_reference.hpp assembles from the installed headers), or the sizes for every API
// type. docs/prompt-reference.md is generated with it.
#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "braid/cli/command.hpp"
#include "braid/mutate/backend_reference.hpp"
#include "braid/util/error.hpp"

namespace braid::cli {
namespace {

std::string listed(const std::vector<std::string>& names) { return names.empty() ? "-" : fmt::format("{}", fmt::join(names, ", ")); }

void print_sizes(const ReferenceInputs& in, int tokens) {
  std::printf("| api_type | full: chars | ~tokens | sections | at %d tokens: chars | ~tokens | cut | left out |\n", tokens);
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const auto& api : api_types()) {
    const auto sections = reference_sections(api, in);
    const auto full = fit_reference(sections, 0);
    const auto fitted = fit_reference(sections, static_cast<std::size_t>(tokens));
    std::printf("| %s | %zu | %zu | %zu | %zu | %zu | %s | %s |\n", api.c_str(), full.text.size(),
                approx_tokens(full.text.size()), sections.size(), fitted.text.size(), approx_tokens(fitted.text.size()),
                fitted.cut.empty() ? "-" : fitted.cut.c_str(), listed(fitted.left_out).c_str());
  }
}

int do_prompt_reference(const std::string& api, int tokens, bool sizes) {
  const auto& known = api_types();
  if (std::find(known.begin(), known.end(), api) == known.end())
    throw UserError("--api-type", "'" + api + "' is not an API type (" + listed(known) + ")");
  if (tokens < 0) throw UserError("--tokens", "must be 0 (no limit) or more");
  llm::PromptLibrary prompts;
  const ReferenceInputs in = reference_inputs(&prompts);
  if (in.nccl.empty()) std::fprintf(stderr, "braid: no NCCL device headers (nccl_device.h) found: no NCCL reference\n");
  if (sizes) {
    print_sizes(in, tokens);
    return 0;
  }
  const auto fitted = fit_reference(reference_sections(api, in), static_cast<std::size_t>(tokens));
  std::fputs(fitted.text.c_str(), stdout);
  std::fprintf(stderr, "%s: %zu characters, ~%zu tokens (budget %d); shown: %s; cut: %s; left out: %s\n", api.c_str(),
               fitted.text.size(), approx_tokens(fitted.text.size()), tokens, listed(fitted.shown).c_str(),
               fitted.cut.empty() ? "-" : fitted.cut.c_str(), listed(fitted.left_out).c_str());
  return 0;
}

Registrar prompt_reference_reg(86, [](CLI::App& app, Action& action) {
  static std::string api = "lsa";
  static int tokens = 8000;
  static bool sizes = false;
  auto* cmd = app.add_subcommand("prompt-reference",
                                 "The backend context (braid and NCCL device API reference) a mutation prompt carries");
  cmd->add_option("--api-type", api, "lsa, gin, hybrid, host or cuda (one GPU)")->capture_default_str();
  cmd->add_option("--tokens", tokens, "budget, as the config key backend_context_tokens (0 = no limit)")
      ->capture_default_str();
  cmd->add_flag("--sizes", sizes, "a table of sizes for every API type instead of the text");
  cmd->callback([&action] { action = [] { return do_prompt_reference(api, tokens, sizes); }; });
});

}  // namespace
}  // namespace braid::cli
