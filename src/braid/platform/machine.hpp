// Facts about this machine's GPUs and network, probed rather than assumed: the one place braid
// asks nvidia-smi and /sys/class/infiniband. (The device headers probe /sys/class/infiniband once
// more inside each rank, device/include/braid/comm.cuh: candidates do not link braid.)
//
// GPUs: `nvidia-smi --query-gpu=index,name,compute_cap,memory.total`, else the driver's
// /proc/driver/nvidia/gpus (a minimal container without nvidia-smi). NVLink: the active links of
// the first visible GPU (`nvidia-smi nvlink -s -i N`). RDMA: the entries of /sys/class/infiniband.
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace braid {

struct GpuInfo {
  int index = 0;
  std::string name;            // "NVIDIA H100 80GB HBM3"
  std::string compute_cap;     // "9.0", "" if unknown
  double memory_gib = 0.0;     // 0 when unknown
  std::string uuid;            // "GPU-5c2f...", "" if unknown
};

struct MachineFacts {
  std::vector<GpuInfo> gpus;
  std::string gpu_source;                 // "nvidia-smi", "/proc/driver/nvidia/gpus" or "none"
  int nvlink_links = 0;                   // active links of the first visible GPU
  double nvlink_gb_s = 0.0;               // their summed link rate per direction
  std::vector<std::string> rdma_devices;  // /sys/class/infiniband entries, sorted
};

// GPUs of this machine that CUDA_VISIBLE_DEVICES lets braid use (all when it is unset); empty
// when there are none. Indices stay nvidia-smi's, so a lease handed to ranks as
// CUDA_VISIBLE_DEVICES names the same devices the user allowed.
std::vector<GpuInfo> detect_gpus();

// GPUs, NVLink of GPU 0 (only asked when there is a GPU) and RDMA devices. Not cached: the
// callers keep what they need.
MachineFacts probe_machine();

// Parsers of the probes' text, exposed for tests.
// `nvidia-smi --query-gpu=index,name,compute_cap,memory.total,uuid --format=csv,noheader,nounits`.
std::vector<GpuInfo> parse_gpu_query(const std::string& csv);
// The GPUs of `all` that a CUDA_VISIBLE_DEVICES value selects, in its order: entries are indices or
// (prefixes of) UUIDs; as in CUDA, the list ends at the first entry that names no GPU. Unset
// (nullptr), or naming a MIG instance (`MIG-...`, not in nvidia-smi's GPU list): all of them.
std::vector<GpuInfo> visible_gpus(const std::vector<GpuInfo>& all, const char* cuda_visible_devices);
// `nvidia-smi nvlink -s -i N`: (active links, summed GB/s).
std::pair<int, double> parse_nvlink_status(const std::string& text);
// Entries of a /sys/class/infiniband-like folder, sorted; empty when it does not exist.
std::vector<std::string> list_rdma_devices(const std::filesystem::path& sys_class = "/sys/class/infiniband");

}  // namespace braid
