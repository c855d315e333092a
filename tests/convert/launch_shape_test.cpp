// Converted programs cannot deadlock on launch shape: per-rank call sequences of converted
// programs (pipelines with receive-only and send-only stages, gathers to one rank where some ranks
// send nothing, MoE exchanges with uneven and zero counts, rank-dependent ring volumes, all of
// them mixed with collectives) are lowered with the prelude's own launch rules
// (device/include/braid/convert_p2p.hpp: rule_ctas, p2p_ctas, P2pSequencer) and run on a model
// of the kernels' synchronisation: LSA barriers per (site, CTA) for collectives, pairwise
// posting/signal for p2p through mailbox slots, one or two streams per rank. Every scenario must finish on 2-8 ranks. The same
// simulator must find the deadlock of the former p2p lowering (world barriers, CTAs sized by the
// rank's own send volume, nothing launched for an empty group), so it is not blind.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "../../device/include/braid/convert_p2p.hpp"

namespace {

using braid::convert_p2p::P2pPlanned;
using braid::convert_p2p::P2pRequest;
using braid::convert_p2p::P2pSequencer;

constexpr int kSms = 132;
constexpr int kBarriersPerSite = 132;

// What a converted program calls, in stream order, on one rank.
struct ConvertedCall {
  enum Kind { Collective, P2pGroup } kind = Collective;
  int site = 0;
  std::size_t bytes = 0;              // collectives: the call's size (the same on every rank)
  std::vector<P2pRequest> requests;   // p2p groups (a lone send/recv is a group of one)
  int stream = 0;                     // 0 or 1: a rank's calls on two streams run side by side
};
using Program = std::vector<ConvertedCall>;  // one rank

// A kernel launch as the synchronisation model sees it.
struct Launch {
  bool p2p = false;
  int site = 0, ctas = 0;
  std::vector<P2pPlanned> ops;
  int stream = 0;
};

// The prelude's lowering (flush_p2p, the collective replacements).
std::vector<Launch> lower_current(const Program& prog, int ranks) {
  std::vector<Launch> out;
  P2pSequencer seq(ranks);
  for (const ConvertedCall& c : prog) {
    if (c.kind == ConvertedCall::Collective) {
      out.push_back(
          Launch{false, c.site, braid::convert_p2p::rule_ctas(c.bytes, 64 * 1024, kSms, kBarriersPerSite), {}, c.stream});
      continue;
    }
    if (c.requests.empty()) continue;  // flush_p2p launches nothing for an empty group
    for (const std::vector<P2pRequest>& round : braid::convert_p2p::p2p_rounds(c.requests)) {
      Launch l{true, c.site, braid::convert_p2p::p2p_ctas(0, kSms), {}, c.stream};
      const char* why = seq.plan(round, l.ops);
      EXPECT_STREQ(why, "");
      out.push_back(l);
    }
  }
  return out;
}

// The former lowering: a p2p group synchronised every CTA with a world barrier at its site, its
// CTA count sized by this rank's own send volume; an empty group launched nothing.
std::vector<Launch> lower_former(const Program& prog, int) {
  std::vector<Launch> out;
  for (const ConvertedCall& c : prog) {
    if (c.kind == ConvertedCall::Collective) {
      out.push_back(Launch{false, c.site, braid::convert_p2p::rule_ctas(c.bytes, 64 * 1024, kSms, kBarriersPerSite), {}});
      continue;
    }
    if (c.requests.empty()) continue;
    std::size_t sent = 0;
    for (const P2pRequest& r : c.requests) sent += r.is_send ? r.bytes : 0;
    out.push_back(Launch{false, c.site, braid::convert_p2p::rule_ctas(sent, 256 * 1024, kSms, kBarriersPerSite), {}});
  }
  return out;
}

// Runs every rank's launches, each stream in its order (a rank's streams run side by side); false
// when some rank can never finish. A receive posts into its mailbox slot ((seq - 1) % kSlots) once
// the slot's previous message is delivered (p2p_kernel); a posting that replaced one still unread
// would lose that message, which the model reports in `slots`.
struct SlotEvents {
  bool overwrote = false;    // a posting replaced one not yet delivered
  int deferred_postings = 0;  // postings that waited for their slot's previous message
};
bool completes(const std::vector<std::vector<Launch>>& launches, std::string* stuck, SlotEvents* slots = nullptr) {
  namespace p2p = braid::convert_p2p;
  const int n = (int)launches.size();
  constexpr int kStreams = 2;
  std::vector<std::vector<std::size_t>> lane((std::size_t)n * kStreams);  // (rank, stream) -> its launches
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < launches[(std::size_t)r].size(); ++i)
      lane[(std::size_t)(r * kStreams + launches[(std::size_t)r][i].stream)].push_back(i);
  std::vector<std::size_t> pos(lane.size(), 0);
  std::vector<bool> started(lane.size(), false);
  std::map<std::tuple<int, int, int>, int> arrivals;                 // (rank, site, cta) -> times arrived
  std::map<std::tuple<int, int, int>, unsigned long long> slot;      // (sender, receiver, slot) -> seq posted there
  std::set<std::tuple<int, int, unsigned long long>> delivered;      // pushed and signalled by the sender
  std::set<std::tuple<int, int, unsigned long long>> deferred;       // postings that had to wait for their slot
  const auto is_delivered = [&](int from, int to, unsigned long long seq) {
    return seq == 0 || delivered.count({from, to, seq}) > 0;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t ln = 0; ln < lane.size(); ++ln) {
      const int r = (int)ln / kStreams;
      if (pos[ln] >= lane[ln].size()) continue;
      const Launch& l = launches[(std::size_t)r][lane[ln][pos[ln]]];
      if (!started[ln]) {  // the launch begins: barrier arrivals
        started[ln] = true;
        progress = true;
        if (!l.p2p)
          for (int k = 0; k < l.ctas; ++k) ++arrivals[{r, l.site, k}];
      }
      bool done = true;
      if (!l.p2p) {
        for (int k = 0; k < l.ctas && done; ++k)
          for (int q = 0; q < n && done; ++q) done = arrivals[{q, l.site, k}] >= arrivals[{r, l.site, k}];
      } else {
        for (const P2pPlanned& op : l.ops) {
          if (op.is_send) {
            if (slot[{r, op.peer, op.slot}] == op.seq) delivered.insert({r, op.peer, op.seq});
            if (!is_delivered(r, op.peer, op.seq)) done = false;
            continue;
          }
          unsigned long long& here = slot[{op.peer, r, op.slot}];
          if (here < op.seq) {  // not posted yet: the slot's previous message must be delivered first
            const unsigned long long previous = op.seq > (unsigned long long)p2p::kSlots ? op.seq - p2p::kSlots : 0;
            if (is_delivered(op.peer, r, previous)) {
              if (!is_delivered(op.peer, r, here) && slots) slots->overwrote = true;
              here = op.seq;
              progress = true;
            } else if (deferred.insert({op.peer, r, op.seq}).second && slots) {
              ++slots->deferred_postings;
            }
          }
          if (!is_delivered(op.peer, r, op.seq)) done = false;
        }
      }
      if (done) {
        ++pos[ln];
        started[ln] = false;
        progress = true;
      }
    }
  }
  for (std::size_t ln = 0; ln < lane.size(); ++ln)
    if (pos[ln] < lane[ln].size() && stuck)
      *stuck += "rank " + std::to_string(ln / kStreams) + " stuck at launch " + std::to_string(lane[ln][pos[ln]]) + "; ";
  return stuck == nullptr || stuck->empty();
}

