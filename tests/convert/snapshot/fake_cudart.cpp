// A fake CUDA runtime (and the few NCCL calls the snapshot shim wraps) over host memory, so the
// shim's bookkeeping is tested on machines without a GPU (tests/convert/diff_gate_test.cpp).
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

extern "C" {
cudaError_t cudaMalloc(void** p, size_t n) {
  return (*p = std::malloc(n ? n : 1)) ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t cudaMallocPitch(void** p, size_t* pitch, size_t width, size_t height) {
  *pitch = (width + 511) / 512 * 512;  // rows padded as a device pads them
  return cudaMalloc(p, *pitch * height);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
thread_local int current_device = 0;
cudaError_t cudaGetDevice(int* d) {
  *d = current_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  current_device = d;
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes*, const void*) { return cudaErrorInvalidValue; }
int ncclMemAlloc(void** p, size_t n) { return cudaMalloc(p, n) == cudaSuccess ? 0 : 1; }
int ncclMemFree(void* p) {
  std::free(p);
  return 0;
}
int ncclAllReduce(const void*, void*, size_t, int, int, void*, cudaStream_t) { return 0; }
}
