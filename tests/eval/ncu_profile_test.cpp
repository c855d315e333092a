// Nsight Compute CSV parsing (profiler feedback, issue #24 part 3). The texts below follow the
// layout of `ncu --csv --metrics ...` (long form) and `ncu --csv --page raw --metrics ...` (wide
// form, with a units row), including the program's own output and ==PROF== notes before the CSV.
#include "braid/eval/ncu_profile.hpp"

#include <gtest/gtest.h>

namespace braid {
namespace {

const char* const kLongForm =
    "correct\n"
    "a line of the program's own with an odd \" quote\n"
    "==PROF== Connected to process 4242 (/tmp/eval/program)\n"
    "==PROF== Profiling \"add_rmsnorm_kernel\" - 0: 0%....50%....100% - 9 passes\n"
    "==PROF== Disconnected from process 4242\n"
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid Size\",\"Device\","
    "\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
    "\"0\",\"4242\",\"program\",\"127.0.0.1\",\"cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *)\",\"1\",\"13\","
    "\"(512, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"nsecond\",\"41,230\"\n"
    "\"0\",\"4242\",\"program\",\"127.0.0.1\",\"cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *)\",\"1\",\"13\","
    "\"(512, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"dram__throughput.avg.pct_of_peak_sustained_elapsed\",\"%\",\"91.23\"\n"
    "\"0\",\"4242\",\"program\",\"127.0.0.1\",\"cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *)\",\"1\",\"13\","
    "\"(512, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"lts__throughput.avg.pct_of_peak_sustained_elapsed\",\"%\",\"47.8\"\n"
    "\"0\",\"4242\",\"program\",\"127.0.0.1\",\"cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *)\",\"1\",\"13\","
    "\"(512, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"sm__warps_active.avg.pct_of_peak_sustained_active\",\"%\",\"62.4\"\n"
    "\"0\",\"4242\",\"program\",\"127.0.0.1\",\"cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *)\",\"1\",\"13\","
    "\"(512, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\","
    "\"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio\",\"ratio\",\"9.12\"\n"
    "\"0\",\"4242\",\"program\",\"127.0.0.1\",\"cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *)\",\"1\",\"13\","
    "\"(512, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\","
    "\"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio\",\"ratio\",\"1.20\"\n"
    "\"0\",\"4242\",\"program\",\"127.0.0.1\",\"cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *)\",\"1\",\"13\","
    "\"(512, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\","
    "\"smsp__average_warps_issue_stalled_long_scoreboard_not_issued_per_issue_active.ratio\",\"ratio\",\"50.0\"\n"
    "\"0\",\"4242\",\"program\",\"127.0.0.1\",\"cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *)\",\"1\",\"13\","
    "\"(512, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\","
    "\"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio\",\"ratio\",\"0.81\"\n"
    "\"0\",\"4242\",\"program\",\"127.0.0.1\",\"cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *)\",\"1\",\"13\","
    "\"(512, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\","
    "\"smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio\",\"ratio\",\"0.05\"\n"
    "\"0\",\"4242\",\"program\",\"127.0.0.1\",\"cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *)\",\"1\",\"13\","
    "\"(512, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\","
    "\"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active\",\"%\",\"n/a\"\n"
    "\"1\",\"4242\",\"program\",\"127.0.0.1\",\"seed_kernel<0>\",\"1\",\"13\",\"(256, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\","
    "\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"usecond\",\"1,024.50\"\n"
    "\"1\",\"4242\",\"program\",\"127.0.0.1\",\"seed_kernel<0>\",\"1\",\"13\",\"(256, 1, 1)\",\"(16384, 1, 1)\",\"0\",\"9.0\","
    "\"Command line profiler metrics\",\"dram__throughput.avg.pct_of_peak_sustained_elapsed\",\"%\",\"12.5\"\n";

TEST(NcuProfile, LongFormAfterTheProgramsOutput) {
  const NcuProfile p = parse_ncu_csv(kLongForm);
  ASSERT_TRUE(p.ok()) << p.error;
  ASSERT_EQ(p.kernels.size(), 2u);
  const NcuKernel& k = p.kernels[0];
  EXPECT_EQ(k.id, 0);
  EXPECT_EQ(k.name, "cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *)");  // commas inside quotes
  EXPECT_EQ(k.block, "(512, 1, 1)");
  EXPECT_EQ(k.grid, "(16384, 1, 1)");
  EXPECT_EQ(k.metrics.size(), 10u);
  EXPECT_DOUBLE_EQ(*k.value("gpu__time_duration.sum"), 41230.0);  // thousands separator
  EXPECT_EQ(k.find("gpu__time_duration.sum")->unit, "nsecond");
  const NcuMetric* tensor = k.find("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active");
  ASSERT_NE(tensor, nullptr);
  EXPECT_EQ(tensor->text, "n/a");
  EXPECT_FALSE(tensor->value.has_value());
  EXPECT_EQ(p.kernels[1].name, "seed_kernel<0>");
  EXPECT_DOUBLE_EQ(*p.kernels[1].value("gpu__time_duration.sum"), 1024.5);

  const NcuSummary s = summarize_kernel(k);
  ASSERT_TRUE(s.duration_us.has_value());
  EXPECT_NEAR(*s.duration_us, 41.23, 1e-9);
  EXPECT_DOUBLE_EQ(*s.dram_pct, 91.23);
  EXPECT_DOUBLE_EQ(*s.l2_pct, 47.8);
  EXPECT_DOUBLE_EQ(*s.occupancy_pct, 62.4);
  EXPECT_FALSE(s.tensor_pct.has_value());
  // Largest first, the _not_issued variant left out, three kept.
  ASSERT_EQ(s.top_stalls.size(), 3u);
  EXPECT_EQ(s.top_stalls[0].first, "long_scoreboard");
  EXPECT_DOUBLE_EQ(s.top_stalls[0].second, 9.12);
  EXPECT_EQ(s.top_stalls[1].first, "barrier");
  EXPECT_EQ(s.top_stalls[2].first, "wait");

  // The longest kernel first (1024.5 us before 41.2 us).
  const std::string text = ncu_feedback(p);
  EXPECT_EQ(text,
            "seed_kernel<0> 1024.5 us: DRAM 12% of peak\n"
            "cand::add_rmsnorm_kernel(const __nv_bfloat16 *, const __nv_bfloat16 *) 41.2 us: DRAM 91% of peak, L2 48%, occupancy 62%; "
            "stalls: long_scoreboard 9.1, barrier 1.2, wait 0.8\n");
  EXPECT_EQ(ncu_feedback(p, 1), "seed_kernel<0> 1024.5 us: DRAM 12% of peak\n");
}

TEST(NcuProfile, WideRawPageWithUnitsRow) {
  const char* const raw =
      "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid Size\","
      "\"Device\",\"CC\",\"dram__throughput.avg.pct_of_peak_sustained_elapsed\",\"gpu__time_duration.sum\","
      "\"sm__warps_active.avg.pct_of_peak_sustained_active\"\r\n"
      "\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"%\",\"msecond\",\"%\"\r\n"
      "\"0\",\"77\",\"program\",\"localhost\",\"cand::softmax_kernel(const __nv_bfloat16 *, __nv_bfloat16 *, int)\",\"1\",\"7\","
      "\"(512, 1, 1)\",\"(2048, 1, 1)\",\"0\",\"9.0\",\"83.1\",\"0.081\",\"48.0\"\r\n";
  const NcuProfile p = parse_ncu_csv(raw);
  ASSERT_TRUE(p.ok()) << p.error;
  ASSERT_EQ(p.kernels.size(), 1u);
  const NcuKernel& k = p.kernels[0];
  EXPECT_EQ(k.name, "cand::softmax_kernel(const __nv_bfloat16 *, __nv_bfloat16 *, int)");
  ASSERT_EQ(k.metrics.size(), 3u);  // launch columns are not metrics
  EXPECT_EQ(k.find("gpu__time_duration.sum")->unit, "msecond");
  const NcuSummary s = summarize_kernel(k);
  EXPECT_NEAR(*s.duration_us, 81.0, 1e-9);
  EXPECT_DOUBLE_EQ(*s.dram_pct, 83.1);
  EXPECT_DOUBLE_EQ(*s.occupancy_pct, 48.0);
  EXPECT_TRUE(s.top_stalls.empty());
}

TEST(NcuProfile, TextThatIsNotAProfileIsAnErrorValue) {
  NcuProfile none = parse_ncu_csv("correct\n==ERROR== ncu: permission denied (ERR_NVGPUCTRPERM)\n");
  EXPECT_FALSE(none.ok());
  EXPECT_NE(none.error.find("no ncu CSV header"), std::string::npos);
  EXPECT_EQ(ncu_feedback(none), "profile unavailable: " + none.error);

  NcuProfile header_only = parse_ncu_csv("\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n");
  EXPECT_FALSE(header_only.ok());
  EXPECT_NE(header_only.error.find("no kernel rows"), std::string::npos);

  NcuProfile ragged = parse_ncu_csv("\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n\"0\",\"k\",\"m\"\n");
  EXPECT_FALSE(ragged.ok());
  EXPECT_EQ(ragged.error, "line 2: 3 fields where the header has 5");  // lines counted from the text's start

  NcuProfile no_name = parse_ncu_csv("\"ID\",\"Metric Name\",\"Metric Value\"\n");
  EXPECT_FALSE(no_name.ok());
  EXPECT_NE(no_name.error.find("Kernel Name"), std::string::npos);

  NcuProfile bad_id = parse_ncu_csv("\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n\"x\",\"k\",\"m\",\"%\",\"1\"\n");
  EXPECT_FALSE(bad_id.ok());
  EXPECT_EQ(bad_id.error, "line 2: ID 'x' is not a number");
}

}  // namespace
}  // namespace braid
