// Tensor-parallel inference engine core (bf16): Tensors own device memory obtained from an
// Allocator interface with two implementations, a plain cudaMalloc one for weights and a
// stream-ordered one on an explicit cudaMemPool_t (release threshold raised so the pool keeps its
// memory between decode steps) for per-step activations. Column-parallel layers all-gather their
// output shards, row-parallel ones all-reduce partial sums; weights are broadcast from rank 0 by a
// dtype-templated helper whose NCCL type comes from a traits struct. MPI bootstrap.
#include <mpi.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#define CUDA_CHECK(x) check_cuda((x), #x, __FILE__, __LINE__)
#define NCCL_CHECK(x) check_nccl((x), #x, __FILE__, __LINE__)

static void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, what, cudaGetErrorString(e));
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}
static void check_nccl(ncclResult_t r, const char* what, const char* file, int line) {
  if (r != ncclSuccess) {
    std::fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, what, ncclGetErrorString(r));
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

namespace engine {

using bf16 = __nv_bfloat16;

template <typename T>
struct nccl_traits;
template <>
struct nccl_traits<bf16> {
  static constexpr ncclDataType_t type = ncclBfloat16;
};
template <>
struct nccl_traits<float> {
  static constexpr ncclDataType_t type = ncclFloat;
};
template <>
struct nccl_traits<int32_t> {
  static constexpr ncclDataType_t type = ncclInt32;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes, cudaStream_t stream) = 0;
  virtual void release(void* p, cudaStream_t stream) = 0;
};

class CudaMallocAllocator : public Allocator {
 public:
  void* allocate(size_t bytes, cudaStream_t) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  void release(void* p, cudaStream_t) override { CUDA_CHECK(cudaFree(p)); }
};

class PoolAllocator : public Allocator {
 public:
  explicit PoolAllocator(int device) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
    uint64_t threshold = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
  }
  ~PoolAllocator() override { cudaMemPoolDestroy(pool_); }
  void* allocate(size_t bytes, cudaStream_t stream) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes, pool_, stream));
    return p;
  }
  void release(void* p, cudaStream_t stream) override { CUDA_CHECK(cudaFreeAsync(p, stream)); }

 private:
  cudaMemPool_t pool_ = nullptr;
};

template <typename T>
class Tensor {
 public:
  Tensor(Allocator& alloc, std::vector<int64_t> shape, cudaStream_t stream)
      : alloc_(&alloc), shape_(std::move(shape)), stream_(stream) {
    data_ = static_cast<T*>(alloc_->allocate(numel() * sizeof(T), stream_));
  }
  Tensor(Tensor&& o) noexcept : alloc_(o.alloc_), shape_(std::move(o.shape_)), stream_(o.stream_), data_(o.data_) {
    o.data_ = nullptr;
  }
  Tensor(const Tensor&) = delete;
  ~Tensor() {
    if (data_) alloc_->release(data_, stream_);
  }
  size_t numel() const {
    size_t n = 1;
    for (int64_t d : shape_) n *= (size_t)d;
    return n;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t dim(int i) const { return shape_[i]; }

 private:
  Allocator* alloc_;
  std::vector<int64_t> shape_;
  cudaStream_t stream_;
  T* data_ = nullptr;
};

struct Context {
  ncclComm_t comm;
  cudaStream_t stream;
  int rank, world;
};

template <typename T>
void broadcast_from_root(Tensor<T>& t, const Context& ctx) {
  NCCL_CHECK(ncclBroadcast(t.data(), t.data(), t.numel(), nccl_traits<T>::type, 0, ctx.comm, ctx.stream));
}

template <typename T>
void all_reduce_sum(Tensor<T>& t, const Context& ctx) {
  NCCL_CHECK(ncclAllReduce(t.data(), t.data(), t.numel(), nccl_traits<T>::type, ncclSum, ctx.comm, ctx.stream));
}

template <typename T>
void all_gather(const Tensor<T>& shard, Tensor<T>& full, const Context& ctx) {
  NCCL_CHECK(ncclAllGather(shard.data(), full.data(), shard.numel(), nccl_traits<T>::type, ctx.comm, ctx.stream));
}

__global__ void init_weight(bf16* w, size_t n, int seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    w[i] = __float2bfloat16(0.01f * (float)((i * 31 + seed) % 97) - 0.48f);
}

// x[b, k] * w[n, k]^T -> y[b, n], one thread per output: enough for a test engine.
__global__ void matmul_nt(const bf16* x, const bf16* w, bf16* y, int b, int k, int n) {
  int row = blockIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= b || col >= n) return;
  float acc = 0.f;
  for (int i = 0; i < k; ++i) acc += __bfloat162float(x[row * k + i]) * __bfloat162float(w[col * k + i]);
  y[row * n + col] = __float2bfloat16(acc);
}

