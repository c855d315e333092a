// The GPU cascade's profile level without a GPU (issue #24 part 3): who is profiled, the ncu
// command line, finding ncu, the stored figures from an ncu `--page raw --csv` text
// (tests/eval/ncu/add_rmsnorm_raw.csv follows that layout: the program's output and ==PROF==
// lines, a header row, a units row, one row per profiled launch), and workload.yaml's `profile:`.
// The subprocess path runs end to end with a fake ncu in gpu_cascade_cpu_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>

#include "braid/db/record.hpp"
#include "braid/eval/ncu_profile.hpp"
#include "braid/eval/workload.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "eval_test_support.hpp"

namespace braid {
namespace {

using testing::TempDir;

std::string fixture() {
  auto text = try_read_file(std::filesystem::path(BRAID_SOURCE_DIR) / "tests/eval/ncu/add_rmsnorm_raw.csv");
  if (!text) throw SystemError("tests/eval/ncu/add_rmsnorm_raw.csv is missing");
  return *text;
}

TEST(ProfileGate, NewBestsAndTheTopKAreProfiledOnce) {
  ProfileGate gate(2);
  EXPECT_TRUE(gate.admit("a", 1.0));   // the first correct candidate is the best so far
  EXPECT_TRUE(gate.admit("b", 0.5));   // one program above it: within the top 2
  EXPECT_FALSE(gate.admit("c", 0.4));  // two above it
  EXPECT_TRUE(gate.admit("d", 2.0));   // a new best
  EXPECT_TRUE(gate.admit("e", 1.5));   // second best
  EXPECT_FALSE(gate.admit("f", 1.2));  // third
  EXPECT_FALSE(gate.admit("a", 3.0));  // the same text again (a re-measurement): profiled once
  EXPECT_FALSE(gate.admit("d", 2.0));
  // a's re-measurement raised its best to 3.0: 1.9 now has a (3.0), d (2.0) above it.
  EXPECT_FALSE(gate.admit("g", 1.9));
  EXPECT_TRUE(gate.admit("h", 2.5));
  // A re-measurement is counted (it raises i's best to 9) but not profiled; i itself then is.
  EXPECT_FALSE(gate.admit("i", 9.0, false));
  EXPECT_FALSE(gate.admit("j", 2.6));  // i (9.0) and a (3.0) above it
  EXPECT_TRUE(gate.admit("i", 4.0));
}

TEST(ProfileGate, TopOneProfilesOnlyNewBests) {
  ProfileGate gate(1);
  std::vector<bool> admitted;
  const std::vector<double> scores = {1.0, 0.9, 1.1, 1.1, 1.05, 2.0};
  for (std::size_t i = 0; i < scores.size(); ++i) admitted.push_back(gate.admit("p" + std::to_string(i), scores[i]));
  // A tie with the best is not beaten by it: profiled too.
  EXPECT_EQ(admitted, (std::vector<bool>{true, false, true, true, false, true}));
}

TEST(NcuCommand, SectionsRawPageLaunchLimitsAndKernelFilter) {
  NcuConfig c;
  const std::vector<std::string> program = {"/w/gen_3/program", "--mode", "bench", "--results_dir", "/w/gen_3/profile_results"};
  std::vector<std::string> argv = ncu_argv(c, "/usr/local/cuda/bin/ncu", program);
  const std::vector<std::string> head = {"/usr/local/cuda/bin/ncu", "--csv", "--page", "raw", "--target-processes", "all",
                                         "--launch-skip", "0", "--launch-count", "3"};
  ASSERT_GT(argv.size(), head.size() + program.size());
  EXPECT_TRUE(std::equal(head.begin(), head.end(), argv.begin()));
  EXPECT_TRUE(std::equal(program.begin(), program.end(), argv.end() - static_cast<long>(program.size())));
  for (const char* section : {"SpeedOfLight", "Occupancy", "WarpStateStats", "ComputeWorkloadAnalysis"}) {
    auto at = std::find(argv.begin(), argv.end(), section);
    ASSERT_NE(at, argv.end()) << section;
    EXPECT_EQ(*(at - 1), "--section");
  }
  EXPECT_EQ(std::find(argv.begin(), argv.end(), "--kernel-name"), argv.end());
  EXPECT_EQ(std::find(argv.begin(), argv.end(), "--metrics"), argv.end());

  c.launch_skip = 10;
  c.launch_count = 1;
  c.kernel_regex = "cand::";
  c.kernel_name_base = "demangled";
  c.sections = {"SpeedOfLight"};
  c.metrics = {"sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active", "gpu__time_duration.sum"};
  argv = ncu_argv(c, "ncu", {"./p"});
  EXPECT_EQ(argv, (std::vector<std::string>{"ncu", "--csv", "--page", "raw", "--target-processes", "all", "--launch-skip", "10",
                                            "--launch-count", "1", "--kernel-name-base", "demangled", "--kernel-name",
                                            "regex:cand::", "--section", "SpeedOfLight", "--metrics",
                                            "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum",
                                            "./p"}));
}

TEST(FindNcu, ConfiguredPathPathLookupAndMissing) {
  TempDir dir("find_ncu");
  const auto fake = dir / "ncu";
  write_file_atomic(fake, "#!/bin/sh\nexit 0\n");
  ::chmod(fake.c_str(), 0755);
  std::string why;
  auto found = find_ncu(fake.string(), {}, &why);
  ASSERT_TRUE(found) << why;
  EXPECT_EQ(*found, fake);

  // Not executable: named in the note.
  const auto plain = dir / "not_ncu";
  write_file_atomic(plain, "");
  EXPECT_FALSE(find_ncu(plain.string(), {}, &why));
  EXPECT_NE(why.find("not_ncu"), std::string::npos) << why;
  EXPECT_NE(why.find("profile.ncu"), std::string::npos) << why;

  // Looked up in PATH; missing everywhere says where it looked.
  const std::string saved = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", dir.path().c_str(), 1);
  found = find_ncu("", dir / "no_cuda", &why);
  EXPECT_TRUE(found && *found == fake);
  ::setenv("PATH", (dir / "empty").c_str(), 1);
  const bool system_ncu = std::filesystem::exists("/usr/local/cuda/bin/ncu");
  found = find_ncu("", dir / "no_cuda", &why);
  ::setenv("PATH", saved.c_str(), 1);
  if (!system_ncu) {
    EXPECT_FALSE(found);
    EXPECT_NE(why.find("ncu not found (looked in PATH, "), std::string::npos) << why;
    EXPECT_NE(why.find("/usr/local/cuda/bin"), std::string::npos) << why;
  }
}

TEST(ProfileMetrics, FromARawPageCsvOfTheCandidatesKernel) {
  const NcuProfile p = parse_ncu_csv(fixture());
  ASSERT_TRUE(p.ok()) << p.error;
  ASSERT_EQ(p.kernels.size(), 2u);
  const NcuSummary s = summarize_kernel(p.kernels[0]);
  EXPECT_NEAR(*s.duration_us, 1093.31, 1e-9);
  EXPECT_DOUBLE_EQ(*s.dram_pct, 86.02);
  EXPECT_DOUBLE_EQ(*s.l2_pct, 41.37);
  EXPECT_DOUBLE_EQ(*s.occupancy_pct, 71.84);
  EXPECT_DOUBLE_EQ(*s.tensor_pct, 0.0);
  ASSERT_EQ(s.top_stalls.size(), 3u);
  EXPECT_EQ(s.top_stalls[0].first, "long_scoreboard");
  EXPECT_EQ(s.top_stalls[1].first, "lg_throttle");
  EXPECT_EQ(s.top_stalls[2].first, "wait");

  const json stored = profile_metrics(p, 1);
  EXPECT_EQ(stored["tool"], "ncu");
  ASSERT_EQ(stored["kernels"].size(), 1u);  // the longest launch only
  const json& k = stored["kernels"][0];
  EXPECT_DOUBLE_EQ(k["duration_us"].get<double>(), 1093.31);
  EXPECT_DOUBLE_EQ(k["dram_pct"].get<double>(), 86.02);
  EXPECT_DOUBLE_EQ(k["stalls"]["long_scoreboard"].get<double>(), 18.93);
  const std::string line =
      "cand::add_rmsnorm_kernel<8, 4>(const __nv_bfloat16 *, const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, "
      "__nv_bfloat16 *, int, int, float) 1093.3 us: DRAM 86% of peak, L2 41%, occupancy 72%, tensor 0%; stalls: "
      "long_scoreboard 18.9, lg_throttle 2.5, wait 1.5";
  EXPECT_EQ(stored["summary"], line);  // one line per kernel, no trailing newline
  EXPECT_EQ(profile_summary({{"speedup", 2.0}, {"profile", stored}}), line);

  // A text that is no profile is a note, and a note has no summary for the prompts.
  const json note = profile_metrics(parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM\n"));
  EXPECT_EQ(note["tool"], "ncu");
  EXPECT_NE(note["note"].get<std::string>().find("no ncu CSV header"), std::string::npos);
  EXPECT_EQ(profile_summary({{"profile", note}}), "");
  EXPECT_EQ(profile_summary(json::object()), "");
}

// A real capture: the profile level's ncu output on one H100 (ncu 2025, CUDA 13, the default
// sections, add_rmsnorm's first two launches), kept so the parser meets what ncu really prints.
TEST(ProfileMetrics, ARealH100CaptureGivesEveryFigure) {
  auto text = try_read_file(std::filesystem::path(BRAID_SOURCE_DIR) / "tests/eval/ncu/h100_add_rmsnorm_raw.csv");
  ASSERT_TRUE(text.has_value());
  NcuProfile profile = parse_ncu_csv(*text);
  ASSERT_TRUE(profile.ok()) << profile.error;
  ASSERT_EQ(profile.kernels.size(), 2u);
  for (const NcuKernel& k : profile.kernels) {
    EXPECT_NE(k.name.find("add_rmsnorm_kernel"), std::string::npos) << k.name;
    NcuSummary s = summarize_kernel(k);
    ASSERT_TRUE(s.duration_us && s.dram_pct && s.l2_pct && s.occupancy_pct && s.tensor_pct) << k.name;
    EXPECT_GT(*s.duration_us, 1.0);
    EXPECT_LT(*s.duration_us, 100.0);
    EXPECT_GE(*s.dram_pct, 0.0);
    EXPECT_LE(*s.dram_pct, 100.0);
    EXPECT_GT(*s.occupancy_pct, 0.0);
    EXPECT_DOUBLE_EQ(*s.tensor_pct, 0.0);  // a bf16 elementwise kernel issues no MMA
    ASSERT_EQ(s.top_stalls.size(), 3u);
    EXPECT_GE(s.top_stalls[0].second, s.top_stalls[1].second);
  }
  std::string feedback = ncu_feedback(profile);
  EXPECT_NE(feedback.find("DRAM"), std::string::npos) << feedback;
  EXPECT_NE(feedback.find("stalls: long_scoreboard"), std::string::npos) << feedback;
}

TEST(ProfileWorkload, TopLevelProfileKeyIsValidatedAndReachesTheConfig) {
  TempDir dir("profile_yaml");
  write_file_atomic(dir / "p.cu", "int main() {}\n");
  auto write = [&](const std::string& evaluator, const std::string& profile) {
    write_file_atomic(dir / "workload.yaml", "name: w\nprogram: p.cu\nevaluator:\n" + evaluator + profile);
  };
  const std::string gpu = "  kind: gpu\n  ranks: 1\n";
  write(gpu, "profile:\n  top_k: 5\n  timeout_s: 90\n  kernel_regex: \"cand::\"\n  kernel_name_base: demangled\n  launch_count: 2\n");
  WorkloadSpec spec = load_workload(dir.path());
  NcuConfig c = NcuConfig::from_json(spec.evaluator["profile"]);
  EXPECT_TRUE(c.enabled);  // a profile section turns it on unless it says enabled: false
  EXPECT_EQ(c.top_k, 5);
  EXPECT_DOUBLE_EQ(c.timeout_s, 90.0);
  EXPECT_EQ(c.kernel_regex, "cand::");
  EXPECT_EQ(c.kernel_name_base, "demangled");
  EXPECT_EQ(c.launch_count, 2);
  EXPECT_EQ(c.sections.size(), 4u);

  write(gpu, "");
  EXPECT_FALSE(load_workload(dir.path()).evaluator.contains("profile"));
  EXPECT_FALSE(NcuConfig::from_json(json()).enabled);

  auto error_of = [&](const std::string& evaluator, const std::string& profile) {
    write(evaluator, profile);
    try {
      load_workload(dir.path());
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(gpu, "profile:\n  topk: 3\n").find("unknown key 'topk' in profile"), std::string::npos);
  EXPECT_NE(error_of(gpu, "profile:\n  top_k: 0\n").find("'top_k' in profile must be a whole number from 1"), std::string::npos);
  EXPECT_NE(error_of(gpu, "profile:\n  kernel_name_base: full\n").find("kernel_name_base 'full' is unknown"), std::string::npos);
  EXPECT_NE(error_of(gpu, "profile: yes\n").find("'profile' must be a mapping"), std::string::npos);
  const std::string cpu = "  kind: external\n  command: \"./run {program}\"\n";
  EXPECT_NE(error_of(cpu, "profile:\n  top_k: 2\n").find("'profile' needs evaluator kind gpu"), std::string::npos);
  EXPECT_EQ(error_of(cpu, "profile:\n  enabled: false\n"), "no error");
}

}  // namespace
}  // namespace braid
