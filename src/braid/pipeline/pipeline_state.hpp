// <results>/run_state.json of a `braid run` folder: each finished step with the hashes of its
// outputs, and the options the run was started with.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "braid/util/json.hpp"

namespace braid {

inline constexpr const char* kPipelineStateFile = "run_state.json";

// The steps of `braid run`, in order.
const std::vector<std::string>& pipeline_steps();

class PipelineState {
 public:
  // Reads <results>/run_state.json when it exists; UserError when it is unreadable.
  explicit PipelineState(std::filesystem::path results);
  json& root() { return j_; }
  const json& root() const { return j_; }
  bool exists() const;

  // Finished, and every output still has the hash it was written with.
  bool done(const std::string& step) const;
  json info(const std::string& step) const;
  void finish(const std::string& step, const std::vector<std::string>& outputs, json info = json::object());
  // A step that runs again makes every later step unfinished.
  void reopen_from(const std::string& step);
  void save();

 private:
  const json* step_json(const std::string& step) const;
  std::filesystem::path results_;
  json j_;
};

}  // namespace braid
