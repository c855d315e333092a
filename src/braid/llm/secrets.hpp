// API keys: read once from the environment, then removed from it so that no child process
// (compilers, candidate programs, mpirun) inherits them. Text that leaves braid (database,
// logs, replay files, reports) passes through redact() where a server might echo a key.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace braid::llm {

// The key held in `env_name`, taken from the environment on first use and kept in memory
// for later calls; nullopt when it was never set (or empty).
std::optional<std::string> take_api_key(const std::string& env_name);

// Every variable braid treats as a secret (the defaults and any taken so far); an evaluator
// builds a candidate's environment without them.
std::vector<std::string> secret_env_names();

// `text` with every key taken so far (and anything shaped like a bearer token of one of them)
// replaced by "[redacted]".
std::string redact(std::string text);

}  // namespace braid::llm
