#include "braid/search/seed_programs.hpp"

#include <fmt/format.h>

#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/log.hpp"

namespace braid {

std::map<std::string, SeedProgram> seed_programs(const SearchConfig& cfg, const WorkloadSpec& workload,
                                                 const std::vector<int>& islands,
                                                 const std::vector<std::string>& seed_ids) {
  std::map<std::string, SeedProgram> by_text;
  for (int i : islands) {
    if (!seed_ids[std::size_t(i)].empty()) continue;
    std::filesystem::path path = workload.program;
    if (!cfg.init_program_paths_per_island.empty())
      path = workload.dir / cfg.init_program_paths_per_island[std::size_t(i)];
    auto text = try_read_file(path);
    if (!text) throw UserError(path.string(), "cannot read seed program");
    auto& entry = by_text[*text];
    entry.origin = path.string();
    entry.islands.push_back(i);
  }
  return by_text;
}

void throw_seed_failed(const std::string& origin, const ProgramRecord& rec, const std::filesystem::path& results) {
  std::string error = rec.error_text;
  if (error.size() > 2000) error = error.substr(0, 2000) + "\n...";
  throw UserError(origin,
                  fmt::format("the seed program failed its evaluation ({}): {}\n(work folder: {}; fix the program and "
                              "start a new run)",
                              to_string(rec.failure), error.empty() ? "no diagnostics" : error,
                              (results / fmt::format("gen_0_island_{}", rec.island_idx)).string()));
}

std::vector<int> runnable_islands(const SearchConfig& cfg,
                                  const std::function<bool(int, std::string*)>& island_runnable, std::string& note) {
  std::vector<int> runnable;
  note.clear();
  for (int i = 0; i < cfg.num_islands; ++i) {
    std::string why;
    if (!island_runnable || island_runnable(i, &why)) {
      runnable.push_back(i);
    } else {
      log::warn("island {} skipped: {}", i, why);
      note += fmt::format("{}island {} skipped ({})", note.empty() ? "" : "; ", i, why);
    }
  }
  if (runnable.empty()) throw UserError("", "no island can run on this machine: " + note);
  return runnable;
}

}  // namespace braid
