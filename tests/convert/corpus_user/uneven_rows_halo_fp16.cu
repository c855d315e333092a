// A 2-D heat-diffusion solver split by rows over the ranks, written the way a course project or an
// HPC port does it: the interior rows do not divide evenly, so the first ranks take one row fewer
// than the others (each rank's slab, and so its device allocation, has its own size), every step
// swaps the two grids with std::swap and exchanges one halo row with each neighbour (periodic: the
// last rank's bottom neighbour is rank 0) in a group of sends and receives, and every few steps the
// residual is summed over the ranks. fp16 grid, fp32 residual. A single-GPU reference of the same
// solver (with its own locals of the same names) checks the result on rank 0. No MPI: the NCCL id
// travels through a file, rank and world size come from the environment.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define NK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); exit(1); } } while (0)

static int env_or(const char* name, int fallback) {
  const char* v = getenv(name);
  return v ? atoi(v) : fallback;
}

static ncclUniqueId shared_id(int rank) {
  const char* path = getenv("NCCL_ID_FILE") ? getenv("NCCL_ID_FILE") : "/tmp/heat_nccl.id";
  ncclUniqueId id;
  if (rank == 0) {
    NK(ncclGetUniqueId(&id));
    FILE* f = fopen(path, "wb");
    fwrite(&id, sizeof id, 1, f);
    fclose(f);
    return id;
  }
  for (;;) {
    if (FILE* f = fopen(path, "rb")) {
      const size_t n = fread(&id, sizeof id, 1, f);
      fclose(f);
      if (n == 1) return id;
    }
    usleep(20000);
  }
}

// Rows [1, rows] of `a` are this slab's interior; rows 0 and rows + 1 are the halos.
__global__ void step_kernel(const __half* a, __half* a_new, float* residual, int nx, int rows) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y + 1;
  if (x < 1 || x >= nx - 1 || y > rows) return;
  const float c = __half2float(a[y * nx + x]);
  const float v = 0.25f * (__half2float(a[(y - 1) * nx + x]) + __half2float(a[(y + 1) * nx + x]) +
                           __half2float(a[y * nx + x - 1]) + __half2float(a[y * nx + x + 1]));
  a_new[y * nx + x] = __float2half(v);
  if (residual) atomicAdd(residual, (v - c) * (v - c));
}

// Hot left edge, a pattern elsewhere, so every rank's slab differs.
__global__ void init_kernel(__half* a, int nx, int rows, int first_row) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x >= nx || y >= rows + 2) return;
  const int gy = first_row + y - 1;
  a[y * nx + x] = __float2half(x == 0 ? 1.0f : 0.01f * ((gy * 7 + x * 3) % 13));
}

// The same solver on one GPU over the whole grid (rows ny - 2, periodic halos by copies).
static std::vector<float> reference(int nx, int ny, int steps) {
  const int rows = ny - 2;
  const size_t bytes = (size_t)nx * (rows + 2) * sizeof(__half);
  __half *a, *a_new;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&a_new, bytes));
  dim3 block(128), grid((nx + 127) / 128, rows + 2);
  init_kernel<<<grid, block>>>(a, nx, rows, 1);
  init_kernel<<<grid, block>>>(a_new, nx, rows, 1);
  for (int s = 0; s < steps; ++s) {
    CK(cudaMemcpy(a + 0, a + (size_t)rows * nx, nx * sizeof(__half), cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(a + (size_t)(rows + 1) * nx, a + nx, nx * sizeof(__half), cudaMemcpyDeviceToDevice));
    step_kernel<<<dim3(grid.x, rows), block>>>(a, a_new, nullptr, nx, rows);
    std::swap(a, a_new);
  }
  std::vector<__half> h((size_t)nx * (rows + 2));
  CK(cudaMemcpy(h.data(), a, bytes, cudaMemcpyDeviceToHost));
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = __half2float(h[i]);
  CK(cudaFree(a));
  CK(cudaFree(a_new));
  return out;
}

