#include "braid/llm/model_spec.hpp"

#include <curl/curl.h>

#include "braid/util/command_line.hpp"
#include "braid/llm/sigv4.hpp"
#include "braid/util/error.hpp"

namespace braid::llm {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// libcurl's own URL parser decides, so what is accepted here is what the requests can reach:
// "http://" (no host), port 99999, "http://[::1/v1" (unclosed IPv6) are refused at start.
std::string url_problem(const std::string& url) {
  CURLU* u = curl_url();
  if (u == nullptr) return "cannot be parsed (out of memory)";
  std::string problem;
  if (CURLUcode rc = curl_url_set(u, CURLUPART_URL, url.c_str(), 0); rc != CURLUE_OK) {
    problem = curl_url_strerror(rc);
  } else {
    char* host = nullptr;
    if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || host == nullptr || *host == '\0')
      problem = "no host";
    curl_free(host);
  }
  curl_url_cleanup(u);
  return problem;
}

std::string strip_slash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

bool is_region_name(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return true;
}

// "command:<command line>": the rest is the program's command line, so neither '@' nor '?'
// means anything here.
ModelSpec parse_command_spec(ModelSpec spec, std::string_view command, const std::string& file) {
  std::string error;
  auto words = split_command_words(std::string(command), &error);
  if (!words || words->empty())
    throw UserError(file, "model string '" + spec.text + "': command needs a command line, e.g. command:/usr/local/bin/agent --print" +
                              (error.empty() ? "" : " (" + error + ")"));
  spec.provider = "command";
  spec.protocol = ApiProtocol::Command;
  spec.model = std::string(command);
  spec.argv = std::move(*words);
  spec.key_optional = true;
  return spec;
}

}  // namespace

std::string bedrock_base_url(const std::string& region) { return "https://bedrock-runtime." + region + ".amazonaws.com"; }

std::string ModelSpec::endpoint() const {
  if (provider == "azure") {
    std::string url = base_url + "/openai/deployments/" + model + "/chat/completions";
    if (!api_version.empty()) url += "?api-version=" + api_version;
    return url;
  }
  if (provider == "gemini") return base_url + "/v1beta/models/" + model + ":generateContent";
  // Model ids hold ':' ("...-v1:0") and ARNs '/': one path segment, percent-encoded.
  if (provider == "bedrock") return base_url + "/model/" + uri_encode(model, /*keep_slash=*/false) + "/invoke";
  return base_url + (protocol == ApiProtocol::AnthropicMessages ? "/messages" : "/chat/completions");
}

bool ModelSpec::is_reasoning_model() const {
  if (protocol != ApiProtocol::OpenAiChat) return false;
  // OpenRouter names carry a vendor prefix ("openai/o3-mini").
  std::string_view m = model;
  if (auto slash = m.rfind('/'); slash != std::string_view::npos) m = m.substr(slash + 1);
  return starts_with(m, "o1") || starts_with(m, "o3") || starts_with(m, "o4") || starts_with(m, "gpt-5") ||
         starts_with(m, "deepseek-reasoner");
}

