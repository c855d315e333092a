// Where does an overlapped GEMM + all-gather lose time against max(GEMM alone, all-gather alone)?
// One process, GPUs 0 and 1 (peer access), cuBLAS as in workloads/gemm_allgather (bf16, fp32
// accumulate, TN). Per size S (M = N = K = S), medians of `reps` timings taken as the harness
// does (device idle, start event, enqueue, end event: host enqueue time counts):
//   full           one GEMM of S rows
//   halves         two GEMMs of S/2 rows (local shard, then the remote one)
//   half_quarters  S/2 rows, then two of S/4
//   full_traffic   one GEMM while copy engines move S/2 rows each way between the GPUs
//   halves_traffic two half GEMMs under the same traffic
//   enqueue_late   one GEMM enqueued after 8 stream memory operations on another stream (what a
//                  program that issues its communication first pays)
//   full_b2b       one GEMM, GPU time only (5 back to back, total / 5)
//
//   bench_gemm_split_probe [--sizes 4096,8192,16384] [--reps 15]
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "braid/comm.cuh"
#include "braid/harness.cuh"

using namespace braid::dev;

#define PROBE_CUBLAS(x)                                                              \
  do {                                                                               \
    cublasStatus_t st_ = (x);                                                        \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                              \
      std::fprintf(stderr, "cublas error %d at %s:%d\n", (int)st_, __FILE__, __LINE__); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

static void gemm_rows(cublasHandle_t h, const __nv_bfloat16* a, int64_t rows, const __nv_bfloat16* w, __nv_bfloat16* c, int64_t K, int64_t N) {
  const float one = 1.0f, zero = 0.0f;
  PROBE_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)rows, (int)K, &one, w, CUDA_R_16BF, (int)K, a, CUDA_R_16BF, (int)K, &zero, c,
                            CUDA_R_16BF, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

int main(int argc, char** argv) {
  std::vector<int64_t> sizes{4096, 8192, 16384};
  int reps = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--sizes") {
      sizes.clear();
      std::stringstream in(argv[i + 1]);
      std::string item;
      while (std::getline(in, item, ',')) sizes.push_back(std::stoll(item));
    } else if (a == "--reps") {
      reps = std::stoi(argv[i + 1]);
    }
  }
  gpu_count_or_skip(2);  // exits 77 (skipped) with fewer than 2 GPUs
  const int64_t maxS = *std::max_element(sizes.begin(), sizes.end());
  const size_t mat = (size_t)maxS * maxS * 2;
  char* buf[2][2] = {};  // [gpu][0: send shard, 1: receive]
  for (int g = 1; g >= 0; --g) {
    BRAID_CUDA(cudaSetDevice(g));
    BRAID_CUDA(cudaDeviceEnablePeerAccess(1 - g, 0));
    BRAID_CUDA(cudaMalloc(&buf[g][0], mat / 2));
    BRAID_CUDA(cudaMalloc(&buf[g][1], mat / 2));
  }
  cudaStream_t traffic1;
  BRAID_CUDA(cudaStreamCreateWithFlags(&traffic1, cudaStreamNonBlocking));
  BRAID_CUDA(cudaSetDevice(0));
  __nv_bfloat16 *a, *w, *c;
  BRAID_CUDA(cudaMalloc(&a, mat));
  BRAID_CUDA(cudaMalloc(&w, mat));
  BRAID_CUDA(cudaMalloc(&c, mat));
  fill_random_kernel<><<<1024, 256>>>(a, (size_t)maxS * maxS, (int)DType::BF16, 1);
  fill_random_kernel<><<<1024, 256>>>(w, (size_t)maxS * maxS, (int)DType::BF16, 2);
  cudaStream_t s, side, traffic0;
  BRAID_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  BRAID_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  BRAID_CUDA(cudaStreamCreateWithFlags(&traffic0, cudaStreamNonBlocking));
  cublasHandle_t h;
  PROBE_CUBLAS(cublasCreate(&h));
  PROBE_CUBLAS(cublasSetStream(h, s));
  uint32_t* flag = nullptr;
  BRAID_CUDA(cudaMalloc(&flag, 64));
  BRAID_CUDA(cudaMemset(flag, 0, 64));
  StreamMemOps memops;
  cudaEvent_t e0, e1, fork;
  BRAID_CUDA(cudaEventCreate(&e0));
  BRAID_CUDA(cudaEventCreate(&e1));
  BRAID_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  BRAID_CUDA(cudaDeviceSynchronize());

  auto time_op = [&](auto&& op, int per = 1) {
    std::vector<double> t;
    for (int r = 0; r < 3 + reps; ++r) {
      BRAID_CUDA(cudaDeviceSynchronize());
      BRAID_CUDA(cudaSetDevice(1));
      BRAID_CUDA(cudaDeviceSynchronize());
      BRAID_CUDA(cudaSetDevice(0));
      BRAID_CUDA(cudaEventRecord(e0, s));
      op();
      BRAID_CUDA(cudaEventRecord(e1, s));
      BRAID_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      BRAID_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 3) t.push_back(ms / per);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  auto traffic = [&](int64_t S) {
    const size_t bytes = (size_t)(S / 2) * S * 2;
    BRAID_CUDA(cudaEventRecord(fork, s));
    BRAID_CUDA(cudaStreamWaitEvent(traffic0, fork, 0));
    BRAID_CUDA(cudaMemcpyPeerAsync(buf[1][1], 1, buf[0][0], 0, bytes, traffic0));
    BRAID_CUDA(cudaSetDevice(1));
    BRAID_CUDA(cudaMemcpyPeerAsync(buf[0][1], 0, buf[1][0], 1, bytes, traffic1));
    BRAID_CUDA(cudaSetDevice(0));
  };
  std::printf("gemm split probe: reps %d, medians in ms (ratio to full)\n", reps);
  uint32_t epoch = 0;
  for (int64_t S : sizes) {
    const int64_t H = S / 2, Q = S / 4;
    const double full = time_op([&] { gemm_rows(h, a, S, w, c, S, S); });
    const double halves = time_op([&] {
      gemm_rows(h, a, H, w, c, S, S);
      gemm_rows(h, a + H * S, H, w, c + H * S, S, S);
    });
    const double hq = time_op([&] {
      gemm_rows(h, a, H, w, c, S, S);
      gemm_rows(h, a + H * S, Q, w, c + H * S, S, S);
      gemm_rows(h, a + (H + Q) * S, Q, w, c + (H + Q) * S, S, S);
    });
    const double full_tr = time_op([&] {
      traffic(S);
      gemm_rows(h, a, S, w, c, S, S);
    });
    const double halves_tr = time_op([&] {
      traffic(S);
      gemm_rows(h, a, H, w, c, S, S);
      gemm_rows(h, a + H * S, H, w, c + H * S, S, S);
    });
    const double late = time_op([&] {
      ++epoch;
      BRAID_CUDA(cudaEventRecord(fork, s));
      BRAID_CUDA(cudaStreamWaitEvent(side, fork, 0));
      for (int i = 0; i < 4; ++i) {
        memops.write(side, flag + i, epoch);
        memops.wait_geq(side, flag + i, epoch);
      }
      gemm_rows(h, a, S, w, c, S, S);
      BRAID_CUDA(cudaEventRecord(fork, side));
      BRAID_CUDA(cudaStreamWaitEvent(s, fork, 0));
    });
    const double b2b = time_op(
        [&] {
          for (int i = 0; i < 5; ++i) gemm_rows(h, a, S, w, c, S, S);
        },
        5);
    const double tr_alone = time_op([&] {
      traffic(S);
      BRAID_CUDA(cudaEventRecord(fork, traffic0));
      BRAID_CUDA(cudaStreamWaitEvent(s, fork, 0));
    });
    std::printf("S=%-6lld full %.4f | halves %.4f (%.3f) | half_quarters %.4f (%.3f) | full_traffic %.4f (%.3f) | halves_traffic %.4f (%.3f) | enqueue_late %.4f (%.3f) | full_b2b %.4f (%.3f) | traffic alone (gpu0 out) %.4f\n",
                (long long)S, full, halves, halves / full, hq, hq / full, full_tr, full_tr / full, halves_tr, halves_tr / full, late, late / full, b2b,
                b2b / full, tr_alone);
    std::fflush(stdout);
  }
  return 0;
}
