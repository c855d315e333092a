// `braid init <dir>`: a workload skeleton (workload.yaml, an annotated program, config, README)
// that evolves as it is, to be replaced piece by piece with the user's own program.
#include <cstdio>
#include <string>

#include "braid/cli/command.hpp"
#include "braid/cli/templates.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid::cli {
namespace {

std::string fill(std::string text, const std::string& name, const std::string& dir) {
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (std::size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size())) text.replace(p, from.size(), to);
  };
  replace_all("{{name}}", name);
  replace_all("{{dir}}", dir);
  return text;
}

int do_init(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir) && !std::filesystem::is_empty(dir))
    throw UserError(dir.string(), "exists and is not empty: choose a new folder");
  std::string name = std::filesystem::absolute(dir).lexically_normal().filename().string();
  if (name.empty()) name = "workload";
  std::filesystem::create_directories(dir);
  for (const auto& [file, text] : workload_template_files()) write_file_atomic(dir / file, fill(text, name, dir.string()));
  std::printf("created %s (workload.yaml, program.cpp, config.yaml, README.md)\nnext: braid evolve %s\n", dir.string().c_str(),
              dir.string().c_str());
  return 0;
}

Registrar init_reg(20, [](CLI::App& app, Action& action) {
  static std::filesystem::path dir;
  auto* cmd = app.add_subcommand("init", "Create a workload skeleton in a new folder");
  cmd->add_option("dir", dir, "Folder to create")->required();
  cmd->callback([&action] { action = [] { return do_init(dir); }; });
});

}  // namespace
}  // namespace braid::cli
