// Probe 2: which data path reaches cudaMemcpy's rate (262 MB): LDG/STG hints and unroll, and TMA loads + STG stores.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
template <int U, int LH, int SH>  // hints: 0 none, 1 cs
__global__ void ldst(const uint4* __restrict__ a, uint4* __restrict__ b, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride * U) {
    uint4 r[U];
#pragma unroll
    for (int u = 0; u < U; ++u) if (i + u * stride < n) r[u] = LH ? __ldcs(a + i + u * stride) : a[i + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) if (i + u * stride < n) { if (SH) __stcs(b + i + u * stride, r[u]); else b[i + u * stride] = r[u]; }
  }
}
// Contiguous per-CTA blocks (like a row slice) instead of grid-stride.
template <int U, int SH>
__global__ void blocked(const uint4* __restrict__ a, uint4* __restrict__ b, size_t n, int per_block) {
  for (size_t base = (size_t)blockIdx.x * per_block; base < n; base += (size_t)gridDim.x * per_block) {
    for (int j = threadIdx.x; j < per_block; j += blockDim.x * U) {
      uint4 r[U];
#pragma unroll
      for (int u = 0; u < U; ++u) if (j + u * blockDim.x < per_block) r[u] = __ldcs(a + base + j + u * blockDim.x);
#pragma unroll
      for (int u = 0; u < U; ++u) if (j + u * blockDim.x < per_block) { if (SH) __stcs(b + base + j + u * blockDim.x, r[u]); else b[base + j + u * blockDim.x] = r[u]; }
    }
  }
}
__device__ __forceinline__ uint32_t sa(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
// TMA load of a slice into smem (one stage), threads copy smem -> STG, then refill: softmax's staged path.
template <int SH>
__global__ void tma_stg(const uint4* __restrict__ a, uint4* __restrict__ b, size_t n, int slice) {
  extern __shared__ __align__(128) uint4 st[];
  __shared__ uint64_t full;
  const size_t nslices = n / slice;
  if (threadIdx.x == 0) { asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(sa(&full))); asm volatile("fence.proxy.async.shared::cta;"); }
  __syncthreads();
  auto issue = [&](size_t c) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(&full)), "r"(slice * 16) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(st)), "l"(a + c * slice), "r"(slice * 16), "r"(sa(&full)) : "memory");
  };
  if (threadIdx.x == 0 && blockIdx.x < nslices) issue(blockIdx.x);
  int k = 0;
  for (size_t c = blockIdx.x; c < nslices; c += gridDim.x, ++k) {
    asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra W; }" ::"r"(sa(&full)), "r"(k & 1) : "memory");
    uint4 r[4]; int cnt = 0;
    for (int j = threadIdx.x; j < slice && cnt < 4; j += blockDim.x) r[cnt++] = st[j];
    __syncthreads();
    if (threadIdx.x == 0 && c + gridDim.x < nslices) issue(c + gridDim.x);
    cnt = 0;
    for (int j = threadIdx.x; j < slice && cnt < 4; j += blockDim.x, ++cnt) { if (SH) __stcs(b + c * slice + j, r[cnt]); else b[c * slice + j] = r[cnt]; }
  }
}
int main() {
  const size_t bytes = 1024ull * 128256 * 2, n = bytes / 16;
  uint4 *a, *b; cudaMalloc(&a, bytes); cudaMalloc(&b, bytes); cudaMemset(a, 1, bytes);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  float base = 0;
  auto time = [&](const char* name, auto f) {
    f(); cudaDeviceSynchronize();
    float best = 1e9;
    for (int r = 0; r < 5; ++r) {
      cudaEventRecord(e0); for (int k = 0; k < 20; ++k) f(); cudaEventRecord(e1); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1); ms /= 20; if (ms < best) best = ms;
    }
    if (!base) base = best;
    cudaError_t e = cudaGetLastError();
    printf("%-36s %.4f ms  %.0f GB/s  %.3f of memcpy %s\n", name, best, 2.0 * bytes / best / 1e6, base / best, e ? cudaGetErrorString(e) : "");
  };
  time("cudaMemcpy", [&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); });
  char nm[80];
  for (int g : {132, 264}) for (int t : {512, 1024}) {
    snprintf(nm, 80, "u4 none/none %dx%d", g, t); time(nm, [&] { ldst<4, 0, 0><<<g, t>>>(a, b, n); });
    snprintf(nm, 80, "u4 cs/none %dx%d", g, t); time(nm, [&] { ldst<4, 1, 0><<<g, t>>>(a, b, n); });
    snprintf(nm, 80, "u4 none/cs %dx%d", g, t); time(nm, [&] { ldst<4, 0, 1><<<g, t>>>(a, b, n); });
    snprintf(nm, 80, "u4 cs/cs %dx%d", g, t); time(nm, [&] { ldst<4, 1, 1><<<g, t>>>(a, b, n); });
    snprintf(nm, 80, "u8 cs/cs %dx%d", g, t); time(nm, [&] { ldst<8, 1, 1><<<g, t>>>(a, b, n); });
  }
  const int slice = 2004;  // 16032 bf16: a row's eighth
  for (int g : {120, 132, 240, 264}) {
    snprintf(nm, 80, "blocked u4 cs/none %d x 512", g); time(nm, [&] { blocked<4, 0><<<g, 512>>>(a, b, n, slice); });
    snprintf(nm, 80, "blocked u4 cs/cs %d x 512", g); time(nm, [&] { blocked<4, 1><<<g, 512>>>(a, b, n, slice); });
    cudaFuncSetAttribute(tma_stg<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, slice * 16);
    cudaFuncSetAttribute(tma_stg<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, slice * 16);
    snprintf(nm, 80, "tma+stg %d x 512", g); time(nm, [&] { tma_stg<0><<<g, 512, slice * 16>>>(a, b, n, slice); });
    snprintf(nm, 80, "tma+stg.cs %d x 512", g); time(nm, [&] { tma_stg<1><<<g, 512, slice * 16>>>(a, b, n, slice); });
  }
  cudaMemset(b, 0, bytes); tma_stg<0><<<264, 512, slice * 16>>>(a, b, n, slice);
  static char h[1 << 20]; cudaMemcpy(h, (char*)b + bytes - sizeof h, sizeof h, cudaMemcpyDeviceToHost);
  size_t bad = 0; for (size_t i = 0; i < sizeof h; ++i) bad += h[i] != 1; printf("tma_stg tail check: %zu bad bytes\n", bad);
}