ModelSpec parse_model_spec(std::string_view text, const std::string& key_env_override, const std::string& file) {
  ModelSpec spec;
  spec.text = std::string(text);
  std::string_view rest = text;
  auto colon = rest.find(':');
  // "http://..." inside a bare name must not be read as a provider prefix.
  if (colon != std::string_view::npos && rest.substr(0, colon).find('@') == std::string_view::npos) {
    spec.provider = std::string(rest.substr(0, colon));
    rest = rest.substr(colon + 1);
    if (spec.provider == "command") return parse_command_spec(std::move(spec), rest, file);
  } else {
    spec.provider = starts_with(rest, "claude") ? "anthropic" : "openai";
  }
  std::string location;
  if (auto at = rest.find('@'); at != std::string_view::npos) {
    location = std::string(rest.substr(at + 1));
    rest = rest.substr(0, at);
  }
  spec.model = std::string(rest);
  if (spec.model.empty()) throw UserError(file, "model string '" + spec.text + "' names no model");

  if (spec.provider == "openai") {
    spec.base_url = "https://api.openai.com/v1";
    spec.key_env = "OPENAI_API_KEY";
  } else if (spec.provider == "anthropic") {
    spec.base_url = "https://api.anthropic.com/v1";
    spec.key_env = "ANTHROPIC_API_KEY";
    spec.protocol = ApiProtocol::AnthropicMessages;
  } else if (spec.provider == "deepseek") {
    spec.base_url = "https://api.deepseek.com/v1";
    spec.key_env = "DEEPSEEK_API_KEY";
  } else if (spec.provider == "openrouter") {
    spec.base_url = "https://openrouter.ai/api/v1";
    spec.key_env = "OPENROUTER_API_KEY";
  } else if (spec.provider == "azure") {
    spec.key_env = "AZURE_OPENAI_API_KEY";
    if (location.empty())
      throw UserError(file, "model string '" + spec.text + "': azure needs <deployment>@<endpoint>?api-version=...");
  } else if (spec.provider == "local") {
    spec.key_env = "LOCAL_LLM_API_KEY";
    spec.key_optional = true;
    if (location.empty())
      throw UserError(file, "model string '" + spec.text + "': local needs <model>@<base url>, e.g. local:qwen2.5-coder@http://127.0.0.1:8000/v1");
  } else if (spec.provider == "gemini") {
    spec.base_url = "https://generativelanguage.googleapis.com";
    spec.key_env = "GEMINI_API_KEY";
    spec.key_env_fallback = "GOOGLE_API_KEY";
    spec.protocol = ApiProtocol::Gemini;
  } else if (spec.provider == "bedrock") {
    spec.key_env = "AWS_SECRET_ACCESS_KEY";  // with AWS_ACCESS_KEY_ID (bedrock.hpp)
    spec.protocol = ApiProtocol::AnthropicMessages;
    if (!location.empty() && !starts_with(location, "http://") && !starts_with(location, "https://")) {
      if (!is_region_name(location))
        throw UserError(file, "model string '" + spec.text + "': '" + location + "' is neither an AWS region nor an http(s) URL");
      spec.region = location;
      location.clear();
    }
    if (!spec.region.empty()) spec.base_url = bedrock_base_url(spec.region);
  } else {
    throw UserError(file, "model string '" + spec.text + "': unknown provider '" + spec.provider +
                              "' (openai, anthropic, azure, deepseek, openrouter, local, gemini, bedrock, command)");
  }
  if (!location.empty()) {
    if (!starts_with(location, "http://") && !starts_with(location, "https://"))
      throw UserError(file, "model string '" + spec.text + "': '" + location + "' is not an http(s) URL");
    if (auto q = location.find('?'); q != std::string::npos) {
      std::string query = location.substr(q + 1);
      location = location.substr(0, q);
      auto param = [&](const std::string& key) {
        std::string value;
        if (auto p = query.find(key + "="); p != std::string::npos) {
          value = query.substr(p + key.size() + 1);
          if (auto amp = value.find('&'); amp != std::string::npos) value.resize(amp);
        }
        return value;
      };
      spec.api_version = param("api-version");
      if (spec.provider == "bedrock") spec.region = param("region");
    }
    spec.base_url = strip_slash(location);
    if (std::string problem = url_problem(spec.base_url); !problem.empty())
      throw UserError(file, "model string '" + spec.text + "': '" + location + "' is not a valid URL (" + problem + ")");
  }
  if (spec.provider == "azure" && spec.api_version.empty())
    throw UserError(file, "model string '" + spec.text + "': azure needs ?api-version=... after the endpoint");
  if (spec.provider == "bedrock" && !spec.region.empty() && !is_region_name(spec.region))
    throw UserError(file, "model string '" + spec.text + "': region '" + spec.region + "' is not an AWS region name");
  // api_key_env names one variable; Bedrock's credentials are a fixed set of AWS variables.
  if (!key_env_override.empty() && spec.provider != "bedrock") {
    spec.key_env = key_env_override;
    spec.key_env_fallback.clear();
  }
  return spec;
}

}  // namespace braid::llm
