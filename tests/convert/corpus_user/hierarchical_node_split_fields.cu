/*
 * hier_reduce.cu: climate-model style accumulation of several diagnostic fields across ranks,
 * with the two-level (node / across nodes) reduction HPC centres use on fat nodes:
 *
 *   1. reduce-scatter inside the node       (node_comm,  color = node id,    key = local rank)
 *   2. all-reduce of the slice across nodes (cross_comm, color = local rank, key = node id)
 *   3. all-gather inside the node           (node_comm)
 *
 * The node id and local rank come from MPI_Comm_split_type; both communicators are split from
 * the world communicator with ncclCommSplit. A flat world all-reduce of a checksum (double) checks
 * the result; MPI_Allreduce gives the reference on the host. Fields are an array of structs whose
 * device pointers are cudaMalloc'd in a loop; the staging for the host checksum is pinned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

static int check_cuda(cudaError_t e, const char *what, int line) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "line %d: %s: %s\n", line, what, cudaGetErrorString(e));
  return 1;
}
static int check_nccl(ncclResult_t r, const char *what, int line) {
  if (r == ncclSuccess) return 0;
  fprintf(stderr, "line %d: %s: %s\n", line, what, ncclGetErrorString(r));
  return 1;
}
#define TRY_CUDA(x) if (check_cuda((x), #x, __LINE__)) goto fail
#define TRY_NCCL(x) if (check_nccl((x), #x, __LINE__)) goto fail

#define NFIELDS 5

struct field {
  char name[16];
  size_t n;       /* padded to a multiple of the node size */
  float *d;       /* the field on this rank */
  float *slice;   /* n / local_size */
};

int world_rank, world_size, local_rank, local_size, node_id, n_nodes;
ncclComm_t world_comm, node_comm, cross_comm;
cudaStream_t s_main;
struct field fields[NFIELDS];
double *d_checksum;
double *h_checksum;

__global__ void fill(float *x, size_t n, int rank, int f) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] = (float)((i * 7 + rank * 13 + f) % 101) * 0.01f;
}

__global__ void sum_field(const float *x, size_t n, double *out) {
  double acc = 0.0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) acc += x[i];
  atomicAdd(out, acc);
}

int setup_topology(void) {
  MPI_Comm shm, leaders;
  int is_leader;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &shm);
  MPI_Comm_rank(shm, &local_rank);
  MPI_Comm_size(shm, &local_size);
  is_leader = (local_rank == 0);
  MPI_Comm_split(MPI_COMM_WORLD, is_leader ? 0 : MPI_UNDEFINED, world_rank, &leaders);
  if (is_leader) {
    MPI_Comm_rank(leaders, &node_id);
    MPI_Comm_size(leaders, &n_nodes);
    MPI_Comm_free(&leaders);
  }
  MPI_Bcast(&node_id, 1, MPI_INT, 0, shm);
  MPI_Bcast(&n_nodes, 1, MPI_INT, 0, shm);
  MPI_Comm_free(&shm);
  return 0;
}

int setup_nccl(void) {
  ncclUniqueId id;
  if (world_rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  TRY_NCCL(ncclCommInitRank(&world_comm, world_size, id, world_rank));
  TRY_NCCL(ncclCommSplit(world_comm, node_id, local_rank, &node_comm, NULL));
  TRY_NCCL(ncclCommSplit(world_comm, local_rank, node_id, &cross_comm, NULL));
  return 0;
fail:
  return 1;
}

int setup_fields(size_t base) {
  static const char *names[NFIELDS] = {"t2m", "u10", "v10", "precip", "olr"};
  int f;
  for (f = 0; f < NFIELDS; f++) {
    size_t n = base << (f % 3);
    n = (n + local_size - 1) / local_size * local_size;
    strncpy(fields[f].name, names[f], sizeof(fields[f].name) - 1);
    fields[f].n = n;
    TRY_CUDA(cudaMalloc((void **)&fields[f].d, n * sizeof(float)));
    TRY_CUDA(cudaMalloc((void **)&fields[f].slice, (n / local_size) * sizeof(float)));
  }
  TRY_CUDA(cudaMalloc((void **)&d_checksum, NFIELDS * sizeof(double)));
  TRY_CUDA(cudaMallocHost((void **)&h_checksum, NFIELDS * sizeof(double)));
  return 0;
fail:
  return 1;
}

/* two-level sum of one field, in place in fields[f].d */
int hier_allreduce(struct field *fl) {
  size_t chunk = fl->n / local_size;
  TRY_NCCL(ncclReduceScatter(fl->d, fl->slice, chunk, ncclFloat, ncclSum, node_comm, s_main));
  if (n_nodes > 1) TRY_NCCL(ncclAllReduce(fl->slice, fl->slice, chunk, ncclFloat, ncclSum, cross_comm, s_main));
  TRY_NCCL(ncclAllGather(fl->slice, fl->d, chunk, ncclFloat, node_comm, s_main));
  return 0;
fail:
  return 1;
}

int accumulate(int step) {
  int f;
  TRY_CUDA(cudaMemsetAsync(d_checksum, 0, NFIELDS * sizeof(double), s_main));
  for (f = 0; f < NFIELDS; f++) {
    fill<<<(unsigned)((fields[f].n + 255) / 256), 256, 0, s_main>>>(fields[f].d, fields[f].n, world_rank + step, f);
    if (hier_allreduce(&fields[f])) return 1;
    sum_field<<<64, 256, 0, s_main>>>(fields[f].d, fields[f].n, d_checksum + f);
  }
  /* every rank holds the same sums now: the world average of them must equal them */
  TRY_NCCL(ncclAllReduce(d_checksum, d_checksum, NFIELDS, ncclDouble, ncclAvg, world_comm, s_main));
  TRY_CUDA(cudaMemcpyAsync(h_checksum, d_checksum, NFIELDS * sizeof(double), cudaMemcpyDeviceToHost, s_main));
  TRY_CUDA(cudaStreamSynchronize(s_main));
  return 0;
fail:
  return 1;
}

int verify(void) {
  double mine[NFIELDS], lo[NFIELDS], hi[NFIELDS];
  int f, bad = 0;
  memcpy(mine, h_checksum, sizeof mine);
  MPI_Allreduce(mine, lo, NFIELDS, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(mine, hi, NFIELDS, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  for (f = 0; f < NFIELDS; f++)
    if (hi[f] - lo[f] > 1e-6 * (hi[f] > 0 ? hi[f] : 1)) {
      if (world_rank == 0) fprintf(stderr, "field %s differs across ranks\n", fields[f].name);
      bad = 1;
    }
  return bad;
}

void teardown(void) {
  int f;
  for (f = 0; f < NFIELDS; f++) {
    cudaFree(fields[f].d);
    cudaFree(fields[f].slice);
  }
  cudaFree(d_checksum);
  cudaFreeHost(h_checksum);
  ncclCommDestroy(cross_comm);
  ncclCommDestroy(node_comm);
  ncclCommDestroy(world_comm);
  cudaStreamDestroy(s_main);
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 10, step, err = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  setup_topology();
  cudaSetDevice(local_rank);
  cudaStreamCreate(&s_main);
  if (setup_nccl() || setup_fields(1 << 18)) MPI_Abort(MPI_COMM_WORLD, 1);
  for (step = 0; step < steps && !err; step++) err = accumulate(step) || verify();
  if (world_rank == 0)
    printf("%s after %d steps on %d nodes x %d GPUs (t2m sum %.3f)\n", err ? "FAILED" : "ok", step, n_nodes, local_size, h_checksum[0]);
  teardown();
  MPI_Finalize();
  return err;
}
