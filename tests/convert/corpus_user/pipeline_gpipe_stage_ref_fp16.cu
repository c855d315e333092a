// Pipeline-parallel forward, GPipe schedule, as users write it: a `Stage` struct holding arrays of
// per-micro-batch activations (`half* in[kMicro]`), set up and torn down by helpers taking it by
// reference (`setup(Stage& s, ...)`), MPI bootstrap, fp16; each stage receives from the previous
// rank and sends to the next, the first stage reads its input from the host, the last prints.
#include <mpi.h>
#include <nccl.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call) { auto err = call; if (err != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(err)); exit(1); } }
#define CHECK_NCCL(call) { auto res = call; if (res != ncclSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(res)); exit(1); } }

constexpr int kMicro = 4;
constexpr int kHidden = 2048;
constexpr int kTokens = 256;

__global__ void stage_fwd(const half* in, half* out, int n, float w) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half(__half2float(in[i]) * w + 0.01f);
}

struct Stage {
  half* in[kMicro];
  half* out[kMicro];
  cudaStream_t compute, comm;
  cudaEvent_t done[kMicro];
};

static void setup(Stage& s, size_t elems) {
  for (int m = 0; m < kMicro; ++m) {
    CHECK_CUDA(cudaMalloc(&s.in[m], elems * sizeof(half)));
    CHECK_CUDA(cudaMalloc(&s.out[m], elems * sizeof(half)));
    CHECK_CUDA(cudaEventCreateWithFlags(&s.done[m], cudaEventDisableTiming));
  }
  CHECK_CUDA(cudaStreamCreate(&s.compute));
  CHECK_CUDA(cudaStreamCreate(&s.comm));
}

static void teardown(Stage& s) {
  for (int m = 0; m < kMicro; ++m) {
    cudaFree(s.in[m]);
    cudaFree(s.out[m]);
    cudaEventDestroy(s.done[m]);
  }
  cudaStreamDestroy(s.compute);
  cudaStreamDestroy(s.comm);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  CHECK_CUDA(cudaSetDevice(rank));
  ncclUniqueId uid;
  if (rank == 0) ncclGetUniqueId(&uid);
  MPI_Bcast(&uid, sizeof uid, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, nranks, uid, rank));

  const size_t elems = (size_t)kTokens * kHidden;
  Stage st;
  setup(st, elems);
  const bool first = rank == 0, last = rank == nranks - 1;
  for (int m = 0; m < kMicro; ++m) {
    if (first) {
      half* h = (half*)malloc(elems * sizeof(half));
      for (size_t i = 0; i < elems; ++i) h[i] = __float2half((float)((i + m) % 13) / 13.f);
      CHECK_CUDA(cudaMemcpy(st.in[m], h, elems * sizeof(half), cudaMemcpyHostToDevice));
      free(h);
    } else {
      CHECK_NCCL(ncclRecv(st.in[m], elems, ncclHalf, rank - 1, comm, st.comm));
      CHECK_CUDA(cudaEventRecord(st.done[m], st.comm));
      CHECK_CUDA(cudaStreamWaitEvent(st.compute, st.done[m], 0));
    }
    stage_fwd<<<(elems + 255) / 256, 256, 0, st.compute>>>(st.in[m], st.out[m], (int)elems, 0.5f + rank);
    if (!last) {
      CHECK_CUDA(cudaEventRecord(st.done[m], st.compute));
      CHECK_CUDA(cudaStreamWaitEvent(st.comm, st.done[m], 0));
      CHECK_NCCL(ncclSend(st.out[m], elems, ncclHalf, rank + 1, comm, st.comm));
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(st.comm));
  CHECK_CUDA(cudaStreamSynchronize(st.compute));
  if (last) {
    half h;
    CHECK_CUDA(cudaMemcpy(&h, st.out[kMicro - 1], sizeof(half), cudaMemcpyDeviceToHost));
    printf("last stage out %f\n", __half2float(h));
  }
  teardown(st);
  ncclCommDestroy(comm);
  MPI_Finalize();
}