__global__ void argmax_rows(const bf16* logits, int32_t* out, int b, int n) {
  int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= b) return;
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (__bfloat162float(logits[row * n + i]) > __bfloat162float(logits[row * n + best])) best = i;
  out[row] = best;
}

}  // namespace engine

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  engine::Context ctx{};
  MPI_Comm_rank(MPI_COMM_WORLD, &ctx.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ctx.world);
  CUDA_CHECK(cudaSetDevice(ctx.rank));
  CUDA_CHECK(cudaStreamCreate(&ctx.stream));
  ncclUniqueId id;
  if (ctx.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  NCCL_CHECK(ncclCommInitRank(&ctx.comm, ctx.world, id, ctx.rank));

  const int hidden = 1024, ffn = 4096, vocab = 8192, batch = 8;
  const int ffn_shard = ffn / ctx.world, vocab_shard = vocab / ctx.world;
  {
    engine::CudaMallocAllocator weights_alloc;
    engine::PoolAllocator act_alloc(ctx.rank);
    // up-projection column-parallel, down-projection row-parallel, lm head column-parallel
    engine::Tensor<engine::bf16> w_up(weights_alloc, {ffn_shard, hidden}, ctx.stream);
    engine::Tensor<engine::bf16> w_down(weights_alloc, {hidden, ffn_shard}, ctx.stream);
    engine::Tensor<engine::bf16> w_head(weights_alloc, {vocab_shard, hidden}, ctx.stream);
    engine::init_weight<<<256, 256, 0, ctx.stream>>>(w_up.data(), w_up.numel(), ctx.rank);
    engine::init_weight<<<256, 256, 0, ctx.stream>>>(w_down.data(), w_down.numel(), ctx.rank + 7);
    engine::init_weight<<<256, 256, 0, ctx.stream>>>(w_head.data(), w_head.numel(), 11);
    engine::broadcast_from_root(w_head, ctx);  // the head is initialised on rank 0 only in a real loader

    engine::Tensor<engine::bf16> x(weights_alloc, {batch, hidden}, ctx.stream);
    engine::init_weight<<<32, 256, 0, ctx.stream>>>(x.data(), x.numel(), 3);
    engine::Tensor<int32_t> tokens(weights_alloc, {batch}, ctx.stream);
    std::vector<int32_t> host_tokens(batch);
    const int steps = argc > 1 ? std::atoi(argv[1]) : 4;
    for (int step = 0; step < steps; ++step) {
      engine::Tensor<engine::bf16> h(act_alloc, {batch, ffn_shard}, ctx.stream);
      engine::Tensor<engine::bf16> partial(act_alloc, {batch, hidden}, ctx.stream);
      engine::Tensor<engine::bf16> logits_shard(act_alloc, {batch, vocab_shard}, ctx.stream);
      engine::Tensor<engine::bf16> logits(act_alloc, {(int64_t)ctx.world, batch, vocab_shard}, ctx.stream);
      engine::matmul_nt<<<dim3((ffn_shard + 127) / 128, batch), 128, 0, ctx.stream>>>(x.data(), w_up.data(), h.data(), batch, hidden, ffn_shard);
      engine::matmul_nt<<<dim3((hidden + 127) / 128, batch), 128, 0, ctx.stream>>>(h.data(), w_down.data(), partial.data(), batch, ffn_shard, hidden);
      engine::all_reduce_sum(partial, ctx);
      engine::matmul_nt<<<dim3((vocab_shard + 127) / 128, batch), 128, 0, ctx.stream>>>(partial.data(), w_head.data(), logits_shard.data(), batch, hidden, vocab_shard);
      engine::all_gather(logits_shard, logits, ctx);
      // rank-major gather: argmax over the first shard is enough to exercise the path
      engine::argmax_rows<<<1, batch, 0, ctx.stream>>>(logits.data(), tokens.data(), batch, vocab_shard);
      engine::broadcast_from_root(tokens, ctx);
      CUDA_CHECK(cudaMemcpyAsync(host_tokens.data(), tokens.data(), batch * sizeof(int32_t), cudaMemcpyDeviceToHost, ctx.stream));
      CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
      if (ctx.rank == 0) std::printf("step %d token[0] %d token[last] %d\n", step, host_tokens[0], host_tokens[batch - 1]);
    }
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  }
  NCCL_CHECK(ncclCommDestroy(ctx.comm));
  CUDA_CHECK(cudaStreamDestroy(ctx.stream));
  MPI_Finalize();
  return 0;
}
