// KV-cache transfer, host-driven (the input of `braid convert` and the plain-buffer program): on
// one stream the prefill rank projects every layer's K and V, then each layer's K and V go to the
// decode rank with ncclSend/ncclRecv (one group per layer) into a staging buffer, and the
// decode rank re-lays the whole cache out into its pages. What a serving engine does without
// co-design. The workload (buffers, reference, the window baseline, timing, verification) is
// kv_transfer.cuh + the frozen harness.
#include <cublas_v2.h>

#include "braid/harness.cuh"
#include "kv_transfer.cuh"

using namespace braid::dev;

namespace {

Requirements requirements(const Problem&) { return {}; }

void setup(Context& c) {
  // A window like the prefill rank's "kv" it receives from: with NCCL 2.28.9 an ncclSend from a
  // registered window into an unregistered (cudaMalloc) receive buffer never completes (seen on
  // 2 x H200; NCCL_LOCAL_REGISTER=0 or registering both ends avoids it). Same size on every rank.
  c.alloc_window("staging", kv_transfer::shape(c).cache_bytes(), Role::Receive, DType::BF16);
}

void run(Context& c, cudaStream_t s) {
  const kv_transfer::Shape& shape = kv_transfer::shape(c);
  const kv_transfer::Pair& pair = kv_transfer::pair(c);
  const Buffer& kv = c.buffer("kv");
  const Buffer& staging = c.buffer("staging");
  const size_t plane = shape.plane_elems();
  if (pair.prefill)
    for (int64_t l = 0; l < shape.layers; ++l) kv_transfer::project_layer(c, l, s);
  for (int64_t l = 0; l < shape.layers; ++l) {
    const size_t k_off = kv_transfer::contiguous_offset(shape, l, 0, 0), v_off = kv_transfer::contiguous_offset(shape, l, 1, 0);
    BRAID_NCCL(ncclGroupStart());
    if (pair.prefill) {
      BRAID_NCCL(ncclSend(kv.as<__nv_bfloat16>() + k_off, plane, ncclBfloat16, pair.peer, c.comm, s));
      BRAID_NCCL(ncclSend(kv.as<__nv_bfloat16>() + v_off, plane, ncclBfloat16, pair.peer, c.comm, s));
    }
    if (pair.decode) {
      BRAID_NCCL(ncclRecv(staging.as<__nv_bfloat16>() + k_off, plane, ncclBfloat16, pair.peer, c.comm, s));
      BRAID_NCCL(ncclRecv(staging.as<__nv_bfloat16>() + v_off, plane, ncclBfloat16, pair.peer, c.comm, s));
    }
    BRAID_NCCL(ncclGroupEnd());
  }
  if (pair.decode)
    kv_transfer::launch_relayout_to_pages(staging.as<__nv_bfloat16>(), c.buffer("paged").as<__nv_bfloat16>(), shape, 0, shape.layers,
                                          c.sm_count * 4, s);
}

void teardown(Context&) {}

}  // namespace

int main(int argc, char** argv) {
  return harness_main(argc, argv, kv_transfer::make_workload(), Candidate{requirements, setup, run, teardown});
}
