// An nccl-tests-style benchmark: MPI bootstrap, buffers in std::vector<void*> (one entry per local
// GPU, `-g 1` as under mpirun), the collective run through a test table's function pointer, a
// dtype table, in-place and out-of-place runs, ncclGroupStart/End around the per-GPU loop.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <mpi.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <nccl.h>

#define CUDACHECK(cmd) do {                                   \
  cudaError_t err = cmd;                                      \
  if (err != cudaSuccess) {                                   \
    fprintf(stderr, "Test CUDA failure %s:%d '%s'\n",         \
            __FILE__, __LINE__, cudaGetErrorString(err));     \
    return testCudaError;                                     \
  }                                                           \
} while (0)

#define NCCLCHECK(cmd) do {                                   \
  ncclResult_t res = cmd;                                     \
  if (res != ncclSuccess) {                                   \
    fprintf(stderr, "Test NCCL failure %s:%d '%s'\n",         \
            __FILE__, __LINE__, ncclGetErrorString(res));     \
    return testNcclError;                                     \
  }                                                           \
} while (0)

#define TESTCHECK(cmd) do {                                   \
  testResult_t r = cmd;                                       \
  if (r != testSuccess) {                                     \
    fprintf(stderr, " .. failed at %s:%d\n", __FILE__, __LINE__); \
    MPI_Abort(MPI_COMM_WORLD, 1);                             \
  }                                                           \
} while (0)

typedef enum { testSuccess = 0, testCudaError = 1, testNcclError = 2 } testResult_t;

static const ncclDataType_t test_types[] = {ncclFloat, ncclHalf, ncclBfloat16, ncclInt32};
static const char* test_typenames[] = {"float", "half", "bfloat16", "int32"};
static const int ntypes = 4;

static size_t wordSize(ncclDataType_t type) {
  switch (type) {
    case ncclHalf: case ncclBfloat16: return 2;
    case ncclInt32: case ncclFloat: return 4;
    default: return 8;
  }
}

template <typename T>
__global__ void InitDataKernel(T* data, size_t count, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
    data[i] = T((rank + 1) * ((i % 5) + 1));
}

static testResult_t InitData(void* data, size_t count, ncclDataType_t type, int rank, cudaStream_t s) {
  switch (type) {
    case ncclFloat: InitDataKernel<float><<<32, 256, 0, s>>>((float*)data, count, rank); break;
    case ncclHalf: InitDataKernel<__half><<<32, 256, 0, s>>>((__half*)data, count, rank); break;
    case ncclBfloat16: InitDataKernel<__nv_bfloat16><<<32, 256, 0, s>>>((__nv_bfloat16*)data, count, rank); break;
    default: InitDataKernel<int><<<32, 256, 0, s>>>((int*)data, count, rank); break;
  }
  CUDACHECK(cudaGetLastError());
  return testSuccess;
}

testResult_t AllReduceRunColl(void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                              ncclComm_t comm, cudaStream_t stream) {
  NCCLCHECK(ncclAllReduce(sendbuff, recvbuff, count, type, op, comm, stream));
  return testSuccess;
}

struct testColl {
  const char name[20];
  testResult_t (*runColl)(void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                          ncclComm_t comm, cudaStream_t stream);
};
struct testColl allReduceTest = {"AllReduce", AllReduceRunColl};

struct threadArgs {
  size_t maxbytes;
  int nGpus;
  int rank, nranks;
  std::vector<void*> sendbuffs;
  std::vector<void*> recvbuffs;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  struct testColl* collTest;
};

static testResult_t startColl(struct threadArgs* args, ncclDataType_t type, ncclRedOp_t op, size_t count, int in_place) {
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < args->nGpus; i++) {
    char* recvBuff = (char*)args->recvbuffs[i];
    char* sendBuff = (char*)args->sendbuffs[i];
    TESTCHECK(args->collTest->runColl((void*)(in_place ? recvBuff : sendBuff), (void*)recvBuff, count, type, op, 0,
                                      args->comms[i], args->streams[i]));
  }
  NCCLCHECK(ncclGroupEnd());
  return testSuccess;
}

static testResult_t completeColl(struct threadArgs* args) {
  for (int i = 0; i < args->nGpus; i++) CUDACHECK(cudaStreamSynchronize(args->streams[i]));
  return testSuccess;
}

static testResult_t TimeTest(struct threadArgs* args, ncclDataType_t type, const char* typeName, ncclRedOp_t op) {
  for (size_t bytes = 1 << 16; bytes <= args->maxbytes; bytes <<= 2) {
    size_t count = bytes / wordSize(type);
    for (int in_place = 0; in_place < 2; in_place++) {
      for (int i = 0; i < args->nGpus; i++) TESTCHECK(InitData(args->sendbuffs[i], count, type, args->rank, args->streams[i]));
      double t0 = MPI_Wtime();
      for (int iter = 0; iter < 5; iter++) TESTCHECK(startColl(args, type, op, count, in_place));
      TESTCHECK(completeColl(args));
      double us = (MPI_Wtime() - t0) * 1e6 / 5;
      if (args->rank == 0) printf("%12zu %12zu %8s %6s %10.2f us\n", bytes, count, typeName, in_place ? "in" : "out", us);
    }
  }
  return testSuccess;
}

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  struct threadArgs args;
  MPI_Comm_rank(MPI_COMM_WORLD, &args.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &args.nranks);
  args.nGpus = 1;  // -g 1: one GPU per MPI process
  args.maxbytes = argc > 1 ? strtoull(argv[1], nullptr, 10) : (size_t)1 << 24;
  args.collTest = &allReduceTest;

  ncclUniqueId ncclId;
  if (args.rank == 0) ncclGetUniqueId(&ncclId);
  MPI_Bcast(&ncclId, sizeof(ncclId), MPI_BYTE, 0, MPI_COMM_WORLD);

  args.sendbuffs.resize(args.nGpus);
  args.recvbuffs.resize(args.nGpus);
  args.comms.resize(args.nGpus);
  args.streams.resize(args.nGpus);
  for (int i = 0; i < args.nGpus; i++) {
    cudaSetDevice(args.rank * args.nGpus + i);
    cudaMalloc(&args.sendbuffs[i], args.maxbytes);
    cudaMalloc(&args.recvbuffs[i], args.maxbytes);
    cudaStreamCreateWithFlags(&args.streams[i], cudaStreamNonBlocking);
  }
  ncclCommInitRank(&args.comms[0], args.nranks * args.nGpus, ncclId, args.rank * args.nGpus);

  if (args.rank == 0) printf("# %10s %12s %8s %6s %13s\n", "size", "count", "type", "where", "time");
  for (int t = 0; t < ntypes; t++) TESTCHECK(TimeTest(&args, test_types[t], test_typenames[t], ncclSum));

  for (int i = 0; i < args.nGpus; i++) {
    cudaFree(args.sendbuffs[i]);
    cudaFree(args.recvbuffs[i]);
    cudaStreamDestroy(args.streams[i]);
  }
  ncclCommDestroy(args.comms[0]);
  MPI_Finalize();
  return 0;
}
