// workloads/ring_attention on the CPU: gen0.cu parses with its three EVOLVE blocks (the kernels and
// the orchestration inside them), its knob space is what the README says (196 valid vectors of 768,
// every value of every knob reachable, bench/variants.txt valid and distinct), knob-mutator
// children stay valid with the frozen part untouched, and gen0's defaults plus knob vectors that
// take each mover's code path (and one the mutator samples) compile with nvcc (-c, sm_90).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "braid/convert/gate.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/mutate/knob_mutator.hpp"
#include "braid/program/patch.hpp"
#include "braid/util/fs.hpp"

using namespace braid;

namespace {

const std::filesystem::path kDir = std::filesystem::path(BRAID_SOURCE_DIR) / "workloads/ring_attention";
using Knobs = std::map<std::string, std::string>;

Program gen0() {
  Program p = Program::parse(read_file(kDir / "gen0.cu"), (kDir / "gen0.cu").string());
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error()->message);
  return p;
}

// Every knob vector of the declared domains, with whether it satisfies every braid:require.
std::vector<std::pair<Knobs, bool>> every_vector(const Program& p) {
  std::vector<std::pair<Knobs, bool>> out;
  std::vector<std::size_t> at(p.knobs().size(), 0);
  for (;;) {
    Knobs v;
    for (std::size_t k = 0; k < at.size(); ++k) v[p.knobs()[k].name] = p.knobs()[k].domain[at[k]];
    out.emplace_back(v, !p.violated_constraint(v).has_value());
    std::size_t k = 0;
    while (k < at.size() && ++at[k] == p.knobs()[k].domain.size()) at[k++] = 0;
    if (k == at.size()) break;
  }
  return out;
}

// bench/variants.txt: name, then knob=value pairs.
std::vector<std::pair<std::string, Knobs>> variants() {
  std::vector<std::pair<std::string, Knobs>> out;
  std::istringstream in(read_file(kDir / "bench/variants.txt"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name, kv;
    if (!(words >> name) || name[0] == '#') continue;
    Knobs knobs;
    while (words >> kv) knobs[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    out.emplace_back(name, knobs);
  }
  return out;
}

}  // namespace

TEST(RingAttention, Gen0HoldsTheStrategyInItsBlocks) {
  Program p = gen0();
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p.blocks().size(), 3u);
  EXPECT_EQ(p.blocks()[0].name, "knobs");
  EXPECT_EQ(p.blocks()[1].name, "kernels");
  EXPECT_EQ(p.blocks()[2].name, "host");
  // The copy kernels, the fused attention + copy kernel and the orchestration are evolvable.
  EXPECT_NE(p.block_text(1).find("__global__ void"), std::string_view::npos);
  EXPECT_NE(p.block_text(1).find("attention_tile<kCausal>"), std::string_view::npos);
  EXPECT_NE(p.block_text(2).find("void run(Context& c, cudaStream_t stream)"), std::string_view::npos);
  EXPECT_NE(p.block_text(2).find("void setup(Context& c)"), std::string_view::npos);
  // The frozen part is the harness entry and the enums the knobs name; the attention math is the
  // frozen kernel of attention_block.cuh, not code of the program.
  const std::string& text = p.text();
  const std::size_t main_at = text.find("int main(");
  ASSERT_NE(main_at, std::string::npos);
  EXPECT_GT(main_at, p.blocks()[2].end);
  EXPECT_EQ(text.find("mma.sync"), std::string::npos);
}

TEST(RingAttention, KnobSpaceIsSane) {
  Program p = gen0();
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p.knobs().size(), 7u);
  EXPECT_FALSE(p.violated_constraint({}).has_value()) << "gen0's defaults break a braid:require";
  const auto all = every_vector(p);
  std::size_t valid = 0;
  std::map<std::string, std::set<std::string>> reached;
  std::map<std::string, int> by_mover;
  for (const auto& [v, ok] : all) {
    if (!ok) continue;
    ++valid;
    for (const auto& [k, x] : v) reached[k].insert(x);
    if (v.at("kSchedule") == "Schedule::Overlapped") ++by_mover[v.at("kMover")];
  }
  EXPECT_EQ(all.size(), 768u);
  EXPECT_EQ(valid, 196u) << "update README.md's count if the knobs changed on purpose";
  // Serial: 4 (zig-zag x skip); Overlapped per mover: chunks x priority x zig-zag x skip (x CTAs).
  EXPECT_EQ(by_mover["Mover::Nccl"], 24);
  EXPECT_EQ(by_mover["Mover::CopyEngine"], 24);
  EXPECT_EQ(by_mover["Mover::Companion"], 96);
  EXPECT_EQ(by_mover["Mover::FusedCtas"], 48);
  for (const Knob& k : p.knobs()) EXPECT_EQ(reached[k.name].size(), k.domain.size()) << k.name;
}

