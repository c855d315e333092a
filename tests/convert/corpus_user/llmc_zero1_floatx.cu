// llm.c's multi-GPU path as its trainer writes it: floatX chosen by -DENABLE_FP32/-DENABLE_FP16
// (bf16 by default), the NCCL type derived from floatX, parameters and gradients carved out of
// one allocation per struct, gradients reduced through a template taking arrays of pointers
// (ZeRO-0 all-reduce or ZeRO-1 reduce-scatter, grouped), the updated shards all-gathered, and the
// loss summed across processes in managed memory. Built with -DMULTI_GPU.
#include <cstdio>
#include <cstdlib>
#include <cassert>
#include <type_traits>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#ifdef MULTI_GPU
#include <mpi.h>
#include <nccl.h>
#endif

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_MODE PRECISION_FP32
#elif defined(ENABLE_FP16)
typedef half floatX;
#define PRECISION_MODE PRECISION_FP16
#else // Default to bfloat16
typedef __nv_bfloat16 floatX;
#define PRECISION_MODE PRECISION_BF16
#endif

void cudaCheck_(cudaError_t error, const char *file, int line) {
  if (error != cudaSuccess) {
    printf("[CUDA ERROR] at file %s:%d:\n%s\n", file, line, cudaGetErrorString(error));
    exit(EXIT_FAILURE);
  }
};
#define cudaCheck(err) (cudaCheck_(err, __FILE__, __LINE__))

#ifdef MULTI_GPU
void nccl_check(ncclResult_t status, const char *file, int line) {
  if (status != ncclSuccess) {
    printf("[NCCL ERROR] at file %s:%d:\n%s\n", file, line, ncclGetErrorString(status));
    exit(EXIT_FAILURE);
  }
}
#define ncclCheck(err) (nccl_check(err, __FILE__, __LINE__))

void mpi_check(int status, const char *file, int line) {
  if (status != MPI_SUCCESS) {
    char mpi_error[4096];
    int mpi_error_len = 0;
    MPI_Error_string(status, &mpi_error[0], &mpi_error_len);
    printf("[MPI ERROR] at file %s:%d:\n%.*s\n", file, line, mpi_error_len, mpi_error);
    exit(EXIT_FAILURE);
  }
}
#define mpiCheck(err) (mpi_check(err, __FILE__, __LINE__))

const ncclDataType_t ncclFloatX = std::is_same<floatX, float>::value ? ncclFloat :
                                  std::is_same<floatX, __nv_bfloat16>::value ? ncclBfloat16 :
                                  ncclHalf;
#endif

typedef struct {
  int process_rank;
  int num_processes;
  int local_device_idx;
  int zero_stage;
  size_t shard_num_parameters;
#ifdef MULTI_GPU
  ncclComm_t nccl_comm;
  cudaStream_t nccl_stream;
  cudaEvent_t compute_nccl_sync;
  float* unified_buffer;
#endif
} MultiGpuConfig;

#define NUM_PARAMETER_TENSORS 4
typedef struct {
  floatX* wte;
  floatX* ln1w;
  floatX* qkvw;
  floatX* fcw;
} ParameterTensors;

typedef struct {
  ParameterTensors params;
  size_t param_elements[NUM_PARAMETER_TENSORS];
  void* params_memory;
  size_t num_parameters;
  ParameterTensors grads;
  void* grads_memory;
} GPT2;

void* malloc_and_point_parameters(ParameterTensors* params, size_t* param_elements) {
  size_t num_parameters_bytes = 0;
  for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) num_parameters_bytes += param_elements[i] * sizeof(floatX);
  void* params_memory;
  cudaCheck(cudaMalloc((void**)&params_memory, num_parameters_bytes));
  floatX** ptrs[] = {&params->wte, &params->ln1w, &params->qkvw, &params->fcw};
  char* params_memory_iterator = (char*)params_memory;
  for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
    *(ptrs[i]) = (floatX*)params_memory_iterator;
    params_memory_iterator += param_elements[i] * sizeof(floatX);
  }
  return params_memory;
}

