#include "braid/eval/gpu_toolchain.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <regex>

#include "braid/util/fs.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool is_file(const std::filesystem::path& p) {
  std::error_code ec;
  return !p.empty() && std::filesystem::is_regular_file(p, ec);
}

bool is_dir(const std::filesystem::path& p) {
  std::error_code ec;
  return !p.empty() && std::filesystem::is_directory(p, ec);
}

std::string last_nonempty_line(const std::string& text) {
  std::string last;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
    start = end + 1;
  }
  return last;
}

SubprocessResult quick_run(std::vector<std::string> argv, double timeout_s = 20.0) {
  SubprocessOptions options;
  options.argv = std::move(argv);
  options.timeout_s = timeout_s;
  options.kill_grace_s = 0.5;
  return run_subprocess(options);
}

// /usr/local/cuda-13.0 before /usr/local/cuda-12.4: newest version first.
std::vector<std::filesystem::path> versioned_cuda_dirs() {
  std::vector<std::filesystem::path> dirs;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/local", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("cuda-", 0) == 0) dirs.push_back(entry.path());
  }
  auto version_of = [](const std::filesystem::path& p) {
    std::vector<int> parts;
    std::string v = p.filename().string().substr(5);
    std::size_t pos = 0;
    while (pos < v.size()) {
      std::size_t dot = v.find('.', pos);
      parts.push_back(std::atoi(v.substr(pos, dot - pos).c_str()));
      if (dot == std::string::npos) break;
      pos = dot + 1;
    }
    return parts;
  };
  std::sort(dirs.begin(), dirs.end(), [&](const auto& a, const auto& b) { return version_of(a) > version_of(b); });
  return dirs;
}

std::filesystem::path find_device_include() {
  std::vector<std::filesystem::path> candidates;
  if (auto e = env_or_empty("BRAID_DEVICE_INCLUDE"); !e.empty()) candidates.emplace_back(e);
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // A relocated build (binary copied to another machine with the repository beside it).
    for (auto dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
      candidates.push_back(dir / "device" / "include");
  }
#ifdef BRAID_SOURCE_DIR
  candidates.push_back(std::filesystem::path(BRAID_SOURCE_DIR) / "device" / "include");
#endif
  for (const auto& c : candidates)
    if (is_file(c / "braid" / "harness.cuh")) return std::filesystem::absolute(c).lexically_normal();
  return {};
}

std::vector<std::filesystem::path> wheel_nccl_dirs() {
  std::vector<std::filesystem::path> dirs;
  SubprocessResult py = quick_run({"python3", "-c", "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"}, 15.0);
  if (py.succeeded()) {
    std::string line = last_nonempty_line(py.stdout_text);
    if (!line.empty()) dirs.emplace_back(line);
  }
  std::vector<std::filesystem::path> roots;
  if (auto venv = env_or_empty("VIRTUAL_ENV"); !venv.empty()) roots.emplace_back(std::filesystem::path(venv) / "lib");
  if (auto home = env_or_empty("HOME"); !home.empty()) roots.emplace_back(std::filesystem::path(home) / ".local" / "lib");
  roots.emplace_back("/usr/local/lib");
  roots.emplace_back("/usr/lib");
  for (const auto& root : roots) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
      if (entry.path().filename().string().rfind("python3", 0) != 0) continue;
      for (const char* packages : {"site-packages", "dist-packages"}) {
        auto dir = entry.path() / packages / "nvidia" / "nccl";
        if (is_dir(dir)) dirs.push_back(dir);
      }
    }
  }
  return dirs;
}

std::string read_proc_gpu_model(const std::filesystem::path& information) {
  auto text = try_read_file(information);
  if (!text) return {};
  std::size_t at = text->find("Model:");
  if (at == std::string::npos) return {};
  std::size_t end = text->find('\n', at);
  std::string model = text->substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
  model.erase(0, model.find_first_not_of(" \t"));
  return model;
}

}  // namespace

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

