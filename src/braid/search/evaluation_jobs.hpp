// The runner's evaluations in flight: one thread per candidate (the runner launches at most
// max_parallel_jobs). Each stores its candidate the moment its evaluation ends, so a kill -9
// right after loses nothing, gives its evaluation slot back, runs the follow-up, hands the
// candidate back to the search thread, and then runs what comes after it (the LLM's text
// feedback: a model call must hold up neither a slot the evaluator could use nor the search). The
// process groups the
// evaluator starts are recorded in the jobs table while they run, so a later braid ends those a
// crash left behind (end_orphaned_jobs), and a stop kills them.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/eval/evaluator.hpp"
#include "braid/search/shared_database.hpp"

namespace braid {

// A candidate's record given its evaluation's outcome (a score only when correct).
void record_result(ProgramRecord& rec, const EvalResult& res);

class EvaluationJobs {
 public:
  explicit EvaluationJobs(SharedDatabase& db) : db_(db) {}
  ~EvaluationJobs() { join_all(); }
  EvaluationJobs(const EvaluationJobs&) = delete;
  EvaluationJobs& operator=(const EvaluationJobs&) = delete;

  // Runs `evaluate` on a thread of its own; the record it returns is stored (unless stopped),
  // its slot freed, then `follow_up` (when given, and not stopped) may add to it, it is handed
  // back by wait(), and `afterwards` (when given) runs on the same thread, stopped or not.
  // `store` false: an evaluation ahead of its candidate's turn, stored (or not) by the search.
  void launch(std::function<ProgramRecord()> evaluate, std::function<void(ProgramRecord&)> follow_up = {},
              bool store = true, std::function<void(const ProgramRecord&)> afterwards = {});
  // Waits up to `timeout` for finished evaluations, a freed slot, or for `also` to hold; joins
  // the finished threads and returns their records in the order they finished.
  std::vector<ProgramRecord> wait(std::chrono::milliseconds timeout, const std::function<bool()>& also);
  void wake();                                        // ends a wait early (another source of work has something)
  int running() const { return evaluating_.load(); }  // evaluations holding a slot

  // Records the process groups of an evaluation (running, or ended) for the evaluator.
  JobObserver observer();
  // Stop: no result counts from now on (a run we killed is not a result), and every process
  // group still running is killed.
  void stop(Evaluator& evaluator);
  bool stopped() const { return discard_; }
  void join_all();

 private:
  SharedDatabase& db_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<ProgramRecord> finished_;
  std::map<std::uint64_t, std::thread> threads_;  // by launch; joined once ended
  std::vector<std::uint64_t> ended_;              // launches whose thread has nothing left to do
  std::uint64_t launches_ = 0;
  std::map<long, std::string> process_groups_;  // pgid -> what; guarded by the database lock
  std::atomic<bool> discard_{false};
  std::atomic<int> evaluating_{0};
  bool slot_freed_ = false;  // since the last wait(); guarded by mutex_
};

// End the process groups a previous braid recorded as running (resume, start of a run).
int end_orphaned_jobs(ProgramDatabase& db);

}  // namespace braid
