// GEMM + AllGather, host-driven (the input of `braid convert` and the plain-buffer baseline):
// on one stream, ncclAllGather gathers A's row shards into a cudaMalloc buffer, then one
// cublasGemmEx computes C_r = A_full * B_r. The workload (buffers, reference, the symmetric-window
// baseline, timing, verification) is gemm_allgather.cuh + the frozen harness.
#include <cublas_v2.h>

#include "braid/harness.cuh"
#include "gemm_allgather.cuh"

using namespace braid::dev;

namespace {

struct SeedState {
  cublasHandle_t handle = nullptr;
};

Requirements requirements(const Problem&) { return {}; }

void setup(Context& c) {
  c.alloc("gathered", gemm_allgather::shape(c).gathered_elems() * 2, Role::Receive, DType::BF16);
  auto* st = new SeedState;
  c.candidate_state = st;
  GAG_CUBLAS(cublasCreate(&st->handle));
}

void run(Context& c, cudaStream_t s) {
  auto* st = static_cast<SeedState*>(c.candidate_state);
  const Buffer& a = c.buffer("a");
  const Buffer& gathered = c.buffer("gathered");
  BRAID_NCCL(ncclAllGather(a.ptr, gathered.ptr, a.count, ncclBfloat16, c.comm, s));
  GAG_CUBLAS(cublasSetStream(st->handle, s));
  const gemm_allgather::Shape sh = gemm_allgather::shape(c);
  gemm_allgather::gemm_rows(st->handle, gathered.as<__nv_bfloat16>(), sh.m, c.buffer("w").as<__nv_bfloat16>(), c.buffer("c").as<__nv_bfloat16>(), sh.k,
                            sh.n);
}

void teardown(Context& c) {
  auto* st = static_cast<SeedState*>(c.candidate_state);
  cublasDestroy(st->handle);
  delete st;
  c.candidate_state = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  return harness_main(argc, argv, gemm_allgather::make_workload(), Candidate{requirements, setup, run, teardown});
}
