// FSDP-style step: parameters are all-gathered before use and gradients reduce-scattered after,
// through two levels of helpers on a Model struct held by pointer (model->params, model->grads).
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NCCL_OK(c) do { ncclResult_t r = (c); if (r != ncclSuccess) { printf("nccl %s\n", ncclGetErrorString(r)); exit(2); } } while (0)

struct Shards {
  __nv_bfloat16* full;   // gathered parameters (world * shard)
  __nv_bfloat16* shard;  // this rank's shard
};
struct Model {
  Shards params;
  __nv_bfloat16* grads;       // full gradients
  __nv_bfloat16* grad_shard;  // reduced shard
  size_t shard_elems;
};

static void gather_params(Model* m, ncclComm_t comm, cudaStream_t st) {
  NCCL_OK(ncclAllGather(m->params.shard, m->params.full, m->shard_elems, ncclBfloat16, comm, st));
}
static void reduce_grads(Model* m, ncclComm_t comm, cudaStream_t st) {
  NCCL_OK(ncclReduceScatter(m->grads, m->grad_shard, m->shard_elems, ncclBfloat16, ncclSum, comm, st));
}
static void train_step(Model* m, ncclComm_t comm, cudaStream_t st) {
  gather_params(m, comm, st);
  // forward/backward would run here
  reduce_grads(m, comm, st);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ncclUniqueId id;
  if (!rank) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  cudaSetDevice(rank);
  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t st;
  cudaStreamCreate(&st);
  Model* model = new Model;
  model->shard_elems = 1 << 20;
  cudaMalloc(&model->params.shard, model->shard_elems * sizeof(__nv_bfloat16));
  cudaMalloc(&model->params.full, world * model->shard_elems * sizeof(__nv_bfloat16));
  cudaMalloc(&model->grads, world * model->shard_elems * sizeof(__nv_bfloat16));
  cudaMalloc(&model->grad_shard, model->shard_elems * sizeof(__nv_bfloat16));
  for (int step = 0; step < 2; ++step) train_step(model, comm, st);
  cudaStreamSynchronize(st);
  printf("rank %d ok\n", rank);
  cudaFree(model->params.shard);
  cudaFree(model->params.full);
  cudaFree(model->grads);
  cudaFree(model->grad_shard);
  delete model;
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
