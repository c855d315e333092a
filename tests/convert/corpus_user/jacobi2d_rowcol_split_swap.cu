/*
 * jacobi2d.cu: 2-D Jacobi iteration for the Laplace equation on a px x py process grid.
 *
 * World communicator from ncclCommInitRankConfig (config: blocking, CTA limits, a name), split
 * into a row communicator (color = grid row) and a column communicator (color = grid column)
 * with ncclCommSplit. East/west halos go over the row communicator, north/south halos over the
 * column one; the residual is a float Max all-reduced over the world communicator every
 * `check_every` sweeps. Two grids in a malloc'd array of device pointers (float **grid),
 * swapped after each sweep. Device from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).
 */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CK_CUDA(x) do { cudaError_t err__ = (x); if (err__ != cudaSuccess) { \
    fprintf(stderr, "[%d] %s:%d cuda: %s\n", g_rank, __FILE__, __LINE__, cudaGetErrorString(err__)); \
    MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)
#define CK_NCCL(x) do { ncclResult_t err__ = (x); if (err__ != ncclSuccess) { \
    fprintf(stderr, "[%d] %s:%d nccl: %s\n", g_rank, __FILE__, __LINE__, ncclGetErrorString(err__)); \
    MPI_Abort(MPI_COMM_WORLD, 3); } } while (0)

int g_rank = 0, g_size = 1;
int g_px, g_py;           /* process grid */
int g_prow, g_pcol;       /* my coordinates */
int g_nx, g_ny;           /* local interior size */
ncclComm_t g_world, g_row, g_col;
cudaStream_t g_stream;

float **grid;             /* grid[0], grid[1]: (nx+2) x (ny+2), swapped every sweep */
float *d_ew_send, *d_ew_recv; /* east/west columns, 2 * ny each: [0..ny) west, [ny..2ny) east */
float *d_residual;

__global__ void set_boundary(float *u, int nx, int ny, int prow, int py) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < ny + 2 && prow == 0) u[j] = 1.0f;           /* hot top edge of the global domain */
  if (j < ny + 2 && prow == py - 1) u[(nx + 1) * (ny + 2) + j] = 0.0f;
}

__global__ void sweep(const float *u, float *unew, int nx, int ny, float *res) {
  int i = blockIdx.y * blockDim.y + threadIdx.y + 1;
  int j = blockIdx.x * blockDim.x + threadIdx.x + 1;
  if (i <= nx && j <= ny) {
    int s = ny + 2;
    float v = 0.25f * (u[(i - 1) * s + j] + u[(i + 1) * s + j] + u[i * s + j - 1] + u[i * s + j + 1]);
    unew[i * s + j] = v;
    float d = fabsf(v - u[i * s + j]);
    atomicMax((int *)res, __float_as_int(d)); /* d >= 0, so int order is float order */
  }
}

__global__ void pack_cols(const float *u, float *buf, int nx, int ny) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < nx) {
    buf[i] = u[(i + 1) * (ny + 2) + 1];
    buf[nx + i] = u[(i + 1) * (ny + 2) + ny];
  }
}

__global__ void unpack_cols(float *u, const float *buf, int nx, int ny, int has_w, int has_e) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < nx) {
    if (has_w) u[(i + 1) * (ny + 2)] = buf[i];
    if (has_e) u[(i + 1) * (ny + 2) + ny + 1] = buf[nx + i];
  }
}

static int local_device(void) {
  MPI_Comm shm;
  int lr = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shm);
  MPI_Comm_rank(shm, &lr);
  MPI_Comm_free(&shm);
  return lr;
}

static void make_comms(void) {
  ncclUniqueId id;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  config.minCTAs = 1;
  config.maxCTAs = 16;
  config.netName = NULL;
  config.commName = "jacobi-world";

  if (g_rank == 0) CK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, (int)sizeof(ncclUniqueId), MPI_BYTE, 0, MPI_COMM_WORLD);
  CK_NCCL(ncclCommInitRankConfig(&g_world, g_size, id, g_rank, &config));

  /* ranks of one grid row share a row communicator, ranked by their column */
  CK_NCCL(ncclCommSplit(g_world, g_prow, g_pcol, &g_row, NULL));
  CK_NCCL(ncclCommSplit(g_world, g_pcol, g_prow, &g_col, NULL));
}

static void alloc_grids(void) {
  size_t bytes = (size_t)(g_nx + 2) * (g_ny + 2) * sizeof(float);
  int k;
  grid = (float **)malloc(2 * sizeof(float *));
  for (k = 0; k < 2; k++) {
    CK_CUDA(cudaMalloc((void **)&grid[k], bytes));
    CK_CUDA(cudaMemset(grid[k], 0, bytes));
  }
  CK_CUDA(cudaMalloc((void **)&d_ew_send, 2 * g_nx * sizeof(float)));
  CK_CUDA(cudaMalloc((void **)&d_ew_recv, 2 * g_nx * sizeof(float)));
  CK_CUDA(cudaMalloc((void **)&d_residual, sizeof(float)));
}

