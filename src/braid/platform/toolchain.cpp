#include "braid/platform/toolchain.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

#include "braid/platform/probe.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

using std::filesystem::path;
using platform_detail::run_probe;

// An environment variable as a path, "" when unset or empty; a trailing '/' is dropped so that
// the paths built from it read the same as scripts/find-cuda.sh's.
path env_path(const char* name) {
  const char* v = std::getenv(name);
  std::string s = v ? v : "";
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

bool is_file(const path& p) {
  std::error_code ec;
  return !p.empty() && std::filesystem::is_regular_file(p, ec);
}

bool is_executable(const path& p) { return is_file(p) && ::access(p.c_str(), X_OK) == 0; }

std::string last_nonempty_line(const std::string& text) {
  std::string last;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

// Entries of `dir` whose name starts with `prefix`, sorted by name (the order of a bash glob
// under LC_ALL=C, which scripts/find-cuda.sh uses).
std::vector<path> entries_starting(const path& dir, const std::string& prefix) {
  std::vector<path> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

// /usr/local/cuda-13.0 before /usr/local/cuda-12.4: newest version first.
std::vector<path> versioned_cuda_dirs() {
  std::vector<path> dirs = entries_starting("/usr/local", "cuda-");
  auto version_of = [](const path& p) {
    std::vector<int> parts;
    std::stringstream in(p.filename().string().substr(5));
    for (std::string part; std::getline(in, part, '.');) parts.push_back(std::atoi(part.c_str()));
    return parts;
  };
  std::stable_sort(dirs.begin(), dirs.end(), [&](const path& a, const path& b) { return version_of(a) > version_of(b); });
  return dirs;
}

// The folder above each nvcc in PATH (absolute PATH entries only), symlinks resolved.
std::vector<path> path_cuda_homes() {
  std::vector<path> homes;
  const char* env = std::getenv("PATH");
  std::stringstream in(env ? env : "");
  for (std::string dir; std::getline(in, dir, ':');) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (dir.empty() || dir[0] != '/' || !is_executable(path(dir) / "nvcc")) continue;
    // Through symlinks (/usr/bin/nvcc -> /usr/local/cuda/bin/nvcc): the toolkit is where nvcc lives.
    std::error_code ec;
    const path nvcc = std::filesystem::canonical(path(dir) / "nvcc", ec);
    if (!ec) homes.push_back(nvcc.parent_path().parent_path());
  }
  return homes;
}

// nvidia/nccl of a Python wheel: the one python3 imports, then those under the usual prefixes.
std::vector<path> wheel_nccl_dirs() {
  std::vector<path> dirs;
  auto py = run_probe({"python3", "-c", "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"}, 15.0);
  if (py.succeeded()) {
    std::string line = last_nonempty_line(py.stdout_text);
    if (!line.empty()) dirs.emplace_back(line);
  }
  std::vector<path> prefixes;
  if (auto venv = env_path("VIRTUAL_ENV"); !venv.empty()) prefixes.push_back(venv / "lib");
  if (auto home = env_path("HOME"); !home.empty()) prefixes.push_back(home / ".local" / "lib");
  prefixes.emplace_back("/usr/local/lib");
  prefixes.emplace_back("/usr/lib");
  for (const auto& prefix : prefixes)
    for (const auto& python : entries_starting(prefix, "python3"))
      for (const char* packages : {"site-packages", "dist-packages"}) {
        std::error_code ec;
        if (auto dir = python / packages / "nvidia" / "nccl"; std::filesystem::is_directory(dir, ec)) dirs.push_back(dir);
      }
  return dirs;
}

std::vector<path> device_include_candidates() {
  std::vector<path> candidates;
  if (auto e = env_path("BRAID_DEVICE_INCLUDE"); !e.empty()) candidates.push_back(e);
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // A relocated build (binary copied to another machine with the repository beside it).
    for (auto dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
      candidates.push_back(dir / "device" / "include");
  }
#ifdef BRAID_SOURCE_DIR
  candidates.push_back(path(BRAID_SOURCE_DIR) / "device" / "include");
#endif
  return candidates;
}

struct Found {
  path where;
  std::string origin;
};

// Headers: the first candidate with the device API, else the first with nccl.h.
Found find_nccl_include(const SearchOrder& order) {
  std::vector<Found> candidates;
  if (auto given = env_path("BRAID_NCCL_INCLUDE"); !given.empty()) candidates.push_back({given, "BRAID_NCCL_INCLUDE"});
  for (const auto& [root, origin] : order.nccl_roots) candidates.push_back({root / "include", origin});
  for (bool need_device : {true, false})
    for (const auto& c : candidates)
      if (is_file(c.where / "nccl.h") && (!need_device || is_file(c.where / "nccl_device.h"))) return c;
  return {};
}

// Library: the first folder with libnccl.so.2 (else libnccl.so), by full path.
Found find_nccl_library(const SearchOrder& order) {
  std::vector<Found> folders;
  if (auto given = env_path("BRAID_NCCL_LIB"); !given.empty()) folders.push_back({given, "BRAID_NCCL_LIB"});
  for (const auto& [root, origin] : order.nccl_roots)
    for (const char* lib : {"lib64", "lib", "lib/x86_64-linux-gnu"}) folders.push_back({root / lib, origin});
  for (const auto& f : folders)
    for (const char* name : {"libnccl.so.2", "libnccl.so"})
      if (is_file(f.where / name)) return {f.where / name, f.origin};
  return {};
}

}  // namespace

SearchOrder search_order() {
  SearchOrder order;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (auto v = env_path(var); !v.empty()) order.cuda_homes.push_back(v);
  for (const auto& home : path_cuda_homes()) order.cuda_homes.push_back(home);
  order.cuda_homes.emplace_back("/usr/local/cuda");
  for (const auto& home : versioned_cuda_dirs()) order.cuda_homes.push_back(home);

  if (auto v = env_path("NCCL_HOME"); !v.empty()) order.nccl_roots.emplace_back(v, "NCCL_HOME");
  for (const auto& dir : wheel_nccl_dirs()) order.nccl_roots.emplace_back(dir, "python wheel");
  for (const auto& home : order.cuda_homes)
    if (is_executable(home / "bin" / "nvcc")) {
      order.nccl_roots.emplace_back(home, "CUDA toolkit");
      break;
    }
  order.nccl_roots.emplace_back("/usr", "/usr");
  order.device_includes = device_include_candidates();
  return order;
}

path find_device_include() {
  for (const auto& c : device_include_candidates())
    if (is_file(c / "braid" / "harness.cuh")) return std::filesystem::weakly_canonical(c);
  return {};
}

Toolchain search_toolchain() {
  const SearchOrder order = search_order();
  Toolchain t;
  for (const auto& home : order.cuda_homes)
    if (is_executable(home / "bin" / "nvcc")) {
      t.cuda_home = home;
      t.nvcc = home / "bin" / "nvcc";
      break;
    }
  for (const auto& [root, origin] : order.nccl_roots)
    if (origin == "python wheel") {
      t.nccl_wheel = root;
      break;
    }
  const Found include = find_nccl_include(order), library = find_nccl_library(order);
  t.nccl_include = include.where;
  t.nccl_include_origin = include.origin;
  t.nccl_library = library.where;
  t.nccl_library_origin = library.origin;
  for (const auto& c : order.device_includes)
    if (is_file(c / "braid" / "harness.cuh")) {
      t.device_include = std::filesystem::weakly_canonical(c);
      break;
    }
  return t;
}

std::vector<std::pair<std::string, std::string>> Toolchain::shell_variables() const {
  return {{"BRAID_CUDA_HOME", cuda_home.string()},
          {"BRAID_NVCC", nvcc.string()},
          {"BRAID_NCCL_INCLUDE", nccl_include.string()},
          {"BRAID_NCCL_LIB", nccl_library.empty() ? std::string() : nccl_library.parent_path().string()},
          {"BRAID_NCCL_WHEEL", nccl_wheel.string()},
          {"BRAID_DEVICE_INCLUDE", device_include.string()}};
}

std::string Toolchain::shell_text() const {
  std::string text;
  for (const auto& [name, value] : shell_variables()) {
    text += name + "='";
    for (char c : value) text += c == '\'' ? std::string("'\\''") : std::string(1, c);
    text += "'\n";
  }
  return text;
}

std::string nccl_header_version(const std::filesystem::path& nccl_h) {
  auto text = try_read_file(nccl_h);
  if (!text) return {};
  auto number = [&](const std::string& name) -> std::string {
    std::smatch m;
    std::regex re("#define\\s+" + name + "\\s+(\\d+)");
    if (std::regex_search(*text, m, re)) return m[1].str();
    return {};
  };
  std::string major = number("NCCL_MAJOR"), minor = number("NCCL_MINOR"), patch = number("NCCL_PATCH");
  if (major.empty() || minor.empty()) return {};
  return major + "." + minor + (patch.empty() ? "" : "." + patch);
}

std::string nccl_library_version(const std::filesystem::path& library) {
  // The library embeds "NCCL version 2.28.9+cuda13.0"; read it in chunks (the file is large).
  std::ifstream in(library, std::ios::binary);
  if (!in) return {};
  static const std::string marker = "NCCL version ";
  std::string carry;
  std::vector<char> chunk(1 << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    std::string window = carry + std::string(chunk.data(), static_cast<std::size_t>(in.gcount()));
    std::size_t at = window.find(marker);
    if (at != std::string::npos && window.size() - at > marker.size() + 32) {
      std::size_t begin = at + marker.size(), end = begin;
      while (end < window.size() && (std::isalnum(static_cast<unsigned char>(window[end])) || window[end] == '.' ||
                                     window[end] == '+'))
        ++end;
      return window.substr(begin, end - begin);
    }
    carry = window.size() > 64 ? window.substr(window.size() - 64) : window;
  }
  return {};
}

std::string CudaToolchain::describe() const {
  std::string text = fmt::format("nvcc {} ({})", nvcc.string(), nvcc_version);
  if (nccl)
    text += fmt::format(", NCCL {} headers {} library {} [{}]", nccl->origin, nccl->header_version.empty() ? "?" : nccl->header_version,
                        nccl->library_version.empty() ? "?" : nccl->library_version, nccl->library.string());
  else
    text += ", no NCCL found";
  if (!device_include.empty()) text += ", braid device headers " + device_include.string();
  return text;
}

std::optional<CudaToolchain> discover_cuda_toolchain(std::string* why) {
  const Toolchain found = search_toolchain();
  if (found.nvcc.empty()) {
    if (why) *why = "nvcc not found (looked in CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda, /usr/local/cuda-*)";
    return std::nullopt;
  }
  CudaToolchain tc;
  tc.cuda_home = found.cuda_home;
  tc.nvcc = found.nvcc;
  tc.device_include = found.device_include;
  auto version = run_probe({tc.nvcc.string(), "--version"});
  if (!version.succeeded()) {
    if (why) *why = tc.nvcc.string() + " --version: " + version.describe_end();
    return std::nullopt;
  }
  tc.nvcc_version = last_nonempty_line(version.stdout_text);
  // nvcc compiles host code with the first c++/g++ in PATH; its version changes the binaries.
  auto host = run_probe({"c++", "--version"});
  tc.compiler_identity = version.stdout_text + "\n" + (host.succeeded() ? host.stdout_text : std::string("host compiler unknown"));
  if (!found.nccl_include.empty() && !found.nccl_library.empty()) {
    NcclInstall nccl;
    nccl.include_dir = found.nccl_include;
    nccl.library = found.nccl_library;
    nccl.origin = found.nccl_library_origin;
    nccl.header_version = nccl_header_version(found.nccl_include / "nccl.h");
    std::error_code ec;
    nccl.library_version = nccl_library_version(std::filesystem::canonical(found.nccl_library, ec));
    tc.nccl = std::move(nccl);
  }
  return tc;
}

std::optional<CudaToolchain> find_cuda_toolchain(std::string* why) {
  static std::mutex mutex;
  static bool searched = false;
  static std::optional<CudaToolchain> found;
  static std::string reason;
  std::lock_guard lock(mutex);
  if (!searched) {
    found = discover_cuda_toolchain(&reason);
    searched = true;
  }
  if (!found && why) *why = reason;
  return found;
}

std::optional<std::string> resolve_arch(const std::string& arch, const std::vector<GpuInfo>& gpus) {
  if (arch.empty() || arch == "auto") {
    for (const auto& gpu : gpus) {
      if (gpu.compute_cap.empty()) continue;
      std::string digits;
      for (char c : gpu.compute_cap)
        if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
      if (!digits.empty()) return "sm_" + digits;
    }
    return std::string("sm_90");
  }
  static const std::regex valid("sm_[0-9]{2,3}[af]?");
  if (!std::regex_match(arch, valid)) return std::nullopt;
  return arch;
}

std::optional<std::vector<std::string>> arch_flags(const std::string& resolved_arch) {
  static const std::regex valid("sm_([0-9]{2,3}[af]?)");
  std::smatch m;
  if (!std::regex_match(resolved_arch, m, valid)) return std::nullopt;
  const std::string number = m[1].str();
  return std::vector<std::string>{"-gencode=arch=compute_" + number + ",code=sm_" + number};
}

}  // namespace braid
