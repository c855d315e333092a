// Data parallel fp16 training with gradient accumulation and dynamic loss scaling. Gradients are
// all-reduced only on the last micro-step of each accumulation window (`(step + 1) % accum == 0`),
// bucket by bucket on a high-priority communication stream (`cudaStreamCreateWithPriority`) as the
// backward pass produces them: the comm stream waits for each bucket's event, and the compute
// stream waits for the comm stream before the optimizer. Each rank's overflow check writes a uint8
// flag that is all-reduced with ncclMax, so every rank skips the same step. MPI bootstrap.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDACHECK(cmd)                                                                  \
  do {                                                                                  \
    cudaError_t e = cmd;                                                                \
    if (e != cudaSuccess) {                                                             \
      printf("Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      exit(EXIT_FAILURE);                                                               \
    }                                                                                   \
  } while (0)
#define NCCLCHECK(cmd)                                                                  \
  do {                                                                                  \
    ncclResult_t r = cmd;                                                               \
    if (r != ncclSuccess) {                                                             \
      printf("Failed, NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r)); \
      exit(EXIT_FAILURE);                                                               \
    }                                                                                   \
  } while (0)

struct Bucket {
  half* grad = nullptr;      // accumulated fp16 gradients, loss-scaled
  float* master = nullptr;   // fp32 master weights of the bucket
  size_t numel = 0;
  cudaEvent_t ready;
};

__global__ void backward_accumulate(half* g, size_t n, float scale, int micro) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = __hadd(g[i], __float2half(scale * 1e-4f * (float)((i + micro) % 13)));
}
__global__ void check_overflow(const half* g, size_t n, uint8_t* found) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (__hisinf(g[i]) || __hisnan(g[i])) *found = 1;
}
__global__ void unscale_step(float* w, half* g, size_t n, float inv_scale, const uint8_t* skip) {
  if (*skip) return;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    w[i] -= 1e-3f * __half2float(g[i]) * inv_scale;
    g[i] = __float2half(0.f);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int ndev;
  CUDACHECK(cudaGetDeviceCount(&ndev));
  CUDACHECK(cudaSetDevice(rank % ndev));

  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, world, id, rank));

  int least, greatest;
  CUDACHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t compute, comm_stream;
  CUDACHECK(cudaStreamCreateWithPriority(&compute, cudaStreamNonBlocking, least));
  CUDACHECK(cudaStreamCreateWithPriority(&comm_stream, cudaStreamNonBlocking, greatest));
  cudaEvent_t grads_reduced;
  CUDACHECK(cudaEventCreateWithFlags(&grads_reduced, cudaEventDisableTiming));

  // Buckets in reverse layer order, as backward fills them.
  const std::vector<size_t> bucket_sizes = {1 << 22, 1 << 22, 1 << 21, 3 << 19};
  std::vector<Bucket> buckets(bucket_sizes.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    Bucket& bk = buckets[b];
    bk.numel = bucket_sizes[b];
    CUDACHECK(cudaMalloc(&bk.grad, bk.numel * sizeof(half)));
    CUDACHECK(cudaMalloc(&bk.master, bk.numel * sizeof(float)));
    CUDACHECK(cudaMemset(bk.grad, 0, bk.numel * sizeof(half)));
    CUDACHECK(cudaMemset(bk.master, 0, bk.numel * sizeof(float)));
    CUDACHECK(cudaEventCreateWithFlags(&bk.ready, cudaEventDisableTiming));
  }
  uint8_t* overflow;
  CUDACHECK(cudaMalloc(&overflow, sizeof(uint8_t)));

  const int accum = 4;
  const int steps = argc > 1 ? atoi(argv[1]) : 8;
  float loss_scale = 65536.f;
  int skipped = 0;
  for (int step = 0; step < steps; ++step) {
    const bool sync_step = (step + 1) % accum == 0;
    for (size_t b = 0; b < buckets.size(); ++b) {
      Bucket& bk = buckets[b];
      backward_accumulate<<<256, 256, 0, compute>>>(bk.grad, bk.numel, loss_scale, step % accum);
      if (!sync_step) continue;
      // Overlap: reduce this bucket while the next one is still being computed.
      CUDACHECK(cudaEventRecord(bk.ready, compute));
      CUDACHECK(cudaStreamWaitEvent(comm_stream, bk.ready, 0));
      NCCLCHECK(ncclAllReduce(bk.grad, bk.grad, bk.numel, ncclHalf, ncclSum, comm, comm_stream));
    }
    if (!sync_step) continue;

    CUDACHECK(cudaEventRecord(grads_reduced, comm_stream));
    CUDACHECK(cudaStreamWaitEvent(compute, grads_reduced, 0));
    CUDACHECK(cudaMemsetAsync(overflow, 0, sizeof(uint8_t), compute));
    for (auto& bk : buckets) check_overflow<<<256, 256, 0, compute>>>(bk.grad, bk.numel, overflow);
    // Every rank must agree on skipping the step.
    NCCLCHECK(ncclAllReduce(overflow, overflow, 1, ncclUint8, ncclMax, comm, compute));
    for (auto& bk : buckets)
      unscale_step<<<256, 256, 0, compute>>>(bk.master, bk.grad, bk.numel, 1.f / (loss_scale * world * accum), overflow);
    uint8_t host_flag = 0;
    CUDACHECK(cudaMemcpyAsync(&host_flag, overflow, 1, cudaMemcpyDeviceToHost, compute));
    CUDACHECK(cudaStreamSynchronize(compute));
    if (host_flag) {
      loss_scale *= 0.5f;
      ++skipped;
    }
  }
  CUDACHECK(cudaStreamSynchronize(compute));
  CUDACHECK(cudaStreamSynchronize(comm_stream));
  printf("rank %d: %d steps, accumulation %d, %d skipped, loss scale %g\n", rank, steps, accum, skipped, loss_scale);

  for (auto& bk : buckets) {
    CUDACHECK(cudaFree(bk.grad));
    CUDACHECK(cudaFree(bk.master));
    CUDACHECK(cudaEventDestroy(bk.ready));
  }
  CUDACHECK(cudaFree(overflow));
  CUDACHECK(cudaEventDestroy(grads_reduced));
  CUDACHECK(cudaStreamDestroy(compute));
  CUDACHECK(cudaStreamDestroy(comm_stream));
  NCCLCHECK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
