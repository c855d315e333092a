// llm.c-style trainer fragment: a config struct, a model struct holding one flat gradient buffer,
// error-check functions (not macros), #ifdef MULTI_GPU guards, ncclAvg.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#ifdef MULTI_GPU
#include <mpi.h>
#include <nccl.h>
#endif

void cudaCheck_(cudaError_t e, const char* f, int l) { if (e != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", f, l, cudaGetErrorString(e)); exit(1); } }
#define cudaCheck(x) cudaCheck_((x), __FILE__, __LINE__)
#ifdef MULTI_GPU
void ncclCheck_(ncclResult_t r, const char* f, int l) { if (r != ncclSuccess) { fprintf(stderr, "%s:%d %s\n", f, l, ncclGetErrorString(r)); exit(1); } }
#define ncclCheck(x) ncclCheck_((x), __FILE__, __LINE__)
#endif

typedef struct {
  int process_rank;
  int num_processes;
  int local_device_idx;
#ifdef MULTI_GPU
  ncclComm_t nccl_comm;
#endif
} MultiGpuConfig;

typedef struct {
  float* params_memory;
  float* grads_memory;
  size_t num_parameters;
} GPT2;

__global__ void fake_backward(float* g, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) g[i] = 0.001f * (float)((i * 7 + rank) % 13);
}
__global__ void sgd(float* p, const float* g, size_t n, float lr) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] -= lr * g[i];
}

MultiGpuConfig multi_gpu_config_init(int* argc, char*** argv) {
  MultiGpuConfig result;
#ifdef MULTI_GPU
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &result.process_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &result.num_processes);
  result.local_device_idx = result.process_rank;
  cudaCheck(cudaSetDevice(result.local_device_idx));
  ncclUniqueId nccl_id;
  if (result.process_rank == 0) ncclCheck(ncclGetUniqueId(&nccl_id));
  MPI_Bcast(&nccl_id, sizeof(nccl_id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclCheck(ncclCommInitRank(&result.nccl_comm, result.num_processes, nccl_id, result.process_rank));
#else
  result.process_rank = 0;
  result.num_processes = 1;
  result.local_device_idx = 0;
#endif
  return result;
}

void multi_gpu_config_free(MultiGpuConfig* cfg) {
#ifdef MULTI_GPU
  ncclCheck(ncclCommDestroy(cfg->nccl_comm));
  MPI_Finalize();
#endif
}

void gpt2_multi_gpu_grad_reduce(GPT2* model, MultiGpuConfig* cfg, cudaStream_t stream) {
#ifdef MULTI_GPU
  if (cfg->num_processes == 1) return;
  ncclCheck(ncclAllReduce(model->grads_memory, model->grads_memory, model->num_parameters, ncclFloat, ncclAvg,
                          cfg->nccl_comm, stream));
#endif
}

int main(int argc, char** argv) {
  MultiGpuConfig cfg = multi_gpu_config_init(&argc, &argv);
  GPT2 model;
  model.num_parameters = 3 * 1024 * 1024;
  cudaCheck(cudaMalloc((void**)&model.params_memory, model.num_parameters * sizeof(float)));
  cudaCheck(cudaMalloc((void**)&model.grads_memory, model.num_parameters * sizeof(float)));
  cudaCheck(cudaMemset(model.params_memory, 0, model.num_parameters * sizeof(float)));
  cudaStream_t stream;
  cudaCheck(cudaStreamCreate(&stream));
  for (int step = 0; step < 4; step++) {
    fake_backward<<<256, 256, 0, stream>>>(model.grads_memory, model.num_parameters, cfg.process_rank);
    gpt2_multi_gpu_grad_reduce(&model, &cfg, stream);
    sgd<<<256, 256, 0, stream>>>(model.params_memory, model.grads_memory, model.num_parameters, 0.1f);
  }
  cudaCheck(cudaStreamSynchronize(stream));
  float h;
  cudaCheck(cudaMemcpy(&h, model.params_memory + 5, sizeof(float), cudaMemcpyDeviceToHost));
  printf("rank %d param[5] %.6f\n", cfg.process_rank, h);
  cudaCheck(cudaFree(model.params_memory));
  cudaCheck(cudaFree(model.grads_memory));
  multi_gpu_config_free(&cfg);
  return 0;
}
