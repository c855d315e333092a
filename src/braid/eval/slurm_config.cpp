#include "braid/eval/slurm_config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <regex>

#include "braid/util/error.hpp"

namespace braid {
namespace {

const std::vector<std::string> kSlurmKeys = {"partition", "account", "qos", "time", "ranks", "gpus_per_task",
                                             "gpus_per_node", "nodes", "cpus_per_task", "mem", "shared_dir",
                                             "sbatch_args", "max_requeues", "poll_interval_s"};

class SlurmSectionReader {
 public:
  SlurmSectionReader(const YAML::Node& node, std::string yaml) : node_(node), yaml_(std::move(yaml)) {}

  [[noreturn]] void error(const YAML::Node& at, const std::string& problem) const {
    const auto mark = at.Mark();
    const std::string text = "evaluator.slurm: " + problem;
    if (mark.line >= 0) throw UserError(yaml_, "line " + std::to_string(mark.line + 1) + ": " + text);
    throw UserError(yaml_, text);
  }

  std::string text(const std::string& key) const {
    const YAML::Node v = node_[key];
    if (!v) return {};
    if (!v.IsScalar() || v.as<std::string>().empty()) error(v, "'" + key + "' must be a non-empty string");
    const std::string s = v.as<std::string>();
    // A value that sbatch would read as another option, or that would break the job script.
    if (s.front() == '-' || s.find_first_of("\n\r'\"") != std::string::npos)
      error(v, "'" + key + "' may not start with '-' or hold quotes or line breaks (got '" + s + "')");
    return s;
  }

  std::optional<long> whole(const std::string& key, long min, long max) const {
    const YAML::Node v = node_[key];
    if (!v) return std::nullopt;
    long value = 0;
    if (!v.IsScalar() || !YAML::convert<long>::decode(v, value) || value < min || value > max)
      error(v, "'" + key + "' must be a whole number from " + std::to_string(min) + " to " + std::to_string(max));
    return value;
  }

  json read() const {
    if (!node_.IsMap()) error(node_, "must be a mapping (partition, account, qos, time, ranks, gpus_per_task, ...)");
    for (const auto& entry : node_) {
      const std::string key = entry.first.as<std::string>();
      if (std::find(kSlurmKeys.begin(), kSlurmKeys.end(), key) != kSlurmKeys.end()) continue;
      std::string list;
      for (const auto& k : kSlurmKeys) list += (list.empty() ? "" : ", ") + k;
      error(entry.first, "unknown key '" + key + "' (expected one of: " + list + ")");
    }
    json s = json::object();
    for (const char* key : {"partition", "account", "qos", "mem", "shared_dir"})
      if (auto v = text(key); !v.empty()) s[key] = v;
    if (const YAML::Node t = node_["time"]) {
      const std::string v = t.IsScalar() ? t.as<std::string>() : "";
      if (!is_slurm_time(v))
        error(t, "'time' must be a Slurm time limit: minutes, \"MM:SS\", \"HH:MM:SS\" or \"D-HH:MM:SS\" (got '" + v + "')");
      s["time"] = v;
    }
    s["ranks"] = whole("ranks", 1, 65536).value_or(1);
    s["gpus_per_task"] = whole("gpus_per_task", 0, 64).value_or(0);
    s["gpus_per_node"] = whole("gpus_per_node", 0, 1024).value_or(0);
    s["nodes"] = whole("nodes", 0, 65536).value_or(0);
    s["cpus_per_task"] = whole("cpus_per_task", 1, 4096).value_or(1);
    s["max_requeues"] = whole("max_requeues", 0, 100).value_or(3);
    if (s["gpus_per_node"].get<long>() > 0 && s["gpus_per_task"].get<long>() > s["gpus_per_node"].get<long>())
      error(node_["gpus_per_task"], "'gpus_per_task' (" + std::to_string(s["gpus_per_task"].get<long>()) +
                                        ") is more than 'gpus_per_node' (" + std::to_string(s["gpus_per_node"].get<long>()) + ")");
    if (s["nodes"].get<long>() > s["ranks"].get<long>())
      error(node_["nodes"], "'nodes' (" + std::to_string(s["nodes"].get<long>()) + ") is more than 'ranks' (" +
                                std::to_string(s["ranks"].get<long>()) + "): every node needs a rank");
    if (const YAML::Node p = node_["poll_interval_s"]) {
      double v = 0;
      if (!p.IsScalar() || !YAML::convert<double>::decode(p, v) || !std::isfinite(v) || v < 0.05 || v > 60)
        error(p, "'poll_interval_s' must be a number of seconds from 0.05 to 60");
      s["poll_interval_s"] = v;
    }
    json args = json::array();
    if (const YAML::Node a = node_["sbatch_args"]) {
      if (!a.IsSequence()) error(a, "'sbatch_args' must be a list of strings");
      for (const auto& item : a) {
        if (!item.IsScalar() || item.as<std::string>().empty()) error(item, "'sbatch_args' must be a list of non-empty strings");
        const std::string arg = item.as<std::string>();
        // braid owns these: the job's output, its script and how it reports its end.
        for (const char* owned : {"--output", "-o", "--error", "-e", "--parsable", "--wrap", "--chdir", "-D", "--job-name", "-J"})
          if (arg == owned || arg.rfind(std::string(owned) + "=", 0) == 0)
            error(item, "'sbatch_args' may not set " + std::string(owned) + " (braid sets it for each job)");
        args.push_back(arg);
      }
    }
    s["sbatch_args"] = args;
    return s;
  }

 private:
  const YAML::Node& node_;
  std::string yaml_;
};

}  // namespace

bool is_slurm_time(const std::string& text) {
  static const std::regex forms(R"(^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2})$)");
  return !text.empty() && std::regex_match(text, forms) && text.find_first_not_of("0:-") != std::string::npos;
}

int SlurmConfig::node_count() const {
  if (nodes > 0) return nodes;
  if (gpus_per_node > 0 && gpus_per_task > 0) {
    const long gpus = long(ranks) * gpus_per_task;
    return int((gpus + gpus_per_node - 1) / gpus_per_node);
  }
  return 0;
}

SlurmConfig SlurmConfig::from_json(const json& s) {
  SlurmConfig c;
  c.partition = s.value("partition", std::string());
  c.account = s.value("account", std::string());
  c.qos = s.value("qos", std::string());
  c.time = s.value("time", std::string());
  c.ranks = s.value("ranks", 1);
  c.gpus_per_task = s.value("gpus_per_task", 0);
  c.gpus_per_node = s.value("gpus_per_node", 0);
  c.nodes = s.value("nodes", 0);
  c.cpus_per_task = s.value("cpus_per_task", 1);
  c.mem = s.value("mem", std::string());
  c.shared_dir = s.value("shared_dir", std::string());
  c.sbatch_args = s.value("sbatch_args", std::vector<std::string>{});
  c.max_requeues = s.value("max_requeues", 3);
  c.poll_interval_s = s.value("poll_interval_s", 0.5);
  return c;
}

json read_slurm_section(const YAML::Node& node, const std::string& yaml_file) {
  return SlurmSectionReader(node, yaml_file).read();
}

}  // namespace braid
