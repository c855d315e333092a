#include "braid/llm/hardware.hpp"

#include <sstream>

#include <fmt/format.h>

#include "braid/platform/machine.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/log.hpp"

namespace braid::llm {
namespace {

// nvidia-smi does not report SMs; these are the published counts of the usual data-centre parts.
int known_sm_count(const std::string& name) {
  struct Entry { const char* key; int sms; };
  static const Entry table[] = {{"H200", 132}, {"H100 PCIe", 114}, {"H100", 132}, {"GH200", 132}, {"B200", 148},
                                {"B100", 132}, {"A100", 108},      {"A800", 108}, {"L40S", 142},  {"L40", 142},
                                {"L4", 58},    {"V100", 80},       {"RTX 4090", 128}, {"A10", 72}};
  for (auto& e : table)
    if (name.find(e.key) != std::string::npos) return e.sms;
  return 0;
}

}  // namespace

std::string HardwareFacts::describe() const {
  std::ostringstream s;
  if (gpu_name.empty()) {
    s << "- No GPU was detected on the machine that runs the search.\n";
  } else {
    s << "- GPUs: " << gpu_count << " x " << gpu_name;
    if (!compute_capability.empty()) s << " (compute capability " << compute_capability << ")";
    if (gpu_memory_gib > 0) s << fmt::format(", {:.0f} GiB each", gpu_memory_gib);
    s << "\n";
    if (sm_count > 0) s << "- SMs per GPU: " << sm_count << "\n";
  }
  if (nvlink_links > 0)
    s << fmt::format("- NVLink: {} links, {:.0f} GB/s per direction per GPU ({})\n", nvlink_links, nvlink_gb_s,
                     nvlink_measured ? "measured" : "link rate");
  else if (!gpu_name.empty())
    s << "- NVLink: none detected (peer traffic goes over PCIe)\n";
  if (!rdma_devices.empty()) {
    s << "- RDMA NICs: ";
    for (std::size_t i = 0; i < rdma_devices.size(); ++i) s << (i ? ", " : "") << rdma_devices[i];
    if (network_gb_s > 0) s << fmt::format(" ({:.0f} GB/s measured)", network_gb_s);
    s << "\n";
  } else {
    s << "- RDMA NICs: none (GIN cannot run here)\n";
  }
  return s.str();
}

json HardwareFacts::to_json() const {
  return {{"gpu_name", gpu_name},         {"gpu_count", gpu_count},       {"sm_count", sm_count},
          {"compute_capability", compute_capability}, {"gpu_memory_gib", gpu_memory_gib},
          {"nvlink_links", nvlink_links}, {"nvlink_gb_s", nvlink_gb_s},   {"nvlink_measured", nvlink_measured},
          {"network_gb_s", network_gb_s}, {"rdma_devices", rdma_devices}, {"source", source}};
}

HardwareFacts HardwareFacts::from_json(const json& j) {
  HardwareFacts h;
  h.gpu_name = j.value("gpu_name", "");
  h.gpu_count = j.value("gpu_count", 0);
  h.sm_count = j.value("sm_count", 0);
  h.compute_capability = j.value("compute_capability", "");
  h.gpu_memory_gib = j.value("gpu_memory_gib", 0.0);
  h.nvlink_links = j.value("nvlink_links", 0);
  h.nvlink_gb_s = j.value("nvlink_gb_s", 0.0);
  h.nvlink_measured = j.value("nvlink_measured", false);
  h.network_gb_s = j.value("network_gb_s", 0.0);
  h.rdma_devices = j.value("rdma_devices", std::vector<std::string>{});
  h.source = j.value("source", "");
  if (h.sm_count == 0) h.sm_count = known_sm_count(h.gpu_name);
  return h;
}

HardwareFacts probe_hardware(const std::filesystem::path& cache_file) {
  if (!cache_file.empty()) {
    if (auto text = try_read_file(cache_file)) {
      json j = json::parse(*text, nullptr, false);
      if (!j.is_discarded() && j.is_object()) {
        auto h = HardwareFacts::from_json(j);
        if (h.source.empty()) h.source = cache_file.string();
        return h;
      }
    }
  }
  const MachineFacts machine = probe_machine();
  HardwareFacts h;
  h.source = machine.gpus.empty() ? "none" : machine.gpu_source;
  h.gpu_count = static_cast<int>(machine.gpus.size());
  if (!machine.gpus.empty()) {
    h.gpu_name = machine.gpus[0].name;
    h.gpu_memory_gib = machine.gpus[0].memory_gib;
    h.compute_capability = machine.gpus[0].compute_cap;
  }
  h.sm_count = known_sm_count(h.gpu_name);
  h.nvlink_links = machine.nvlink_links;
  h.nvlink_gb_s = machine.nvlink_gb_s;
  h.rdma_devices = machine.rdma_devices;
  if (!cache_file.empty()) {
    try {
      write_file_atomic(cache_file, h.to_json().dump(2) + "\n");
    } catch (const std::exception& e) {
      log::warn("cannot cache hardware facts: {}", e.what());
    }
  }
  return h;
}

HardwareFacts run_hardware_facts(const std::string& facts_file, const std::filesystem::path& replay_dir,
                                 const std::filesystem::path& cache) {
  if (!facts_file.empty()) return probe_hardware(facts_file);
  const std::filesystem::path recorded = replay_dir.empty() ? "" : replay_dir / "hardware.json";
  if (recorded.empty() || !std::filesystem::exists(recorded)) return probe_hardware(cache);
  HardwareFacts h = probe_hardware(recorded);
  if (!cache.empty()) write_file_atomic(cache, h.to_json().dump(2) + "\n");
  return h;
}

bool api_type_runnable(const std::string& api_type, const HardwareFacts& hw, std::string* why) {
  auto fail = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  if (api_type == "gin" && hw.rdma_devices.empty())
    return fail("GIN needs an RDMA NIC and none was found under /sys/class/infiniband");
  if ((api_type == "lsa" || api_type == "hybrid") && hw.gpu_count > 0 && hw.nvlink_links == 0)
    return fail("LSA needs GPUs connected by NVLink and nvidia-smi reports no active link");
  if (api_type == "hybrid" && hw.rdma_devices.empty())
    return fail("the hybrid API type needs an RDMA NIC for its GIN part and none was found");
  return true;
}

}  // namespace braid::llm
