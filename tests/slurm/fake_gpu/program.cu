// A stand-in for a GPU workload's harness in the slurm tests: built by nvcc like any `kind: gpu`
// program, but host code only, so its ranks run on the test cluster's CPUs. It keeps the
// harness's contract: `--mode verify|bench --seed S --results_dir D`, ranks from Slurm's
// environment (SLURM_PROCID, SLURM_NTASKS), rank 0 writes correct.json (and metrics.json in
// bench mode), a rank that fails prints "harness: ..." on stderr. <workload>/crash_rank1 makes
// rank 1 die of SIGSEGV, to see srun's report of it judged like a local launch's.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

// EVOLVE-BLOCK-START knobs
constexpr int kTile = 16;  // braid:knob 8|16|32|64
constexpr int kUnroll = 1;  // braid:knob 1|2|4
// EVOLVE-BLOCK-END

static int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

int main(int argc, char** argv) {
  std::string mode, results;
  int expected_ranks = 0;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--mode")) mode = argv[i + 1];
    if (!std::strcmp(argv[i], "--results_dir")) results = argv[i + 1];
    if (!std::strcmp(argv[i], "--ranks")) expected_ranks = std::atoi(argv[i + 1]);
  }
  const int rank = env_int("SLURM_PROCID", -1), world = env_int("SLURM_NTASKS", -1);
  std::printf("rank %d of %d, mode %s, local rank %d\n", rank, world, mode.c_str(), env_int("SLURM_LOCALID", -1));
  std::fflush(stdout);
  if (rank < 0 || world != expected_ranks) {
    std::fprintf(stderr, "harness: rank %d of %d from Slurm's environment, expected %d ranks\n", rank, world, expected_ranks);
    return 1;
  }
  const char* workload = std::getenv("BRAID_WORKLOAD_DIR");
  if (rank == 1 && workload && access((std::string(workload) + "/crash_rank1").c_str(), F_OK) == 0) std::raise(SIGSEGV);
  if (rank != 0) return 0;
  FILE* f = std::fopen((results + "/correct.json").c_str(), "w");
  if (!f) return 2;
  std::fprintf(f, "{\"correct\": true}\n");
  std::fclose(f);
  if (mode == "bench") {
    f = std::fopen((results + "/metrics.json").c_str(), "w");
    if (!f) return 2;
    std::fprintf(f, "{\"combined_score\": %g, \"public\": {\"tile\": %d, \"ranks\": %d}}\n", 1.0 + kTile / 64.0 + kUnroll / 8.0,
                 kTile, world);
    std::fclose(f);
  }
  return 0;
}
