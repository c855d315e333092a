// A "program" for the snapshot shim's CPU test: allocations through the fake CUDA runtime
// (fake_cudart.cpp), one marked as the converted prelude's own, one symmetric allocation whose
// requested size the prelude announces, a host reduction, frees, a buffer left live at exit and a
// table of device addresses (one into the symmetric allocation, one null), a pitched allocation after
// the prelude's unnumbered pitch probe, and a buffer on a second GPU.
#include <cuda_runtime_api.h>

#include <cstring>

extern "C" int ncclMemAlloc(void** p, size_t n);
extern "C" int ncclAllReduce(const void*, void*, size_t, int, int, void*, cudaStream_t);
extern "C" __attribute__((weak)) void braid_snapshot_next(long long requested_bytes);

int main() {
  const float values[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  float* a = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&a), sizeof(values));  // #0
  cudaMemcpy(a, values, sizeof(values), cudaMemcpyHostToDevice);
  if (braid_snapshot_next) braid_snapshot_next(-1);
  void* internal = nullptr;
  cudaMalloc(&internal, 64);  // the prelude's: no number
  if (braid_snapshot_next) braid_snapshot_next(8);
  char* sym = nullptr;
  ncclMemAlloc(reinterpret_cast<void**>(&sym), 4096);  // #1, 8 bytes asked
  std::memcpy(sym, "symmetri", 8);
  ncclAllReduce(a + 1, a + 1, 2, 7, 0, nullptr, nullptr);  // fp32 sum into #0
  void* scratch = nullptr;
  cudaMallocAsync(&scratch, 12, nullptr);  // #2, zero-filled
  cudaFreeAsync(scratch, nullptr);
  void** table = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&table), 2 * sizeof(void*));  // #3
  void* const entries[2] = {sym + 4, nullptr};
  cudaMemcpy(table, entries, sizeof(entries), cudaMemcpyHostToDevice);
  cudaFree(a);
  cudaFree(internal);
  if (braid_snapshot_next) braid_snapshot_next(-1);
  void* probe = nullptr;
  size_t pitch = 0;
  cudaMallocPitch(&probe, &pitch, 100, 1);  // the prelude's pitch probe: no number
  cudaFree(probe);
  void* grid = nullptr;
  cudaMallocPitch(&grid, &pitch, 100, 3);  // #4, 512 x 3 bytes
  cudaSetDevice(1);
  void* other = nullptr;
  cudaMalloc(&other, 4);  // #5, or with per-device numbering GPU 1's first: #100000
  cudaMemcpy(other, "gpu1", 4, cudaMemcpyHostToDevice);
  return 0;  // #1, #3, #4 and #5 live at exit
}
