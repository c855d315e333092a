// workloads/gemm_allgather on the CPU: gen0.cu holds its strategy (kernels and host orchestration)
// inside its EVOLVE blocks with only includes and main() frozen, its knob space is unchanged
// (3916 valid vectors), and a loopback model's full rewrite (bench/rewrite_streamed.cu: a new SM
// pull kernel and a new schedule) goes through the LLM mutator and apply_patch into exactly that
// program. gen0 (two knob vectors) and the rewrite compile with nvcc (-c, sm_90).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "../llm/loopback_llm_server.hpp"
#include "braid/convert/gate.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/mutate/llm_mutator.hpp"
#include "braid/mutate/llm_runtime.hpp"
#include "braid/program/patch.hpp"
#include "braid/util/fs.hpp"

using namespace braid;

namespace {

const std::filesystem::path kDir = std::filesystem::path(BRAID_SOURCE_DIR) / "workloads/gemm_allgather";

Program parse_file(const std::filesystem::path& path) {
  Program p = Program::parse(read_file(path), path.string());
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error()->message);
  return p;
}

// The code outside the EVOLVE blocks, comment lines left out (the header comment describes the strategy).
std::string frozen_code(const Program& p) {
  std::string text = p.text();
  for (std::size_t i = p.blocks().size(); i-- > 0;) {
    const std::string_view block = p.block_text(i);
    text.erase(text.find(block), block.size());
  }
  std::string code, line;
  std::istringstream in(text);
  while (std::getline(in, line))
    if (line.rfind("//", 0) != 0) code += line + "\n";
  return code;
}

BuildResult nvcc_compile(const std::string& source, const std::string& name) {
  const auto work = std::filesystem::current_path() / "gemm-allgather-nvcc" / name;
  return convert::compile_only(source, work, name, kDir, {"-O0", "-std=c++20", "--expt-relaxed-constexpr"});
}

TEST(GemmAllgatherGen0, StrategyLivesInsideTheBlocks) {
  Program p = parse_file(kDir / "gen0.cu");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p.blocks().size(), 3u);
  EXPECT_EQ(p.blocks()[0].name, "knobs");
  EXPECT_EQ(p.blocks()[1].name, "kernels");
  EXPECT_EQ(p.blocks()[2].name, "host");
  EXPECT_NE(p.block_text(0).find("enum class Engine"), std::string_view::npos);  // a rewrite can add engines
  EXPECT_NE(p.block_text(1).find("__global__ void"), std::string_view::npos);
  for (const char* host : {"void setup(", "void move_rows(", "void wait_ready(", "void run(", "void teardown("})
    EXPECT_NE(p.block_text(2).find(host), std::string_view::npos) << host;
  // Frozen: the includes, the using-declarations and main() (the harness lives in the headers).
  const std::string frozen = frozen_code(p);
  for (const char* strategy : {"__global__", "cublasGemmEx", "ncclAllGather(", "cudaMemcpyAsync", "constexpr", "struct State"})
    EXPECT_EQ(frozen.find(strategy), std::string::npos) << strategy << " is frozen:\n" << frozen;
  EXPECT_NE(frozen.find("harness_main("), std::string::npos);

  // The knob space is what it was when the knobs were the only block: 10 knobs, 3916 valid vectors.
  ASSERT_EQ(p.knobs().size(), 10u);
  std::vector<std::size_t> at(p.knobs().size(), 0);
  int valid = 0;
  for (;;) {
    std::map<std::string, std::string> v;
    for (std::size_t k = 0; k < at.size(); ++k) v[p.knobs()[k].name] = p.knobs()[k].domain[at[k]];
    valid += p.violated_constraint(v).has_value() ? 0 : 1;
    std::size_t k = 0;
    while (k < at.size() && ++at[k] == p.knobs()[k].domain.size()) at[k++] = 0;
    if (k == at.size()) break;
  }
  EXPECT_EQ(valid, 3916);
}

// The answer a model gives: a sentence, then every block of the rewrite in a fence.
std::string rewrite_answer(const Program& rewrite) {
  std::vector<std::string> blocks;
  for (std::size_t i = 0; i < rewrite.blocks().size(); ++i) blocks.emplace_back(rewrite.block_text(i));
  return "A new schedule: an SM pull kernel streams each shard into the gathered buffer on a "
         "high-priority stream while the GEMM of every landed shard runs.\n\n```cuda\n" +
         make_full(rewrite, blocks) + "```\n";
}

