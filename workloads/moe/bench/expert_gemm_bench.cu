// One GPU: the workload's expert compute (moe::ExpertGemm, grouped and per-block cuBLAS) against
// plain cuBLAS doing the same FLOPs as two dense GEMMs over one weight (the rate cuBLAS reaches
// when nothing is grouped). Usage: expert_gemm_bench [experts] [rows_per_expert ...]
// Prints one line per rows-per-expert value: ms and TFLOP/s of each path.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "moe.cuh"

using moe::bf16;

namespace {

template <typename F>
double time_ms(F&& f, int iters) {
  cudaEvent_t a, b;
  BRAID_CUDA(cudaEventCreate(&a));
  BRAID_CUDA(cudaEventCreate(&b));
  f();  // warm-up (cuBLAS heuristics, lazy loading)
  BRAID_CUDA(cudaDeviceSynchronize());
  BRAID_CUDA(cudaEventRecord(a));
  for (int i = 0; i < iters; ++i) f();
  BRAID_CUDA(cudaEventRecord(b));
  BRAID_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  BRAID_CUDA(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iters;
}

bf16* random_bf16(size_t n, uint64_t seed) {
  bf16* p = nullptr;
  BRAID_CUDA(cudaMalloc(&p, n * 2));
  braid::dev::fill_random_kernel<><<<1024, 256>>>(p, n, (int)braid::dev::DType::BF16, seed);
  BRAID_LAUNCHED();
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const int experts = argc > 1 ? std::atoi(argv[1]) : 128;
  std::vector<int64_t> rows_list;
  for (int i = 2; i < argc; ++i) rows_list.push_back(std::atoll(argv[i]));
  if (rows_list.empty()) rows_list = {8, 64, 256, 512};
  const int64_t H = moe::kHidden, I = moe::kInter;
  int64_t max_rows = 0;
  for (int64_t r : rows_list) max_rows = std::max(max_rows, r * experts);
  try {
    bf16* w13 = random_bf16((size_t)experts * 2 * I * H, 1);
    bf16* w2 = random_bf16((size_t)experts * H * I, 2);
    bf16* in = random_bf16((size_t)max_rows * H, 3);
    bf16 *h = nullptr, *a = nullptr, *out = nullptr;
    BRAID_CUDA(cudaMalloc(&h, (size_t)max_rows * 2 * I * 2));
    BRAID_CUDA(cudaMalloc(&a, (size_t)max_rows * I * 2));
    BRAID_CUDA(cudaMalloc(&out, (size_t)max_rows * H * 2));
    cudaStream_t s = nullptr;
    BRAID_CUDA(cudaStreamCreate(&s));
    moe::ExpertGemm grouped, per_block;
    grouped.create(experts, moe::ExpertGemm::Path::Grouped);
    per_block.create(experts, moe::ExpertGemm::Path::PerBlock);
    std::printf("experts %d, H %lld, I %lld; grouped path: %s\n", experts, (long long)H, (long long)I,
                grouped.path() == moe::ExpertGemm::Path::Grouped ? "cublasGemmGroupedBatchedEx" : "unavailable (per block)");
    std::printf("rows/expert | grouped ms TFLOP/s | per-block ms TFLOP/s | dense cuBLAS ms TFLOP/s | grouped / dense\n");
    for (int64_t rows : rows_list) {
      std::vector<moe::ExpertBlock> blocks;
      for (int e = 0; e < experts; ++e) blocks.push_back(moe::ExpertBlock{e, e * rows, rows});
      const int64_t total = rows * experts;
      const double flop = 2.0 * (double)total * (double)H * (double)(3 * I);
      const double tg = time_ms([&] { grouped.forward(s, blocks, in, w13, w2, h, a, out, H, I); }, 10);
      const double tp = time_ms([&] { per_block.forward(s, blocks, in, w13, w2, h, a, out, H, I); }, 10);
      // Dense: the same rows through one expert's weights: two cublasGemmEx and the same SwiGLU.
      std::vector<moe::ExpertBlock> one{moe::ExpertBlock{0, 0, total}};
      const double td = time_ms([&] { per_block.forward(s, one, in, w13, w2, h, a, out, H, I); }, 10);
      std::printf("%lld | %.3f %.0f | %.3f %.0f | %.3f %.0f | %.2f\n", (long long)rows, tg, flop / tg / 1e9, tp, flop / tp / 1e9, td,
                  flop / td / 1e9, td / tg);
    }
    grouped.destroy();
    per_block.destroy();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "expert_gemm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
