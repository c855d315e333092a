#include "braid/eval/workload.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "braid/eval/cascade.hpp"
#include "braid/eval/external.hpp"
#include "braid/eval/gpu_cascade.hpp"
#include "braid/eval/slurm_config.hpp"
#include "braid/eval/slurm_evaluator.hpp"
#include "braid/eval/work_folder.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/command_line.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

// Address-space limit of a CPU candidate's processes unless workload.yaml says otherwise.
constexpr long kDefaultMemoryLimitMb = 8192;
// Processes and threads of one CPU evaluation (the sandbox's pids limit) unless it says otherwise.
constexpr long kDefaultMaxProcesses = 512;
// The same for one GPU evaluation: every rank's CUDA and NCCL threads (and mpirun's) count.
constexpr long kDefaultGpuMaxProcesses = 4096;
// Resident host memory of one GPU rank (a memory cgroup, where braid runs as root): the harness
// keeps inputs and references on the device, so a rank needs a few GiB; a flood stops here.
constexpr long kDefaultGpuMemoryLimitMb = 32768;

// Reads one workload.yaml; every problem is a UserError naming the file and the line.
class WorkloadReader {
 public:
  explicit WorkloadReader(std::filesystem::path yaml) : yaml_(std::move(yaml)) {}

  [[noreturn]] void error(const YAML::Node& at, const std::string& problem) const {
    const auto mark = at.Mark();
    if (mark.line >= 0 && !at.IsNull())
      throw UserError(yaml_.string(), "line " + std::to_string(mark.line + 1) + ": " + problem);
    throw UserError(yaml_.string(), problem);
  }

  void check_keys(const YAML::Node& map, const std::vector<std::string>& allowed, const std::string& where) const {
    for (const auto& entry : map) {
      const std::string key = entry.first.as<std::string>();
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      error(entry.first, "unknown key '" + key + "'" + where + " (expected one of: " + list + ")");
    }
  }

  std::string string_at(const YAML::Node& map, const std::string& key, bool required, const std::string& where) const {
    const YAML::Node node = map[key];
    if (!node) {
      if (required) error(map, "missing key '" + key + "'" + where);
      return {};
    }
    if (!node.IsScalar()) error(node, "'" + key + "'" + where + " must be a string");
    return node.as<std::string>();
  }

