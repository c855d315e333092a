/*
 * cg_poisson.cu -- distributed conjugate gradient for the 1-D Poisson problem -u'' = f on [0,1],
 * the rows block-distributed over MPI ranks, one GPU per rank.
 *
 * HPC-centre style: the GPU picked from the launcher's local rank (OMPI_COMM_WORLD_LOCAL_RANK,
 * then SLURM_LOCALID, then MPI_Comm_split_type), NCCL id broadcast with MPI_Bcast, the dot
 * products reduced with ncclAllReduce of doubles on the GPU, the halo values exchanged with
 * ncclSend/ncclRecv in a group (the end ranks have one neighbour), the initial norm checked with
 * MPI_Allreduce on the host, functions returning int with goto cleanup.
 *
 * build: nvcc -O2 -arch=sm_90 cg_poisson.cu -lnccl -lmpi
 * run:   mpirun -np 4 ./cg_poisson 1048576 500
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define MPI_CHECK(cmd)                                                           \
  do {                                                                           \
    int e_ = (cmd);                                                              \
    if (e_ != MPI_SUCCESS) {                                                     \
      fprintf(stderr, "MPI error %d at %s:%d\n", e_, __FILE__, __LINE__);       \
      MPI_Abort(MPI_COMM_WORLD, e_);                                             \
    }                                                                            \
  } while (0)

#define CUDA_CHECK(cmd)                                                          \
  do {                                                                           \
    cudaError_t e_ = (cmd);                                                      \
    if (e_ != cudaSuccess) {                                                     \
      fprintf(stderr, "CUDA error '%s' at %s:%d\n", cudaGetErrorString(e_),     \
              __FILE__, __LINE__);                                               \
      MPI_Abort(MPI_COMM_WORLD, 1);                                              \
    }                                                                            \
  } while (0)

#define NCCL_CHECK(cmd)                                                          \
  do {                                                                           \
    ncclResult_t r_ = (cmd);                                                     \
    if (r_ != ncclSuccess) {                                                     \
      fprintf(stderr, "NCCL error '%s' at %s:%d\n", ncclGetErrorString(r_),     \
              __FILE__, __LINE__);                                               \
      MPI_Abort(MPI_COMM_WORLD, 1);                                              \
    }                                                                            \
  } while (0)

#define BLOCK 256

/* solver state: globals, as the original Fortran port had them */
static int rank, nranks, local_rank;
static long n_global, n_local, row0;
static ncclComm_t comm;
static cudaStream_t stream;

/* vectors of length n_local + 2 (one ghost cell each side) */
static double *d_x, *d_r, *d_p, *d_Ap;
/* small device scalars, carved from one allocation: the dot products, reduced in place, and the
 * halo values ([0] = left, [1] = right) */
static double *d_scratch;
static double *d_dot;
static double *d_halo_send, *d_halo_recv;
static double *h_dot;                     /* pinned, read back every iteration */

__global__ void init_rhs(double *r, double *x, long n, long row0, double h) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) {
    double xi = (row0 + i + 1) * h;
    r[i + 1] = h * h * sin(M_PI * xi);
    x[i + 1] = 0.0;
  }
}

__global__ void laplace(const double *p, double *Ap, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) Ap[i + 1] = 2.0 * p[i + 1] - p[i] - p[i + 2];
}

__global__ void dot_partial(const double *a, const double *b, long n, double *out) {
  __shared__ double s[BLOCK];
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  s[threadIdx.x] = (i < n) ? a[i + 1] * b[i + 1] : 0.0;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, s[0]);
}

__global__ void axpy(double *y, const double *x, double a, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i + 1] += a * x[i + 1];
}

__global__ void xpay(double *p, const double *r, double b, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) p[i + 1] = r[i + 1] + b * p[i + 1];
}

__global__ void pack_edges(const double *p, double *send, long n) {
  send[0] = p[1];
  send[1] = p[n];
}

__global__ void unpack_edges(double *p, const double *recv, long n, int has_left, int has_right) {
  p[0] = has_left ? recv[0] : 0.0;
  p[n + 1] = has_right ? recv[1] : 0.0;
}

static int pick_device(void) {
  const char *s = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!s) s = getenv("SLURM_LOCALID");
  if (s) return atoi(s);
  MPI_Comm node;
  int lr;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &lr);
  MPI_Comm_free(&node);
  return lr;
}

static int setup(long n) {
  ncclUniqueId id;
  int ndev;
  n_global = n;
  n_local = n / nranks + (rank < n % nranks ? 1 : 0);
  row0 = rank * (n / nranks) + (rank < n % nranks ? rank : n % nranks);

  CUDA_CHECK(cudaGetDeviceCount(&ndev));
  local_rank = pick_device();
  CUDA_CHECK(cudaSetDevice(local_rank % ndev));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
  NCCL_CHECK(ncclCommInitRank(&comm, nranks, id, rank));

  CUDA_CHECK(cudaMalloc((void **)&d_x, (n_local + 2) * sizeof(double)));
  CUDA_CHECK(cudaMalloc((void **)&d_r, (n_local + 2) * sizeof(double)));
  CUDA_CHECK(cudaMalloc((void **)&d_p, (n_local + 2) * sizeof(double)));
  CUDA_CHECK(cudaMalloc((void **)&d_Ap, (n_local + 2) * sizeof(double)));
  CUDA_CHECK(cudaMalloc((void **)&d_scratch, 6 * sizeof(double)));
  d_dot = d_scratch;
  d_halo_send = d_scratch + 2;
  d_halo_recv = d_scratch + 4;
  CUDA_CHECK(cudaMallocHost((void **)&h_dot, 2 * sizeof(double)));
  CUDA_CHECK(cudaMemset(d_x, 0, (n_local + 2) * sizeof(double)));
  CUDA_CHECK(cudaMemset(d_p, 0, (n_local + 2) * sizeof(double)));
  return 0;
}

