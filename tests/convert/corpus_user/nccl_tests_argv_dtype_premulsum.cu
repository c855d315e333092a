// A correctness sweep in the manner of nccl-tests' all_reduce_perf: the data type and reduction are
// parsed from the command line (`-d int8|uint8|int64|double|float -o sum|prod|max|min|premulsum`),
// the element size derived from the type, in-place and out-of-place runs over a range of sizes.
// `premulsum` creates a custom op with ncclRedOpCreatePreMulSum (a host scalar: 1 / nranks) and
// destroys it afterwards. Results are checked on the host through cudaHostAlloc'd mapped staging
// memory; the per-size timing goes into a cudaMallocManaged array that every rank sums.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDACHECK(cmd)                                                                          \
  do {                                                                                          \
    cudaError_t e = cmd;                                                                        \
    if (e != cudaSuccess) {                                                                     \
      printf("Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e));     \
      exit(EXIT_FAILURE);                                                                       \
    }                                                                                           \
  } while (0)
#define NCCLCHECK(cmd)                                                                          \
  do {                                                                                          \
    ncclResult_t r = cmd;                                                                       \
    if (r != ncclSuccess) {                                                                     \
      printf("Failed, NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r));     \
      exit(EXIT_FAILURE);                                                                       \
    }                                                                                           \
  } while (0)

struct TypeName { const char* name; ncclDataType_t type; size_t bytes; };
static const TypeName test_types[] = {{"int8", ncclInt8, 1},     {"uint8", ncclUint8, 1}, {"int64", ncclInt64, 8},
                                      {"double", ncclDouble, 8}, {"float", ncclFloat, 4}};
static const char* op_names[] = {"sum", "prod", "max", "min", "premulsum"};

static int parse_type(const char* s) {
  for (int i = 0; i < (int)(sizeof(test_types) / sizeof(test_types[0])); i++)
    if (strcmp(s, test_types[i].name) == 0) return i;
  return -1;
}

static int parse_op(const char* s) {
  for (int i = 0; i < 5; i++)
    if (strcmp(s, op_names[i]) == 0) return i;
  return -1;
}

__global__ void fill_pattern(uint8_t* data, size_t bytes, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes; i += (size_t)gridDim.x * blockDim.x)
    data[i] = (uint8_t)((i * 3 + rank) & 0x3);
}

int main(int argc, char* argv[]) {
  int type_index = parse_type("float"), op_index = 0;
  size_t min_bytes = 1024, max_bytes = 16 * 1024 * 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "-d") == 0) type_index = parse_type(argv[i + 1]);
    else if (strcmp(argv[i], "-o") == 0) op_index = parse_op(argv[i + 1]);
    else if (strcmp(argv[i], "-e") == 0) max_bytes = strtoull(argv[i + 1], NULL, 0);
  }
  if (type_index < 0 || op_index < 0) {
    fprintf(stderr, "usage: %s [-d int8|uint8|int64|double|float] [-o sum|prod|max|min|premulsum] [-e bytes]\n", argv[0]);
    return 1;
  }
  const ncclDataType_t type = test_types[type_index].type;
  const size_t wordSize = test_types[type_index].bytes;

  int rank, nranks;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int ndev;
  CUDACHECK(cudaGetDeviceCount(&ndev));
  CUDACHECK(cudaSetDevice(rank % ndev));
  CUDACHECK(cudaSetDeviceFlags(cudaDeviceMapHost));

  ncclUniqueId id;
  if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));

  ncclRedOp_t op;
  bool custom_op = false;
  double premul = 1.0 / nranks;
  float premul_f = (float)premul;
  switch (op_index) {
    case 0: op = ncclSum; break;
    case 1: op = ncclProd; break;
    case 2: op = ncclMax; break;
    case 3: op = ncclMin; break;
    default:
      NCCLCHECK(ncclRedOpCreatePreMulSum(&op, type == ncclDouble ? (void*)&premul : (void*)&premul_f, type,
                                         ncclScalarHostImmediate, comm));
      custom_op = true;
  }

  cudaStream_t stream;
  CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void *sendbuff, *recvbuff;
  CUDACHECK(cudaMalloc(&sendbuff, max_bytes));
  CUDACHECK(cudaMalloc(&recvbuff, max_bytes));

  // Mapped host staging for the check, and the timings in managed memory.
  uint8_t* host_check;
  uint8_t* host_check_dev;
  CUDACHECK(cudaHostAlloc((void**)&host_check, max_bytes, cudaHostAllocMapped));
  CUDACHECK(cudaHostGetDevicePointer((void**)&host_check_dev, host_check, 0));
  int nsizes = 0;
  for (size_t b = min_bytes; b <= max_bytes; b *= 4) nsizes++;
  double* timings;
  CUDACHECK(cudaMallocManaged(&timings, nsizes * sizeof(double)));

  cudaEvent_t start, stop;
  CUDACHECK(cudaEventCreate(&start));
  CUDACHECK(cudaEventCreate(&stop));
  int s = 0;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4, s++) {
    const size_t count = bytes / wordSize;
    fill_pattern<<<64, 256, 0, stream>>>((uint8_t*)sendbuff, bytes, rank);
    CUDACHECK(cudaEventRecord(start, stream));
    NCCLCHECK(ncclAllReduce(sendbuff, recvbuff, count, type, op, comm, stream));  // out of place
    NCCLCHECK(ncclAllReduce(recvbuff, recvbuff, count, type, op, comm, stream));  // in place
    CUDACHECK(cudaEventRecord(stop, stream));
    CUDACHECK(cudaMemcpyAsync(host_check_dev, recvbuff, bytes, cudaMemcpyDeviceToDevice, stream));
    CUDACHECK(cudaStreamSynchronize(stream));
    float ms = 0.f;
    CUDACHECK(cudaEventElapsedTime(&ms, start, stop));
    timings[s] = ms;
  }
  // Mean time per size over the ranks (the managed array, reduced in place).
  NCCLCHECK(ncclAllReduce(timings, timings, nsizes, ncclDouble, ncclSum, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  if (rank == 0)
    for (int i = 0; i < nsizes; i++) printf("%12zu bytes  %s %s  %8.3f ms\n", min_bytes << (2 * i), test_types[type_index].name, op_names[op_index], timings[i] / nranks);
  printf("rank %d: first byte %d\n", rank, (int)host_check[0]);

  if (custom_op) NCCLCHECK(ncclRedOpDestroy(op, comm));
  CUDACHECK(cudaEventDestroy(start));
  CUDACHECK(cudaEventDestroy(stop));
  CUDACHECK(cudaFree(sendbuff));
  CUDACHECK(cudaFree(recvbuff));
  CUDACHECK(cudaFreeHost(host_check));
  CUDACHECK(cudaFree(timings));
  CUDACHECK(cudaStreamDestroy(stream));
  NCCLCHECK(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
