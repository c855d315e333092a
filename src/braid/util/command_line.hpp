// Command lines (evaluator commands from workload.yaml, `command:` LLM programs): split into words like a POSIX shell
// would (quotes and backslashes, no expansions), then {placeholders} are replaced inside each word, so a path with
// spaces stays one argument and nothing is ever handed to /bin/sh.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace braid {

// Words of `command`; nullopt with `error` set on an unterminated quote or an empty command.
std::optional<std::vector<std::string>> split_command_words(const std::string& command, std::string* error = nullptr);

// Names of the {placeholders} used in `text`, in order of appearance ("{{" and "}}" are
// literal braces).
std::vector<std::string> placeholders_in(const std::string& text);

// Replaces every {name} by values.at(name); an unknown name is left as written.
std::string expand_placeholders(const std::string& text, const std::map<std::string, std::string>& values);

// split_command_words + expand_placeholders on every word.
std::vector<std::string> command_argv(const std::string& command, const std::map<std::string, std::string>& values);

}  // namespace braid
