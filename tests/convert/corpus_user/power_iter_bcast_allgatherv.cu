/*
 * power.cu -- power iteration for the dominant eigenvalue of a row-distributed sparse matrix.
 *
 * Each rank owns a block of rows (uneven: the first n % p ranks get one more). Every iteration
 * needs the whole vector: it is assembled with one ncclBcast per owner inside a group (an
 * all-gather with uneven counts, as codes did before ncclAllGatherV existed), then the local SpMV,
 * then the norm squared all-reduced as a double. The matrix (CSR) lives in managed memory, built
 * on the host. The Rayleigh quotient is reduced to rank 0 only (ncclReduce, double). Device from
 * OMPI_COMM_WORLD_LOCAL_RANK; NCCL id broadcast with MPI. Errors are reported through an int
 * status and a cleanup label.
 */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CHECK_CUDA(call)                                                      \
  do {                                                                        \
    cudaError_t st = call;                                                    \
    if (st != cudaSuccess) {                                                  \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(st)); \
      status = 1;                                                             \
      goto cleanup;                                                           \
    }                                                                         \
  } while (0)

#define CHECK_NCCL(call)                                                      \
  do {                                                                        \
    ncclResult_t st = call;                                                   \
    if (st != ncclSuccess) {                                                  \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(st)); \
      status = 1;                                                             \
      goto cleanup;                                                           \
    }                                                                         \
  } while (0)

typedef struct {
  int nrows, nnz, row_begin;
  int *rowptr, *col;   /* managed */
  float *val;          /* managed */
} csr_t;

__global__ void spmv(int nrows, const int *rowptr, const int *col, const float *val, const float *x, float *y) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < nrows) {
    float acc = 0.0f;
    for (int k = rowptr[r]; k < rowptr[r + 1]; k++) acc += val[k] * x[col[k]];
    y[r] = acc;
  }
}

__global__ void sqnorm_and_dot(const float *y, const float *x_own, int n, double *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    atomicAdd(&out[0], (double)y[i] * y[i]);
    atomicAdd(&out[1], (double)y[i] * x_own[i]);
  }
}

__global__ void normalize(float *y, const double *nrm2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = (float)(y[i] / sqrt(nrm2[0]));
}

/* 1-D Laplacian-like matrix with a random diagonal shift, rows [row_begin, row_begin + nrows) */
static int build_matrix(csr_t *A, int n, int row_begin, int nrows) {
  int k = 0;
  A->nrows = nrows;
  A->row_begin = row_begin;
  A->nnz = 3 * nrows;
  if (cudaMallocManaged(&A->rowptr, (nrows + 1) * sizeof(int)) != cudaSuccess) return -1;
  if (cudaMallocManaged(&A->col, A->nnz * sizeof(int)) != cudaSuccess) return -1;
  if (cudaMallocManaged(&A->val, A->nnz * sizeof(float)) != cudaSuccess) return -1;
  for (int r = 0; r < nrows; r++) {
    int g = row_begin + r;
    A->rowptr[r] = k;
    if (g > 0) { A->col[k] = g - 1; A->val[k++] = -1.0f; }
    A->col[k] = g;
    A->val[k++] = 2.0f + 0.001f * (float)(g % 17);
    if (g < n - 1) { A->col[k] = g + 1; A->val[k++] = -1.0f; }
  }
  A->rowptr[nrows] = k;
  A->nnz = k;
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1000000;
  int iters = argc > 2 ? atoi(argv[2]) : 100;
  int rank, nranks, status = 0, it, r;
  int *counts = NULL, *displs = NULL;
  const char *lr;
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  cudaStream_t stream = NULL;
  csr_t A = {0, 0, 0, NULL, NULL, NULL};
  float *d_x = NULL, *d_y = NULL;
  double *d_red = NULL, h_red[2] = {0.0, 0.0}, lambda = 0.0;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  CHECK_CUDA(cudaSetDevice(lr ? atoi(lr) : 0));
  CHECK_CUDA(cudaStreamCreate(&stream));

  counts = (int *)malloc(nranks * sizeof(int));
  displs = (int *)malloc(nranks * sizeof(int));
  for (r = 0; r < nranks; r++) counts[r] = n / nranks + (r < n % nranks);
  displs[0] = 0;
  for (r = 1; r < nranks; r++) displs[r] = displs[r - 1] + counts[r - 1];

  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));

  if (build_matrix(&A, n, displs[rank], counts[rank]) != 0) { status = 2; goto cleanup; }
  CHECK_CUDA(cudaMalloc(&d_x, (size_t)n * sizeof(float)));         /* the whole vector */
  CHECK_CUDA(cudaMalloc(&d_y, (size_t)counts[rank] * sizeof(float))); /* my rows */
  CHECK_CUDA(cudaMalloc(&d_red, 2 * sizeof(double)));
  {
    float *h_x = (float *)malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) h_x[i] = 1.0f / sqrtf((float)n);
    CHECK_CUDA(cudaMemcpy(d_x, h_x, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    free(h_x);
  }

  for (it = 0; it < iters; it++) {
    int nb = (counts[rank] + 255) / 256;
    spmv<<<nb, 256, 0, stream>>>(A.nrows, A.rowptr, A.col, A.val, d_x, d_y);
    CHECK_CUDA(cudaMemsetAsync(d_red, 0, 2 * sizeof(double), stream));
    sqnorm_and_dot<<<nb, 256, 0, stream>>>(d_y, d_x + displs[rank], counts[rank], d_red);
    /* Rayleigh quotient x.Ax on rank 0 only; the norm everywhere */
    CHECK_NCCL(ncclReduce(d_red + 1, d_red + 1, 1, ncclDouble, ncclSum, 0, comm, stream));
    CHECK_NCCL(ncclAllReduce(d_red, d_red, 1, ncclDouble, ncclSum, comm, stream));
    normalize<<<nb, 256, 0, stream>>>(d_y, d_red, counts[rank]);

    /* all-gather with uneven counts: every owner broadcasts its block into place */
    CHECK_CUDA(cudaMemcpyAsync(d_x + displs[rank], d_y, counts[rank] * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    CHECK_NCCL(ncclGroupStart());
    for (r = 0; r < nranks; r++)
      CHECK_NCCL(ncclBcast(d_x + displs[r], counts[r], ncclFloat, r, comm, stream));
    CHECK_NCCL(ncclGroupEnd());
  }
  CHECK_CUDA(cudaMemcpyAsync(h_red, d_red, 2 * sizeof(double), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  lambda = h_red[1];
  if (rank == 0) printf("power iteration: n=%d ranks=%d iters=%d lambda~%.6f |Ax|=%.6f\n", n, nranks, iters, lambda, sqrt(h_red[0]));

cleanup:
  if (d_x) cudaFree(d_x);
  if (d_y) cudaFree(d_y);
  if (d_red) cudaFree(d_red);
  if (A.rowptr) cudaFree(A.rowptr);
  if (A.col) cudaFree(A.col);
  if (A.val) cudaFree(A.val);
  free(counts);
  free(displs);
  if (comm) ncclCommDestroy(comm);
  if (stream) cudaStreamDestroy(stream);
  MPI_Finalize();
  return status;
}
