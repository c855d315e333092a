// The contracts of braid's device headers (the leading comment of each device/include/braid/
// header), which the prompts show the model: the rewrite loop's primitives and the LLM mutator's
// backend context read them from here.
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

}  // namespace braid
