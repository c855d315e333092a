// ring_attention.cuh -- the frozen ring attention workload (context parallelism: a sequence split
// across P ranks, K/V blocks travelling round the ring), shared by seed.cu and gen0.cu.
//
// CONTRACT (shown to the LLM as documentation)
//   Size N encodes the shape: N = C * 10^9 + S * 100 + Hkv (C = 1: causal; S total tokens; Hkv
//   key/value heads; Hq = 32 query heads, head dim 128, batch 1, bf16). 1638408 is S = 16384,
//   Hkv = 8, not causal; 1001638432 is S = 16384, Hkv = 32, causal. S must be a multiple of 256 * P
//   (so a zig-zag half block is whole 128-row tiles); Hkv must divide 32.
//   Placement: rank r holds tokens [r L, (r + 1) L) of Q, K and V (L = S / P), contiguous.
//   Buffers (bf16, all symmetric windows, so a program may read or write a peer's directly):
//     "q"    Input  L x 32 x 128  ([token][head][dim])
//     "k"    Input  L x Hkv x 128
//     "v"    Input  L x Hkv x 128
//     "out"  Output L x 32 x 128: softmax(Q K^T / sqrt(128) [+ causal mask by global position]) V
//            over the WHOLE sequence's keys, for this rank's query tokens.
//   Kernels (attention_block.cuh, frozen, the same for every program): launch_attention_block
//   folds one K/V block into running online-softmax state (fp32 O, m, l) with global query/key
//   positions (Positions: one or two runs of the sequence), so any block order and any query
//   placement (zig-zag included) works; finalize inline (BlockArgs::finalize) or launch_finalize.
//   Reference: ncclAllGather of K and V (in sequence order), then reference_attention_kernel (fp32
//   on CUDA cores) for this rank's rows. Verified with a bf16 tolerance (--rtol 0.02 --atol 0.004).
//   Baseline (host-driven, the all-gather form of context parallelism): ncclAllGather of K and V,
//   then one block-kernel call over all S keys.
//   Compute alone: one block-kernel call over all S keys for the queries a balanced placement gives
//   this rank (the zig-zag halves below: an even share of the causal work; the contiguous share
//   when not causal), no communication. Communication alone: the K/V ring, P - 1 steps of
//   ncclSend to rank r + 1 / ncclRecv from rank r - 1 of one K and one V block each.
//   bound = max(compute alone, communication alone).
//   Zig-zag (balanced causal work) with the contiguous placement: rank r keeps the first half of
//   its queries and swaps the second half with its mirror m = P - 1 - r (the middle rank of an odd
//   P keeps both), so it computes positions [rL, rL + L/2) and [mL + L/2, (m + 1)L) and sends the
//   second half of its output back to the mirror: zigzag_positions(r, P, L).
#pragma once

#include <cuda_bf16.h>

#include <string>
#include <vector>

#include "attention_block.cuh"
#include "braid/harness.cuh"
#include "ring_shape.hpp"

