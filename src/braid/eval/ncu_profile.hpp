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
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "braid/util/json.hpp"

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

// ---- the profile level of the GPU cascade (workload.yaml `profile:`, docs/gpu-workloads.md) ----

struct NcuConfig {
  bool enabled = false;
  int top_k = 3;                 // profile a correct candidate whose score is among the k best seen
  double timeout_s = 300.0;      // the whole ncu run; past it the profile is a note
  std::string ncu;               // path or name of ncu; "": PATH, then <CUDA>/bin/ncu
  int launch_count = 3;          // kernel launches profiled (--launch-count)
  int launch_skip = 0;           // launches skipped first (--launch-skip)
  std::string kernel_regex;      // --kernel-name regex:<this>; "": every kernel
  std::string kernel_name_base = "function";  // function | demangled | mangled
  // Sections exist on every architecture (an unknown --metrics name fails the whole run); with
  // --page raw their raw metrics come out, stall reasons and pipe utilisation included.
  std::vector<std::string> sections = {"SpeedOfLight", "Occupancy", "WarpStateStats", "ComputeWorkloadAnalysis"};
  std::vector<std::string> metrics;  // extra metric names (--metrics a,b)

  // From the `profile` object load_workload validated; absent keys keep their defaults.
  static NcuConfig from_json(const json& section);
};

// ncu's argv around the program's: `ncu --csv --page raw --target-processes all ... <program...>`.
std::vector<std::string> ncu_argv(const NcuConfig& config, const std::string& ncu,
                                  const std::vector<std::string>& program_argv);

// The ncu to run: `configured` (a path, or a name looked up in PATH), else ncu in PATH, else
// <cuda_home>/bin/ncu and /usr/local/cuda/bin/ncu. nullopt with `why` when none is executable.
std::optional<std::filesystem::path> find_ncu(const std::string& configured, const std::filesystem::path& cuda_home,
                                              std::string* why);

// Who is profiled: correct candidates whose score is a new best or among the `top_k` best
// correct scores seen so far (profiling is slow: CuTeGen's lesson, bring it in late). A program
// text is profiled once (re-measurements of the same code are not). The gate knows what this
// process evaluated: after a resume the first correct candidates count as the best. Thread-safe.
class ProfileGate {
 public:
  explicit ProfileGate(int top_k) : top_k_(top_k) {}
  // Records `score` for `code_key` and says whether to profile it. A re-measurement
  // (`may_profile` false: its result only gives a score) is counted, never profiled.
  bool admit(const std::string& code_key, double score, bool may_profile = true);

 private:
  std::size_t better_than(double score) const;  // distinct programs scoring above `score`
  int top_k_;
  std::mutex mu_;
  std::map<std::string, double> best_;  // code key -> best score seen
  std::set<std::string> profiled_;
};

// What is stored with the program (public_metrics["profile"], docs/gpu-workloads.md):
//   {"tool": "ncu", "summary": "<ncu_feedback lines>", "kernels": [{"name", "duration_us",
//    "dram_pct", "l2_pct", "occupancy_pct", "tensor_pct", "stalls": {reason: ratio}}, ...]}
// or, when no profile could be taken, {"tool": "ncu", "note": "<why>"}.
json profile_metrics(const NcuProfile& profile, std::size_t max_kernels = 3);
json profile_note(const std::string& why);

}  // namespace braid
