// A small GPT trainer in llm.c's style: the parameters and their gradients are structs of pointers
// carved out of one allocation each by malloc_and_point_parameters (an array of the fields'
// addresses, `*(ptrs[i]) = iterator`), the gradients are averaged tensor by tensor through the
// struct seen as an array of pointers (`float** grads = (float**)&model->grads`), and the
// activations are an array of pointers allocated one by one in a loop (`cudaMalloc(&acts[i], ...)`),
// the last one's statistics summed with `*(acts + i)`. MPI bootstrap, fp32.
#include <stdio.h>
#include <stdlib.h>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NUM_PARAMETER_TENSORS 4
#define NUM_ACTIVATION_TENSORS 3

void cudaCheck_(cudaError_t error, const char* file, int line) {
  if (error != cudaSuccess) {
    printf("[CUDA ERROR] at file %s:%d:\n%s\n", file, line, cudaGetErrorString(error));
    exit(EXIT_FAILURE);
  }
}
#define cudaCheck(err) (cudaCheck_(err, __FILE__, __LINE__))
void ncclCheck_(ncclResult_t status, const char* file, int line) {
  if (status != ncclSuccess) {
    printf("[NCCL ERROR] at file %s:%d:\n%s\n", file, line, ncclGetErrorString(status));
    exit(EXIT_FAILURE);
  }
}
#define ncclCheck(err) (ncclCheck_(err, __FILE__, __LINE__))

typedef struct {
  float* wte;   // (V, C)
  float* ln1w;  // (L, C)
  float* qkvw;  // (L, 3C, C)
  float* fcw;   // (L, 4C, C)
} ParameterTensors;

typedef struct {
  ParameterTensors params;
  size_t param_sizes[NUM_PARAMETER_TENSORS];
  float* params_memory;
  size_t num_parameters;
  ParameterTensors grads;
  float* grads_memory;
  float* acts[NUM_ACTIVATION_TENSORS];
  size_t act_sizes[NUM_ACTIVATION_TENSORS];
} GPT2;

typedef struct {
  int process_rank;
  int num_processes;
  ncclComm_t nccl_comm;
  cudaStream_t nccl_stream;
} MultiGpuConfig;

// Allocates every tensor in one block and points the struct's fields into it.
float* malloc_and_point_parameters(ParameterTensors* params, size_t* param_sizes) {
  size_t num_parameters = 0;
  for (size_t i = 0; i < NUM_PARAMETER_TENSORS; i++) num_parameters += param_sizes[i];
  float* params_memory;
  cudaCheck(cudaMalloc((void**)&params_memory, num_parameters * sizeof(float)));
  float** ptrs[] = {&params->wte, &params->ln1w, &params->qkvw, &params->fcw};
  float* params_memory_iterator = params_memory;
  for (size_t i = 0; i < NUM_PARAMETER_TENSORS; i++) {
    *(ptrs[i]) = params_memory_iterator;
    params_memory_iterator += param_sizes[i];
  }
  return params_memory;
}

void gpt2_build(GPT2* model, int B, int T) {
  const int V = 8192, C = 128, L = 4;
  model->param_sizes[0] = (size_t)V * C;
  model->param_sizes[1] = (size_t)L * C;
  model->param_sizes[2] = (size_t)L * 3 * C * C;
  model->param_sizes[3] = (size_t)L * 4 * C * C;
  model->num_parameters = 0;
  for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) model->num_parameters += model->param_sizes[i];
  model->params_memory = malloc_and_point_parameters(&model->params, model->param_sizes);
  model->grads_memory = malloc_and_point_parameters(&model->grads, model->param_sizes);
  cudaCheck(cudaMemset(model->params_memory, 0, model->num_parameters * sizeof(float)));
  model->act_sizes[0] = (size_t)B * T * C;
  model->act_sizes[1] = (size_t)B * T * 4 * C;
  model->act_sizes[2] = (size_t)B * T;
  for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++)
    cudaCheck(cudaMalloc((void**)&model->acts[i], model->act_sizes[i] * sizeof(float)));
}

void gpt2_free(GPT2* model) {
  cudaCheck(cudaFree(model->params_memory));
  cudaCheck(cudaFree(model->grads_memory));
  for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) cudaCheck(cudaFree(model->acts[i]));
}

__global__ void fake_backward(float* g, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = 0.001f * (float)((i + rank) % 31);
}
__global__ void sgd(float* p, const float* g, size_t n, float lr) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] -= lr * g[i];
}

// Gradients averaged tensor by tensor, the struct walked as an array of pointers.
void gpt2_allreduce_grads(GPT2* model, MultiGpuConfig* config) {
  float** grads = (float**)&model->grads;
  ncclCheck(ncclGroupStart());
  for (int i = 0; i < NUM_PARAMETER_TENSORS; i++)
    ncclCheck(ncclAllReduce(grads[i], grads[i], model->param_sizes[i], ncclFloat, ncclAvg, config->nccl_comm,
                            config->nccl_stream));
  ncclCheck(ncclGroupEnd());
}

// The per-token losses (the last activation) summed over ranks.
void gpt2_sum_losses(GPT2* model, MultiGpuConfig* config) {
  float** acts = model->acts;
  const int last = NUM_ACTIVATION_TENSORS - 1;
  ncclCheck(ncclAllReduce(*(acts + last), *(acts + last), model->act_sizes[last], ncclFloat, ncclSum,
                          config->nccl_comm, config->nccl_stream));
}

int main(int argc, char** argv) {
  MultiGpuConfig config;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &config.process_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &config.num_processes);
  cudaCheck(cudaSetDevice(config.process_rank));
  ncclUniqueId nccl_id;
  if (config.process_rank == 0) ncclCheck(ncclGetUniqueId(&nccl_id));
  MPI_Bcast(&nccl_id, sizeof(nccl_id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclCheck(ncclCommInitRank(&config.nccl_comm, config.num_processes, nccl_id, config.process_rank));
  cudaCheck(cudaStreamCreate(&config.nccl_stream));

  GPT2 model;
  gpt2_build(&model, 4, 64);
  for (int step = 0; step < 3; step++) {
    fake_backward<<<128, 256, 0, config.nccl_stream>>>(model.grads_memory, model.num_parameters, config.process_rank);
    gpt2_allreduce_grads(&model, &config);
    sgd<<<128, 256, 0, config.nccl_stream>>>(model.params_memory, model.grads_memory, model.num_parameters, 1e-3f);
    cudaCheck(cudaMemsetAsync(model.acts[NUM_ACTIVATION_TENSORS - 1], 0, model.act_sizes[NUM_ACTIVATION_TENSORS - 1] * sizeof(float), config.nccl_stream));
    gpt2_sum_losses(&model, &config);
  }
  cudaCheck(cudaStreamSynchronize(config.nccl_stream));
  if (config.process_rank == 0) printf("trained %zu parameters on %d ranks\n", model.num_parameters, config.num_processes);
  gpt2_free(&model);
  ncclCheck(ncclCommDestroy(config.nccl_comm));
  MPI_Finalize();
  return 0;
}
