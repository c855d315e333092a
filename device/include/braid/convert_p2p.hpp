// Host-side launch rules of `braid convert`'s replacements, shared by the generated prelude
// (device/include/braid/converted/prelude.cuh) and the CPU test that simulates converted programs
// (tests/convert/launch_shape_test.cpp). Plain C++, no CUDA.
//
// Why converted programs cannot deadlock on launch shape:
// - Collectives (all-reduce, all-gather, reduce-scatter, broadcast, reduce, gather, scatter,
//   all-to-all) synchronise CTA k of every rank on LSA barrier index site*kBarriersPerSite + k.
//   NCCL requires every rank to call a collective with the same count, type and root, so
//   rule_ctas() of the same arguments gives every rank the same CTA count: every barrier index
//   that one rank waits on, every other rank arrives at.
// - Point-to-point calls use no world barrier. A message is matched pairwise, like NCCL does: the
//   k-th send from a to b meets the k-th receive on b from a (per-pair sequence numbers from
//   P2pSequencer). The receiver posts (window, offset, seq) in its mailbox without waiting, the
//   sender waits only for that posting, pushes, and signals seq; the receiver waits only for the
//   signal. No rank waits for a third rank, so ranks that only receive, only send, send nothing
//   (an empty group launches nothing) or move different volumes cannot block each other, and the
//   launch shape (p2p_ctas) does not depend on the volume at all.
// - Launches of one p2p site on two streams (a helper given either) may overlap on a rank: each
//   stream has its own plan memory, messages still meet by per-pair order, and a receiver posts
//   into a mailbox slot only once the slot's previous message is done.
#pragma once
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace braid::convert_p2p {

constexpr int kSlots = 256;        // postings in flight per (sender, receiver) pair
constexpr int kP2pCtas = 16;       // CTAs of a p2p launch unless the site's knob says otherwise
constexpr int kMaxP2pOps = 1024;   // sends + receives in one group (the plan lives in device memory)

// CTAs of a collective's rule launch: a function of the call's size only (the same on every rank).
inline int rule_ctas(std::size_t bytes, std::size_t min_chunk, int sms, int barriers_per_site) {
  const std::size_t want = (bytes + min_chunk - 1) / min_chunk;
  const int cap = std::min<int>(sms > 0 ? sms : 32, barriers_per_site);
  return (int)std::max<std::size_t>(1, std::min<std::size_t>(want, (std::size_t)cap));
}

// CTAs of a p2p launch: the site's knob (a compile-time constant, the same on every rank) or the
// default, capped by the SMs; never a function of the bytes moved.
inline int p2p_ctas(int knob, int sms) {
  const int want = knob > 0 ? knob : kP2pCtas;
  return std::max(1, std::min(want, sms > 0 ? sms : 32));
}

struct P2pRequest {
  bool is_send = false;
  int peer = 0;
  std::size_t bytes = 0;
};
struct P2pPlanned {
  bool is_send = false;
  int peer = 0;
  std::size_t bytes = 0;
  unsigned long long seq = 0;  // 1-based, per (direction, peer)
  int slot = 0;                // mailbox slot: (seq - 1) % kSlots
};

// A group cut into launches the plan and the mailbox hold, in issue order: a new launch starts
// when the next message would be one more than kSlots to its peer in its direction, or one more
// than kMaxP2pOps in all (a KV transfer of 504 pages to one peer: two launches). Each side cuts its
// own way, but messages to one peer keep their order across launches, and a launch ends only when
// its messages are done, so the k-th send of a pair still meets the k-th receive, and a mailbox
// slot is reused only after its previous message.
template <typename Op>
std::vector<std::vector<Op>> p2p_rounds(const std::vector<Op>& group) {
  std::vector<std::vector<Op>> rounds;
  std::vector<std::pair<std::pair<int, bool>, int>> per_pair;  // ((peer, is_send), messages in the round)
  for (const Op& op : group) {
    auto it = std::find_if(per_pair.begin(), per_pair.end(),
                           [&](const auto& e) { return e.first == std::make_pair(op.peer, op.is_send); });
    if (rounds.empty() || (it != per_pair.end() && it->second == kSlots) || (int)rounds.back().size() == kMaxP2pOps) {
      rounds.emplace_back();
      per_pair.clear();
      it = per_pair.end();
    }
    if (it == per_pair.end()) it = per_pair.insert(per_pair.end(), {{op.peer, op.is_send}, 0});
    ++it->second;
    rounds.back().push_back(op);
  }
  return rounds;
}

// Numbers messages per pair in issue order, on each side independently: what makes the k-th
// send from a to b meet the k-th receive on b from a without any other coordination.
class P2pSequencer {
 public:
  explicit P2pSequencer(int ranks = 0) : sent_(ranks > 0 ? ranks : 0, 0), received_(ranks > 0 ? ranks : 0, 0) {}
  // "" when the group can run as one launch, else why not (a peer out of range, more messages to
  // one peer than the mailbox holds, more operations than the plan holds).
  const char* plan(const std::vector<P2pRequest>& group, std::vector<P2pPlanned>& out) {
    out.clear();
    if ((int)group.size() > kMaxP2pOps) return "more sends and receives in one group than a converted plan holds";
    std::vector<int> per_peer_send(sent_.size(), 0), per_peer_recv(sent_.size(), 0);
    for (const P2pRequest& r : group) {
      if (r.peer < 0 || r.peer >= (int)sent_.size()) return "a peer outside the communicator";
      int& n = r.is_send ? per_peer_send[(std::size_t)r.peer] : per_peer_recv[(std::size_t)r.peer];
      if (++n > kSlots) return "more messages to one peer in one group than the mailbox holds";
    }
    for (const P2pRequest& r : group) {
      unsigned long long& counter = r.is_send ? sent_[(std::size_t)r.peer] : received_[(std::size_t)r.peer];
      ++counter;
      out.push_back(P2pPlanned{r.is_send, r.peer, r.bytes, counter, (int)((counter - 1) % kSlots)});
    }
    return "";
  }
  void resize(int ranks) {
    sent_.assign((std::size_t)ranks, 0);
    received_.assign((std::size_t)ranks, 0);
  }

 private:
  std::vector<unsigned long long> sent_, received_;
};

}  // namespace braid::convert_p2p
