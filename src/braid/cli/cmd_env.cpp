// `braid env`: where braid finds CUDA, NCCL and its device headers, and what the machine has
// (platform/). `--shell` prints the toolchain as NAME='value' lines for scripts/find-cuda.sh.
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "braid/cli/command.hpp"
#include "braid/platform/machine.hpp"
#include "braid/platform/toolchain.hpp"

namespace braid::cli {
namespace {

std::string or_none(const std::filesystem::path& p) { return p.empty() ? "none found" : p.string(); }

std::string joined(const std::vector<std::filesystem::path>& paths) {
  std::string out;
  for (const auto& p : paths) out += (out.empty() ? "" : ", ") + p.string();
  return out;
}

void print_toolchain(const Toolchain& t) {
  std::string why;
  const auto tc = t.nvcc.empty() ? std::nullopt : discover_cuda_toolchain(&why);
  std::printf("CUDA\n  nvcc            %s%s\n  CUDA home       %s\n", or_none(t.nvcc).c_str(),
              tc ? (" (" + tc->nvcc_version + ")").c_str() : (why.empty() ? "" : (" (" + why + ")").c_str()),
              or_none(t.cuda_home).c_str());
  const bool device_api = !t.nccl_include.empty() && std::filesystem::exists(t.nccl_include / "nccl_device.h");
  std::printf("NCCL\n  headers         %s", or_none(t.nccl_include).c_str());
  if (!t.nccl_include.empty())
    std::printf(" [%s] version %s, device API %s", t.nccl_include_origin.c_str(),
                nccl_header_version(t.nccl_include / "nccl.h").c_str(), device_api ? "yes (nccl_device.h)" : "no");
  std::printf("\n  library         %s", or_none(t.nccl_library).c_str());
  if (!t.nccl_library.empty()) {
    std::error_code ec;
    std::printf(" [%s] version %s", t.nccl_library_origin.c_str(),
                nccl_library_version(std::filesystem::canonical(t.nccl_library, ec)).c_str());
  }
  std::printf("\n  python wheel    %s\n", or_none(t.nccl_wheel).c_str());
  std::printf("braid device headers  %s\n", or_none(t.device_include).c_str());
}

void print_machine(const MachineFacts& m) {
  std::printf("Machine\n  GPUs            ");
  if (m.gpus.empty()) std::printf("none (nvidia-smi, /proc/driver/nvidia/gpus)\n");
  else std::printf("%zu [%s]\n", m.gpus.size(), m.gpu_source.c_str());
  for (const auto& g : m.gpus)
    std::printf("    %d: %s, compute capability %s, %.0f GiB\n", g.index, g.name.c_str(),
                g.compute_cap.empty() ? "?" : g.compute_cap.c_str(), g.memory_gib);
  if (!m.gpus.empty()) std::printf("  NVLink (GPU 0)  %d active links, %.0f GB/s\n", m.nvlink_links, m.nvlink_gb_s);
  std::string rdma;
  for (const auto& d : m.rdma_devices) rdma += (rdma.empty() ? "" : ", ") + d;
  std::printf("  RDMA NICs       %s\n", rdma.empty() ? "none (/sys/class/infiniband)" : rdma.c_str());
}

void print_order(const SearchOrder& order) {
  std::string roots;
  for (const auto& [root, origin] : order.nccl_roots) roots += (roots.empty() ? "" : ", ") + root.string() + " (" + origin + ")";
  std::printf("Search order (first match wins; src/braid/platform/toolchain.hpp)\n"
              "  nvcc            %s\n  NCCL roots      %s\n"
              "                  headers: BRAID_NCCL_INCLUDE, then <root>/include; with nccl_device.h first\n"
              "                  library: BRAID_NCCL_LIB, then <root>/lib64, lib, lib/x86_64-linux-gnu\n"
              "  device headers  %s\n",
              joined(order.cuda_homes).c_str(), roots.c_str(), joined(order.device_includes).c_str());
}

int do_env(bool shell) {
  const Toolchain t = search_toolchain();
  if (shell) {
    std::fputs(t.shell_text().c_str(), stdout);
    return 0;
  }
  print_toolchain(t);
  print_machine(probe_machine());
  print_order(search_order());
  return 0;
}

Registrar env_reg(85, [](CLI::App& app, Action& action) {
  static bool shell = false;
  auto* cmd = app.add_subcommand("env", "Where braid finds CUDA, NCCL and its device headers, and this machine's GPUs and NICs");
  cmd->add_flag("--shell", shell, "Print the toolchain as NAME='value' lines for `eval` (scripts/find-cuda.sh)");
  cmd->callback([&action] { action = [] { return do_env(shell); }; });
});

}  // namespace
}  // namespace braid::cli
