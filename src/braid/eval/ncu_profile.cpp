#include "braid/eval/ncu_profile.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>

namespace braid {
namespace {

// RFC 4180 fields of one record starting at `pos`; advances `pos` past the record's line end.
// Quoted fields may hold commas, doubled quotes and newlines.
std::vector<std::string> read_record(std::string_view text, std::size_t& pos) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  while (pos < text.size()) {
    const char c = text[pos++];
    if (quoted) {
      if (c == '"') {
        if (pos < text.size() && text[pos] == '"') {
          fields.back() += '"';
          ++pos;
        } else {
          quoted = false;
        }
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c == '\n') {
      break;
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return fields;
}

std::optional<double> parse_number(const std::string& s) {
  std::string digits;
  for (char c : s)
    if (c != ',' && c != ' ') digits += c;
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size() || errno == ERANGE) return std::nullopt;
  return v;
}

int column(const std::vector<std::string>& header, std::string_view name) {
  for (std::size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int>(i);
  return -1;
}

std::string field(const std::vector<std::string>& row, int i) {
  return i >= 0 && static_cast<std::size_t>(i) < row.size() ? row[static_cast<std::size_t>(i)] : std::string();
}

// Columns that describe the launch, not a metric, in the wide (raw page) form.
bool is_launch_column(const std::string& name) {
  static const char* const kLaunch[] = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
                                        "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name", "Function Name",
                                        "Demangled Name", "Estimated Speedup", "Estimated Speedup Type"};
  return std::find(std::begin(kLaunch), std::end(kLaunch), name) != std::end(kLaunch);
}

// Durations in microseconds, whatever unit ncu chose.
std::optional<double> to_us(const NcuMetric& m) {
  if (!m.value) return std::nullopt;
  const double v = *m.value;
  if (m.unit == "nsecond" || m.unit == "ns") return v / 1e3;
  if (m.unit == "usecond" || m.unit == "us") return v;
  if (m.unit == "msecond" || m.unit == "ms") return v * 1e3;
  if (m.unit == "second" || m.unit == "s") return v * 1e6;
  return std::nullopt;
}

std::optional<double> first_of(const NcuKernel& k, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names)
    if (auto v = k.value(n)) return v;
  return std::nullopt;
}

}  // namespace

const NcuMetric* NcuKernel::find(std::string_view metric_name) const {
  for (const NcuMetric& m : metrics)
    if (m.name == metric_name) return &m;
  return nullptr;
}

std::optional<double> NcuKernel::value(std::string_view metric_name) const {
  const NcuMetric* m = find(metric_name);
  return m ? m->value : std::nullopt;
}

NcuProfile parse_ncu_csv(std::string_view text) {
  NcuProfile p;
  std::size_t pos = 0, line = 0;
  std::vector<std::string> header;
  // The header is the first line starting with "ID", (everything before it is the program's
  // output and ncu's ==PROF== lines, read as plain lines: an odd quote there must not swallow it).
  while (pos < text.size()) {
    ++line;
    const std::size_t eol = std::min(text.find('\n', pos), text.size());
    if (text.compare(pos, 5, "\"ID\",") == 0 || text.compare(pos, 3, "ID,") == 0) {
      header = read_record(text, pos);
      break;
    }
    pos = eol + 1;
  }
  if (header.empty()) {
    p.error = "no ncu CSV header (a line starting with \"ID\") in the profiler output";
    return p;
  }
  const int c_id = column(header, "ID"), c_name = column(header, "Kernel Name"), c_block = column(header, "Block Size"),
            c_grid = column(header, "Grid Size"), c_metric = column(header, "Metric Name"), c_unit = column(header, "Metric Unit"),
            c_value = column(header, "Metric Value");
  if (c_name < 0) {
    p.error = fmt::format("line {}: the ncu CSV header has no \"Kernel Name\" column", line);
    return p;
  }
  const bool long_form = c_metric >= 0 && c_value >= 0;
  std::vector<std::string> units;
  std::map<int, std::size_t> by_id;
  while (pos < text.size()) {
    ++line;
    std::vector<std::string> row = read_record(text, pos);
    if (row.size() == 1 && row[0].empty()) continue;  // blank line
    if (row.size() != header.size()) {
      if (row[0].rfind("==", 0) == 0) continue;  // an ncu note between records
      p.error = fmt::format("line {}: {} fields where the header has {}", line, row.size(), header.size());
      return p;
    }
    if (!long_form && units.empty() && field(row, c_id).empty()) {  // the raw page's unit row
      units = row;
      continue;
    }
    const auto id_value = parse_number(field(row, c_id));
    if (!id_value) {
      p.error = fmt::format("line {}: ID '{}' is not a number", line, field(row, c_id));
      return p;
    }
    const int id = static_cast<int>(*id_value);
    auto [it, fresh] = by_id.emplace(id, p.kernels.size());
    if (fresh) {
      NcuKernel k;
      k.id = id;
      k.name = field(row, c_name);
      k.block = field(row, c_block);
      k.grid = field(row, c_grid);
      p.kernels.push_back(std::move(k));
    }
    NcuKernel& k = p.kernels[it->second];
    if (long_form) {
      NcuMetric m;
      m.name = field(row, c_metric);
      m.unit = field(row, c_unit);
      m.text = field(row, c_value);
      m.value = parse_number(m.text);
      if (!m.name.empty()) k.metrics.push_back(std::move(m));
    } else {
      for (std::size_t i = 0; i < header.size(); ++i) {
        if (is_launch_column(header[i])) continue;
        NcuMetric m;
        m.name = header[i];
        m.unit = i < units.size() ? units[i] : std::string();
        m.text = row[i];
        m.value = parse_number(m.text);
        k.metrics.push_back(std::move(m));
      }
    }
  }
  std::sort(p.kernels.begin(), p.kernels.end(), [](const NcuKernel& a, const NcuKernel& b) { return a.id < b.id; });
  if (p.kernels.empty()) p.error = "the ncu CSV has a header but no kernel rows (no kernel matched, or none ran)";
  return p;
}

NcuSummary summarize_kernel(const NcuKernel& k, std::size_t max_stalls) {
  NcuSummary s;
  s.kernel = k.name;
  if (const NcuMetric* d = k.find("gpu__time_duration.sum")) s.duration_us = to_us(*d);
  if (!s.duration_us)
    if (const NcuMetric* d = k.find("Duration")) s.duration_us = to_us(*d);
  s.dram_pct = first_of(k, {"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                            "DRAM Throughput"});
  s.l2_pct = first_of(k, {"lts__throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_sectors.avg.pct_of_peak_sustained_elapsed",
                          "L2 Cache Throughput"});
  s.occupancy_pct = first_of(k, {"sm__warps_active.avg.pct_of_peak_sustained_active", "Achieved Occupancy"});
  s.tensor_pct = first_of(k, {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                              "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                              "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                              "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active"});
  // Warp stalls: smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio (cycles a warp
  // spends stalled for <reason> per issued instruction); "_not_issued" variants are skipped.
  static const std::string kPrefix = "smsp__average_warps_issue_stalled_", kSuffix = "_per_issue_active.ratio";
  for (const NcuMetric& m : k.metrics) {
    if (!m.value || m.name.size() <= kPrefix.size() + kSuffix.size()) continue;
    if (m.name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    if (m.name.compare(m.name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) continue;
    const std::string reason = m.name.substr(kPrefix.size(), m.name.size() - kPrefix.size() - kSuffix.size());
    if (reason.find("not_issued") != std::string::npos) continue;
    s.top_stalls.emplace_back(reason, *m.value);
  }
  std::stable_sort(s.top_stalls.begin(), s.top_stalls.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (s.top_stalls.size() > max_stalls) s.top_stalls.resize(max_stalls);
  return s;
}

std::string ncu_feedback(const NcuProfile& profile, std::size_t max_kernels) {
  if (!profile.ok()) return "profile unavailable: " + profile.error;
  std::vector<NcuSummary> all;
  for (const NcuKernel& k : profile.kernels) all.push_back(summarize_kernel(k));
  std::stable_sort(all.begin(), all.end(), [](const NcuSummary& a, const NcuSummary& b) { return a.duration_us.value_or(0) > b.duration_us.value_or(0); });
  std::string out;
  for (std::size_t i = 0; i < all.size() && i < max_kernels; ++i) {
    const NcuSummary& s = all[i];
    std::string line = s.kernel;
    if (s.duration_us) line += fmt::format(" {:.1f} us", *s.duration_us);
    std::vector<std::string> parts;
    if (s.dram_pct) parts.push_back(fmt::format("DRAM {:.0f}% of peak", *s.dram_pct));
    if (s.l2_pct) parts.push_back(fmt::format("L2 {:.0f}%", *s.l2_pct));
    if (s.occupancy_pct) parts.push_back(fmt::format("occupancy {:.0f}%", *s.occupancy_pct));
    if (s.tensor_pct) parts.push_back(fmt::format("tensor {:.0f}%", *s.tensor_pct));
    if (!parts.empty()) line += ": " + fmt::format("{}", fmt::join(parts, ", "));
    if (!s.top_stalls.empty()) {
      std::vector<std::string> stalls;
      for (const auto& [reason, v] : s.top_stalls) stalls.push_back(fmt::format("{} {:.1f}", reason, v));
      line += "; stalls: " + fmt::format("{}", fmt::join(stalls, ", "));
    }
    out += line + "\n";
  }
  return out;
}

// ---- the profile level ----

NcuConfig NcuConfig::from_json(const json& section) {
  NcuConfig c;
  if (!section.is_object()) return c;
  c.enabled = section.value("enabled", c.enabled);
  c.top_k = section.value("top_k", c.top_k);
  c.timeout_s = section.value("timeout_s", c.timeout_s);
  c.ncu = section.value("ncu", c.ncu);
  c.launch_count = section.value("launch_count", c.launch_count);
  c.launch_skip = section.value("launch_skip", c.launch_skip);
  c.kernel_regex = section.value("kernel_regex", c.kernel_regex);
  c.kernel_name_base = section.value("kernel_name_base", c.kernel_name_base);
  if (auto it = section.find("sections"); it != section.end() && it->is_array()) c.sections = it->get<std::vector<std::string>>();
  if (auto it = section.find("metrics"); it != section.end() && it->is_array()) c.metrics = it->get<std::vector<std::string>>();
  return c;
}

std::vector<std::string> ncu_argv(const NcuConfig& config, const std::string& ncu, const std::vector<std::string>& program_argv) {
  // --page raw: one row per kernel with every collected metric (the sections' own pages hold
  // only their display figures, not the per-reason stalls).
  std::vector<std::string> argv = {ncu, "--csv", "--page", "raw", "--target-processes", "all",
                                   "--launch-skip", std::to_string(config.launch_skip),
                                   "--launch-count", std::to_string(config.launch_count)};
  if (!config.kernel_regex.empty()) {
    argv.insert(argv.end(), {"--kernel-name-base", config.kernel_name_base, "--kernel-name", "regex:" + config.kernel_regex});
  }
  for (const std::string& section : config.sections) argv.insert(argv.end(), {"--section", section});
  if (!config.metrics.empty()) argv.insert(argv.end(), {"--metrics", fmt::format("{}", fmt::join(config.metrics, ","))});
  argv.insert(argv.end(), program_argv.begin(), program_argv.end());
  return argv;
}

namespace {

bool executable(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

std::optional<std::filesystem::path> in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "";
  while (true) {
    const std::size_t colon = rest.find(':');
    const std::string_view dir = rest.substr(0, colon);
    if (!dir.empty() && executable(std::filesystem::path(dir) / name)) return std::filesystem::path(dir) / name;
    if (colon == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(colon + 1);
  }
}

}  // namespace

std::optional<std::filesystem::path> find_ncu(const std::string& configured, const std::filesystem::path& cuda_home,
                                              std::string* why) {
  if (!configured.empty()) {
    if (configured.find('/') != std::string::npos) {
      if (executable(configured)) return std::filesystem::path(configured);
    } else if (auto found = in_path(configured)) {
      return found;
    }
    if (why) *why = "ncu '" + configured + "' (profile.ncu in workload.yaml) is not an executable file";
    return std::nullopt;
  }
  if (auto found = in_path("ncu")) return found;
  for (const auto& home : {cuda_home, std::filesystem::path("/usr/local/cuda")})
    if (!home.empty() && executable(home / "bin" / "ncu")) return home / "bin" / "ncu";
  if (why) *why = "ncu not found (looked in PATH, " + (cuda_home.empty() ? std::string() : (cuda_home / "bin").string() + ", ") +
                  "/usr/local/cuda/bin)";
  return std::nullopt;
}

std::size_t ProfileGate::better_than(double score) const {
  std::size_t n = 0;
  for (const auto& [key, best] : best_) n += best > score ? 1 : 0;
  return n;
}

bool ProfileGate::admit(const std::string& code_key, double score, bool may_profile) {
  std::lock_guard lock(mu_);
  double& best = best_.try_emplace(code_key, score).first->second;
  best = std::max(best, score);
  if (!may_profile || profiled_.count(code_key)) return false;
  // Fewer than k distinct programs above it: a new best or one of the k best.
  if (better_than(score) >= static_cast<std::size_t>(std::max(top_k_, 1))) return false;
  profiled_.insert(code_key);
  return true;
}

json profile_metrics(const NcuProfile& profile, std::size_t max_kernels) {
  if (!profile.ok()) return profile_note(profile.error);
  json kernels = json::array();
  std::vector<NcuSummary> all;
  for (const NcuKernel& k : profile.kernels) all.push_back(summarize_kernel(k));
  std::stable_sort(all.begin(), all.end(), [](const NcuSummary& a, const NcuSummary& b) { return a.duration_us.value_or(0) > b.duration_us.value_or(0); });
  for (std::size_t i = 0; i < all.size() && i < max_kernels; ++i) {
    const NcuSummary& s = all[i];
    json k = {{"name", s.kernel}};
    auto put = [&k](const char* key, const std::optional<double>& v) {
      if (v) k[key] = *v;
    };
    put("duration_us", s.duration_us);
    put("dram_pct", s.dram_pct);
    put("l2_pct", s.l2_pct);
    put("occupancy_pct", s.occupancy_pct);
    put("tensor_pct", s.tensor_pct);
    json stalls = json::object();
    for (const auto& [reason, v] : s.top_stalls) stalls[reason] = v;
    if (!stalls.empty()) k["stalls"] = stalls;
    kernels.push_back(std::move(k));
  }
  std::string summary = ncu_feedback(profile, max_kernels);
  while (!summary.empty() && summary.back() == '\n') summary.pop_back();
  return {{"tool", "ncu"}, {"summary", summary}, {"kernels", kernels}};
}

json profile_note(const std::string& why) { return {{"tool", "ncu"}, {"note", why}}; }

}  // namespace braid
