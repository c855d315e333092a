// GPU check of the profile level (issue #24 part 3): `braid evolve` of
// workloads/serving_kernels/add_rmsnorm on one GPU with `profile:` on and the loopback model
// (tests/llm) as the LLM; the seed is correct and the first, so ncu profiles it, and the mutation
// prompts built from it, as recorded in the run's llm_exchanges.jsonl, must carry its ncu lines.
// Usage: profile_prompt_driver <braid binary> <braid source dir> <work dir> [generations].
// Exit 0 when every check holds, 77 (skipped) without a GPU or without ncu.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../../llm/loopback_llm_server.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/eval/ncu_profile.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/json.hpp"
#include "braid/util/subprocess.hpp"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// The block of a prompt that starts at `title`, up to the next blank line.
std::string block_after(const std::string& text, const std::string& title) {
  const std::size_t at = text.find(title);
  if (at == std::string::npos) return {};
  const std::size_t end = text.find("\n\n", at);
  return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <braid binary> <braid source dir> <work dir> [generations]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path braid_bin = argv[1], source = argv[2], work = argv[3];
  const std::string generations = argc > 4 ? argv[4] : "3";
  if (braid::detect_gpus().empty()) {
    std::printf("SKIPPED: no GPU\n");
    return 77;
  }
  std::string why;
  auto toolchain = braid::find_cuda_toolchain(&why);
  auto ncu = braid::find_ncu("", toolchain ? toolchain->cuda_home : std::filesystem::path(), &why);
  if (!ncu) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 77;
  }
  std::printf("ncu: %s\n", ncu->c_str());

  // A copy of the serving-kernel workloads (add_rmsnorm includes ../common) with profiling on.
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(work);
  const std::filesystem::path workloads = work / "serving_kernels";
  std::filesystem::copy(source / "workloads" / "serving_kernels", workloads, std::filesystem::copy_options::recursive);
  const std::filesystem::path yaml = workloads / "add_rmsnorm" / "workload.yaml";
  braid::write_file_atomic(yaml, braid::read_file(yaml) +
                                     "profile:\n"
                                     "  top_k: 2\n"
                                     "  timeout_s: 300\n"
                                     "  kernel_regex: \".*add_rmsnorm_kernel.*\"\n"
                                     "  launch_count: 2\n");

  braid::testing::LoopbackLlmServer server;
  const std::filesystem::path results = work / "run";
  braid::SubprocessOptions run;
  run.argv = {braid_bin.string(), "evolve", (workloads / "add_rmsnorm").string(), "--results", results.string(),
              "--generations", generations, "--seed", "1", "-j", "1", "--llm", "local:coder@" + server.base_url()};
  run.timeout_s = 1500;
  run.stdout_path = work / "evolve.stdout";
  run.stderr_path = work / "evolve.stderr";
  std::printf("running: braid evolve ... --llm local:coder@%s (log in %s)\n", server.base_url().c_str(), work.c_str());
  std::fflush(stdout);
  const braid::SubprocessResult evolve = braid::run_subprocess(run);
  check(evolve.succeeded(), "braid evolve ended: " + evolve.describe_end());
  if (!evolve.succeeded()) std::printf("%s\n", evolve.stderr_text.c_str());

  // ncu's own output for the seed: which of the figures this GPU's ncu gave (the section names
  // and metric names differ between ncu versions and architectures).
  const auto raw = braid::try_read_file(results / "gen_0_island_0" / "logs" / "profile" / "rank0.stdout");
  check(raw.has_value(), "ncu's output of the seed is kept in gen_0_island_0/logs/profile/rank0.stdout");
  const braid::NcuProfile profile = braid::parse_ncu_csv(raw.value_or(""));
  check(profile.ok(), "it parses as an ncu CSV" + (profile.ok() ? std::string() : ": " + profile.error));
  if (profile.ok()) {
    const braid::NcuSummary s = braid::summarize_kernel(profile.kernels.front());
    std::printf("seed kernel %s: %zu metrics; duration %s, DRAM %s, L2 %s, occupancy %s, tensor %s, stalls %zu\n", s.kernel.c_str(),
                profile.kernels.front().metrics.size(), s.duration_us ? "yes" : "NO", s.dram_pct ? "yes" : "NO",
                s.l2_pct ? "yes" : "NO", s.occupancy_pct ? "yes" : "NO", s.tensor_pct ? "yes" : "no", s.top_stalls.size());
    if (!s.tensor_pct)
      for (const auto& m : profile.kernels.front().metrics)
        if (m.name.find("tensor") != std::string::npos) std::printf("  tensor metric present: %s\n", m.name.c_str());
    check(s.duration_us && s.dram_pct && s.l2_pct && s.occupancy_pct && !s.top_stalls.empty(),
          "duration, DRAM, L2, occupancy and warp stalls found in the default sections");
  }

  // The exchanges as recorded: mutation prompts showing the profiled parent's ncu lines.
  std::ifstream log(results / "llm_exchanges.jsonl");
  int mutations = 0, with_profile = 0;
  std::string shown;
  for (std::string line; std::getline(log, line);) {
    const braid::json record = braid::json::parse(line, nullptr, false);
    if (record.is_discarded()) continue;
    const std::string text = record.dump();
    if (text.find("Current program (id ") == std::string::npos) continue;  // mutation prompts only
    ++mutations;
    for (const auto& m : record["request"].value("messages", braid::json::array())) {
      if (!m.is_object() || !m.value("content", braid::json()).is_string()) continue;
      const std::string block = block_after(m["content"].get<std::string>(), "Nsight Compute profile of this program");
      if (block.empty()) continue;
      ++with_profile;
      if (shown.empty()) shown = block;
    }
  }
  std::printf("mutation prompts: %d, with the parent's ncu profile: %d\n", mutations, with_profile);
  if (!shown.empty()) std::printf("--- first profile block of a prompt ---\n%s\n---\n", shown.c_str());
  check(mutations > 0, "the run made mutation calls (llm_exchanges.jsonl)");
  check(with_profile > 0, "a mutation prompt carries the Nsight Compute profile of its parent");
  check(shown.find("add_rmsnorm_kernel") != std::string::npos && shown.find("% of peak") != std::string::npos &&
            shown.find("occupancy") != std::string::npos,
        "the profile line names the candidate's kernel, DRAM % of peak and occupancy");
  std::printf("%s\n", failures == 0 ? "PASS" : "FAILED");
  return failures == 0 ? 0 : 1;
}
