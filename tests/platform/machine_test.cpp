// platform/machine and platform/device_headers: the probes' text parsed (nvidia-smi's GPU query
// and NVLink status, a /sys/class/infiniband-like folder), the header contracts the prompts show.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "braid/platform/device_headers.hpp"
#include "braid/platform/machine.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& tag) {
  auto dir = fs::temp_directory_path() / ("braid_platform_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(Machine, ParsesTheGpuQuery) {
  const auto gpus = parse_gpu_query(
      "0, NVIDIA H200, 9.0, 143771\n"
      "1, NVIDIA H200, 9.0, 143771\n"
      "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
      "\n"
      "2, NVIDIA A100-SXM4-80GB, [N/A], 81920\n");
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_EQ(gpus[0].name, "NVIDIA H200");
  EXPECT_EQ(gpus[0].compute_cap, "9.0");
  EXPECT_NEAR(gpus[0].memory_gib, 140.4, 0.1);
  EXPECT_EQ(gpus[2].index, 2);
  EXPECT_EQ(gpus[2].compute_cap, "");  // not a version: unknown
  EXPECT_TRUE(parse_gpu_query("").empty());
}

TEST(Machine, CudaVisibleDevicesSelectsGpusByIndexOrUuid) {
  const auto all = parse_gpu_query(
      "0, NVIDIA H100, 9.0, 81559, GPU-aaaa1111-0000\n"
      "1, NVIDIA H100, 9.0, 81559, GPU-bbbb2222-0000\n"
      "2, NVIDIA H100, 9.0, 81559, GPU-cccc3333-0000\n"
      "3, NVIDIA H100, 9.0, 81559, GPU-dddd4444-0000\n");
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[1].uuid, "GPU-bbbb2222-0000");
  auto indices = [](const std::vector<GpuInfo>& gpus) {
    std::vector<int> out;
    for (const auto& g : gpus) out.push_back(g.index);
    return out;
  };
  EXPECT_EQ(indices(visible_gpus(all, nullptr)), (std::vector<int>{0, 1, 2, 3}));  // unset: all
  EXPECT_EQ(indices(visible_gpus(all, "2,3")), (std::vector<int>{2, 3}));
  EXPECT_EQ(indices(visible_gpus(all, "3, 1")), (std::vector<int>{3, 1}));  // the user's order
  EXPECT_EQ(indices(visible_gpus(all, "GPU-cccc3333-0000,dddd")), (std::vector<int>{2, 3}));
  EXPECT_EQ(indices(visible_gpus(all, "1,7,2")), (std::vector<int>{1}));  // CUDA stops at 7
  EXPECT_TRUE(visible_gpus(all, "").empty());
  EXPECT_TRUE(visible_gpus(all, "-1").empty());
  EXPECT_EQ(indices(visible_gpus(all, "MIG-1234abcd")), (std::vector<int>{0, 1, 2, 3}));  // not ours to map
}

TEST(Machine, ParsesNvlinkStatus) {
  const auto [links, gb_s] = parse_nvlink_status(
      "GPU 0: NVIDIA H200 (UUID: GPU-1)\n"
      "\t Link 0: 26.562 GB/s\n"
      "\t Link 1: 26.562 GB/s\n"
      "\t Link 2: <inactive>\n");
  EXPECT_EQ(links, 2);
  EXPECT_NEAR(gb_s, 53.124, 1e-6);
  EXPECT_EQ(parse_nvlink_status("").first, 0);
}

