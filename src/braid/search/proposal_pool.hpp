// ProposalPool: asks for proposals (a model's answer, its patch, the novelty judge) on threads of
// their own, so that slow model calls overlap each other and the evaluations.
//
//   submit(g, work) -> a free thread runs work (lowest generation first, at most `limit` at once)
//   -> finished(): the generations whose work returned, for the search thread to take up.
// A generation's first work may wait for the first work of the generations up to `after` to
// return (its prompt names their answers: search/proposal_builder.hpp). Work may also name when it
// is ready (its prompt's records have their diagnoses): until then it holds no slot, so a ready
// proposal behind it is asked meanwhile instead of a model slot waiting idle.
//
// Rate limits: work that met a 429 calls rate_limited(); the pool then lets fewer asks run at
// once (halved, regrown by one per answer) and holds every new ask until the server's
// Retry-After (or a doubling back-off) has passed: the candidates wait instead of failing.
// The pool owns no search state: work is a closure over one prepared proposal.
//
// Idle slots are accounted by cause (PoolStats::idle_s): a slot (one of max_parallel threads) not
// asking waits for earlier first asks, for diagnoses, for a rate limit, or for the search to
// submit work, whose reason the search names (set_idle_cause): what a run's throughput lost.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace braid {

struct PoolStats {
  int asking = 0;             // work running now (model requests in flight)
  int queued = 0;             // submitted, waiting for a thread or the rate limit
  double oldest_wait_s = 0;   // age of the oldest submitted, unfinished work
  double paused_s = 0;        // time left of a rate-limit pause
  int limit = 0;              // asks allowed at once now (below max_parallel after a 429)
  // Slot-seconds no ask ran, by cause ("earlier first asks out", "diagnoses awaited", "rate
  // limit", or the search's cause when nothing was submitted); `slot_s` is the slots' whole time.
  std::map<std::string, double> idle_s;
  double slot_s = 0;
};

// "idle 3% (81 of 2730 slot-seconds; 63s every generation proposed)": the causes of at least 5%
// of the idle time named.
std::string idle_summary(const PoolStats& s);

class ProposalPool {
 public:
  // `wake` is called (from a pool thread) whenever work finishes.
  ProposalPool(int max_parallel, std::function<void()> wake);
  ~ProposalPool();  // cancel() and join
  ProposalPool(const ProposalPool&) = delete;
  ProposalPool& operator=(const ProposalPool&) = delete;

  // `first`: generation's first work (its first ask); it starts only once the first work of
  // every generation <= `after` submitted before it has returned. Later work (an ask again)
  // waits for nothing.
  // `ready` (may be empty: always) is asked under the pool's lock, so it must not block.
  void submit(std::int64_t generation, std::function<void()> work, bool first = false, std::int64_t after = 0,
              std::function<bool()> ready = {});
  // Generations whose work has returned since the last call, ascending.
  std::vector<std::int64_t> take_finished();
  bool has_finished() const;
  // Drops queued work and lets running work end (it checks cancelled()); their generations are
  // never reported finished.
  void cancel();
  bool cancelled() const;

  // For work, before each model request: blocks while a rate-limit pause lasts (or until cancel).
  void await_clear();
  // For work whose request met a 429: `retry_after_s` < 0 when the server named no delay.
  void rate_limited(double retry_after_s);
  void answered();  // a request was answered: the allowed concurrency grows back

  PoolStats stats() const;
  // Why the search submits nothing now (while the queue is empty, idle slots are counted to it).
  void set_idle_cause(std::string cause);

 private:
  using Clock = std::chrono::steady_clock;
  struct Queued {
    std::function<void()> work;
    bool first = false;
    std::int64_t after = 0;
    std::function<bool()> ready;
  };
  void worker();
  // The lowest queued work free to start (queue_.end() if none); mu_ held.
  std::map<std::int64_t, Queued>::iterator startable();
  // Why a free thread has nothing to start; mu_ held.
  std::string idle_reason();

  const int max_parallel_;
  std::function<void()> wake_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::int64_t, Queued> queue_;                 // by generation
  std::set<std::int64_t> first_open_;                    // generations whose first work has not returned
  std::map<std::int64_t, Clock::time_point> submitted_;   // queued or running
  std::set<std::int64_t> finished_;
  int running_ = 0;
  int limit_;
  int consecutive_limits_ = 0;
  Clock::time_point paused_until_{};
  bool cancelled_ = false;
  std::string idle_cause_ = "nothing submitted";
  std::map<std::string, double> idle_s_;
  Clock::time_point created_ = Clock::now();
  std::vector<std::thread> threads_;
};

}  // namespace braid
