// One big workspace allocation carved into tensors by pointer casts (llm.c style): the all-reduce
// runs on an alias `(float*)(ws + off)`, and another on the whole gradient slab.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define ncclCheck(err) do { if ((err) != ncclSuccess) { printf("[NCCL ERROR] at %s:%d\n", __FILE__, __LINE__); exit(EXIT_FAILURE); } } while (0)
#define cudaCheck(err) do { if ((err) != cudaSuccess) { printf("[CUDA ERROR] at %s:%d\n", __FILE__, __LINE__); exit(EXIT_FAILURE); } } while (0)

typedef struct {
  float* grads_memory;
  size_t num_parameters;
  char* workspace;
} GPT2;

void gpt2_allreduce(GPT2* model, ncclComm_t comm, cudaStream_t stream) {
  ncclCheck(ncclAllReduce(model->grads_memory, model->grads_memory, model->num_parameters, ncclFloat, ncclAvg, comm, stream));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int process_rank, num_processes;
  MPI_Comm_rank(MPI_COMM_WORLD, &process_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &num_processes);
  ncclUniqueId nccl_id;
  if (process_rank == 0) ncclCheck(ncclGetUniqueId(&nccl_id));
  MPI_Bcast(&nccl_id, sizeof(nccl_id), MPI_BYTE, 0, MPI_COMM_WORLD);
  cudaCheck(cudaSetDevice(process_rank));
  ncclComm_t nccl_comm;
  ncclCheck(ncclCommInitRank(&nccl_comm, num_processes, nccl_id, process_rank));
  cudaStream_t main_stream;
  cudaCheck(cudaStreamCreate(&main_stream));
  GPT2 model;
  model.num_parameters = 1 << 20;
  cudaCheck(cudaMalloc((void**)&model.grads_memory, model.num_parameters * sizeof(float)));
  const size_t ws_bytes = 64 << 20;
  cudaCheck(cudaMalloc((void**)&model.workspace, ws_bytes));
  float* logits = (float*)(model.workspace + 4096);
  ncclCheck(ncclAllReduce(logits, logits, 1 << 16, ncclFloat, ncclSum, nccl_comm, main_stream));
  gpt2_allreduce(&model, nccl_comm, main_stream);
  cudaCheck(cudaStreamSynchronize(main_stream));
  printf("rank %d ok\n", process_rank);
  cudaCheck(cudaFree(model.grads_memory));
  cudaCheck(cudaFree(model.workspace));
  ncclCheck(ncclCommDestroy(nccl_comm));
  MPI_Finalize();
  return 0;
}
