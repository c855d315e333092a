// make_client: the credentials each provider needs, read from the environment once.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

#include "braid/llm/client.hpp"
#include "braid/llm/command_client.hpp"
#include "braid/llm/secrets.hpp"
#include "braid/util/error.hpp"
#include "braid/util/subprocess.hpp"

namespace braid::llm {
namespace {

std::optional<std::string> take_secret(const std::string& name) {
  register_secret_env_name(name);  // no child process gets it, even if it was never set
  return take_api_key(name);
}

std::string region_from_environment() {
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return v;
  return "";
}

// Whether `program` names an executable file, directly or through PATH (as run_subprocess
// looks it up), so a mistyped agent is refused at start rather than failing every generation.
bool executable_exists(const std::string& program) {
  auto runnable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) return runnable(program);
  const char* path = std::getenv("PATH");
  std::string_view rest = path != nullptr && *path != '\0' ? path : "/usr/local/bin:/usr/bin:/bin";
  for (;;) {
    auto colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    if (runnable((dir.empty() ? "." : dir) + "/" + program)) return true;
    if (colon == std::string_view::npos) return false;
    rest.remove_prefix(colon + 1);
  }
}

std::unique_ptr<LlmClient> make_bedrock_client(ModelSpec spec, RetryPolicy policy, std::function<void(double)> sleep) {
  AwsCredentials aws;
  aws.access_key_id = take_secret("AWS_ACCESS_KEY_ID").value_or("");
  aws.secret_access_key = take_secret("AWS_SECRET_ACCESS_KEY").value_or("");
  aws.session_token = take_secret("AWS_SESSION_TOKEN").value_or("");
  for (auto [name, value] : {std::pair{"AWS_ACCESS_KEY_ID", &aws.access_key_id}, {"AWS_SECRET_ACCESS_KEY", &aws.secret_access_key}})
    if (value->empty())
      throw UserError(name, "is not set; " + spec.text +
                                " needs AWS credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, and AWS_SESSION_TOKEN for temporary ones)");
  if (spec.region.empty()) spec.region = region_from_environment();
  if (spec.region.empty())
    throw UserError("AWS_REGION", "is not set; " + spec.text + " needs a region (AWS_REGION, AWS_DEFAULT_REGION or bedrock:<model>@<region>)");
  if (spec.base_url.empty()) spec.base_url = bedrock_base_url(spec.region);
  return make_http_client(spec, "", policy, std::move(sleep), std::move(aws));
}

}  // namespace

std::unique_ptr<LlmClient> make_client(const ModelSpec& spec, RetryPolicy policy, std::function<void(double)> sleep) {
  if (spec.protocol == ApiProtocol::Command) {
    if (!executable_exists(spec.argv.at(0)))
      throw UserError(spec.text, "'" + spec.argv[0] + "' is not an executable file (nor found in PATH)");
    return make_command_client(spec, policy, std::move(sleep));
  }
  if (spec.provider == "bedrock") return make_bedrock_client(spec, policy, std::move(sleep));
  std::optional<std::string> key = take_secret(spec.key_env);
  if (!key && !spec.key_env_fallback.empty()) key = take_secret(spec.key_env_fallback);
  if (!key && !spec.key_optional)
    throw UserError(spec.key_env, "is not set; it must hold the API key for " + spec.text +
                                      (spec.key_env_fallback.empty() ? "" : " (or set " + spec.key_env_fallback + ")"));
  return make_http_client(spec, key.value_or(""), policy, std::move(sleep));
}

}  // namespace braid::llm
