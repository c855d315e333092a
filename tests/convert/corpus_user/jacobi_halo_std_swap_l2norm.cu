/* jacobi_nccl.cu -- 2-D Jacobi solver, domain split in horizontal slabs over MPI ranks.
 *
 * The way the multi-GPU tutorials write it: `a` and `a_new` swapped with std::swap after every
 * sweep, the halo rows received straight into `a_new`'s ghost rows and sent from its first and
 * last interior rows (periodic in y, so every rank has two neighbours), a separate push stream
 * that waits on the compute stream's event, the L2 norm of the update all-reduced every
 * `nccheck` iterations (real = float or double, chosen by -DUSE_DOUBLE), the host copy of the
 * norm in pinned memory. MPI gives the rank, the node-local rank (device) and the NCCL id.
 * The norm is summed in a fixed order (a tree in each block, then the blocks' partial sums in one
 * block) rather than by atomicAdd into one word, so that it is the same on every run, and the
 * defaults (4096 x 4096, 1000 iterations) run in well under a second of GPU time. */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#ifdef USE_DOUBLE
typedef double real;
#define MPI_REAL_TYPE MPI_DOUBLE
#define NCCL_REAL_TYPE ncclDouble
#else
typedef float real;
#define MPI_REAL_TYPE MPI_FLOAT
#define NCCL_REAL_TYPE ncclFloat
#endif

