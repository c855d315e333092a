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
//   block_bench steps [--seqs 8192,16384] [--hkv 8,32] [--causal 0,1] [--ranks 2,4] [--iters 10]
//                     [--warmup 3]
//                                 the bound's "compute alone" (one call over all S keys for rank r's
//                                 queries, zig-zag when causal) against the same work as a ring
//                                 program does it (P calls over S/P-key blocks in ring order, the
//                                 state carried), and against that with the fully masked steps
//                                 skipped (gen0's kSkipMasked); outputs compared first. Also the
//                                 zig-zag swap's bytes, and a device-to-device copy of them (a proxy
//                                 on one GPU for the NVLink transfer). One "steps" line per rank,
//                                 one "steps_makespan" line (the slowest rank) per shape and P.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
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
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
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
    BRAID_CUDA(cudaMemcpy(block + (size_t)len0 * width, whole + (size_t)pos.start1 * width,
                          (size_t)(len - len0) * width * 2, cudaMemcpyDeviceToDevice));
}
void scatter_rows(bf16* whole, const bf16* block, const Positions& pos, int len, size_t width) {
  const int len0 = std::min(pos.len0, len);
  BRAID_CUDA(cudaMemcpy(whole + (size_t)pos.start0 * width, block, (size_t)len0 * width * 2, cudaMemcpyDeviceToDevice));
  if (len > len0)
    BRAID_CUDA(cudaMemcpy(whole + (size_t)pos.start1 * width, block + (size_t)len0 * width,
                          (size_t)(len - len0) * width * 2, cudaMemcpyDeviceToDevice));
}

struct Case {
  int S, hkv;
  bool causal;
  int P;  // 1: the whole sequence in one call
  bool zigzag;
  bool inline_finalize;
};

// Runs the case the ring's way on one GPU and compares with the reference. Tolerance: the
// workload's (bf16 output); also the relative L2 error, which catches a systematic slip the
// elementwise bound would let through.
bool run_case(const Case& c) {
  const int S = c.S, L = S / c.P;
  const size_t qw = (size_t)kHq * kHeadDim, kw = (size_t)c.hkv * kHeadDim;
  DeviceBuf q((size_t)S * qw * 2), k((size_t)S * kw * 2), v((size_t)S * kw * 2), ref((size_t)S * qw * 2),
      out((size_t)S * qw * 2);
  fill(q.as<bf16>(), (size_t)S * qw, 11 + S);
  fill(k.as<bf16>(), (size_t)S * kw, 12 + S);
  fill(v.as<bf16>(), (size_t)S * kw, 13 + S);
  launch_reference(q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), ref.as<bf16>(), S, S, kHq, c.hkv,
                   contiguous_positions(0, S), c.causal, nullptr);
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
  std::printf("%s S=%d Hkv=%d causal=%d P=%d %s finalize=%s: max_abs_err %.3g rel_l2 %.3g bad %zu",
              ok ? "PASS" : "FAIL", S, c.hkv, (int)c.causal, c.P, c.zigzag ? "zigzag" : "contiguous",
              c.inline_finalize ? "inline" : "kernel", max_err, rel_l2, bad);
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
  std::printf("%s: %zu cases, %d failed (block kernel with %d row tile(s) per warp, %d-key tiles)\n",
              failed ? "FAIL" : "PASS", cases.size(), failed, kRowTiles, kBlockN);
  return failed ? 1 : 0;
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

// The flags of `bench` and `steps` (--ranks: steps only). false: a bad flag, said on stderr.
struct Flags {
  std::vector<int> seqs, hkvs = {8, 32}, causals = {0, 1}, ranks = {2, 4};
  int iters = 10, warmup = 3;
};
bool parse_flags(int argc, char** argv, const char* mode, Flags& f) {
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], x = argv[i + 1];
    if (flag == "--seqs") f.seqs = int_list(x);
    else if (flag == "--hkv") f.hkvs = int_list(x);
    else if (flag == "--causal") f.causals = int_list(x);
    else if (flag == "--ranks" && std::string(mode) == "steps") f.ranks = int_list(x);
    else if (flag == "--iters") f.iters = std::atoi(x.c_str());
    else if (flag == "--warmup") f.warmup = std::atoi(x.c_str());
    else {
      std::fprintf(stderr, "block_bench %s: unknown flag %s\n", mode, flag.c_str());
      return false;
    }
  }
  if (f.iters < 1) std::fprintf(stderr, "block_bench %s: --iters must be at least 1\n", mode);
  return f.iters >= 1;
}