// Scenarios: per-rank programs of converted calls for `n` ranks.
std::vector<Program> pipeline(int n, std::mt19937& rng) {
  std::vector<Program> p((std::size_t)n);
  const int micro = 3;
  for (int mb = 0; mb < micro; ++mb)
    for (int r = 0; r < n; ++r) {
      (void)rng;
      if (r > 0) p[(std::size_t)r].push_back({ConvertedCall::P2pGroup, 0, 0, {{false, r - 1, (std::size_t)(mb + 1) << 18}}});
      if (r < n - 1) p[(std::size_t)r].push_back({ConvertedCall::P2pGroup, 1, 0, {{true, r + 1, (std::size_t)(mb + 1) << 18}}});
    }
  for (int r = 0; r < n; ++r) p[(std::size_t)r].push_back({ConvertedCall::Collective, 2, 4 << 20, {}});  // loss all-reduce
  return p;
}
std::vector<Program> gather_to_root(int n, std::mt19937& rng) {
  std::vector<Program> p((std::size_t)n);
  std::vector<std::size_t> counts((std::size_t)n);
  for (int r = 1; r < n; ++r) counts[(std::size_t)r] = (rng() % 3) * 2048 * 4;  // some ranks send nothing
  for (int r = 0; r < n; ++r) {
    ConvertedCall g{ConvertedCall::P2pGroup, 0, 0, {}};
    if (r == 0) {
      for (int q = 1; q < n; ++q)
        if (counts[(std::size_t)q]) g.requests.push_back({false, q, counts[(std::size_t)q]});
    } else if (counts[(std::size_t)r]) {
      g.requests.push_back({true, 0, counts[(std::size_t)r]});
    }
    p[(std::size_t)r].push_back(g);
    p[(std::size_t)r].push_back({ConvertedCall::Collective, 1, 1 << 10, {}});
  }
  return p;
}
std::vector<Program> moe_uneven(int n, std::mt19937& rng) {
  std::vector<std::vector<std::size_t>> count((std::size_t)n, std::vector<std::size_t>((std::size_t)n));
  for (auto& row : count)
    for (auto& c : row) c = (rng() % 4) * 64 * 512 * 4;  // zeros included
  std::vector<Program> p((std::size_t)n);
  for (int layer = 0; layer < 2; ++layer)
    for (int r = 0; r < n; ++r) {
      ConvertedCall g{ConvertedCall::P2pGroup, 0, 0, {}};
      for (int q = 0; q < n; ++q) {
        if (count[(std::size_t)r][(std::size_t)q]) g.requests.push_back({true, q, count[(std::size_t)r][(std::size_t)q]});
        if (count[(std::size_t)q][(std::size_t)r]) g.requests.push_back({false, q, count[(std::size_t)q][(std::size_t)r]});
      }
      p[(std::size_t)r].push_back(g);
      p[(std::size_t)r].push_back({ConvertedCall::Collective, 1, 8 << 20, {}});
    }
  return p;
}
std::vector<Program> ring_uneven(int n, std::mt19937& rng) {
  std::vector<std::size_t> block((std::size_t)n);
  for (auto& b : block) b = (1 + rng() % 64) * 4096;  // each rank's block has its own size
  std::vector<Program> p((std::size_t)n);
  for (int step = 0; step + 1 < n; ++step)
    for (int r = 0; r < n; ++r) {
      const int next = (r + 1) % n, prev = (r + n - 1) % n;
      p[(std::size_t)r].push_back(
          {ConvertedCall::P2pGroup, 0, 0, {{true, next, block[(std::size_t)((r - step + n) % n)]}, {false, prev, block[(std::size_t)((prev - step + n) % n)]}}});
    }
  return p;
}

