// One process, one thread per GPU, each thread its own rank (ncclCommInitRank per thread), as the
// NCCL examples' "one device per thread" program.
#include <cstdio>
#include <thread>
#include <vector>
#include <cuda_runtime.h>
#include <nccl.h>

void worker(int rank, int world, ncclUniqueId id) {
  cudaSetDevice(rank);
  ncclComm_t comm;
  ncclCommInitRank(&comm, world, id, rank);
  float* buf;
  cudaMalloc(&buf, 1024 * sizeof(float));
  cudaMemset(buf, 0, 1024 * sizeof(float));
  cudaStream_t s;
  cudaStreamCreate(&s);
  ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, comm, s);
  cudaStreamSynchronize(s);
  cudaFree(buf);
  ncclCommDestroy(comm);
}

int main() {
  int n = 0;
  cudaGetDeviceCount(&n);
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back(worker, r, n, id);
  for (auto& t : ts) t.join();
  std::printf("done\n");
  return 0;
}
