// One GPU: the ring attention workload's block kernel (attention_block.cuh).
//   block_bench verify            the block kernel against the fp32 reference at small shapes:
//                                 whole sequence in one call, and split the way the ring splits it
//                                 (P ranks, contiguous or zig-zag, K/V blocks visited in ring order,
//                                 state carried between calls, finalize inline or separate), causal
//                                 and not, Hkv 8 and 32. Prints one line per case; exit 1 on a miss.
//   block_bench bench [--seqs 8192,16384] [--hkv 8,32] [--causal 0,1] [--iters 10] [--warmup 3]
//                                 the kernel over the whole sequence in one call (first + finalize),
//                                 CUDA events per call, median. Prints
//                                 "kernel S Hkv causal median_ms TFLOP/s" per shape ("kernel_rt2"
//                                 when built with -DRING_ATTENTION_ROW_TILES=2).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "attention_block.cuh"

using namespace ring_attention;

namespace {

constexpr int kHq = 32;

struct DeviceBuf {
  void* p = nullptr;
  explicit DeviceBuf(size_t bytes) { BRAID_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~DeviceBuf() { cudaFree(p); }
  template <typename T> T* as() const { return static_cast<T*>(p); }
};

void fill(bf16* p, size_t n, uint64_t seed) {
  braid::dev::fill_random_kernel<><<<1024, 256>>>(p, n, (int)braid::dev::DType::BF16, seed);
  BRAID_LAUNCHED();
}

std::vector<float> to_host(const bf16* p, size_t n) {
  std::vector<bf16> h(n);
  BRAID_CUDA(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

// The runs of rank r's block (P ranks over S tokens): contiguous, or zig-zag (chunks r and 2P-1-r).
Positions positions_of(int r, int P, int S, bool zigzag) {
  if (!zigzag) return contiguous_positions(r * (S / P), S / P);
  const int chunk = S / (2 * P);
  return {chunk, r * chunk, (2 * P - 1 - r) * chunk};
}

// Copies the rows of `pos` (len rows of `width` elements) between the whole-sequence tensor and a
// rank's block, either way.
void gather_rows(bf16* block, const bf16* whole, const Positions& pos, int len, size_t width) {
  const int len0 = std::min(pos.len0, len);
  BRAID_CUDA(cudaMemcpy(block, whole + (size_t)pos.start0 * width, (size_t)len0 * width * 2, cudaMemcpyDeviceToDevice));
  if (len > len0)
    BRAID_CUDA(cudaMemcpy(block + (size_t)len0 * width, whole + (size_t)pos.start1 * width, (size_t)(len - len0) * width * 2,
                          cudaMemcpyDeviceToDevice));
}
void scatter_rows(bf16* whole, const bf16* block, const Positions& pos, int len, size_t width) {
  const int len0 = std::min(pos.len0, len);
  BRAID_CUDA(cudaMemcpy(whole + (size_t)pos.start0 * width, block, (size_t)len0 * width * 2, cudaMemcpyDeviceToDevice));
  if (len > len0)
    BRAID_CUDA(cudaMemcpy(whole + (size_t)pos.start1 * width, block + (size_t)len0 * width, (size_t)(len - len0) * width * 2,
                          cudaMemcpyDeviceToDevice));
}

struct Case {
  int S, hkv;
  bool causal;
  int P;            // 1: the whole sequence in one call
  bool zigzag;
  bool inline_finalize;
};

// Runs the case the ring's way on one GPU and compares with the reference. Tolerance: the
// workload's (bf16 output); also the relative L2 error, which catches a systematic slip the
// elementwise bound would let through.
bool run_case(const Case& c) {
  const int S = c.S, L = S / c.P;
  const size_t qw = (size_t)kHq * kHeadDim, kw = (size_t)c.hkv * kHeadDim;
  DeviceBuf q((size_t)S * qw * 2), k((size_t)S * kw * 2), v((size_t)S * kw * 2), ref((size_t)S * qw * 2), out((size_t)S * qw * 2);
  fill(q.as<bf16>(), (size_t)S * qw, 11 + S);
  fill(k.as<bf16>(), (size_t)S * kw, 12 + S);
  fill(v.as<bf16>(), (size_t)S * kw, 13 + S);
  launch_reference(q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), ref.as<bf16>(), S, S, kHq, c.hkv, contiguous_positions(0, S), c.causal, nullptr);
  BRAID_CUDA(cudaMemset(out.p, 0xFF, (size_t)S * qw * 2));

  DeviceBuf ql((size_t)L * qw * 2), kl((size_t)L * kw * 2), vl((size_t)L * kw * 2), ol((size_t)L * qw * 2);
  DeviceBuf oacc((size_t)L * qw * 4), m((size_t)kHq * L * 4), l((size_t)kHq * L * 4);
  for (int r = 0; r < c.P; ++r) {
    const Positions qp = positions_of(r, c.P, S, c.zigzag);
    gather_rows(ql.as<bf16>(), q.as<bf16>(), qp, L, qw);
    BRAID_CUDA(cudaMemset(ol.p, 0xFF, (size_t)L * qw * 2));
    BRAID_CUDA(cudaMemset(oacc.p, 0xFF, (size_t)L * qw * 4));  // NaN: a read before the first write shows
    for (int step = 0; step < c.P; ++step) {
      const int owner = (r - step + c.P) % c.P;  // ring order: own block first, then the left neighbour's
      const Positions kp = positions_of(owner, c.P, S, c.zigzag);
      gather_rows(kl.as<bf16>(), k.as<bf16>(), kp, L, kw);
      gather_rows(vl.as<bf16>(), v.as<bf16>(), kp, L, kw);
      BlockArgs a;
      a.q = ql.as<bf16>(), a.k = kl.as<bf16>(), a.v = vl.as<bf16>();
      a.o_acc = oacc.as<float>(), a.m = m.as<float>(), a.l = l.as<float>(), a.out = ol.as<bf16>();
      a.q_len = L, a.kv_len = L, a.hq = kHq, a.hkv = c.hkv, a.q_pos = qp, a.k_pos = kp;
      a.first = step == 0;
      a.finalize = c.inline_finalize && step == c.P - 1;
      launch_attention_block(a, c.causal, nullptr);
    }
    if (!c.inline_finalize) launch_finalize(oacc.as<float>(), l.as<float>(), ol.as<bf16>(), L, kHq, 264, nullptr);
    scatter_rows(out.as<bf16>(), ol.as<bf16>(), qp, L, qw);
  }
  BRAID_CUDA(cudaDeviceSynchronize());

  const std::vector<float> got = to_host(out.as<bf16>(), (size_t)S * qw), exp = to_host(ref.as<bf16>(), (size_t)S * qw);
  const double rtol = 2e-2, atol = 4e-3;
  size_t bad = 0, first_bad = 0;
  double err2 = 0, ref2 = 0, max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs((double)got[i] - exp[i]);
    if (!(d <= atol + rtol * std::fabs(exp[i]))) {
      if (bad++ == 0) first_bad = i;
    }
    if (std::isfinite(d)) max_err = std::max(max_err, d);
    err2 += std::isfinite(d) ? d * d : 1e30;
    ref2 += (double)exp[i] * exp[i];
  }
  const double rel_l2 = std::sqrt(err2 / std::max(ref2, 1e-30));
  const bool ok = bad == 0 && rel_l2 < 1e-2;
  std::printf("%s S=%d Hkv=%d causal=%d P=%d %s finalize=%s: max_abs_err %.3g rel_l2 %.3g bad %zu", ok ? "PASS" : "FAIL", S, c.hkv, (int)c.causal,
              c.P, c.zigzag ? "zigzag" : "contiguous", c.inline_finalize ? "inline" : "kernel", max_err, rel_l2, bad);
  if (bad) std::printf(" (first at %zu: expected %.6g got %.6g)", first_bad, exp[first_bad], got[first_bad]);
  std::printf("\n");
  return ok;
}

int verify() {
  std::vector<Case> cases;
  for (int hkv : {8, 32})
    for (bool causal : {false, true}) {
      cases.push_back({256, hkv, causal, 1, false, true});
      cases.push_back({1024, hkv, causal, 1, false, true});
      cases.push_back({1024, hkv, causal, 4, false, false});
      cases.push_back({1024, hkv, causal, 2, true, true});
      cases.push_back({1024, hkv, causal, 4, true, false});
    }
  int failed = 0;
  for (const Case& c : cases) failed += run_case(c) ? 0 : 1;
  std::printf("%s: %zu cases, %d failed (block kernel with %d row tile(s) per warp, %d-key tiles)\n", failed ? "FAIL" : "PASS", cases.size(),
              failed, kRowTiles, kBlockN);
  return failed ? 1 : 0;
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

int bench(int argc, char** argv) {
  std::vector<int> seqs = {8192, 16384, 32768, 65536}, hkvs = {8, 32}, causals = {0, 1};
  int iters = 10, warmup = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string f = argv[i], x = argv[i + 1];
    if (f == "--seqs") seqs = int_list(x);
    else if (f == "--hkv") hkvs = int_list(x);
    else if (f == "--causal") causals = int_list(x);
    else if (f == "--iters") iters = std::atoi(x.c_str());
    else if (f == "--warmup") warmup = std::atoi(x.c_str());
    else {
      std::fprintf(stderr, "block_bench bench: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (iters < 1) {
    std::fprintf(stderr, "block_bench bench: --iters must be at least 1\n");
    return 2;
  }
  cudaEvent_t e0, e1;
  BRAID_CUDA(cudaEventCreate(&e0));
  BRAID_CUDA(cudaEventCreate(&e1));
  for (int S : seqs)
    for (int hkv : hkvs) {
      const size_t qn = (size_t)S * kHq * kHeadDim, kn = (size_t)S * hkv * kHeadDim;
      DeviceBuf q(qn * 2), k(kn * 2), v(kn * 2), out(qn * 2);
      fill(q.as<bf16>(), qn, 1), fill(k.as<bf16>(), kn, 2), fill(v.as<bf16>(), kn, 3);
      for (int causal : causals) {
        BlockArgs a;
        a.q = q.as<bf16>(), a.k = k.as<bf16>(), a.v = v.as<bf16>(), a.out = out.as<bf16>();
        a.q_len = S, a.kv_len = S, a.hq = kHq, a.hkv = hkv;
        a.q_pos = a.k_pos = contiguous_positions(0, S);
        std::vector<float> ms;
        for (int it = 0; it < warmup + iters; ++it) {
          BRAID_CUDA(cudaEventRecord(e0));
          launch_attention_block(a, causal != 0, nullptr);
          BRAID_CUDA(cudaEventRecord(e1));
          BRAID_CUDA(cudaEventSynchronize(e1));
          float t = 0;
          BRAID_CUDA(cudaEventElapsedTime(&t, e0, e1));
          if (it >= warmup) ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        std::printf("%s %d %d %d %.4f %.1f\n", kRowTiles == 1 ? "kernel" : "kernel_rt2", S, hkv, causal, med,
                    attention_flops(S, kHq, causal != 0) / (med * 1e-3) / 1e12);
        std::fflush(stdout);
      }
    }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "verify") return verify();
    if (mode == "bench") return bench(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "block_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: block_bench verify | bench [--seqs a,b] [--hkv a,b] [--causal 0,1] [--iters N] [--warmup N]\n");
  return 2;
}