// An interleaved pipeline (two model chunks per rank, virtual stage v = c * n + r) whose p2p helpers
// serve both directions: activations on stream 0, gradients on stream 1, one send site and one
// receive site whatever the stream; a rank may still be sending activations when its first
// gradients arrive.
std::vector<Program> interleaved_two_streams(int n, std::mt19937& rng) {
  std::vector<Program> p((std::size_t)n);
  const int chunks = 2, micro = 4, stages = chunks * n;
  const std::size_t bytes = (std::size_t)(1 + rng() % 8) << 16;
  for (int r = 0; r < n; ++r) {
    const int prev = (r + n - 1) % n, next = (r + 1) % n;
    for (int m = 0; m < micro; ++m)
      for (int c = 0; c < chunks; ++c) {
        const int v = c * n + r;
        if (v > 0) p[(std::size_t)r].push_back({ConvertedCall::P2pGroup, 1, 0, {{false, prev, bytes}}, 0});
        if (v < stages - 1) p[(std::size_t)r].push_back({ConvertedCall::P2pGroup, 0, 0, {{true, next, bytes}}, 0});
      }
    for (int m = micro - 1; m >= 0; --m)
      for (int c = chunks - 1; c >= 0; --c) {
        const int v = c * n + r;
        if (v < stages - 1) p[(std::size_t)r].push_back({ConvertedCall::P2pGroup, 1, 0, {{false, next, bytes}}, 1});
        if (v > 0) p[(std::size_t)r].push_back({ConvertedCall::P2pGroup, 0, 0, {{true, prev, bytes}}, 1});
      }
    p[(std::size_t)r].push_back({ConvertedCall::Collective, 2, 4 << 20, {}, 0});  // loss all-reduce
  }
  return p;
}

