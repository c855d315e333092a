// Tensor-parallel decode step captured once into a CUDA graph and replayed: the row-parallel
// projection's partial sums are all-reduced inside the capture (bf16), as serving engines do.
#include <cstdio>
#include <cstdlib>
#include <mpi.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDA_OK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::printf("%s\n", cudaGetErrorString(e)); std::exit(1); } } while (0)
#define NCCL_OK(x) do { ncclResult_t e = (x); if (e != ncclSuccess) { std::printf("%s\n", ncclGetErrorString(e)); std::exit(1); } } while (0)

__global__ void partial_proj(__nv_bfloat16* out, int tokens, int hidden, int rank) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < tokens * hidden) out[i] = __float2bfloat16(0.125f * ((i + rank) % 8));
}
__global__ void residual_add(__nv_bfloat16* h, const __nv_bfloat16* o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) h[i] = __float2bfloat16(__bfloat162float(h[i]) + __bfloat162float(o[i]));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CUDA_OK(cudaSetDevice(rank));
  ncclUniqueId id;
  if (rank == 0) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t tp;
  NCCL_OK(ncclCommInitRank(&tp, size, id, rank));
  const int tokens = 64, hidden = 8192, n = tokens * hidden;
  __nv_bfloat16 *hidden_states, *attn_out;
  CUDA_OK(cudaMalloc(&hidden_states, n * sizeof(__nv_bfloat16)));
  CUDA_OK(cudaMalloc(&attn_out, n * sizeof(__nv_bfloat16)));
  CUDA_OK(cudaMemset(hidden_states, 0, n * sizeof(__nv_bfloat16)));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int layer = 0; layer < 4; ++layer) {
    partial_proj<<<(n + 255) / 256, 256, 0, stream>>>(attn_out, tokens, hidden, rank + layer);
    NCCL_OK(ncclAllReduce(attn_out, attn_out, n, ncclBfloat16, ncclSum, tp, stream));
    residual_add<<<(n + 255) / 256, 256, 0, stream>>>(hidden_states, attn_out, n);
  }
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int it = 0; it < 10; ++it) CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  __nv_bfloat16 h;
  CUDA_OK(cudaMemcpy(&h, hidden_states + 3, sizeof h, cudaMemcpyDeviceToHost));
  std::printf("rank %d h[3] = %f\n", rank, __bfloat162float(h));
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaFree(hidden_states));
  CUDA_OK(cudaFree(attn_out));
  NCCL_OK(ncclCommDestroy(tp));
  MPI_Finalize();
  return 0;
}
