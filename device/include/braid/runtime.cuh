// braid/runtime.cuh -- rank bootstrap, error checks and the local rank launcher.
//
// CONTRACT (shown to the LLM as documentation)
//   * One process per rank. `bootstrap_rank()` reads, in this order: BRAID_RANK/BRAID_WORLD_SIZE/
//     BRAID_LOCAL_RANK (braid's local launcher), OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK (mpirun),
//     SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (srun). No variable set means a single rank.
//   * `init_comm(rank)` selects GPU local_rank % device_count, sets NCCL_NVLS_ENABLE=0 (NVLink
//     multicast stays off) and CUDA_MODULE_LOADING=EAGER (no lazy-load stalls between concurrent
//     kernels), and exchanges the ncclUniqueId through a file in BRAID_EVAL_DIR
//     (default: the working directory): rank 0 writes it atomically (rename), the others poll.
//   * BRAID_CUDA / BRAID_NCCL check a call and throw `DeviceError` with file:line and the
//     library's message. Frozen harness code turns that into a failed verification record.
//   * `spawn_local_ranks(n, body)` forks n children (before any CUDA call in the parent), sets
//     the BRAID_* variables in each and returns how many failed; tests and benchmarks use it.
//   * `gpu_count_or_skip()` returns the number of GPUs, or exits with code 77 after printing
//     "SKIPPED: no GPU" (CTest SKIP_RETURN_CODE 77).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace braid::dev {

// An error that ends the current operation on this rank (CUDA/NCCL failure, bad setup).
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline std::string format_location(const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return std::string(base ? base + 1 : file) + ":" + std::to_string(line);
}

inline void check_cuda(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess)
    throw DeviceError(format_location(file, line) + ": " + what + ": " + cudaGetErrorString(err));
}

inline void check_nccl(ncclResult_t res, const char* what, const char* file, int line) {
  if (res != ncclSuccess && res != ncclInProgress)
    throw DeviceError(format_location(file, line) + ": " + what + ": " + ncclGetErrorString(res));
}

#define BRAID_CUDA(call) ::braid::dev::check_cuda((call), #call, __FILE__, __LINE__)
#define BRAID_NCCL(call) ::braid::dev::check_nccl((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch errors (bad configuration) surface here.
#define BRAID_LAUNCHED() ::braid::dev::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

struct RankInfo {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  std::string launcher = "single";  // braid | mpirun | srun | single
};

inline bool env_int(const char* name, int& out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0') throw DeviceError(std::string("environment ") + name + "='" + v + "' is not an integer");
  out = static_cast<int>(x);
  return true;
}

inline RankInfo bootstrap_rank() {
  RankInfo info;
  struct Source { const char* rank; const char* size; const char* local; const char* name; };
  const Source sources[] = {
      {"BRAID_RANK", "BRAID_WORLD_SIZE", "BRAID_LOCAL_RANK", "braid"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "srun"},
  };
  for (const Source& s : sources) {
    if (!env_int(s.rank, info.rank)) continue;
    if (!env_int(s.size, info.world)) throw DeviceError(std::string(s.rank) + " is set but " + s.size + " is not");
    if (!env_int(s.local, info.local_rank)) info.local_rank = info.rank;
    info.launcher = s.name;
    if (info.world < 1 || info.rank < 0 || info.rank >= info.world)
      throw DeviceError(std::string("rank ") + std::to_string(info.rank) + " outside world size " + std::to_string(info.world));
    return info;
  }
  return info;
}

inline std::string eval_dir() {
  const char* d = std::getenv("BRAID_EVAL_DIR");
  return (d != nullptr && *d != '\0') ? std::string(d) : std::string(".");
}

// The id file is named after the launch (so concurrent jobs in one folder do not meet) and a
// per-process sequence number (several communicators may be created one after another; every
// rank creates them in the same order).
inline std::string unique_id_path(int sequence) {
  std::string tag = "job";
  for (const char* v : {"BRAID_RUN_ID", "PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid", "SLURM_JOB_ID"}) {
    const char* x = std::getenv(v);
    if (x != nullptr && *x != '\0') { tag = x; break; }
  }
  for (char& c : tag)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) c = '_';
  return eval_dir() + "/braid_nccl_id." + tag + "." + std::to_string(sequence);
}