#define MPI_CALL(call)                                                                      \
  {                                                                                         \
    int mpi_status = call;                                                                  \
    if (0 != mpi_status) {                                                                  \
      fprintf(stderr, "ERROR: MPI call \"%s\" in line %d of file %s failed with %d.\n",    \
              #call, __LINE__, __FILE__, mpi_status);                                       \
    }                                                                                       \
  }
#define CUDA_RT_CALL(call)                                                                  \
  {                                                                                         \
    cudaError_t cudaStatus = call;                                                          \
    if (cudaSuccess != cudaStatus)                                                          \
      fprintf(stderr, "ERROR: CUDA RT call \"%s\" in line %d of file %s failed with %s (%d).\n", \
              #call, __LINE__, __FILE__, cudaGetErrorString(cudaStatus), cudaStatus);      \
  }
#define NCCL_CALL(call)                                                                     \
  {                                                                                         \
    ncclResult_t ncclStatus = call;                                                         \
    if (ncclSuccess != ncclStatus)                                                          \
      fprintf(stderr, "ERROR: NCCL call \"%s\" in line %d of file %s failed with %s (%d).\n", \
              #call, __LINE__, __FILE__, ncclGetErrorString(ncclStatus), ncclStatus);      \
  }

static const real tol = 1.0e-8;
constexpr int dim_block_x = 32;
constexpr int dim_block_y = 8;

__global__ void initialize_boundaries(real* a, real* a_new, const real pi, const int offset, const int nx,
                                      const int my_ny, const int ny) {
  for (int iy = blockIdx.x * blockDim.x + threadIdx.x; iy < my_ny; iy += blockDim.x * gridDim.x) {
    const real y0 = sin(2.0 * pi * (offset + iy) / (ny - 1));
    a[iy * nx + 0] = y0;
    a[iy * nx + (nx - 1)] = y0;
    a_new[iy * nx + 0] = y0;
    a_new[iy * nx + (nx - 1)] = y0;
  }
}

/* One sweep; with calculate_norm, each block writes the sum of its squared residues to
 * block_l2[block] (launched with dim_block_x x dim_block_y threads). */
__global__ void jacobi_kernel(real* __restrict__ a_new, const real* __restrict__ a, real* __restrict__ block_l2,
                              const int iy_start, const int iy_end, const int nx, const bool calculate_norm) {
  __shared__ real partial[dim_block_x * dim_block_y];
  int iy = blockIdx.y * blockDim.y + threadIdx.y + iy_start;
  int ix = blockIdx.x * blockDim.x + threadIdx.x + 1;
  real local_l2_norm = 0.0;
  if (iy < iy_end && ix < (nx - 1)) {
    const real new_val = 0.25 * (a[iy * nx + ix + 1] + a[iy * nx + ix - 1] + a[(iy + 1) * nx + ix] + a[(iy - 1) * nx + ix]);
    a_new[iy * nx + ix] = new_val;
    if (calculate_norm) {
      real residue = new_val - a[iy * nx + ix];
      local_l2_norm += residue * residue;
    }
  }
  if (!calculate_norm) return;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  partial[t] = local_l2_norm;
  __syncthreads();
  for (int stride = blockDim.x * blockDim.y / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) block_l2[blockIdx.y * gridDim.x + blockIdx.x] = partial[0];
}

/* The blocks' partial sums, added in a fixed order by one block of 256 threads. */
__global__ void sum_block_norms(real* __restrict__ l2_norm, const real* __restrict__ block_l2, const int nblocks) {
  __shared__ real partial[256];
  real sum = 0.0;
  for (int i = threadIdx.x; i < nblocks; i += blockDim.x) sum += block_l2[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *l2_norm = partial[0];
}

int main(int argc, char* argv[]) {
  MPI_CALL(MPI_Init(&argc, &argv));
  int rank, size;
  MPI_CALL(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CALL(MPI_Comm_size(MPI_COMM_WORLD, &size));

  const int iter_max = argc > 1 ? atoi(argv[1]) : 1000;
  const int nccheck = argc > 2 ? atoi(argv[2]) : 1;
  const int nx = argc > 3 ? atoi(argv[3]) : 4096;
  const int ny = argc > 4 ? atoi(argv[4]) : 4096;

  ncclUniqueId nccl_uid;
  if (rank == 0) NCCL_CALL(ncclGetUniqueId(&nccl_uid));
  MPI_CALL(MPI_Bcast(&nccl_uid, sizeof(ncclUniqueId), MPI_BYTE, 0, MPI_COMM_WORLD));

  int local_rank = -1;
  {
    MPI_Comm local_comm;
    MPI_CALL(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local_comm));
    MPI_CALL(MPI_Comm_rank(local_comm, &local_rank));
    MPI_CALL(MPI_Comm_free(&local_comm));
  }
  int num_devices = 0;
  CUDA_RT_CALL(cudaGetDeviceCount(&num_devices));
  CUDA_RT_CALL(cudaSetDevice(local_rank % num_devices));
  CUDA_RT_CALL(cudaFree(0));

  ncclComm_t nccl_comm;
  NCCL_CALL(ncclCommInitRank(&nccl_comm, size, nccl_uid, rank));

  /* rows [iy_start_global, iy_end_global] of the global domain; the first ranks get one more */
  const int chunk_size_low = (ny - 2) / size;
  const int chunk_size_high = chunk_size_low + 1;
  const int num_ranks_low = size * chunk_size_low + size - (ny - 2);
  const int chunk_size = rank < num_ranks_low ? chunk_size_low : chunk_size_high;
  /* every rank allocates the larger size: NCCL's symmetric memory wants the same size everywhere */
  real* a;
  real* a_new;
  CUDA_RT_CALL(cudaMalloc(&a, nx * (chunk_size_high + 2) * sizeof(real)));
  CUDA_RT_CALL(cudaMalloc(&a_new, nx * (chunk_size_high + 2) * sizeof(real)));
  CUDA_RT_CALL(cudaMemset(a, 0, nx * (chunk_size_high + 2) * sizeof(real)));
  CUDA_RT_CALL(cudaMemset(a_new, 0, nx * (chunk_size_high + 2) * sizeof(real)));

  int iy_start_global;
  if (rank < num_ranks_low) iy_start_global = rank * chunk_size_low + 1;
  else iy_start_global = num_ranks_low * chunk_size_low + (rank - num_ranks_low) * chunk_size_high + 1;
  const int iy_start = 1;
  const int iy_end = iy_start + chunk_size;

  initialize_boundaries<<<(ny / size) / 128 + 1, 128>>>(a, a_new, M_PI, iy_start_global - 1, nx, chunk_size + 2, ny);
  CUDA_RT_CALL(cudaGetLastError());
  CUDA_RT_CALL(cudaDeviceSynchronize());

  cudaStream_t compute_stream, push_stream;
  cudaEvent_t compute_done, push_done;
  CUDA_RT_CALL(cudaStreamCreate(&compute_stream));
  CUDA_RT_CALL(cudaStreamCreate(&push_stream));
  CUDA_RT_CALL(cudaEventCreateWithFlags(&compute_done, cudaEventDisableTiming));
  CUDA_RT_CALL(cudaEventCreateWithFlags(&push_done, cudaEventDisableTiming));

  dim3 dim_grid((nx + dim_block_x - 1) / dim_block_x, (chunk_size + dim_block_y - 1) / dim_block_y, 1);
  const int nblocks = dim_grid.x * dim_grid.y;
  real* l2_block_d;
  real* l2_norm_d;
  real* l2_norm_h;
  CUDA_RT_CALL(cudaMalloc(&l2_block_d, nblocks * sizeof(real)));
  CUDA_RT_CALL(cudaMalloc(&l2_norm_d, sizeof(real)));
  CUDA_RT_CALL(cudaMallocHost(&l2_norm_h, sizeof(real)));

  const int top = rank > 0 ? rank - 1 : (size - 1);
  const int bottom = (rank + 1) % size;

  int iter = 0;
  real l2_norm = 1.0;
  MPI_CALL(MPI_Barrier(MPI_COMM_WORLD));
  double start = MPI_Wtime();
  while (l2_norm > tol && iter < iter_max) {
    const bool calculate_norm = (iter % nccheck) == 0;
    CUDA_RT_CALL(cudaStreamWaitEvent(compute_stream, push_done, 0));
    jacobi_kernel<<<dim_grid, {dim_block_x, dim_block_y, 1}, 0, compute_stream>>>(a_new, a, l2_block_d, iy_start, iy_end, nx,
                                                                                  calculate_norm);
    CUDA_RT_CALL(cudaEventRecord(compute_done, compute_stream));
    if (calculate_norm) {
      sum_block_norms<<<1, 256, 0, compute_stream>>>(l2_norm_d, l2_block_d, nblocks);
      NCCL_CALL(ncclAllReduce(l2_norm_d, l2_norm_d, 1, NCCL_REAL_TYPE, ncclSum, nccl_comm, compute_stream));
      CUDA_RT_CALL(cudaMemcpyAsync(l2_norm_h, l2_norm_d, sizeof(real), cudaMemcpyDeviceToHost, compute_stream));
    }

    /* halo: first and last interior rows out, ghost rows in */
    CUDA_RT_CALL(cudaStreamWaitEvent(push_stream, compute_done, 0));
    NCCL_CALL(ncclGroupStart());
    NCCL_CALL(ncclRecv(a_new, nx, NCCL_REAL_TYPE, top, nccl_comm, push_stream));
    NCCL_CALL(ncclSend(a_new + (iy_end - 1) * nx, nx, NCCL_REAL_TYPE, bottom, nccl_comm, push_stream));
    NCCL_CALL(ncclRecv(a_new + (iy_end * nx), nx, NCCL_REAL_TYPE, bottom, nccl_comm, push_stream));
    NCCL_CALL(ncclSend(a_new + iy_start * nx, nx, NCCL_REAL_TYPE, top, nccl_comm, push_stream));
    NCCL_CALL(ncclGroupEnd());
    CUDA_RT_CALL(cudaEventRecord(push_done, push_stream));

    if (calculate_norm) {
      CUDA_RT_CALL(cudaStreamSynchronize(compute_stream));
      l2_norm = std::sqrt(*l2_norm_h);
      if (rank == 0 && (iter % 100) == 0) printf("%5d, %0.6f\n", iter, l2_norm);
    }
    std::swap(a_new, a);
    iter++;
  }
  CUDA_RT_CALL(cudaDeviceSynchronize());
  double stop = MPI_Wtime();

  /* a check on the host: the sum of the final field over all ranks */
  real* a_h = (real*)malloc(nx * (chunk_size + 2) * sizeof(real));
  CUDA_RT_CALL(cudaMemcpy(a_h, a, nx * (chunk_size + 2) * sizeof(real), cudaMemcpyDeviceToHost));
  real local_sum = 0, global_sum = 0;
  for (int iy = iy_start; iy < iy_end; iy++)
    for (int ix = 1; ix < nx - 1; ix++) local_sum += a_h[iy * nx + ix];
  MPI_CALL(MPI_Allreduce(&local_sum, &global_sum, 1, MPI_REAL_TYPE, MPI_SUM, MPI_COMM_WORLD));
  if (rank == 0) printf("%dx%d: %d ranks, %d iterations, %.3f s, sum %.6e\n", ny, nx, size, iter, stop - start, (double)global_sum);
  free(a_h);

  CUDA_RT_CALL(cudaEventDestroy(push_done));
  CUDA_RT_CALL(cudaEventDestroy(compute_done));
  CUDA_RT_CALL(cudaStreamDestroy(push_stream));
  CUDA_RT_CALL(cudaStreamDestroy(compute_stream));
  CUDA_RT_CALL(cudaFreeHost(l2_norm_h));
  CUDA_RT_CALL(cudaFree(l2_norm_d));
  CUDA_RT_CALL(cudaFree(l2_block_d));
  CUDA_RT_CALL(cudaFree(a_new));
  CUDA_RT_CALL(cudaFree(a));
  NCCL_CALL(ncclCommDestroy(nccl_comm));
  MPI_CALL(MPI_Finalize());
  return 0;
}
