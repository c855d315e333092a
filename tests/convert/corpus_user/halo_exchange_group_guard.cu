// Course code for a 1-D heat equation split over ranks, written with small C++ utilities: a
// scope guard that opens an NCCL group in its constructor and closes it in its destructor
// (`NcclGroup group;` then the halo sends and receives), a residual reduced with ncclMax in double
// precision to decide convergence, and the interior packed into an output buffer gathered on every
// rank at the end.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#define NCCL_CHECK(call)                                                                      \
  do {                                                                                        \
    ncclResult_t status_ = (call);                                                            \
    if (status_ != ncclSuccess) {                                                             \
      std::fprintf(stderr, "NCCL %s at %s:%d\n", ncclGetErrorString(status_), __FILE__, __LINE__); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#define CUDA_CHECK(call)                                                                      \
  do {                                                                                        \
    cudaError_t status_ = (call);                                                             \
    if (status_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "CUDA %s at %s:%d\n", cudaGetErrorString(status_), __FILE__, __LINE__); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

// Everything issued while it lives is one NCCL group.
class NcclGroup {
 public:
  NcclGroup() { NCCL_CHECK(ncclGroupStart()); }
  ~NcclGroup() { ncclGroupEnd(); }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
};

struct Domain {
  int rank = 0, size = 1;
  int n = 0;            // interior cells of this rank
  float* u = nullptr;   // n + 2 cells: a halo cell at each end
  float* next = nullptr;
  double* residual = nullptr;
};

__global__ void jacobi(const float* u, float* next, int n, double* residual) {
  int i = blockIdx.x * blockDim.x + threadIdx.x + 1;
  if (i <= n) {
    next[i] = 0.5f * (u[i - 1] + u[i + 1]);
    double d = fabs((double)next[i] - (double)u[i]);
    unsigned long long* r = (unsigned long long*)residual;
    atomicMax(r, __double_as_longlong(d));  // non-negative doubles order like their bits
  }
}

__global__ void pack_interior(const float* u, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = u[i + 1];
}

static void exchange_halos(Domain& d, ncclComm_t comm, cudaStream_t stream) {
  const int left = d.rank - 1, right = d.rank + 1;
  NcclGroup group;
  if (left >= 0) {
    NCCL_CHECK(ncclSend(d.u + 1, 1, ncclFloat, left, comm, stream));
    NCCL_CHECK(ncclRecv(d.u, 1, ncclFloat, left, comm, stream));
  }
  if (right < d.size) {
    NCCL_CHECK(ncclSend(d.u + d.n, 1, ncclFloat, right, comm, stream));
    NCCL_CHECK(ncclRecv(d.u + d.n + 1, 1, ncclFloat, right, comm, stream));
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Domain d;
  MPI_Comm_rank(MPI_COMM_WORLD, &d.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &d.size);
  d.n = argc > 1 ? std::atoi(argv[1]) : 1 << 16;
  int devices = 1;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  CUDA_CHECK(cudaSetDevice(d.rank % devices));

  ncclUniqueId id;
  if (d.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_CHECK(ncclCommInitRank(&comm, d.size, id, d.rank));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));

  CUDA_CHECK(cudaMalloc(&d.u, (d.n + 2) * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&d.next, (d.n + 2) * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&d.residual, sizeof(double)));
  CUDA_CHECK(cudaMemset(d.u, 0, (d.n + 2) * sizeof(float)));
  CUDA_CHECK(cudaMemset(d.next, 0, (d.n + 2) * sizeof(float)));
  if (d.rank == 0) {
    const float hot = 100.f;
    CUDA_CHECK(cudaMemcpy(d.u, &hot, sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d.next, &hot, sizeof(float), cudaMemcpyHostToDevice));
  }

  double res = 1.0;
  int it = 0;
  for (; it < 1000 && res > 1e-4; ++it) {
    exchange_halos(d, comm, stream);
    CUDA_CHECK(cudaMemsetAsync(d.residual, 0, sizeof(double), stream));
    jacobi<<<(d.n + 255) / 256, 256, 0, stream>>>(d.u, d.next, d.n, d.residual);
    NCCL_CHECK(ncclAllReduce(d.residual, d.residual, 1, ncclDouble, ncclMax, comm, stream));
    CUDA_CHECK(cudaMemcpyAsync(&res, d.residual, sizeof(double), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    float* t = d.u;
    d.u = d.next;
    d.next = t;
  }

  float *interior, *field;
  CUDA_CHECK(cudaMalloc(&interior, d.n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&field, (size_t)d.n * d.size * sizeof(float)));
  pack_interior<<<(d.n + 255) / 256, 256, 0, stream>>>(d.u, interior, d.n);
  NCCL_CHECK(ncclAllGather(interior, field, d.n, ncclFloat, comm, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  float last = 0.f;
  CUDA_CHECK(cudaMemcpy(&last, field + (size_t)d.n * d.size - 1, sizeof(float), cudaMemcpyDeviceToHost));
  if (d.rank == 0) std::printf("%d iterations, residual %g, last cell %f\n", it, res, last);

  CUDA_CHECK(cudaFree(interior));
  CUDA_CHECK(cudaFree(field));
  CUDA_CHECK(cudaFree(d.u));
  CUDA_CHECK(cudaFree(d.next));
  CUDA_CHECK(cudaFree(d.residual));
  CUDA_CHECK(cudaStreamDestroy(stream));
  NCCL_CHECK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
