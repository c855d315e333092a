#include "braid/search/evaluation_jobs.hpp"

#include <csignal>
#include <iterator>
#include <optional>

#include "braid/util/log.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {

void record_result(ProgramRecord& rec, const EvalResult& res) {
  rec.failure = res.failure;
  rec.correct = res.correct && res.failure == FailureKind::Ok;
  rec.combined_score = rec.correct ? res.combined_score : 0.0;
  rec.public_metrics = res.public_metrics;
  rec.public_metrics["level_reached"] = res.level_reached;
  rec.private_metrics = res.private_metrics;
  rec.error_text = res.error_text;
  rec.text_feedback = res.text_feedback;
  rec.timings = res.timings;
}

void EvaluationJobs::launch(std::function<ProgramRecord()> evaluate, std::function<void(ProgramRecord&)> follow_up,
                            bool store, std::function<void(const ProgramRecord&)> afterwards) {
  ++evaluating_;
  const std::uint64_t id = ++launches_;
  threads_[id] = std::thread([this, id, evaluate = std::move(evaluate), follow_up = std::move(follow_up), store,
                              afterwards = std::move(afterwards)] {
    ProgramRecord rec = evaluate();
    if (store && !discard_) db_.insert(rec);
    {
      std::lock_guard lock(mutex_);
      --evaluating_;
      slot_freed_ = true;
      cv_.notify_all();
    }
    if (follow_up && !discard_) follow_up(rec);
    std::optional<ProgramRecord> kept;
    if (afterwards) kept = rec;
    {
      std::lock_guard lock(mutex_);
      finished_.push_back(std::move(rec));
      cv_.notify_all();
    }
    if (afterwards) afterwards(*kept);
    std::lock_guard lock(mutex_);
    ended_.push_back(id);
  });
}

std::vector<ProgramRecord> EvaluationJobs::wait(std::chrono::milliseconds timeout, const std::function<bool()>& also) {
  std::deque<ProgramRecord> taken;
  std::vector<std::uint64_t> ended;
  {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return !finished_.empty() || slot_freed_ || also(); });
    slot_freed_ = false;
    taken.swap(finished_);
    ended.swap(ended_);
  }
  for (std::uint64_t id : ended)
    if (auto it = threads_.find(id); it != threads_.end()) {
      it->second.join();  // it has only its return left
      threads_.erase(it);
    }
  return std::vector<ProgramRecord>(std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end()));
}

void EvaluationJobs::wake() {
  std::lock_guard lock(mutex_);
  cv_.notify_all();
}

JobObserver EvaluationJobs::observer() {
  return [this](long pgid, bool running, const std::string& what) {
    db_.with([&](ProgramDatabase& db) {
      if (running) {
        db.add_job(pgid, process_start_marker(pgid), what);
        process_groups_[pgid] = what;
      } else {
        db.remove_job(pgid);
        process_groups_.erase(pgid);
      }
    });
  };
}

void EvaluationJobs::stop(Evaluator& evaluator) {
  discard_ = true;
  evaluator.cancel_jobs();
  db_.with([&](ProgramDatabase&) {
    for (auto& [pgid, what] : process_groups_) ::kill(-pid_t(pgid), SIGKILL);
  });
}

void EvaluationJobs::join_all() {
  for (auto& [g, t] : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

int end_orphaned_jobs(ProgramDatabase& db) {
  int ended = 0;
  for (auto& [pgid, marker, what] : db.jobs()) {
    if (kill_process_group_if_alive(pgid, marker)) {
      log::warn("ended orphaned process group {} ({}) left by an earlier braid", pgid, what);
      ++ended;
    }
    db.remove_job(pgid);
  }
  return ended;
}

}  // namespace braid
