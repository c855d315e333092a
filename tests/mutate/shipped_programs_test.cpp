// The annotated programs shipped in examples/, templates/ and workloads/ must parse, and the knob mutator
// must produce patches that apply to them for every patch type.
#include <gtest/gtest.h>

#include <filesystem>

#include "braid/mutate/knob_mutator.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

std::vector<fs::path> shipped_programs() {
  std::vector<fs::path> out;
  for (const char* top : {"examples", "templates", "workloads"}) {
    fs::path root = fs::path(BRAID_SOURCE_DIR) / top;
    if (!fs::is_directory(root)) continue;
    for (const auto& dir : fs::directory_iterator(root)) {
      if (!dir.is_directory()) continue;
      std::vector<fs::path> dirs{dir.path()};
      // A family of workloads without a workload.yaml of its own (workloads/serving_kernels/<op>/).
      if (std::string(top) == "workloads" && !fs::exists(dir.path() / "workload.yaml"))
        for (const auto& sub : fs::directory_iterator(dir.path()))
          if (sub.is_directory()) dirs.push_back(sub.path());
      for (const fs::path& d : dirs)
        for (const auto& file : fs::directory_iterator(d))
          if (file.path().stem() == "program" || file.path().stem() == "gen0") out.push_back(file.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ShippedPrograms, ParseAndMutate) {
  auto programs = shipped_programs();
  if (programs.empty()) GTEST_SKIP() << "no annotated program under examples/ or templates/";
  for (const auto& path : programs) {
    SCOPED_TRACE(path.string());
    Program parent = Program::parse(read_file(path), path.string());
    ASSERT_TRUE(parent.ok()) << parent.error()->message;
    if (parent.knobs().empty()) continue;
    std::mt19937_64 rng(2024);
    ProgramRecord record;
    record.code = parent.text();
    KnobMutator mutator;
    for (PatchType type : {PatchType::Diff, PatchType::Full, PatchType::Cross}) {
      for (Phase phase : {Phase::Explore, Phase::Exploit}) {
        MutationContext ctx;
        ctx.parent = &record;
        ctx.rng = &rng;
        ctx.patch_type = type;
        ctx.phase = phase;
        Proposal proposal = mutator.propose(parent, ctx);
        ASSERT_TRUE(proposal.ok()) << proposal.error;
        PatchOutcome child = apply_patch(parent, type, proposal.patch);
        ASSERT_TRUE(child.ok()) << child.error;
        Program result = Program::parse(child.text, path.string());
        ASSERT_TRUE(result.ok());
        EXPECT_NE(result.knob_key(), parent.knob_key());
        EXPECT_EQ(result.frozen_fingerprint(), parent.frozen_fingerprint());
      }
    }
  }
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

// gemm_allgather's gen0 has one engine (LsaKernel) that frees three more knobs, so most valid
// vectors use it. Explore resamples must still spread over the engines (decided knob by knob),
// and a diff that moves kEngine away from LsaKernel must survive the constraints that pin the
// LsaKernel-only knobs (kCommCtas == 32 elsewhere) by resetting them, not be rejected.
// One explore proposal of `type` from `parent`, applied and parsed; it must satisfy every
// braid:require. Empty program (and a recorded failure) when any step fails.
Program explore_child(KnobMutator& mutator, const Program& parent, std::mt19937_64& rng, PatchType type) {
  ProgramRecord record;
  record.code = parent.text();
  MutationContext ctx;
  ctx.parent = &record;
  ctx.rng = &rng;
  ctx.patch_type = type;
  ctx.phase = Phase::Explore;
  Proposal p = mutator.propose(parent, ctx);
  EXPECT_TRUE(p.ok()) << p.error;
  PatchOutcome applied = apply_patch(parent, type, p.patch);
  EXPECT_TRUE(applied.ok()) << applied.error;
  Program child = Program::parse(applied.text, "child");
  EXPECT_TRUE(child.ok());
  if (child.ok()) EXPECT_FALSE(child.violated_constraint(child.knob_values()).has_value());
  return child;
}

TEST(ShippedPrograms, GemmAllgatherEnginesAreDrawnEvenlyAndMovesAreRepaired) {
  const fs::path path = fs::path(BRAID_SOURCE_DIR) / "workloads/gemm_allgather/gen0.cu";
  Program parent = Program::parse(read_file(path), path.string());
  ASSERT_TRUE(parent.ok()) << parent.error()->message;
  std::mt19937_64 rng(7);
  KnobMutator mutator;
  std::map<std::string, int> engines;
  const int draws = 300;
  for (int i = 0; i < draws; ++i) {
    Program child = explore_child(mutator, parent, rng, PatchType::Full);
    ASSERT_TRUE(child.ok());
    ++engines[child.find_knob("kEngine")->value];
  }
  ASSERT_EQ(engines.size(), 6u);
  for (const auto& [engine, n] : engines) {
    EXPECT_GT(n, draws / 6 / 2) << engine;  // 1/6 each, within a factor of two
    EXPECT_LT(n, draws / 6 * 2) << engine;
  }

  // From an LsaKernel program with kCommCtas=132, single-knob moves of kEngine land on every other
  // engine (with kCommCtas repaired to 32), never only on LsaKernel.
  auto lsa = with_knobs(parent, {{"kSchedule", "Schedule::Overlap"}, {"kEngine", "Engine::LsaKernel"}, {"kCommCtas", "132"}});
  ASSERT_TRUE(lsa.ok()) << lsa.error;
  Program lsa_parent = Program::parse(lsa.text, "lsa");
  ASSERT_TRUE(lsa_parent.ok());
  std::set<std::string> reached;
  for (int i = 0; i < 400; ++i) {
    Program child = explore_child(mutator, lsa_parent, rng, PatchType::Diff);
    ASSERT_TRUE(child.ok());
    const std::string engine = child.find_knob("kEngine")->value;
    if (engine != "Engine::LsaKernel") {
      reached.insert(engine);
      EXPECT_EQ(child.find_knob("kCommCtas")->value, "32");
    }
  }
  EXPECT_GE(reached.size(), 4u);  // every other engine but PeerInPlace (Serial only) at least
}

}  // namespace
}  // namespace braid