/* north/south rows are contiguous: sent straight from the grid, received into its ghost rows */
static void exchange_ns(float *u) {
  int s = g_ny + 2;
  int north = g_prow - 1, south = g_prow + 1; /* ranks in the column communicator */
  CK_NCCL(ncclGroupStart());
  if (north >= 0) {
    CK_NCCL(ncclSend(u + s + 1, g_ny, ncclFloat, north, g_col, g_stream));
    CK_NCCL(ncclRecv(u + 1, g_ny, ncclFloat, north, g_col, g_stream));
  }
  if (south < g_py) {
    CK_NCCL(ncclSend(u + g_nx * s + 1, g_ny, ncclFloat, south, g_col, g_stream));
    CK_NCCL(ncclRecv(u + (g_nx + 1) * s + 1, g_ny, ncclFloat, south, g_col, g_stream));
  }
  CK_NCCL(ncclGroupEnd());
}

/* east/west columns are strided: packed first */
static void exchange_ew(float *u) {
  int west = g_pcol - 1, east = g_pcol + 1; /* ranks in the row communicator */
  pack_cols<<<(g_nx + 127) / 128, 128, 0, g_stream>>>(u, d_ew_send, g_nx, g_ny);
  CK_NCCL(ncclGroupStart());
  if (west >= 0) {
    CK_NCCL(ncclSend(d_ew_send, g_nx, ncclFloat, west, g_row, g_stream));
    CK_NCCL(ncclRecv(d_ew_recv, g_nx, ncclFloat, west, g_row, g_stream));
  }
  if (east < g_px) {
    CK_NCCL(ncclSend(d_ew_send + g_nx, g_nx, ncclFloat, east, g_row, g_stream));
    CK_NCCL(ncclRecv(d_ew_recv + g_nx, g_nx, ncclFloat, east, g_row, g_stream));
  }
  CK_NCCL(ncclGroupEnd());
  unpack_cols<<<(g_nx + 127) / 128, 128, 0, g_stream>>>(u, d_ew_recv, g_nx, g_ny, west >= 0, east < g_px);
}

int main(int argc, char **argv) {
  int nx_glob = argc > 1 ? atoi(argv[1]) : 4096;
  int ny_glob = argc > 2 ? atoi(argv[2]) : 4096;
  int max_iter = argc > 3 ? atoi(argv[3]) : 1000;
  int check_every = 10, it, cur = 0;
  float h_res = 1.0f, tol = 1e-4f;
  float *tmp;
  dim3 block(32, 8), blocks;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);

  /* the most square grid that divides the ranks */
  int dims[2] = {0, 0};
  MPI_Dims_create(g_size, 2, dims);
  g_py = dims[0];
  g_px = dims[1];
  g_prow = g_rank / g_px;
  g_pcol = g_rank % g_px;
  g_nx = nx_glob / g_py;
  g_ny = ny_glob / g_px;

  CK_CUDA(cudaSetDevice(local_device()));
  CK_CUDA(cudaStreamCreate(&g_stream));
  make_comms();
  alloc_grids();
  blocks = dim3((g_ny + block.x - 1) / block.x, (g_nx + block.y - 1) / block.y);
  for (int k = 0; k < 2; k++)
    set_boundary<<<(g_ny + 2 + 127) / 128, 128, 0, g_stream>>>(grid[k], g_nx, g_ny, g_prow, g_py);

  double t0 = MPI_Wtime();
  for (it = 0; it < max_iter; it++) {
    float *u = grid[cur], *unew = grid[1 - cur];
    exchange_ns(u);
    exchange_ew(u);
    CK_CUDA(cudaMemsetAsync(d_residual, 0, sizeof(float), g_stream));
    sweep<<<blocks, block, 0, g_stream>>>(u, unew, g_nx, g_ny, d_residual);
    if ((it + 1) % check_every == 0) {
      CK_NCCL(ncclAllReduce(d_residual, d_residual, 1, ncclFloat, ncclMax, g_world, g_stream));
      CK_CUDA(cudaMemcpyAsync(&h_res, d_residual, sizeof(float), cudaMemcpyDeviceToHost, g_stream));
      CK_CUDA(cudaStreamSynchronize(g_stream));
      if (h_res < tol) break;
    }
    /* swap: the next sweep reads what this one wrote */
    tmp = grid[0];
    grid[0] = grid[1];
    grid[1] = tmp;
  }
  CK_CUDA(cudaStreamSynchronize(g_stream));
  double t1 = MPI_Wtime();
  if (g_rank == 0)
    printf("jacobi %dx%d on %dx%d ranks: %d iterations, residual %.3e, %.3f s\n", nx_glob, ny_glob, g_py, g_px, it, h_res, t1 - t0);

  for (int k = 0; k < 2; k++) cudaFree(grid[k]);
  free(grid);
  cudaFree(d_ew_send);
  cudaFree(d_ew_recv);
  cudaFree(d_residual);
  ncclCommDestroy(g_row);
  ncclCommDestroy(g_col);
  ncclCommDestroy(g_world);
  cudaStreamDestroy(g_stream);
  MPI_Finalize();
  return 0;
}
