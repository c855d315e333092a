// The annotator on every corpus program and the gemm_allgather seed: the annotated program
// parses, has blocks and knobs, gives back the converted program once the annotation is
// stripped (defaults = the rules' code path), takes every KnobMutator proposal with its frozen
// part unchanged, and compiles with nvcc for sampled knob vectors.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "../llm/loopback_llm_server.hpp"
#include "braid/convert/analyzer.hpp"
#include "braid/convert/annotate.hpp"
#include "braid/convert/gate.hpp"
#include "braid/convert/transform.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/llm/client.hpp"
#include "braid/llm/model_spec.hpp"
#include "braid/mutate/knob_mutator.hpp"
#include "braid/program/patch.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

using namespace braid;
using namespace braid::convert;

namespace {

const std::vector<std::string> kPrograms = {"allreduce_after_kernel", "ring_sendrecv",       "alltoallv_counts",
                                            "grouped_collectives",    "two_streams",         "loop_reduce_scatter",
                                            "broadcast_root",         "alltoall_tokens",     "gemm_allgather_seed"};

std::filesystem::path program_path(const std::string& name) {
  if (name == "gemm_allgather_seed") return std::filesystem::path(BRAID_SOURCE_DIR) / "workloads/gemm_allgather/seed.cu";
  return std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus" / (name + ".cu");
}

struct Converted {
  std::string original, converted;
  AnnotatedProgram annotation;
};

Converted convert_and_annotate(const std::string& name) {
  Converted c;
  const auto path = program_path(name);
  c.original = read_file(path);
  c.converted = transform(analyze(path.filename().string(), c.original), c.original).source;
  c.annotation = annotate_rules(name, c.converted);
  return c;
}

// Knob vectors the KnobMutator proposes from gen0 (diff, full and cross; explore and exploit).
std::vector<std::string> mutated_children(const Program& parent, int count, std::uint64_t seed) {
  std::vector<std::string> out;
  std::mt19937_64 rng(seed);
  ProgramRecord record;
  record.code = parent.text();
  KnobMutator mutator;
  const PatchType types[] = {PatchType::Full, PatchType::Diff, PatchType::Cross};
  for (int i = 0; i < count; ++i) {
    MutationContext ctx;
    ctx.parent = &record;
    ctx.rng = &rng;
    ctx.patch_type = types[i % 3];
    ctx.phase = i % 2 ? Phase::Exploit : Phase::Explore;
    Proposal p = mutator.propose(parent, ctx);
    EXPECT_TRUE(p.ok()) << p.error;
    if (!p.ok()) continue;
    PatchOutcome child = apply_patch(parent, ctx.patch_type, p.patch);
    EXPECT_TRUE(child.ok()) << child.error;
    if (child.ok()) out.push_back(child.text);
  }
  return out;
}

class Annotated : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(Annotated, ParsesWithBlocksAndKnobs) {
  const Converted c = convert_and_annotate(GetParam());
  Program p = Program::parse(c.annotation.source, GetParam());
  ASSERT_TRUE(p.ok()) << p.error()->message;
  EXPECT_EQ(c.annotation.method, "rules");
  ASSERT_GE(p.blocks().size(), 2u) << "the knobs block and at least one block around communication";
  EXPECT_EQ(p.blocks().front().name, "knobs");
  EXPECT_FALSE(p.knobs().empty());
  EXPECT_EQ(p.knobs().size(), 4 * c.annotation.sites.size());
  EXPECT_EQ((int)p.knobs().size(), c.annotation.knob_count);
  bool any_comm_block = false;
  for (const AnnotatedSite& s : c.annotation.sites) any_comm_block = any_comm_block || !s.block.empty();
  EXPECT_TRUE(any_comm_block);
  // Every block around communication holds a converted call, and no gate annotation.
  for (std::size_t b = 1; b < p.blocks().size(); ++b) {
    const std::string_view text = p.block_text(b);
    EXPECT_NE(text.find("braid_converted::"), std::string_view::npos) << p.blocks()[b].name;
    EXPECT_EQ(text.find("braid:input"), std::string_view::npos);
    EXPECT_EQ(text.find("braid:output"), std::string_view::npos);
    EXPECT_EQ(text.find("cudaStreamSynchronize"), std::string_view::npos);
    EXPECT_EQ(text.find("cudaMalloc"), std::string_view::npos);
  }
  // The constraint pins the backend; the defaults satisfy every constraint.
  EXPECT_EQ(p.violated_constraint({}), std::nullopt);
  std::map<std::string, std::string> gin;
  for (const Knob& k : p.knobs())
    if (k.name.find("Backend") != std::string::npos) gin[k.name] = "braid::dev::Backend::Gin";
  EXPECT_NE(p.violated_constraint(gin), std::nullopt);
}

TEST_P(Annotated, DefaultsAreTheConvertedProgram) {
  const Converted c = convert_and_annotate(GetParam());
  // Remove markers, the knobs block and the knob template arguments: the converted program again,
  // byte for byte, so only the knob arguments differ from it.
  EXPECT_EQ(strip_annotation(c.annotation.source), c.converted);
  // The default knob values are the prelude's template defaults, which take the rules' launch.
  Program p = Program::parse(c.annotation.source, GetParam());
  ASSERT_TRUE(p.ok());
  for (const Knob& k : p.knobs()) {
    if (k.name.find("Issuer") != std::string::npos) {
      EXPECT_EQ(k.value, "braid::dev::Issuer::Cta");
    } else if (k.name.find("Backend") != std::string::npos) {
      EXPECT_EQ(k.value, "braid::dev::Backend::Lsa");
    } else {
      EXPECT_EQ(k.value, "0") << k.name;  // CTAs and chunk bytes: the rule's choice
    }
  }
  EXPECT_NE(c.converted.find("template <Issuer I = Issuer::Cta, int CTAS = 0, size_t CHUNK_BYTES = 0, Backend BACKEND = Backend::Lsa>\nstruct Shape"), std::string::npos);
  EXPECT_NE(c.converted.find("template <int SITE, typename SHAPE = Shape<>>"), std::string::npos);
  EXPECT_NE(c.converted.find("rule_shape<ISSUER, CTAS, CHUNK_BYTES>()"), std::string::npos);
}

TEST_P(Annotated, KnobMutatorChildrenKeepTheFrozenPart) {
  const Converted c = convert_and_annotate(GetParam());
  Program parent = Program::parse(c.annotation.source, GetParam());
  ASSERT_TRUE(parent.ok());
  const auto children = mutated_children(parent, 12, 7);
  ASSERT_EQ(children.size(), 12u);
  for (const std::string& text : children) {
    Program child = Program::parse(text, GetParam());
    ASSERT_TRUE(child.ok()) << child.error()->message;
    EXPECT_EQ(child.frozen_fingerprint(), parent.frozen_fingerprint());
    EXPECT_NE(child.knob_key(), parent.knob_key());
    EXPECT_EQ(child.violated_constraint({}), std::nullopt);
    // The LLM acceptance check holds for every child too (only block contents moved).
    EXPECT_EQ(annotate_llm_problem(c.converted, text), "");
  }
}

// nvcc -c of one sampled child per program (plus gen0 for the gemm seed), -O0, through the
// builder's content-addressed cache in the build folder so reruns are instant.
TEST_P(Annotated, SampledKnobVectorsCompile) {
  if (!find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const Converted c = convert_and_annotate(GetParam());
  Program parent = Program::parse(c.annotation.source, GetParam());
  ASSERT_TRUE(parent.ok());
  auto texts = mutated_children(parent, 1, std::hash<std::string>{}(GetParam()));
  ASSERT_EQ(texts.size(), 1u);
  const auto work = std::filesystem::current_path() / "annotate-nvcc" / GetParam();
  for (std::size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(Program::parse(texts[i]).knob_key());
    BuildResult r = compile_only(texts[i], work, "annotated" + std::to_string(i), program_path(GetParam()).parent_path(),
                                 {"-O0", "-std=c++20", "--expt-relaxed-constexpr"});
    EXPECT_TRUE(r.ok) << r.error;
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, Annotated, ::testing::ValuesIn(kPrograms));

// Every value of every knob kind instantiates: one program whose sites together take each issuer,
// CTA count and chunk size (grouped_collectives has 3 collectives, ring_sendrecv a p2p group).
TEST(Annotate, EveryKnobValueCompiles) {
  if (!find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const Converted c = convert_and_annotate("grouped_collectives");
  Program p = Program::parse(c.annotation.source, "grouped_collectives");
  ASSERT_TRUE(p.ok());
  std::map<std::string, std::string> values;
  const std::vector<std::string> issuers = {"braid::dev::Issuer::Thread", "braid::dev::Issuer::Warp", "braid::dev::Issuer::Cta"};
  const std::vector<std::string> ctas = {"8", "132", "16"}, chunks = {"16384", "1048576", "262144"};
  int i = 0;
  for (const AnnotatedSite& s : c.annotation.sites) {
    values[s.knobs[0]] = issuers[(std::size_t)i % 3];
    values[s.knobs[1]] = ctas[(std::size_t)i % 3];
    values[s.knobs[2]] = chunks[(std::size_t)i % 3];
    ++i;
  }
  EditResult edited = with_knobs(p, values);
  ASSERT_TRUE(edited.ok()) << edited.error;
  const auto work = std::filesystem::current_path() / "annotate-nvcc" / "every_value";
  BuildResult r = compile_only(edited.text, work, "every_value", program_path("grouped_collectives").parent_path(),
                               {"-O0", "-std=c++20", "--expt-relaxed-constexpr"});
  EXPECT_TRUE(r.ok) << r.error;
}

TEST(Annotate, GemmSeedBlocksTheGatherWithItsGemm) {
  const Converted c = convert_and_annotate("gemm_allgather_seed");
  Program p = Program::parse(c.annotation.source, "seed");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p.blocks().size(), 2u);
  const std::string_view block = p.block_text(1);
  EXPECT_NE(block.find("braid_converted::all_gather<BraidSite0>"), std::string_view::npos);
  EXPECT_NE(block.find("gemm_rows"), std::string_view::npos);
  EXPECT_EQ(block.find("adopt_harness"), std::string_view::npos);  // harness hook stays frozen
}

TEST(Annotate, LoopBodiesAndGroupsGetTheirOwnBlocks) {
  const Converted ring = convert_and_annotate("ring_sendrecv");
  Program p = Program::parse(ring.annotation.source, "ring");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p.blocks().size(), 2u);
  const std::string_view block = p.block_text(1);
  // group_start .. group_end, the accumulate kernel and the async copy: all in the loop body.
  EXPECT_NE(block.find("group_start"), std::string_view::npos);
  EXPECT_NE(block.find("group_end<BraidSite0>"), std::string_view::npos);
  EXPECT_NE(block.find("accumulate<<<"), std::string_view::npos);
  EXPECT_NE(block.find("cudaMemcpyAsync"), std::string_view::npos);
  EXPECT_EQ(block.find("for ("), std::string_view::npos);

  const Converted grouped = convert_and_annotate("grouped_collectives");
  Program g = Program::parse(grouped.annotation.source, "grouped");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g.blocks().size(), 2u) << "the three collectives of one group share one block";
  // 3 collectives; the group's end launches no p2p here, so it has no knobs.
  EXPECT_EQ(grouped.annotation.sites.size(), 3u);
  EXPECT_NE(grouped.annotation.source.find("braid_converted::group_end<1>()"), std::string::npos);
}

TEST(Annotate, LlmAnswerChecks) {
  const Converted c = convert_and_annotate("allreduce_after_kernel");
  EXPECT_EQ(annotate_llm_problem(c.converted, c.annotation.source), "");
  // Moving the output annotation into a block is refused.
  std::string moved = c.annotation.source;
  const std::size_t out = moved.find("  // braid:output sum\n");
  ASSERT_NE(out, std::string::npos);
  const std::size_t end = moved.rfind("// EVOLVE-BLOCK-END\n", out);
  ASSERT_NE(end, std::string::npos);
  const std::string end_line = "  // EVOLVE-BLOCK-END\n";
  moved.erase(moved.rfind('\n', end) + 1, end_line.size());
  moved.insert(moved.find("  // braid:output sum\n") + std::string("  // braid:output sum\n").size(), end_line);
  ASSERT_TRUE(Program::parse(moved).ok()) << Program::parse(moved).error()->message;
  EXPECT_NE(annotate_llm_problem(c.converted, moved), "");
  // A changed frozen line is refused.
  std::string changed = c.annotation.source;
  changed.replace(changed.find("std::printf(\"rank %d done\\n\""), 11, "std::puts(\"");
  EXPECT_NE(annotate_llm_problem(c.converted, changed), "");
  // No knob: refused.
  EXPECT_NE(annotate_llm_problem(c.converted, c.converted), "");
}

TEST(Annotate, NotAConvertedProgramIsAUserError) {
  const std::string original = read_file(program_path("allreduce_after_kernel"));
  EXPECT_THROW(annotate_rules("allreduce_after_kernel.cu", original), UserError);
  const Converted c = convert_and_annotate("allreduce_after_kernel");
  EXPECT_THROW(annotate_rules("gen0.cu", c.annotation.source), UserError) << "annotated twice";
}

// ---- LLM-assisted annotation through a real HTTP server on loopback ----

namespace {

std::unique_ptr<llm::LlmClient> loopback_client(const braid::testing::LoopbackLlmServer& server) {
  llm::RetryPolicy p;
  p.max_retries = 0;
  p.timeout_s = 30.0;
  return llm::make_http_client(llm::parse_model_spec("local:annotator@" + server.base_url()), "", p);
}

// The rules' annotation the prompt shows (the one ```cuda block).
std::string shown_program(const std::vector<std::pair<std::string, std::string>>& messages) {
  const std::string& text = messages.back().second;
  const std::size_t at = text.find("```cuda\n");
  const std::size_t end = text.rfind("```");
  if (at == std::string::npos || end <= at) return "";
  return text.substr(at + 8, end - at - 8);
}

AnnotateOptions llm_options(llm::LlmClient& client, const std::string& name) {
  AnnotateOptions o;
  o.llm = &client;
  o.work_dir = std::filesystem::current_path() / "annotate-llm" / name;
  o.source_dir = program_path(name).parent_path();
  o.flags = {"-O0", "-std=c++20", "--expt-relaxed-constexpr"};
  return o;
}

}  // namespace

// The model adds a knob for the compute launch inside the communication block: parses, keeps the
// frozen parts, compiles -> taken, and the knob mutator can use it.
TEST(AnnotateLlm, AcceptedWhenItParsesKeepsFrozenPartsAndCompiles) {
  if (!find_cuda_toolchain()) GTEST_SKIP() << "no nvcc: an LLM annotation is only taken once it compiles";
  braid::testing::LoopbackLlmServer server;
  server.set_responder([](const std::string&, const std::vector<std::pair<std::string, std::string>>& m) -> std::optional<std::string> {
    std::string program = shown_program(m);
    const std::string launch = "  scale<<<128, 256, 0, stream>>>(grad, kCount, 2.0f);\n";
    const std::size_t at = program.find(launch);
    if (at == std::string::npos) return std::string("no launch found");
    program.replace(at, launch.size(),
                    "  constexpr int kScaleBlocks = 128;  // braid:knob 64|128|256\n"
                    "  scale<<<kScaleBlocks, 256, 0, stream>>>(grad, kCount, 2.0f);\n");
    return "Here is the annotated program.\n```cuda\n" + program + "```\n";
  });
  auto client = loopback_client(server);
  const Converted c = convert_and_annotate("allreduce_after_kernel");
  AnnotatedProgram a = annotate("allreduce_after_kernel", c.converted, llm_options(*client, "allreduce_after_kernel"));
  EXPECT_EQ(a.method, "llm") << a.llm_detail;
  EXPECT_EQ(a.llm_outcome, "accepted");
  EXPECT_EQ(a.rules_source, c.annotation.source);
  Program p = Program::parse(a.source, "llm");
  ASSERT_TRUE(p.ok());
  EXPECT_NE(p.find_knob("kScaleBlocks"), nullptr);
  EXPECT_EQ(a.knob_count, c.annotation.knob_count + 1);
  EXPECT_EQ(a.to_json().at("method"), "llm");
  ASSERT_EQ(server.request_count(), 1u);
  EXPECT_NE(server.requests().front().raw_body.find("EVOLVE-BLOCK-START knobs"), std::string::npos) << "the prompt shows the rules' annotation";
}

TEST(AnnotateLlm, FallsBackToTheRulesWithTheReason) {
  braid::testing::LoopbackLlmServer server;
  std::string next;  // what the model answers next
  server.set_responder([&](const std::string&, const std::vector<std::pair<std::string, std::string>>& m) -> std::optional<std::string> {
    std::string program = shown_program(m);
    if (next == "frozen") {
      // The verification's synchronisation moved into a block.
      const std::string sync = "  BRAID_CUDA(cudaStreamSynchronize(stream));\n  // braid:output sum\n";
      const std::size_t at = program.find(sync);
      const std::string end = "  // EVOLVE-BLOCK-END\n";
      const std::size_t end_at = program.rfind(end, at);
      program.erase(end_at, end.size());
      program.insert(program.find("  // braid:output sum\n"), end);
      return "```cuda\n" + program + "```";
    }
    if (next == "parse") return "```cuda\n// EVOLVE-BLOCK-START x\nint a;\n```";
    return std::string("I would put the block around the all-reduce.");
  });
  auto client = loopback_client(server);
  const Converted c = convert_and_annotate("allreduce_after_kernel");
  for (const auto& [answer, outcome] : std::vector<std::pair<std::string, std::string>>{{"prose", "no_code"}, {"parse", "parse_failed"}, {"frozen", "frozen_changed"}}) {
    next = answer;
    AnnotatedProgram a = annotate("allreduce_after_kernel", c.converted, llm_options(*client, "allreduce_after_kernel"));
    EXPECT_EQ(a.method, "rules") << answer;
    EXPECT_EQ(a.llm_outcome, outcome) << a.llm_detail;
    EXPECT_FALSE(a.llm_detail.empty());
    EXPECT_EQ(a.source, c.annotation.source) << "the rules' annotation stays";
    EXPECT_EQ(a.to_json().at("llm_outcome"), outcome);
  }
  server.push_faults({braid::testing::Fault::ServerError});
  AnnotatedProgram a = annotate("allreduce_after_kernel", c.converted, llm_options(*client, "allreduce_after_kernel"));
  EXPECT_EQ(a.llm_outcome, "llm_error");
  EXPECT_EQ(a.source, c.annotation.source);
}
