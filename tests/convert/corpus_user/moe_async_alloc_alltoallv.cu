// MoE expert-parallel layer: each rank routes tokens to the experts of every rank, the per-peer
// token counts are exchanged first (int32 all-to-all), then tokens travel with grouped
// ncclSend/ncclRecv of uneven sizes (zero for some peers), the experts run, and the results come
// back the same way. Step buffers come from cudaMallocAsync and go back with cudaFreeAsync; the
// long-lived buffers sit in a std::vector walked with range-for. MPI bootstrap, fp16 tokens.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <mpi.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <nccl.h>

#define CK(x) do { auto s_ = (x); if ((int)s_ != 0) { std::fprintf(stderr, "%s failed (%d) at line %d\n", #x, (int)s_, __LINE__); std::exit(1); } } while (0)

__global__ void route(const __half* x, __half* packed, int n, int hidden) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n * hidden; i += gridDim.x * blockDim.x) packed[i] = x[i];
}
__global__ void expert_ffn(__half* t, int n, int hidden, float scale) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n * hidden; i += gridDim.x * blockDim.x) t[i] = __float2half(__half2float(t[i]) * scale);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  CK(cudaSetDevice(rank));
  ncclUniqueId uid;
  if (rank == 0) CK(ncclGetUniqueId(&uid));
  MPI_Bcast(&uid, sizeof(uid), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t ep_comm;
  CK(ncclCommInitRank(&ep_comm, world, uid, rank));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const int hidden = 512, max_tokens = 2048;
  // Long-lived: the layer input and output, and the count tables.
  std::vector<__half*> persistent(2, nullptr);
  for (auto& p : persistent) CK(cudaMalloc(&p, (size_t)max_tokens * hidden * sizeof(__half)));
  __half* x = persistent[0];
  __half* y = persistent[1];
  CK(cudaMemset(x, 0, (size_t)max_tokens * hidden * sizeof(__half)));
  int32_t *send_counts_d, *recv_counts_d;
  CK(cudaMalloc(&send_counts_d, world * sizeof(int32_t)));
  CK(cudaMalloc(&recv_counts_d, world * sizeof(int32_t)));

  std::vector<int32_t> send_counts(world), recv_counts(world);
  for (int step = 0; step < 3; ++step) {
    // Uneven routing: rank r sends (r + p + step) % 3 * 200 tokens to peer p (sometimes none).
    int total_send = 0;
    for (int p = 0; p < world; ++p) total_send += send_counts[p] = ((rank + p + step) % 3) * 200;
    CK(cudaMemcpyAsync(send_counts_d, send_counts.data(), world * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    CK(ncclAlltoAll(send_counts_d, recv_counts_d, 1, ncclInt32, ep_comm, stream));
    CK(cudaMemcpyAsync(recv_counts.data(), recv_counts_d, world * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    CK(cudaStreamSynchronize(stream));
    int total_recv = 0;
    for (int p = 0; p < world; ++p) total_recv += recv_counts[p];

    __half *dispatch_buf, *expert_buf;
    CK(cudaMallocAsync(&dispatch_buf, (size_t)(total_send + 1) * hidden * sizeof(__half), stream));
    CK(cudaMallocAsync(&expert_buf, (size_t)(total_recv + 1) * hidden * sizeof(__half), stream));
    route<<<64, 256, 0, stream>>>(x, dispatch_buf, total_send, hidden);

    // Dispatch.
    CK(ncclGroupStart());
    size_t soff = 0, roff = 0;
    for (int p = 0; p < world; ++p) {
      if (send_counts[p] > 0) CK(ncclSend(dispatch_buf + soff, (size_t)send_counts[p] * hidden, ncclHalf, p, ep_comm, stream));
      if (recv_counts[p] > 0) CK(ncclRecv(expert_buf + roff, (size_t)recv_counts[p] * hidden, ncclHalf, p, ep_comm, stream));
      soff += (size_t)send_counts[p] * hidden;
      roff += (size_t)recv_counts[p] * hidden;
    }
    CK(ncclGroupEnd());
    expert_ffn<<<64, 256, 0, stream>>>(expert_buf, total_recv, hidden, 1.5f);
    // Combine: the same exchange backwards, into y.
    CK(ncclGroupStart());
    soff = roff = 0;
    for (int p = 0; p < world; ++p) {
      if (recv_counts[p] > 0) CK(ncclSend(expert_buf + roff, (size_t)recv_counts[p] * hidden, ncclHalf, p, ep_comm, stream));
      if (send_counts[p] > 0) CK(ncclRecv(y + soff, (size_t)send_counts[p] * hidden, ncclHalf, p, ep_comm, stream));
      soff += (size_t)send_counts[p] * hidden;
      roff += (size_t)recv_counts[p] * hidden;
    }
    CK(ncclGroupEnd());
    CK(cudaFreeAsync(dispatch_buf, stream));
    CK(cudaFreeAsync(expert_buf, stream));
  }
  CK(cudaStreamSynchronize(stream));
  std::printf("rank %d: last step received %d tokens\n", rank, recv_counts[0] + (world > 1 ? recv_counts[1] : 0));

  for (auto* p : persistent) CK(cudaFree(p));
  CK(cudaFree(send_counts_d));
  CK(cudaFree(recv_counts_d));
  CK(ncclCommDestroy(ep_comm));
  MPI_Finalize();
  return 0;
}