inline ncclUniqueId exchange_unique_id(const RankInfo& r, int sequence, double timeout_s = 120.0) {
  ncclUniqueId id;
  const std::string path = unique_id_path(sequence);
  if (r.rank == 0) {
    BRAID_NCCL(ncclGetUniqueId(&id));
    const std::string tmp = path + ".tmp" + std::to_string(getpid());
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) throw DeviceError("cannot write " + tmp + ": " + std::strerror(errno));
    const bool ok = std::fwrite(&id, sizeof(id), 1, f) == 1;
    if (std::fclose(f) != 0 || !ok) throw DeviceError("cannot write " + tmp);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw DeviceError("cannot rename " + tmp + " to " + path);
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f != nullptr) {
      const bool ok = std::fread(&id, sizeof(id), 1, f) == 1;
      std::fclose(f);
      if (ok) return id;
    }
    if (std::chrono::steady_clock::now() > deadline) throw DeviceError("rank " + std::to_string(r.rank) + ": no NCCL id at " + path + " (rank 0 did not start?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

inline int& comm_sequence() {
  static int seq = 0;
  return seq;
}

// Initializes CUDA on this rank's GPU and a world communicator. The id file is removed by rank 0
// once the (collective) init returned, i.e. after every rank read it.
inline ncclComm_t init_comm(const RankInfo& r) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  // Lazy module loading can stall a kernel launch behind a running kernel that spins on it (a
  // consumer waiting for a producer on another stream): load every kernel when CUDA starts.
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  int ndev = 0;
  BRAID_CUDA(cudaGetDeviceCount(&ndev));
  if (ndev < 1) throw DeviceError("no CUDA device");
  BRAID_CUDA(cudaSetDevice(r.local_rank % ndev));
  const int seq = comm_sequence()++;
  ncclUniqueId id = exchange_unique_id(r, seq);
  ncclComm_t comm = nullptr;
  BRAID_NCCL(ncclCommInitRank(&comm, r.world, id, r.rank));
  if (r.rank == 0) std::remove(unique_id_path(seq).c_str());
  return comm;
}

// Number of GPUs, counted in a child process so that the caller's process stays free of CUDA
// state and may still fork ranks.
inline int gpu_count_in_child() {
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    _exit(n > 100 ? 100 : n);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

constexpr int kSkipExitCode = 77;

inline int gpu_count_or_skip(int needed = 1) {
  const int n = gpu_count_in_child();
  if (n < needed) {
    std::printf("SKIPPED: no GPU (%d found, %d needed)\n", n, needed);
    std::fflush(stdout);
    std::exit(kSkipExitCode);
  }
  return n;
}

// Forks `n` ranks running `body(rank_info)`; returns the number of ranks that failed (non-zero
// exit, signal, or an exception escaping body). Output is flushed per rank.
inline int spawn_local_ranks(int n, const std::function<int(const RankInfo&)>& body) {
  const std::string run_id = "local" + std::to_string(getpid()) + "_" +
                             std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) throw DeviceError("fork failed");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed launcher (timeout) takes its ranks with it
      setenv("BRAID_RANK", std::to_string(r).c_str(), 1);
      setenv("BRAID_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("BRAID_LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("BRAID_RUN_ID", run_id.c_str(), 1);
      int rc = 1;
      try {
        rc = body(bootstrap_rank());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        rc = 1;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    kids.push_back(pid);
  }
  int failed = 0;
  for (pid_t p : kids) {
    int status = 0;
    waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed;
}

// Failure announcements: a rank that cannot go on writes a file; the others stop waiting on it.
inline std::string failure_file_path() { return unique_id_path(-1) + ".failed"; }

inline bool peer_failed(std::string* why = nullptr) {
  FILE* f = std::fopen(failure_file_path().c_str(), "rb");
  if (f == nullptr) return false;
  char buf[512] = {0};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  if (why != nullptr) *why = std::string(buf, n);
  return true;
}

inline void announce_failure(int rank, const std::string& what) {
  const std::string path = failure_file_path(), tmp = path + ".tmp" + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return;
  const std::string text = "rank " + std::to_string(rank) + ": " + what;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

// Spins until the event completes; gives up when another rank announced a failure (its peer
// kernels would otherwise spin forever) or the communicator reports an asynchronous error.
inline void wait_event(cudaEvent_t ev, ncclComm_t comm) {
  auto last_check = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check_cuda(e, "waiting for device work", __FILE__, __LINE__);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_check > std::chrono::milliseconds(5)) {
      last_check = now;
      std::string why;
      if (peer_failed(&why)) throw DeviceError("stopped: " + why);
      ncclResult_t async = ncclSuccess;
      if (comm != nullptr && ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
        throw DeviceError(std::string("NCCL asynchronous error: ") + ncclGetErrorString(async));
    }
  }
}

// Host-level barrier over a communicator: a one-element all-reduce, then wait for it.
class HostBarrier {
 public:
  explicit HostBarrier(ncclComm_t comm) : comm_(comm) {
    BRAID_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BRAID_CUDA(cudaMalloc(&word_, sizeof(int)));
    BRAID_CUDA(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~HostBarrier() {
    cudaEventDestroy(done_);
    cudaFree(word_);
    cudaStreamDestroy(stream_);
  }
  HostBarrier(const HostBarrier&) = delete;
  HostBarrier& operator=(const HostBarrier&) = delete;
  void wait() {
    BRAID_NCCL(ncclAllReduce(word_, word_, 1, ncclInt32, ncclSum, comm_, stream_));
    BRAID_CUDA(cudaEventRecord(done_, stream_));
    wait_event(done_, comm_);
  }

 private:
  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;
  int* word_ = nullptr;
  cudaEvent_t done_ = nullptr;
};

}  // namespace braid::dev
