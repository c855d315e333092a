// serving_kernels.cuh -- frozen parts shared by the single-GPU serving-kernel workloads
// (add_rmsnorm, silu_mul, rope, softmax): how a --size names a shape, the copy-rate bound, and the
// assembly of a braid::dev::Workload from one op's buffers, reference and seed kernel.
//
// CONTRACT (shown to the LLM as documentation)
//   --size = rows * 1000000 + width: 16384008192 is 16384 rows (tokens) of width 8192,
//   1128256 is one row of 128256. width is a positive multiple of 8 (< 1000000), so every row of
//   bf16 starts 16-byte aligned and splits into whole 8-element (16-byte) vectors.
//   Phases timed in the same run, interleaved iteration by iteration:
//     candidate      the program's run()
//     baseline       the seed: a plain, correct kernel of the op (the op's header); score =
//                    geometric mean over sizes of seed time / candidate time
//     compute alone  the bound: one cudaMemcpyAsync device-to-device of (read + write) / 2 bytes,
//                    i.e. the same DRAM traffic as the op's compulsory reads and writes;
//                    ratio_to_bound = candidate / copy (1.0 = the op runs at the copy rate)
//   candidate_GBps in the metrics is (bytes read + bytes written) / candidate time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "braid/harness.cuh"

namespace serving {

using braid::dev::BufferSpec;
using braid::dev::Context;
using braid::dev::DeviceError;
using braid::dev::DType;
using braid::dev::Problem;
using braid::dev::Role;
using braid::dev::StreamFn;

constexpr int64_t kWidthScale = 1000000;

struct Shape {
  int64_t rows = 0;
  int64_t width = 0;
};

// The shape a --size names; a size that names none is the user's error, said in one line.
inline Shape shape_of(int64_t size) {
  const Shape s{size / kWidthScale, size % kWidthScale};
  if (s.rows < 1 || s.width < 8 || s.width % 8 != 0)
    throw DeviceError("--size " + std::to_string(size) +
                      " is not rows * 1000000 + width with rows >= 1 and width a positive multiple of 8 (16384008192 = 16384 rows of 8192)");
  return s;
}
inline Shape shape_of(const Problem& p) { return shape_of(p.size); }

inline const __nv_bfloat16* in_bf16(Context& c, const char* name) { return c.buffer(name).as<const __nv_bfloat16>(); }
inline __nv_bfloat16* out_bf16(Context& c, const char* name) { return c.buffer(name).as<__nv_bfloat16>(); }

// One op: its buffers, its compulsory DRAM traffic, a reference computed in fp32 (or wider) by a
// route other than any candidate's, and the seed kernel (the baseline).
struct OpSpec {
  std::string name;
  std::function<std::vector<BufferSpec>(const Shape&)> buffers;
  std::function<double(const Shape&)> read_bytes, write_bytes;
  std::function<void(Context&)> init;    // optional: fills State buffers (tables)
  StreamFn reference;
  StreamFn seed;
};

inline size_t bound_copy_bytes(const OpSpec& op, const Shape& s) {
  const double half = 0.5 * (op.read_bytes(s) + op.write_bytes(s));
  return ((size_t)half + 15) / 16 * 16;
}

inline braid::dev::Workload make_workload(const OpSpec& op) {
  braid::dev::Workload w;
  w.name = op.name;
  w.buffers = [op](const Problem& p) {
    const Shape s = shape_of(p);
    std::vector<BufferSpec> b = op.buffers(s);
    // The copy's source is an Input like the op's own (reloaded before every iteration, so it is
    // in the same cache state); its destination is poisoned like the op's outputs.
    const size_t n = bound_copy_bytes(op, s);
    b.push_back({"bound_copy_src", Role::Input, DType::U8, n, false});
    b.push_back({"bound_copy_dst", Role::Intermediate, DType::U8, n, false});
    return b;
  };
  if (op.init) w.init = op.init;
  w.reference = op.reference;
  w.baseline = op.seed;
  w.compute_alone = [op](Context& c, cudaStream_t stream) {
    const size_t n = bound_copy_bytes(op, shape_of(c.problem));
    BRAID_CUDA(cudaMemcpyAsync(c.buffer("bound_copy_dst").ptr, c.buffer("bound_copy_src").ptr, n, cudaMemcpyDeviceToDevice, stream));
  };
  // No communication on one GPU: the phase is left out (bound = the copy).
  w.comm_bytes = [op](const Problem& p) {
    const Shape s = shape_of(p);
    return op.read_bytes(s) + op.write_bytes(s);
  };
  return w;
}

// Grid for a grid-stride loop over n items, capped (the loop covers the rest).
inline unsigned grid_for(int64_t n, int threads, int64_t cap = 65535) {
  int64_t g = (n + threads - 1) / threads;
  if (g < 1) g = 1;
  return (unsigned)(g < cap ? g : cap);
}

}  // namespace serving
