#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#include <nccl.h>
int main() {
  ncclComm_t comm; int dev = 0;
  ncclCommInitAll(&comm, 1, &dev);
  cudaStream_t s; cudaStreamCreate(&s);
  const size_t sizes[] = {1048579, 1048576, 1027, 1025, 4099, 50257, 262147};
  const ncclRedOp_t ops[] = {ncclSum, ncclAvg};
  for (size_t n : sizes) for (int o = 0; o < 2; ++o) for (int off = 0; off < 2; ++off) {
    float *a, *b; cudaMalloc(&a, (n + 8) * 4); cudaMalloc(&b, (n + 8) * 4);
    std::vector<float> h(n + 8); for (size_t i = 0; i < n + 8; ++i) h[i] = 1.0f + (float)(i % 17);
    cudaMemcpy(a, h.data(), (n + 8) * 4, cudaMemcpyHostToDevice);
    cudaMemset(b, 0xff, (n + 8) * 4);
    ncclReduceScatter(a + off * 3, b + off * 3, n, ncclFloat, ops[o], comm, s);
    ncclAllGather(a + off * 3, b + off * 3 + 0, 0, ncclFloat, comm, s);
    cudaStreamSynchronize(s);
    std::vector<float> r(n + 8); cudaMemcpy(r.data(), b, (n + 8) * 4, cudaMemcpyDeviceToHost);
    size_t bad = 0, first = (size_t)-1;
    for (size_t i = 0; i < n; ++i) if (r[i + off * 3] != h[i + off * 3]) { ++bad; if (first == (size_t)-1) first = i; }
    printf("n=%zu op=%s off=%d: %zu wrong, first %zd\n", n, o ? "avg" : "sum", off * 3, bad, (ssize_t)first);
    cudaFree(a); cudaFree(b);
  }
  int v; ncclGetVersion(&v); printf("nccl %d\n", v);
  return 0;
}
