// Goes after the driver's memory: looks for every other process running with "--mode" on its
// command line (the driver) and tries to ptrace-attach to it, open /proc/<pid>/mem and read it
// with process_vm_readv; what worked is written to peek.txt in its work folder. Expected:
// nothing works (a PID namespace of its own, Landlock's ptrace scope, the driver undumpable),
// the kernel is honest and scores.
#include <dirent.h>
#include <fcntl.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include "honest_kernel.inc"
static std::string peek_all() {
  std::string found;
  DIR* proc = opendir("/proc");
  if (!proc) return "no /proc";
  while (dirent* e = readdir(proc)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    std::string cmd;
    if (FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/cmdline").c_str(), "r")) {
      char buf[4096];
      size_t n = std::fread(buf, 1, sizeof buf, f);
      std::fclose(f);
      for (size_t i = 0; i < n; ++i) cmd += buf[i] ? buf[i] : ' ';
    }
    if (cmd.find("--mode") == std::string::npos) continue;
    found += "saw " + std::to_string(pid) + ";";
    if (ptrace(PTRACE_ATTACH, pid, nullptr, nullptr) == 0) {
      found += " ptrace ok;";
      waitpid(pid, nullptr, 0);
      ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
    }
    const int mem = open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY);
    if (mem >= 0) {
      found += " mem open ok;";
      close(mem);
    }
    char byte = 0;
    iovec local{&byte, 1}, remote{reinterpret_cast<void*>(0x400000), 1};
    if (process_vm_readv(pid, &local, 1, &remote, 1, 0) == 1) found += " vm_readv ok;";
  }
  closedir(proc);
  return found.empty() ? "none" : found;
}
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) {
  static bool done = false;
  if (!done) {
    done = true;
    const char* dir = std::getenv("BRAID_WORK_DIR");
    if (FILE* f = std::fopen((std::string(dir ? dir : ".") + "/peek.txt").c_str(), "a")) {
      std::fprintf(f, "%s\n", peek_all().c_str());
      std::fclose(f);
    }
  }
  honest_matmul(A, B, C, n);
}
