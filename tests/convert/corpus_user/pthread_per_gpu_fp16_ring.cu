// NCCL's "one device per thread" shape with work in it: one process, a pthread per GPU, each
// thread making its own communicator from one shared unique id and its own buffers, fp16
// gradients summed in a helper, a ring of halo exchanges (send to the next GPU, receive from the
// previous) in a group, the weights broadcast from GPU 0. The main thread joins the threads,
// checks what each wrote on the host, and destroys the communicators and frees the results
// itself, as many such programs do. Prints one line per GPU.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CUDACHECK(cmd)                                                                        \
  do {                                                                                        \
    cudaError_t e = cmd;                                                                      \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(EXIT_FAILURE);                                                                \
    }                                                                                         \
  } while (0)
#define NCCLCHECK(cmd)                                                                        \
  do {                                                                                        \
    ncclResult_t res = cmd;                                                                   \
    if (res != ncclSuccess) {                                                                 \
      std::fprintf(stderr, "Failed, NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(res)); \
      std::exit(EXIT_FAILURE);                                                                \
    }                                                                                         \
  } while (0)

typedef struct {
  int rank;
  int nranks;
  ncclUniqueId id;
  ncclComm_t comm;
  cudaStream_t stream;
  __half* grads;
  float* halo_out;
  float* halo_in;
  float* weights;
  size_t n_grads, n_halo, n_weights;
} Worker;

__global__ void fill_grads(__half* g, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = __float2half((float)((i + rank) % 5) * 0.5f);
}
__global__ void fill_floats(float* h, size_t n, float base) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    h[i] = base + (float)(i % 89);
}

static void sum_gradients(Worker* w) {
  NCCLCHECK(ncclAllReduce(w->grads, w->grads, w->n_grads, ncclFloat16, ncclSum, w->comm, w->stream));
}

static void exchange_halo(Worker* w) {
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(w->halo_out, w->n_halo, ncclFloat32, (w->rank + 1) % w->nranks, w->comm, w->stream));
  NCCLCHECK(ncclRecv(w->halo_in, w->n_halo, ncclFloat32, (w->rank + w->nranks - 1) % w->nranks, w->comm, w->stream));
  NCCLCHECK(ncclGroupEnd());
}

void* thread_worker(void* arg) {
  Worker* w = (Worker*)arg;
  CUDACHECK(cudaSetDevice(w->rank));
  CUDACHECK(cudaStreamCreate(&w->stream));
  NCCLCHECK(ncclCommInitRank(&w->comm, w->nranks, w->id, w->rank));
  CUDACHECK(cudaMalloc(&w->grads, w->n_grads * sizeof(__half)));
  CUDACHECK(cudaMalloc(&w->halo_out, w->n_halo * sizeof(float)));
  CUDACHECK(cudaMalloc(&w->halo_in, w->n_halo * sizeof(float)));
  CUDACHECK(cudaMalloc(&w->weights, w->n_weights * sizeof(float)));
  fill_grads<<<128, 256, 0, w->stream>>>(w->grads, w->n_grads, w->rank);
  fill_floats<<<64, 256, 0, w->stream>>>(w->halo_out, w->n_halo, (float)(w->rank * 1000));
  fill_floats<<<64, 256, 0, w->stream>>>(w->weights, w->n_weights, w->rank == 0 ? 7.0f : -1.0f);
  CUDACHECK(cudaMemsetAsync(w->halo_in, 0, w->n_halo * sizeof(float), w->stream));
  for (int step = 0; step < 3; ++step) {
    sum_gradients(w);
    exchange_halo(w);
  }
  NCCLCHECK(ncclBroadcast(w->weights, w->weights, w->n_weights, ncclFloat32, 0, w->comm, w->stream));
  CUDACHECK(cudaStreamSynchronize(w->stream));
  CUDACHECK(cudaFree(w->halo_out));
  return NULL;
}

int main(int argc, char* argv[]) {
  int nranks = 0;
  CUDACHECK(cudaGetDeviceCount(&nranks));
  if (const char* env = getenv("NTHREADS")) nranks = atoi(env);
  if (argc > 1) nranks = atoi(argv[1]);
  if (nranks < 1) return EXIT_FAILURE;
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  std::vector<pthread_t> threads(nranks);
  std::vector<Worker> workers(nranks);
  for (int r = 0; r < nranks; ++r) {
    workers[r] = Worker{};
    workers[r].rank = r;
    workers[r].nranks = nranks;
    workers[r].id = id;
    workers[r].n_grads = (size_t)1 << 20;
    workers[r].n_halo = (size_t)1 << 15;
    workers[r].n_weights = (size_t)1 << 18;
    pthread_create(&threads[r], NULL, thread_worker, &workers[r]);
  }
  for (int r = 0; r < nranks; ++r) pthread_join(threads[r], NULL);

  int bad = 0;
  for (int r = 0; r < nranks; ++r) {
    Worker& w = workers[r];
    CUDACHECK(cudaSetDevice(r));
    std::vector<float> halo(w.n_halo), weights(w.n_weights);
    CUDACHECK(cudaMemcpy(halo.data(), w.halo_in, w.n_halo * sizeof(float), cudaMemcpyDeviceToHost));
    CUDACHECK(cudaMemcpy(weights.data(), w.weights, w.n_weights * sizeof(float), cudaMemcpyDeviceToHost));
    __half g0;
    CUDACHECK(cudaMemcpy(&g0, w.grads, sizeof(g0), cudaMemcpyDeviceToHost));
    const int prev = (r + nranks - 1) % nranks;
    bool ok = true;
    for (size_t i = 0; i < w.n_halo && ok; ++i) ok = halo[i] == (float)(prev * 1000) + (float)(i % 89);
    for (size_t i = 0; i < w.n_weights && ok; ++i) ok = weights[i] == 7.0f + (float)(i % 89);
    std::printf("gpu %d: halo from %d and weights %s, grads[0] %.3f\n", r, prev, ok ? "ok" : "WRONG", __half2float(g0));
    bad += ok ? 0 : 1;
  }
  for (int r = 0; r < nranks; ++r) {
    CUDACHECK(cudaSetDevice(r));
    CUDACHECK(cudaFree(workers[r].grads));
    CUDACHECK(cudaFree(workers[r].halo_in));
    CUDACHECK(cudaFree(workers[r].weights));
    CUDACHECK(cudaStreamDestroy(workers[r].stream));
    NCCLCHECK(ncclCommDestroy(workers[r].comm));
  }
  return bad == 0 ? 0 : 2;
}
