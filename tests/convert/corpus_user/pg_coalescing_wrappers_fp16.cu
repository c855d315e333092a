// A ring-pipelined step written against a small ProcessGroup wrapper (torch.distributed's shape):
// send/recv coalesced through start_coalescing()/end_coalescing() at two places (activations
// forward, gradients back), fp16 tensors owned by a RAII Tensor class, an all-reduce member, MPI
// bootstrap.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <mpi.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDA_CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "CUDA %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define NCCL_CHECK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { fprintf(stderr, "NCCL %s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); exit(1); } } while (0)

class Tensor {
 public:
  explicit Tensor(size_t n) : numel_(n) { CUDA_CHECK(cudaMalloc(&data_, n * sizeof(__half))); }
  ~Tensor() { cudaFree(data_); }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  __half* data() const { return data_; }
  size_t numel() const { return numel_; }
 private:
  __half* data_ = nullptr;
  size_t numel_ = 0;
};

class ProcessGroup {
 public:
  ProcessGroup(ncclUniqueId id, int rank, int size) : rank_(rank), size_(size) {
    NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank));
    CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  ~ProcessGroup() {
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  void start_coalescing() { NCCL_CHECK(ncclGroupStart()); }
  void end_coalescing() { NCCL_CHECK(ncclGroupEnd()); }
  void send(const Tensor& t, int peer) { NCCL_CHECK(ncclSend(t.data(), t.numel(), ncclHalf, peer, comm_, stream_)); }
  void recv(Tensor& t, int peer) { NCCL_CHECK(ncclRecv(t.data(), t.numel(), ncclHalf, peer, comm_, stream_)); }
  void all_reduce(Tensor& t) { NCCL_CHECK(ncclAllReduce(t.data(), t.data(), t.numel(), ncclHalf, ncclSum, comm_, stream_)); }
  void synchronize() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  cudaStream_t stream() const { return stream_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_, size_;
};

__global__ void stage_forward(const __half* in, __half* out, size_t n, float scale) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half(__half2float(in[i]) * scale + 0.5f);
}

__global__ void fill(__half* p, size_t n, float v) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = __float2half(v + (float)(i % 97) * 0.01f);
}

static void exchange_boundary(ProcessGroup& pg, Tensor& send_buf, Tensor& recv_buf) {
  const int next = (pg.rank() + 1) % pg.size();
  const int prev = (pg.rank() + pg.size() - 1) % pg.size();
  pg.start_coalescing();
  pg.send(send_buf, next);
  pg.recv(recv_buf, prev);
  pg.end_coalescing();
}

static void return_gradient(ProcessGroup& pg, Tensor& grad_out, Tensor& grad_in) {
  const int next = (pg.rank() + 1) % pg.size();
  const int prev = (pg.rank() + pg.size() - 1) % pg.size();
  pg.start_coalescing();
  pg.recv(grad_in, next);
  pg.send(grad_out, prev);
  pg.end_coalescing();
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int ndev = 0;
  CUDA_CHECK(cudaGetDeviceCount(&ndev));
  CUDA_CHECK(cudaSetDevice(rank % ndev));
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  {
    ProcessGroup pg(id, rank, size);
    const size_t n = 1 << 20;
    Tensor act(n), boundary(n), grad(n), grad_in(n);
    fill<<<(n + 255) / 256, 256, 0, pg.stream()>>>(act.data(), n, (float)rank);
    for (int step = 0; step < 4; ++step) {
      stage_forward<<<(n + 255) / 256, 256, 0, pg.stream()>>>(act.data(), grad.data(), n, 0.5f);
      exchange_boundary(pg, grad, boundary);
      stage_forward<<<(n + 255) / 256, 256, 0, pg.stream()>>>(boundary.data(), act.data(), n, 0.25f);
      return_gradient(pg, act, grad_in);
      stage_forward<<<(n + 255) / 256, 256, 0, pg.stream()>>>(grad_in.data(), grad.data(), n, 0.125f);
      pg.all_reduce(grad);
    }
    pg.synchronize();
    std::vector<__half> host(n);
    CUDA_CHECK(cudaMemcpy(host.data(), grad.data(), n * sizeof(__half), cudaMemcpyDeviceToHost));
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += __half2float(host[i]);
    printf("rank %d grad checksum %.4f\n", rank, sum);
  }
  MPI_Finalize();
  return 0;
}
