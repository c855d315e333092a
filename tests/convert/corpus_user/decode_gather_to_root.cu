// Inference decode: every rank produced a different number of finished sequences this step; they
// are sent to rank 0, which receives from each in one group (receive-only root, senders only send,
// a rank with nothing finished sends nothing).
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NCCLCHECK(cmd) do { ncclResult_t r = cmd; if (r != ncclSuccess) { printf("NCCL error %s:%d\n", __FILE__, __LINE__); exit(1); } } while (0)

const size_t kSeqLen = 2048;
const int kMaxBatch = 32;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  cudaSetDevice(rank);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t s;
  cudaStreamCreate(&s);
  int* tokens;
  int* gathered;
  cudaMalloc(&tokens, kMaxBatch * kSeqLen * sizeof(int));
  cudaMalloc(&gathered, (size_t)nranks * kMaxBatch * kSeqLen * sizeof(int));
  const int finished = rank % 3;  // 0, 1 or 2 sequences
  std::vector<int> counts(nranks);
  MPI_Gather(&finished, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  NCCLCHECK(ncclGroupStart());
  if (rank == 0) {
    for (int p = 1; p < nranks; ++p)
      if (counts[p] > 0) NCCLCHECK(ncclRecv(gathered + (size_t)p * kMaxBatch * kSeqLen, counts[p] * kSeqLen, ncclInt32, p, comm, s));
  } else if (finished > 0) {
    NCCLCHECK(ncclSend(tokens, finished * kSeqLen, ncclInt32, 0, comm, s));
  }
  NCCLCHECK(ncclGroupEnd());
  cudaStreamSynchronize(s);
  printf("rank %d done\n", rank);
  cudaFree(tokens);
  cudaFree(gathered);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
