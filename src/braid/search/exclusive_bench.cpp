#include "braid/search/exclusive_bench.hpp"

#include <mutex>

namespace braid {
namespace {

class OneAtATime : public Evaluator {
 public:
  explicit OneAtATime(std::unique_ptr<Evaluator> inner) : inner_(std::move(inner)) {}
  EvalResult evaluate(const EvalRequest& request, const JobObserver& jobs) override {
    std::lock_guard lock(mutex_);
    return inner_->evaluate(request, jobs);
  }
  std::string describe() const override { return inner_->describe() + " (evaluations one at a time: bench_exclusive)"; }
  std::string status_note() const override { return inner_->status_note(); }
  void attach_run(ProgramDatabase& db, const std::filesystem::path& results_dir) override {
    inner_->attach_run(db, results_dir);
  }
  void cancel_jobs() override { inner_->cancel_jobs(); }

 private:
  std::unique_ptr<Evaluator> inner_;
  std::mutex mutex_;
};

}  // namespace

bool evaluations_exclusive(const json& section) {
  // The GPU cascade leases the node for its bench level itself.
  if (section.value("kind", std::string()) == "gpu") return false;
  // Slurm places each evaluation in its own allocation; node exclusivity is Slurm's to grant
  // (`sbatch_args: [--exclusive]`), and a lock here would serialise the whole cluster.
  if (section.contains("slurm")) return false;
  return section.value("bench_exclusive", true);
}

std::unique_ptr<Evaluator> with_exclusive_bench(std::unique_ptr<Evaluator> inner, const json& section) {
  if (!inner || !evaluations_exclusive(section)) return inner;
  return std::make_unique<OneAtATime>(std::move(inner));
}

}  // namespace braid
