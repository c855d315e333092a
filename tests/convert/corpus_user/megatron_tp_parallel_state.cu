// Megatron-style tensor parallelism: a global parallel-state singleton holds the tensor- and
// data-parallel communicators (split from the world by ncclCommSplit), layers are classes whose
// forward calls helpers named like Megatron's mappings (reduce_from_tensor_model_parallel_region,
// gather_from_tensor_model_parallel_region), fp16 activations; the data-parallel gradient
// all-reduce goes through a std::function hook registered per parameter. MPI bootstrap.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>
#include <mpi.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <nccl.h>

#define CUDA_CALL(x) do { cudaError_t err__ = (x); if (err__ != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(err__)); abort(); } } while (0)
#define NCCL_CALL(x) do { ncclResult_t res__ = (x); if (res__ != ncclSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(res__)); abort(); } } while (0)

struct ParallelState {
  int world_rank = 0, world_size = 1;
  int tp_rank = 0, tp_size = 1, dp_rank = 0, dp_size = 1;
  ncclComm_t world_comm = nullptr;
  ncclComm_t tp_comm = nullptr;
  ncclComm_t dp_comm = nullptr;
  cudaStream_t stream = nullptr;
};

static ParallelState& mpu() {
  static ParallelState state;
  return state;
}

void initialize_model_parallel(int tp_size) {
  ParallelState& s = mpu();
  MPI_Comm_rank(MPI_COMM_WORLD, &s.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.world_size);
  CUDA_CALL(cudaSetDevice(s.world_rank));
  ncclUniqueId id;
  if (s.world_rank == 0) NCCL_CALL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  NCCL_CALL(ncclCommInitRank(&s.world_comm, s.world_size, id, s.world_rank));
  s.tp_size = tp_size;
  s.dp_size = s.world_size / tp_size;
  s.tp_rank = s.world_rank % tp_size;
  s.dp_rank = s.world_rank / tp_size;
  NCCL_CALL(ncclCommSplit(s.world_comm, s.dp_rank, s.tp_rank, &s.tp_comm, nullptr));
  NCCL_CALL(ncclCommSplit(s.world_comm, s.tp_rank, s.dp_rank, &s.dp_comm, nullptr));
  CUDA_CALL(cudaStreamCreate(&s.stream));
}

void destroy_model_parallel() {
  ParallelState& s = mpu();
  NCCL_CALL(ncclCommDestroy(s.tp_comm));
  NCCL_CALL(ncclCommDestroy(s.dp_comm));
  NCCL_CALL(ncclCommDestroy(s.world_comm));
  CUDA_CALL(cudaStreamDestroy(s.stream));
}

// Megatron's mappings, on raw buffers.
void reduce_from_tensor_model_parallel_region(__half* x, size_t n) {
  if (mpu().tp_size == 1) return;
  NCCL_CALL(ncclAllReduce(x, x, n, ncclHalf, ncclSum, mpu().tp_comm, mpu().stream));
}
void gather_from_tensor_model_parallel_region(const __half* local, __half* full, size_t n_local) {
  NCCL_CALL(ncclAllGather(local, full, n_local, ncclHalf, mpu().tp_comm, mpu().stream));
}

__global__ void matmul_stub(const __half* x, const __half* w, __half* y, int rows, int in, int out) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * out; i += gridDim.x * blockDim.x) {
    float acc = 0.f;
    for (int k = 0; k < in; ++k) acc += __half2float(x[(i / out) * in + k]) * __half2float(w[k * out + i % out]);
    y[i] = __float2half(acc);
  }
}

class ColumnParallelLinear {
 public:
  ColumnParallelLinear(int in, int out, bool gather_output) : in_(in), out_local_(out / mpu().tp_size), gather_(gather_output) {
    CUDA_CALL(cudaMalloc(&weight_, (size_t)in_ * out_local_ * sizeof(__half)));
    CUDA_CALL(cudaMemset(weight_, 0, (size_t)in_ * out_local_ * sizeof(__half)));
  }
  ~ColumnParallelLinear() { cudaFree(weight_); }
  void forward(const __half* x, __half* y_local, __half* y_full, int rows) {
    matmul_stub<<<64, 256, 0, mpu().stream>>>(x, weight_, y_local, rows, in_, out_local_);
    if (gather_) gather_from_tensor_model_parallel_region(y_local, y_full, (size_t)rows * out_local_);
  }
  __half* weight() { return weight_; }
  size_t numel() const { return (size_t)in_ * out_local_; }

