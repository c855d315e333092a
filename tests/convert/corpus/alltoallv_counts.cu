// All-to-all with counts (all-to-allv): rank r sends (p + 1) * kUnit elements to rank p, as a
// loop of grouped ncclSend/ncclRecv; displacements are prefix sums of the counts.
#include <cstdio>
#include <vector>

#include "braid/runtime.cuh"

using namespace braid::dev;

constexpr size_t kUnit = 64 * 1024;
constexpr int kMaxRanks = 8;
constexpr size_t kSlots = kUnit * kMaxRanks * (kMaxRanks + 1) / 2;  // room for every rank's counts

int main() {
  RankInfo r = bootstrap_rank();
  ncclComm_t comm = init_comm(r);
  cudaStream_t stream;
  BRAID_CUDA(cudaStreamCreate(&stream));
  int* sendbuf = nullptr;
  int* recvbuf = nullptr;
  BRAID_CUDA(cudaMalloc(&sendbuf, kSlots * sizeof(int)));
  BRAID_CUDA(cudaMalloc(&recvbuf, kSlots * sizeof(int)));
  BRAID_CUDA(cudaMemset(recvbuf, 0, kSlots * sizeof(int)));
  // braid:input sendbuf
  std::vector<size_t> send_count(r.world), send_disp(r.world), recv_count(r.world), recv_disp(r.world);
  size_t s = 0, q = 0;
  for (int p = 0; p < r.world; ++p) {
    send_count[p] = (size_t)(p + 1) * kUnit;  // what p receives from anyone
    recv_count[p] = (size_t)(r.rank + 1) * kUnit;
    send_disp[p] = s;
    recv_disp[p] = q;
    s += send_count[p];
    q += recv_count[p];
  }
  BRAID_NCCL(ncclGroupStart());
  for (int p = 0; p < r.world; ++p) {
    BRAID_NCCL(ncclSend(sendbuf + send_disp[p], send_count[p], ncclInt32, p, comm, stream));
    BRAID_NCCL(ncclRecv(recvbuf + recv_disp[p], recv_count[p], ncclInt32, p, comm, stream));
  }
  BRAID_NCCL(ncclGroupEnd());
  BRAID_CUDA(cudaStreamSynchronize(stream));
  // braid:output recvbuf
  BRAID_CUDA(cudaFree(sendbuf));
  BRAID_CUDA(cudaFree(recvbuf));
  ncclCommDestroy(comm);
  return 0;
}
