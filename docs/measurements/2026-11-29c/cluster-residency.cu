// Probe: resident clusters per shape, and copy bandwidth vs number of SMs used.
#include <cstdio>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
__global__ void dummy(int* p) { extern __shared__ int s[]; if (p) p[0] = s[0]; }
__global__ void copyk(const uint4* __restrict__ a, uint4* __restrict__ b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) b[i] = a[i];
}
int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  printf("SMs %d\n", sms);
  cudaFuncSetAttribute(dummy, cudaFuncAttributeMaxDynamicSharedMemorySize, 200000);
  cudaFuncSetAttribute(dummy, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  int cl[] = {2, 4, 8, 16};
  int th[] = {256, 512, 1024};
  size_t sm[] = {32 * 1024, 64 * 1024, 100 * 1024, 125 * 1024};
  for (int c : cl) for (int t : th) for (size_t s : sm) {
    cudaLaunchConfig_t cfg = {}; cudaLaunchAttribute at[1];
    cfg.gridDim = dim3(c); cfg.blockDim = dim3(t); cfg.dynamicSmemBytes = s;
    at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = c; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
    cfg.attrs = at; cfg.numAttrs = 1;
    int active = 0; cudaError_t e = cudaOccupancyMaxActiveClusters(&active, dummy, &cfg);
    int bps = 0; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, dummy, t, s);
    printf("cluster %2d threads %4d smem %6zu: blocks/SM %d active clusters %3d -> CTAs %4d (%s)\n", c, t, s, bps, active, active * c, e ? cudaGetErrorString(e) : "ok");
  }
  size_t bytes = 512ull << 20, n = bytes / 16;
  uint4 *a, *b; cudaMalloc(&a, bytes); cudaMalloc(&b, bytes); cudaMemset(a, 1, bytes);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int rep = 0; rep < 2; ++rep)
  for (int g : {60, 100, 120, 126, 132, 264, 528}) {
    copyk<<<g, 1024>>>(a, b, n);
    cudaEventRecord(e0);
    for (int k = 0; k < 20; ++k) copyk<<<g, 1024>>>(a, b, n);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1); ms /= 20;
    printf("copy grid %3d x 1024: %.4f ms %.0f GB/s\n", g, ms, 2.0 * bytes / ms / 1e6);
  }
  cudaEventRecord(e0);
  for (int k = 0; k < 20; ++k) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1); cudaEventSynchronize(e1);
  float ms; cudaEventElapsedTime(&ms, e0, e1); ms /= 20;
  printf("cudaMemcpy: %.4f ms %.0f GB/s\n", ms, 2.0 * bytes / ms / 1e6);
}