std::optional<NcclInstall> nccl_install_at(const std::filesystem::path& home, const std::string& origin,
                                           const std::filesystem::path& fallback_include) {
  if (home.empty() || !is_dir(home)) return std::nullopt;
  NcclInstall install;
  install.origin = origin;
  for (const char* lib_dir : {"lib64", "lib", "lib/x86_64-linux-gnu"}) {
    for (const char* name : {"libnccl.so", "libnccl.so.2"}) {
      auto candidate = home / lib_dir / name;
      if (is_file(candidate)) {
        install.library = candidate;
        break;
      }
    }
    if (!install.library.empty()) break;
  }
  if (install.library.empty()) return std::nullopt;
  // A wheel ships the library without headers: take carried ones.
  // Headers with the device API (nccl_device.h) first: a wheel may ship nccl.h without it.
  for (const char* header : {"nccl_device.h", "nccl.h"}) {
    for (const auto& inc : {home / "include", fallback_include})
      if (is_file(inc / header) && is_file(inc / "nccl.h")) {
        install.include_dir = inc;
        break;
      }
    if (!install.include_dir.empty()) break;
  }
  if (install.include_dir.empty()) return std::nullopt;
  install.header_version = nccl_header_version(install.include_dir / "nccl.h");
  install.library_version = nccl_library_version(std::filesystem::canonical(install.library));
  return install;
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
  CudaToolchain tc;
  std::vector<std::filesystem::path> homes;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (auto v = env_or_empty(var); !v.empty()) homes.emplace_back(v);
  // nvcc in PATH: its toolkit is the folder above bin/.
  for (const std::string& dir : [] {
         std::vector<std::string> parts;
         std::string path = env_or_empty("PATH");
         std::size_t pos = 0;
         while (pos <= path.size()) {
           std::size_t colon = path.find(':', pos);
           parts.push_back(path.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos));
           if (colon == std::string::npos) break;
           pos = colon + 1;
         }
         return parts;
       }()) {
    if (!dir.empty() && is_file(std::filesystem::path(dir) / "nvcc")) homes.push_back(std::filesystem::path(dir).parent_path());
  }
  homes.emplace_back("/usr/local/cuda");
  for (const auto& d : versioned_cuda_dirs()) homes.push_back(d);
  for (const auto& home : homes) {
    if (is_file(home / "bin" / "nvcc") && ::access((home / "bin" / "nvcc").c_str(), X_OK) == 0) {
      tc.cuda_home = home;
      tc.nvcc = home / "bin" / "nvcc";
      break;
    }
  }
  if (tc.nvcc.empty()) {
    if (why) *why = "nvcc not found (looked in CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda, /usr/local/cuda-*)";
    return std::nullopt;
  }
  SubprocessResult version = quick_run({tc.nvcc.string(), "--version"});
  if (!version.succeeded()) {
    if (why) *why = tc.nvcc.string() + " --version: " + version.describe_end();
    return std::nullopt;
  }
  tc.nvcc_version = last_nonempty_line(version.stdout_text);
  // nvcc compiles host code with the first c++/g++ in PATH; its version changes the binaries.
  SubprocessResult host = quick_run({"c++", "--version"});
  tc.compiler_identity = version.stdout_text + "\n" + (host.succeeded() ? host.stdout_text : std::string("host compiler unknown"));

  const std::filesystem::path carried_include = env_or_empty("BRAID_NCCL_INCLUDE");
  std::vector<std::pair<std::filesystem::path, std::string>> nccl_homes;
  if (auto v = env_or_empty("NCCL_HOME"); !v.empty()) nccl_homes.emplace_back(v, "NCCL_HOME");
  nccl_homes.emplace_back(tc.cuda_home, "CUDA toolkit");
  for (const auto& d : wheel_nccl_dirs()) nccl_homes.emplace_back(d, "python wheel");
  nccl_homes.emplace_back("/usr", "/usr");
  for (const auto& [home, origin] : nccl_homes) {
    if (auto install = nccl_install_at(home, origin, carried_include)) {
      tc.nccl = std::move(install);
      break;
    }
  }
  tc.device_include = find_device_include();
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

std::vector<GpuInfo> detect_gpus() {
  std::vector<GpuInfo> gpus;
  SubprocessResult smi = quick_run({"nvidia-smi", "--query-gpu=index,name,compute_cap", "--format=csv,noheader"}, 30.0);
  if (smi.succeeded()) {
    std::size_t start = 0;
    const std::string& text = smi.stdout_text;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      start = end + 1;
      std::vector<std::string> fields;
      std::size_t pos = 0;
      while (pos <= line.size()) {
        std::size_t comma = line.find(',', pos);
        std::string field = line.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        field.erase(0, field.find_first_not_of(" \t"));
        while (!field.empty() && (field.back() == ' ' || field.back() == '\r')) field.pop_back();
        fields.push_back(field);
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
      if (fields.size() < 2 || fields[0].empty() || !std::isdigit(static_cast<unsigned char>(fields[0][0]))) continue;
      GpuInfo gpu;
      gpu.index = std::atoi(fields[0].c_str());
      gpu.name = fields[1];
      if (fields.size() > 2 && fields[2].find('.') != std::string::npos) gpu.compute_cap = fields[2];
      gpus.push_back(gpu);
    }
    if (!gpus.empty()) return gpus;
  }
  // Without nvidia-smi (a minimal container) the driver still lists its GPUs.
  std::error_code ec;
  std::vector<std::filesystem::path> entries;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) entries.push_back(entry.path());
  std::sort(entries.begin(), entries.end());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    GpuInfo gpu;
    gpu.index = static_cast<int>(i);
    gpu.name = read_proc_gpu_model(entries[i] / "information");
    gpus.push_back(gpu);
  }
  return gpus;
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
