#include "braid/mutate/backend_reference.hpp"

#include <algorithm>
#include <sstream>

#include "braid/platform/toolchain.hpp"

namespace braid {
namespace {

// Which NCCL device headers each backend needs, most important first: the ones its own
// communication goes through, then teams/windows (core.h) and the ncclDevComm fields, then the
// cooperation groups every call takes and the typed symmetric pointers.
const std::vector<std::string>& nccl_headers_for(const std::string& api_type) {
  static const std::vector<std::string> none;
  static const std::vector<std::string> lsa = {"nccl_device/core.h", "nccl_device/impl/comm__types.h",
                                               "nccl_device/lsa_barrier.h", "nccl_device/coop.h",
                                               "nccl_device/ptr.h", "nccl_device/ll_a2a.h"};
  static const std::vector<std::string> gin = {"nccl_device/gin.h", "nccl_device/gin_barrier.h",
                                               "nccl_device/barrier.h", "nccl_device/core.h",
                                               "nccl_device/impl/comm__types.h", "nccl_device/coop.h",
                                               "nccl_device/ptr.h"};
  static const std::vector<std::string> hybrid = {
      "nccl_device/core.h",        "nccl_device/impl/comm__types.h", "nccl_device/lsa_barrier.h",
      "nccl_device/gin.h",         "nccl_device/barrier.h",          "nccl_device/gin_barrier.h",
      "nccl_device/coop.h",        "nccl_device/ptr.h",              "nccl_device/ll_a2a.h"};
  if (api_type == "lsa") return lsa;
  if (api_type == "gin") return gin;
  if (api_type == "hybrid") return hybrid;
  return none;  // host (NCCL's host collectives), cuda (one GPU)
}

bool talks_between_ranks(const std::string& api_type) {
  return api_type == "lsa" || api_type == "gin" || api_type == "hybrid" || api_type == "host";
}

std::string with_newline(std::string s) {
  if (!s.empty() && s.back() != '\n') s += '\n';
  return s;
}

void add_template(std::vector<ReferenceSection>& out, const ReferenceInputs& in, const std::string& name) {
  if (in.prompts && in.prompts->has(name)) out.push_back({name, with_newline(in.prompts->text(name))});
}

void add_contract(std::vector<ReferenceSection>& out, const ReferenceInputs& in, const std::string& name) {
  for (const auto& h : in.braid)
    if (h.name == name) out.push_back({"braid/" + name, h.prompt_section()});
}

}  // namespace

const std::vector<std::string>& api_types() {
  static const std::vector<std::string> t = {"lsa", "gin", "hybrid", "host", "cuda"};
  return t;
}

void apply_workload_api_type(LlmSettings& s, const json& evaluator) {
  if (!evaluator.is_object() || evaluator.value("kind", "") != "gpu" || evaluator.value("ranks", 1) != 1) return;
  s.api_type = "cuda";
  s.island_api_types.clear();
}

ReferenceInputs reference_inputs(const llm::PromptLibrary* prompts) {
  ReferenceInputs in;
  in.prompts = prompts;
  in.braid = device_header_contracts(find_device_include());
  const Toolchain t = search_toolchain();
  in.nccl = nccl_device_api(t.nccl_include);
  if (!in.nccl.empty()) {
    const std::string version = nccl_header_version(t.nccl_include / "nccl.h");
    in.nccl_origin = t.nccl_include.string() + (version.empty() ? "" : " (NCCL " + version + ")");
  }
  return in;
}

std::vector<ReferenceSection> reference_sections(const std::string& api_type, const ReferenceInputs& in) {
  std::vector<ReferenceSection> out;
  add_template(out, in, "reference_" + api_type + ".md");
  add_contract(out, in, "harness.cuh");
  if (talks_between_ranks(api_type)) add_contract(out, in, "comm.cuh");
  add_template(out, in, "strategies_" + api_type + ".md");
  bool first_nccl = true;
  for (const auto& name : nccl_headers_for(api_type))
    for (const auto& h : in.nccl) {
      if (h.name != name) continue;
      std::string text = h.prompt_section();
      // One line tells where the declarations come from, so a reader can check them.
      if (first_nccl)
        text = "NCCL device API: the declarations of " + in.nccl_origin +
               " with the comments above them; bodies left out.\n" + text;
      first_nccl = false;
      out.push_back({h.name, std::move(text)});
    }
  if (talks_between_ranks(api_type)) add_contract(out, in, "runtime.cuh");
  return out;
}

std::size_t approx_tokens(std::size_t chars) { return (chars + 3) / 4; }

BackendReference fit_reference(const std::vector<ReferenceSection>& sections, std::size_t max_tokens) {
  BackendReference r;
  const std::size_t budget = max_tokens == 0 ? std::string::npos : max_tokens * 4;
  std::size_t i = 0;
  for (; i < sections.size(); ++i) {
    const auto& s = sections[i];
    const std::string sep = r.text.empty() ? "" : "\n";
    if (r.text.size() + sep.size() + s.text.size() > budget) break;
    r.text += sep + s.text;
    r.shown.push_back(s.name);
  }
  if (i == sections.size()) return r;
  // The section that does not fit: whole lines while they and the marker fit.
  const auto& s = sections[i];
  std::vector<std::string> lines;
  {
    std::istringstream in(s.text);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  std::string part = r.text.empty() ? "" : "\n";
  std::size_t kept = 0;
  auto marker = [&](std::size_t left) {
    return "[... " + std::to_string(left) + " more lines of " + s.name + " left out: backend_context_tokens]\n";
  };
  while (kept < lines.size() &&
         r.text.size() + part.size() + lines[kept].size() + 1 + marker(lines.size() - kept - 1).size() <= budget)
    part += lines[kept++] + "\n";
  if (kept > 0) {
    r.text += part + marker(lines.size() - kept);
    r.cut = s.name;
  } else {
    r.left_out.push_back(s.name);
  }
  for (++i; i < sections.size(); ++i) r.left_out.push_back(sections[i].name);
  return r;
}

}  // namespace braid
