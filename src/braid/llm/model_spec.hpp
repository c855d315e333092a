// Model strings name a provider, a model and (optionally) where to reach it:
//
//   openai:gpt-4.1-mini                       OpenAI chat completions, OPENAI_API_KEY
//   anthropic:claude-sonnet-4-5               Anthropic Messages API, ANTHROPIC_API_KEY
//   azure:<deployment>@<endpoint>?api-version=2024-10-21   api-key header, AZURE_OPENAI_API_KEY
//   deepseek:deepseek-chat                    OpenAI protocol, DEEPSEEK_API_KEY
//   openrouter:<vendor>/<model>               OpenAI protocol, OPENROUTER_API_KEY
//   local:qwen2.5-coder@http://127.0.0.1:8000/v1   vLLM, SGLang, llama.cpp, Ollama (no key needed)
//   gemini:gemini-2.5-pro                     Gemini generateContent, GEMINI_API_KEY (or GOOGLE_API_KEY)
//   bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0[@us-east-1]   Anthropic on AWS Bedrock, signed
//                                             with SigV4 from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
//                                             (/ AWS_SESSION_TOKEN); region after '@', else AWS_REGION
//                                             or AWS_DEFAULT_REGION
//   command:/path/to/agent --flag             the prompt on stdin, the answer on stdout (no '@' parsing:
//                                             the rest is the command line, split like a shell would)
//
// Any provider takes "@<base url>" to point at another server speaking its protocol. A bare
// name ("gpt-4.1-mini", "claude-sonnet-4-5") is read as openai: or anthropic: by its prefix.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace braid::llm {

// Bedrock speaks AnthropicMessages (its body differs: no model, anthropic_version); Command is
// not HTTP (command_client.hpp).
enum class ApiProtocol { OpenAiChat, AnthropicMessages, Gemini, Command };

struct ModelSpec {
  std::string text;         // the string as given, also the model's name in logs and the database
  std::string provider;     // openai | anthropic | azure | deepseek | openrouter | local | gemini | bedrock | command
  std::string model;        // model id, or the Azure deployment
  std::string base_url;     // without a trailing slash
  std::string api_version;  // Azure only
  ApiProtocol protocol = ApiProtocol::OpenAiChat;
  std::string key_env;      // environment variable holding the key; "" = no key needed
  bool key_optional = false;  // local servers usually run without a key
  std::string key_env_fallback;  // read when key_env is unset (gemini: GOOGLE_API_KEY)
  std::string region;            // bedrock: from the model string; "" = from the environment
  std::vector<std::string> argv;  // command: the program and its arguments

  // Full URL of the completion endpoint.
  std::string endpoint() const;
  // Reasoning models (o1/o3/o4/gpt-5 families) take max_completion_tokens and no temperature.
  bool is_reasoning_model() const;
};

// https://bedrock-runtime.<region>.amazonaws.com
std::string bedrock_base_url(const std::string& region);

// Throws UserError(file, ...) for a string that names no known provider or lacks a model.
// `key_env_override` (config key api_key_env) replaces the provider's default variable.
ModelSpec parse_model_spec(std::string_view text, const std::string& key_env_override = "",
                           const std::string& file = "");

}  // namespace braid::llm
