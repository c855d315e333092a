// Errors that end an operation. Expected failures (a candidate that does not build, an LLM
// answer that does not parse) are values, never exceptions; see eval/ and mutate/.
#pragma once
#include <stdexcept>
#include <string>

namespace braid {

// Bad input from the user (config, workload, seed): braid prints one line
// "<file>: <problem>" and exits with code 2 before writing anything.
class UserError : public std::runtime_error {
 public:
  UserError(std::string file, const std::string& problem)
      : std::runtime_error(file.empty() ? problem : file + ": " + problem), file_(std::move(file)) {}
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// A failure of braid's own environment (database unwritable, fork failed): exit code 1.
class SystemError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace braid