/* exchange p's edge values with the neighbours; rank 0 and rank nranks-1 have one each */
static int halo_exchange(double *vec) {
  int left = rank - 1, right = rank + 1;
  pack_edges<<<1, 1, 0, stream>>>(vec, d_halo_send, n_local);
  NCCL_CHECK(ncclGroupStart());
  if (left >= 0) {
    NCCL_CHECK(ncclSend(d_halo_send, 1, ncclDouble, left, comm, stream));
    NCCL_CHECK(ncclRecv(d_halo_recv, 1, ncclDouble, left, comm, stream));
  }
  if (right < nranks) {
    NCCL_CHECK(ncclSend(d_halo_send + 1, 1, ncclDouble, right, comm, stream));
    NCCL_CHECK(ncclRecv(d_halo_recv + 1, 1, ncclDouble, right, comm, stream));
  }
  NCCL_CHECK(ncclGroupEnd());
  unpack_edges<<<1, 1, 0, stream>>>(vec, d_halo_recv, n_local, left >= 0, right < nranks);
  return 0;
}

/* global dot product: partial on each GPU, summed over ranks with NCCL, read back to the host */
static double global_dot(const double *a, const double *b, int slot) {
  int nb = (int)((n_local + BLOCK - 1) / BLOCK);
  CUDA_CHECK(cudaMemsetAsync(d_dot + slot, 0, sizeof(double), stream));
  dot_partial<<<nb, BLOCK, 0, stream>>>(a, b, n_local, d_dot + slot);
  NCCL_CHECK(ncclAllReduce(d_dot + slot, d_dot + slot, 1, ncclDouble, ncclSum, comm, stream));
  CUDA_CHECK(cudaMemcpyAsync(h_dot + slot, d_dot + slot, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return h_dot[slot];
}

static int cg(int maxit, double tol, int *iters, double *res) {
  int nb = (int)((n_local + BLOCK - 1) / BLOCK);
  double h = 1.0 / (double)(n_global + 1);
  double rr, rr_new, pAp, alpha, beta, rr0_local = 0.0, rr0 = 0.0;
  double *h_r = NULL;
  int it, rc = 0;

  init_rhs<<<nb, BLOCK, 0, stream>>>(d_r, d_x, n_local, row0, h);
  CUDA_CHECK(cudaMemcpyAsync(d_p, d_r, (n_local + 2) * sizeof(double), cudaMemcpyDeviceToDevice, stream));

  /* the reference norm on the host with MPI, as the CPU version did it (kept as a check) */
  h_r = (double *)malloc((n_local + 2) * sizeof(double));
  if (!h_r) { rc = -1; goto cleanup; }
  CUDA_CHECK(cudaMemcpyAsync(h_r, d_r, (n_local + 2) * sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  for (long i = 1; i <= n_local; i++) rr0_local += h_r[i] * h_r[i];
  MPI_CHECK(MPI_Allreduce(&rr0_local, &rr0, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));

  rr = global_dot(d_r, d_r, 0);
  if (fabs(rr - rr0) > 1e-12 * rr0) {
    if (rank == 0) fprintf(stderr, "GPU and MPI norms differ: %g vs %g\n", rr, rr0);
    rc = -2;
    goto cleanup;
  }

  for (it = 0; it < maxit; it++) {
    halo_exchange(d_p);
    laplace<<<nb, BLOCK, 0, stream>>>(d_p, d_Ap, n_local);
    pAp = global_dot(d_p, d_Ap, 1);
    alpha = rr / pAp;
    axpy<<<nb, BLOCK, 0, stream>>>(d_x, d_p, alpha, n_local);
    axpy<<<nb, BLOCK, 0, stream>>>(d_r, d_Ap, -alpha, n_local);
    rr_new = global_dot(d_r, d_r, 0);
    if (sqrt(rr_new / rr0) < tol) { it++; rr = rr_new; break; }
    beta = rr_new / rr;
    xpay<<<nb, BLOCK, 0, stream>>>(d_p, d_r, beta, n_local);
    rr = rr_new;
  }
  *iters = it;
  *res = sqrt(rr / rr0);

cleanup:
  free(h_r);
  return rc;
}

static void teardown(void) {
  cudaFree(d_x);
  cudaFree(d_r);
  cudaFree(d_p);
  cudaFree(d_Ap);
  cudaFree(d_scratch);
  cudaFreeHost(h_dot);
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
}

int main(int argc, char **argv) {
  long n = (argc > 1) ? atol(argv[1]) : (1L << 20);
  int maxit = (argc > 2) ? atoi(argv[2]) : 500;
  int iters = 0, rc;
  double res = 0.0, t0, t1;

  MPI_CHECK(MPI_Init(&argc, &argv));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &nranks));

  if (setup(n) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  rc = cg(maxit, 1e-8, &iters, &res);
  t1 = MPI_Wtime();
  if (rank == 0) {
    if (rc == 0)
      printf("CG: n=%ld ranks=%d iters=%d rel.res=%.3e time=%.3f s\n", n, nranks, iters, res, t1 - t0);
    else
      printf("CG failed (%d)\n", rc);
  }
  teardown();
  MPI_Finalize();
  return rc == 0 ? 0 : 1;
}
