// workloads/kv_transfer on the CPU: gen0.cu parses with its three EVOLVE blocks, its knob space is
// what the README says (every value of every knob reachable, bench/variants.txt valid), the seed
// converts completely by rules, and the seed, its conversion, gen0's defaults and knob vectors that
// take the other code paths (plus ones the knob mutator samples) compile with nvcc (-c, sm_90).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/gate.hpp"
#include "braid/convert/transform.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/mutate/knob_mutator.hpp"
#include "braid/program/patch.hpp"
#include "braid/util/fs.hpp"

using namespace braid;

namespace {

const std::filesystem::path kDir = std::filesystem::path(BRAID_SOURCE_DIR) / "workloads/kv_transfer";

Program gen0() {
  Program p = Program::parse(read_file(kDir / "gen0.cu"), (kDir / "gen0.cu").string());
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error()->message);
  return p;
}

// Every knob vector of the declared domains, with whether it satisfies every braid:require.
std::vector<std::pair<std::map<std::string, std::string>, bool>> every_vector(const Program& p) {
  std::vector<std::pair<std::map<std::string, std::string>, bool>> out;
  std::vector<std::size_t> at(p.knobs().size(), 0);
  for (;;) {
    std::map<std::string, std::string> v;
    for (std::size_t k = 0; k < at.size(); ++k) v[p.knobs()[k].name] = p.knobs()[k].domain[at[k]];
    out.emplace_back(v, !p.violated_constraint(v).has_value());
    std::size_t k = 0;
    while (k < at.size() && ++at[k] == p.knobs()[k].domain.size()) at[k++] = 0;
    if (k == at.size()) break;
  }
  return out;
}

// bench/variants.txt: name, then knob=value pairs.
std::vector<std::pair<std::string, std::map<std::string, std::string>>> variants() {
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> out;
  std::istringstream in(read_file(kDir / "bench/variants.txt"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name, kv;
    if (!(words >> name) || name[0] == '#') continue;
    std::map<std::string, std::string> knobs;
    while (words >> kv) knobs[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    out.emplace_back(name, knobs);
  }
  return out;
}

}  // namespace

TEST(KvTransfer, Gen0HoldsTheStrategyInItsBlocks) {
  Program p = gen0();
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p.blocks().size(), 3u);
  EXPECT_EQ(p.blocks()[0].name, "knobs");
  EXPECT_EQ(p.blocks()[1].name, "kernels");
  EXPECT_EQ(p.blocks()[2].name, "host");
  // The kernels and the orchestration are evolvable, not only the settings.
  EXPECT_NE(p.block_text(1).find("__global__ void"), std::string_view::npos);
  EXPECT_NE(p.block_text(2).find("void run(Context& c, cudaStream_t stream)"), std::string_view::npos);
  EXPECT_NE(p.block_text(2).find("void setup(Context& c)"), std::string_view::npos);
  // The frozen part is the harness entry and the enums the knobs name.
  const std::string& text = p.text();
  const std::size_t main_at = text.find("int main(");
  ASSERT_NE(main_at, std::string::npos);
  EXPECT_GT(main_at, p.blocks()[2].end);
}

TEST(KvTransfer, KnobSpaceIsSane) {
  Program p = gen0();
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p.knobs().size(), 9u);
  EXPECT_FALSE(p.violated_constraint({}).has_value()) << "gen0's defaults break a braid:require";
  const auto all = every_vector(p);
  std::size_t valid = 0;
  std::map<std::string, std::set<std::string>> reached;
  for (const auto& [v, ok] : all) {
    if (!ok) continue;
    ++valid;
    for (const auto& [k, x] : v) reached[k].insert(x);
  }
  EXPECT_EQ(all.size(), 5120u);
  EXPECT_EQ(valid, 984u) << "update README.md's count if the knobs changed on purpose";
  // Every value of every knob appears in some valid program.
  for (const Knob& k : p.knobs()) EXPECT_EQ(reached[k.name].size(), k.domain.size()) << k.name;
}

TEST(KvTransfer, BenchVariantsAreValidKnobVectors) {
  Program p = gen0();
  ASSERT_TRUE(p.ok());
  const auto vs = variants();
  ASSERT_GE(vs.size(), 10u);
  std::set<std::string> keys;
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

TEST(KvTransfer, KnobMutatorChildrenStayValid) {
  Program p = gen0();
  ASSERT_TRUE(p.ok());
  std::mt19937_64 rng(21);
  KnobMutator mutator;
  ProgramRecord record;
  record.code = p.text();
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
  }
}

TEST(KvTransfer, SeedConvertsByRules) {
  const std::string src = read_file(kDir / "seed.cu");
  convert::Conversion c = convert::transform(convert::analyze("seed.cu", src), src);
  EXPECT_TRUE(c.complete()) << convert::conversion_to_text(c);
  EXPECT_EQ(c.converted_calls, 4);  // two sends and two receives in the per-layer group
  EXPECT_NE(c.source.find("alloc_window(\"staging\""), std::string::npos);
}

// nvcc -c, -O0 (CI's two cores), through the builder's content-addressed cache in the build folder.
class KvTransferCompiles : public ::testing::TestWithParam<std::string> {};

TEST_P(KvTransferCompiles, WithNvcc) {
  if (!find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const std::string which = GetParam();
  std::string source;
  if (which == "seed") {
    source = read_file(kDir / "seed.cu");
  } else if (which == "seed_converted") {
    const std::string src = read_file(kDir / "seed.cu");
    source = convert::transform(convert::analyze("seed.cu", src), src).source;
  } else if (which == "sampled") {
    // A knob vector the mutator draws (explore, full), fixed by the RNG seed.
    Program p = gen0();
    ASSERT_TRUE(p.ok());
    std::mt19937_64 rng(2121);
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
    // gen0 and settings that take the other code paths: copy engines with batched page copies and
    // a spinning wait; LSA pull through a companion kernel into the staging; LSA push per chunk.
    std::map<std::string, std::string> knobs;
    if (which == "ce_push_pages")
      knobs = {{"kSchedule", "Schedule::AsLayersFinish"}, {"kEngine", "Engine::CopyEngine"}, {"kLanding", "Landing::ScatterToPages"},
               {"kReadyWait", "ReadyWait::SpinKernel"}, {"kChunkLayers", "2"}, {"kCommHighPriority", "true"}};
    if (which == "lsa_pull_companion")
      knobs = {{"kSchedule", "Schedule::AsLayersFinish"}, {"kEngine", "Engine::LsaKernel"}, {"kDirection", "Direction::Pull"},
               {"kLaunch", "Launch::Companion"}, {"kTransferCtas", "66"}, {"kChunkLayers", "4"}};
    if (which == "lsa_push_pages")
      knobs = {{"kSchedule", "Schedule::AsLayersFinish"}, {"kEngine", "Engine::LsaKernel"}, {"kLanding", "Landing::ScatterToPages"},
               {"kTransferCtas", "16"}};
    EditResult e = with_knobs(gen0(), knobs);
    ASSERT_TRUE(e.ok()) << e.error;
    source = e.text;
  }
  const auto work = std::filesystem::current_path() / "kv-transfer-nvcc" / which;
  BuildResult r = convert::compile_only(source, work, which, kDir, {"-O0", "-std=c++20", "--expt-relaxed-constexpr"});
  EXPECT_TRUE(r.ok) << r.error;
}

INSTANTIATE_TEST_SUITE_P(Programs, KvTransferCompiles,
                         ::testing::Values("seed", "seed_converted", "gen0", "ce_push_pages", "lsa_pull_companion", "lsa_push_pages",
                                           "sampled"));
