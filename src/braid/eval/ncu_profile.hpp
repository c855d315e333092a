// Nsight Compute's CSV output, parsed into per-kernel metrics, and the few figures a mutation
// needs from it (issue #24, part 3: profiler feedback for the best candidates).
//
//   ncu --csv --metrics a,b,c ./program ...      long form: one row per (kernel, metric) with
//                                                "ID", "Kernel Name", "Metric Name", "Metric Unit",
//                                                "Metric Value" (also --section ... output)
//   ncu --csv --page raw --metrics a,b,c ...     wide form: one row per kernel, a column per
//                                                metric, the second row holding the units
// Lines before the CSV header (the program's own output, "==PROF==" notes) are skipped. Numbers
// may carry thousands separators ("1,024.50"); "n/a" and other text stay as text.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

struct NcuMetric {
  std::string name;   // e.g. dram__throughput.avg.pct_of_peak_sustained_elapsed
  std::string unit;   // "%", "nsecond", "byte/second", ... ("" when ncu gives none)
  std::string text;   // the value as printed
  std::optional<double> value;  // the value when it is a number
};

struct NcuKernel {
  int id = -1;                 // ncu's "ID": launch order among the profiled kernels
  std::string name;            // "Kernel Name" (demangled as ncu prints it)
  std::string block, grid;     // "(512, 1, 1)" when present
  std::vector<NcuMetric> metrics;

  const NcuMetric* find(std::string_view metric_name) const;
  std::optional<double> value(std::string_view metric_name) const;
};

struct NcuProfile {
  std::vector<NcuKernel> kernels;  // in ID order
  std::string error;               // why the text could not be read; empty when it was
  bool ok() const { return error.empty(); }
};

// Never throws: a text that is not ncu CSV gives a profile with `error` set (naming the line).
NcuProfile parse_ncu_csv(std::string_view text);

// The figures the feedback shows for one kernel, from whichever of ncu's names for them the
// profile holds (absent ones stay empty).
struct NcuSummary {
  std::string kernel;
  std::optional<double> duration_us;
  std::optional<double> dram_pct;       // DRAM throughput, % of peak
  std::optional<double> l2_pct;         // L2 throughput, % of peak
  std::optional<double> occupancy_pct;  // achieved occupancy, % of the SM's warps
  std::optional<double> tensor_pct;     // tensor pipe active, % of peak
  std::vector<std::pair<std::string, double>> top_stalls;  // reason -> cycles per issued instruction, largest first
};

NcuSummary summarize_kernel(const NcuKernel& kernel, std::size_t max_stalls = 3);

// One line per kernel (the longest first, at most `max_kernels`), e.g.
// "add_rmsnorm_kernel 41.2 us: DRAM 91% of peak, L2 48%, occupancy 62%, tensor 0%; stalls:
// long_scoreboard 9.1, barrier 1.2, wait 0.8".
std::string ncu_feedback(const NcuProfile& profile, std::size_t max_kernels = 3);

}  // namespace braid