 private:
  int in_, out_local_;
  bool gather_;
  __half* weight_ = nullptr;
};

class RowParallelLinear {
 public:
  RowParallelLinear(int in, int out) : in_local_(in / mpu().tp_size), out_(out) {
    CUDA_CALL(cudaMalloc(&weight_, (size_t)in_local_ * out_ * sizeof(__half)));
    CUDA_CALL(cudaMemset(weight_, 0, (size_t)in_local_ * out_ * sizeof(__half)));
  }
  ~RowParallelLinear() { cudaFree(weight_); }
  void forward(const __half* x_local, __half* y, int rows) {
    matmul_stub<<<64, 256, 0, mpu().stream>>>(x_local, weight_, y, rows, in_local_, out_);
    reduce_from_tensor_model_parallel_region(y, (size_t)rows * out_);
  }
  __half* weight() { return weight_; }
  size_t numel() const { return (size_t)in_local_ * out_; }

 private:
  int in_local_, out_;
  __half* weight_ = nullptr;
};

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  initialize_model_parallel(argc > 1 ? atoi(argv[1]) : 2);
  const int rows = 64, hidden = 1024, ffn = 4096;
  auto fc1 = std::make_unique<ColumnParallelLinear>(hidden, ffn, /*gather_output=*/false);
  auto fc2 = std::make_unique<RowParallelLinear>(ffn, hidden);
  auto head = std::make_unique<ColumnParallelLinear>(hidden, hidden, /*gather_output=*/true);
  __half *x, *h, *y, *logits_local, *logits;
  CUDA_CALL(cudaMalloc(&x, (size_t)rows * hidden * sizeof(__half)));
  CUDA_CALL(cudaMalloc(&h, (size_t)rows * ffn / mpu().tp_size * sizeof(__half)));
  CUDA_CALL(cudaMalloc(&y, (size_t)rows * hidden * sizeof(__half)));
  CUDA_CALL(cudaMalloc(&logits_local, (size_t)rows * hidden / mpu().tp_size * sizeof(__half)));
  CUDA_CALL(cudaMalloc(&logits, (size_t)rows * hidden * sizeof(__half)));
  CUDA_CALL(cudaMemset(x, 0, (size_t)rows * hidden * sizeof(__half)));

  // Data-parallel gradient hooks, one per parameter (the weights stand in for their gradients).
  std::vector<std::function<void()>> grad_hooks;
  grad_hooks.push_back([&] { NCCL_CALL(ncclAllReduce(fc1->weight(), fc1->weight(), fc1->numel(), ncclHalf, ncclAvg, mpu().dp_comm, mpu().stream)); });
  grad_hooks.push_back([&] { NCCL_CALL(ncclAllReduce(fc2->weight(), fc2->weight(), fc2->numel(), ncclHalf, ncclAvg, mpu().dp_comm, mpu().stream)); });

  for (int step = 0; step < 3; ++step) {
    fc1->forward(x, h, nullptr, rows);
    fc2->forward(h, y, rows);
    head->forward(y, logits_local, logits, rows);
    for (auto& hook : grad_hooks) hook();
  }
  CUDA_CALL(cudaStreamSynchronize(mpu().stream));
  __half first;
  CUDA_CALL(cudaMemcpy(&first, logits, sizeof(__half), cudaMemcpyDeviceToHost));
  printf("rank %d (tp %d/%d, dp %d/%d): logits[0] = %f\n", mpu().world_rank, mpu().tp_rank, mpu().tp_size, mpu().dp_rank,
         mpu().dp_size, __half2float(first));
  cudaFree(x); cudaFree(h); cudaFree(y); cudaFree(logits_local); cudaFree(logits);
  fc1.reset(); fc2.reset(); head.reset();
  destroy_model_parallel();
  MPI_Finalize();
  return 0;
}
