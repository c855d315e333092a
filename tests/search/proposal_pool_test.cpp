// ProposalPool: concurrency limit, lowest generation first, a first ask waiting for earlier first
// asks, work not ready yet, rate-limit pause and shrink, cancel.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "braid/search/proposal_pool.hpp"

namespace braid {
namespace {

using namespace std::chrono_literals;

// Work that blocks until released, recording how many ran at once and in which order they began.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int now = 0, most = 0;
  std::vector<std::int64_t> started;
  std::function<void()> work(std::int64_t g) {
    return [this, g] {
      std::unique_lock lock(mu);
      started.push_back(g);
      most = std::max(most, ++now);
      cv.wait(lock, [&] { return open; });
      --now;
    };
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

std::vector<std::int64_t> wait_finished(ProposalPool& pool, std::size_t n) {
  std::vector<std::int64_t> all;
  for (int i = 0; i < 400 && all.size() < n; ++i) {
    auto f = pool.take_finished();
    all.insert(all.end(), f.begin(), f.end());
    std::this_thread::sleep_for(10ms);
  }
  return all;
}

// Work not ready yet (a prompt whose records' diagnoses are still asked) holds no slot: the ready
// work behind it starts, and it starts once ready, though it is the lowest generation.
TEST(ProposalPool, WorkNotReadyHoldsNoSlot) {
  ProposalPool pool(1, nullptr);
  std::atomic<bool> ready{false};
  std::mutex mu;
  std::vector<std::int64_t> order;
  const auto record = [&](std::int64_t g) {
    return [&, g] {
      std::lock_guard lock(mu);
      order.push_back(g);
    };
  };
  pool.submit(1, record(1), false, 0, [&] { return ready.load(); });
  pool.submit(2, record(2));
  EXPECT_EQ(wait_finished(pool, 1), (std::vector<std::int64_t>{2}));
  ready = true;
  EXPECT_EQ(wait_finished(pool, 1), (std::vector<std::int64_t>{1}));
  std::lock_guard lock(mu);
  EXPECT_EQ(order, (std::vector<std::int64_t>{2, 1}));
}

TEST(ProposalPool, RunsAtMostTheLimitLowestGenerationFirst) {
  std::atomic<int> wakes{0};
  ProposalPool pool(2, [&] { ++wakes; });
  Gate gate;
  for (std::int64_t g : {5, 3, 9, 1, 7}) pool.submit(g, gate.work(g));
  std::this_thread::sleep_for(100ms);
  {
    std::lock_guard lock(gate.mu);
    EXPECT_EQ(gate.now, 2);
  }
  PoolStats s = pool.stats();
  EXPECT_EQ(s.asking, 2);
  EXPECT_EQ(s.queued, 3);
  EXPECT_GT(s.oldest_wait_s, 0.05);
  gate.release();
  auto done = wait_finished(pool, 5);
  EXPECT_EQ(done.size(), 5u);
  EXPECT_EQ(gate.most, 2);
  ASSERT_EQ(gate.started.size(), 5u);
  // The first two taken are whichever were queued when the threads woke; after them, ascending.
  EXPECT_TRUE(std::is_sorted(gate.started.end() - 3, gate.started.end()));
  std::vector<std::int64_t> sorted = gate.started;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::int64_t>{1, 3, 5, 7, 9}));
  EXPECT_GE(wakes.load(), 5);
  EXPECT_EQ(pool.stats().asking, 0);
}

// Generation 3's first ask names the first answers up to generation 1: it waits for generation
// 1's first ask (though a thread is free), while an ask again (generation 4) waits for nothing.
TEST(ProposalPool, AFirstAskWaitsForTheFirstAsksItNames) {
  ProposalPool pool(4, nullptr);
  Gate gate;
  pool.submit(1, gate.work(1), true, 0);
  pool.submit(2, gate.work(2), true, 0);
  pool.submit(3, gate.work(3), true, 1);
  pool.submit(4, gate.work(4));
  std::this_thread::sleep_for(100ms);
  {
    std::lock_guard lock(gate.mu);
    std::vector<std::int64_t> sorted = gate.started;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<std::int64_t>{1, 2, 4}));
  }
  EXPECT_EQ(pool.stats().queued, 1);
  gate.release();
  EXPECT_EQ(wait_finished(pool, 4).size(), 4u);
  std::lock_guard lock(gate.mu);
  ASSERT_EQ(gate.started.size(), 4u);
  EXPECT_EQ(gate.started.back(), 3);
}

TEST(ProposalPool, RateLimitPausesNewAsksAndShrinksTheLimit) {
  ProposalPool pool(8, nullptr);
  EXPECT_EQ(pool.stats().limit, 8);
  pool.rate_limited(0.3);  // the server's Retry-After
  EXPECT_EQ(pool.stats().limit, 4);
  EXPECT_GT(pool.stats().paused_s, 0.1);
  auto t0 = std::chrono::steady_clock::now();
  pool.await_clear();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
  pool.rate_limited(0);
  pool.rate_limited(0);
  EXPECT_EQ(pool.stats().limit, 1);
  pool.rate_limited(0);
  EXPECT_EQ(pool.stats().limit, 1);  // never below one
  for (int i = 0; i < 3; ++i) pool.answered();
  EXPECT_EQ(pool.stats().limit, 4);  // regrows by one per answer
  for (int i = 0; i < 10; ++i) pool.answered();
  EXPECT_EQ(pool.stats().limit, 8);
}

TEST(ProposalPool, CancelDropsQueuedWorkAndWakesAPause) {
  ProposalPool pool(1, nullptr);
  Gate gate;
  pool.submit(1, gate.work(1));
  pool.submit(2, gate.work(2));
  std::this_thread::sleep_for(50ms);
  pool.rate_limited(30);
  std::thread waiter([&] { pool.await_clear(); });
  pool.cancel();
  waiter.join();  // returns at once, not after 30 s
  EXPECT_TRUE(pool.cancelled());
  gate.release();
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(pool.take_finished().empty());  // cancelled work is never reported
  std::lock_guard lock(gate.mu);
  EXPECT_EQ(gate.started, std::vector<std::int64_t>{1});
}

// Slots not asking are accounted by cause: the search's own while nothing is submitted, the
// diagnoses a queued ask waits for, and the whole of it against the slots' time.
TEST(ProposalPool, IdleSlotsAreAccountedByCause) {
  ProposalPool pool(2, nullptr);
  pool.set_idle_cause("the index waits for its evaluation");
  std::this_thread::sleep_for(400ms);
  std::atomic<bool> ready{false};
  pool.submit(
      1, [] {}, false, 0, [&] { return ready.load(); });
  std::this_thread::sleep_for(400ms);
  ready = true;
  wait_finished(pool, 1);
  const PoolStats s = pool.stats();
  // Two slots idle for ~0.4 s each way; a wait begun before set_idle_cause (at most 50 ms) counts to
  // the cause before it, and a loaded machine may lose a little more.
  EXPECT_GE(s.idle_s.at("the index waits for its evaluation"), 0.4);
  EXPECT_GE(s.idle_s.at("diagnoses awaited"), 0.4);
  EXPECT_GE(s.slot_s, 1.6);
  EXPECT_NE(idle_summary(s).find("s diagnoses awaited"), std::string::npos) << idle_summary(s);
}

}  // namespace
}  // namespace braid
