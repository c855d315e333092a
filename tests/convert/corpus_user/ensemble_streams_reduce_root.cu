/*
 * ensemble.cu -- Monte Carlo ensemble of a stochastic ODE, run as a batch job.
 *
 * Every rank integrates `nmembers` members per stream on `NSTREAMS` streams. Per stream a device
 * buffer (a malloc'd array of device pointers, double **state) holds the members' states; after
 * each output interval:
 *   - the ensemble mean field is all-reduced per stream (ncclAllReduce of double, ncclSum),
 *   - a histogram of the states (unsigned 64-bit counts) is reduced to rank 0 (ncclReduce),
 *   - the forcing parameters, recomputed by rank 0 from the histogram, are broadcast (ncclBroadcast)
 *   - a per-rank slice of the variance field is reduce-scattered (ncclReduceScatter, float).
 * The communicator from ncclCommInitRankConfig; parameters in managed memory; pinned staging of
 * the histogram; functions return int and clean up with goto. GPU from SLURM_LOCALID.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <mpi.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NSTREAMS 4
#define NBINS 256
#define NFIELD (1 << 16)

#define CUDACALL(stmt) { cudaError_t _e = (stmt); if (_e != cudaSuccess) { \
  fprintf(stderr, "%s failed: %s (%s:%d)\n", #stmt, cudaGetErrorString(_e), __FILE__, __LINE__); \
  return -1; } }
#define NCCLCALL(stmt) { ncclResult_t _r = (stmt); if (_r != ncclSuccess) { \
  fprintf(stderr, "%s failed: %s (%s:%d)\n", #stmt, ncclGetErrorString(_r), __FILE__, __LINE__); \
  return -1; } }

typedef struct {
  double drift;
  double sigma;
  double dt;
  int nsub;
} params_t;

static int myrank, nprocs;
static ncclComm_t nccl_comm;
static cudaStream_t streams[NSTREAMS];

static double **state;          /* [NSTREAMS] device arrays of NFIELD doubles */
static double **mean;           /* [NSTREAMS] device arrays, all-reduced */
static unsigned long long *d_hist;   /* NBINS counts, reduced to rank 0 */
static unsigned long long *h_hist;   /* pinned */
static float *d_var, *d_var_slice;   /* NFIELD floats, NFIELD / nprocs slice */
static params_t *params;        /* managed: written by the host on rank 0, read by kernels */
static double *d_params_bcast;  /* the parameters as doubles, broadcast from rank 0 */

__global__ void integrate(double *x, const double *p, int n, int nsub, unsigned long long seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long s = seed ^ (0x9E3779B97F4A7C15ull * (i + 1));
  double v = x[i];
  for (int k = 0; k < nsub; k++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = ((s >> 11) * (1.0 / 9007199254740992.0)) - 0.5;
    v += p[0] * (1.0 - v) * p[2] + p[1] * u * sqrt(p[2]);
  }
  x[i] = v;
}

__global__ void scale_copy(const double *x, double *m, int n, double w) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) m[i] = w * x[i];
}

__global__ void histogram(const double *x, unsigned long long *h, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    int b = (int)((x[i] + 2.0) * (NBINS / 4.0));
    b = b < 0 ? 0 : (b >= NBINS ? NBINS - 1 : b);
    atomicAdd(&h[b], 1ull);
  }
}

__global__ void variance(const double *x, const double *m, float *var, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    double d = x[i] - m[i];
    var[i] += (float)(d * d);
  }
}

static int get_local_gpu(void) {
  const char *id = getenv("SLURM_LOCALID");
  int ndev = 1;
  cudaGetDeviceCount(&ndev);
  return (id ? atoi(id) : myrank) % ndev;
}

static int init_nccl(void) {
  ncclUniqueId uid;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  cfg.cgaClusterSize = 2;
  if (myrank == 0) NCCLCALL(ncclGetUniqueId(&uid));
  MPI_Bcast(&uid, sizeof(uid), MPI_CHAR, 0, MPI_COMM_WORLD);
  NCCLCALL(ncclCommInitRankConfig(&nccl_comm, nprocs, uid, myrank, &cfg));
  return 0;
}

