// The LLM rewrite loop against a real loopback model server whose answers depend on the prompt
// it is shown, with real nvcc compilations (CPU only: run_gate = false).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>

#include "../llm/loopback_llm_server.hpp"
#include "braid/convert/rewrite_loop.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/llm/model_spec.hpp"
#include "braid/util/fs.hpp"
#include "rewrite_script.hpp"

using namespace braid::convert;
using braid::testing::LoopbackLlmServer;

namespace {

using Messages = std::vector<std::pair<std::string, std::string>>;

std::filesystem::path corpus_llm(const std::string& name) {
  return std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus_llm" / name;
}

std::unique_ptr<braid::llm::LlmClient> client_for(const LoopbackLlmServer& server, const std::string& model) {
  braid::llm::RetryPolicy p;
  p.max_retries = 0;
  p.timeout_s = 30.0;
  return braid::llm::make_http_client(braid::llm::parse_model_spec("local:" + model + "@" + server.base_url()), "", p);
}

int line_containing(const std::string& text, const std::string& part) {
  const std::size_t at = text.find(part);
  return at == std::string::npos ? 0 : 1 + (int)std::count(text.begin(), text.begin() + (long)at, '\n');
}

bool is_judge(const Messages& m) { return !m.empty() && m.back().second.find("You review one attempt") != std::string::npos; }

struct Fixture {
  std::string source;
  Analysis analysis;
  Conversion rules;
  std::filesystem::path work;
  explicit Fixture(const std::string& test_name) {
    const auto path = corpus_llm("reduce_to_root.cu");
    source = braid::read_file(path);
    analysis = analyze(path.filename().string(), source);
    rules = transform(analysis, source);
    work = std::filesystem::current_path() / "convert-rewrite" / test_name;
    std::filesystem::remove_all(work / "record");
  }
  RewriteOptions options() const {
    RewriteOptions o;
    o.run_gate = false;
    o.gate.work_dir = work / "gate";
    o.gate.source_dir = corpus_llm("").parent_path();
    // -O0 keeps CI's two cores free; the compile cache lives in the build folder.
    o.gate.flags = {"-O0", "-std=c++20", "--expt-relaxed-constexpr"};
    o.record_dir = work / "record";
    return o;
  }
};

}  // namespace

TEST(RewriteLoop, CorpusProgramsNeedTheLoop) {
  for (const char* name : {"reduce_to_root.cu", "split_stream_exchange.cu"}) {
    const std::string src = braid::read_file(corpus_llm(name));
    const Conversion c = transform(analyze(name, src), src);
    EXPECT_FALSE(c.complete()) << name;
    EXPECT_FALSE(c.left.empty()) << name;
  }
}

TEST(RewriteLoop, ExtractsTheLongestFencedProgram) {
  EXPECT_EQ(extract_program("no code here"), "");
  EXPECT_EQ(extract_program("```cuda\nint main() {}\n```\n"), "int main() {}\n");
  EXPECT_EQ(extract_program("see ```x``` inline\n```bash\nmake all of it now\n```\n```cpp\nint a;\n```"), "int a;\n");
  EXPECT_EQ(extract_program("```cuda\nint a;\n```\n```cuda\nint main() { return 0; }\n```"), "int main() { return 0; }\n");
  EXPECT_EQ(extract_program("```cuda\nint main() { // truncated"), "");
}

TEST(RewriteLoop, StagesOfWhatTheRulesLeft) {
  EXPECT_EQ(stage_of(Unconverted{3, "ncclReduce", "no rule for ncclReduce (rooted reduction/gather/scatter)"}), "B");
  EXPECT_EQ(stage_of(Unconverted{3, "cudaMallocAsync", "buffer `x` cannot move to symmetric memory by rule"}), "A");
  EXPECT_EQ(stage_of(Unconverted{3, "ncclCommWindowRegister", "the program manages windows itself"}), "A");
  EXPECT_EQ(stage_of(Unconverted{3, "ncclGroupStart..ncclGroupEnd", "send/recv of one group on several streams"}), "B");
}

