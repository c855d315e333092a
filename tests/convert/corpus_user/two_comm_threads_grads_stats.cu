// One rank per process with two communicators made together in one group (a gradient communicator
// and a statistics communicator, each with its own unique id), each driven by its own background
// thread: the gradient thread all-reduces the gradients every step, the statistics thread
// broadcasts rank 0's running statistics. Both threads start after every buffer is allocated and
// are joined before anything is freed. MPI bootstrap, non-blocking streams.
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CK_CUDA(x)                                                                         \
  do {                                                                                     \
    cudaError_t e = (x);                                                                   \
    if (e != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));       \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
#define CK_NCCL(x)                                                                         \
  do {                                                                                     \
    ncclResult_t r = (x);                                                                  \
    if (r != ncclSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r));       \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

struct Channel {
  ncclComm_t comm;
  cudaStream_t stream;
  float* buf;
  size_t count;
};

__global__ void scale(float* x, size_t n, float f) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = x[i] * f + 1.0f;
}

static void gradient_loop(Channel* ch, int device, int steps) {
  CK_CUDA(cudaSetDevice(device));
  for (int s = 0; s < steps; ++s) {
    scale<<<64, 256, 0, ch->stream>>>(ch->buf, ch->count, 0.5f);
    CK_NCCL(ncclAllReduce(ch->buf, ch->buf, ch->count, ncclFloat, ncclSum, ch->comm, ch->stream));
  }
  CK_CUDA(cudaStreamSynchronize(ch->stream));
}

static void statistics_loop(Channel* ch, int device, int steps) {
  CK_CUDA(cudaSetDevice(device));
  for (int s = 0; s < steps; ++s) {
    scale<<<4, 256, 0, ch->stream>>>(ch->buf, ch->count, 0.9f);
    CK_NCCL(ncclBroadcast(ch->buf, ch->buf, ch->count, ncclFloat, 0, ch->comm, ch->stream));
  }
  CK_CUDA(cudaStreamSynchronize(ch->stream));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1, devices = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  CK_CUDA(cudaGetDeviceCount(&devices));
  const int device = rank % devices;
  CK_CUDA(cudaSetDevice(device));

  ncclUniqueId ids[2];
  if (rank == 0) {
    CK_NCCL(ncclGetUniqueId(&ids[0]));
    CK_NCCL(ncclGetUniqueId(&ids[1]));
  }
  MPI_Bcast(ids, sizeof(ids), MPI_BYTE, 0, MPI_COMM_WORLD);
  Channel grads{}, stats{};
  CK_NCCL(ncclGroupStart());
  CK_NCCL(ncclCommInitRank(&grads.comm, world, ids[0], rank));
  CK_NCCL(ncclCommInitRank(&stats.comm, world, ids[1], rank));
  CK_NCCL(ncclGroupEnd());
  CK_CUDA(cudaStreamCreateWithFlags(&grads.stream, cudaStreamNonBlocking));
  CK_CUDA(cudaStreamCreateWithFlags(&stats.stream, cudaStreamNonBlocking));
  grads.count = argc > 1 ? (size_t)std::atol(argv[1]) : (size_t)(1 << 20);
  stats.count = 1024;
  CK_CUDA(cudaMalloc(&grads.buf, grads.count * sizeof(float)));
  CK_CUDA(cudaMalloc(&stats.buf, stats.count * sizeof(float)));
  CK_CUDA(cudaMemset(grads.buf, 0, grads.count * sizeof(float)));
  CK_CUDA(cudaMemset(stats.buf, 0, stats.count * sizeof(float)));
  CK_CUDA(cudaDeviceSynchronize());

  const int steps = 8;
  std::thread gradient_thread(gradient_loop, &grads, device, steps);
  std::thread statistics_thread(statistics_loop, &stats, device, steps);
  gradient_thread.join();
  statistics_thread.join();

  float first = 0.f;
  CK_CUDA(cudaMemcpy(&first, grads.buf, sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("rank %d: grads[0] = %f\n", rank, first);
  CK_CUDA(cudaFree(grads.buf));
  CK_CUDA(cudaFree(stats.buf));
  CK_NCCL(ncclCommDestroy(grads.comm));
  CK_NCCL(ncclCommDestroy(stats.comm));
  MPI_Finalize();
  return 0;
}
