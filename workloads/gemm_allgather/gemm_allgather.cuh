// gemm_allgather.cuh -- the frozen GEMM + AllGather workload (tensor-parallel layer with a
// sequence-parallel input), shared by seed.cu and gen0.cu.
//
// CONTRACT (shown to the LLM as documentation)
//   Shape M x N x K (gemm_shape.hpp): --size S is square (M = N = K = S), --size
//   M * 10^10 + N * 10^5 + K any shape; P ranks with M % P == 0, N and K multiples of 8 (else the
//   size fails with one line naming it). shape(c) gives the Shape of a Context.
//   Buffers (row-major, bf16):
//     "a"  Input  Ms x K  (Ms = M / P): this rank's rows of A, rows [rank*Ms, (rank+1)*Ms).
//          A symmetric NCCL window: peers may read it (ncclGetLsaPointer / host_lsa_pointers).
//     "w"  Input  N x K: this rank's weight shard B_r stored transposed (nn.Linear layout), so
//          C_r = A_full * B_r = A_full * w^T.
//     "c"  Output M x N: C_r, fp32 accumulation, bf16 out. Verified on every rank after every
//          run() call, against the reference on that call's (fresh) inputs.
//   GEMM of `rows` rows of A (any pointer, ld = K) into C rows (ld = N):
//     gemm_rows(handle, a_rows, rows, w, c_rows, K, N)  -> cublasGemmEx TN, CUBLAS_COMPUTE_32F.
//   Reference: host ncclAllGather + cuBLAS with fp32 output, rounded to bf16 by a separate kernel;
//   the harness runs it after each call (untimed; about one baseline iteration).
//   Baseline (host-driven, the strong one): ncclAllGather between symmetric windows, then one
//   cublasGemmEx on one stream. Compute alone: the full GEMM. Communication alone: that
//   ncclAllGather. bound = max(compute alone, communication alone).
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <string>
#include <vector>

#include "braid/harness.cuh"
#include "gemm_shape.hpp"

namespace gemm_allgather {

using braid::dev::BufferSpec;
using braid::dev::Context;
using braid::dev::DeviceError;
using braid::dev::DType;
using braid::dev::Problem;
using braid::dev::Role;

inline void check_cublas(cublasStatus_t st, const char* what, const char* file, int line) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(braid::dev::format_location(file, line) + ": " + what + ": " + cublasGetStatusString(st));
}
#define GAG_CUBLAS(call) ::gemm_allgather::check_cublas((call), #call, __FILE__, __LINE__)

// The problem's shape; a size the workload cannot take is the user's error (one line).
inline Shape shape_of(const Problem& p) {
  Shape s;
  const std::string error = parse_shape(p.size, p.world, s);
  if (!error.empty()) throw DeviceError(error);
  return s;
}
inline Shape shape(const Context& c) { return shape_of(c.problem); }

// C[rows x N] = A[rows x K] * W^T (W is N x K), all row-major. cuBLAS is column-major, so it
// computes C^T (N x rows, ld N) = op_T(W seen as K x N, ld K) * (A^T seen as K x rows, ld K).
inline void gemm_rows(cublasHandle_t h, const __nv_bfloat16* a_rows, int64_t rows, const __nv_bfloat16* w, __nv_bfloat16* c_rows,
                      int64_t K, int64_t N) {
  if (rows <= 0) return;
  const float one = 1.0f, zero = 0.0f;
  GAG_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)rows, (int)K, &one, w, CUDA_R_16BF, (int)K, a_rows, CUDA_R_16BF,
                          (int)K, &zero, c_rows, CUDA_R_16BF, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <int kUnused = 0>
__global__ void round_to_bf16_kernel(const float* in, __nv_bfloat16* out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}

struct WorkloadState {
  cublasHandle_t handle = nullptr;
};

inline WorkloadState& state(Context& c) { return *static_cast<WorkloadState*>(c.workload_state); }

inline braid::dev::Workload make_workload() {
  braid::dev::Workload w;
  w.name = "gemm_allgather";
  w.buffers = [](const Problem& p) {
    const Shape s = shape_of(p);
    return std::vector<BufferSpec>{{"a", Role::Input, DType::BF16, s.a_elems(), true},
                                   {"w", Role::Input, DType::BF16, s.w_elems(), false},
                                   {"c", Role::Output, DType::BF16, s.c_elems(), false}};
  };
  w.init = [](Context& c) {
    const Shape s = shape(c);
    // State role: fully overwritten before every use, so poisoning them would only cost time.
    c.alloc_window("workload_gathered", s.gathered_elems() * 2, Role::State, DType::BF16);
    c.alloc("workload_reference_f32", s.c_elems() * 4, Role::State, DType::F32);
    auto* st = new WorkloadState;
    c.workload_state = st;
    GAG_CUBLAS(cublasCreate(&st->handle));
  };
  w.finish = [](Context& c) {
    auto* st = static_cast<WorkloadState*>(c.workload_state);
    if (st == nullptr) return;
    cublasDestroy(st->handle);
    delete st;
    c.workload_state = nullptr;
  };
  auto gather = [](Context& c, cudaStream_t s) {
    const braid::dev::Buffer& a = c.buffer("a");
    BRAID_NCCL(ncclAllGather(a.ptr, c.buffer("workload_gathered").ptr, a.count, ncclBfloat16, c.comm, s));
  };
  auto compute = [](Context& c, cudaStream_t s) {
    const Shape sh = shape(c);
    GAG_CUBLAS(cublasSetStream(state(c).handle, s));
    gemm_rows(state(c).handle, c.buffer("workload_gathered").as<__nv_bfloat16>(), sh.m, c.buffer("w").as<__nv_bfloat16>(),
              c.buffer("c").as<__nv_bfloat16>(), sh.k, sh.n);
  };
  w.reference = [gather](Context& c, cudaStream_t s) {
    gather(c, s);
    const Shape sh = shape(c);
    const int M = (int)sh.m, N = (int)sh.n, K = (int)sh.k;
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t h = state(c).handle;
    GAG_CUBLAS(cublasSetStream(h, s));
    float* ref = c.buffer("workload_reference_f32").as<float>();
    GAG_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, c.buffer("w").ptr, CUDA_R_16BF, K, c.buffer("workload_gathered").ptr,
                            CUDA_R_16BF, K, &zero, ref, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    round_to_bf16_kernel<><<<1024, 256, 0, s>>>(ref, c.buffer("c").as<__nv_bfloat16>(), sh.c_elems());
    BRAID_LAUNCHED();
  };
  w.baseline = [gather, compute](Context& c, cudaStream_t s) {
    gather(c, s);
    compute(c, s);
  };
  w.compute_alone = compute;
  w.comm_alone = gather;
  w.comm_bytes = [](const Problem& p) {
    const Shape s = shape_of(p);
    return (double)(p.world - 1) * (double)s.a_elems() * 2.0;
  };
  return w;
}

}  // namespace gemm_allgather
