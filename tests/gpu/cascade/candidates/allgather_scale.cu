// GPU cascade test candidate: all-gather of a float shard, then out = 2 * gathered + 1, through the
// frozen harness (braid/harness.cuh). kBehavior selects a deliberate failure:
//   0 correct, 1 deadlock (rank 0 waits on a signal rank 1 never sends), 2 illegal address on
//   rank 1, 3 NaN result, 4 wrong result on rank 1 (only its own part computed).
#include "braid/harness.cuh"

using namespace braid::dev;

constexpr int kBehavior = 0;

__global__ void scale_kernel(const float* gathered, float* out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = 2.0f * gathered[i] + 1.0f;
}
__global__ void wait_for_signal(volatile int* flag) {
  while (*flag == 0) {
  }
}
__global__ void poke(float* p) { *p = 1.0f; }
__global__ void nan_kernel(float* out) { out[threadIdx.x] = __int_as_float(0x7fc00000); }

void scale(const float* gathered, float* out, size_t n, cudaStream_t s) {
  scale_kernel<<<264, 512, 0, s>>>(gathered, out, n);
  BRAID_LAUNCHED();
}

Workload make_workload() {
  Workload w;
  w.name = "allgather_scale";
  w.buffers = [](const Problem& p) {
    const size_t n = (size_t)p.size;
    return std::vector<BufferSpec>{{"in", Role::Input, DType::F32, n, false}, {"out", Role::Output, DType::F32, n * (size_t)p.world, false}};
  };
  w.init = [](Context& c) { c.alloc("workload_gathered", c.buffer("out").bytes, Role::Intermediate, DType::F32); };
  auto gather = [](Context& c, cudaStream_t s) {
    BRAID_NCCL(ncclAllGather(c.buffer("in").ptr, c.buffer("workload_gathered").ptr, c.buffer("in").count, ncclFloat, c.comm, s));
  };
  auto compute = [](Context& c, cudaStream_t s) {
    scale(c.buffer("workload_gathered").as<float>(), c.buffer("out").as<float>(), c.buffer("out").count, s);
  };
  w.reference = [=](Context& c, cudaStream_t s) { gather(c, s); compute(c, s); };
  w.baseline = w.reference;
  w.compute_alone = compute;
  w.comm_alone = gather;
  w.comm_bytes = [](const Problem& p) { return (double)(p.world - 1) * (double)p.size * 4.0; };
  return w;
}

Candidate make_candidate() {
  Candidate c;
  c.requirements = [](const Problem&) {
    Requirements r;
    r.lsa_barriers = 1;
    return r;
  };
  c.setup = [](Context& ctx) {
    ctx.alloc("recv", ctx.buffer("out").bytes, Role::Receive, DType::F32);
    ctx.alloc("flag", sizeof(int), Role::State, DType::I32);
  };
  c.run = [](Context& ctx, cudaStream_t s) {
    const Buffer& in = ctx.buffer("in");
    float* recv = ctx.buffer("recv").as<float>();
    float* out = ctx.buffer("out").as<float>();
    const size_t n = ctx.buffer("out").count;
    if (kBehavior == 1 && ctx.rank == 0) {
      wait_for_signal<<<1, 1, 0, s>>>(ctx.buffer("flag").as<int>());
      BRAID_LAUNCHED();
    }
    BRAID_NCCL(ncclAllGather(in.ptr, recv, in.count, ncclFloat, ctx.comm, s));
    if (kBehavior == 4 && ctx.rank == 1) {
      scale(in.as<float>(), out + (size_t)ctx.rank * in.count, in.count, s);
      return;
    }
    scale(recv, out, n, s);
    if (kBehavior == 2 && ctx.rank == 1) {
      poke<<<1, 1, 0, s>>>(reinterpret_cast<float*>(0x10));
      BRAID_LAUNCHED();
    }
    if (kBehavior == 3) {
      nan_kernel<<<1, 32, 0, s>>>(out);
      BRAID_LAUNCHED();
    }
  };
  return c;
}

int main(int argc, char** argv) { return harness_main(argc, argv, make_workload(), make_candidate()); }
