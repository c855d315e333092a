// Top-1 MoE layer with a capacity factor, the way a small research code base writes it: every
// step allocates its token buffers from the stream-ordered pool in a helper
// (`alloc_step(&sb, capacity, stream)` doing cudaMallocAsync into a struct), dispatches the routed
// tokens to each expert's rank with grouped ncclSend/ncclRecv, averages the experts' load counts
// (an all-reduce on a per-step cudaMallocAsync buffer) and finally the shared router's gradient
// (a long-lived cudaMalloc buffer). The step buffers go back with cudaFreeAsync on the same
// stream. NCCL id by MPI, fp32 tokens.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDACHECK(cmd) do { cudaError_t e = cmd; if (e != cudaSuccess) { printf("Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(EXIT_FAILURE); } } while (0)
#define NCCLCHECK(cmd) do { ncclResult_t r = cmd; if (r != ncclSuccess) { printf("Failed, NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r)); exit(EXIT_FAILURE); } } while (0)

struct StepBuffers {
  float* send_tokens;  // capacity tokens per peer, packed by destination
  float* recv_tokens;
  float* load;         // tokens routed to each expert this step
};

static void alloc_step(StepBuffers* sb, size_t capacity, int hidden, int world, cudaStream_t stream) {
  CUDACHECK(cudaMallocAsync(&sb->send_tokens, capacity * world * hidden * sizeof(float), stream));
  CUDACHECK(cudaMallocAsync(&sb->recv_tokens, capacity * world * hidden * sizeof(float), stream));
  CUDACHECK(cudaMallocAsync(&sb->load, world * sizeof(float), stream));
}

static void free_step(StepBuffers* sb, cudaStream_t stream) {
  CUDACHECK(cudaFreeAsync(sb->send_tokens, stream));
  CUDACHECK(cudaFreeAsync(sb->recv_tokens, stream));
  CUDACHECK(cudaFreeAsync(sb->load, stream));
}

__global__ void route(float* packed, float* load, size_t n, int world, int rank, int step) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    packed[i] = 0.25f * (float)((i + rank + step) % 7);
  if (blockIdx.x == 0 && threadIdx.x < world) load[threadIdx.x] = (float)((threadIdx.x + rank + step) % 3);
}
__global__ void expert(float* tokens, float* router_grad, size_t n, int hidden) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    tokens[i] *= 1.5f;
    if (i < (size_t)hidden) router_grad[i] += tokens[i];
  }
}

int main(int argc, char* argv[]) {
  int rank, world;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  CUDACHECK(cudaSetDevice(rank));
  ncclUniqueId id;
  if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast((void*)&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CUDACHECK(cudaStreamCreate(&stream));

  const int hidden = 256, tokens_per_rank = 512;
  const size_t capacity = (size_t)(1.25 * tokens_per_rank / world) + 1;
  float* router_grad;
  CUDACHECK(cudaMalloc(&router_grad, hidden * sizeof(float)));
  CUDACHECK(cudaMemset(router_grad, 0, hidden * sizeof(float)));

  for (int step = 0; step < 4; ++step) {
    StepBuffers sb;
    alloc_step(&sb, capacity, hidden, world, stream);
    route<<<32, 256, 0, stream>>>(sb.send_tokens, sb.load, capacity * world * hidden, world, rank, step);
    NCCLCHECK(ncclGroupStart());
    for (int peer = 0; peer < world; ++peer) {
      NCCLCHECK(ncclSend(sb.send_tokens + peer * capacity * hidden, capacity * hidden, ncclFloat, peer, comm, stream));
      NCCLCHECK(ncclRecv(sb.recv_tokens + peer * capacity * hidden, capacity * hidden, ncclFloat, peer, comm, stream));
    }
    NCCLCHECK(ncclGroupEnd());
    expert<<<32, 256, 0, stream>>>(sb.recv_tokens, router_grad, capacity * world * hidden, hidden);
    NCCLCHECK(ncclAllReduce(sb.load, sb.load, world, ncclFloat, ncclAvg, comm, stream));
    free_step(&sb, stream);
  }
  NCCLCHECK(ncclAllReduce(router_grad, router_grad, hidden, ncclFloat, ncclSum, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  float g0 = 0.f;
  CUDACHECK(cudaMemcpy(&g0, router_grad, sizeof(float), cudaMemcpyDeviceToHost));
  printf("rank %d: router_grad[0] = %f\n", rank, g0);

  CUDACHECK(cudaFree(router_grad));
  NCCLCHECK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
