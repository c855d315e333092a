// The backend context of a mutation's system message: what the model needs to write correct
// device code for its island's API type, within a token budget. It is assembled from
//   * prompts/reference_<api>.md, a short hand-written orientation (a template, overridable),
//   * the contracts of braid's device headers (device_header_contracts),
//   * prompts/strategies_<api>.md,
//   * NCCL's device API declarations from the installed headers (nccl_device_api), for the
//     backends that talk through it (lsa, gin, hybrid): generated, so it never drifts from the code.
// A one-rank workload ("cuda") gets no NCCL and no communication library at all.
// docs/prompt-reference.md shows the sizes and a sample (`braid prompt-reference`).
#pragma once
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "braid/llm/settings.hpp"
#include "braid/llm/prompt_template.hpp"
#include "braid/platform/device_headers.hpp"

namespace braid {

// The API types a program can be written against (LlmSettings::api_type).
const std::vector<std::string>& api_types();

// A GPU workload of one rank (`evaluator` of workload.yaml: kind gpu, ranks 1) talks to no one:
// every island gets "cuda", so its prompts carry no NCCL reference. Other workloads keep `s`.
void apply_workload_api_type(LlmSettings& s, const json& evaluator);

struct ReferenceSection {
  std::string name;  // "reference_lsa.md", "braid/harness.cuh", "nccl_device/core.h"
  std::string text;  // ends with a newline
};

// What the sections are made from; reference_inputs() reads the real ones.
struct ReferenceInputs {
  std::vector<HeaderContract> braid;       // braid's device headers
  std::vector<ApiHeader> nccl;             // NCCL's device API (empty: no NCCL >= 2.28 headers found)
  std::string nccl_origin;                 // "<include dir> (NCCL 2.28.9)", for the heading
  const llm::PromptLibrary* prompts = nullptr;  // null: no templates
};

// braid's device/include and the NCCL headers the platform module finds (search_toolchain()).
ReferenceInputs reference_inputs(const llm::PromptLibrary* prompts);

// The sections for `api_type`, most important first. Unknown API types get the orientation and
// harness only.
std::vector<ReferenceSection> reference_sections(const std::string& api_type, const ReferenceInputs& in);

struct BackendReference {
  std::string text;
  std::vector<std::string> shown;     // sections shown whole
  std::string cut;                    // the section cut at a line boundary ("" if none)
  std::vector<std::string> left_out;  // sections the budget left out entirely
};

// ~4 characters a token (code runs denser, prose lighter): the unit of backend_context_tokens.
std::size_t approx_tokens(std::size_t chars);

// Sections in order while they fit in `max_tokens`; the first that does not fit is cut after its
// last whole line that fits (a marker line says so), and the rest are left out. 0 = no limit.
BackendReference fit_reference(const std::vector<ReferenceSection>& sections, std::size_t max_tokens);

}  // namespace braid
