#include "braid/llm/command_client.hpp"

#include <fmt/format.h>

#include "braid/llm/http.hpp"
#include "braid/llm/secrets.hpp"
#include "braid/util/subprocess.hpp"
#include "braid/util/text.hpp"

namespace braid::llm {
namespace {

std::string first_line(const std::string& text) {
  std::string t = trimmed(text);
  std::string line = t.substr(0, t.find('\n'));
  return std::string(utf8_prefix(line, 300));
}

class CommandLlmClient final : public LlmClient {
 public:
  CommandLlmClient(ModelSpec spec, RetryPolicy policy, std::function<void(double)> sleep)
      : spec_(std::move(spec)), policy_(policy), sleep_(std::move(sleep)) {}

  const std::string& model() const override { return spec_.text; }

  LlmResponse complete(const LlmRequest& request) override {
    LlmResponse out;
    out.model = spec_.text;
    SubprocessOptions o;
    o.argv = spec_.argv;
    o.stdin_text = render_command_prompt(request);
    o.env_add = {{"BRAID_LLM_PURPOSE", request.purpose}};
    o.secret_env_names = secret_env_names();
    o.timeout_s = policy_.timeout_s;
    o.output_cap_bytes = policy_.limits.max_body_bytes;
    o.stop = &cancel_flag();
    return complete_with_retries(spec_.text, "", policy_, sleep_, out,
                                 [&](const LlmResponse& base) { return attempt(o, base); });
  }

 private:
  Attempt attempt(const SubprocessOptions& o, const LlmResponse& base) const {
    Attempt a;
    if (requests_cancelled()) {
      a.kind = "cancelled";
      a.message = "cancelled";
      return a;
    }
    SubprocessResult r = run_subprocess(o);
    if (!r.started) {
      a.kind = "command_failed";
      a.message = "command " + r.describe_end();
    } else if (r.stopped) {
      a.kind = "cancelled";
      a.message = "cancelled";
    } else if (r.timed_out) {
      a.kind = "timeout";
      a.message = fmt::format("no answer within {:.1f}s (the command's process group was killed)", policy_.timeout_s);
    } else if (!r.succeeded()) {
      a.kind = "command_failed";
      std::string err = first_line(r.stderr_text);
      a.message = "command ended with " + r.describe_end() + (err.empty() ? "" : ": " + err);
    } else if (r.stdout_bytes > o.output_cap_bytes) {
      a.kind = "too_large";
      a.message = fmt::format("answer larger than {} MiB ({} bytes on stdout)", o.output_cap_bytes >> 20, r.stdout_bytes);
    } else {
      a.response = base;
      a.response.text = valid_utf8(r.stdout_text);
      a.response.finish_reason = "exit 0";
      classify_answer_text(a.response);
    }
    return a;
  }

  ModelSpec spec_;
  RetryPolicy policy_;
  std::function<void(double)> sleep_;
};

}  // namespace

std::string render_command_prompt(const LlmRequest& request) {
  std::string text;
  if (!request.system.empty()) text += "===== SYSTEM =====\n" + request.system + "\n\n";
  for (auto& m : request.messages)
    text += (m.role == "assistant" ? "===== ASSISTANT =====\n" : "===== USER =====\n") + m.content + "\n\n";
  return text;
}

std::unique_ptr<LlmClient> make_command_client(const ModelSpec& spec, RetryPolicy policy,
                                               std::function<void(double)> sleep) {
  return std::make_unique<CommandLlmClient>(spec, policy, std::move(sleep));
}

}  // namespace braid::llm
