// Course-assignment style benchmark: a non-blocking communicator (ncclCommInitRankConfig with
// config.blocking = 0, polled with ncclCommGetAsyncError), a size sweep that allocates and frees
// its buffers inside the loop, timing with CUDA events, results checked on the host from pinned
// memory, and ncclCommFinalize before ncclCommDestroy. Environment bootstrap (torchrun names),
// the id passed through a file.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <chrono>
#include <thread>
#include <cuda_runtime.h>
#include <nccl.h>

#define CHECK_CUDA(call)                                                              \
  {                                                                                   \
    cudaError_t err = call;                                                           \
    if (err != cudaSuccess) {                                                         \
      printf("CUDA error in %s at line %d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err)); \
      exit(EXIT_FAILURE);                                                             \
    }                                                                                 \
  }

static void wait_for_comm(ncclComm_t comm) {
  ncclResult_t state;
  do {
    ncclCommGetAsyncError(comm, &state);
  } while (state == ncclInProgress);
  if (state != ncclSuccess) {
    printf("NCCL error: %s\n", ncclGetErrorString(state));
    exit(EXIT_FAILURE);
  }
}

__global__ void init_data(float* x, size_t n, int rank) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] = (float)(rank + 1);
}

int main() {
  int rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
  int nranks = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
  const char* path = getenv("NCCL_ID_FILE") ? getenv("NCCL_ID_FILE") : "nccl_id.bin";
  CHECK_CUDA(cudaSetDevice(atoi(getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "0")));

  ncclUniqueId id;
  if (rank == 0) {
    ncclGetUniqueId(&id);
    FILE* f = fopen("nccl_id.tmp", "wb");
    fwrite(&id, sizeof(id), 1, f);
    fclose(f);
    rename("nccl_id.tmp", path);
  } else {
    FILE* f = NULL;
    while ((f = fopen(path, "rb")) == NULL) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    while (fread(&id, sizeof(id), 1, f) != 1) rewind(f);
    fclose(f);
  }

  ncclComm_t comm;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  wait_for_comm(comm);

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));

  printf("%12s %12s %10s\n", "bytes", "time(us)", "busbw");
  for (size_t count = 1 << 10; count <= (1 << 22); count <<= 2) {
    float *d_in, *d_out, *h_out;
    CHECK_CUDA(cudaMalloc(&d_in, count * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&d_out, count * sizeof(float)));
    CHECK_CUDA(cudaMallocHost(&h_out, count * sizeof(float)));
    init_data<<<(count + 255) / 256, 256, 0, stream>>>(d_in, count, rank);

    // warm-up
    ncclAllReduce(d_in, d_out, count, ncclFloat, ncclSum, comm, stream);
    wait_for_comm(comm);
    CHECK_CUDA(cudaEventRecord(start, stream));
    for (int it = 0; it < 10; ++it) {
      ncclAllReduce(d_in, d_out, count, ncclFloat, ncclSum, comm, stream);
      wait_for_comm(comm);
    }
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0.f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    CHECK_CUDA(cudaMemcpy(h_out, d_out, count * sizeof(float), cudaMemcpyDeviceToHost));
    const float expected = nranks * (nranks + 1) / 2.0f;
    int errors = 0;
    for (size_t i = 0; i < count; ++i) errors += fabsf(h_out[i] - expected) > 1e-3f;
    double us = ms * 1000.0 / 10;
    double busbw = (double)count * sizeof(float) / us / 1e3 * 2.0 * (nranks - 1) / nranks;
    if (rank == 0) printf("%12zu %12.2f %10.2f %s\n", count * sizeof(float), us, busbw, errors ? "WRONG" : "ok");

    CHECK_CUDA(cudaFree(d_in));
    CHECK_CUDA(cudaFree(d_out));
    CHECK_CUDA(cudaFreeHost(h_out));
  }

  ncclCommFinalize(comm);
  wait_for_comm(comm);
  ncclCommDestroy(comm);
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}
