#include "braid/pipeline/pipeline_state.hpp"

#include <ctime>

#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/hash.hpp"

namespace braid {

namespace fs = std::filesystem;

namespace {

std::string file_hash(const fs::path& p) {
  auto text = try_read_file(p);
  return text ? hash_hex(*text) : "";
}

}  // namespace

const std::vector<std::string>& pipeline_steps() {
  static const std::vector<std::string> steps = {"convert", "gate", "annotate", "workload", "record", "evolve"};
  return steps;
}

PipelineState::PipelineState(fs::path results) : results_(std::move(results)) {
  if (auto text = try_read_file(results_ / kPipelineStateFile)) {
    try {
      j_ = json::parse(*text);
    } catch (const std::exception& e) {
      throw UserError((results_ / kPipelineStateFile).string(), std::string("unreadable run state: ") + e.what());
    }
  } else {
    j_ = {{"version", 1}, {"steps", json::object()}};
  }
}

bool PipelineState::exists() const { return fs::exists(results_ / kPipelineStateFile); }

bool PipelineState::done(const std::string& step) const {
  const json* s = step_json(step);
  if (s == nullptr || !s->value("done", false)) return false;
  const json outputs = s->value("outputs", json::object());
  for (auto& [rel, hash] : outputs.items())
    if (file_hash(results_ / rel) != hash.get<std::string>()) return false;
  return true;
}

json PipelineState::info(const std::string& step) const {
  const json* s = step_json(step);
  return s ? s->value("info", json::object()) : json::object();
}

void PipelineState::finish(const std::string& step, const std::vector<std::string>& outputs, json info) {
  json out = json::object();
  for (const auto& rel : outputs) out[rel] = file_hash(results_ / rel);
  j_["steps"][step] = {
      {"done", true}, {"outputs", out}, {"info", std::move(info)}, {"finished_at", std::time(nullptr)}};
  save();
}

void PipelineState::reopen_from(const std::string& step) {
  bool later = false;
  for (const auto& s : pipeline_steps()) {
    if (s == step) later = true;
    if (later && j_["steps"].contains(s)) j_["steps"].erase(s);
  }
  save();
}

void PipelineState::save() { write_file_atomic(results_ / kPipelineStateFile, j_.dump(2) + "\n"); }

const json* PipelineState::step_json(const std::string& step) const {
  auto it = j_.find("steps");
  if (it == j_.end() || !it->contains(step)) return nullptr;
  return &(*it)[step];
}

}  // namespace braid
