// Where CUDA, NCCL and the GPUs are, found rather than assumed.
//
// CUDA: CUDA_HOME, CUDA_PATH, nvcc in PATH, /usr/local/cuda, /usr/local/cuda-* (newest first).
// NCCL: NCCL_HOME, the CUDA toolkit, the NCCL of a Python wheel (site-packages/nvidia/nccl, which
// may hold only lib/libnccl.so.2 and no headers), /usr. Headers missing beside the library are
// taken from BRAID_NCCL_INCLUDE (the device library's convention for carried headers).
// GPUs: `nvidia-smi -L`, else /proc/driver/nvidia/gpus; braid itself never links CUDA.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace braid {

struct NcclInstall {
  std::filesystem::path include_dir;  // holds nccl.h (and nccl_device.h for the device API)
  std::filesystem::path library;      // libnccl.so or libnccl.so.2, linked by full path
  std::string header_version;         // "2.28.9" from nccl.h, "" if unknown
  std::string library_version;        // "2.28.9+cuda13.0" from the library's text, "" if unknown
  std::string origin;                 // "NCCL_HOME", "CUDA toolkit", "python wheel", "/usr"
};

struct CudaToolchain {
  std::filesystem::path cuda_home;
  std::filesystem::path nvcc;
  std::string nvcc_version;                    // last line of `nvcc --version`
  std::string compiler_identity;               // nvcc and host compiler versions, for cache keys
  std::optional<NcclInstall> nccl;
  std::filesystem::path device_include;        // braid's device/include, empty if not found

  // One line for logs and errors.
  std::string describe() const;
};

// Finds nvcc (nullopt with `why` when there is none) and NCCL (optional). Runs `nvcc --version`
// once; thread-safe, cached per process after the first call.
std::optional<CudaToolchain> find_cuda_toolchain(std::string* why = nullptr);

// Uncached discovery, for tests and `braid doctor`-style listings.
std::optional<CudaToolchain> discover_cuda_toolchain(std::string* why = nullptr);

// NCCL under `home` (include/ and lib/, lib64/ or lib/x86_64-linux-gnu/), or nullopt.
std::optional<NcclInstall> nccl_install_at(const std::filesystem::path& home, const std::string& origin,
                                           const std::filesystem::path& fallback_include = {});

// "2.28.9" from a nccl.h (NCCL_MAJOR/MINOR/PATCH), "" if absent.
std::string nccl_header_version(const std::filesystem::path& nccl_h);
// "2.28.9+cuda13.0" from the "NCCL version ..." text inside a libnccl, "" if absent.
std::string nccl_library_version(const std::filesystem::path& library);

struct GpuInfo {
  int index = 0;
  std::string name;            // "NVIDIA H100 80GB HBM3"
  std::string compute_cap;     // "9.0", "" if unknown
};

// GPUs of this machine (nvidia-smi, else /proc/driver/nvidia/gpus); empty when there are none.
std::vector<GpuInfo> detect_gpus();

// nvcc arguments for an architecture name: "sm_90" -> -gencode=arch=compute_90,code=sm_90;
// "sm_90a" -> -gencode=arch=compute_90a,code=sm_90a (wgmma). "auto" takes the first GPU's
// compute capability, or sm_90 where there is no GPU. nullopt for a malformed name.
std::optional<std::string> resolve_arch(const std::string& arch, const std::vector<GpuInfo>& gpus);
std::optional<std::vector<std::string>> arch_flags(const std::string& resolved_arch);

}  // namespace braid
