// MoE token dispatch: every rank sends a different number of tokens to every expert rank
// (counts from the router), a grouped send/recv with per-peer counts; some pairs send nothing.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CK(x) do { auto e_ = (x); if ((int)e_ != 0) { fprintf(stderr, "error %d at %s:%d\n", (int)e_, __FILE__, __LINE__); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

const int kHidden = 512;
const int kMaxTokens = 4096;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(ncclUniqueId), MPI_BYTE, 0, MPI_COMM_WORLD);
  CK(cudaSetDevice(rank));
  ncclComm_t comm;
  CK(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));

  // Router output: tokens this rank sends to each expert rank (uneven, zero for some pairs).
  std::vector<int> send_counts(nranks), recv_counts(nranks);
  for (int p = 0; p < nranks; ++p) send_counts[p] = ((rank * 7 + p * 3) % 5) * 64;
  MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, MPI_COMM_WORLD);

  float* send_buf;
  float* recv_buf;
  CK(cudaMalloc(&send_buf, (size_t)kMaxTokens * kHidden * sizeof(float)));
  CK(cudaMalloc(&recv_buf, (size_t)kMaxTokens * kHidden * sizeof(float)));
  CK(cudaMemset(send_buf, 0, (size_t)kMaxTokens * kHidden * sizeof(float)));

  size_t soff = 0, roff = 0;
  CK(ncclGroupStart());
  for (int p = 0; p < nranks; ++p) {
    if (send_counts[p] > 0) CK(ncclSend(send_buf + soff, (size_t)send_counts[p] * kHidden, ncclFloat, p, comm, s));
    if (recv_counts[p] > 0) CK(ncclRecv(recv_buf + roff, (size_t)recv_counts[p] * kHidden, ncclFloat, p, comm, s));
    soff += (size_t)send_counts[p] * kHidden;
    roff += (size_t)recv_counts[p] * kHidden;
  }
  CK(ncclGroupEnd());
  CK(cudaStreamSynchronize(s));
  printf("rank %d received %zu floats\n", rank, roff);
  CK(cudaFree(send_buf));
  CK(cudaFree(recv_buf));
  CK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
