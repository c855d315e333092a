// Data-parallel training step with a background communication thread, the shape of PyTorch's
// reducer and of hand-written trainers that keep NCCL off the critical path: one rank per process
// (RANK / WORLD_SIZE from the launcher, the NCCL id through a file), fp16 gradients per layer in a
// std::vector<__half*>, and a CommThread object that owns a std::thread. Backward runs on the main
// thread; each layer's gradient is handed to the thread with an event recorded after it is written;
// the thread makes its own stream wait on that event and all-reduces the layer (fp16 sum), then a
// final loss all-reduce (fp32) is issued by the main thread itself. The main thread waits until the
// queue is drained before the optimizer step.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define CUDA_OK(call)                                                                \
  do {                                                                               \
    cudaError_t e = (call);                                                          \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)
#define NCCL_OK(call)                                                                \
  do {                                                                               \
    ncclResult_t r = (call);                                                         \
    if (r != ncclSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// rank 0 writes the id, the others read a file written during this run
ncclUniqueId shared_id(int rank, const std::string& path) {
  ncclUniqueId id;
  const auto started = std::filesystem::file_time_type::clock::now();
  if (rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    std::ofstream(path + ".tmp", std::ios::binary).write(reinterpret_cast<const char*>(&id), sizeof(id));
    std::filesystem::rename(path + ".tmp", path);
    return id;
  }
  for (;;) {
    std::error_code ec;
    auto t = std::filesystem::last_write_time(path, ec);
    if (!ec && t >= started - std::chrono::seconds(30)) {
      std::ifstream in(path, std::ios::binary);
      if (in.read(reinterpret_cast<char*>(&id), sizeof(id))) return id;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// All-reduces handed over by the training loop, issued in order on the thread's own stream.
class CommThread {
 public:
  CommThread(int device, ncclComm_t comm) : device_(device), comm_(comm) {
    worker_ = std::thread([this] { run(); });
  }
  ~CommThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void submit(__half* grad, size_t count, cudaEvent_t ready) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(Task{grad, count, ready});
      ++pending_;
    }
    cv_.notify_all();
  }
  // returns once every submitted all-reduce has completed on the device
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  struct Task {
    __half* grad;
    size_t count;
    cudaEvent_t ready;
  };
  void run() {
    CUDA_OK(cudaSetDevice(device_));  // the current device is per thread
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (;;) {
      Task t;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) break;
        t = queue_.front();
        queue_.pop_front();
      }
      CUDA_OK(cudaStreamWaitEvent(stream, t.ready, 0));
      NCCL_OK(ncclAllReduce(t.grad, t.grad, t.count, ncclHalf, ncclSum, comm_, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      {
        std::lock_guard<std::mutex> lock(mu_);
        --pending_;
      }
      done_cv_.notify_all();
    }
    CUDA_OK(cudaStreamDestroy(stream));
  }

  int device_;
  ncclComm_t comm_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Task> queue_;
  int pending_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

__global__ void backward_layer(__half* grad, const float* weight, size_t n, int rank, int step, int layer) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float g = 0.01f * weight[i] + 0.001f * (float)((i * 7 + rank * 3 + step + layer) % 17);
    grad[i] = __float2half(g);
  }
}

__global__ void sgd_step(float* weight, const __half* grad, size_t n, float lr, float* loss_part) {
  float local = 0.f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float g = __half2float(grad[i]);
    weight[i] -= lr * g;
    local += weight[i] * weight[i];
  }
  atomicAdd(loss_part, local);
}

}  // namespace

int main() {
  const int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1);
  const char* id_file = std::getenv("NCCL_ID_FILE");
  CUDA_OK(cudaSetDevice(rank));
  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, world, shared_id(rank, id_file ? id_file : "/tmp/ddp_thread_id"), rank));

  const std::vector<size_t> layer_sizes = {1 << 18, 1 << 16, 3 << 16, 1 << 18, 1 << 12};
  std::vector<float*> weights(layer_sizes.size());
  std::vector<__half*> grads(layer_sizes.size());
  std::vector<cudaEvent_t> written(layer_sizes.size());
  for (size_t l = 0; l < layer_sizes.size(); ++l) {
    CUDA_OK(cudaMalloc(&weights[l], layer_sizes[l] * sizeof(float)));
    CUDA_OK(cudaMalloc(&grads[l], layer_sizes[l] * sizeof(__half)));
    CUDA_OK(cudaMemset(weights[l], 0, layer_sizes[l] * sizeof(float)));
    CUDA_OK(cudaEventCreateWithFlags(&written[l], cudaEventDisableTiming));
  }
  float* loss = nullptr;
  CUDA_OK(cudaMalloc(&loss, sizeof(float)));
  cudaStream_t compute;
  CUDA_OK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));

  {
    CommThread reducer(rank, comm);
    for (int step = 0; step < 6; ++step) {
      // backward, last layer first; each layer's gradient goes to the communication thread at once
      for (size_t l = layer_sizes.size(); l-- > 0;) {
        backward_layer<<<128, 256, 0, compute>>>(grads[l], weights[l], layer_sizes[l], rank, step, (int)l);
        CUDA_OK(cudaEventRecord(written[l], compute));
        reducer.submit(grads[l], layer_sizes[l], written[l]);
      }
      reducer.drain();
      CUDA_OK(cudaMemsetAsync(loss, 0, sizeof(float), compute));
      for (size_t l = 0; l < layer_sizes.size(); ++l)
        sgd_step<<<128, 256, 0, compute>>>(weights[l], grads[l], layer_sizes[l], 0.5f / world, loss);
      NCCL_OK(ncclAllReduce(loss, loss, 1, ncclFloat, ncclSum, comm, compute));
      float host_loss = 0.f;
      CUDA_OK(cudaMemcpyAsync(&host_loss, loss, sizeof(float), cudaMemcpyDeviceToHost, compute));
      CUDA_OK(cudaStreamSynchronize(compute));
      if (rank == 0) std::printf("step %d weight norm^2 over ranks %.6e\n", step, host_loss);
    }
  }

  CUDA_OK(cudaFree(loss));
  for (size_t l = 0; l < layer_sizes.size(); ++l) {
    CUDA_OK(cudaFree(weights[l]));
    CUDA_OK(cudaFree(grads[l]));
    CUDA_OK(cudaEventDestroy(written[l]));
  }
  CUDA_OK(cudaStreamDestroy(compute));
  NCCL_OK(ncclCommDestroy(comm));
  return 0;
}