  std::optional<double> seconds_at(const YAML::Node& map, const std::string& key) const {
    const YAML::Node node = map[key];
    if (!node) return std::nullopt;
    double value = 0.0;
    // At most a week: larger values overflow the millisecond clocks of the evaluators.
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, value) || !std::isfinite(value) || value <= 0 ||
        value > 604800)
      error(node, "'" + key + "' must be a positive number of seconds, at most 604800 (a week)");
    return value;
  }

  // A command template: must split into words and use only known placeholders.
  std::string command_at(const YAML::Node& map, const std::string& key, bool required) const {
    std::string command = string_at(map, key, required, " in evaluator");
    if (command.empty()) {
      if (required) error(map[key], "'" + key + "' in evaluator is empty");
      return command;
    }
    std::string problem;
    if (!split_command_words(command, &problem)) error(map[key], "evaluator '" + key + "': " + problem);
    for (const auto& name : placeholders_in(command)) {
      const auto& known = known_placeholders();
      if (std::find(known.begin(), known.end(), name) == known.end())
        error(map[key], "evaluator '" + key + "' uses unknown placeholder {" + name +
                            "} (known: {program} {artifact} {work_dir} {workload_dir} {seed} {results_dir} {driver})");
    }
    return command;
  }

  json env_at(const YAML::Node& map) const {
    json env = json::object();
    const YAML::Node node = map["env"];
    if (!node) return env;
    if (!node.IsMap()) error(node, "'env' in evaluator must be a mapping of variable names to values");
    for (const auto& entry : node) {
      if (!entry.second.IsScalar()) error(entry.second, "env '" + entry.first.as<std::string>() + "' must be a string");
      env[entry.first.as<std::string>()] = entry.second.as<std::string>();
    }
    return env;
  }

  std::optional<long> integer_at(const YAML::Node& map, const std::string& key, long min, long max,
                                 const std::string& where = " in evaluator") const {
    const YAML::Node node = map[key];
    if (!node) return std::nullopt;
    long value = 0;
    if (!node.IsScalar() || !YAML::convert<long>::decode(node, value) || value < min || value > max)
      error(node, "'" + key + "'" + where + " must be a whole number from " + std::to_string(min) + " to " +
                      std::to_string(max));
    return value;
  }

  std::optional<bool> bool_at(const YAML::Node& map, const std::string& key,
                              const std::string& where = " in evaluator") const {
    const YAML::Node node = map[key];
    if (!node) return std::nullopt;
    bool value = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value))
      error(node, "'" + key + "'" + where + " must be true or false");
    return value;
  }

  json string_list_at(const YAML::Node& map, const std::string& key, const std::string& where = " in evaluator") const {
    json list = json::array();
    const YAML::Node node = map[key];
    if (!node) return list;
    if (!node.IsSequence()) error(node, "'" + key + "'" + where + " must be a list of strings");
    for (const auto& item : node) {
      if (!item.IsScalar()) error(item, "'" + key + "'" + where + " must be a list of strings");
      list.push_back(item.as<std::string>());
    }
    return list;
  }

  // Harness arguments: words with known placeholders, like a command without its program.
  std::string args_at(const YAML::Node& map, const std::string& key) const {
    std::string args = string_at(map, key, false, " in evaluator");
    if (args.empty()) return args;
    std::string problem;
    if (!split_command_words(args, &problem)) error(map[key], "evaluator '" + key + "': " + problem);
    for (const auto& name : placeholders_in(args)) {
      const auto& known = known_placeholders();
      if (std::find(known.begin(), known.end(), name) == known.end())
        error(map[key], "evaluator '" + key + "' uses unknown placeholder {" + name +
                            "} (known: {program} {artifact} {work_dir} {workload_dir} {seed} {results_dir} {driver})");
    }
    return args;
  }

  // A cascade split into the workload's driver and the candidate's worker (docs/sandbox.md):
  // driver_build writes {driver}, worker starts the candidate; {driver} nowhere else.
  void driver_keys(const YAML::Node& node, json& section) const {
    auto names_driver = [](const std::string& command) {
      const auto names = placeholders_in(command);
      return std::find(names.begin(), names.end(), "driver") != names.end();
    };
    const std::string driver_build = command_at(node, "driver_build", false);
    const std::string worker = command_at(node, "worker", false);
    if (driver_build.empty()) {
      if (!worker.empty()) error(node["worker"], "evaluator 'worker' needs 'driver_build' (the driver it runs beside)");
      for (const char* key : {"build", "run", "bench"})
        if (names_driver(section.value(key, std::string())))
          error(node[key], std::string("evaluator '") + key + "' names {driver} but there is no 'driver_build'");
      return;
    }
    if (!names_driver(driver_build)) error(node["driver_build"], "evaluator 'driver_build' must write {driver}");
    if (worker.empty())
      error(node["driver_build"],
            "evaluator 'driver_build' needs 'worker' (the candidate's command beside the driver)");
    if (names_driver(worker) || names_driver(section.value("build", std::string())))
      error(node["worker"], "evaluator 'worker' and 'build' run the candidate and may not name {driver}");
    if (section["verdict"] == "files")
      error(node["verdict"],
            "evaluator verdict 'files' does not go with a driver (only the driver reports, through the channel)");
    if (node["slurm"])
      error(node["slurm"], "evaluator 'driver_build' does not go with a slurm section (the jobs run one program)");
    section["driver_build"] = driver_build;
    section["worker"] = worker;
  }

  void max_processes_key(const YAML::Node& node, json& section, long fallback) const {
    section["max_processes"] = integer_at(node, "max_processes", 0, 1000000).value_or(fallback);
    if (long n = section["max_processes"].get<long>(); n > 0 && n < 8)
      error(node["max_processes"], "'max_processes' in evaluator must be 0 (no limit) or at least 8");
  }

  // The sandbox and verdict keys of the CPU evaluators (docs/sandbox.md); memory_limit_mb is
  // read beside them.
  void isolation_keys(const YAML::Node& node, json& section) const {
    section["sandbox"] = bool_at(node, "sandbox").value_or(true);
    max_processes_key(node, section, kDefaultMaxProcesses);
    section["network"] = bool_at(node, "network").value_or(false);
    const std::string verdict = string_at(node, "verdict", false, " in evaluator");
    if (!verdict.empty() && verdict != "auto" && verdict != "channel" && verdict != "files")
      error(node["verdict"], "evaluator verdict '" + verdict + "' is unknown (expected auto, channel or files)");
    section["verdict"] = verdict.empty() ? "auto" : verdict;
  }

  void gpu_evaluator(const YAML::Node& node, json& section) const {
    check_keys(node,
               {"kind",
                "ranks",
                "launcher",
                "arch",
                "nvcc_flags",
                "includes",
                "libs",
                "args",
                "bench_args",
                "build_timeout_s",
                "run_timeout_s",
                "bench_timeout_s",
                "bench_exclusive",
                "verify_in_bench",
                "gpus_per_rank",
                "gpus",
                "health_probe",
                "launcher_args",
                "cache_dir",
                "env",
                "slurm",
                "sandbox",
                "max_processes",
                "verdict",
                "memory_limit_mb"},
               " in evaluator");
    section["ranks"] = integer_at(node, "ranks", 1, 4096).value_or(2);
    // The ranks' sandbox (docs/sandbox.md, "GPU ranks"): no address-space limit (CUDA reserves far
    // more than it uses) but a resident one per rank, and the host's network (NCCL's bootstrap).
    section["sandbox"] = bool_at(node, "sandbox").value_or(true);
    section["memory_limit_mb"] = integer_at(node, "memory_limit_mb", 256, 1 << 22).value_or(kDefaultGpuMemoryLimitMb);
    max_processes_key(node, section, kDefaultGpuMaxProcesses);
    const std::string launcher = string_at(node, "launcher", false, " in evaluator");
    if (!launcher.empty() && launcher != "local" && launcher != "mpirun" && launcher != "srun")
      error(node["launcher"], "evaluator launcher '" + launcher + "' is unknown (expected local, mpirun or srun)");
    section["launcher"] = launcher.empty() ? "local" : launcher;
    // Where the harness's verdict comes from: braid's verdict channel or the harness's files
    // (docs/sandbox.md, "GPU ranks"); auto: the channel where braid's own local ranks run braid's harness.
    const std::string verdict = string_at(node, "verdict", false, " in evaluator");
    if (!verdict.empty() && verdict != "files" && verdict != "channel" && verdict != "auto")
      error(node["verdict"],
            "evaluator verdict '" + verdict + "' is unknown for kind gpu (expected auto, files or channel)");
    if (verdict == "channel" && !launcher.empty() && launcher != "local")
      error(node["verdict"],
            "evaluator verdict 'channel' needs launcher local (mpirun and srun do not pass braid's descriptor to the "
            "ranks)");
    section["verdict"] = verdict.empty() ? "auto" : verdict;
    const std::string arch = string_at(node, "arch", false, " in evaluator");
    if (!arch.empty() && !resolve_arch(arch, {}))
      error(node["arch"], "evaluator arch '" + arch + "' is unknown (expected auto, sm_90, sm_90a, ...)");
    section["arch"] = arch.empty() ? "auto" : arch;
    if (node["nvcc_flags"]) section["nvcc_flags"] = string_list_at(node, "nvcc_flags");
    section["includes"] = string_list_at(node, "includes");
    section["libs"] = string_list_at(node, "libs");
    section["launcher_args"] = string_list_at(node, "launcher_args");
    section["args"] = args_at(node, "args");
    section["bench_args"] = args_at(node, "bench_args");
    section["build_timeout_s"] = seconds_at(node, "build_timeout_s").value_or(300.0);
    section["run_timeout_s"] = seconds_at(node, "run_timeout_s").value_or(60.0);
    section["bench_timeout_s"] = seconds_at(node, "bench_timeout_s").value_or(180.0);
    section["bench_exclusive"] = bool_at(node, "bench_exclusive").value_or(true);
    section["verify_in_bench"] = bool_at(node, "verify_in_bench").value_or(false);
    section["health_probe"] = bool_at(node, "health_probe").value_or(true);
    section["gpus_per_rank"] = integer_at(node, "gpus_per_rank", 1, 64).value_or(1);
    if (const YAML::Node gpus = node["gpus"]) {
      if (!gpus.IsSequence()) error(gpus, "'gpus' in evaluator must be a list of GPU indices");
      json list = json::array();
      for (const auto& g : gpus) {
        int index = -1;
        if (!g.IsScalar() || !YAML::convert<int>::decode(g, index) || index < 0)
          error(g, "'gpus' in evaluator must be a list of GPU indices (0, 1, ...)");
        list.push_back(index);
      }
      section["gpus"] = list;
    }
    const std::string cache_dir = string_at(node, "cache_dir", false, " in evaluator");
    if (!cache_dir.empty()) section["cache_dir"] = cache_dir;
    if (node["slurm"]) section["slurm"] = gpu_slurm_section(node, section);
  }

  // kind gpu's `slurm` section: the jobs' ranks and GPUs per task are the evaluator's own.
  json gpu_slurm_section(const YAML::Node& node, const json& section) const {
    const YAML::Node slurm = node["slurm"];
    for (const char* key : {"ranks", "gpus_per_task"})
      if (slurm.IsMap() && slurm[key])
        error(slurm[key], std::string("evaluator.slurm: '") + key +
                              "' is the evaluator's own with kind gpu (ranks, gpus_per_rank)");
    if (section.value("launcher", std::string("local")) != "local")
      error(node["launcher"],
            "evaluator launcher '" + section.value("launcher", std::string()) +
                "' does not go with a slurm section: its jobs start the ranks with srun (leave launcher out)");
    const long ranks = section["ranks"].get<long>(), per_rank = section["gpus_per_rank"].get<long>();
    long value = 0;
    if (slurm.IsMap() && slurm["gpus_per_node"] && YAML::convert<long>::decode(slurm["gpus_per_node"], value) &&
        value > 0 && per_rank > value)
      error(slurm["gpus_per_node"], "evaluator.slurm: 'gpus_per_node' (" + std::to_string(value) +
                                        ") is less than the evaluator's gpus_per_rank (" + std::to_string(per_rank) +
                                        ")");
    if (slurm.IsMap() && slurm["nodes"] && YAML::convert<long>::decode(slurm["nodes"], value) && value > ranks)
      error(slurm["nodes"], "evaluator.slurm: 'nodes' (" + std::to_string(value) +
                                ") is more than the evaluator's ranks (" + std::to_string(ranks) +
                                "): every node needs a rank");
    json s = read_slurm_section(slurm, yaml_.string());
    s["ranks"] = ranks;
    s["gpus_per_task"] = per_rank;
    return s;
  }

  // `profile:` (the GPU cascade's Nsight Compute level, eval/ncu_profile.hpp); stored as
  // evaluator["profile"] so the evaluator's config carries it.
  json profile(const YAML::Node& node, const std::string& kind) const {
    const std::string where = " in profile";
    if (!node.IsMap()) error(node, "'profile' must be a mapping (enabled, top_k, timeout_s, ...)");
    check_keys(node,
               {"enabled", "top_k", "timeout_s", "ncu", "launch_count", "launch_skip", "kernel_regex",
                "kernel_name_base", "sections", "metrics"},
               where);
    json p = json::object();
    p["enabled"] = bool_at(node, "enabled", where).value_or(true);
    if (kind != "gpu" && p["enabled"].get<bool>())
      error(node, "'profile' needs evaluator kind gpu (it runs ncu on the built program)");
    p["top_k"] = integer_at(node, "top_k", 1, 1000000, where).value_or(3);
    p["timeout_s"] = seconds_at(node, "timeout_s").value_or(300.0);
    p["launch_count"] = integer_at(node, "launch_count", 1, 1000, where).value_or(3);
    p["launch_skip"] = integer_at(node, "launch_skip", 0, 1000000, where).value_or(0);
    p["ncu"] = string_at(node, "ncu", false, where);
    p["kernel_regex"] = string_at(node, "kernel_regex", false, where);
    const std::string base = string_at(node, "kernel_name_base", false, where);
    if (!base.empty() && base != "function" && base != "demangled" && base != "mangled")
      error(node["kernel_name_base"],
            "profile kernel_name_base '" + base + "' is unknown (expected function, demangled or mangled)");
    p["kernel_name_base"] = base.empty() ? "function" : base;
    if (node["sections"]) p["sections"] = string_list_at(node, "sections", where);
    if (node["metrics"]) p["metrics"] = string_list_at(node, "metrics", where);
    return p;
  }

  json evaluator(const YAML::Node& root) const {
    const YAML::Node node = root["evaluator"];
    if (!node) error(root, "missing key 'evaluator'");
    if (!node.IsMap()) error(node, "'evaluator' must be a mapping with a 'kind'");
    const std::string kind = string_at(node, "kind", true, " in evaluator");
    json section = {{"kind", kind}};
    if (kind == "cascade") {
      check_keys(node,
                 {"kind", "build", "run", "bench", "build_timeout_s", "run_timeout_s", "bench_timeout_s",
                  "bench_exclusive", "env", "memory_limit_mb", "sandbox", "max_processes", "network", "verdict",
                  "slurm", "driver_build", "worker"},
                 " in evaluator");
      section["memory_limit_mb"] = integer_at(node, "memory_limit_mb", 64, 1 << 20).value_or(kDefaultMemoryLimitMb);
      isolation_keys(node, section);
      if (node["slurm"]) section["slurm"] = read_slurm_section(node["slurm"], yaml_.string());
      section["build"] = command_at(node, "build", true);
      section["run"] = command_at(node, "run", true);
      section["bench"] = command_at(node, "bench", false);
      section["build_timeout_s"] = seconds_at(node, "build_timeout_s").value_or(60.0);
      section["run_timeout_s"] = seconds_at(node, "run_timeout_s").value_or(30.0);
      section["bench_timeout_s"] = seconds_at(node, "bench_timeout_s").value_or(60.0);
      section["bench_exclusive"] = bool_at(node, "bench_exclusive").value_or(true);  // search/exclusive_bench.hpp
      driver_keys(node, section);
    } else if (kind == "external") {
      check_keys(node,
                 {"kind", "command", "timeout_s", "bench_exclusive", "env", "memory_limit_mb", "sandbox",
                  "max_processes", "network", "verdict", "slurm"},
                 " in evaluator");
      section["memory_limit_mb"] = integer_at(node, "memory_limit_mb", 64, 1 << 20).value_or(kDefaultMemoryLimitMb);
      section["bench_exclusive"] = bool_at(node, "bench_exclusive").value_or(true);
      isolation_keys(node, section);
      section["command"] = command_at(node, "command", true);
      section["timeout_s"] = seconds_at(node, "timeout_s").value_or(300.0);
      if (node["slurm"]) {
        // A job's verdict comes back through its files: no descriptor crosses to another node.
        if (section["verdict"] == "channel")
          error(node["verdict"],
                "evaluator verdict 'channel' does not go with a slurm section (a job's verdict is read from its result "
                "files)");
        section["slurm"] = read_slurm_section(node["slurm"], yaml_.string());
      }
    } else if (kind == "gpu") {
      gpu_evaluator(node, section);
    } else {
      error(node["kind"], "evaluator kind '" + kind + "' is unknown (expected cascade, external or gpu)");
    }
    section["env"] = env_at(node);
    return section;
  }

  std::filesystem::path existing_file(const YAML::Node& root, const std::string& key, const std::filesystem::path& dir,
                                      bool required) const {
    const std::string value = string_at(root, key, required, "");
    if (value.empty()) {
      if (required) error(root[key], "'" + key + "' is empty");
      return {};
    }
    std::filesystem::path path =
        std::filesystem::path(value).is_absolute() ? std::filesystem::path(value) : dir / value;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      error(root[key], key + " file '" + value + "' does not exist (looked for " + path.string() + ")");
    return path.lexically_normal();
  }

  WorkloadSpec read() const {
    YAML::Node root;
    try {
      root = YAML::LoadFile(yaml_.string());
    } catch (const YAML::BadFile&) {
      throw UserError(yaml_.string(), "cannot be read");
    } catch (const YAML::Exception& e) {
      throw UserError(yaml_.string(), "line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
    }
    if (!root.IsMap()) throw UserError(yaml_.string(), "must be a mapping (name, program, evaluator, ...)");
    try {
      check_keys(root, {"name", "program", "language", "evaluator", "task", "config", "profile"}, "");
      WorkloadSpec spec;
      spec.dir = std::filesystem::absolute(yaml_.parent_path()).lexically_normal();
      spec.name = string_at(root, "name", false, "");
      if (spec.name.empty()) spec.name = spec.dir.filename().string();
      spec.program = existing_file(root, "program", spec.dir, true);
      spec.language = string_at(root, "language", false, "");
      if (spec.language.empty()) spec.language = "cpp";
      spec.task = string_at(root, "task", false, "");
      spec.config = existing_file(root, "config", spec.dir, false);
      spec.evaluator = evaluator(root);
      if (const YAML::Node p = root["profile"]) {
        spec.evaluator["profile"] = profile(p, spec.evaluator.value("kind", std::string()));
        if (spec.evaluator["profile"]["enabled"] == true && spec.evaluator.contains("slurm"))
          error(p, "'profile' does not go with evaluator.slurm (ncu runs on this machine's GPUs); set enabled: false");
      }
      return spec;
    } catch (const YAML::Exception& e) {
      // Conversions that yaml-cpp refuses (a key that is not a string, ...).
      throw UserError(yaml_.string(), "line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
    }
  }

 private:
  std::filesystem::path yaml_;
};

}  // namespace

