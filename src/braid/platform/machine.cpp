#include "braid/platform/machine.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>
#include <tuple>

#include "braid/platform/probe.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/text.hpp"

namespace braid {
namespace {

std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream in(line);
  for (std::string field; std::getline(in, field, ',');) fields.push_back(trimmed(field));
  return fields;
}

std::string proc_gpu_model(const std::filesystem::path& information) {
  auto text = try_read_file(information);
  if (!text) return {};
  std::size_t at = text->find("Model:");
  if (at == std::string::npos) return {};
  std::size_t end = text->find('\n', at);
  return trimmed(text->substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6));
}

// Without nvidia-smi (a minimal container) the driver still lists its GPUs.
std::vector<GpuInfo> proc_gpus() {
  std::vector<std::filesystem::path> entries;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) entries.push_back(entry.path());
  std::sort(entries.begin(), entries.end());
  std::vector<GpuInfo> gpus;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    GpuInfo gpu;
    gpu.index = static_cast<int>(i);
    gpu.name = proc_gpu_model(entries[i] / "information");
    gpus.push_back(gpu);
  }
  return gpus;
}

std::vector<GpuInfo> smi_gpus() {
  auto smi = platform_detail::run_probe(
      {"nvidia-smi", "--query-gpu=index,name,compute_cap,memory.total,uuid", "--format=csv,noheader,nounits"}, 30.0);
  return smi.succeeded() ? parse_gpu_query(smi.stdout_text) : std::vector<GpuInfo>{};
}

}  // namespace

std::vector<GpuInfo> parse_gpu_query(const std::string& csv) {
  std::vector<GpuInfo> gpus;
  std::istringstream in(csv);
  for (std::string line; std::getline(in, line);) {
    auto fields = split_fields(line);
    // Lines that are not rows (an error text of nvidia-smi) do not start with an index.
    if (fields.size() < 2 || fields[0].empty() || !std::isdigit(static_cast<unsigned char>(fields[0][0]))) continue;
    GpuInfo gpu;
    gpu.index = std::atoi(fields[0].c_str());
    gpu.name = fields[1];
    if (fields.size() > 2 && fields[2].find('.') != std::string::npos) gpu.compute_cap = fields[2];
    if (fields.size() > 3) gpu.memory_gib = std::atof(fields[3].c_str()) / 1024.0;  // MiB
    if (fields.size() > 4) gpu.uuid = fields[4];
    gpus.push_back(gpu);
  }
  return gpus;
}

std::pair<int, double> parse_nvlink_status(const std::string& text) {
  int links = 0;
  double gb_s = 0.0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto colon = line.find(':');
    if (line.find("Link") == std::string::npos || colon == std::string::npos) continue;
    std::string rate = trimmed(line.substr(colon + 1));
    if (rate.find("GB/s") == std::string::npos) continue;  // "<inactive>"
    ++links;
    gb_s += std::atof(rate.c_str());
  }
  return {links, gb_s};
}

std::vector<std::string> list_rdma_devices(const std::filesystem::path& sys_class) {
  std::vector<std::string> devices;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(sys_class, ec)) devices.push_back(entry.path().filename().string());
  std::sort(devices.begin(), devices.end());
  return devices;
}

std::vector<GpuInfo> visible_gpus(const std::vector<GpuInfo>& all, const char* cuda_visible_devices) {
  if (cuda_visible_devices == nullptr) return all;
  std::vector<GpuInfo> visible;
  for (const auto& entry : split_fields(cuda_visible_devices)) {
    // A MIG instance is no GPU of nvidia-smi's list: the lease cannot name it, so the variable is
    // left to the ranks as it is (every GPU is detected, as without it).
    if (entry.rfind("MIG-", 0) == 0) return all;
    auto named = std::find_if(all.begin(), all.end(), [&](const GpuInfo& gpu) {
      if (!entry.empty() && std::all_of(entry.begin(), entry.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
        return gpu.index == std::atoi(entry.c_str());
      const std::string uuid = entry.rfind("GPU-", 0) == 0 ? entry : "GPU-" + entry;
      return !entry.empty() && !gpu.uuid.empty() && gpu.uuid.rfind(uuid, 0) == 0;
    });
    if (named == all.end()) break;
    visible.push_back(*named);
  }
  return visible;
}

std::vector<GpuInfo> detect_gpus() {
  auto gpus = smi_gpus();
  return visible_gpus(gpus.empty() ? proc_gpus() : gpus, std::getenv("CUDA_VISIBLE_DEVICES"));
}

MachineFacts probe_machine() {
  MachineFacts m;
  m.gpus = smi_gpus();
  m.gpu_source = "nvidia-smi";
  if (m.gpus.empty()) {
    m.gpus = proc_gpus();
    m.gpu_source = m.gpus.empty() ? "none" : "/proc/driver/nvidia/gpus";
  }
  m.gpus = visible_gpus(m.gpus, std::getenv("CUDA_VISIBLE_DEVICES"));
  if (!m.gpus.empty()) {
    auto links = platform_detail::run_probe({"nvidia-smi", "nvlink", "-s", "-i", std::to_string(m.gpus.front().index)});
    if (links.succeeded()) std::tie(m.nvlink_links, m.nvlink_gb_s) = parse_nvlink_status(links.stdout_text);
  }
  m.rdma_devices = list_rdma_devices();
  return m;
}

}  // namespace braid
