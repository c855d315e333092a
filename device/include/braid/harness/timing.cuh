// braid/harness/timing.cuh -- figures over ranks: the per-iteration makespan (slowest rank) and
// the median a phase is scored by. Part of braid/harness.cuh, whose contract applies.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
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

}  // namespace braid::dev
