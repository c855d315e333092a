// `braid init DIR --kernelbench problem.py`: a braid workload from a KernelBench-format problem
// (a Python file defining a PyTorch `class Model(nn.Module)`, `get_inputs()` and
// `get_init_inputs()`). braid only reads and writes text here: Python and PyTorch belong to the
// user's GPU machine, where the written evaluator (templates/kernelbench/evaluate.py) runs.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

namespace braid::cli {

struct KernelBenchProblem {
  std::string text;         // the whole file, copied as reference.py
  std::string model_class;  // `class Model(...)` with its body (and decorators)
  std::string context;      // the other module-level code: imports, constants, helpers
};

// Splits a problem file into its parts; UserError naming `path` when it cannot be read or lacks
// a top-level `class Model(nn.Module)`, `def get_inputs()` or `def get_init_inputs()`.
KernelBenchProblem read_kernelbench_problem(const std::filesystem::path& path);

// The seed's ModelNew: `model_class` renamed (its header and `super(Model, self)` calls).
std::string model_new_source(const std::string& model_class);

// The files of the workload (name -> text): program.py, evaluate.py, reference.py,
// workload.yaml, config.yaml, README.md. UserError naming `problem_path` when the program
// braid would write does not parse (evolve-block markers inside the problem, ...).
std::map<std::string, std::string> kernelbench_workload_files(const KernelBenchProblem& problem, const std::string& name,
                                                              const std::string& dir, const std::string& problem_path);

// `{{key}}` replaced by values[key] in one pass (inserted text is not scanned again); unknown
// keys stay as they are.
std::string fill_placeholders(std::string_view text, const std::map<std::string, std::string>& values);

}  // namespace braid::cli
