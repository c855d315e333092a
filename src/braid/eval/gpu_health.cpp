#include "braid/eval/gpu_health.hpp"

#include <fmt/format.h>

#include "braid/eval/launcher.hpp"
#include "braid/util/fs.hpp"

namespace braid {

const std::string& gpu_probe_source() {
  static const std::string source = R"(// braid GPU health probe: a kernel on this rank's GPU, then an all-reduce over every rank.
#include <cstdio>
#include "braid/runtime.cuh"

__global__ void fill(int* p, int value, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = value + i;
}

int main() {
  using namespace braid::dev;
  RankInfo me;
  try {
    me = bootstrap_rank();
    ncclComm_t comm = init_comm(me);
    const int n = 1 << 20;
    int* buf = nullptr;
    cudaStream_t stream = nullptr;
    BRAID_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    BRAID_CUDA(cudaMalloc(&buf, n * sizeof(int)));
    fill<<<128, 256, 0, stream>>>(buf, me.rank + 1, n);
    BRAID_LAUNCHED();
    BRAID_NCCL(ncclAllReduce(buf, buf, n, ncclInt32, ncclSum, comm, stream));
    BRAID_CUDA(cudaStreamSynchronize(stream));
    int got[2] = {0, 0};
    BRAID_CUDA(cudaMemcpy(&got[0], buf, sizeof(int), cudaMemcpyDeviceToHost));
    BRAID_CUDA(cudaMemcpy(&got[1], buf + n - 1, sizeof(int), cudaMemcpyDeviceToHost));
    const int ranks_sum = me.world * (me.world + 1) / 2;
    const int want[2] = {ranks_sum, ranks_sum + me.world * (n - 1)};
    cudaFree(buf);
    cudaStreamDestroy(stream);
    ncclCommDestroy(comm);
    if (got[0] != want[0] || got[1] != want[1]) {
      std::fprintf(stderr, "probe rank %d: all-reduce gave %d,%d, expected %d,%d\n", me.rank, got[0], got[1], want[0], want[1]);
      return 1;
    }
    std::printf("probe rank %d of %d: ok\n", me.rank, me.world);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe rank %d: %s\n", me.rank, e.what());
    return 1;
  }
}
)";
  return source;
}

GpuHealthProbe::GpuHealthProbe(std::shared_ptr<NvccBuilder> builder, std::filesystem::path work_dir, std::string arch,
                               double timeout_s, double build_timeout_s)
    : builder_(std::move(builder)), work_dir_(std::move(work_dir)), arch_(std::move(arch)), timeout_s_(timeout_s),
      build_timeout_s_(build_timeout_s) {}

BuildResult GpuHealthProbe::build(const JobObserver& jobs) {
  std::lock_guard lock(build_mutex_);
  std::filesystem::create_directories(work_dir_);
  const auto source = work_dir_ / "gpu_probe.cu";
  if (try_read_file(source).value_or("") != gpu_probe_source()) write_file_atomic(source, gpu_probe_source());
  BuildInput input;
  input.source = source;
  input.output = work_dir_ / "gpu_probe.out";
  input.arch = arch_;
  input.flags = {"-O2", "-std=c++20"};
  input.timeout_s = build_timeout_s_;
  input.display_name = "gpu_probe.cu";
  return builder_->build(input, jobs, "gpu health probe build");
}

ProbeOutcome GpuHealthProbe::check(const std::vector<int>& gpus, const JobObserver& jobs) {
  std::lock_guard lock(mutex_);
  ProbeOutcome outcome;
  BuildResult built = build(jobs);
  if (!built.ok) {
    // The probe cannot say the GPUs are well: treat as failed (a toolchain problem shows here).
    outcome.detail = "the health probe did not build: " + built.error;
    return outcome;
  }
  LaunchSpec spec;
  spec.kind = LauncherKind::Local;
  spec.ranks = std::max<int>(1, static_cast<int>(gpus.size()));
  spec.argv = {built.artifact.string()};
  spec.cwd = work_dir_;
  spec.gpus = gpus;
  spec.log_dir = work_dir_ / fmt::format("probe_{}", sequence_++);
  spec.timeout_s = timeout_s_;
  spec.peer_grace_s = 2.0;
  spec.kill_grace_s = 1.0;
  spec.name = "gpu health probe";
  LaunchResult run = launch_ranks(spec, jobs);
  outcome.wall_s = run.wall_s;
  outcome.healthy = run.succeeded();
  outcome.detail = outcome.healthy ? "ok" : run.describe_failure("health probe");
  if (outcome.healthy) std::filesystem::remove_all(spec.log_dir);
  return outcome;
}

}  // namespace braid