static int alloc_all(void) {
  int s;
  state = (double **)malloc(NSTREAMS * sizeof(double *));
  mean = (double **)malloc(NSTREAMS * sizeof(double *));
  if (!state || !mean) return -1;
  for (s = 0; s < NSTREAMS; s++) {
    CUDACALL(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
    CUDACALL(cudaMalloc(&state[s], NFIELD * sizeof(double)));
    CUDACALL(cudaMalloc(&mean[s], NFIELD * sizeof(double)));
    CUDACALL(cudaMemset(state[s], 0, NFIELD * sizeof(double)));
  }
  CUDACALL(cudaMalloc(&d_hist, NBINS * sizeof(unsigned long long)));
  CUDACALL(cudaMallocHost(&h_hist, NBINS * sizeof(unsigned long long)));
  CUDACALL(cudaMalloc(&d_var, NFIELD * sizeof(float)));
  CUDACALL(cudaMalloc(&d_var_slice, (NFIELD / nprocs) * sizeof(float)));
  CUDACALL(cudaMemset(d_var, 0, NFIELD * sizeof(float)));
  CUDACALL(cudaMallocManaged(&params, sizeof(params_t)));
  CUDACALL(cudaMalloc(&d_params_bcast, 3 * sizeof(double)));
  return 0;
}

/* rank 0 retunes the forcing so the ensemble spread stays in the histogram's range */
static void retune(params_t *p, const unsigned long long *h) {
  unsigned long long edge = 0, total = 0;
  for (int b = 0; b < NBINS; b++) {
    total += h[b];
    if (b < 8 || b >= NBINS - 8) edge += h[b];
  }
  if (total && (double)edge / (double)total > 0.01) p->sigma *= 0.9;
}

static int output_interval(int interval, double *elapsed) {
  int s, nb = (NFIELD + 255) / 256;
  double t0 = MPI_Wtime();
  double host_p[3];

  for (s = 0; s < NSTREAMS; s++) {
    integrate<<<nb, 256, 0, streams[s]>>>(state[s], d_params_bcast, NFIELD, params->nsub,
                                          1234ull + 977ull * (myrank * NSTREAMS + s) + interval);
    scale_copy<<<nb, 256, 0, streams[s]>>>(state[s], mean[s], NFIELD, 1.0 / (nprocs * NSTREAMS));
    NCCLCALL(ncclAllReduce(mean[s], mean[s], NFIELD, ncclDouble, ncclSum, nccl_comm, streams[s]));
  }
  for (s = 0; s < NSTREAMS; s++) CUDACALL(cudaStreamSynchronize(streams[s]));

  /* statistics on stream 0 */
  CUDACALL(cudaMemsetAsync(d_hist, 0, NBINS * sizeof(unsigned long long), streams[0]));
  for (s = 0; s < NSTREAMS; s++) {
    histogram<<<nb, 256, 0, streams[0]>>>(state[s], d_hist, NFIELD);
    variance<<<nb, 256, 0, streams[0]>>>(state[s], mean[0], d_var, NFIELD);
  }
  NCCLCALL(ncclReduce(d_hist, d_hist, NBINS, ncclUint64, ncclSum, 0, nccl_comm, streams[0]));
  NCCLCALL(ncclReduceScatter(d_var, d_var_slice, NFIELD / nprocs, ncclFloat, ncclSum, nccl_comm, streams[0]));
  CUDACALL(cudaMemcpyAsync(h_hist, d_hist, NBINS * sizeof(unsigned long long), cudaMemcpyDeviceToHost, streams[0]));
  CUDACALL(cudaStreamSynchronize(streams[0]));

  if (myrank == 0) {
    retune(params, h_hist);
    host_p[0] = params->drift;
    host_p[1] = params->sigma;
    host_p[2] = params->dt;
    CUDACALL(cudaMemcpyAsync(d_params_bcast, host_p, sizeof(host_p), cudaMemcpyHostToDevice, streams[0]));
  }
  NCCLCALL(ncclBroadcast(d_params_bcast, d_params_bcast, 3, ncclDouble, 0, nccl_comm, streams[0]));
  CUDACALL(cudaStreamSynchronize(streams[0]));
  *elapsed += MPI_Wtime() - t0;
  return 0;
}

static void free_all(void) {
  int s;
  for (s = 0; s < NSTREAMS; s++) {
    if (state && state[s]) cudaFree(state[s]);
    if (mean && mean[s]) cudaFree(mean[s]);
    if (streams[s]) cudaStreamDestroy(streams[s]);
  }
  free(state);
  free(mean);
  cudaFree(d_hist);
  cudaFreeHost(h_hist);
  cudaFree(d_var);
  cudaFree(d_var_slice);
  cudaFree(params);
  cudaFree(d_params_bcast);
}

int main(int argc, char *argv[]) {
  int nint = argc > 1 ? atoi(argv[1]) : 20, i, rc = 0;
  double elapsed = 0.0, max_elapsed = 0.0;
  double p0[3];

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &myrank);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  if (cudaSetDevice(get_local_gpu()) != cudaSuccess) { rc = 1; goto done; }
  if (init_nccl() != 0) { rc = 2; goto done; }
  if (alloc_all() != 0) { rc = 3; goto cleanup; }

  params->drift = 0.5;
  params->sigma = 0.3;
  params->dt = 1e-3;
  params->nsub = 50;
  p0[0] = params->drift;
  p0[1] = params->sigma;
  p0[2] = params->dt;
  cudaMemcpy(d_params_bcast, p0, sizeof(p0), cudaMemcpyHostToDevice);

  for (i = 0; i < nint; i++)
    if (output_interval(i, &elapsed) != 0) { rc = 4; goto cleanup; }

  MPI_Reduce(&elapsed, &max_elapsed, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (myrank == 0) {
    unsigned long long total = 0;
    for (i = 0; i < NBINS; i++) total += h_hist[i];
    printf("ensemble: %d ranks x %d streams, %d intervals, %llu samples, sigma %.4f, %.3f s\n", nprocs, NSTREAMS, nint, total,
           params->sigma, max_elapsed);
  }

cleanup:
  free_all();
  ncclCommDestroy(nccl_comm);
done:
  MPI_Finalize();
  return rc;
}