WorkloadSpec load_workload(const std::filesystem::path& dir_or_yaml) {
  std::error_code ec;
  std::filesystem::path yaml = dir_or_yaml;
  if (std::filesystem::is_directory(dir_or_yaml, ec)) yaml = dir_or_yaml / "workload.yaml";
  if (!std::filesystem::is_regular_file(yaml, ec)) throw UserError(yaml.string(), "no such workload file");
  return WorkloadReader(std::filesystem::absolute(yaml)).read();
}

namespace {

// Each evaluation as a Slurm job (slurm_evaluator.hpp), its steps those of the kind.
std::unique_ptr<Evaluator> make_slurm_evaluator(const WorkloadSpec& spec) {
  const std::string kind = spec.evaluator.value("kind", std::string());
  const std::string program_filename = spec.program.filename().string();
  SlurmConfig slurm = SlurmConfig::from_json(spec.evaluator["slurm"]);
  if (kind == "cascade")
    return std::make_unique<SlurmEvaluator>(
        cascade_job_kind(CascadeConfig::from_json(spec.evaluator, spec.dir, program_filename)), slurm);
  if (kind == "external")
    return std::make_unique<SlurmEvaluator>(
        external_job_kind(ExternalConfig::from_json(spec.evaluator, spec.dir, program_filename)), slurm);
  if (kind != "gpu")
    throw UserError((spec.dir / "workload.yaml").string(), "evaluator kind '" + kind + "' has no Slurm backend");
  GpuCascadeConfig gpu = GpuCascadeConfig::from_json(spec.evaluator, spec.dir, program_filename);
  // The ranks may have been set after load_workload (braid evolve --ranks).
  slurm.ranks = gpu.ranks;
  slurm.gpus_per_task = gpu.gpus_per_rank;
  if (slurm.nodes > slurm.ranks)
    throw UserError((spec.dir / "workload.yaml").string(),
                    fmt::format("evaluator.slurm: 'nodes' ({}) is more than the {} rank(s): every node needs a rank",
                                slurm.nodes, slurm.ranks));
  return std::make_unique<SlurmEvaluator>(gpu_job_kind(std::move(gpu)), slurm);
}

}  // namespace

