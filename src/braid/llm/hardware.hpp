// Facts about the machine shown to the model (system message) and used to skip islands whose
// API type cannot run here. Probed once (platform/machine.hpp: nvidia-smi, /sys/class/infiniband)
// and cached as JSON; a facts file written by a measuring probe (same keys) takes precedence.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "braid/util/json.hpp"

namespace braid::llm {

struct HardwareFacts {
  std::string gpu_name;            // "" when no GPU was found
  int gpu_count = 0;
  int sm_count = 0;                // 0 when unknown
  std::string compute_capability;  // "9.0"
  double gpu_memory_gib = 0.0;
  int nvlink_links = 0;            // active links of GPU 0
  double nvlink_gb_s = 0.0;        // GPU 0's NVLink bandwidth per direction (measured or link rate)
  bool nvlink_measured = false;    // true when a probe measured it, false for nvidia-smi link rates
  double network_gb_s = 0.0;       // RDMA bandwidth when measured
  std::vector<std::string> rdma_devices;  // /sys/class/infiniband entries
  std::string source;              // "nvidia-smi", a facts file's path, or "none"

  std::string describe() const;    // a few lines for the prompt
  json to_json() const;
  static HardwareFacts from_json(const json& j);
};

// Reads `cache_file` when it exists, else probes and writes it (when the path is non-empty).
HardwareFacts probe_hardware(const std::filesystem::path& cache_file);

// The facts a run is checked and prompted against: the `hardware_facts` file when set, else those
// a replayed run recorded (<replay_dir>/hardware.json, so its prompts match; copied to `cache`),
// else this machine's (probe_hardware, cached in `cache` when non-empty).
HardwareFacts run_hardware_facts(const std::string& facts_file, const std::filesystem::path& replay_dir,
                                 const std::filesystem::path& cache);

// Whether an island of `api_type` ("lsa", "gin", "hybrid", "host") can run here; `why` gets the
// reason when not (GIN without an RDMA NIC, LSA without GPUs sharing NVLink).
bool api_type_runnable(const std::string& api_type, const HardwareFacts& hw, std::string* why);

}  // namespace braid::llm
