#include "braid/pipeline/seed_workload.hpp"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

namespace braid {

namespace fs = std::filesystem;

namespace {

struct BaseWorkload {
  YAML::Node node;
  std::string origin = "generated";  // or the path of the seed folder's own workload.yaml
};

// The seed folder's own workload.yaml when its evaluator is kind gpu (its evaluator, task and
// sizes), else a GPU workload for the program as it is.
BaseWorkload base_workload(const SeedWorkloadInput& in, const fs::path& seed_dir) {
  BaseWorkload w;
  const fs::path own = seed_dir / "workload.yaml";
  if (fs::is_regular_file(own)) {
    YAML::Node src = YAML::LoadFile(own.string());
    if (src["evaluator"] && src["evaluator"]["kind"] && src["evaluator"]["kind"].as<std::string>() == "gpu") {
      w.node = src;
      w.origin = own.string();
    }
  }
  if (w.node["evaluator"]) return w;
  w.node["task"] =
      "Make the converted program (" + in.input.filename().string() +
      ") as fast as possible on every rank while producing the same outputs. The harness, initialisation and "
      "verification outside the EVOLVE-BLOCKs are frozen.";
  YAML::Node ev;
  ev["kind"] = "gpu";
  ev["ranks"] = in.ranks;
  ev["launcher"] = "local";
  ev["arch"] = "auto";
  if (in.source.find("cublas") != std::string::npos) ev["libs"].push_back("-lcublas");
  if (in.flags.mpi) ev["launcher"] = "mpirun";  // MPI programs bootstrap through MPI
  if (in.uses_harness) ev["args"] = "--size 4096";
  ev["env"]["NCCL_NVLS_ENABLE"] = "0";
  w.node["evaluator"] = ev;
  return w;
}

// Includes resolve against the seed's folder (its own headers), wherever the results are; then
// the program's own build flags (-I, -D, -L, -l, --nvcc-flags, MPI's), as the gate used them.
void apply_build_flags(YAML::Node evaluator, const convert::BuildFlags& flags, const fs::path& seed_dir) {
  YAML::Node includes;
  includes.push_back(seed_dir.string());
  if (evaluator["includes"])
    for (const auto& inc : evaluator["includes"]) {
      const fs::path p = inc.as<std::string>();
      std::string abs = (p.is_absolute() ? p : (seed_dir / p)).lexically_normal().string();
      while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
      if (abs != seed_dir.string()) includes.push_back(abs);
    }
  for (const auto& inc : flags.includes) includes.push_back(inc);
  evaluator["includes"] = includes;
  if (!flags.defines.empty() || !flags.extra.empty()) {
    YAML::Node nf;
    for (const auto& f : flags.compile_flags())
      if (f.rfind("-I", 0) != 0) nf.push_back(f);
    evaluator["nvcc_flags"] = nf;
  }
  for (const auto& l : flags.libs) evaluator["libs"].push_back(l);
}

// The seed folder's config.yaml (only with its own workload.yaml), with defaults for a short run.
std::string config_yaml(const fs::path& seed_dir, bool own_workload) {
  YAML::Node c;
  const fs::path own_config = seed_dir / "config.yaml";
  if (own_workload && fs::is_regular_file(own_config)) c = YAML::LoadFile(own_config.string());
  if (!c["num_generations"]) c["num_generations"] = 20;
  if (!c["max_parallel_jobs"]) c["max_parallel_jobs"] = 1;
  if (!c["num_islands"]) c["num_islands"] = 2;
  YAML::Emitter ce;
  ce << c;
  return std::string("# Search config of this run (braid run); -g/-j/--seed override it.\n") + ce.c_str() + "\n";
}

}  // namespace

SeedWorkloadFiles seed_workload_files(const SeedWorkloadInput& in) {
  const fs::path seed_dir = fs::absolute(in.input).parent_path().lexically_normal();
  BaseWorkload w = base_workload(in, seed_dir);
  w.node["name"] = in.input.stem().string();
  w.node["program"] = "gen0.cu";
  w.node["language"] = "cuda";
  w.node["config"] = "config.yaml";
  w.node["evaluator"]["ranks"] = in.ranks;
  apply_build_flags(w.node["evaluator"], in.flags, seed_dir);
  YAML::Emitter e;
  e << w.node;
  SeedWorkloadFiles files;
  files.workload_yaml = fmt::format("# Written by `braid run {}` ({}).\n{}\n", in.input.string(), w.origin, e.c_str());
  files.config_yaml = config_yaml(seed_dir, w.origin != "generated");
  files.readme = fmt::format(
      "# {}\n\nWritten by `braid run {}`. `seed.cu` is the host-driven input, `gen0.cu` its conversion "
      "to device-initiated NCCL calls annotated for the search (see ../convert/summary.txt and "
      "../annotate/annotation.json). Gate: {}.\n",
      in.input.stem().string(), in.input.string(), in.gate_status);
  return files;
}

}  // namespace braid
