// braid/harness/timing.cuh -- figures over ranks: the per-iteration makespan (slowest rank) and
// the median a phase is scored by. Part of braid/harness.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "braid/harness/report.cuh"
#include "braid/runtime.cuh"

namespace braid::dev {

// The median of a phase's makespans (the figure it is scored by).
inline PhaseTiming timing_of(std::vector<double> mk) {
  PhaseTiming t;
  t.makespan_ms = mk;
  if (mk.empty()) return t;
  std::sort(mk.begin(), mk.end());
  const size_t m = mk.size();
  t.median_ms = m % 2 ? mk[m / 2] : 0.5 * (mk[m / 2 - 1] + mk[m / 2]);
  return t;
}

// Agrees on the count of figures over ranks (a rank that failed early has none), then the
// per-iteration maximum over ranks: the makespan.
inline std::vector<double> makespans(const std::vector<double>& mine, ncclComm_t comm, cudaStream_t stream) {
  int64_t kk = (int64_t)mine.size();
  int64_t* dk = nullptr;
  BRAID_CUDA(cudaMalloc(&dk, sizeof(int64_t)));
  // Host-to-device copies on `stream`: a pageable cudaMemcpy may return before its DMA lands,
  // and a non-blocking stream does not wait for it.
  BRAID_CUDA(cudaMemcpyAsync(dk, &kk, sizeof(kk), cudaMemcpyHostToDevice, stream));
  BRAID_NCCL(ncclAllReduce(dk, dk, 1, ncclInt64, ncclMin, comm, stream));
  BRAID_CUDA(cudaMemcpyAsync(&kk, dk, sizeof(kk), cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  cudaFree(dk);
  const size_t most = (size_t)kk;
  if (most == 0) return {};
  double* dd = nullptr;
  BRAID_CUDA(cudaMalloc(&dd, sizeof(double) * most));
  BRAID_CUDA(cudaMemcpyAsync(dd, mine.data(), sizeof(double) * most, cudaMemcpyHostToDevice, stream));
  BRAID_NCCL(ncclAllReduce(dd, dd, most, ncclFloat64, ncclMax, comm, stream));
  std::vector<double> mk(most);
  BRAID_CUDA(cudaMemcpyAsync(mk.data(), dd, sizeof(double) * most, cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  cudaFree(dd);
  return mk;
}

// One timed call: CUDA events, the host clock, and (for BRAID_HARNESS_TRACE) where the host clock
// went: recording the start event, run(), the joins and end event, waiting for the end event.
struct CallTiming {
  double event_ms = 0;  // events around run() and the joins, plus any device tail after the end event
  double tail_ms = 0;   // that tail (0 when the device was idle at the end event)
  double host_ms = 0;   // host clock from before the start event to the end of the device sync, less an idle sync
  double record_ms = 0, run_ms = 0, join_ms = 0, wait_ms = 0;
};

// BRAID_HARNESS_TRACE=1: per phase and size, the medians of each rank's calls on stderr, to see
// where events and the host clock part (a host clock above the events by a constant time slice:
// another process on the GPU).
class CallTrace {
 public:
  static bool enabled() {
    static const bool on = std::getenv("BRAID_HARNESS_TRACE") != nullptr;
    return on;
  }
  void add(int phase, const CallTiming& t) { calls_[phase].push_back(t); }
  void print(int rank, int64_t size, double idle_sync_ms) {
    static const char* const kNames[] = {"candidate", "baseline", "compute alone", "comm alone"};
    for (int p = 0; p < 4; ++p) {
      if (calls_[p].empty()) continue;
      std::vector<double> f[7];
      for (const CallTiming& t : calls_[p]) {
        const double v[7] = {t.event_ms, t.host_ms, t.record_ms, t.run_ms, t.join_ms, t.wait_ms, t.tail_ms};
        for (int k = 0; k < 7; ++k) f[k].push_back(v[k]);
      }
      std::fprintf(stderr,
                   "harness trace: rank %d size %lld %s (%zu calls, medians ms): events %.4f host %.4f | start record %.4f run() %.4f "
                   "joins+end %.4f wait %.4f sync %.4f (idle sync %.4f)\n",
                   rank, (long long)size, kNames[p], calls_[p].size(), median(f[0]), median(f[1]), median(f[2]), median(f[3]), median(f[4]),
                   median(f[5]), median(f[6]), idle_sync_ms);
      calls_[p].clear();
    }
  }

 private:
  static double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  std::vector<CallTiming> calls_[4];
};

}  // namespace braid::dev