int main(int argc, char** argv) {
  const int rank = env_or("RANK", 0), size = env_or("WORLD_SIZE", 1);
  CK(cudaSetDevice(env_or("LOCAL_RANK", rank)));
  const int nx = argc > 1 ? atoi(argv[1]) : 1024, ny = argc > 2 ? atoi(argv[2]) : 771, steps = 40;

  ncclComm_t comm;
  NK(ncclCommInitRank(&comm, size, shared_id(rank), rank));

  // ny - 2 interior rows: the first `low_ranks` ranks take `low` rows, the rest `low + 1`.
  const int low = (ny - 2) / size, low_ranks = size * (low + 1) - (ny - 2);
  const int rows = rank < low_ranks ? low : low + 1;
  const int first_row = 1 + (rank < low_ranks ? rank * low : low_ranks * low + (rank - low_ranks) * (low + 1));
  const size_t slab = (size_t)nx * (rows + 2);

  __half *a, *a_new;
  float* residual_d;
  CK(cudaMalloc(&a, slab * sizeof(__half)));
  CK(cudaMalloc(&a_new, slab * sizeof(__half)));
  CK(cudaMalloc(&residual_d, sizeof(float)));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  dim3 block(128), grid((nx + 127) / 128, rows + 2);
  init_kernel<<<grid, block, 0, stream>>>(a, nx, rows, first_row);
  init_kernel<<<grid, block, 0, stream>>>(a_new, nx, rows, first_row);

  const int top = rank > 0 ? rank - 1 : size - 1, bottom = (rank + 1) % size;
  float residual = 0.f;
  for (int s = 0; s < steps; ++s) {
    NK(ncclGroupStart());
    NK(ncclRecv(a, nx, ncclHalf, top, comm, stream));
    NK(ncclSend(a + (size_t)rows * nx, nx, ncclHalf, bottom, comm, stream));
    NK(ncclRecv(a + (size_t)(rows + 1) * nx, nx, ncclHalf, bottom, comm, stream));
    NK(ncclSend(a + nx, nx, ncclHalf, top, comm, stream));
    NK(ncclGroupEnd());
    const bool check = s % 10 == 9;
    if (check) CK(cudaMemsetAsync(residual_d, 0, sizeof(float), stream));
    step_kernel<<<dim3(grid.x, rows), block, 0, stream>>>(a, a_new, check ? residual_d : nullptr, nx, rows);
    if (check) {
      NK(ncclAllReduce(residual_d, residual_d, 1, ncclFloat, ncclSum, comm, stream));
      CK(cudaMemcpyAsync(&residual, residual_d, sizeof(float), cudaMemcpyDeviceToHost, stream));
      CK(cudaStreamSynchronize(stream));
      if (rank == 0) printf("step %d residual %.6e\n", s + 1, std::sqrt(residual));
    }
    std::swap(a, a_new);
  }
  CK(cudaStreamSynchronize(stream));

  std::vector<__half> mine(slab);
  CK(cudaMemcpy(mine.data(), a, slab * sizeof(__half), cudaMemcpyDeviceToHost));
  double sum = 0;
  for (int y = 1; y <= rows; ++y)
    for (int x = 0; x < nx; ++x) sum += __half2float(mine[(size_t)y * nx + x]);
  printf("rank %d rows %d..%d checksum %.6f\n", rank, first_row, first_row + rows - 1, sum);
  if (rank == 0) {
    const std::vector<float> ref = reference(nx, ny, steps);
    double worst = 0;
    for (int y = 1; y <= rows; ++y)
      for (int x = 0; x < nx; ++x)
        worst = std::max(worst, (double)std::fabs(ref[(size_t)(first_row + y - 1) * nx + x] - __half2float(mine[(size_t)y * nx + x])));
    printf("rank 0 worst difference from the single-GPU solver %.3e\n", worst);
  }

  CK(cudaFree(residual_d));
  CK(cudaFree(a_new));
  CK(cudaFree(a));
  CK(cudaStreamDestroy(stream));
  NK(ncclCommDestroy(comm));
  return 0;
}