MultiGpuConfig multi_gpu_config_init(int num_processes, int process_rank, int gpus_per_node, int zero_stage) {
  MultiGpuConfig result;
#ifdef MULTI_GPU
  mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &result.process_rank));
  mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &result.num_processes));
  result.local_device_idx = result.process_rank % gpus_per_node;
  cudaCheck(cudaSetDevice(result.local_device_idx));
  ncclUniqueId nccl_id;
  if (result.process_rank == 0) ncclCheck(ncclGetUniqueId(&nccl_id));
  mpiCheck(MPI_Bcast(&nccl_id, sizeof(nccl_id), MPI_BYTE, 0, MPI_COMM_WORLD));
  ncclCheck(ncclCommInitRank(&result.nccl_comm, result.num_processes, nccl_id, result.process_rank));
  cudaCheck(cudaStreamCreate(&result.nccl_stream));
  cudaCheck(cudaEventCreateWithFlags(&result.compute_nccl_sync, cudaEventDisableTiming));
  cudaCheck(cudaMallocManaged(&result.unified_buffer, sizeof(float)));
  result.zero_stage = zero_stage;
#else
  result.process_rank = 0;
  result.num_processes = 1;
  result.local_device_idx = 0;
  result.zero_stage = 0;
#endif
  return result;
}

void multi_gpu_config_free(MultiGpuConfig* config) {
#ifdef MULTI_GPU
  ncclCheck(ncclCommDestroy(config->nccl_comm));
  cudaCheck(cudaStreamDestroy(config->nccl_stream));
  cudaCheck(cudaEventDestroy(config->compute_nccl_sync));
  cudaCheck(cudaFree(config->unified_buffer));
#endif
}

float multi_gpu_cpu_float_sum(float value, MultiGpuConfig* config) {
#ifdef MULTI_GPU
  if (config->num_processes == 1) return value;
  float* unified_buffer = config->unified_buffer;
  *unified_buffer = value;
  ncclCheck(ncclAllReduce(unified_buffer, unified_buffer, sizeof(float), ncclFloat, ncclSum, config->nccl_comm, config->nccl_stream));
  cudaCheck(cudaDeviceSynchronize());
  return *unified_buffer;
#else
  return value;
#endif
}

template<int N>
void multi_gpu_async_reduce_gradient(
        floatX* const (&pointers)[N], const size_t (&pointers_sizes)[N],
        MultiGpuConfig* config, cudaStream_t compute_stream) {
  if (config->num_processes == 1) {
    return; // no multi-GPU, just exit.
  }
#ifdef MULTI_GPU
  cudaCheck(cudaEventRecord(config->compute_nccl_sync, compute_stream));
  cudaCheck(cudaStreamWaitEvent(config->nccl_stream, config->compute_nccl_sync));
  ncclCheck(ncclGroupStart()); // NCCL group: aggregate all pointers in a single NCCL GPU kernel.
  for (int i = 0; i < N; ++i) {
    if(config->zero_stage == 0) {
      ncclCheck(ncclAllReduce(
          pointers[i], pointers[i],
          pointers_sizes[i],
          ncclFloatX, ncclAvg,
          config->nccl_comm, config->nccl_stream
      ));
    } else if(config->zero_stage == 1) {
      assert(pointers_sizes[i] % config->num_processes == 0);
      size_t shard_size = pointers_sizes[i] / config->num_processes;
      ptrdiff_t shard_offset = (ptrdiff_t)shard_size * config->process_rank;
      ncclCheck(ncclReduceScatter(
          pointers[i], pointers[i] + shard_offset,
          shard_size,
          ncclFloatX, ncclAvg,
          config->nccl_comm, config->nccl_stream
      ));
    }
  }
  ncclCheck(ncclGroupEnd());
  cudaCheck(cudaEventRecord(config->compute_nccl_sync, config->nccl_stream));
  cudaCheck(cudaStreamWaitEvent(compute_stream, config->compute_nccl_sync));
#endif
}

