// DDP-style gradient bucketing in C++20: every parameter's gradient lives in one flat fp32 buffer,
// buckets are std::span<float> views into it (made with subspan), and the all-reduces are not issued
// during backward: a lambda per ready bucket is queued in a std::function work queue and the queue is
// flushed once at the end of the step. Activations of the last three micro-steps sit in a
// std::array<float*, 3> and are all-gathered through a span-taking helper for a metrics pass.
// File-based bootstrap (rank 0 writes the unique id to the launcher's NCCL_ID_FILE, else DDP_ID_FILE,
// else /tmp/ddp_nccl_id; readers take only a file written during this run, and rank 0 removes it
// once every rank has joined), ranks from the launcher's environment.
#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#define CK(call)                                                                     \
  do {                                                                               \
    cudaError_t e = (call);                                                          \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)
#define NCK(call)                                                                    \
  do {                                                                               \
    ncclResult_t r = (call);                                                         \
    if (r != ncclSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace ddp {

struct Env {
  int rank = 0, world = 1;
  std::string id_path = "/tmp/ddp_nccl_id";
  std::filesystem::file_time_type started = std::filesystem::file_time_type::clock::now();
  static Env from_environment() {
    Env e;
    if (const char* r = std::getenv("RANK")) e.rank = std::atoi(r);
    if (const char* w = std::getenv("WORLD_SIZE")) e.world = std::atoi(w);
    // the launcher's per-run file first; the fixed default is shared by every run on the machine
    if (const char* p = std::getenv("NCCL_ID_FILE"))
      e.id_path = p;
    else if (const char* p = std::getenv("DDP_ID_FILE"))
      e.id_path = p;
    return e;
  }
};

// A file left by an earlier run (one that died before removing it) holds a dead root's id: a reader
// that took it would fail while rank 0 waits for it forever. Readers take only a file written after
// they started, less a margin for ranks launched a little after rank 0.
constexpr std::chrono::seconds kIdFileMargin{30};

ncclUniqueId exchange_id(const Env& env) {
  ncclUniqueId id;
  if (env.rank == 0) {
    NCK(ncclGetUniqueId(&id));
    const std::string part = env.id_path + ".part";
    std::ofstream(part, std::ios::binary).write(reinterpret_cast<const char*>(&id), sizeof(id));
    std::rename(part.c_str(), env.id_path.c_str());
    return id;
  }
  for (;;) {
    std::error_code ec;
    const auto written = std::filesystem::last_write_time(env.id_path, ec);
    if (!ec && written >= env.started - kIdFileMargin) {
      std::ifstream in(env.id_path, std::ios::binary);
      if (in && in.read(reinterpret_cast<char*>(&id), sizeof(id))) return id;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Once the communicator exists every rank has read the id: the file is not left for the next run.
void remove_id_file(const Env& env) {
  std::error_code ec;
  if (env.rank == 0) std::filesystem::remove(env.id_path, ec);
}

// Collectives recorded during backward and issued together at the end of the step.
class PendingWork {
 public:
  using Op = std::function<void(ncclComm_t, cudaStream_t)>;
  void enqueue(Op op) { ops_.push_back(std::move(op)); }
  size_t size() const { return ops_.size(); }
  void flush(ncclComm_t comm, cudaStream_t stream) {
    for (auto& op : ops_) op(comm, stream);
    ops_.clear();
  }

 private:
  std::vector<Op> ops_;
};

void allgather_span(std::span<const float> in, std::span<float> out, ncclComm_t comm, cudaStream_t stream) {
  NCK(ncclAllGather(in.data(), out.data(), in.size(), ncclFloat, comm, stream));
}

}  // namespace ddp

namespace {

constexpr std::array<size_t, 6> kParamSizes = {768 * 768, 768, 768 * 3072, 3072, 3072 * 768, 768};
constexpr size_t kBucketElems = 1 << 20;
constexpr size_t kActElems = 4096;

__global__ void produce_grad(float* g, size_t n, int rank, int step) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = 1e-3f * (float)((i + rank * 13 + step) % 29);
}

__global__ void fill_act(float* a, size_t n, float v) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) a[i] = v + 0.5f * (float)(i % 8);
}

struct Bucket {
  size_t offset = 0, count = 0;
};

std::vector<Bucket> make_buckets(size_t total) {
  std::vector<Bucket> out;
  for (size_t off = 0; off < total; off += kBucketElems) out.push_back({off, std::min(kBucketElems, total - off)});
  return out;
}

}  // namespace

int main() {
  const ddp::Env env = ddp::Env::from_environment();
  CK(cudaSetDevice(env.rank));
  ncclUniqueId id = ddp::exchange_id(env);
  ncclComm_t comm;
  NCK(ncclCommInitRank(&comm, env.world, id, env.rank));
  ddp::remove_id_file(env);
  cudaStream_t compute, comm_stream;
  CK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));
  cudaEvent_t grads_ready;
  CK(cudaEventCreateWithFlags(&grads_ready, cudaEventDisableTiming));

  size_t total = 0;
  for (size_t n : kParamSizes) total += n;
  float* flat_grads = nullptr;
  CK(cudaMalloc(&flat_grads, total * sizeof(float)));
  const std::span<float> grads(flat_grads, total);
  const std::vector<Bucket> buckets = make_buckets(total);

  std::array<float*, 3> acts{};
  for (auto& a : acts) CK(cudaMalloc(&a, kActElems * sizeof(float)));
  float* gathered = nullptr;
  CK(cudaMalloc(&gathered, kActElems * env.world * sizeof(float)));
  float* scale = nullptr;
  CK(cudaMalloc(&scale, sizeof(float)));

  ddp::PendingWork work;
  std::vector<float> host(4);
  for (int step = 0; step < 8; ++step) {
    // backward, last parameter first; a bucket's all-reduce is queued when its last gradient is written
    size_t written = total;
    for (size_t p = kParamSizes.size(); p-- > 0;) {
      written -= kParamSizes[p];
      produce_grad<<<256, 256, 0, compute>>>(grads.subspan(written, kParamSizes[p]).data(), kParamSizes[p], env.rank, step);
    }
    for (const Bucket& b : buckets) {
      std::span<float> view = grads.subspan(b.offset, b.count);
      work.enqueue([view](ncclComm_t c, cudaStream_t s) {
        NCK(ncclAllReduce(view.data(), view.data(), view.size(), ncclFloat, ncclAvg, c, s));
      });
    }
    CK(cudaEventRecord(grads_ready, compute));
    CK(cudaStreamWaitEvent(comm_stream, grads_ready, 0));
    work.flush(comm, comm_stream);

    float* a = acts[step % acts.size()];
    fill_act<<<(kActElems + 255) / 256, 256, 0, compute>>>(a, kActElems, (float)(env.rank + step));
    CK(cudaStreamSynchronize(compute));
    ddp::allgather_span(std::span<const float>(a, kActElems), std::span<float>(gathered, kActElems * env.world), comm,
                        comm_stream);
    // the loss scale is agreed on by taking the max over ranks
    float local_scale = 1024.0f / (float)(1 + env.rank);
    CK(cudaMemcpyAsync(scale, &local_scale, sizeof(float), cudaMemcpyHostToDevice, comm_stream));
    NCK(ncclAllReduce(std::span<float>(scale, 1).data(), scale, 1, ncclFloat, ncclMax, comm, comm_stream));
    CK(cudaStreamSynchronize(comm_stream));
    CK(cudaMemcpy(host.data(), flat_grads, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    float s = 0;
    CK(cudaMemcpy(&s, scale, sizeof(float), cudaMemcpyDeviceToHost));
    if (env.rank == 0) std::printf("step %d grad[0..3] %.4f %.4f %.4f %.4f scale %.1f\n", step, host[0], host[1], host[2], host[3], s);
  }

  CK(cudaFree(scale));
  CK(cudaFree(gathered));
  for (float* a : acts) CK(cudaFree(a));
  CK(cudaFree(flat_grads));
  CK(cudaEventDestroy(grads_ready));
  CK(cudaStreamDestroy(comm_stream));
  CK(cudaStreamDestroy(compute));
  NCK(ncclCommDestroy(comm));
  return 0;
}