TEST(GemmAllgatherGen0, LoopbackFullRewriteAddsAKernelAndASchedule) {
  Program gen0 = parse_file(kDir / "gen0.cu");
  Program rewrite = parse_file(kDir / "bench/rewrite_streamed.cu");
  ASSERT_TRUE(gen0.ok() && rewrite.ok());
  braid::testing::LoopbackLlmServer server;
  server.set_responder([&](const std::string& system, const std::vector<std::pair<std::string, std::string>>&) -> std::optional<std::string> {
    if (system.find("variation operator") == std::string::npos) return std::nullopt;
    return rewrite_answer(rewrite);
  });
  const auto dir = std::filesystem::temp_directory_path() / ("braid_gag_rewrite_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  LlmSettings settings;
  settings.retry_backoff_s = 0.0;
  settings.retry_backoff_max_s = 0.0;
  LlmRuntimeOptions options;
  options.sleep = [](double) {};
  auto rt = make_llm_runtime(settings, "local:coder@" + server.base_url(), nullptr, dir, "Make C = A_full * w^T fast.", "cuda", options);
  LlmMutator mutator(rt);

  ProgramRecord parent;
  parent.id = "0000000000000001";
  parent.code = gen0.text();
  parent.correct = true;
  parent.combined_score = 1.0;
  std::mt19937_64 rng(1);
  MutationContext ctx;
  ctx.generation = 1;
  ctx.patch_type = PatchType::Full;
  ctx.parent = &parent;
  ctx.rng = &rng;
  Proposal proposal = mutator.propose(gen0, ctx);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(proposal.ok()) << proposal.error;
  ASSERT_EQ(proposal.patch_type, PatchType::Full);

  // The model was shown the strategy code it may rewrite, not only the knobs.
  const auto requests = server.requests();
  ASSERT_FALSE(requests.empty());
  const std::string user = requests.back().body["messages"][1]["content"];
  EXPECT_NE(user.find("void move_rows("), std::string::npos);
  EXPECT_NE(user.find("lsa_copy_kernel"), std::string::npos);

  PatchOutcome child = apply_patch(gen0, proposal.patch_type, proposal.patch);
  ASSERT_TRUE(child.ok()) << child.error;
  EXPECT_EQ(child.text, rewrite.text());  // the frozen part is gen0's, byte for byte
  Program program = Program::parse(child.text, "rewrite");
  ASSERT_TRUE(program.ok());
  EXPECT_EQ(program.frozen_fingerprint(), gen0.frozen_fingerprint());
  EXPECT_NE(program.block_text(1).find("__global__ void __launch_bounds__(kPullThreads) pull_shard_kernel"), std::string_view::npos);
  ASSERT_NE(program.find_knob("kSchedule"), nullptr);
  EXPECT_EQ(program.find_knob("kSchedule")->value, "Schedule::Streamed");
  EXPECT_EQ(program.find_knob("kEngine"), nullptr);  // the rewrite dropped the engines it does not use
  EXPECT_FALSE(program.violated_constraint(program.knob_values()).has_value());

  if (!find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  BuildResult r = nvcc_compile(child.text, "rewrite_streamed");
  EXPECT_TRUE(r.ok) << r.error;
}

// gen0's defaults and the vector with the most non-default code: the LSA kernel, pulled, chunked,
// overlapped with spin-kernel waits.
class GemmAllgatherCompiles : public ::testing::TestWithParam<std::string> {};

TEST_P(GemmAllgatherCompiles, WithNvcc) {
  if (!find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  Program p = parse_file(kDir / "gen0.cu");
  ASSERT_TRUE(p.ok());
  std::map<std::string, std::string> knobs;
  if (GetParam() == "lsa_pull")
    knobs = {{"kSchedule", "Schedule::Overlap"}, {"kEngine", "Engine::LsaKernel"}, {"kDirection", "Direction::Pull"}, {"kChunks", "4"},
             {"kGemmSmMargin", "16"},            {"kCommCtas", "66"},                 {"kReadyWait", "ReadyWait::SpinKernel"}};
  EditResult e = with_knobs(p, knobs);
  ASSERT_TRUE(e.ok()) << e.error;
  BuildResult r = nvcc_compile(e.text, GetParam());
  EXPECT_TRUE(r.ok) << r.error;
}

INSTANTIATE_TEST_SUITE_P(Programs, GemmAllgatherCompiles, ::testing::Values("gen0", "lsa_pull"));

}  // namespace