int bench(int argc, char** argv) {
  Flags flags;
  flags.seqs = {8192, 16384, 32768, 65536};
  if (!parse_flags(argc, argv, "bench", flags)) return 2;
  const std::vector<int>&seqs = flags.seqs, &hkvs = flags.hkvs, &causals = flags.causals;
  const int iters = flags.iters, warmup = flags.warmup;
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

// Median of `iters` timed runs of `work` (after `warmup`), CUDA events on the default stream.
double median_ms(const std::function<void()>& work, int warmup, int iters) {
  cudaEvent_t e0, e1;
  BRAID_CUDA(cudaEventCreate(&e0));
  BRAID_CUDA(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int it = 0; it < warmup + iters; ++it) {
    BRAID_CUDA(cudaEventRecord(e0));
    work();
    BRAID_CUDA(cudaEventRecord(e1));
    BRAID_CUDA(cudaEventSynchronize(e1));
    float t = 0;
    BRAID_CUDA(cudaEventElapsedTime(&t, e0, e1));
    if (it >= warmup) ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Rank r's queries the way the workload places them (zig-zag when causal, as the bound does),
// against all S keys in one call and against the P ring blocks one call each.
struct StepsCase {
  Shape sh;
  int r = 0;
};
struct StepsTimes {
  double one_call = 0, per_step = 0, per_step_skip = 0, swap_copy = 0;
  int steps_run = 0, steps_skipped = 0;
  size_t swap_bytes = 0;
  bool same_output = false;
};

StepsTimes time_steps(const StepsCase& c, const DeviceBuf& q, const DeviceBuf& k, const DeviceBuf& v, int warmup,
                      int iters) {
  const Shape& sh = c.sh;
  const int S = sh.seq, L = sh.local(), P = sh.world;
  const size_t qw = (size_t)kHq * kHeadDim, kw = (size_t)sh.hkv * kHeadDim;
  const Positions qp = sh.causal ? zigzag_positions(c.r, sh) : block_positions(c.r, sh);
  DeviceBuf ql((size_t)L * qw * 2), out_one((size_t)L * qw * 2), out_steps((size_t)L * qw * 2);
  DeviceBuf oacc((size_t)L * qw * 4), m((size_t)kHq * L * 4), l((size_t)kHq * L * 4);
  gather_rows(ql.as<bf16>(), q.as<bf16>(), qp, L, qw);

  auto one_call = [&] {
    BlockArgs a;
    a.q = ql.as<bf16>(), a.k = k.as<bf16>(), a.v = v.as<bf16>(), a.out = out_one.as<bf16>();
    a.q_len = L, a.kv_len = S, a.hq = kHq, a.hkv = sh.hkv, a.q_pos = qp, a.k_pos = contiguous_positions(0, S);
    launch_attention_block(a, sh.causal, nullptr);
  };
  // The ring's steps: own block first, then the left neighbour's; a step every query is masked from
  // (its first key after the rank's last query) is left out when `skip`.
  const int q_last = std::max(qp.global(L - 1), qp.global(qp.len0 - 1));
  auto owners = [&](bool skip) {
    std::vector<int> o;
    for (int step = 0; step < P; ++step) {
      const int owner = (c.r - step + P) % P;
      if (!(skip && sh.causal && owner * L > q_last)) o.push_back(owner);
    }
    return o;
  };
  auto ring_steps = [&](bool skip) {
    const std::vector<int> run = owners(skip);
    for (size_t i = 0; i < run.size(); ++i) {
      BlockArgs a;
      a.q = ql.as<bf16>(), a.k = k.as<bf16>() + (size_t)run[i] * L * kw, a.v = v.as<bf16>() + (size_t)run[i] * L * kw;
      a.o_acc = oacc.as<float>(), a.m = m.as<float>(), a.l = l.as<float>(), a.out = out_steps.as<bf16>();
      a.q_len = L, a.kv_len = L, a.hq = kHq, a.hkv = sh.hkv, a.q_pos = qp, a.k_pos = block_positions(run[i], sh);
      a.first = i == 0;
      a.finalize = i + 1 == run.size();
      launch_attention_block(a, sh.causal, nullptr);
    }
  };

  StepsTimes t;
  t.steps_run = (int)owners(true).size();
  t.steps_skipped = P - t.steps_run;
  // Equal work first: every step and the masked steps skipped both give the one call's output
  // within the workload's tolerance (bf16 out), so the times below compare the same work.
  BRAID_CUDA(cudaMemset(out_one.p, 0xFF, (size_t)L * qw * 2));
  one_call();
  BRAID_CUDA(cudaDeviceSynchronize());
  const std::vector<float> want = to_host(out_one.as<bf16>(), (size_t)L * qw);
  auto matches = [&](bool skip) {
    BRAID_CUDA(cudaMemset(out_steps.p, 0xFF, (size_t)L * qw * 2));
    ring_steps(skip);
    BRAID_CUDA(cudaDeviceSynchronize());
    const std::vector<float> got = to_host(out_steps.as<bf16>(), (size_t)L * qw);
    for (size_t i = 0; i < want.size(); ++i)
      if (!(std::fabs((double)want[i] - got[i]) <= 4e-3 + 2e-2 * std::fabs((double)want[i]))) return false;
    return true;
  };
  t.same_output = matches(false) && matches(true);

  t.one_call = median_ms(one_call, warmup, iters);
  t.per_step = median_ms([&] { ring_steps(false); }, warmup, iters);
  t.per_step_skip = median_ms([&] { ring_steps(true); }, warmup, iters);
  // The zig-zag swap: the second half of the queries to the mirror and its output back (none for a
  // rank that is its own mirror).
  if (sh.causal && mirror_of(c.r, P) != c.r) {
    t.swap_bytes = 2 * ((size_t)L / 2) * qw * 2;
    DeviceBuf src(t.swap_bytes), dst(t.swap_bytes);
    t.swap_copy =
        median_ms([&] { BRAID_CUDA(cudaMemcpyAsync(dst.p, src.p, t.swap_bytes, cudaMemcpyDeviceToDevice, nullptr)); },
                  warmup, iters);
  }
  return t;
}

int steps(int argc, char** argv) {
  Flags flags;
  flags.seqs = {8192, 16384};
  if (!parse_flags(argc, argv, "steps", flags)) return 2;
  const std::vector<int>&seqs = flags.seqs, &hkvs = flags.hkvs, &causals = flags.causals, &ranks = flags.ranks;
  const int iters = flags.iters, warmup = flags.warmup;
  std::printf(
      "# steps S Hkv causal P rank one_call_ms per_step_ms per_step_skip_ms per_step/one steps_run swap_bytes "
      "swap_copy_ms "
      "(swap_copy: a device-to-device copy on one GPU, a proxy for the NVLink transfer)\n");
  int mismatches = 0;
  for (int S : seqs)
    for (int hkv : hkvs) {
      const size_t qn = (size_t)S * kHq * kHeadDim, kn = (size_t)S * hkv * kHeadDim;
      DeviceBuf q(qn * 2), k(kn * 2), v(kn * 2);
      fill(q.as<bf16>(), qn, 1), fill(k.as<bf16>(), kn, 2), fill(v.as<bf16>(), kn, 3);
      for (int causal : causals)
        for (int P : ranks) {
          if (P < 1 || S % (256 * P) != 0) continue;
          Shape sh;
          sh.seq = S, sh.hkv = hkv, sh.world = P, sh.causal = causal != 0;
          StepsTimes worst;
          for (int r = 0; r < P; ++r) {
            const StepsTimes t = time_steps(StepsCase{sh, r}, q, k, v, warmup, iters);
            if (!t.same_output) ++mismatches;
            std::printf("steps %d %d %d %d %d %.4f %.4f %.4f %.3f %d %zu %.4f%s\n", S, hkv, causal, P, r, t.one_call,
                        t.per_step, t.per_step_skip, t.per_step / t.one_call, t.steps_run, t.swap_bytes, t.swap_copy,
                        t.same_output ? "" : " OUTPUTS DIFFER");
            std::fflush(stdout);
            worst.one_call = std::max(worst.one_call, t.one_call);
            worst.per_step = std::max(worst.per_step, t.per_step);
            worst.per_step_skip = std::max(worst.per_step_skip, t.per_step_skip);
            worst.swap_copy = std::max(worst.swap_copy, t.swap_copy);
          }
          std::printf("steps_makespan %d %d %d %d %.4f %.4f %.4f %.3f %.3f %.4f\n", S, hkv, causal, P, worst.one_call,
                      worst.per_step, worst.per_step_skip, worst.per_step / worst.one_call,
                      worst.per_step_skip / worst.one_call, worst.swap_copy);
          std::fflush(stdout);
        }
    }
  if (mismatches) std::printf("FAIL: %d rank(s) where the per-step output differs from the one call's\n", mismatches);
  return mismatches ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "verify") return verify();
    if (mode == "bench") return bench(argc, argv);
    if (mode == "steps") return steps(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "block_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: block_bench verify | bench [--seqs a,b] [--hkv a,b] [--causal 0,1] [--iters N] [--warmup N]\n"
               "       | steps [--seqs a,b] [--hkv a,b] [--causal 0,1] [--ranks 2,4] [--iters N] [--warmup N]\n");
  return 2;
}
