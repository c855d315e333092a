// The command: provider: any program (an agent CLI the user has) answers a request. The prompt
// goes to its stdin as plain text, the answer is what it prints on stdout.
//
// The program runs through run_subprocess (util/subprocess.hpp): its own process group, ended
// (SIGTERM, then SIGKILL) after the request timeout (kind timeout, retried like an HTTP timeout)
// or on Ctrl-C; stdout capped at the HTTP answer cap (kind too_large); an environment without
// braid's secrets (every *_API_KEY, *_TOKEN, AWS credential and key variable braid has read).
// A non-zero exit or a signal is kind command_failed (not retried) with the first stderr line.
// There is no token count: tokens and cost are recorded as 0.
#pragma once
#include <functional>
#include <memory>

#include "braid/llm/client.hpp"

namespace braid::llm {

// The text on the program's stdin: the system prompt and each message under a header line of
// its own ("===== SYSTEM =====", "===== USER =====", "===== ASSISTANT =====").
std::string render_command_prompt(const LlmRequest& request);

std::unique_ptr<LlmClient> make_command_client(const ModelSpec& spec, RetryPolicy policy,
                                               std::function<void(double)> sleep = {});

}  // namespace braid::llm
