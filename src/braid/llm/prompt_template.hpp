// Prompt templates are files (prompts/*.md at the repository root, shipped with braid); a
// user's prompts_dir overrides any of them by name. Syntax:
//   {{name}}                 the value of `name`
//   {{#name}} ... {{/name}}  the section only when `name` is non-empty
//   {{^name}} ... {{/name}}  the section only when `name` is empty
// A variable the caller does not supply is an error naming the template file, so a typo in a
// user's override is caught at the first render.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

namespace braid::llm {

using PromptVars = std::map<std::string, std::string>;

std::string render_template(std::string_view tmpl, const PromptVars& vars, const std::string& origin);

class PromptLibrary {
 public:
  // Throws UserError when `override_dir` is given but is not a folder.
  explicit PromptLibrary(std::filesystem::path override_dir = {});
  // The template text: the override's file if present, else the shipped one. Throws
  // SystemError when neither exists (a broken installation).
  std::string text(const std::string& name) const;
  std::filesystem::path path_of(const std::string& name) const;
  std::string render(const std::string& name, const PromptVars& vars) const;
  bool has(const std::string& name) const;

  // The shipped prompts: $BRAID_PROMPTS_DIR, <exe>/../share/braid/prompts, <exe>/../prompts,
  // then the source tree's prompts/.
  static std::filesystem::path shipped_dir();

 private:
  std::filesystem::path override_dir_;
  std::filesystem::path shipped_;
};

}  // namespace braid::llm