TEST(Machine, ListsRdmaDevicesSorted) {
  auto dir = fresh_dir("ib");
  fs::create_directories(dir / "mlx5_1");
  fs::create_directories(dir / "mlx5_0");
  EXPECT_EQ(list_rdma_devices(dir), (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_TRUE(list_rdma_devices(dir / "absent").empty());
  fs::remove_all(dir);
}

TEST(Machine, ProbeIsConsistent) {
  // Whatever this machine has: the GPUs' source is named, and NVLink is only asked with a GPU.
  const MachineFacts m = probe_machine();
  if (m.gpus.empty()) {
    EXPECT_EQ(m.gpu_source, "none");
    EXPECT_EQ(m.nvlink_links, 0);
  } else {
    EXPECT_NE(m.gpu_source, "none");
  }
  EXPECT_EQ(detect_gpus().size(), m.gpus.size());
}

TEST(DeviceHeaders, ContractsSortedWithoutUncommentedHeaders) {
  auto dir = fresh_dir("hdr");
  fs::create_directories(dir / "braid");
  write_file_atomic(dir / "braid" / "zeta.cuh", "// Zeta: the last one.\n#pragma once\n");
  write_file_atomic(dir / "braid" / "alpha.h", "// Alpha: first.\n// Two lines.\n#pragma once\n");
  write_file_atomic(dir / "braid" / "plain.cuh", "#pragma once\n");
  write_file_atomic(dir / "braid" / "notes.txt", "// not a header\n");
  const auto contracts = device_header_contracts(dir);
  ASSERT_EQ(contracts.size(), 2u);
  EXPECT_EQ(contracts[0].name, "alpha.h");
  EXPECT_NE(contracts[0].contract.find("Two lines."), std::string::npos);
  EXPECT_EQ(contracts[1].name, "zeta.cuh");
  EXPECT_EQ(contracts[1].prompt_section().rfind("### braid/zeta.cuh\n", 0), 0u);
  EXPECT_TRUE(device_header_contracts(dir / "absent").empty());
  fs::remove_all(dir);
}

TEST(DeviceHeaders, TheRepositorysHeadersHaveContracts) {
  const auto contracts = device_header_contracts(fs::path(BRAID_SOURCE_DIR) / "device" / "include");
  std::vector<std::string> names;
  for (const auto& c : contracts) names.push_back(c.name);
  for (const char* expected : {"comm.cuh", "harness.cuh", "runtime.cuh"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
}

// Parts live in folders below braid/ (braid/comm/*.cuh, as NCCL's nccl_device/*.h below
// nccl_device.h): the prompts show the umbrella's contract, never a part's file comment.
TEST(DeviceHeaders, PartsInFoldersAreNotContracts) {
  auto dir = fresh_dir("parts");
  fs::create_directories(dir / "braid" / "comm");
  write_file_atomic(dir / "braid" / "comm.cuh",
                    "// Comm: the contract.\n#pragma once\n#include \"braid/comm/copy.cuh\"\n");
  write_file_atomic(dir / "braid" / "comm" / "copy.cuh", "// Copy: a part.\n#pragma once\n");
  const auto contracts = device_header_contracts(dir);
  ASSERT_EQ(contracts.size(), 1u);
  EXPECT_EQ(contracts[0].name, "comm.cuh");
  EXPECT_EQ(contracts[0].contract, "Comm: the contract.\n");
  fs::remove_all(dir);
}

// The umbrella's contract speaks for all its parts: every braid/<umbrella>/*.cuh is included by
// braid/<umbrella>.cuh, and the umbrella keeps the CONTRACT comment.
TEST(DeviceHeaders, TheRepositorysUmbrellasIncludeEveryPart) {
  const fs::path include = fs::path(BRAID_SOURCE_DIR) / "device" / "include";
  const auto contracts = device_header_contracts(include);
  for (const std::string umbrella : {"comm", "harness"}) {
    const std::string text = read_file(include / "braid" / (umbrella + ".cuh"));
    int parts = 0;
    for (const auto& e : fs::directory_iterator(include / "braid" / umbrella)) {
      const std::string line = "#include \"braid/" + umbrella + "/" + e.path().filename().string() + "\"";
      EXPECT_NE(text.find(line), std::string::npos) << umbrella << ".cuh lacks " << line;
      ++parts;
    }
    EXPECT_GT(parts, 1) << umbrella;
    auto c = std::find_if(contracts.begin(), contracts.end(),
                          [&](const HeaderContract& h) { return h.name == umbrella + ".cuh"; });
    ASSERT_NE(c, contracts.end()) << umbrella;
    EXPECT_NE(c->contract.find("CONTRACT (shown to the LLM as documentation)"), std::string::npos) << umbrella;
  }
}

// A pageable host-to-device cudaMemcpy may return before its DMA lands, and the harness's and the
// converted programs' streams are non-blocking: work on them could read the allocation's stale
// bytes (seen on 4 x H100 with four 1-rank benches at once: a verdict gathered before it was
// copied read as "rank -1: write outside buffer ''"). Every such copy in braid's device headers is
// ordered on a stream (cudaMemcpyAsync) instead.
TEST(DeviceHeaders, HostToDeviceCopiesAreStreamOrdered) {
  const fs::path include = fs::path(BRAID_SOURCE_DIR) / "device" / "include";
  int headers = 0;
  for (const auto& e : fs::recursive_directory_iterator(include / "braid")) {
    if (e.path().extension() != ".cuh") continue;
    ++headers;
    std::istringstream in(read_file(e.path()));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
      EXPECT_FALSE(line.find("cudaMemcpy(") != std::string::npos &&
                   line.find("cudaMemcpyHostToDevice") != std::string::npos)
          << e.path().lexically_relative(include).string() << ":" << n << ": " << line;
  }
  EXPECT_GT(headers, 10);
}

// Converted programs may make their communicator non-blocking (ncclConfig_t.blocking = 0, or
// NCCL_COMM_BLOCKING=0): NCCL 2.28 refused window registration on one ("invalid argument" on
// 2 x H100), so every creation wrapper of the converted runtime marks such a communicator, and
// ensure() never binds it (its calls stay host NCCL on every rank).
TEST(DeviceHeaders, ConvertedRuntimeNeverBindsNonBlockingCommunicators) {
  const fs::path converted = fs::path(BRAID_SOURCE_DIR) / "device" / "include" / "braid" / "converted";
  const std::string lifecycle = read_file(converted / "prelude_lifecycle.cuh");
  int creations = 0;
  for (const char* call : {"ncclCommInitRank(", "ncclCommInitRankConfig(", "ncclCommSplit("}) {
    const auto at = lifecycle.find(std::string("= ") + call);
    ASSERT_NE(at, std::string::npos) << call;
    const auto next_return = lifecycle.find("return", at);
    EXPECT_NE(lifecycle.substr(at, next_return - at).find("made_nonblocking("), std::string::npos) << call;
    ++creations;
  }
  EXPECT_EQ(creations, 3);
  const std::string session = read_file(converted / "prelude_session.cuh");
  const auto ensure = session.find("inline Binding* ensure(ncclComm_t comm) {");
  ASSERT_NE(ensure, std::string::npos);
  EXPECT_NE(session.substr(ensure, 700).find("nonblocking.count(comm)) return nullptr;"), std::string::npos);
  // A communicator bound at its first converted call (its creation not seen) under NCCL_COMM_BLOCKING=0.
  EXPECT_NE(session.substr(ensure, 700).find("binding_of(comm) == nullptr && env_nonblocking()"), std::string::npos);
  // One thread driving every rank: ncclCommInitAll's communicators under NCCL_COMM_BLOCKING=0, and
  // any remembered as non-blocking, are never bound together.
  const auto all = lifecycle.find("inline ncclResult_t comm_init_all(");
  ASSERT_NE(all, std::string::npos);
  EXPECT_NE(lifecycle.substr(all, 400).find("if (env_nonblocking())"), std::string::npos);
  const auto together = session.find("inline void bind_together(");
  ASSERT_NE(together, std::string::npos);
  EXPECT_NE(session.substr(together, 400).find("!s.nonblocking.count(c)"), std::string::npos);
}

}  // namespace
}  // namespace braid
