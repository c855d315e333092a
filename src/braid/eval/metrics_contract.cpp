// The CUCo/ShinkaEvolve contract: <dir>/correct.json {"correct", "error"} and
// <dir>/metrics.json {"combined_score", "public", "private", "text_feedback"}.
#include <cmath>

#include "braid/eval/evaluator.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

// Parsed JSON object of `path`, or nullopt with `problem` set.
std::optional<json> read_json_object(const std::filesystem::path& path, std::string& problem) {
  auto text = try_read_file(path);
  if (!text) {
    problem = "no " + path.filename().string() + " was written";
    return std::nullopt;
  }
  json value = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded() || !value.is_object()) {
    problem = path.filename().string() + " is not a JSON object";
    return std::nullopt;
  }
  return value;
}

void fail(EvalResult& result, FailureKind kind, const std::string& problem) {
  result.failure = kind;
  result.correct = false;
  result.combined_score = 0.0;
  if (!result.error_text.empty()) result.error_text += "\n";
  result.error_text += problem;
}

}  // namespace

void read_metrics_contract(const std::filesystem::path& dir, FailureKind on_missing, EvalResult& result) {
  std::string problem;
  auto correct = read_json_object(dir / "correct.json", problem);
  if (!correct) return fail(result, on_missing, problem);
  auto flag = correct->find("correct");
  if (flag == correct->end() || !flag->is_boolean())
    return fail(result, on_missing, "correct.json has no boolean \"correct\"");

  // Metrics are read even for an incorrect program: its feedback helps the next mutation.
  auto metrics = read_json_object(dir / "metrics.json", problem);
  if (metrics) {
    if (auto p = metrics->find("public"); p != metrics->end() && p->is_object()) result.public_metrics = *p;
    if (auto p = metrics->find("private"); p != metrics->end() && p->is_object()) result.private_metrics = *p;
    if (auto f = metrics->find("text_feedback"); f != metrics->end() && f->is_string()) result.text_feedback = *f;
  }

  if (!flag->get<bool>()) {
    std::string error = "verification failed";
    if (auto e = correct->find("error"); e != correct->end() && e->is_string() && !e->get<std::string>().empty())
      error = e->get<std::string>();
    return fail(result, FailureKind::VerifyFailed, error);
  }
  if (!metrics) return fail(result, on_missing, problem);
  auto score = metrics->find("combined_score");
  if (score == metrics->end() || !score->is_number())
    return fail(result, on_missing, "metrics.json has no numeric \"combined_score\"");
  double value = score->get<double>();
  if (!std::isfinite(value)) return fail(result, on_missing, "metrics.json's combined_score is not finite");
  result.correct = true;
  result.combined_score = value;
}

std::optional<Verdict> read_verdict(const std::filesystem::path& results) {
  auto text = try_read_file(results / "correct.json");
  if (!text) return std::nullopt;
  json value = json::parse(*text, nullptr, false);
  if (value.is_discarded() || !value.is_object() || !value.contains("correct") || !value["correct"].is_boolean())
    return std::nullopt;
  Verdict v;
  v.correct = value["correct"].get<bool>();
  if (value.contains("error") && value["error"].is_string()) v.error = value["error"].get<std::string>();
  if (!v.correct && v.error.empty()) v.error = "verification failed";
  return v;
}

}  // namespace braid
