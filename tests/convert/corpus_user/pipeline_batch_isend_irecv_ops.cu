// Pipeline-parallel training step in a small framework: stages exchange fp16 activations and
// gradients through a PyTorch-like batch_isend_irecv(std::vector<P2POp>) that opens one NCCL group
// and issues each op's ncclSend/ncclRecv; the ops are built per micro-batch by the schedule
// (first stage never receives activations, last never sends them). Buffers are owned by a
// DeviceTensor class; each stage holds its micro-batch slots in std::array members; the gradient
// of the stage's weights is all-reduced across the data-parallel replicas of the same stage on a
// second communicator split from the world one. MPI bootstrap.
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#define CHECK_CUDA(cmd)                                                                              \
  do {                                                                                               \
    cudaError_t e = cmd;                                                                             \
    if (e != cudaSuccess) {                                                                          \
      std::printf("Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e));     \
      std::exit(EXIT_FAILURE);                                                                       \
    }                                                                                                \
  } while (0)
#define CHECK_NCCL(cmd)                                                                              \
  do {                                                                                               \
    ncclResult_t r = cmd;                                                                            \
    if (r != ncclSuccess) {                                                                          \
      std::printf("Failed, NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r));     \
      std::exit(EXIT_FAILURE);                                                                       \
    }                                                                                                \
  } while (0)

namespace pp {

constexpr int kMicroBatches = 4;

class DeviceTensor {
 public:
  explicit DeviceTensor(size_t numel) : numel_(numel) { CHECK_CUDA(cudaMalloc(&ptr_, numel_ * sizeof(half))); }
  ~DeviceTensor() { cudaFree(ptr_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  half* data() const { return ptr_; }
  size_t numel() const { return numel_; }

 private:
  half* ptr_ = nullptr;
  size_t numel_ = 0;
};

enum class OpKind { kSend, kRecv };

struct P2POp {
  OpKind kind;
  half* buf;
  size_t count;
  int peer;
};

void batch_isend_irecv(const std::vector<P2POp>& ops, ncclComm_t comm, cudaStream_t stream) {
  if (ops.empty()) return;
  CHECK_NCCL(ncclGroupStart());
  for (const P2POp& op : ops) {
    if (op.kind == OpKind::kSend)
      CHECK_NCCL(ncclSend(op.buf, op.count, ncclHalf, op.peer, comm, stream));
    else
      CHECK_NCCL(ncclRecv(op.buf, op.count, ncclHalf, op.peer, comm, stream));
  }
  CHECK_NCCL(ncclGroupEnd());
}

struct Stage {
  int index = 0, count = 1;
  std::unique_ptr<DeviceTensor> weight, weight_grad;
  std::array<std::unique_ptr<DeviceTensor>, kMicroBatches> act_in, act_out, grad_in, grad_out;
  bool first() const { return index == 0; }
  bool last() const { return index == count - 1; }
};

__global__ void stage_forward(const half* in, half* out, const half* w, size_t n, int first) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float x = first ? 0.001f * (float)(i % 100) : __half2float(in[i]);
    out[i] = __float2half(x * 0.5f + __half2float(w[i % 1024]));
  }
}

__global__ void stage_backward(const half* gin, half* gout, half* wgrad, size_t n, int last) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float g = last ? 1.0f / (float)n : __half2float(gin[i]);
    gout[i] = __float2half(0.5f * g);
    if (i < 1024) wgrad[i] = __float2half(__half2float(wgrad[i]) + g);
  }
}

}  // namespace pp

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int pp_size = world >= 4 ? 2 : world;  // pipeline depth; the rest is data parallel
  const int dp_size = world / pp_size;
  CHECK_CUDA(cudaSetDevice(rank));
  ncclUniqueId id;
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t world_comm, dp_comm;
  CHECK_NCCL(ncclCommInitRank(&world_comm, world, id, rank));
  // ranks of the same stage share a data-parallel communicator
  CHECK_NCCL(ncclCommSplit(world_comm, rank % pp_size, rank / pp_size, &dp_comm, nullptr));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));

  const size_t act_elems = 1 << 18;
  pp::Stage stage;
  stage.index = rank % pp_size;
  stage.count = pp_size;
  stage.weight = std::make_unique<pp::DeviceTensor>(1024);
  stage.weight_grad = std::make_unique<pp::DeviceTensor>(1024);
  for (int m = 0; m < pp::kMicroBatches; ++m) {
    stage.act_in[m] = std::make_unique<pp::DeviceTensor>(act_elems);
    stage.act_out[m] = std::make_unique<pp::DeviceTensor>(act_elems);
    stage.grad_in[m] = std::make_unique<pp::DeviceTensor>(act_elems);
    stage.grad_out[m] = std::make_unique<pp::DeviceTensor>(act_elems);
  }
  const int prev = rank - 1, next = rank + 1;

  for (int iter = 0; iter < 3; ++iter) {
    CHECK_CUDA(cudaMemsetAsync(stage.weight_grad->data(), 0, 1024 * sizeof(half), stream));
    // forward: receive, compute, send, one micro-batch at a time
    for (int m = 0; m < pp::kMicroBatches; ++m) {
      std::vector<pp::P2POp> ops;
      if (!stage.first()) ops.push_back({pp::OpKind::kRecv, stage.act_in[m]->data(), act_elems, prev});
      pp::batch_isend_irecv(ops, world_comm, stream);
      pp::stage_forward<<<256, 256, 0, stream>>>(stage.act_in[m]->data(), stage.act_out[m]->data(),
                                                  stage.weight->data(), act_elems, stage.first());
      ops.clear();
      if (!stage.last()) ops.push_back({pp::OpKind::kSend, stage.act_out[m]->data(), act_elems, next});
      pp::batch_isend_irecv(ops, world_comm, stream);
    }
    // backward in reverse micro-batch order
    for (int m = pp::kMicroBatches - 1; m >= 0; --m) {
      std::vector<pp::P2POp> ops;
      if (!stage.last()) ops.push_back({pp::OpKind::kRecv, stage.grad_in[m]->data(), act_elems, next});
      pp::batch_isend_irecv(ops, world_comm, stream);
      pp::stage_backward<<<256, 256, 0, stream>>>(stage.grad_in[m]->data(), stage.grad_out[m]->data(),
                                                   stage.weight_grad->data(), act_elems, stage.last());
      ops.clear();
      if (!stage.first()) ops.push_back({pp::OpKind::kSend, stage.grad_out[m]->data(), act_elems, prev});
      pp::batch_isend_irecv(ops, world_comm, stream);
    }
    if (dp_size > 1)
      CHECK_NCCL(ncclAllReduce(stage.weight_grad->data(), stage.weight_grad->data(), 1024, ncclHalf, ncclAvg, dp_comm, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    half h;
    CHECK_CUDA(cudaMemcpy(&h, stage.weight_grad->data(), sizeof(half), cudaMemcpyDeviceToHost));
    std::printf("rank %d stage %d iter %d wgrad[0] %.5f\n", rank, stage.index, iter, __half2float(h));
  }

  CHECK_NCCL(ncclCommDestroy(dp_comm));
  CHECK_NCCL(ncclCommDestroy(world_comm));
  CHECK_CUDA(cudaStreamDestroy(stream));
  MPI_Finalize();
  return 0;
}
