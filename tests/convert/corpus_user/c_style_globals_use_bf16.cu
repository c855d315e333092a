/* Course-code style, plain C: the element type chosen at build time (-DUSE_BF16, float otherwise)
 * with the matching NCCL type as a macro defined under #ifdef, communicator and buffers as file
 * globals set up in init functions, weights broadcast from rank 0 with ncclBcast, gradients summed
 * to rank 0 with ncclReduce, then the new weights broadcast again. MPI bootstrap. */
#include <stdio.h>
#include <stdlib.h>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>
#ifdef USE_BF16
#include <cuda_bf16.h>
typedef __nv_bfloat16 real_t;
#define NCCL_REAL ncclBfloat16
#define TO_REAL(x) __float2bfloat16(x)
#else
typedef float real_t;
#define NCCL_REAL ncclFloat
#define TO_REAL(x) (x)
#endif

#define N_WEIGHTS (1 << 20)
#define CHK(call) if ((call) != 0) { fprintf(stderr, "error at %s:%d\n", __FILE__, __LINE__); MPI_Abort(MPI_COMM_WORLD, 1); }

static int g_rank, g_size;
static ncclComm_t g_comm;
static cudaStream_t g_stream;
static real_t* d_weights;
static real_t* d_grads;

__global__ void compute_grads(const real_t* w, real_t* g, int n, int rank) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) g[i] = TO_REAL(0.001f * (float)((i + rank) % 11));
}
__global__ void apply(real_t* w, const real_t* g, int n, float lr) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] = TO_REAL((float)w[i] - lr * (float)g[i]);
}

static void init_comm(int* argc, char*** argv) {
  ncclUniqueId id;
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  cudaSetDevice(g_rank);
  if (g_rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  CHK(ncclCommInitRank(&g_comm, g_size, id, g_rank));
  CHK(cudaStreamCreate(&g_stream));
}

static void init_buffers(void) {
  CHK(cudaMalloc((void**)&d_weights, N_WEIGHTS * sizeof(real_t)));
  CHK(cudaMalloc((void**)&d_grads, N_WEIGHTS * sizeof(real_t)));
  CHK(cudaMemset(d_weights, 0, N_WEIGHTS * sizeof(real_t)));
}

static void sync_weights(void) {
  CHK(ncclBcast(d_weights, N_WEIGHTS, NCCL_REAL, 0, g_comm, g_stream));
}

static void train_step(float lr) {
  compute_grads<<<(N_WEIGHTS + 255) / 256, 256, 0, g_stream>>>(d_weights, d_grads, N_WEIGHTS, g_rank);
  CHK(ncclReduce(d_grads, d_grads, N_WEIGHTS, NCCL_REAL, ncclSum, 0, g_comm, g_stream));
  if (g_rank == 0) apply<<<(N_WEIGHTS + 255) / 256, 256, 0, g_stream>>>(d_weights, d_grads, N_WEIGHTS, lr / g_size);
  sync_weights();
}

static void finalize(void) {
  cudaFree(d_weights);
  cudaFree(d_grads);
  ncclCommDestroy(g_comm);
  cudaStreamDestroy(g_stream);
  MPI_Finalize();
}

int main(int argc, char** argv) {
  int step;
  real_t w0;
  init_comm(&argc, &argv);
  init_buffers();
  sync_weights();
  for (step = 0; step < 5; step++) train_step(0.5f);
  cudaStreamSynchronize(g_stream);
  cudaMemcpy(&w0, d_weights + 7, sizeof(real_t), cudaMemcpyDeviceToHost);
  printf("rank %d: w[7] = %f\n", g_rank, (float)w0);
  finalize();
  return 0;
}