template <typename Lower>
std::vector<std::vector<Launch>> lower_all(const std::vector<Program>& progs, Lower lower) {
  std::vector<std::vector<Launch>> out;
  for (const Program& p : progs) out.push_back(lower(p, (int)progs.size()));
  return out;
}

}  // namespace

TEST(ConvertedLaunchShape, DeadlockFreeForUnevenVolumesOn2To8Ranks) {
  for (int n = 2; n <= 8; ++n)
    for (unsigned seed = 1; seed <= 20; ++seed) {
      std::mt19937 rng(seed * 131 + (unsigned)n);
      for (auto scenario : {pipeline, gather_to_root, moe_uneven, ring_uneven}) {
        std::string stuck;
        EXPECT_TRUE(completes(lower_all(scenario(n, rng), lower_current), &stuck)) << n << " ranks, seed " << seed << ": " << stuck;
      }
    }
}

TEST(ConvertedLaunchShape, OneSiteOnTwoStreamsCompletesOn2To8Ranks) {
  for (int n = 2; n <= 8; ++n)
    for (unsigned seed = 1; seed <= 5; ++seed) {
      std::mt19937 rng(seed * 17 + (unsigned)n);
      std::string stuck;
      SlotEvents slots;
      EXPECT_TRUE(completes(lower_all(interleaved_two_streams(n, rng), lower_current), &stuck, &slots))
          << n << " ranks, seed " << seed << ": " << stuck;
      EXPECT_FALSE(slots.overwrote);
    }
}

// One stream runs more than a mailbox's worth of messages ahead of the other, to the same peer:
// rank 1 takes message 1 from rank 0 on stream 0, behind a receive from rank 2 that comes only
// after a 600-message ping-pong between ranks 0 and 2, and messages 2-300 on stream 1. Message 257
// shares message 1's slot: its posting waits until message 1 is delivered (never replacing an
// unread posting), and everything finishes.
TEST(ConvertedLaunchShape, AStreamRunningAMailboxAheadWaitsForTheSlotsPreviousMessage) {
  namespace p2p = braid::convert_p2p;
  std::vector<Program> progs(3);
  for (int i = 0; i < 600; ++i) {
    progs[0].push_back({ConvertedCall::P2pGroup, 0, 0, {{i % 2 == 0, 2, 64}}, 0});
    progs[2].push_back({ConvertedCall::P2pGroup, 0, 0, {{i % 2 != 0, 0, 64}}, 0});
  }
  progs[0].push_back({ConvertedCall::P2pGroup, 1, 0, {{true, 1, 4096}}, 0});  // message 1
  for (int i = 2; i <= 300; ++i) progs[0].push_back({ConvertedCall::P2pGroup, 1, 0, {{true, 1, 4096}}, 1});
  progs[2].push_back({ConvertedCall::P2pGroup, 0, 0, {{true, 1, 64}}, 0});
  progs[1].push_back({ConvertedCall::P2pGroup, 0, 0, {{false, 2, 64}}, 0});
  progs[1].push_back({ConvertedCall::P2pGroup, 1, 0, {{false, 0, 4096}}, 0});  // message 1
  for (int i = 2; i <= 300; ++i) progs[1].push_back({ConvertedCall::P2pGroup, 1, 0, {{false, 0, 4096}}, 1});
  ASSERT_GT(300, p2p::kSlots);
  std::string stuck;
  SlotEvents slots;
  EXPECT_TRUE(completes(lower_all(progs, lower_current), &stuck, &slots)) << stuck;
  EXPECT_FALSE(slots.overwrote);
  EXPECT_GE(slots.deferred_postings, 1);  // message 257 (at least) waited for message 1
}

