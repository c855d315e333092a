#include "braid/util/command_line.hpp"

#include "braid/util/error.hpp"

namespace braid {

std::optional<std::vector<std::string>> split_command_words(const std::string& command, std::string* error) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (std::size_t i = 0; i < command.size(); ++i) {
    char c = command[i];
    if (quote == '\'') {
      if (c == '\'') quote = 0;
      else word += c;
    } else if (quote == '"') {
      if (c == '"') {
        quote = 0;
      } else if (c == '\\' && i + 1 < command.size() &&
                 (command[i + 1] == '"' || command[i + 1] == '\\' || command[i + 1] == '$' || command[i + 1] == '`')) {
        word += command[++i];
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < command.size()) {
      word += command[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote) {
    if (error) *error = std::string("unterminated ") + (quote == '\'' ? "single" : "double") + " quote in command";
    return std::nullopt;
  }
  if (in_word) words.push_back(std::move(word));
  if (words.empty()) {
    if (error) *error = "empty command";
    return std::nullopt;
  }
  return words;
}

namespace {
// Calls on_literal / on_placeholder over `text`.
template <typename Literal, typename Placeholder>
void scan_placeholders(const std::string& text, Literal&& on_literal, Placeholder&& on_placeholder) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if ((c == '{' || c == '}') && i + 1 < text.size() && text[i + 1] == c) {
      on_literal(c);
      ++i;
      continue;
    }
    if (c == '{') {
      auto close = text.find('}', i + 1);
      if (close != std::string::npos) {
        on_placeholder(text.substr(i + 1, close - i - 1));
        i = close;
        continue;
      }
    }
    on_literal(c);
  }
}
}  // namespace

std::vector<std::string> placeholders_in(const std::string& text) {
  std::vector<std::string> names;
  scan_placeholders(text, [](char) {}, [&](const std::string& name) { names.push_back(name); });
  return names;
}

std::string expand_placeholders(const std::string& text, const std::map<std::string, std::string>& values) {
  std::string out;
  scan_placeholders(
      text, [&](char c) { out += c; },
      [&](const std::string& name) {
        auto it = values.find(name);
        out += it != values.end() ? it->second : "{" + name + "}";
      });
  return out;
}

std::vector<std::string> command_argv(const std::string& command, const std::map<std::string, std::string>& values) {
  std::string error;
  auto words = split_command_words(command, &error);
  // Commands are validated when the workload is loaded; reaching this is a programming error.
  if (!words) throw SystemError("command '" + command + "': " + error);
  for (auto& w : *words) w = expand_placeholders(w, values);
  return *words;
}

}  // namespace braid