void gpt2_multi_gpu_param_gather(GPT2* model, MultiGpuConfig* multi_gpu_config) {
#ifdef MULTI_GPU
  if (multi_gpu_config->num_processes == 1) return;
  if (multi_gpu_config->zero_stage == 1) {
    floatX* params = (floatX*)model->params_memory;
    size_t shard = model->num_parameters / multi_gpu_config->num_processes;
    ncclCheck(ncclAllGather(params + shard * multi_gpu_config->process_rank, params, shard, ncclFloatX,
                            multi_gpu_config->nccl_comm, multi_gpu_config->nccl_stream));
  }
  cudaCheck(cudaStreamSynchronize(multi_gpu_config->nccl_stream));
#endif
}

__global__ void backward_kernel(floatX* g, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = (floatX)(0.01f * (float)((i + rank) % 17));
}
__global__ void adamw_kernel(floatX* p, const floatX* g, size_t n, float lr) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (floatX)((float)p[i] - lr * (float)g[i]);
}

int main(int argc, char** argv) {
#ifdef MULTI_GPU
  mpiCheck(MPI_Init(&argc, &argv));
#endif
  MultiGpuConfig multi_gpu_config = multi_gpu_config_init(1, 0, 8, argc > 1 ? atoi(argv[1]) : 1);
  GPT2 model;
  model.param_elements[0] = 50304 * 64;
  model.param_elements[1] = 64 * 8;
  model.param_elements[2] = 3 * 64 * 64 * 8;
  model.param_elements[3] = 4 * 64 * 64 * 8;
  model.num_parameters = 0;
  for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) model.num_parameters += model.param_elements[i];
  model.params_memory = malloc_and_point_parameters(&model.params, model.param_elements);
  model.grads_memory = malloc_and_point_parameters(&model.grads, model.param_elements);
  cudaCheck(cudaMemset(model.params_memory, 0, model.num_parameters * sizeof(floatX)));
  cudaStream_t main_stream;
  cudaCheck(cudaStreamCreate(&main_stream));

  for (int step = 0; step < 3; step++) {
    backward_kernel<<<128, 256, 0, main_stream>>>((floatX*)model.grads_memory, model.num_parameters, multi_gpu_config.process_rank);
    ParameterTensors grads = model.grads;
    floatX* const pointers[] = {grads.wte, grads.ln1w, grads.qkvw, grads.fcw};
    const size_t nelem[] = {model.param_elements[0], model.param_elements[1], model.param_elements[2], model.param_elements[3]};
    multi_gpu_async_reduce_gradient(pointers, nelem, &multi_gpu_config, main_stream);
    adamw_kernel<<<128, 256, 0, main_stream>>>((floatX*)model.params_memory, (floatX*)model.grads_memory, model.num_parameters, 1e-3f);
    // The gather reads the updated shards on nccl_stream: it waits for the update (without this
    // wait the program races, and its output depends on which stream runs first).
#ifdef MULTI_GPU
    cudaCheck(cudaEventRecord(multi_gpu_config.compute_nccl_sync, main_stream));
    cudaCheck(cudaStreamWaitEvent(multi_gpu_config.nccl_stream, multi_gpu_config.compute_nccl_sync));
#endif
    gpt2_multi_gpu_param_gather(&model, &multi_gpu_config);
    float loss = multi_gpu_cpu_float_sum(1.0f / (step + 1), &multi_gpu_config) / multi_gpu_config.num_processes;
    if (multi_gpu_config.process_rank == 0) printf("step %d: loss %f\n", step, loss);
  }
  cudaCheck(cudaDeviceSynchronize());
  cudaCheck(cudaFree(model.params_memory));
  cudaCheck(cudaFree(model.grads_memory));
  multi_gpu_config_free(&multi_gpu_config);
#ifdef MULTI_GPU
  mpiCheck(MPI_Finalize());
#endif
  return 0;
}
