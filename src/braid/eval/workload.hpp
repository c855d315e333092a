// Workload specification, read from <workload>/workload.yaml.
//
//   name: matmul_cpu
//   program: program.cpp             # annotated initial program (gen0)
//   language: cpp                    # for prompts and comment syntax
//   evaluator:                       # either the built-in cascade ...
//     kind: cascade
//     build: "g++ -O2 -std=c++17 {program} -o {artifact}"
//     run: "{artifact} --mode verify --seed {seed} --results_dir {results_dir}"
//     bench: "{artifact} --mode bench --seed {seed} --results_dir {results_dir}"
//     build_timeout_s: 60
//     run_timeout_s: 30
//     bench_timeout_s: 60
//   # ... or an external script with the CUCo/ShinkaEvolve contract:
//   # evaluator: { kind: external, command: "python3 evaluate.py", timeout_s: 120 }
//   # ... or the GPU cascade (nvcc, multi-rank launch, GPU pool; see gpu_cascade.hpp):
//   # evaluator: { kind: gpu, ranks: 2, launcher: local, arch: auto, args: "--size 4096" }
//   task: |                          # task description shown to LLMs
//     ...
//   config: config.yaml              # optional default search config for this workload
//
// Unknown keys, missing files and wrong types are UserErrors naming workload.yaml.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "braid/eval/evaluator.hpp"
#include "braid/util/json.hpp"

namespace braid {

struct WorkloadSpec {
  std::filesystem::path dir;
  std::string name;
  std::filesystem::path program;      // absolute path of the initial program
  std::string language = "cpp";
  std::string task;
  std::filesystem::path config;       // optional, absolute; empty if none
  json evaluator = json::object();    // the evaluator section, validated
};

WorkloadSpec load_workload(const std::filesystem::path& dir_or_yaml);  // throws UserError
std::unique_ptr<Evaluator> make_evaluator(const WorkloadSpec& spec);

}  // namespace braid
