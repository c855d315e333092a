// Child processes with a timeout, capped output and a process group of their own.
//
// Every child runs in its own process group (so a timeout ends its grandchildren too), dies
// with braid (PR_SET_PDEATHSIG = SIGKILL, tied to the thread that called run_subprocess, which
// blocks until the child ends), and never sees API keys in its environment. When the child
// itself exits, whatever it left running in its group is killed. A candidate's processes run
// in a sandbox (sandbox.hpp: namespaces or a subreaper keeper end every descendant, `setsid`
// ones included) with an environment built from an allowlist, and may report their verdict
// through a pipe of their own (BRAID_RESULT_FD, see eval/verdict_channel.hpp).
//
// Thread-safe: several threads may run children at once. argv, envp and paths are built
// before fork; the forked child only makes async-signal-safe calls before exec.
#pragma once
#include <atomic>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "braid/util/sandbox.hpp"

namespace braid {

struct SubprocessOptions {
  std::vector<std::string> argv;                  // argv[0] is looked up in PATH unless it holds '/'
  std::filesystem::path cwd;                      // empty: the caller's working directory
  std::map<std::string, std::string> env_add;     // set (or override) in the child's environment
  std::vector<std::string> secret_env_names;      // dropped from the child's environment, besides
                                                  // *_API_KEY, *_TOKEN and register_secret_env_name()
  double timeout_s = 0.0;                         // <= 0: no limit
  double kill_grace_s = 2.0;                      // SIGTERM -> SIGKILL delay on timeout
  std::size_t output_cap_bytes = 32 * 1024;       // per stream: keep this many first and last bytes
  std::string stdin_text;                         // the child's stdin (read from memory, so it never
                                                  // blocks on a full pipe); empty: /dev/null
  std::filesystem::path stdout_path;              // optional: the capped stdout is written here
  std::filesystem::path stderr_path;              // optional: the capped stderr is written here
  std::function<void(long pgid)> on_start;        // called in the parent once the group exists
  const std::atomic<bool>* stop = nullptr;        // optional: once true, the group is ended as on a
                                                  // timeout (SIGTERM, grace, SIGKILL), `stopped` set
  // A candidate's process (code braid did not write): its environment is built from an
  // allowlist (candidate_env_allowed) plus env_add, never from braid's whole environment; it
  // carries a random BRAID_EVAL_TOKEN, and when it ends every process still holding that token
  // (a setsid double fork escapes the process group) is killed.
  bool candidate = false;
  std::size_t memory_limit_bytes = 0;             // RLIMIT_AS in the child; 0: none
  // Sandbox of the child and its descendants (sandbox.hpp); disabled by default.
  SandboxPolicy sandbox;
  // The verdict channel (eval/verdict_channel.hpp): a socket the child gets as fd 3, named by
  // BRAID_RESULT_FD=3. braid writes `channel_greeting` into it before the child starts (the
  // harness reads it once; it never appears in the environment or on the command line), and
  // what the child writes back (at most 1 MiB) is SubprocessResult::channel_text.
  bool result_channel = false;
  std::string channel_greeting;
  // A socket of the caller's given to the child as descriptor 5, named by BRAID_PEER_FD=5 (the
  // link between a workload's driver and its worker, eval/cascade.hpp). Taken over:
  // run_subprocess closes the caller's copy once the child has it, or when it cannot start.
  int peer_fd = -1;
};

// Whether a variable of braid's environment may reach a candidate: PATH, LANG, LC_*, TZ, USER,
// LOGNAME, TERM, LD_LIBRARY_PATH, compiler search paths, CUDA_*, NCCL_*, NVIDIA_*, the
// launchers' OMPI_*/PMIX_*/SLURM_*/UCX_*/HWLOC_*, and BRAID_* (never one of a secret's name).
bool candidate_env_allowed(const std::string& name);

struct SubprocessResult {
  bool started = false;        // false: fork or exec failed; see start_error
  std::string start_error;
  int exit_code = -1;          // valid when term_signal == 0 and started
  int term_signal = 0;         // signal that ended the child, 0 if it exited
  bool timed_out = false;
  bool stopped = false;        // ended because SubprocessOptions::stop became true
  double wall_s = 0.0;
  long pgid = 0;
  std::string stdout_text;     // capped: head, a "[... N bytes omitted ...]" line, tail
  std::string stderr_text;
  std::size_t stdout_bytes = 0;  // total bytes the child wrote, before capping
  std::size_t stderr_bytes = 0;
  std::string channel_text;      // what came through the result channel
  std::string sandbox_level;     // SandboxPlan::level(), "off" when not sandboxed

  bool succeeded() const { return started && !timed_out && term_signal == 0 && exit_code == 0; }
  // "exit code 3", "killed by signal SIGSEGV (Segmentation fault)", "timed out after 2.0 s",
  // "could not start: ...".
  std::string describe_end() const;
};

// Runs the child to completion (or timeout). Throws SystemError only when braid's own
// environment fails (pipe or fork impossible); a missing executable is a result with
// started == false.
SubprocessResult run_subprocess(const SubprocessOptions& options);

// Process-wide list of extra environment variable names never passed to children (for
// example the variable a config names as its LLM key).
void register_secret_env_name(const std::string& name);
bool is_secret_env_name(const std::string& name);
// Whether a variable of braid's environment may reach a candidate: the locale, PATH, HOME/USER,
// TMPDIR, the CUDA/NCCL/NVIDIA driver's and MPI/Slurm launchers' variables, and braid's own.
bool candidate_env_allowed(const std::string& name);
// Kills (SIGKILL) every process whose environment holds BRAID_EVAL_TOKEN=token; returns how many.
int kill_processes_with_token(const std::string& token);

// Identifies one process incarnation: "<boot id>:<start time in clock ticks>", or "" when the
// process does not exist. Stored with a pgid so a recycled pid is never killed.
std::string process_start_marker(long pid);

// Ends (SIGKILL) the process group `pgid` left by an earlier braid, unless its leader's pid now
// belongs to another process. Returns true when a signal was delivered to some process.
bool kill_process_group_if_alive(long pgid, const std::string& start_marker);

// "SIGSEGV" for 11, "SIG42" for unnamed numbers.
std::string signal_name(int signal_number);

}  // namespace braid