TEST(RewriteLoop, FrozenPartsAreCheckedWithTheAnalyzer) {
  Fixture f("frozen_check");
  const std::string good = braid::testing::rewrite_correct(f.rules.source);
  EXPECT_EQ(frozen_parts_problem(f.analysis, good, f.analysis.file), "");
  std::string dropped = good;
  braid::testing::replace_once(dropped, "  // braid:output loss_total\n", "");
  const std::string problem = frozen_parts_problem(f.analysis, dropped, f.analysis.file);
  EXPECT_NE(problem.find("`// braid:output loss_total`"), std::string::npos) << problem;
  EXPECT_NE(frozen_parts_problem(f.analysis, "int main() { return 0; }\n", f.analysis.file), "");
}

// The scenario of issue #8: no code, then code that does not compile, then (only once the
// judge's diagnosis of the real compiler error is in the prompt) code that compiles.
TEST(RewriteLoop, CompilerErrorReachesJudgeAndDiagnosisReachesNextPrompt) {
  if (!braid::find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  Fixture f("compile_path");
  const std::string broken = braid::testing::rewrite_not_compiling(f.rules.source);
  const std::string good = braid::testing::rewrite_correct(f.rules.source);
  const std::string diagnosis = "The call braid_converted::reduce_to_root does not exist (DIAG-7); all-reduce into a symmetric "
                                "scratch buffer and copy it into loss_total on rank 0 only.";
  LoopbackLlmServer server;
  std::mutex mu;
  std::vector<std::string> judge_prompts, rewrite_prompts;
  server.set_responder([&](const std::string&, const Messages& m) -> std::optional<std::string> {
    std::lock_guard lock(mu);
    if (is_judge(m)) {
      judge_prompts.push_back(m.back().second);
      return diagnosis;
    }
    rewrite_prompts.push_back(m.back().second);
    const std::string& p = m.back().second;
    // Like a model: edit the current program as shown (its generated block folded to one line).
    if (p.find("DIAG-7") != std::string::npos)
      return braid::testing::fenced(braid::testing::rewrite_correct(braid::testing::cuda_block(p, 1)), "Rooted sum through a scratch window.");
    if (p.find("no fenced ```cuda block") != std::string::npos) return braid::testing::fenced(broken, "Used a rooted reduction.");
    return std::string("I would use a rooted reduction kernel here.");
  });
  auto rewriter = client_for(server, "rewriter");
  auto judge = client_for(server, "judge");
  const RewriteResult r = rewrite_loop(f.analysis, f.source, f.rules, *rewriter, *judge, f.options());

  ASSERT_EQ(r.attempts.size(), 3u) << r.to_json().dump(2);
  EXPECT_TRUE(r.accepted) << r.failure;
  EXPECT_EQ(r.source, good);
  for (const auto& a : r.attempts) EXPECT_EQ(a.stage, "B");  // the rules did stage A: no call for it
  EXPECT_EQ(r.attempts[0].outcome, "no_code");
  EXPECT_EQ(r.attempts[1].outcome, "build_failed");
  EXPECT_EQ(r.attempts[2].outcome, "compiled");
  // The real nvcc error names the missing member; it reached the judge (its line counted in the
  // folded program the judge sees), whose text reached the next prompt.
  const std::string& nvcc_error = r.attempts[1].outcome_text;
  EXPECT_NE(nvcc_error.find("namespace \"braid_converted\" has no member \"reduce_to_root\""), std::string::npos) << nvcc_error;
  ASSERT_EQ(judge_prompts.size(), 1u);
  EXPECT_NE(judge_prompts[0].find("namespace \"braid_converted\" has no member \"reduce_to_root\""), std::string::npos);
  const int folded_line = line_containing(fold_prelude(broken).text, "reduce_to_root<1>");
  const int unfolded_line = line_containing(broken, "reduce_to_root<1>");
  ASSERT_GT(unfolded_line, folded_line);
  EXPECT_NE(nvcc_error.find("stageB_iter2.cu(" + std::to_string(unfolded_line) + ")"), std::string::npos) << nvcc_error;
  EXPECT_NE(judge_prompts[0].find("stageB_iter2.cu(" + std::to_string(folded_line) + ")"), std::string::npos) << judge_prompts[0];
  EXPECT_NE(judge_prompts[0].find(kFoldMarker), std::string::npos);  // the judge reads the folded candidate
  EXPECT_EQ(r.attempts[1].diagnosis, diagnosis);
  ASSERT_EQ(rewrite_prompts.size(), 3u);
  EXPECT_NE(rewrite_prompts[2].find(diagnosis), std::string::npos);
  EXPECT_NE(rewrite_prompts[2].find("build_failed"), std::string::npos);
  // Grounding: what is left with its line and text, the primitives' contracts, the frozen annotations.
  EXPECT_NE(rewrite_prompts[0].find("line 34: ncclReduce"), std::string::npos);
  EXPECT_NE(rewrite_prompts[0].find(braid::testing::kHostReduce), std::string::npos);
  EXPECT_NE(rewrite_prompts[0].find("CONTRACT (shown to the LLM as documentation)"), std::string::npos);
  EXPECT_NE(rewrite_prompts[0].find("// braid:output loss_total"), std::string::npos);
  // Every attempt is on disk.
  for (int it = 1; it <= 3; ++it) {
    const auto base = f.work / "record" / ("stageB_iter" + std::to_string(it));
    EXPECT_TRUE(std::filesystem::exists(base.string() + ".prompt.md"));
    EXPECT_TRUE(std::filesystem::exists(base.string() + ".outcome.json"));
  }
  EXPECT_EQ(braid::read_file(f.work / "record" / "stageB_iter3.cu"), good);
  // The answer carried the fold line, not the ~500 generated lines; the loop put them back.
  EXPECT_NE(r.attempts[2].answer.find(kFoldMarker), std::string::npos);
  EXPECT_LT(r.attempts[2].answer.size(), good.size() / 2);
  EXPECT_NE(rewrite_prompts[0].find("inline ncclResult_t all_reduce("), std::string::npos);  // the folded block's interface
  EXPECT_NE(braid::read_file(f.work / "record" / "stageB_iter2.outcome.json").find("build_failed"), std::string::npos);
  EXPECT_EQ(braid::read_file(f.work / "record" / "stageB_iter2.judge.md"), judge_prompts[0]);
  EXPECT_FALSE(std::filesystem::exists(f.work / "record" / "stageB_iter1.judge.md"));  // no code: no judge
}

TEST(RewriteLoop, FoldsTheGeneratedBlockAndPutsItBack) {
  Fixture f("fold");
  const FoldedProgram folded = fold_prelude(f.rules.source);
  ASSERT_FALSE(folded.prelude.empty());
  EXPECT_EQ(folded.text.find("namespace braid_converted {\nusing namespace"), std::string::npos);
  EXPECT_NE(folded.text.find(kFoldMarker), std::string::npos);
  EXPECT_NE(folded.text.find("BRAID_NCCL(braid_converted::all_reduce<0>(grads"), std::string::npos);
  EXPECT_EQ(unfold_prelude(folded.text, folded), f.rules.source);
  EXPECT_GT(folded.prelude_lines, 100);
  // Every replacement a rewrite may call, whichever part of the split prelude declares it.
  for (const char* decl : {"sym_malloc(", "sym_nccl_alloc(", "sym_free(", "sym_nccl_free(", "comm_destroy(", "comm_finalize(",
                           "all_gather(", "all_reduce(", "reduce_scatter(", "broadcast(", "bcast(", "all_to_all(", "send(", "recv(",
                           "group_start(", "group_end("})
    EXPECT_NE(folded.api.find(decl), std::string::npos) << decl;
  EXPECT_EQ(folded.api.find("first_barrier("), std::string::npos);  // internals are not its interface
  // An answer that wrote the block out itself is taken as it is; nothing to fold is left alone.
  EXPECT_EQ(unfold_prelude(f.rules.source, folded), f.rules.source);
  EXPECT_TRUE(fold_prelude(f.source).prelude.empty());
}

TEST(RewriteLoop, IterationBoundEndsTheLoop) {
  Fixture f("bound");
  LoopbackLlmServer server;
  server.set_responder([](const std::string&, const Messages&) -> std::optional<std::string> {
    return std::string("Replace ncclReduce with a device kernel.");
  });
  auto client = client_for(server, "m");
  RewriteOptions o = f.options();
  o.max_iterations_per_stage = 2;
  const RewriteResult r = rewrite_loop(f.analysis, f.source, f.rules, *client, *client, o);
  EXPECT_FALSE(r.accepted);
  EXPECT_EQ(r.attempts.size(), 2u);
  EXPECT_NE(r.failure.find("bound of 2 iterations"), std::string::npos) << r.failure;
  EXPECT_NE(r.failure.find("no_code"), std::string::npos) << r.failure;
  EXPECT_EQ(r.source, f.rules.source);
  EXPECT_EQ(server.request_count(), 2u);
  EXPECT_TRUE(std::filesystem::exists(f.work / "record" / "stageB_iter2.answer.md"));
  EXPECT_FALSE(r.to_json().value("accepted", true));
}

TEST(RewriteLoop, RewriteDroppingAnOutputAnnotationIsRejected) {
  Fixture f("dropped_annotation");
  std::string dropped = braid::testing::rewrite_correct(f.rules.source);
  braid::testing::replace_once(dropped, "  // braid:output loss_total\n", "");
  LoopbackLlmServer server;
  std::vector<std::string> prompts;
  server.set_responder([&](const std::string&, const Messages& m) -> std::optional<std::string> {
    prompts.push_back(m.back().second);
    return braid::testing::fenced(dropped, "Done.");
  });
  auto client = client_for(server, "m");
  RewriteOptions o = f.options();
  o.max_iterations_per_stage = 2;
  const RewriteResult r = rewrite_loop(f.analysis, f.source, f.rules, *client, *client, o);
  EXPECT_FALSE(r.accepted);
  ASSERT_EQ(r.attempts.size(), 2u);
  EXPECT_EQ(r.attempts[0].outcome, "frozen_changed");
  EXPECT_NE(r.attempts[0].outcome_text.find("braid:output loss_total"), std::string::npos) << r.attempts[0].outcome_text;
  // The rejection is what the next prompt shows; no compilation and no judge were needed.
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_NE(prompts[1].find("dropped the frozen annotation"), std::string::npos);
  EXPECT_EQ(r.attempts[0].diagnosis, "");
}

TEST(RewriteLoop, HostCallLeftInPlaceIsNotAccepted) {
  Fixture f("unchanged");
  LoopbackLlmServer server;
  server.set_responder([&](const std::string&, const Messages& m) -> std::optional<std::string> {
    if (is_judge(m)) return std::string("unused");
    return braid::testing::fenced(f.rules.source, "Nothing to change.");
  });
  auto client = client_for(server, "m");
  RewriteOptions o = f.options();
  o.max_iterations_per_stage = 1;
  const RewriteResult r = rewrite_loop(f.analysis, f.source, f.rules, *client, *client, o);
  EXPECT_FALSE(r.accepted);
  ASSERT_EQ(r.attempts.size(), 1u);
  EXPECT_EQ(r.attempts[0].outcome, "not_converted");
  EXPECT_NE(r.attempts[0].outcome_text.find("ncclReduce is still a host NCCL call"), std::string::npos);
}

TEST(RewriteLoop, CompleteConversionMakesNoCall) {
  const auto path = std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus/allreduce_after_kernel.cu";
  const std::string src = braid::read_file(path);
  const Analysis a = analyze(path.filename().string(), src);
  const Conversion c = transform(a, src);
  ASSERT_TRUE(c.left.empty());
  LoopbackLlmServer server;
  auto client = client_for(server, "m");
  RewriteOptions o;
  o.run_gate = false;
  const RewriteResult r = rewrite_loop(a, src, c, *client, *client, o);
  EXPECT_TRUE(r.accepted);
  EXPECT_TRUE(r.attempts.empty());
  EXPECT_EQ(r.source, c.source);
  EXPECT_EQ(server.request_count(), 0u);
}

// Stage A through the loop: the rules leave the cudaMallocAsync buffers of the all-reduce (their
// device all-reduce would fall back to host NCCL), stage B needs nothing. A rewrite that keeps the
// stream-ordered allocations is not accepted; one that allocates through sym_malloc compiles.
TEST(RewriteLoop, StageAMovesStreamOrderedBuffersToSymmetricMemory) {
  if (!braid::find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const auto path = corpus_llm("async_alloc_allreduce.cu");
  const std::string src = braid::read_file(path);
  const Analysis a = analyze(path.filename().string(), src);
  const Conversion rules = transform(a, src);
  ASSERT_EQ(rules.converted_calls, 1);
  ASSERT_EQ(rules.left.size(), 2u);
  for (const auto& u : rules.left) EXPECT_EQ(stage_of(u), "A") << u.construct;

  auto move_buffers = [](std::string program) {
    for (const char* v : {"acts", "total"}) {
      braid::testing::replace_once(program, std::string("cudaMallocAsync(&") + v + ", kCount * sizeof(float), stream)",
                                   std::string("braid_converted::sym_malloc(&") + v + ", kCount * sizeof(float))");
      // The rules already free through the run-time allocator lookup (sym_free_async), which
      // releases a symmetric allocation as such.
      braid::testing::replace_once(program, std::string("braid_converted::sym_free_async(") + v + ", stream)",
                                   std::string("braid_converted::sym_free_async(") + v + ", stream)");
    }
    return program;
  };
  LoopbackLlmServer server;
  std::vector<std::string> rewrite_prompts;
  server.set_responder([&](const std::string&, const Messages& m) -> std::optional<std::string> {
    if (is_judge(m)) return std::string("unused");
    const std::string& p = m.back().second;
    rewrite_prompts.push_back(p);
    const std::string shown = braid::testing::cuda_block(p, 1);
    if (p.find("still does not come from braid_converted::sym_malloc") != std::string::npos)
      return braid::testing::fenced(move_buffers(shown), "Symmetric allocations.");
    return braid::testing::fenced(shown, "The allocations look fine to me.");
  });
  auto client = client_for(server, "m");
  RewriteOptions o;
  o.run_gate = false;
  const auto work = std::filesystem::current_path() / "convert-rewrite" / "stage_a";
  std::filesystem::remove_all(work / "record");
  o.gate.work_dir = work / "gate";
  o.gate.source_dir = path.parent_path();
  o.gate.flags = {"-O0", "-std=c++20", "--expt-relaxed-constexpr"};
  o.record_dir = work / "record";
  const RewriteResult r = rewrite_loop(a, src, rules, *client, *client, o);

  ASSERT_EQ(r.attempts.size(), 2u) << r.to_json().dump(2);
  EXPECT_TRUE(r.accepted) << r.failure;
  for (const auto& at : r.attempts) EXPECT_EQ(at.stage, "A");  // the rules did stage B: no call for it
  EXPECT_EQ(r.attempts[0].outcome, "not_converted");
  EXPECT_NE(r.attempts[0].outcome_text.find("buffer `acts`"), std::string::npos) << r.attempts[0].outcome_text;
  EXPECT_NE(r.attempts[0].outcome_text.find("buffer `total`"), std::string::npos) << r.attempts[0].outcome_text;
  EXPECT_EQ(r.attempts[1].outcome, "compiled") << r.attempts[1].outcome_text;
  ASSERT_EQ(rewrite_prompts.size(), 2u);
  EXPECT_NE(rewrite_prompts[0].find("cudaMallocAsync"), std::string::npos);  // what is left, with its line
  EXPECT_NE(r.source.find("braid_converted::sym_malloc(&acts"), std::string::npos);
  EXPECT_EQ(r.source.find("cudaMallocAsync(&"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(work / "record" / "stageA_iter2.cu"));
}

