// A c10d-like reducer: a ProcessGroup interface whose typed entry points are non-virtual templates
// over std::span<T> forwarding to a virtual untyped allreduce_raw/broadcast_raw, implemented by
// NcclProcessGroup, which returns Work handles (an event recorded on the NCCL stream) the caller
// waits on later. Parameters carry a gradient-ready hook (std::function) that the "autograd" loop
// fires; the hook marks its bucket and, when the bucket is complete, launches its bf16 all-reduce
// and stores the Work. The reducer waits on every Work at the end of backward. Gradients of a bucket
// are views (std::span) into one buffer per bucket. MPI bootstrap.
#include <mpi.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#define CUDACHECK(cmd)                                                                         \
  do {                                                                                         \
    cudaError_t e = cmd;                                                                       \
    if (e != cudaSuccess) {                                                                    \
      fprintf(stderr, "CUDA %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e));         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                            \
    }                                                                                          \
  } while (0)
#define NCCLCHECK(cmd)                                                                         \
  do {                                                                                         \
    ncclResult_t r = cmd;                                                                      \
    if (r != ncclSuccess) {                                                                    \
      fprintf(stderr, "NCCL %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r));         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                            \
    }                                                                                          \
  } while (0)

namespace dist {

template <typename T>
constexpr ncclDataType_t nccl_dtype() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return ncclBfloat16;
  else if constexpr (std::is_same_v<T, int64_t>) return ncclInt64;
  else static_assert(sizeof(T) == 0, "unsupported dtype");
}

class Work {
 public:
  explicit Work(cudaStream_t stream) {
    CUDACHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    CUDACHECK(cudaEventRecord(done_, stream));
  }
  ~Work() { cudaEventDestroy(done_); }
  void wait(cudaStream_t on) { CUDACHECK(cudaStreamWaitEvent(on, done_, 0)); }

 private:
  cudaEvent_t done_;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  template <typename T>
  std::shared_ptr<Work> allreduce(std::span<T> data, ncclRedOp_t op) {
    return allreduce_raw(data.data(), data.size(), nccl_dtype<T>(), op);
  }
  template <typename T>
  std::shared_ptr<Work> broadcast(std::span<T> data, int root) {
    return broadcast_raw(data.data(), data.size(), nccl_dtype<T>(), root);
  }

 protected:
  virtual std::shared_ptr<Work> allreduce_raw(void* buf, size_t count, ncclDataType_t type, ncclRedOp_t op) = 0;
  virtual std::shared_ptr<Work> broadcast_raw(void* buf, size_t count, ncclDataType_t type, int root) = 0;
};

class NcclProcessGroup : public ProcessGroup {
 public:
  NcclProcessGroup(ncclComm_t comm, cudaStream_t stream) : comm_(comm), stream_(stream) {}

 protected:
  std::shared_ptr<Work> allreduce_raw(void* buf, size_t count, ncclDataType_t type, ncclRedOp_t op) override {
    NCCLCHECK(ncclAllReduce(buf, buf, count, type, op, comm_, stream_));
    return std::make_shared<Work>(stream_);
  }
  std::shared_ptr<Work> broadcast_raw(void* buf, size_t count, ncclDataType_t type, int root) override {
    NCCLCHECK(ncclBroadcast(buf, buf, count, type, root, comm_, stream_));
    return std::make_shared<Work>(stream_);
  }

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
};

}  // namespace dist

namespace {

using bf16 = __nv_bfloat16;

struct Param {
  std::string name;
  size_t numel = 0;
  int bucket = 0;
  std::span<bf16> grad;
  std::function<void()> on_grad_ready;
};

struct Bucket {
  bf16* storage = nullptr;
  size_t numel = 0;
  int pending = 0, expected = 0;
};

class Reducer {
 public:
  Reducer(dist::ProcessGroup& pg, std::vector<Param>& params, size_t bucket_cap) : pg_(pg), params_(params) {
    for (Param& p : params_) {
      if (buckets_.empty() || buckets_.back().numel + p.numel > bucket_cap) buckets_.emplace_back();
      p.bucket = (int)buckets_.size() - 1;
      buckets_.back().numel += p.numel;
      buckets_.back().expected += 1;
    }
    for (Bucket& b : buckets_) CUDACHECK(cudaMalloc(&b.storage, b.numel * sizeof(bf16)));
    std::vector<size_t> used(buckets_.size(), 0);
    for (Param& p : params_) {
      Bucket& b = buckets_[p.bucket];
      p.grad = std::span<bf16>(b.storage, b.numel).subspan(used[p.bucket], p.numel);
      used[p.bucket] += p.numel;
      p.on_grad_ready = [this, &p] { mark_ready(p); };
    }
  }
  ~Reducer() {
    for (Bucket& b : buckets_) cudaFree(b.storage);
  }
  void prepare() {
    for (Bucket& b : buckets_) b.pending = b.expected;
    works_.clear();
  }
  void finalize(cudaStream_t compute) {
    for (auto& w : works_) w->wait(compute);
  }
  size_t num_buckets() const { return buckets_.size(); }

 private:
  void mark_ready(Param& p) {
    Bucket& b = buckets_[p.bucket];
    if (--b.pending == 0) works_.push_back(pg_.allreduce(std::span<bf16>(b.storage, b.numel), ncclAvg));
  }
  dist::ProcessGroup& pg_;
  std::vector<Param>& params_;
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<dist::Work>> works_;
};

__global__ void grad_kernel(bf16* g, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = __float2bfloat16(v * (float)(1 + i % 3));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  CUDACHECK(cudaSetDevice(rank));
  ncclUniqueId id;
  if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t compute, nccl_stream;
  CUDACHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CUDACHECK(cudaStreamCreateWithFlags(&nccl_stream, cudaStreamNonBlocking));

  auto pg = std::make_unique<dist::NcclProcessGroup>(comm, nccl_stream);
  std::vector<Param> params = {{"embed", 50304 * 64}, {"attn.qkv", 768 * 2304}, {"attn.proj", 768 * 768},
                               {"mlp.fc", 768 * 3072}, {"mlp.proj", 3072 * 768}, {"ln_f", 768}};
  Reducer reducer(*pg, params, 4u << 20);

  int64_t* step_counter = nullptr;
  CUDACHECK(cudaMalloc(&step_counter, sizeof(int64_t)));
  CUDACHECK(cudaMemset(step_counter, 0, sizeof(int64_t)));
  pg->broadcast(std::span<int64_t>(step_counter, 1), 0)->wait(compute);

  cudaEvent_t backward_done;
  CUDACHECK(cudaEventCreateWithFlags(&backward_done, cudaEventDisableTiming));
  for (int step = 0; step < 5; ++step) {
    reducer.prepare();
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      grad_kernel<<<128, 256, 0, compute>>>(it->grad.data(), it->grad.size(), 0.01f * (rank + 1));
      CUDACHECK(cudaEventRecord(backward_done, compute));
      CUDACHECK(cudaStreamWaitEvent(nccl_stream, backward_done, 0));
      it->on_grad_ready();
    }
    reducer.finalize(compute);
    CUDACHECK(cudaStreamSynchronize(compute));
    bf16 h;
    CUDACHECK(cudaMemcpy(&h, params.front().grad.data(), sizeof(h), cudaMemcpyDeviceToHost));
    if (rank == 0) printf("step %d buckets %zu embed.grad[0] %.5f\n", step, reducer.num_buckets(), __bfloat162float(h));
  }

  CUDACHECK(cudaEventDestroy(backward_done));
  CUDACHECK(cudaFree(step_counter));
  NCCLCHECK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
