// llm.c-style data-parallel training step: the model's parameters live in one device block, the
// gradients and the AdamW moments are allocated lazily, the first time backward / update runs
// (`if (model->grads_memory == NULL)`), and the gradients are averaged over the data-parallel
// ranks with one all-reduce of the whole block before the update. MPI bootstrap, fp32.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define cudaCheck(err) (cuda_check(err, __FILE__, __LINE__))
#define ncclCheck(err) (nccl_check(err, __FILE__, __LINE__))
static void cuda_check(cudaError_t e, const char* file, int line) {
  if (e != cudaSuccess) { printf("[CUDA ERROR] at file %s:%d:\n%s\n", file, line, cudaGetErrorString(e)); exit(EXIT_FAILURE); }
}
static void nccl_check(ncclResult_t r, const char* file, int line) {
  if (r != ncclSuccess) { printf("[NCCL ERROR] at file %s:%d:\n%s\n", file, line, ncclGetErrorString(r)); exit(EXIT_FAILURE); }
}

typedef struct {
  size_t num_parameters;
  float* params_memory;
  float* grads_memory;
  float* m_memory;
  float* v_memory;
} GPT2;

typedef struct {
  int process_rank;
  int num_processes;
  ncclComm_t nccl_comm;
  cudaStream_t stream;
} MultiGpuConfig;

__global__ void init_params(float* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = 0.02f * (float)(((i * 2654435761u) ^ seed) % 1000) / 1000.0f - 0.01f;
}

__global__ void fake_backward(const float* params, float* grads, size_t n, int rank, int step) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    grads[i] += params[i] * (1.0f + 0.1f * rank) + 0.001f * (float)((i + step) % 17);
}

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, size_t n, float lr, int t) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float g = grads[i];
    m[i] = 0.9f * m[i] + 0.1f * g;
    v[i] = 0.999f * v[i] + 0.001f * g * g;
    const float mh = m[i] / (1.0f - powf(0.9f, (float)t)), vh = v[i] / (1.0f - powf(0.999f, (float)t));
    params[i] -= lr * (mh / (sqrtf(vh) + 1e-8f) + 0.01f * params[i]);
  }
}

void gpt2_build(GPT2* model, size_t num_parameters) {
  model->num_parameters = num_parameters;
  cudaCheck(cudaMalloc((void**)&model->params_memory, num_parameters * sizeof(float)));
  init_params<<<256, 256>>>(model->params_memory, num_parameters, 1337u);
  cudaCheck(cudaGetLastError());
  model->grads_memory = NULL;
  model->m_memory = NULL;
  model->v_memory = NULL;
}

void gpt2_zero_grad(GPT2* model, cudaStream_t stream) {
  if (model->grads_memory != NULL)
    cudaCheck(cudaMemsetAsync(model->grads_memory, 0, model->num_parameters * sizeof(float), stream));
}

void gpt2_backward(GPT2* model, int rank, int step, cudaStream_t stream) {
  // lazily allocate the memory for gradients of the weights, the first time we run backward
  if (model->grads_memory == NULL) {
    cudaCheck(cudaMalloc((void**)&model->grads_memory, model->num_parameters * sizeof(float)));
    cudaCheck(cudaMemsetAsync(model->grads_memory, 0, model->num_parameters * sizeof(float), stream));
  }
  fake_backward<<<256, 256, 0, stream>>>(model->params_memory, model->grads_memory, model->num_parameters, rank, step);
  cudaCheck(cudaGetLastError());
}

void gpt2_multi_gpu_grad_reduce(GPT2* model, MultiGpuConfig* cfg) {
  if (cfg->num_processes == 1) return;
  ncclCheck(ncclAllReduce(model->grads_memory, model->grads_memory, model->num_parameters, ncclFloat, ncclAvg,
                          cfg->nccl_comm, cfg->stream));
}

void gpt2_update(GPT2* model, float lr, int t, cudaStream_t stream) {
  // lazily allocate the memory for m_memory and v_memory
  if (model->m_memory == NULL) {
    cudaCheck(cudaMalloc((void**)&model->m_memory, model->num_parameters * sizeof(float)));
    cudaCheck(cudaMalloc((void**)&model->v_memory, model->num_parameters * sizeof(float)));
    cudaCheck(cudaMemsetAsync(model->m_memory, 0, model->num_parameters * sizeof(float), stream));
    cudaCheck(cudaMemsetAsync(model->v_memory, 0, model->num_parameters * sizeof(float), stream));
  }
  adamw_kernel<<<256, 256, 0, stream>>>(model->params_memory, model->grads_memory, model->m_memory, model->v_memory,
                                        model->num_parameters, lr, t);
  cudaCheck(cudaGetLastError());
}

int main(int argc, char** argv) {
  MultiGpuConfig cfg;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &cfg.process_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &cfg.num_processes);
  int device_count = 1;
  cudaCheck(cudaGetDeviceCount(&device_count));
  cudaCheck(cudaSetDevice(cfg.process_rank % device_count));
  ncclUniqueId nccl_id;
  if (cfg.process_rank == 0) ncclCheck(ncclGetUniqueId(&nccl_id));
  MPI_Bcast(&nccl_id, sizeof(nccl_id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclCheck(ncclCommInitRank(&cfg.nccl_comm, cfg.num_processes, nccl_id, cfg.process_rank));
  cudaCheck(cudaStreamCreate(&cfg.stream));

  GPT2 model;
  gpt2_build(&model, (size_t)1 << 22);
  for (int step = 1; step <= 4; step++) {
    gpt2_zero_grad(&model, cfg.stream);
    gpt2_backward(&model, cfg.process_rank, step, cfg.stream);
    gpt2_multi_gpu_grad_reduce(&model, &cfg);
    gpt2_update(&model, 3e-4f, step, cfg.stream);
  }
  cudaCheck(cudaStreamSynchronize(cfg.stream));
  float first;
  cudaCheck(cudaMemcpy(&first, model.params_memory, sizeof(float), cudaMemcpyDeviceToHost));
  printf("rank %d: params[0] after 4 steps %.6f\n", cfg.process_rank, first);

  cudaCheck(cudaFree(model.params_memory));
  cudaCheck(cudaFree(model.grads_memory));
  cudaCheck(cudaFree(model.m_memory));
  cudaCheck(cudaFree(model.v_memory));
  ncclCheck(ncclCommDestroy(cfg.nccl_comm));
  MPI_Finalize();
  return 0;
}
