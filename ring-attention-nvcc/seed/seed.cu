// Ring attention, host-driven (the input of `braid convert` and the plain-buffer program): P steps
// on one stream; at each step the host posts ncclSend of the K/V block this rank holds to rank
// r + 1 and ncclRecv of the next one from rank r - 1 (one group), then launches the block kernel
// on the block it holds, folding it into the running softmax state; the last step finalizes into
// "out". Transfer and compute never overlap: what a framework does without co-design. The workload
// (buffers, reference, the all-gather baseline, timing, verification) is ring_attention.cuh + the
// frozen harness.
#include "braid/harness.cuh"
#include "ring_attention.cuh"

using namespace braid::dev;
using ring_attention::bf16;

namespace {

Requirements requirements(const Problem&) { return {}; }

void setup(Context& c) {
  const ring_attention::Shape& s = ring_attention::shape(c);
  // Two stages of (K, V): the block being computed on and the one arriving. Windows like "k" and
  // "v" they receive from (NCCL 2.28 window -> cudaMalloc receives can hang).
  c.alloc_window("kv_stage", 2 * s.kv_block_bytes(), Role::Intermediate, DType::BF16);
  c.alloc("o_acc", s.q_elems() * 4, Role::Intermediate, DType::F32);
  c.alloc("row_max", (size_t)s.local() * ring_attention::kQueryHeads * 4, Role::Intermediate, DType::F32);
  c.alloc("row_sum", (size_t)s.local() * ring_attention::kQueryHeads * 4, Role::Intermediate, DType::F32);
}

void run(Context& c, cudaStream_t s) {
  const ring_attention::Shape& shape = ring_attention::shape(c);
  const size_t n = shape.kv_elems();
  const Buffer& k = c.buffer("k");
  const Buffer& v = c.buffer("v");
  const Buffer& stage = c.buffer("kv_stage");  // stage i: K at 2i * n, V at (2i + 1) * n
  const int next = (c.rank + 1) % c.world, prev = (c.rank + c.world - 1) % c.world;
  for (int step = 0; step < c.world; ++step) {
    // The block held at this step: the rank's own K/V at step 0, then stage (step - 1) % 2.
    const size_t held = (size_t)((step + 1) % 2) * 2 * n, into = (size_t)(step % 2) * 2 * n;
    // The group is opened on every step (empty on the last) so that every rank reaches it alike.
    BRAID_NCCL(ncclGroupStart());
    if (step + 1 < c.world) {
      if (step == 0) {
        BRAID_NCCL(ncclSend(k.as<bf16>(), n, ncclBfloat16, next, c.comm, s));
        BRAID_NCCL(ncclSend(v.as<bf16>(), n, ncclBfloat16, next, c.comm, s));
      } else {
        BRAID_NCCL(ncclSend(stage.as<bf16>() + held, n, ncclBfloat16, next, c.comm, s));
        BRAID_NCCL(ncclSend(stage.as<bf16>() + held + n, n, ncclBfloat16, next, c.comm, s));
      }
      BRAID_NCCL(ncclRecv(stage.as<bf16>() + into, n, ncclBfloat16, prev, c.comm, s));
      BRAID_NCCL(ncclRecv(stage.as<bf16>() + into + n, n, ncclBfloat16, prev, c.comm, s));
    }
    BRAID_NCCL(ncclGroupEnd());
    const bf16* cur_k = step == 0 ? k.as<bf16>() : stage.as<bf16>() + held;
    const bf16* cur_v = step == 0 ? v.as<bf16>() : stage.as<bf16>() + held + n;
    // The block held at this step came from rank r - step.
    const int owner = (c.rank - step + c.world) % c.world;
    ring_attention::BlockArgs a =
        ring_attention::block_args(shape, c.buffer("q").as<bf16>(), cur_k, cur_v, shape.local(), ring_attention::block_positions(c.rank, shape),
                                   ring_attention::block_positions(owner, shape));
    a.o_acc = c.buffer("o_acc").as<float>();
    a.m = c.buffer("row_max").as<float>();
    a.l = c.buffer("row_sum").as<float>();
    a.out = c.buffer("out").as<bf16>();
    a.first = step == 0;
    a.finalize = step == c.world - 1;
    ring_attention::launch_attention_block(a, shape.causal, s);
  }
}

void teardown(Context&) {}

}  // namespace

int main(int argc, char** argv) {
  return harness_main(argc, argv, ring_attention::make_workload(), Candidate{requirements, setup, run, teardown});
}
