// Where CUDA, NCCL and braid's device headers are: the one search order of braid. The build
// (device/CMakeLists.txt, through scripts/find-cuda.sh) and the scripts (scripts/find-cuda.sh asks
// `braid env --shell`, and repeats this order in bash only before braid is built) follow it.
//
// nvcc: the first of CUDA_HOME, CUDA_PATH, the folder above each nvcc in PATH (symlinks
//   resolved), /usr/local/cuda, /usr/local/cuda-* (newest version first) that holds an
//   executable bin/nvcc. (CMake's own CUDACXX / -DCMAKE_CUDA_COMPILER still win in the build.)
// NCCL roots, in order: NCCL_HOME; the Python wheel (nvidia.nccl as python3 imports it, then
//   nvidia/nccl under the site-packages of $VIRTUAL_ENV/lib, ~/.local/lib, /usr/local/lib,
//   /usr/lib); the CUDA toolkit found above; /usr.
// NCCL headers: candidates BRAID_NCCL_INCLUDE (as given), then <root>/include for each root; the
//   first holding nccl.h and nccl_device.h (the device API of NCCL >= 2.28), else the first holding
//   nccl.h. A wheel may ship the library without headers, or without the device ones.
// NCCL library: candidates BRAID_NCCL_LIB (a folder, as given), then <root>/lib64, <root>/lib,
//   <root>/lib/x86_64-linux-gnu for each root; the first holding libnccl.so.2 (else libnccl.so).
//   Headers and library are found separately; their versions are reported so a mismatch shows.
// braid's device headers (the folder holding braid/harness.cuh): BRAID_DEVICE_INCLUDE, then
//   device/include beside the running binary or any folder above it, then the source tree's.
//
// braid itself never links CUDA or NCCL: these are paths handed to nvcc and to the ranks.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braid/platform/machine.hpp"

namespace braid {

// The result of the search, paths only (no program is run besides python3 for the wheel); a
// field is empty when nothing was found. What `braid env --shell` prints.
struct Toolchain {
  std::filesystem::path cuda_home;
  std::filesystem::path nvcc;
  std::filesystem::path nccl_include;    // holds nccl.h (and nccl_device.h when any candidate has it)
  std::filesystem::path nccl_library;    // libnccl.so.2 or libnccl.so, by full path
  std::string nccl_include_origin;       // the step of the order: "BRAID_NCCL_INCLUDE", "NCCL_HOME",
  std::string nccl_library_origin;       //   "python wheel", "CUDA toolkit", "/usr", "BRAID_NCCL_LIB"
  std::filesystem::path nccl_wheel;      // the nvidia.nccl package folder, when there is one
  std::filesystem::path device_include;  // braid's device/include

  // The variables scripts read, in a fixed order: BRAID_CUDA_HOME, BRAID_NVCC,
  // BRAID_NCCL_INCLUDE, BRAID_NCCL_LIB (the library's folder), BRAID_NCCL_WHEEL, BRAID_DEVICE_INCLUDE.
  std::vector<std::pair<std::string, std::string>> shell_variables() const;
  // Those variables as NAME='value' lines a shell can `eval` (single quotes escaped).
  std::string shell_text() const;
};

// The candidate lists of the order above, for the current environment (exposed for tests and for
// `braid env`, which prints them).
struct SearchOrder {
  std::vector<std::filesystem::path> cuda_homes;
  std::vector<std::pair<std::filesystem::path, std::string>> nccl_roots;  // (root, origin)
  std::vector<std::filesystem::path> device_includes;
};
SearchOrder search_order();

// Runs the search. Never fails: missing parts stay empty.
Toolchain search_toolchain();

struct NcclInstall {
  std::filesystem::path include_dir;  // holds nccl.h (and nccl_device.h for the device API)
  std::filesystem::path library;      // libnccl.so or libnccl.so.2, linked by full path
  std::string header_version;         // "2.28.9" from nccl.h, "" if unknown
  std::string library_version;        // "2.28.9+cuda13.0" from the library's text, "" if unknown
  std::string origin;                 // where the library was found (Toolchain::nccl_library_origin)
};

// A toolchain that can build: nvcc found and its version known.
struct CudaToolchain {
  std::filesystem::path cuda_home;
  std::filesystem::path nvcc;
  std::string nvcc_version;                    // last line of `nvcc --version`
  std::string compiler_identity;               // nvcc and host compiler versions, for cache keys
  std::optional<NcclInstall> nccl;             // set when both headers and library were found
  std::filesystem::path device_include;        // braid's device/include, empty if not found

  // One line for logs and errors.
  std::string describe() const;
};

// search_toolchain(), then `nvcc --version`; nullopt with `why` when there is no working nvcc.
// Thread-safe, cached per process after the first call.
std::optional<CudaToolchain> find_cuda_toolchain(std::string* why = nullptr);

// Uncached, for tests and `braid env`.
std::optional<CudaToolchain> discover_cuda_toolchain(std::string* why = nullptr);

// braid's device/include (see the order above), empty when not found.
std::filesystem::path find_device_include();

// "2.28.9" from a nccl.h (NCCL_MAJOR/MINOR/PATCH), "" if absent.
std::string nccl_header_version(const std::filesystem::path& nccl_h);
// "2.28.9+cuda13.0" from the "NCCL version ..." text inside a libnccl, "" if absent.
std::string nccl_library_version(const std::filesystem::path& library);

// nvcc arguments for an architecture name: "sm_90" -> -gencode=arch=compute_90,code=sm_90;
// "sm_90a" -> -gencode=arch=compute_90a,code=sm_90a (wgmma). "auto" takes the first GPU's
// compute capability, or sm_90 where there is no GPU. nullopt for a malformed name.
std::optional<std::string> resolve_arch(const std::string& arch, const std::vector<GpuInfo>& gpus);
std::optional<std::vector<std::string>> arch_flags(const std::string& resolved_arch);

}  // namespace braid
