// Data-parallel step with the gradient all-reduce on a POSIX thread (C style, MPI bootstrap): the
// main thread runs backward layer by layer and records an event per layer; a pthread given a struct
// of arguments waits on each event from its own stream and averages the layer's bf16 gradients
// with ncclAvg; the main thread joins it before the optimizer step and the frees.
#include <cstdio>
#include <cstdlib>
#include <pthread.h>
#include <mpi.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <nccl.h>

#define CUDA_CALL(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define NCCL_CALL(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

#define NUM_LAYERS 6

typedef struct {
  ncclComm_t comm;
  int device;
  int num_layers;
  __nv_bfloat16** grads;
  size_t* numel;
  cudaEvent_t* ready;
  cudaEvent_t done;
} reducer_args_t;

static __nv_bfloat16* g_grads[NUM_LAYERS];
static size_t g_numel[NUM_LAYERS];
static cudaEvent_t g_ready[NUM_LAYERS];

__global__ void backward_kernel(__nv_bfloat16* g, size_t n, int layer, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = __float2bfloat16((float)((i * 7 + layer * 3 + rank * 5) % 17) * 0.125f);
}

__global__ void sgd_kernel(float* w, const __nv_bfloat16* g, size_t n, float lr) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    w[i] -= lr * __bfloat162float(g[i]);
}

static void* reducer_main(void* p) {
  reducer_args_t* args = (reducer_args_t*)p;
  CUDA_CALL(cudaSetDevice(args->device));
  cudaStream_t stream;
  CUDA_CALL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Backward produces the last layer first.
  for (int l = args->num_layers - 1; l >= 0; --l) {
    CUDA_CALL(cudaStreamWaitEvent(stream, args->ready[l], 0));
    NCCL_CALL(ncclAllReduce(args->grads[l], args->grads[l], args->numel[l], ncclBfloat16, ncclAvg, args->comm, stream));
  }
  CUDA_CALL(cudaEventRecord(args->done, stream));
  CUDA_CALL(cudaStreamSynchronize(stream));
  CUDA_CALL(cudaStreamDestroy(stream));
  return NULL;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int ndev = 0;
  CUDA_CALL(cudaGetDeviceCount(&ndev));
  const int device = rank % ndev;
  CUDA_CALL(cudaSetDevice(device));

  ncclUniqueId id;
  if (rank == 0) NCCL_CALL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCL_CALL(ncclCommInitRank(&comm, world, id, rank));

  // Uneven layer sizes, as a model's are (embeddings, attention, MLP).
  size_t total = 0;
  for (int l = 0; l < NUM_LAYERS; ++l) {
    g_numel[l] = (size_t)(1 << 18) * (1 + (l % 3)) + 1000 * l;
    total += g_numel[l];
    CUDA_CALL(cudaMalloc((void**)&g_grads[l], g_numel[l] * sizeof(__nv_bfloat16)));
    CUDA_CALL(cudaEventCreateWithFlags(&g_ready[l], cudaEventDisableTiming));
  }
  float* weights;
  CUDA_CALL(cudaMalloc((void**)&weights, g_numel[0] * sizeof(float)));
  CUDA_CALL(cudaMemset(weights, 0, g_numel[0] * sizeof(float)));
  cudaStream_t compute;
  CUDA_CALL(cudaStreamCreate(&compute));

  reducer_args_t args;
  args.comm = comm;
  args.device = device;
  args.num_layers = NUM_LAYERS;
  args.grads = g_grads;
  args.numel = g_numel;
  args.ready = g_ready;
  CUDA_CALL(cudaEventCreateWithFlags(&args.done, cudaEventDisableTiming));

  pthread_t reducer;
  if (pthread_create(&reducer, NULL, reducer_main, &args) != 0) {
    fprintf(stderr, "pthread_create failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (int l = NUM_LAYERS - 1; l >= 0; --l) {
    backward_kernel<<<256, 256, 0, compute>>>(g_grads[l], g_numel[l], l, rank);
    CUDA_CALL(cudaEventRecord(g_ready[l], compute));
  }
  pthread_join(reducer, NULL);

  CUDA_CALL(cudaStreamWaitEvent(compute, args.done, 0));
  sgd_kernel<<<256, 256, 0, compute>>>(weights, g_grads[0], g_numel[0], 0.01f);
  CUDA_CALL(cudaStreamSynchronize(compute));

  __nv_bfloat16 first;
  float w0;
  CUDA_CALL(cudaMemcpy(&first, g_grads[NUM_LAYERS - 1], sizeof(first), cudaMemcpyDeviceToHost));
  CUDA_CALL(cudaMemcpy(&w0, weights + 1, sizeof(w0), cudaMemcpyDeviceToHost));
  printf("rank %d: %zu gradients averaged, g[last][0] = %f, w[1] = %f\n", rank, total, __bfloat162float(first), w0);

  for (int l = 0; l < NUM_LAYERS; ++l) {
    CUDA_CALL(cudaFree(g_grads[l]));
    CUDA_CALL(cudaEventDestroy(g_ready[l]));
  }
  CUDA_CALL(cudaFree(weights));
  CUDA_CALL(cudaEventDestroy(args.done));
  CUDA_CALL(cudaStreamDestroy(compute));
  NCCL_CALL(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