namespace ring_attention {

using braid::dev::BufferSpec;
using braid::dev::Context;
using braid::dev::DeviceError;
using braid::dev::DType;
using braid::dev::Problem;
using braid::dev::Role;

// A shape the workload cannot take is the user's error, named with its size (ring_shape.hpp).
inline Shape shape_of(int64_t size, int world) {
  Shape s;
  const std::string error = parse_shape(size, world, s);
  if (!error.empty()) throw DeviceError(error);
  return s;
}

struct WorkloadState {
  Shape shape;
  braid::dev::Buffer* k_all = nullptr;  // every rank's K, in sequence order (reference, baseline)
  braid::dev::Buffer* v_all = nullptr;
  braid::dev::Buffer* ring = nullptr;   // communication alone: two stages of (K, V)
};

inline WorkloadState& state(Context& c) { return *static_cast<WorkloadState*>(c.workload_state); }
inline const Shape& shape(Context& c) { return state(c).shape; }

// One block-kernel call: queries q (rows at q_pos) against one K/V block (rows at k_pos).
inline BlockArgs block_args(const Shape& s, const bf16* q, const bf16* k, const bf16* v, int kv_len, Positions q_pos, Positions k_pos) {
  BlockArgs a;
  a.q = q, a.k = k, a.v = v;
  a.q_len = s.local(), a.kv_len = kv_len, a.hq = kQueryHeads, a.hkv = s.hkv;
  a.q_pos = q_pos, a.k_pos = k_pos;
  return a;
}

inline braid::dev::Workload make_workload() {
  braid::dev::Workload w;
  w.name = "ring_attention";
  w.buffers = [](const Problem& p) {
    const Shape s = shape_of(p.size, p.world);
    return std::vector<BufferSpec>{{"q", Role::Input, DType::BF16, s.q_elems(), true},
                                   {"k", Role::Input, DType::BF16, s.kv_elems(), true},
                                   {"v", Role::Input, DType::BF16, s.kv_elems(), true},
                                   {"out", Role::Output, DType::BF16, s.q_elems(), true}};
  };
  w.init = [](Context& c) {
    auto* st = new WorkloadState;
    c.workload_state = st;
    st->shape = shape_of(c.problem.size, c.world);
    const Shape& s = st->shape;
    // Windows (collective, the same sizes on every rank): NCCL 2.28 send/recv from a window into
    // a plain cudaMalloc buffer can hang (see kv_transfer's seed). State: overwritten before use.
    st->k_all = &c.alloc_window("workload_k_all", s.kv_elems() * s.world * 2, Role::State, DType::BF16);
    st->v_all = &c.alloc_window("workload_v_all", s.kv_elems() * s.world * 2, Role::State, DType::BF16);
    st->ring = &c.alloc_window("workload_ring", 2 * s.kv_block_bytes(), Role::State, DType::BF16);
  };
  w.finish = [](Context& c) {
    delete static_cast<WorkloadState*>(c.workload_state);
    c.workload_state = nullptr;
  };
  auto gather_kv = [](Context& c, cudaStream_t st) {
    const Shape& s = shape(c);
    BRAID_NCCL(ncclGroupStart());
    BRAID_NCCL(ncclAllGather(c.buffer("k").ptr, state(c).k_all->ptr, s.kv_elems(), ncclBfloat16, c.comm, st));
    BRAID_NCCL(ncclAllGather(c.buffer("v").ptr, state(c).v_all->ptr, s.kv_elems(), ncclBfloat16, c.comm, st));
    BRAID_NCCL(ncclGroupEnd());
  };
  // This rank's queries at q_pos against all S keys, one block-kernel call, into "out".
  auto attend_all = [](Context& c, cudaStream_t st, Positions q_pos) {
    const Shape& s = shape(c);
    BlockArgs a = block_args(s, c.buffer("q").as<bf16>(), state(c).k_all->as<bf16>(), state(c).v_all->as<bf16>(), s.seq, q_pos,
                             contiguous_positions(0, s.seq));
    a.out = c.buffer("out").as<bf16>();
    launch_attention_block(a, s.causal, st);
  };
  w.reference = [gather_kv](Context& c, cudaStream_t st) {
    const Shape& s = shape(c);
    gather_kv(c, st);
    launch_reference(c.buffer("q").as<bf16>(), state(c).k_all->as<bf16>(), state(c).v_all->as<bf16>(), c.buffer("out").as<bf16>(), s.local(),
                     s.seq, kQueryHeads, s.hkv, block_positions(c.rank, s), s.causal, st);
  };
  w.baseline = [gather_kv, attend_all](Context& c, cudaStream_t st) {
    gather_kv(c, st);
    attend_all(c, st, block_positions(c.rank, shape(c)));
  };
  w.compute_alone = [attend_all](Context& c, cudaStream_t st) {
    const Shape& s = shape(c);
    attend_all(c, st, s.causal ? zigzag_positions(c.rank, s) : block_positions(c.rank, s));
  };
  w.comm_alone = [](Context& c, cudaStream_t st) {
    const Shape& s = shape(c);
    const int next = (c.rank + 1) % c.world, prev = (c.rank + c.world - 1) % c.world;
    bf16* ring = state(c).ring->as<bf16>();  // stage i: K at 2i * kv_elems, V right after
    for (int step = 0; step + 1 < c.world; ++step) {
      const bf16* send_k = step == 0 ? c.buffer("k").as<bf16>() : ring + (size_t)((step - 1) % 2) * 2 * s.kv_elems();
      const bf16* send_v = step == 0 ? c.buffer("v").as<bf16>() : send_k + s.kv_elems();
      bf16* recv_k = ring + (size_t)(step % 2) * 2 * s.kv_elems();
      BRAID_NCCL(ncclGroupStart());
      BRAID_NCCL(ncclSend(send_k, s.kv_elems(), ncclBfloat16, next, c.comm, st));
      BRAID_NCCL(ncclSend(send_v, s.kv_elems(), ncclBfloat16, next, c.comm, st));
      BRAID_NCCL(ncclRecv(recv_k, s.kv_elems(), ncclBfloat16, prev, c.comm, st));
      BRAID_NCCL(ncclRecv(recv_k + s.kv_elems(), s.kv_elems(), ncclBfloat16, prev, c.comm, st));
      BRAID_NCCL(ncclGroupEnd());
    }
  };
  w.comm_bytes = [](const Problem& p) {
    const Shape s = shape_of(p.size, p.world);
    return (double)(p.world - 1) * (double)s.kv_block_bytes();
  };
  return w;
}

}  // namespace ring_attention
