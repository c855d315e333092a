// `braid run --llm` through the binary against the loopback LLM server: the rules leave a host
// ncclReduce, the rewrite loop replaces it (scripted like a model: rewrite_script.hpp), the LLM's
// annotation adds a knob, and the run's record carries the rewrite and the annotation.
#include <gtest/gtest.h>

#include <fstream>
#include <mutex>

#include "../e2e/e2e_support.hpp"
#include "../llm/loopback_llm_server.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/json.hpp"
#include "rewrite_script.hpp"

namespace {

namespace fs = std::filesystem;
using Messages = std::vector<std::pair<std::string, std::string>>;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The n-th (0-based) ```cuda block of a prompt.
std::string cuda_block(const std::string& prompt, int n) {
  std::size_t at = 0;
  for (int i = 0; i <= n; ++i) {
    at = prompt.find("```cuda\n", at);
    if (at == std::string::npos) return "";
    at += 8;
  }
  return prompt.substr(at, prompt.find("```", at) - at);
}

}  // namespace

TEST(RunWithLlm, RewritesWhatRulesLeftAndAnnotates) {
  if (!braid::find_cuda_toolchain()) GTEST_SKIP() << "no nvcc: the rewrite loop and the LLM annotation are taken only once they compile";
  braid::testing::LoopbackLlmServer server;
  std::mutex mu;
  int rewrites = 0, annotations = 0;
  server.set_responder([&](const std::string&, const Messages& m) -> std::optional<std::string> {
    std::lock_guard lock(mu);
    const std::string& p = m.back().second;
    if (p.find("You review one attempt") != std::string::npos) return std::string("Looks fine.");
    if (p.find("braid's rule-based annotation") != std::string::npos) {
      ++annotations;
      std::string program = cuda_block(p, 0);
      const std::string launch = "  scale<<<256, 256, 0, stream>>>(grads_sum, kGrads, 0.5f);\n";
      const std::size_t at = program.find(launch);
      if (at != std::string::npos)
        program.replace(at, launch.size(),
                        "  constexpr int kScaleBlocks = 256;  // braid:knob 128|256|512\n"
                        "  scale<<<kScaleBlocks, 256, 0, stream>>>(grads_sum, kGrads, 0.5f);\n");
      return braid::testing::fenced(program, "A knob for the kernel's grid.");
    }
    ++rewrites;
    return braid::testing::fenced(braid::testing::rewrite_correct(cuda_block(p, 1)), "Rooted sum through a scratch window.");
  });
  const fs::path root = braid::test::fresh_dir("run_llm");
  const fs::path results = root / "r";
  const fs::path seed = fs::path(BRAID_SOURCE_DIR) / "tests/convert/corpus_llm/reduce_to_root.cu";
  braid::test::Outcome o = braid::test::run_braid(
      {"run", seed.string(), "-o", results.string(), "--no-gate", "--llm", "local:scripted@" + server.base_url(), "--until", "record"});
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_EQ(rewrites, 1);
  EXPECT_NE(o.output.find("LLM rewrite of what was left: accepted after 1 attempt(s)"), std::string::npos) << o.output;
  const braid::json summary = braid::json::parse(slurp(results / "convert/summary.json"));
  EXPECT_EQ(summary.at("method"), "rules+llm");
  EXPECT_TRUE(summary.at("rewrite").at("accepted").get<bool>());
  // The program's host ncclReduce is gone (the generated replacements keep host NCCL fallbacks).
  const std::string converted = slurp(results / "convert/converted.cu");
  const std::size_t program_at = converted.find("// ==== end of braid convert's replacements ====");
  ASSERT_NE(program_at, std::string::npos);
  EXPECT_EQ(converted.find("ncclReduce(", program_at), std::string::npos);
  const braid::json annotation = braid::json::parse(slurp(results / "annotate/annotation.json"));
  const std::string gen0 = slurp(results / "workload/gen0.cu");
  EXPECT_EQ(annotations, 1);
  EXPECT_EQ(annotation.at("method"), "llm") << annotation.dump(2);
  EXPECT_NE(gen0.find("kScaleBlocks"), std::string::npos);
  // Both all-reduces (the rules' and the rewrite's) are tuned sites.
  EXPECT_NE(gen0.find("all_reduce<BraidSite0>"), std::string::npos);
  EXPECT_NE(gen0.find("all_reduce<BraidSite1>"), std::string::npos);
  EXPECT_NE(gen0.find("EVOLVE-BLOCK-START knobs"), std::string::npos);
  // The prompts and answers of both LLM steps are kept with the run.
  EXPECT_TRUE(fs::exists(results / "convert/rewrite"));
  EXPECT_TRUE(fs::exists(results / "annotate/annotate_answer.md"));
  fs::remove_all(root);
}
