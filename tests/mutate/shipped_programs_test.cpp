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
      for (const auto& file : fs::directory_iterator(dir.path()))
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
