// Processes by identity rather than by parent: signal names, the processes of one candidate's
// token, and process groups left by an earlier braid (subprocess.hpp).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "braid/util/fs.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return fmt::format("SIG{}", sig);
  }
}

int kill_processes_with_token(const std::string& token) {
  const std::string needle = "BRAID_EVAL_TOKEN=" + token;
  int killed = 0;
  // Twice: a process may fork between the scan and the kill.
  for (int pass = 0; pass < 2; ++pass) {
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return killed;
    while (dirent* e = ::readdir(proc)) {
      const char* n = e->d_name;
      if (*n < '1' || *n > '9') continue;
      const long pid = std::strtol(n, nullptr, 10);
      if (pid <= 1 || pid == ::getpid()) continue;
      auto environ_text = try_read_file("/proc/" + std::string(n) + "/environ");
      if (!environ_text) continue;
      // Entries are NUL-separated; match a whole entry.
      std::string_view text(*environ_text);
      for (std::size_t at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + 1)) {
        const bool starts = at == 0 || text[at - 1] == '\0';
        const std::size_t end = at + needle.size();
        if (starts && (end == text.size() || text[end] == '\0')) {
          if (::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
          break;
        }
      }
    }
    ::closedir(proc);
  }
  return killed;
}

std::string process_start_marker(long pid) {
  if (pid <= 0) return {};
  auto stat = try_read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return {};
  // Field 2 (comm) may hold spaces and parentheses; fields resume after the last ')'.
  auto close = stat->rfind(')');
  if (close == std::string::npos) return {};
  std::string_view rest = std::string_view(*stat).substr(close + 1);
  // After ')' come fields 3.. ; start time is field 22, i.e. the 20th token here.
  std::size_t pos = 0;
  std::string start_time;
  for (int field = 3; field <= 22; ++field) {
    while (pos < rest.size() && rest[pos] == ' ') ++pos;
    std::size_t end = rest.find(' ', pos);
    if (end == std::string_view::npos) end = rest.size();
    if (field == 22) start_time = std::string(rest.substr(pos, end - pos));
    pos = end;
  }
  if (start_time.empty()) return {};
  std::string boot_id = try_read_file("/proc/sys/kernel/random/boot_id").value_or("");
  while (!boot_id.empty() && (boot_id.back() == '\n' || boot_id.back() == ' ')) boot_id.pop_back();
  return boot_id + ":" + start_time;
}

bool kill_process_group_if_alive(long pgid, const std::string& start_marker) {
  if (pgid <= 1 || start_marker.empty()) return false;
  std::string current = process_start_marker(pgid);
  if (!current.empty()) {
    // The leader's pid is alive: ours only if it is the same incarnation.
    if (current != start_marker) return false;
  } else {
    // The leader is gone. A pid stays reserved while a group of that id has members, so any
    // group `pgid` still existing is ours, but only within the same boot.
    std::string boot_prefix = process_start_marker(static_cast<long>(::getpid()));
    boot_prefix = boot_prefix.substr(0, boot_prefix.find(':') + 1);
    if (start_marker.compare(0, boot_prefix.size(), boot_prefix) != 0) return false;
  }
  return ::kill(-static_cast<pid_t>(pgid), SIGKILL) == 0;
}

}  // namespace braid
