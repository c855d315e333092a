// An llm.c-derived trainer step (data parallel, MPI bootstrap), with llm.c's bookkeeping of device
// memory: the activations are described by a table of `TensorSpec` entries made with a macro
// (`tensors[k] = TENSOR_SPEC(data->output, B * T * Vp)`, a pointer to the struct field and a size),
// filled by `fill_in_activation_sizes`, then `malloc_and_point_activations` makes one cudaMalloc'd
// block and points every field into it through the table (`*(tensors[i].ptr) = acts_memory_iterator`).
// The gradients live in one block too (`grads_memory`), all-reduced in one call with ncclAvg; the
// global gradient norm is reduced per block into `acts.output`, used as scratch as llm.c does, and
// its squared sum all-reduced from there. The loss is averaged across ranks on the host side.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define cudaCheck(err) (cuda_check((err), __FILE__, __LINE__))
static void cuda_check(cudaError_t error, const char* file, int line) {
  if (error != cudaSuccess) { printf("[CUDA ERROR] at file %s:%d:\n%s\n", file, line, cudaGetErrorString(error)); exit(EXIT_FAILURE); }
}
#define ncclCheck(err) (nccl_check((err), __FILE__, __LINE__))
static void nccl_check(ncclResult_t status, const char* file, int line) {
  if (status != ncclSuccess) { printf("[NCCL ERROR] at file %s:%d:\n%s\n", file, line, ncclGetErrorString(status)); exit(EXIT_FAILURE); }
}

#define NUM_ACTIVATION_TENSORS 4
typedef struct {
  float* encoded;  // (B, T, C)
  float* lnf;      // (B, T, C)
  float* losses;   // (B, T)
  float* output;   // (B, T, Vp), also scratch for the grad norm
} ActivationTensors;

struct TensorSpec {
  void** ptr;
  size_t size;
};
#define TENSOR_SPEC(pointer, size) TensorSpec{(void**)(&pointer), (size)}

typedef struct {
  ActivationTensors acts;
  TensorSpec acts_specs[NUM_ACTIVATION_TENSORS];
  void* acts_memory;
  float* grads_memory;
  size_t num_parameters;
} GPT2;

typedef struct {
  int process_rank;
  int num_processes;
  ncclComm_t nccl_comm;
  cudaStream_t stream;
} MultiGpuConfig;

void fill_in_activation_sizes(const ActivationTensors* data, TensorSpec (&tensors)[NUM_ACTIVATION_TENSORS], size_t B,
                              size_t T, size_t C, size_t Vp) {
  tensors[0] = TENSOR_SPEC(data->encoded, B * T * C);
  tensors[1] = TENSOR_SPEC(data->lnf, B * T * C);
  tensors[2] = TENSOR_SPEC(data->losses, B * T);
  tensors[3] = TENSOR_SPEC(data->output, B * T * Vp);
}

void* malloc_and_point_activations(TensorSpec (&tensors)[NUM_ACTIVATION_TENSORS]) {
  size_t bytes = 0;
  for (size_t i = 0; i < NUM_ACTIVATION_TENSORS; i++) bytes += tensors[i].size * sizeof(float);
  printf("allocating %d MiB for activations\n", (int)round(bytes / (1024 * 1024)));
  void* acts_memory;
  cudaCheck(cudaMalloc((void**)&acts_memory, bytes));
  cudaCheck(cudaMemset(acts_memory, 0, bytes));
  char* acts_memory_iterator = (char*)acts_memory;
  for (size_t i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
    // extra protection so we don't accidentally use an empty buffer
    if (tensors[i].size == 0) {
      *(tensors[i].ptr) = NULL;
    } else {
      *(tensors[i].ptr) = acts_memory_iterator;
      acts_memory_iterator += tensors[i].size * sizeof(float);
    }
  }
  return acts_memory;
}

__global__ void backward_stub(float* grads, size_t n, int rank, int step) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    grads[i] = 0.001f * (float)((i * 13 + rank * 7 + step) % 100) - 0.05f;
}
// Squared norm, one partial sum per block into `out`, then the partials summed by one block in a fixed order.
__global__ void norm_squared_blocks(float* out, const float* data, size_t n) {
  __shared__ float acc[256];
  float s = 0.f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) s += data[i] * data[i];
  acc[threadIdx.x] = s;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) acc[threadIdx.x] += acc[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = acc[0];
}
__global__ void sum_blocks(float* out, int n) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    float s = 0.f;
    for (int i = 0; i < n; i++) s += out[i];
    out[0] = s;
  }
}

float gpt2_calculate_grad_norm(GPT2* model, MultiGpuConfig* multi_gpu_config) {
  float* grad_norm_squared = (float*)model->acts.output;
  const int blocks = 120;
  norm_squared_blocks<<<blocks, 256, 0, multi_gpu_config->stream>>>(grad_norm_squared, model->grads_memory, model->num_parameters);
  sum_blocks<<<1, 32, 0, multi_gpu_config->stream>>>(grad_norm_squared, blocks);
  if (multi_gpu_config->num_processes > 1)
    ncclCheck(ncclAllReduce(grad_norm_squared, grad_norm_squared, 1, ncclFloat, ncclSum, multi_gpu_config->nccl_comm,
                            multi_gpu_config->stream));
  float grad_norm_squared_cpu = 0.0f;
  cudaCheck(cudaMemcpyAsync(&grad_norm_squared_cpu, grad_norm_squared, sizeof(float), cudaMemcpyDeviceToHost, multi_gpu_config->stream));
  cudaCheck(cudaStreamSynchronize(multi_gpu_config->stream));
  return sqrtf(grad_norm_squared_cpu);
}

int main(int argc, char** argv) {
  MultiGpuConfig cfg;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &cfg.process_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &cfg.num_processes);
  int devices = 0;
  cudaCheck(cudaGetDeviceCount(&devices));
  cudaCheck(cudaSetDevice(cfg.process_rank % devices));
  ncclUniqueId nccl_id;
  if (cfg.process_rank == 0) ncclCheck(ncclGetUniqueId(&nccl_id));
  MPI_Bcast(&nccl_id, sizeof(nccl_id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclCheck(ncclCommInitRank(&cfg.nccl_comm, cfg.num_processes, nccl_id, cfg.process_rank));
  cudaCheck(cudaStreamCreate(&cfg.stream));

  GPT2 model;
  const size_t B = 4, T = 256, C = 768, Vp = 2048;
  model.num_parameters = (size_t)12 * C * C;
  cudaCheck(cudaMalloc((void**)&model.grads_memory, model.num_parameters * sizeof(float)));
  fill_in_activation_sizes(&model.acts, model.acts_specs, B, T, C, Vp);
  model.acts_memory = malloc_and_point_activations(model.acts_specs);

  for (int step = 0; step < 3; step++) {
    backward_stub<<<264, 256, 0, cfg.stream>>>(model.grads_memory, model.num_parameters, cfg.process_rank, step);
    ncclCheck(ncclAllReduce(model.grads_memory, model.grads_memory, model.num_parameters, ncclFloat, ncclAvg, cfg.nccl_comm, cfg.stream));
    const float norm = gpt2_calculate_grad_norm(&model, &cfg);
    if (cfg.process_rank == 0) printf("step %d: grad norm %.6f\n", step, norm);
  }
  cudaCheck(cudaStreamSynchronize(cfg.stream));
  cudaCheck(cudaFree(model.acts_memory));
  cudaCheck(cudaFree(model.grads_memory));
  ncclCheck(ncclCommDestroy(cfg.nccl_comm));
  MPI_Finalize();
  return 0;
}
