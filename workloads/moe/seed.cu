// MoE layer, host-driven (the input of `braid convert` and the plain-buffer baseline), the way an
// all-to-all token dispatcher does it: route; pack the picks by expert (= by destination rank);
// ncclAlltoAll of the per-expert counts; counts to the host; grouped ncclSend/ncclRecv of the
// rows; permute to expert-major; SwiGLU expert GEMMs; permute back; grouped ncclSend/ncclRecv
// back; weighted sum. One stream, cudaMalloc buffers. The workload (buffers, router, reference,
// timing, verification) is moe.cuh + the frozen harness.
#include <cublas_v2.h>

#include "braid/harness.cuh"
#include "moe.cuh"

using namespace braid::dev;
using moe::bf16;

namespace {

struct SeedState {
  int32_t *counts_send = nullptr, *counts_recv = nullptr, *offsets = nullptr, *slot = nullptr, *pinned = nullptr;
  moe::RowMove *moves_dev = nullptr, *moves_host = nullptr;
  bf16 *send = nullptr, *recv = nullptr, *expert_in = nullptr, *h = nullptr, *a = nullptr, *expert_out = nullptr, *ret_send = nullptr,
       *ret_recv = nullptr;
  moe::ExpertGemm gemm;
};

Requirements requirements(const Problem&) { return {}; }

void setup(Context& c) {
  auto* st = new SeedState;
  c.candidate_state = st;
  const moe::Shape s = moe::shape_of(c);
  const size_t R = (size_t)s.max_recv_rows(), Tk = (size_t)s.pairs(), H = (size_t)s.hidden, I = (size_t)s.inter, E = (size_t)s.experts;
  st->counts_send = c.alloc("counts_send", E * 4, Role::Intermediate, DType::I32).as<int32_t>();
  st->counts_recv = c.alloc("counts_recv", E * 4, Role::Receive, DType::I32).as<int32_t>();
  st->offsets = c.alloc("offsets", E * 4, Role::Intermediate, DType::I32).as<int32_t>();
  st->slot = c.alloc("slot", Tk * 4, Role::Intermediate, DType::I32).as<int32_t>();
  st->send = c.alloc("send", Tk * H * 2, Role::Intermediate, DType::BF16).as<bf16>();
  st->recv = c.alloc("recv", R * H * 2, Role::Receive, DType::BF16).as<bf16>();
  st->expert_in = c.alloc("expert_in", R * H * 2, Role::Intermediate, DType::BF16).as<bf16>();
  st->h = c.alloc("h", R * 2 * I * 2, Role::Intermediate, DType::BF16).as<bf16>();
  st->a = c.alloc("a", R * I * 2, Role::Intermediate, DType::BF16).as<bf16>();
  st->expert_out = c.alloc("expert_out", R * H * 2, Role::Intermediate, DType::BF16).as<bf16>();
  st->ret_send = c.alloc("ret_send", R * H * 2, Role::Intermediate, DType::BF16).as<bf16>();
  st->ret_recv = c.alloc("ret_recv", Tk * H * 2, Role::Receive, DType::BF16).as<bf16>();
  BRAID_CUDA(cudaMallocHost(&st->pinned, E * 2 * sizeof(int32_t)));
  BRAID_CUDA(cudaMalloc(&st->moves_dev, (E * (size_t)c.world + 1) * 2 * sizeof(moe::RowMove)));
  BRAID_CUDA(cudaMallocHost(&st->moves_host, (E * (size_t)c.world + 1) * 2 * sizeof(moe::RowMove)));
  st->gemm.create(s.experts_per_rank(), moe::ExpertGemm::Path::Auto);
}

void run(Context& c, cudaStream_t stream) {
  auto* st = static_cast<SeedState*>(c.candidate_state);
  const moe::Shape s = moe::shape_of(c);
  const int El = s.experts_per_rank();
  const int64_t H = s.hidden;
  // Route and plan: counts per global expert, and each pick's slot in the packed send buffer.
  moe::route(c, stream);
  moe::launch_plan(stream, c.buffer("topk_ids").as<int32_t>(), s.pairs(), s.experts, st->counts_send, st->offsets, st->slot);
  BRAID_NCCL(ncclAlltoAll(st->counts_send, st->counts_recv, (size_t)El, ncclInt32, c.comm, stream));
  BRAID_CUDA(cudaMemcpyAsync(st->pinned, st->counts_send, (size_t)s.experts * 4, cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA(cudaMemcpyAsync(st->pinned + s.experts, st->counts_recv, (size_t)s.experts * 4, cudaMemcpyDeviceToHost, stream));
  BRAID_CUDA(cudaStreamSynchronize(stream));
  moe::Counts k;
  k.send.assign(st->pinned, st->pinned + s.experts);
  k.recv.assign(st->pinned + s.experts, st->pinned + 2 * s.experts);
  k.derive(c.world, El);
  moe::launch_pack_rows(stream, c.buffer("x").as<bf16>(), st->slot, s.pairs(), H, st->send);
  // Dispatch.
  BRAID_NCCL(ncclGroupStart());
  for (int p = 0; p < c.world; ++p) {
    if (k.send_rows[p] > 0) BRAID_NCCL(ncclSend(st->send + k.send_off[p] * H, (size_t)(k.send_rows[p] * H), ncclBfloat16, p, c.comm, stream));
    if (k.recv_rows[p] > 0) BRAID_NCCL(ncclRecv(st->recv + k.recv_off[p] * H, (size_t)(k.recv_rows[p] * H), ncclBfloat16, p, c.comm, stream));
  }
  BRAID_NCCL(ncclGroupEnd());
  // Expert compute on expert-major rows.
  std::vector<moe::ExpertBlock> blocks;
  const std::vector<moe::RowMove> moves = k.to_expert_major(c.world, El, &blocks);
  moe::launch_moves(stream, moves, st->moves_host, st->moves_dev, st->recv, st->expert_in, H);
  st->gemm.forward(stream, blocks, st->expert_in, c.buffer("w13").as<bf16>(), c.buffer("w2").as<bf16>(), st->h, st->a, st->expert_out, H,
                   s.inter);
  moe::launch_moves(stream, moe::inverse(moves), st->moves_host + moves.size(), st->moves_dev + moves.size(), st->expert_out, st->ret_send, H);
  // Combine: rows back to their token's rank, then the weighted sum.
  BRAID_NCCL(ncclGroupStart());
  for (int p = 0; p < c.world; ++p) {
    if (k.recv_rows[p] > 0) BRAID_NCCL(ncclSend(st->ret_send + k.recv_off[p] * H, (size_t)(k.recv_rows[p] * H), ncclBfloat16, p, c.comm, stream));
    if (k.send_rows[p] > 0) BRAID_NCCL(ncclRecv(st->ret_recv + k.send_off[p] * H, (size_t)(k.send_rows[p] * H), ncclBfloat16, p, c.comm, stream));
  }
  BRAID_NCCL(ncclGroupEnd());
  moe::launch_combine(stream, st->ret_recv, st->slot, c.buffer("topk_weights").as<float>(), s.tokens, H, c.buffer("y").as<bf16>());
}

void teardown(Context& c) {
  auto* st = static_cast<SeedState*>(c.candidate_state);
  if (st == nullptr) return;
  cudaDeviceSynchronize();
  st->gemm.destroy();
  cudaFreeHost(st->pinned);
  cudaFreeHost(st->moves_host);
  cudaFree(st->moves_dev);
  delete st;
  c.candidate_state = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  return harness_main(argc, argv, moe::make_workload(), Candidate{requirements, setup, run, teardown});
}
