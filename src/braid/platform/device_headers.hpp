// What the prompts show the model about the device code it writes, read from the headers
// themselves so it never drifts from the code:
//   * the contracts of braid's device headers (the leading comment of each device/include/braid/
//     header): the rewrite loop's primitives and the LLM mutator's backend context;
//   * the declarations of NCCL's device API (nccl_device/*.h of the NCCL found by the platform
//     module): names, signatures and the comment lines above them, function bodies left out.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace braid {

struct HeaderContract {
  std::string name;      // "comm.cuh"
  std::string contract;  // the header's leading comment (at most 80 lines)

  // "### braid/comm.cuh\n<contract>\n", the form the prompts use.
  std::string prompt_section() const;
};

// Contracts of <device_include>/braid/*.cuh, *.h, *.hpp, sorted by name; headers without a leading
// comment are left out. Empty when the folder does not exist.
std::vector<HeaderContract> device_header_contracts(const std::filesystem::path& device_include);

// One top-level declaration of a header: a function, a type (with its public members, inline
// bodies cut to signatures), a typedef. `lines` holds the comment lines right above it (no blank
// line between), then the declaration, macros like NCCL_DEVICE_INLINE spelled as __device__.
struct ApiDeclaration {
  std::string name;  // the declared name: "ncclGetLsaPointer", "ncclLsaBarrierSession"
  std::vector<std::string> lines;
};

// The declarations of one C/C++ header text. Left out: preprocessor lines, the file's opening
// /* ... */ block, forward declarations, function bodies, names starting with '_' or ending in
// "_internal"/"_stash" (implementation details), and repeated overloads of one operator.
std::vector<ApiDeclaration> header_declarations(const std::string& text);

struct ApiHeader {
  std::string name;  // "nccl_device/lsa_barrier.h"
  std::vector<ApiDeclaration> declarations;

  // "### nccl_device/lsa_barrier.h\n<declarations, a blank line between two>\n"
  std::string prompt_section() const;
};

// NCCL's device API under `nccl_include`: every nccl_device/*.h that declares something (not the
// internal utility.h and net_device.h), sorted by name, then "nccl_device/impl/comm__types.h"
// with only struct ncclDevComm (its rank/lsaRank/lsaSize fields are what kernels read). Empty when
// `nccl_include` has no nccl_device.h (NCCL older than 2.28, or none found).
std::vector<ApiHeader> nccl_device_api(const std::filesystem::path& nccl_include);

}  // namespace braid
