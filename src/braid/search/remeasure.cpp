#include "braid/search/remeasure.hpp"

#include <algorithm>
#include <chrono>
#include <future>

#include "braid/util/hash.hpp"

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
