#include "braid/search/remeasure.hpp"

#include <algorithm>
#include <chrono>
#include <future>

#include "braid/util/clock.hpp"
#include "braid/util/hash.hpp"
#include "braid/util/log.hpp"

namespace braid {

EvalResult remeasure(Evaluator& evaluator, const std::string& code, const std::string& label, std::uint64_t run_seed,
                     const std::filesystem::path& dir, const JobObserver& jobs) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // a half-written folder of an interrupted attempt
  std::filesystem::create_directories(dir);
  EvalRequest req;
  req.candidate_id = label;
  req.code = code;
  req.work_dir = dir;
  req.seed = hash64(label, run_seed);
  return evaluator.evaluate(req, jobs);
}

EvalResult remeasure_kept(SharedDatabase& db, const std::string& code, const std::string& label,
                          const std::function<EvalResult()>& measure, const std::function<bool()>& stopped) {
  const std::string code_hash = hash_hex(code);
  if (auto kept = db.with([&](ProgramDatabase& d) { return d.remeasurement(label, code_hash); })) {
    log::info("re-measurement {}: taken from the database (measured before the run stopped)", label);
    EvalResult r;
    r.failure = kept->failure;
    r.correct = kept->correct;
    r.combined_score = kept->combined_score;
    r.public_metrics = kept->public_metrics;
    r.level_reached = r.public_metrics.value("level_reached", 0);
    r.error_text = kept->error_text;
    return r;
  }
  EvalResult r = measure();
  if (stopped()) return r;  // killed by the stop: no measurement
  RemeasurementRecord rec;
  rec.label = label;
  rec.code_hash = code_hash;
  rec.failure = r.failure;
  rec.correct = r.correct;
  rec.combined_score = r.combined_score;
  rec.public_metrics = r.public_metrics;
  rec.error_text = r.error_text;
  rec.created_at = now_s();
  db.with([&](ProgramDatabase& d) { d.insert_remeasurement(rec); });
  return r;
}

EvalResult measure_beside(const std::function<EvalResult()>& measure, const std::function<void(int n)>& tick) {
  auto pending = std::async(std::launch::async, measure);
  for (int n = 1; pending.wait_for(std::chrono::milliseconds(200)) != std::future_status::ready; ++n) tick(n);
  return pending.get();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace braid