TEST(RingAttention, BenchVariantsAreValidKnobVectors) {
  Program p = gen0();
  ASSERT_TRUE(p.ok());
  const auto vs = variants();
  ASSERT_GE(vs.size(), 10u);
  std::set<std::string> keys{p.knob_key()};  // none is gen0's defaults (benched as gen0_default)
  for (const auto& [name, knobs] : vs) {
    SCOPED_TRACE(name);
    EditResult e = with_knobs(p, knobs);
    ASSERT_TRUE(e.ok()) << e.error;
    Program child = Program::parse(e.text, name);
    ASSERT_TRUE(child.ok());
    EXPECT_FALSE(child.violated_constraint(child.knob_values()).has_value()) << *child.violated_constraint(child.knob_values());
    EXPECT_TRUE(keys.insert(child.knob_key()).second) << "two variants are the same program";
  }
}

TEST(RingAttention, KnobMutatorChildrenStayValid) {
  Program p = gen0();
  ASSERT_TRUE(p.ok());
  std::mt19937_64 rng(23);
  KnobMutator mutator;
  ProgramRecord record;
  record.code = p.text();
  std::set<std::string> movers;
  for (int i = 0; i < 60; ++i) {
    MutationContext ctx;
    ctx.parent = &record;
    ctx.rng = &rng;
    ctx.patch_type = i % 2 ? PatchType::Diff : PatchType::Full;
    ctx.phase = i % 3 ? Phase::Explore : Phase::Exploit;
    Proposal proposal = mutator.propose(p, ctx);
    ASSERT_TRUE(proposal.ok()) << proposal.error;
    PatchOutcome child = apply_patch(p, ctx.patch_type, proposal.patch);
    ASSERT_TRUE(child.ok()) << child.error;
    Program c = Program::parse(child.text, "child");
    ASSERT_TRUE(c.ok());
    EXPECT_FALSE(c.violated_constraint(c.knob_values()).has_value());
    EXPECT_EQ(c.frozen_fingerprint(), p.frozen_fingerprint());
    movers.insert(c.knob_values().at("kMover"));
  }
  EXPECT_GE(movers.size(), 2u) << "60 children never left the default mover";
}

// nvcc -c, -O0 (CI's two cores), through the builder's content-addressed cache in the build folder.
class RingAttentionCompiles : public ::testing::TestWithParam<std::string> {};

TEST_P(RingAttentionCompiles, WithNvcc) {
  if (!find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const std::string which = GetParam();
  Program p = gen0();
  ASSERT_TRUE(p.ok());
  std::string source;
  if (which == "sampled") {
    // A knob vector the mutator draws (explore, full), fixed by the RNG seed.
    std::mt19937_64 rng(2323);
    KnobMutator mutator;
    ProgramRecord record;
    record.code = p.text();
    MutationContext ctx;
    ctx.parent = &record;
    ctx.rng = &rng;
    ctx.patch_type = PatchType::Full;
    ctx.phase = Phase::Explore;
    Proposal proposal = mutator.propose(p, ctx);
    ASSERT_TRUE(proposal.ok()) << proposal.error;
    PatchOutcome child = apply_patch(p, PatchType::Full, proposal.patch);
    ASSERT_TRUE(child.ok()) << child.error;
    source = child.text;
  } else {
    // gen0's defaults, and one vector per mover's code path.
    Knobs knobs;
    const std::string overlapped = "Schedule::Overlapped";
    if (which == "nccl_chunks_zz") knobs = {{"kSchedule", overlapped}, {"kChunks", "2"}, {"kZigZag", "true"}, {"kSkipMasked", "true"}};
    if (which == "copy_engine") knobs = {{"kSchedule", overlapped}, {"kMover", "Mover::CopyEngine"}, {"kCommHighPriority", "true"}};
    if (which == "companion") knobs = {{"kSchedule", overlapped}, {"kMover", "Mover::Companion"}, {"kChunks", "4"}, {"kCommCtas", "16"}};
    if (which == "fused") knobs = {{"kSchedule", overlapped}, {"kMover", "Mover::FusedCtas"}, {"kSkipMasked", "true"}, {"kCommCtas", "4"}};
    EditResult e = with_knobs(p, knobs);
    ASSERT_TRUE(e.ok()) << e.error;
    source = e.text;
  }
  const auto work = std::filesystem::current_path() / "ring-attention-nvcc" / which;
  BuildResult r = convert::compile_only(source, work, which, kDir, {"-O0", "-std=c++20", "--expt-relaxed-constexpr"});
  EXPECT_TRUE(r.ok) << r.error;
}

INSTANTIATE_TEST_SUITE_P(Programs, RingAttentionCompiles,
                         ::testing::Values("gen0", "nccl_chunks_zz", "copy_engine", "companion", "fused", "sampled"));
