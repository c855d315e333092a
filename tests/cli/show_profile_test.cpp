// `braid show <id>` of a candidate the GPU cascade profiled: the ncu lines under a heading of
// their own (not inside the metrics JSON), and the note when the profile failed.
#include <gtest/gtest.h>

#include "../e2e/e2e_support.hpp"
#include "braid/db/database.hpp"
#include "braid/util/json.hpp"

namespace braid {
namespace {

TEST(ShowProfile, NcuLinesAndNotesOfStoredCandidates) {
  const auto results = std::filesystem::temp_directory_path() / ("braid_show_profile_" + std::to_string(::getpid()));
  std::filesystem::remove_all(results);
  std::filesystem::create_directories(results);
  const std::string line = "cand::add_rmsnorm_kernel 1093.3 us: DRAM 86% of peak, L2 41%, occupancy 72%, tensor 0%; stalls: "
                           "long_scoreboard 18.9, lg_throttle 2.5, wait 1.5";
  {
    ProgramDatabase db(results / "evolution.db");
    ProgramRecord r;
    r.id = "00000000000000a1";
    r.code = "int main() {}\n";
    r.patch_type = "seed";
    r.correct = true;
    r.combined_score = 1.9;
    r.public_metrics = {{"ratio_to_bound", 0.92}, {"level_reached", 3},
                        {"profile", {{"tool", "ncu"}, {"summary", line}, {"kernels", json::array()}}}};
    db.insert(r);
    r.id = "00000000000000a2";
    r.public_metrics = {{"ratio_to_bound", 0.9}, {"profile", {{"tool", "ncu"}, {"note", "ncu not found (looked in PATH)"}}}};
    db.insert(r);
  }
  auto shown = test::run_braid({"show", results.string(), "00000000000000a1"});
  ASSERT_EQ(shown.code, 0) << shown.output;
  EXPECT_NE(shown.output.find("== profile (Nsight Compute) ==\n" + line + "\n"), std::string::npos) << shown.output;
  EXPECT_NE(shown.output.find("\"ratio_to_bound\": 0.92"), std::string::npos) << shown.output;
  EXPECT_EQ(shown.output.find("\"summary\""), std::string::npos) << shown.output;  // not repeated as JSON

  auto noted = test::run_braid({"show", results.string(), "00000000000000a2"});
  ASSERT_EQ(noted.code, 0) << noted.output;
  EXPECT_NE(noted.output.find("== profile (Nsight Compute) ==\nnone: ncu not found (looked in PATH)\n"), std::string::npos)
      << noted.output;
  std::filesystem::remove_all(results);
}

}  // namespace
}  // namespace braid
