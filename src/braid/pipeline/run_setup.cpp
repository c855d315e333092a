#include "braid/pipeline/run_setup.hpp"

#include <functional>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "braid/llm/settings.hpp"
#include "braid/mutate/backend_reference.hpp"
#include "braid/mutate/knob_mutator.hpp"
#include "braid/mutate/llm_operators.hpp"
#include "braid/program/program.hpp"
#include "braid/search/replay_evaluator.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid {
namespace {

// The file an error in the LLM keys is reported against: -c, else the workload's config.yaml.
std::string config_origin(const EvolveRequest& req, const WorkloadSpec& spec) {
  if (!req.config.empty()) return req.config.string();
  if (!spec.config.empty()) return spec.config.string();
  return "config";
}

// Offline embedder replaced by the API embeddings of `embedding_model`.
class FunctionEmbedder : public Embedder {
 public:
  explicit FunctionEmbedder(std::function<std::vector<float>(const std::string&)> f) : f_(std::move(f)) {}
  std::vector<float> embed(std::string_view code) override { return f_(std::string(code)); }
  std::string name() const override { return "api"; }

 private:
  std::function<std::vector<float>(const std::string&)> f_;
};

// The LLM settings that name the islands' backends (and the facts file to check them against),
// read on every run, the other LLM keys only when an LLM is attached.
LlmSettings backend_settings(const SearchConfig& cfg, const WorkloadSpec& spec, const std::string& origin) {
  const json all = llm_config_json(cfg);
  json keys = json::object();
  for (const char* key : {"api_type", "island_api_types", "hardware_facts"})
    if (all.contains(key)) keys[key] = all.at(key);
  LlmSettings s = parse_llm_settings(keys, origin);
  apply_workload_api_type(s, spec.evaluator);
  return s;
}

// --llm replay:<results>: the recorded run's folder; "" otherwise.
std::string replay_dir_of(const EvolveRequest& req) {
  return req.llm.rfind("replay:", 0) == 0 ? req.llm.substr(7) : "";
}

// Skips the islands this machine cannot run, before anything is written; none is bad input.
void check_backends(RunnerParts& parts, const EvolveRequest& req, const WorkloadSpec& spec, const SearchConfig& cfg) {
  if (!backends_run_here(spec)) return;
  const std::string origin = config_origin(req, spec);
  // A replay is checked against the facts its prompts were recorded with, as its LLM runtime is.
  const llm::HardwareFacts hw =
      llm::run_hardware_facts(backend_settings(cfg, spec, origin).hardware_facts, replay_dir_of(req), "");
  const auto unrunnable = check_island_backends(cfg, spec, origin, hw);
  if (unrunnable.empty()) return;
  parts.island_runnable = [unrunnable](int island, std::string* why) {
    for (const auto& u : unrunnable)
      if (u.island == island) {
        if (why) *why = u.api_type + ": " + u.why;
        return false;
      }
    return true;
  };
}

}  // namespace

bool backends_run_here(const WorkloadSpec& spec) {
  const json& e = spec.evaluator;
  return e.is_object() && e.value("kind", "") == "gpu" && e.value("ranks", 1) != 1 && !e.contains("slurm");
}

std::vector<UnrunnableIsland> check_island_backends(const SearchConfig& cfg, const WorkloadSpec& spec,
                                                    const std::string& origin, const llm::HardwareFacts& hw) {
  const LlmSettings s = backend_settings(cfg, spec, origin);
  std::vector<UnrunnableIsland> out;
  for (int i = 0; i < cfg.num_islands; ++i) {
    std::string why;
    if (!llm::api_type_runnable(s.api_type_of(i), hw, &why)) out.push_back({i, s.api_type_of(i), why});
  }
  if (out.empty() || int(out.size()) < cfg.num_islands) return out;
  std::string all;
  for (const auto& u : out)
    all += fmt::format("{}island {} ({}): {}", all.empty() ? "" : "; ", u.island, u.api_type, u.why);
  throw UserError(origin, "no island can run on this machine: " + all);
}

// --llm none: the knob mutator; no --llm: the config's llm_models if it names any.
bool uses_llm(const EvolveRequest& req, const SearchConfig& cfg) {
  if (req.llm.empty()) return cfg.llm.contains("llm_models");
  return req.llm != "none";
}

// The LLM operators read their keys (and the per-island API types) from one object.
json llm_config_json(const SearchConfig& cfg) {
  json j = cfg.llm;
  if (!cfg.island_api_types.empty()) j["island_api_types"] = cfg.island_api_types;
  return j;
}

