// Data-parallel step whose gradient all-reduce runs on a communication worker (MPI bootstrap, fp16):
// the worker is a struct with its own pthread, started and stopped by helper functions
// (comm_worker_start / comm_worker_stop), as a small training framework writes it; the model's
// per-layer gradients are allocated by a helper into a struct the worker points to. The worker
// waits on each layer's event, sums the layer over the ranks and scales it by 1 / world.
#include <cstdio>
#include <cstdlib>
#include <pthread.h>
#include <mpi.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <nccl.h>

#define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define CHECK_NCCL(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { fprintf(stderr, "NCCL %s at %s:%d\n", ncclGetErrorString(r_), __FILE__, __LINE__); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

enum { kLayers = 5 };

struct Model {
  __half* grads[kLayers];
  float* master[kLayers];
  size_t numel[kLayers];
};

struct CommWorker {
  pthread_t thread;
  ncclComm_t comm;
  int device;
  int world;
  Model* model;
  cudaEvent_t ready[kLayers];
  cudaEvent_t done;
};

__global__ void backward_layer(__half* g, size_t n, int layer, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = __float2half((float)((i * 5 + layer * 11 + rank * 3) % 13) * 0.0625f);
}

__global__ void scale_half(__half* g, size_t n, float s) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    g[i] = __float2half(__half2float(g[i]) * s);
}

__global__ void sgd_step(float* w, const __half* g, size_t n, float lr) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    w[i] -= lr * __half2float(g[i]);
}

static void model_alloc(Model* m) {
  for (int l = 0; l < kLayers; ++l) {
    m->numel[l] = (size_t)(96 * 1024) * (size_t)(1 + (l * 3) % 4) + 64 * (size_t)l;
    CHECK_CUDA(cudaMalloc((void**)&m->grads[l], m->numel[l] * sizeof(__half)));
    CHECK_CUDA(cudaMalloc((void**)&m->master[l], m->numel[l] * sizeof(float)));
    CHECK_CUDA(cudaMemset(m->master[l], 0, m->numel[l] * sizeof(float)));
  }
}

static void model_free(Model* m) {
  for (int l = 0; l < kLayers; ++l) {
    CHECK_CUDA(cudaFree(m->grads[l]));
    CHECK_CUDA(cudaFree(m->master[l]));
  }
}

static void* comm_worker_main(void* arg) {
  CommWorker* w = (CommWorker*)arg;
  CHECK_CUDA(cudaSetDevice(w->device));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int l = kLayers - 1; l >= 0; --l) {
    CHECK_CUDA(cudaStreamWaitEvent(s, w->ready[l], 0));
    CHECK_NCCL(ncclAllReduce(w->model->grads[l], w->model->grads[l], w->model->numel[l], ncclHalf, ncclSum, w->comm, s));
    scale_half<<<128, 256, 0, s>>>(w->model->grads[l], w->model->numel[l], 1.0f / (float)w->world);
  }
  CHECK_CUDA(cudaEventRecord(w->done, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaStreamDestroy(s));
  return NULL;
}

static void comm_worker_start(CommWorker* w) {
  if (pthread_create(&w->thread, NULL, comm_worker_main, w) != 0) {
    fprintf(stderr, "could not start the communication worker\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

static void comm_worker_stop(CommWorker* w) { pthread_join(w->thread, NULL); }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int ndev = 0;
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  CHECK_CUDA(cudaSetDevice(rank % ndev));

  ncclUniqueId uid;
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&uid));
  MPI_Bcast(&uid, (int)sizeof(uid), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, world, uid, rank));

  Model model;
  model_alloc(&model);
  CommWorker worker;
  worker.comm = comm;
  worker.device = rank % ndev;
  worker.world = world;
  worker.model = &model;
  for (int l = 0; l < kLayers; ++l) CHECK_CUDA(cudaEventCreateWithFlags(&worker.ready[l], cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&worker.done, cudaEventDisableTiming));
  cudaStream_t compute;
  CHECK_CUDA(cudaStreamCreate(&compute));

  comm_worker_start(&worker);
  for (int l = kLayers - 1; l >= 0; --l) {
    backward_layer<<<128, 256, 0, compute>>>(model.grads[l], model.numel[l], l, rank);
    CHECK_CUDA(cudaEventRecord(worker.ready[l], compute));
  }
  comm_worker_stop(&worker);

  CHECK_CUDA(cudaStreamWaitEvent(compute, worker.done, 0));
  for (int l = 0; l < kLayers; ++l) sgd_step<<<128, 256, 0, compute>>>(model.master[l], model.grads[l], model.numel[l], 0.5f);
  CHECK_CUDA(cudaStreamSynchronize(compute));

  __half g0;
  float w1;
  CHECK_CUDA(cudaMemcpy(&g0, model.grads[kLayers - 1] + 3, sizeof(g0), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(&w1, model.master[0] + 1, sizeof(w1), cudaMemcpyDeviceToHost));
  printf("rank %d of %d: g[last][3] = %f, w[0][1] = %f\n", rank, world, __half2float(g0), w1);

  for (int l = 0; l < kLayers; ++l) CHECK_CUDA(cudaEventDestroy(worker.ready[l]));
  CHECK_CUDA(cudaEventDestroy(worker.done));
  CHECK_CUDA(cudaStreamDestroy(compute));
  model_free(&model);
  CHECK_NCCL(ncclCommDestroy(comm));
  MPI_Finalize();
  return 0;
}