TEST(ConvertedLaunchShape, P2pLaunchShapeIgnoresVolume) {
  // The launch shape of a p2p group is the same whatever the group moves, including nothing.
  EXPECT_EQ(braid::convert_p2p::p2p_ctas(0, kSms), braid::convert_p2p::p2p_ctas(0, kSms));
  P2pSequencer a(4), b(4);
  std::vector<P2pPlanned> pa, pb;
  EXPECT_STREQ(a.plan({{true, 1, 16}}, pa), "");
  EXPECT_STREQ(b.plan({{true, 1, (std::size_t)1 << 30}}, pb), "");
  EXPECT_EQ(pa[0].seq, pb[0].seq);  // matching depends on order, not size
  // More messages to one peer than the mailbox holds in one plan is refused (flush_p2p cuts a group
  // into launches first: GroupsBeyondTheMailboxRunAsSeveralLaunches).
  std::vector<P2pRequest> many((std::size_t)braid::convert_p2p::kSlots + 1, P2pRequest{true, 2, 8});
  EXPECT_STRNE(a.plan(many, pa), "");
}

TEST(ConvertedLaunchShape, SimulatorFindsTheFormerLoweringsDeadlock) {
  std::mt19937 rng(7);
  std::string stuck;
  EXPECT_FALSE(completes(lower_all(pipeline(4, rng), lower_former), &stuck));
  EXPECT_NE(stuck.find("stuck"), std::string::npos);
  // Rank 2 has nothing to send this step: its group is empty.
  std::vector<Program> idle_rank(3);
  idle_rank[0] = {{ConvertedCall::P2pGroup, 0, 0, {{false, 1, 4096}}}};
  idle_rank[1] = {{ConvertedCall::P2pGroup, 0, 0, {{true, 0, 4096}}}};
  idle_rank[2] = {{ConvertedCall::P2pGroup, 0, 0, {}}};
  stuck.clear();
  EXPECT_FALSE(completes(lower_all(idle_rank, lower_former), &stuck));
  stuck.clear();
  EXPECT_TRUE(completes(lower_all(idle_rank, lower_current), &stuck)) << stuck;
}

// A group with more messages to one peer than the mailbox holds (a KV transfer of 504 pages), or
// more operations than a plan holds, runs as several launches (p2p_rounds), each within both
// limits; the sides cut differently (rank 1 also sends 900 messages to rank 2, in a shuffled
// order), and every rank still finishes.
TEST(ConvertedLaunchShape, GroupsBeyondTheMailboxRunAsSeveralLaunches) {
  namespace p2p = braid::convert_p2p;
  for (unsigned seed = 1; seed <= 10; ++seed) {
    std::mt19937 rng(seed);
    std::vector<Program> progs(3);
    std::vector<P2pRequest> r0(504, P2pRequest{true, 1, 4096}), r1, r2(900, P2pRequest{false, 1, 512});
    for (int i = 0; i < 504; ++i) r1.push_back(P2pRequest{false, 0, 4096});
    for (int i = 0; i < 900; ++i) r1.push_back(P2pRequest{true, 2, 512});
    // Any interleaving of the two peers' messages keeps each peer's own order.
    std::stable_partition(r1.begin(), r1.end(), [&](const P2pRequest&) { return rng() % 2 == 0; });
    progs[0] = {{ConvertedCall::P2pGroup, 0, 0, r0}};
    progs[1] = {{ConvertedCall::P2pGroup, 0, 0, r1}};
    progs[2] = {{ConvertedCall::P2pGroup, 0, 0, r2}};
    const auto launches = lower_all(progs, lower_current);
    for (const auto& rank : launches)
      for (const Launch& l : rank) {
        EXPECT_LE((int)l.ops.size(), p2p::kMaxP2pOps);
        std::map<std::pair<int, bool>, int> per_pair;
        for (const P2pPlanned& op : l.ops) EXPECT_LE(++per_pair[std::make_pair(op.peer, op.is_send)], p2p::kSlots);
      }
    EXPECT_GE(launches[0].size(), 2u);
    std::string stuck;
    EXPECT_TRUE(completes(launches, &stuck)) << "seed " << seed << ": " << stuck;
  }
}