SearchConfig resolve_config(const EvolveRequest& req, const WorkloadSpec& spec) {
  register_extra_config_keys(llm_config_keys());
  SearchConfig cfg;
  if (!spec.config.empty()) cfg = load_search_config(spec.config, cfg);
  if (!req.config.empty()) cfg = load_search_config(req.config, cfg);
  if (req.generations) {
    check_int_config_value("num_generations", *req.generations, "--generations");
    cfg.num_generations = *req.generations;
  }
  if (req.seed) cfg.seed = *req.seed;
  if (req.parallel) {
    check_int_config_value("max_parallel_jobs", *req.parallel, "--parallel");
    cfg.max_parallel_jobs = int(*req.parallel);
  }
  validate(cfg, req.config.empty() ? "command line" : req.config.string());
  return cfg;
}

SearchConfig continued_config(ProgramDatabase& db, const std::string& stored, const std::string& origin,
                              const std::optional<std::int64_t>& generations,
                              const std::optional<std::int64_t>& parallel) {
  register_extra_config_keys(llm_config_keys());
  json j = json::parse(stored, nullptr, false);
  if (j.is_discarded()) throw UserError(origin, "stored config is not valid JSON");
  SearchConfig cfg = search_config_from_json(j, origin);
  if (generations) cfg.num_generations = *generations;
  if (parallel) cfg.max_parallel_jobs = int(*parallel);
  if (auto s = db.meta("run_seed")) cfg.seed = std::stoull(*s);
  return cfg;
}

RunnerParts prepare_run(const EvolveRequest& req, const WorkloadSpec& spec, const SearchConfig& cfg) {
  // Seed programs must parse (markers, knobs in their domains) before anything is written.
  std::vector<std::filesystem::path> seeds;
  if (cfg.init_program_paths_per_island.empty()) seeds.push_back(spec.program);
  for (auto& p : cfg.init_program_paths_per_island) seeds.push_back(spec.dir / p);
  bool has_knobs = true;
  for (auto& path : seeds) {
    auto text = try_read_file(path);
    if (!text) throw UserError(path.string(), "cannot read seed program");
    Program prog = Program::parse(*text, path.string());
    if (!prog.ok()) throw UserError("", prog.error()->message);
    if (prog.knobs().empty()) has_knobs = false;
  }
  RunnerParts parts;
  parts.workload = spec;
  parts.config = cfg;
  if (uses_llm(req, cfg)) {
    parse_llm_settings(llm_config_json(cfg), config_origin(req, spec));  // bad LLM settings fail before any write
  } else {
    if (!has_knobs)
      throw UserError(seeds.front().string(),
                      "has no braid:knob lines, so the knob mutator (--llm none) has nothing to move: "
                      "evolve it with an LLM operator (--llm MODEL)");
    parts.mutator = std::make_unique<KnobMutator>();
  }
  check_backends(parts, req, spec, cfg);
  parts.evaluator = make_evaluator(spec);
  if (req.replay_evals) {
    const std::string replay = replay_dir_of(req);
    if (replay.empty()) throw UserError("--replay-evals", "needs --llm replay:<results>");
    parts.evaluator = std::make_unique<ReplayEvaluator>(replay, std::move(parts.evaluator));
  }
  return parts;
}

void attach_llm(RunnerParts& parts, const EvolveRequest& req, ProgramDatabase& db,
                const std::filesystem::path& results) {
  if (!uses_llm(req, parts.config)) return;
  LlmSettings settings = parse_llm_settings(llm_config_json(parts.config), config_origin(req, parts.workload));
  std::string spec = req.llm == "config" ? "" : req.llm;        // "" = llm_models
  apply_workload_api_type(settings, parts.workload.evaluator);  // one GPU rank: "cuda", no NCCL reference
  LlmOperators ops = make_llm_operators(settings, spec, db, results, parts.workload.task, parts.workload.language);
  parts.mutator = std::move(ops.mutator);
  parts.feedback = std::move(ops.feedback);
  if (ops.meta) parts.meta = std::move(ops.meta);
  parts.novelty_judge = std::move(ops.novelty_judge);
  parts.llm_totals = std::move(ops.totals);
  parts.budget_exhausted = std::move(ops.budget_exhausted);
  if (ops.embed) parts.embedder = std::make_unique<FunctionEmbedder>(std::move(ops.embed));
}

void apply_ranks_override(WorkloadSpec& spec, const std::optional<int>& ranks) {
  if (!ranks) return;
  const std::string yaml = (spec.dir / "workload.yaml").string();
  if (spec.evaluator.value("kind", std::string()) != "gpu")
    throw UserError(yaml, "--ranks applies to workloads whose evaluator is kind gpu (this one is " +
                              spec.evaluator.value("kind", std::string("?")) + ")");
  if (*ranks < 1 || *ranks > 4096) throw UserError(yaml, "--ranks must be between 1 and 4096");
  spec.evaluator["ranks"] = *ranks;
}

}  // namespace braid
