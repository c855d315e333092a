// A 2-D heat-diffusion stencil in the style of HPC course codes, MPI bootstrap: the grid of each
// rank is a slab of rows allocated with cudaMallocPitch (two ghost rows, rows padded to the pitch
// the driver picks), indexed through `pitch / sizeof(float)`. A `Domain` struct carries the grid,
// its pitch and the neighbours; `exchange_halo(&dom, stream)` sends the first and last interior
// rows and receives the ghost rows in one NCCL group (non-periodic: the end ranks skip a side).
// Every `check_every` steps the squared change is reduced in the kernel (fixed order: a tree per
// block, the blocks' sums in one block) and all-reduced as a double.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDA_CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d CUDA %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define NCCL_CHECK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { fprintf(stderr, "%s:%d NCCL %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

struct Domain {
  float* u = nullptr;
  float* u_new = nullptr;
  size_t pitch = 0;  // bytes per row, both grids
  int nx = 0, rows = 0;  // interior rows; the grid has rows + 2
  int up = -1, down = -1;
  ncclComm_t comm;
};

__global__ void init_grid(float* u, size_t ld, int nx, int rows, int rank) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < nx && y < rows + 2) u[y * ld + x] = (y == 0 || y == rows + 1) ? 0.f : 0.001f * ((x * 7 + (y + rank * rows) * 13) % 1000);
}

__global__ void step(const float* u, float* u_new, size_t ld, int nx, int rows, double* partial) {
  __shared__ double acc[256];
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y + 1;
  double d = 0.0;
  if (x > 0 && x < nx - 1 && y <= rows) {
    const float v = 0.25f * (u[(y - 1) * ld + x] + u[(y + 1) * ld + x] + u[y * ld + x - 1] + u[y * ld + x + 1]);
    u_new[y * ld + x] = v;
    d = (double)(v - u[y * ld + x]) * (v - u[y * ld + x]);
  }
  acc[threadIdx.x] = d;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) acc[threadIdx.x] += acc[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.y * gridDim.x + blockIdx.x] = acc[0];
}

__global__ void sum_partials(const double* partial, int n, double* out) {
  __shared__ double acc[256];
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  acc[threadIdx.x] = s;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) acc[threadIdx.x] += acc[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = acc[0];
}

static void exchange_halo(Domain* d, float* grid, cudaStream_t stream) {
  const size_t ld = d->pitch / sizeof(float);
  NCCL_CHECK(ncclGroupStart());
  if (d->up >= 0) {
    NCCL_CHECK(ncclSend(grid + ld, d->nx, ncclFloat, d->up, d->comm, stream));
    NCCL_CHECK(ncclRecv(grid, d->nx, ncclFloat, d->up, d->comm, stream));
  }
  if (d->down >= 0) {
    NCCL_CHECK(ncclSend(grid + ld * d->rows, d->nx, ncclFloat, d->down, d->comm, stream));
    NCCL_CHECK(ncclRecv(grid + ld * (d->rows + 1), d->nx, ncclFloat, d->down, d->comm, stream));
  }
  NCCL_CHECK(ncclGroupEnd());
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int ndev = 0;
  CUDA_CHECK(cudaGetDeviceCount(&ndev));
  CUDA_CHECK(cudaSetDevice(rank % ndev));
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);

  Domain dom;
  dom.nx = argc > 1 ? atoi(argv[1]) : 3000;  // not a multiple of the pitch alignment
  dom.rows = argc > 2 ? atoi(argv[2]) : 512;
  const int steps = argc > 3 ? atoi(argv[3]) : 200, check_every = 50;
  dom.up = rank > 0 ? rank - 1 : -1;
  dom.down = rank < nranks - 1 ? rank + 1 : -1;
  NCCL_CHECK(ncclCommInitRank(&dom.comm, nranks, id, rank));

  size_t pitch_new = 0;
  CUDA_CHECK(cudaMallocPitch((void**)&dom.u, &dom.pitch, dom.nx * sizeof(float), dom.rows + 2));
  CUDA_CHECK(cudaMallocPitch((void**)&dom.u_new, &pitch_new, dom.nx * sizeof(float), dom.rows + 2));
  if (pitch_new != dom.pitch) {
    fprintf(stderr, "pitches differ\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const size_t ld = dom.pitch / sizeof(float);
  const dim3 block(256), grid((dom.nx + 255) / 256, dom.rows), init_blocks((dom.nx + 255) / 256, dom.rows + 2);
  double *partial, *change;
  CUDA_CHECK(cudaMalloc(&partial, sizeof(double) * grid.x * grid.y));
  CUDA_CHECK(cudaMalloc(&change, sizeof(double)));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  init_grid<<<init_blocks, block, 0, stream>>>(dom.u, ld, dom.nx, dom.rows, rank);
  init_grid<<<init_blocks, block, 0, stream>>>(dom.u_new, ld, dom.nx, dom.rows, rank);

  double h_change = 0.0;
  for (int it = 1; it <= steps; ++it) {
    exchange_halo(&dom, dom.u, stream);
    step<<<grid, block, 0, stream>>>(dom.u, dom.u_new, ld, dom.nx, dom.rows, partial);
    if (it % check_every == 0) {
      sum_partials<<<1, 256, 0, stream>>>(partial, grid.x * grid.y, change);
      NCCL_CHECK(ncclAllReduce(change, change, 1, ncclDouble, ncclSum, dom.comm, stream));
      CUDA_CHECK(cudaMemcpyAsync(&h_change, change, sizeof(double), cudaMemcpyDeviceToHost, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      if (rank == 0) printf("step %d: change %.6e\n", it, h_change);
    }
    float* t = dom.u;
    dom.u = dom.u_new;
    dom.u_new = t;
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaFree(dom.u));
  CUDA_CHECK(cudaFree(dom.u_new));
  CUDA_CHECK(cudaFree(partial));
  CUDA_CHECK(cudaFree(change));
  NCCL_CHECK(ncclCommDestroy(dom.comm));
  MPI_Finalize();
  return 0;
}
