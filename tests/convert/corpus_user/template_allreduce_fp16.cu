// A templated all-reduce helper picking the NCCL type from T, used for fp16 activations and fp32
// statistics; file-based bootstrap (rank 0 writes the unique id to a file).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <type_traits>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::fprintf(stderr, "cuda %s\n", cudaGetErrorString(e_)); std::abort(); } } while (0)
#define CHECK_NCCL(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { std::fprintf(stderr, "nccl %s\n", ncclGetErrorString(r_)); std::abort(); } } while (0)

template <typename T> ncclDataType_t nccl_type() {
  if (std::is_same<T, half>::value) return ncclHalf;
  if (std::is_same<T, float>::value) return ncclFloat;
  return ncclInt32;
}

template <typename T>
void all_reduce_sum(T* buf, size_t count, ncclComm_t comm, cudaStream_t stream) {
  CHECK_NCCL(ncclAllReduce(buf, buf, count, nccl_type<T>(), ncclSum, comm, stream));
}

__global__ void fill_half(half* x, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = __float2half(0.25f * ((i + rank) % 5));
}
__global__ void row_stats(const half* x, float* stats, size_t rows, size_t cols) {
  size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float s = 0;
  for (size_t c = 0; c < cols; ++c) s += __half2float(x[r * cols + c]);
  stats[r] = s;
}

int main() {
  int rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0");
  int world = std::atoi(std::getenv("WORLD_SIZE") ? std::getenv("WORLD_SIZE") : "1");
  std::string id_file = std::getenv("NCCL_ID_FILE") ? std::getenv("NCCL_ID_FILE") : "/tmp/nccl_id.bin";
  ncclUniqueId id;
  if (rank == 0) {
    CHECK_NCCL(ncclGetUniqueId(&id));
    std::ofstream(id_file + ".tmp", std::ios::binary).write(reinterpret_cast<char*>(&id), sizeof(id));
    std::rename((id_file + ".tmp").c_str(), id_file.c_str());
  } else {
    for (;;) {
      std::ifstream in(id_file, std::ios::binary);
      if (in && in.read(reinterpret_cast<char*>(&id), sizeof(id))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  CHECK_CUDA(cudaSetDevice(rank));
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const size_t rows = 4096, cols = 2048;
  half* act = nullptr;
  float* stats = nullptr;
  CHECK_CUDA(cudaMalloc(&act, rows * cols * sizeof(half)));
  CHECK_CUDA(cudaMalloc(&stats, rows * sizeof(float)));
  fill_half<<<512, 256, 0, stream>>>(act, rows * cols, rank);
  all_reduce_sum(act, rows * cols, comm, stream);
  row_stats<<<(rows + 255) / 256, 256, 0, stream>>>(act, stats, rows, cols);
  all_reduce_sum(stats, rows, comm, stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  float h = 0;
  CHECK_CUDA(cudaMemcpy(&h, stats, sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("rank %d stats[0] %.3f\n", rank, h);
  CHECK_CUDA(cudaFree(act));
  CHECK_CUDA(cudaFree(stats));
  CHECK_NCCL(ncclCommDestroy(comm));
  return 0;
}
