// The MoE workload's programs: gen0.cu parses with a sane knob space (defaults valid, every knob
// reachable, constraints pin what a schedule ignores), bench/variants.txt names valid, distinct
// vectors, and seed.cu plus sampled knob vectors of gen0.cu (every schedule) compile with nvcc
// (-c, -O0, cached by content in the build folder).
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <set>
#include <sstream>

#include "braid/convert/gate.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/mutate/knob_mutator.hpp"
#include "braid/program/program.hpp"
#include "braid/util/fs.hpp"

namespace {

namespace fs = std::filesystem;
const fs::path kDir = fs::path(BRAID_SOURCE_DIR) / "workloads/moe";

braid::Program gen0() { return braid::Program::parse(braid::read_file(kDir / "gen0.cu"), "gen0.cu"); }

// Every knob vector that satisfies the constraints.
std::vector<std::map<std::string, std::string>> valid_vectors(const braid::Program& p) {
  std::vector<std::map<std::string, std::string>> out{{}};
  for (const braid::Knob& k : p.knobs()) {
    std::vector<std::map<std::string, std::string>> next;
    for (const auto& v : out)
      for (const std::string& value : k.domain) {
        auto w = v;
        w[k.name] = value;
        next.push_back(w);
      }
    out = next;
  }
  std::vector<std::map<std::string, std::string>> valid;
  for (const auto& v : out)
    if (!p.violated_constraint(v)) valid.push_back(v);
  return valid;
}

TEST(MoePrograms, Gen0KnobSpace) {
  const braid::Program p = gen0();
  ASSERT_TRUE(p.ok()) << p.error()->message;
  ASSERT_EQ(p.blocks().size(), 2u);
  EXPECT_EQ(p.blocks()[0].name, "knobs");
  EXPECT_EQ(p.blocks()[1].name, "strategy");
  // The strategy block holds the orchestration itself, not only declarations.
  EXPECT_NE(p.block_text(1).find("void run(Context& c, cudaStream_t stream)"), std::string_view::npos);
  EXPECT_NE(p.block_text(1).find("ncclSend"), std::string_view::npos);
  EXPECT_EQ(p.violated_constraint({}), std::nullopt) << "the defaults (the seed's strategy) are valid";
  EXPECT_EQ(p.find_knob("kSchedule")->value, "Schedule::Serial");
  EXPECT_EQ(p.find_knob("kLayout")->value, "Layout::Permute");
  const auto valid = valid_vectors(p);
  // 6 serial + 96 per-source + 144 per-expert-group (kGemm: auto, grouped, per block; groups 2, 4, 8)
  EXPECT_EQ(valid.size(), 726u);
  // Every value of every knob appears in some valid vector.
  for (const braid::Knob& k : p.knobs())
    for (const std::string& value : k.domain) {
      bool seen = false;
      for (const auto& v : valid) seen = seen || v.at(k.name) == value;
      EXPECT_TRUE(seen) << k.name << " = " << value;
    }
  // Serial ignores the overlap knobs: they are pinned there.
  EXPECT_NE(p.violated_constraint({{"kSchedule", "Schedule::Serial"}, {"kGemmSmMargin", "16"}}), std::nullopt);
  // Only PerExpertGroup reads kExpertGroups; it always returns each group early (kReturnEarly pinned).
  EXPECT_NE(p.violated_constraint({{"kSchedule", "Schedule::PerSource"}, {"kExpertGroups", "4"}}), std::nullopt);
  EXPECT_NE(p.violated_constraint({{"kSchedule", "Schedule::PerExpertGroup"}, {"kReturnEarly", "true"}}), std::nullopt);
  const std::map<std::string, std::string> groups{
      {"kSchedule", "Schedule::PerExpertGroup"}, {"kExpertGroups", "8"}, {"kGemmSmMargin", "16"}};
  EXPECT_EQ(p.violated_constraint(groups), std::nullopt);
  // kPipelineMinTokens only bounds the pipelined schedules from below: pinned at Serial.
  EXPECT_NE(p.violated_constraint({{"kSchedule", "Schedule::Serial"}, {"kPipelineMinTokens", "512"}}), std::nullopt);
  EXPECT_EQ(p.violated_constraint({{"kSchedule", "Schedule::PerSource"}, {"kPipelineMinTokens", "2048"}}), std::nullopt);
}

// bench/variants.txt: every line names a valid knob vector of gen0.cu, and no two are the same.
TEST(MoePrograms, BenchVariantsAreValidAndDistinct) {
  const braid::Program p = gen0();
  ASSERT_TRUE(p.ok());
  std::istringstream in(braid::read_file(kDir / "bench/variants.txt"));
  std::set<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name, kv;
    if (!(words >> name) || name[0] == '#') continue;
    std::map<std::string, std::string> knobs;
    while (words >> kv) knobs[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    for (const auto& [knob, value] : knobs) EXPECT_NE(p.find_knob(knob), nullptr) << name << ": " << knob;
    EXPECT_EQ(p.violated_constraint(knobs), std::nullopt) << name;
    const braid::EditResult edited = braid::with_knobs(p, knobs);
    ASSERT_TRUE(edited.ok()) << name << ": " << edited.error;
    const std::string key = braid::Program::parse(edited.text, name).knob_key();
    EXPECT_TRUE(keys.insert(key).second) << name << " repeats another line";
  }
  EXPECT_GE(keys.size(), 2u);
}

TEST(MoePrograms, KnobMutatorChildrenKeepTheFrozenPart) {
  const braid::Program parent = gen0();
  ASSERT_TRUE(parent.ok());
  std::mt19937_64 rng(22);
  braid::ProgramRecord record;
  record.code = parent.text();
  braid::KnobMutator mutator;
  for (braid::PatchType type : {braid::PatchType::Diff, braid::PatchType::Full, braid::PatchType::Cross}) {
    braid::MutationContext ctx;
    ctx.parent = &record;
    ctx.rng = &rng;
    ctx.patch_type = type;
    ctx.phase = braid::Phase::Explore;
    braid::Proposal proposal = mutator.propose(parent, ctx);
    ASSERT_TRUE(proposal.ok()) << proposal.error;
    braid::PatchOutcome child = braid::apply_patch(parent, type, proposal.patch);
    ASSERT_TRUE(child.ok()) << child.error;
    braid::Program c = braid::Program::parse(child.text, "child");
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c.frozen_fingerprint(), parent.frozen_fingerprint());
    EXPECT_EQ(c.violated_constraint({}), std::nullopt);
  }
}

