// Collectives behind the file's own macros, the way training scripts shorten NCCL boilerplate:
// a function-like ALLREDUCE_BF16 used in a loop over layers and in a helper, an object-like
// SYNC_LOSS for the loss statistics, an object-like GRAD_DTYPE constant, and a free macro.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDACHECK(cmd) do { cudaError_t e = (cmd); if (e != cudaSuccess) { printf("cuda %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(EXIT_FAILURE); } } while (0)
#define NCCLCHECK(cmd) do { ncclResult_t r = (cmd); if (r != ncclSuccess) { printf("nccl %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r)); exit(EXIT_FAILURE); } } while (0)

#define N_LAYERS 4
#define LAYER_NUMEL (1 << 18)
#define GRAD_DTYPE ncclBfloat16
// One bf16 gradient all-reduce on the global communicator and the compute stream.
#define ALLREDUCE_BF16(buf, n) NCCLCHECK(ncclAllReduce(buf, buf, n, GRAD_DTYPE, ncclSum, g_comm, g_stream))
// Loss statistics: [sum, count] summed over ranks.
#define SYNC_LOSS NCCLCHECK(ncclAllReduce(d_loss, d_loss, 2, ncclFloat, ncclSum, g_comm, g_stream))
#define DEVICE_FREE(p) CUDACHECK(cudaFree(p))

static ncclComm_t g_comm;
static cudaStream_t g_stream;

__global__ void backward_layer(__nv_bfloat16* g, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = __float2bfloat16(v);
}

__global__ void local_loss(float* loss, int rank) {
  loss[0] = 0.25f * (rank + 1);
  loss[1] = 1.0f;
}

// The embedding's gradient is reduced by a helper (tied weights are reduced once).
void reduce_embedding(__nv_bfloat16* emb_grad, size_t numel) { ALLREDUCE_BF16(emb_grad, numel); }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ncclUniqueId id;
  if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  CUDACHECK(cudaSetDevice(rank));
  NCCLCHECK(ncclCommInitRank(&g_comm, world, id, rank));
  CUDACHECK(cudaStreamCreate(&g_stream));

  __nv_bfloat16* grads;
  __nv_bfloat16* emb_grad;
  float* d_loss;
  CUDACHECK(cudaMalloc(&grads, (size_t)N_LAYERS * LAYER_NUMEL * sizeof(__nv_bfloat16)));
  CUDACHECK(cudaMalloc(&emb_grad, LAYER_NUMEL * sizeof(__nv_bfloat16)));
  CUDACHECK(cudaMalloc(&d_loss, 2 * sizeof(float)));

  for (int step = 0; step < 2; ++step) {
    local_loss<<<1, 1, 0, g_stream>>>(d_loss, rank);
    // Backward runs last layer first; each layer's gradient is reduced as soon as it is ready.
    for (int l = N_LAYERS - 1; l >= 0; --l) {
      __nv_bfloat16* g = grads + (size_t)l * LAYER_NUMEL;
      backward_layer<<<128, 256, 0, g_stream>>>(g, LAYER_NUMEL, 0.5f * (rank + 1) + l);
      ALLREDUCE_BF16(g, LAYER_NUMEL);
    }
    backward_layer<<<128, 256, 0, g_stream>>>(emb_grad, LAYER_NUMEL, 1.0f + rank);
    reduce_embedding(emb_grad, LAYER_NUMEL);
    SYNC_LOSS;
  }
  CUDACHECK(cudaStreamSynchronize(g_stream));

  float loss[2];
  __nv_bfloat16 first;
  CUDACHECK(cudaMemcpy(loss, d_loss, sizeof(loss), cudaMemcpyDeviceToHost));
  CUDACHECK(cudaMemcpy(&first, grads, sizeof(first), cudaMemcpyDeviceToHost));
  printf("rank %d mean loss %.4f first grad %.3f\n", rank, loss[0] / loss[1], __bfloat162float(first));

  DEVICE_FREE(grads);
  DEVICE_FREE(emb_grad);
  DEVICE_FREE(d_loss);
  NCCLCHECK(ncclCommDestroy(g_comm));
  CUDACHECK(cudaStreamDestroy(g_stream));
  MPI_Finalize();
  return 0;
}
