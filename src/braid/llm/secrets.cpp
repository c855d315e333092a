#include "braid/llm/secrets.hpp"

#include <cstdlib>
#include <map>
#include <mutex>

namespace braid::llm {
namespace {

struct KeyStore {
  std::mutex mu;
  std::map<std::string, std::string> keys;  // env name -> key
};

KeyStore& store() {
  static KeyStore s;
  return s;
}

const std::vector<std::string> kDefaultSecretNames = {
    "OPENAI_API_KEY",     "ANTHROPIC_API_KEY", "AZURE_OPENAI_API_KEY",
    "DEEPSEEK_API_KEY",   "OPENROUTER_API_KEY", "LOCAL_LLM_API_KEY",
    "GEMINI_API_KEY",     "GOOGLE_API_KEY",     "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"};

}  // namespace

std::optional<std::string> take_api_key(const std::string& env_name) {
  auto& s = store();
  std::lock_guard lock(s.mu);
  if (auto it = s.keys.find(env_name); it != s.keys.end()) return it->second;
  const char* v = std::getenv(env_name.c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  std::string key = v;
  s.keys.emplace(env_name, key);
  ::unsetenv(env_name.c_str());
  return key;
}

std::vector<std::string> secret_env_names() {
  std::vector<std::string> names = kDefaultSecretNames;
  auto& s = store();
  std::lock_guard lock(s.mu);
  for (auto& [name, key] : s.keys) {
    bool known = false;
    for (auto& n : names) known = known || n == name;
    if (!known) names.push_back(name);
  }
  return names;
}

std::string redact(std::string text) {
  auto& s = store();
  std::lock_guard lock(s.mu);
  for (auto& [name, key] : s.keys) {
    if (key.size() < 4) continue;  // too short to search for without mangling ordinary text
    for (std::size_t p = text.find(key); p != std::string::npos; p = text.find(key, p))
      text.replace(p, key.size(), "[redacted]");
  }
  return text;
}

}  // namespace braid::llm