std::unique_ptr<Evaluator> make_evaluator(const WorkloadSpec& spec) {
  const std::string kind = spec.evaluator.value("kind", std::string());
  const std::string program_filename = spec.program.filename().string();
  // Slurm jobs run on other nodes: outside braid's sandbox, their verdict read from the job's
  // result files (docs/sandbox.md).
  if (spec.evaluator.contains("slurm")) return make_slurm_evaluator(spec);
  if (kind == "cascade") {
    CascadeConfig config = CascadeConfig::from_json(spec.evaluator, spec.dir, program_filename);
    // The harness is the program workload.yaml names, wherever it lies.
    config.harness_text = try_read_file(spec.program).value_or(config.harness_text);
    config.verdict = resolve_verdict_source(spec.evaluator.value("verdict", std::string("auto")), config.harness_text);
    if (!config.driver_build.empty()) config.verdict = VerdictSource::Channel;  // only the driver reports
    return std::make_unique<CascadeEvaluator>(std::move(config));
  }
  if (kind == "external")
    return std::make_unique<ExternalEvaluator>(ExternalConfig::from_json(spec.evaluator, spec.dir, program_filename));
  if (kind == "gpu")
    return std::make_unique<GpuCascadeEvaluator>(
        GpuCascadeConfig::from_json(spec.evaluator, spec.dir, program_filename));
  throw UserError((spec.dir / "workload.yaml").string(),
                  "evaluator kind '" + kind + "' is unknown (expected cascade, external or gpu)");
}

}  // namespace braid
