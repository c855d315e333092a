// `braid init <dir>`: a workload skeleton (workload.yaml, an annotated program, config, README)
// that evolves as it is, to be replaced piece by piece with the user's own program.
// `braid init <dir> --kernelbench problem.py`: a workload from a KernelBench-format problem
// (kernelbench.hpp).
#include <cstdio>
#include <map>
#include <string>

#include "braid/cli/command.hpp"
#include "braid/cli/kernelbench.hpp"
#include "braid/cli/templates.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid::cli {
namespace {

int do_init(const std::filesystem::path& dir, const std::filesystem::path& problem) {
  if (std::filesystem::exists(dir) && !std::filesystem::is_empty(dir))
    throw UserError(dir.string(), "exists and is not empty: choose a new folder");
  std::string name = std::filesystem::absolute(dir).lexically_normal().filename().string();
  if (name.empty()) name = "workload";
  // Every file is composed (and the problem checked) before the folder is created.
  std::map<std::string, std::string> files;
  if (problem.empty()) {
    for (const auto& [file, text] : workload_template_files())
      files[file] = fill_placeholders(text, {{"name", name}, {"dir", dir.string()}});
  } else {
    files = kernelbench_workload_files(read_kernelbench_problem(problem), name, dir.string(), problem.string());
  }
  std::filesystem::create_directories(dir);
  std::string listed;
  for (const auto& [file, text] : files) {
    write_file_atomic(dir / file, text);
    listed += (listed.empty() ? "" : ", ") + file;
  }
  std::printf("created %s (%s)\n", dir.string().c_str(), listed.c_str());
  if (problem.empty())
    std::printf("next: braid evolve %s\n", dir.string().c_str());
  else
    std::printf("seed check (on the GPU machine): python3 %s/evaluate.py --program_path %s/program.py --results_dir /tmp/%s_seed\n"
                "next: braid evolve %s --llm MODEL (the program has no knobs: an LLM operator rewrites its kernels)\n",
                dir.string().c_str(), dir.string().c_str(), name.c_str(), dir.string().c_str());
  return 0;
}

Registrar init_reg(20, [](CLI::App& app, Action& action) {
  static std::filesystem::path dir, problem;
  auto* cmd = app.add_subcommand("init", "Create a workload skeleton in a new folder");
  cmd->add_option("dir", dir, "Folder to create")->required();
  cmd->add_option("--kernelbench", problem,
                  "A KernelBench-format problem (Python: class Model(nn.Module), get_inputs(), get_init_inputs()): "
                  "write a ModelNew workload with an inline CUDA extension and a PyTorch evaluator");
  cmd->callback([&action] { action = [] { return do_init(dir, problem); }; });
});

}  // namespace
}  // namespace braid::cli
