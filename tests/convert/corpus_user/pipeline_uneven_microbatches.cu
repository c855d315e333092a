// Pipeline parallelism, GPipe schedule, written with std::function helpers: the batch is cut into
// micro-batches of uneven size (the last one is the remainder), activations go forward and
// gradients go back between neighbouring stages; the first stage never receives activations, the
// last never sends them, and a middle stage exchanges both ways in one group. MPI bootstrap.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDA_CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define NCCL_CHECK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { fprintf(stderr, "NCCL %s at %s:%d\n", ncclGetErrorString(r_), __FILE__, __LINE__); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

__global__ void stage_fwd(const float* in, float* out, size_t n, int stage) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) out[i] = in[i] * 0.9f + 0.1f * stage;
}
__global__ void stage_bwd(const float* gout, float* gin, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) gin[i] = gout[i] * 0.9f;
}
__global__ void loss_grad(const float* out, float* g, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) g[i] = 2.f * out[i];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int stage, num_stages;
  MPI_Comm_rank(MPI_COMM_WORLD, &stage);
  MPI_Comm_size(MPI_COMM_WORLD, &num_stages);
  int num_devices = 1;
  CUDA_CHECK(cudaGetDeviceCount(&num_devices));
  CUDA_CHECK(cudaSetDevice(stage % num_devices));

  ncclUniqueId id;
  if (stage == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t pp_comm;
  NCCL_CHECK(ncclCommInitRank(&pp_comm, num_stages, id, stage));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));

  const bool first = stage == 0, last = stage == num_stages - 1;
  const int prev = stage - 1, next = stage + 1;
  const size_t hidden = 1024;
  const int batch = argc > 1 ? atoi(argv[1]) : 1000;  // samples
  const int micro = 384;                               // samples per micro-batch; the last is smaller
  std::vector<int> mb_sizes;
  for (int s = 0; s < batch; s += micro) mb_sizes.push_back(std::min(micro, batch - s));
  const int num_mb = (int)mb_sizes.size();

  // Activations are kept per micro-batch for the backward pass.
  std::vector<float*> act_in(num_mb), act_out(num_mb);
  float *grad_in, *grad_out;
  for (int m = 0; m < num_mb; ++m) {
    CUDA_CHECK(cudaMalloc(&act_in[m], micro * hidden * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&act_out[m], micro * hidden * sizeof(float)));
    CUDA_CHECK(cudaMemset(act_in[m], 0, micro * hidden * sizeof(float)));
  }
  CUDA_CHECK(cudaMalloc(&grad_in, micro * hidden * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&grad_out, micro * hidden * sizeof(float)));

  std::function<void(float*, size_t, int)> send_to = [&](float* buf, size_t n, int peer) {
    NCCL_CHECK(ncclSend(buf, n, ncclFloat, peer, pp_comm, stream));
  };
  std::function<void(float*, size_t, int)> recv_from = [&](float* buf, size_t n, int peer) {
    NCCL_CHECK(ncclRecv(buf, n, ncclFloat, peer, pp_comm, stream));
  };

  // Forward: all micro-batches.
  for (int m = 0; m < num_mb; ++m) {
    const size_t n = (size_t)mb_sizes[m] * hidden;
    if (!first) recv_from(act_in[m], n, prev);
    stage_fwd<<<128, 256, 0, stream>>>(act_in[m], act_out[m], n, stage);
    if (!last) send_to(act_out[m], n, next);
  }
  // Backward, last micro-batch first: a middle stage sends its gradient up while it receives the
  // next one from below, in one group.
  for (int m = num_mb - 1; m >= 0; --m) {
    const size_t n = (size_t)mb_sizes[m] * hidden;
    if (last) {
      loss_grad<<<128, 256, 0, stream>>>(act_out[m], grad_out, n);
    } else {
      recv_from(grad_out, n, next);
    }
    stage_bwd<<<128, 256, 0, stream>>>(grad_out, grad_in, n);
    if (!first) {
      NCCL_CHECK(ncclGroupStart());
      send_to(grad_in, n, prev);
      NCCL_CHECK(ncclGroupEnd());
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  float g = 0.f;
  CUDA_CHECK(cudaMemcpy(&g, grad_in, sizeof(float), cudaMemcpyDeviceToHost));
  printf("stage %d/%d: %d micro-batches, grad_in[0] %f\n", stage, num_stages, num_mb, g);

  for (int m = 0; m < num_mb; ++m) {
    CUDA_CHECK(cudaFree(act_in[m]));
    CUDA_CHECK(cudaFree(act_out[m]));
  }
  CUDA_CHECK(cudaFree(grad_in));
  CUDA_CHECK(cudaFree(grad_out));
  NCCL_CHECK(ncclCommDestroy(pp_comm));
  MPI_Finalize();
  return 0;
}