braid::BuildResult compile(const std::string& text, const std::string& name) {
  const auto work = fs::current_path() / "moe-nvcc" / name;
  return braid::convert::compile_only(text, work, name, kDir, {"-O0", "-std=c++20", "--expt-relaxed-constexpr"});
}

TEST(MoePrograms, SeedCompiles) {
  if (!braid::find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const braid::BuildResult r = compile(braid::read_file(kDir / "seed.cu"), "seed");
  EXPECT_TRUE(r.ok) << r.error;
}

// Vectors that between them take every non-default value and both layouts of each overlapped
// schedule: the most code paths per compile.
TEST(MoePrograms, SampledKnobVectorsCompile) {
  if (!braid::find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const braid::Program p = gen0();
  ASSERT_TRUE(p.ok());
  const std::vector<std::map<std::string, std::string>> vectors = {
      {{"kSchedule", "Schedule::PerSource"}, {"kLayout", "Layout::Direct"}, {"kGemm", "Gemm::PerBlock"}, {"kReturnEarly", "true"},
       {"kGemmSmMargin", "16"}, {"kCommHighPriority", "true"}},
      {{"kSchedule", "Schedule::PerSource"}, {"kLayout", "Layout::Permute"}, {"kGemm", "Gemm::Grouped"}, {"kReturnEarly", "false"},
       {"kGemmSmMargin", "0"}, {"kCommHighPriority", "false"}},
      {{"kSchedule", "Schedule::PerExpertGroup"}, {"kLayout", "Layout::Direct"}, {"kGemm", "Gemm::Auto"}, {"kExpertGroups", "4"},
       {"kGemmSmMargin", "16"}, {"kCommHighPriority", "true"}, {"kPipelineMinTokens", "512"}},
      {{"kSchedule", "Schedule::PerExpertGroup"}, {"kLayout", "Layout::Permute"}, {"kGemm", "Gemm::Grouped"}, {"kExpertGroups", "8"},
       {"kGemmSmMargin", "0"}, {"kCommHighPriority", "false"}},
  };
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    ASSERT_EQ(p.violated_constraint(vectors[i]), std::nullopt);
    const braid::EditResult edited = braid::with_knobs(p, vectors[i]);
    ASSERT_TRUE(edited.ok()) << edited.error;
    const braid::BuildResult r = compile(edited.text, "gen0_" + std::to_string(i));
    EXPECT_TRUE(r.ok) << braid::knob_key_of(vectors[i]) << ": " << r.error;
  }
}

}  // namespace
