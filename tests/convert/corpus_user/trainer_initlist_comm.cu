// A Trainer class handed the communicator and stream by its constructor's member-initialiser list
// (`: comm_(comm), stream_(stream)`), reducing fp16 gradients in a member function defined out of
// the class; a GradClipper whose communicator is assigned in its constructor's body and which
// sums squared norms (fp32) with `this->comm_`. MPI bootstrap, a CHECK macro, a config struct.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CHECK(call)                                                                     \
  do {                                                                                  \
    int err_ = (int)(call);                                                             \
    if (err_ != 0) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #call, err_); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                     \
    }                                                                                   \
  } while (0)

struct Config {
  size_t hidden = 1024;
  size_t layers = 3;
  int steps = 2;
};

__global__ void fake_backward(half* g, size_t n, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = __float2half(scale * (float)(i % 7));
}

// One block; partial sums added in a fixed order, so every run gives the same bits.
__global__ void squared_norm(const half* g, size_t n, float* out) {
  __shared__ float part[256];
  float s = 0.f;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += __half2float(g[i]) * __half2float(g[i]);
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int k = 0; k < (int)blockDim.x; ++k) total += part[k];
    *out += total;
  }
}

class GradClipper {
 public:
  GradClipper(ncclComm_t comm, cudaStream_t stream) {
    comm_ = comm;
    stream_ = stream;
    CHECK(cudaMalloc(&norm_, sizeof(float)));
  }
  ~GradClipper() { CHECK(cudaFree(norm_)); }
  float global_norm(const half* grads, size_t n) {
    CHECK(cudaMemsetAsync(norm_, 0, sizeof(float), stream_));
    squared_norm<<<1, 256, 0, stream_>>>(grads, n, norm_);
    CHECK(ncclAllReduce(norm_, norm_, 1, ncclFloat, ncclSum, this->comm_, stream_));
    float h = 0.f;
    CHECK(cudaMemcpyAsync(&h, norm_, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CHECK(cudaStreamSynchronize(stream_));
    return h;
  }

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* norm_ = nullptr;
};

class Trainer {
 public:
  Trainer(const Config& cfg, ncclComm_t comm, cudaStream_t stream, int rank)
      : cfg_(cfg), comm_(comm), stream_(stream), rank_(rank), numel_(cfg.hidden * cfg.hidden * cfg.layers) {
    CHECK(cudaMalloc(&grads_, numel_ * sizeof(half)));
  }
  ~Trainer() { CHECK(cudaFree(grads_)); }
  void backward(int step) { fake_backward<<<256, 256, 0, stream_>>>(grads_, numel_, 0.01f * (rank_ + 1 + step)); }
  void allreduce_grads();
  const half* grads() const { return grads_; }
  size_t numel() const { return numel_; }

 private:
  Config cfg_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_;
  size_t numel_;
  half* grads_ = nullptr;
};

void Trainer::allreduce_grads() {
  CHECK(ncclAllReduce(grads_, grads_, numel_, ncclHalf, ncclSum, comm_, stream_));
}

int main(int argc, char** argv) {
  CHECK(MPI_Init(&argc, &argv));
  int rank = 0, world = 1;
  CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  CHECK(cudaSetDevice(rank));
  ncclUniqueId id;
  if (rank == 0) CHECK(ncclGetUniqueId(&id));
  CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
  ncclComm_t world_comm;
  CHECK(ncclCommInitRank(&world_comm, world, id, rank));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  Config cfg;
  {
    Trainer trainer(cfg, world_comm, stream, rank);
    GradClipper clipper(world_comm, stream);
    for (int step = 0; step < cfg.steps; ++step) {
      trainer.backward(step);
      // Squared norms of the local gradients summed over ranks, before they are reduced.
      const float norm = clipper.global_norm(trainer.grads(), trainer.numel());
      trainer.allreduce_grads();
      if (rank == 0) std::printf("step %d sum of local grad norms^2 %.3f\n", step, norm);
    }
    half first;
    CHECK(cudaMemcpy(&first, trainer.grads(), sizeof(first), cudaMemcpyDeviceToHost));
    std::printf("rank %d first grad %.4f\n", rank, __half2float(first));
  }
  CHECK(ncclCommDestroy(world_comm));
  CHECK(cudaStreamDestroy(stream));
  CHECK(MPI_Finalize());
  return 0;
}
