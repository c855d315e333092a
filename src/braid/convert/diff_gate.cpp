#include "braid/convert/diff_gate.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <tuple>

#include "braid/convert/snapshot_shim_files.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/subprocess.hpp"

namespace braid::convert {
namespace {

std::filesystem::path find_on(const std::string& name, const std::string& path_env) {
  std::size_t start = 0;
  while (start <= path_env.size()) {
    const std::size_t end = std::min(path_env.find(':', start), path_env.size());
    const std::string dir = path_env.substr(start, end - start);
    if (!dir.empty()) {
      const std::filesystem::path p = std::filesystem::path(dir) / name;
      if (::access(p.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(p)) return p;
    }
    start = end + 1;
  }
  return {};
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return (ranks.size() == 1 ? "rank " : "ranks ") + out;
}

std::string tail(const std::string& s, std::size_t n) { return s.size() > n ? s.substr(s.size() - n) : s; }

// The end of what a rank said: its stderr, else its stdout (programs that print errors with printf).
std::string said(const RankEnd& r) {
  const bool quiet = r.stderr_text.find_first_not_of(" \n\t") == std::string::npos;
  return quiet ? "stdout:\n" + tail(r.stdout_text, 600) : "stderr:\n" + tail(r.stderr_text, 600);
}

// NCCL's all-reduce by tree: another summation order than the ring it picks on one node.
constexpr const char* kOtherSumOrder = "allreduce:tree";

// Whether a converted reduction rounds differently in another order: a floating sum or average
// over more than two ranks (two operands sum the same either way). An unknown type or op may be.
bool reorders_sums(const std::vector<ConvertedReduction>& reductions, int ranks) {
  return ranks > 2 && std::any_of(reductions.begin(), reductions.end(), [&](const ConvertedReduction& r) {
           return !r.dtype || !r.op || !reduction_tolerance(*r.dtype, *r.op, ranks).exact;
         });
}

// NCCL before 2.29.7 leaves the last elements of a one-rank ncclAvg reduction unwritten
// (NVIDIA/nccl#1950, measured with 2.28.9 on H200: the last count % 4 of 1048579 floats): at one
// rank the original may be the wrong side. A note for the failure, "" where it cannot apply.
std::string known_nccl_defect(const std::vector<ConvertedReduction>& reductions, int world,
                              const std::string& version) {
  const std::optional<int> avg = nccl_op_number("ncclAvg");
  const bool averages =
      std::any_of(reductions.begin(), reductions.end(), [&](const ConvertedReduction& r) { return r.op == avg; });
  if (world != 1 || !averages) return "";
  int major = 0, minor = 0, patch = 0;
  const bool known = std::sscanf(version.c_str(), "%d.%d.%d", &major, &minor, &patch) == 3;
  if (known && std::make_tuple(major, minor, patch) >= std::make_tuple(2, 29, 7)) return "";
  return fmt::format(
      " (NCCL {} may be the cause: before 2.29.7 a one-rank ncclAvg reduction leaves its last elements unwritten, "
      "NVIDIA/nccl#1950, so the original can be the wrong side; gate at 2 ranks or more)",
      known ? version : "of unknown version");
}

// The environment both sides share, less what names the side's own folders.
std::map<std::string, std::string> side_env(const std::filesystem::path& dir) {
  return {{"BRAID_SNAPSHOT_DIR", (dir / "snapshots").string()}, {"NCCL_ID_FILE", (dir / "nccl.id").string()}};
}

SideRun run_local(const std::filesystem::path& exe, const std::filesystem::path& dir, const DiffRunSpec& spec) {
  auto env = user_rank_env(spec.ranks, dir);
  env["BRAID_SNAPSHOT_DIR"] = (dir / "snapshots").string();
  env["LD_PRELOAD"] = spec.shim.string();
  if (spec.per_device) env["BRAID_SNAPSHOT_PER_DEVICE"] = "1";
  for (const auto& [k, v] : spec.env) env[k] = v;
  const auto runs = run_local_ranks(exe, spec.args, spec.ranks, dir, 1, spec.timeout_s, env);
  SideRun side;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const SubprocessResult& x = runs[r];
    side.timed_out = side.timed_out || x.timed_out;
    side.wall_s = std::max(side.wall_s, x.wall_s);
    side.ranks.push_back(
        {(int)r, x.started, x.timed_out, x.succeeded(), x.describe_end(), x.stdout_text, x.stderr_text});
  }
  return side;
}

SideRun run_mpirun(const std::filesystem::path& exe, const std::filesystem::path& dir, const DiffRunSpec& spec) {
  LaunchSpec l;
  l.kind = LauncherKind::Mpirun;
  l.ranks = spec.ranks;
  l.argv = {exe.string()};
  l.argv.insert(l.argv.end(), spec.args.begin(), spec.args.end());
  l.cwd = dir;
  l.env = side_env(dir);
  if (spec.per_device) l.env["BRAID_SNAPSHOT_PER_DEVICE"] = "1";
  for (const auto& [k, v] : spec.env) l.env[k] = v;
  l.log_dir = dir / "logs";
  l.timeout_s = spec.timeout_s;
  l.name = dir.filename().string();
  // Preloaded into the ranks only, not into mpirun itself.
  l.launcher_args = {"-x", "LD_PRELOAD=" + spec.shim.string()};
  const LaunchResult res = launch_ranks(l);
  SideRun side;
  side.launch_error = res.started ? "" : "mpirun did not start: " + res.start_error;
  side.timed_out = res.timed_out;
  side.wall_s = res.wall_s;
  for (const RankOutcome& o : res.ranks) {
    std::string end = !o.known ? "end unknown" : o.timed_out ? "timed out" : o.describe();
    if (const std::string prefix = fmt::format("rank {}: ", o.rank); end.rfind(prefix, 0) == 0)
      end = end.substr(prefix.size());
    side.ranks.push_back({o.rank, o.known, o.timed_out, o.known && !o.failed() && !o.timed_out && !o.stopped, end,
                          o.stdout_text, o.stderr_text});
  }
  if (res.started && !res.timed_out && !res.succeeded() &&
      std::all_of(side.ranks.begin(), side.ranks.end(), [](const RankEnd& r) { return r.ok; }))
    side.launch_error = res.describe_failure("mpirun");
  return side;
}

json diff_details(const DiffRunSpec& spec) {
  return {{"mode", "differential"}, {"launcher", to_string(spec.launcher.kind)}, {"ranks", spec.ranks}};
}

std::vector<RankSnapshot> read_snapshots(const std::filesystem::path& dir, int ranks) {
  std::vector<RankSnapshot> out;
  for (int r = 0; r < ranks; ++r) out.push_back(read_rank_snapshot(dir / "snapshots", r));
  return out;
}

// The first reason the two runs cannot be compared, or "": launch, hang, the original's own
// failure, exit codes, missing snapshots.
std::string run_failure(const SideRun runs[2], const std::vector<RankSnapshot> snaps[2], const DiffRunSpec& spec,
                        const char* second = "converted") {
  const char* names[2] = {"original", second};
  for (int i = 0; i < 2; ++i) {
    if (!runs[i].launch_error.empty()) return fmt::format("{} side: {}", names[i], runs[i].launch_error);
    if (auto h = hang_failure(names[i], runs[i], snaps[i], spec.timeout_s); !h.empty()) return h;
  }
  for (const RankEnd& r : runs[0].ranks)
    if (!r.ok)
      return fmt::format("original does not run cleanly (rank {}: {}); nothing to compare against; {}", r.rank, r.end,
                         said(r));
  for (std::size_t r = 0; r < runs[1].ranks.size(); ++r)
    if (!runs[1].ranks[r].ok)
      return fmt::format("rank {} ends differently: original {}, {} {}; {}", r, runs[0].ranks[r].end, second,
                         runs[1].ranks[r].end, said(runs[1].ranks[r]));
  for (int i = 0; i < 2; ++i)
    for (const RankSnapshot& s : snaps[i]) {
      if (!s.found || s.buffers.empty())
        return fmt::format(
            "{} wrote no buffer snapshot on rank {}: the snapshot shim saw no device allocation (a program linked "
            "with the static CUDA runtime, or one that allocates nothing, cannot be compared)",
            names[i], s.rank);
      if (!s.problems.empty())
        return fmt::format("{} snapshot of rank {} is unreadable: {}", names[i], s.rank, s.problems.front());
    }
  return "";
}

}  // namespace

std::map<std::string, std::string> user_rank_env(int ranks, const std::filesystem::path& dir) {
  return {{"RANK", "{rank}"},
          {"LOCAL_RANK", "{rank}"},
          {"WORLD_SIZE", std::to_string(ranks)},
          {"NCCL_ID_FILE", (dir / "nccl.id").string()}};
}

bool includes_mpi(const std::string& source) {
  static const std::regex mpi(R"((^|\n)[ \t]*#[ \t]*include[ \t]*[<"]mpi\.h[>"])");
  return std::regex_search(source, mpi);
}

LauncherChoice choose_launcher(const std::string& source, const std::string& path_env) {
  LauncherChoice c;
  if (!includes_mpi(source)) return c;
  c.kind = LauncherKind::Mpirun;
  c.mpirun = find_on("mpirun", path_env);
  if (c.mpirun.empty())
    c.failure =
        "the program includes mpi.h, so its ranks start under mpirun, and no mpirun is on PATH (install Open MPI or "
        "add it to PATH)";
  return c;
}

SideRun run_side(const std::filesystem::path& exe, const std::string& name, const DiffRunSpec& spec) {
  const std::filesystem::path dir = spec.work_dir / name;
  std::filesystem::remove_all(dir / "snapshots");
  std::filesystem::remove(dir / "nccl.id");
  std::filesystem::create_directories(dir / "snapshots");
  return spec.launcher.kind == LauncherKind::Mpirun ? run_mpirun(exe, dir, spec) : run_local(exe, dir, spec);
}

std::string hang_failure(const std::string& name, const SideRun& run, const std::vector<RankSnapshot>& snapshots,
                         double timeout_s) {
  if (!run.timed_out) return "";
  std::vector<int> running;
  for (const RankEnd& r : run.ranks)
    if (r.timed_out) running.push_back(r.rank);
  if (running.empty())  // mpirun did not say: the ranks whose shim never reached exit()
    for (const RankSnapshot& s : snapshots)
      if (!s.ended) running.push_back(s.rank);
  return fmt::format(
      "{} hangs: timed out after {:.1f} s; {}", name, timeout_s,
      running.empty() ? "no rank was identified as still running" : rank_list(running) + " still running");
}

GateResult diff_programs(const std::filesystem::path& original_exe, const std::filesystem::path& converted_exe,
                         const DiffRunSpec& spec, const std::vector<ConvertedReduction>& reductions) {
  GateResult g;
  g.built = true;
  g.details = diff_details(spec);
  if (!spec.launcher.failure.empty()) {
    g.failure = spec.launcher.failure;
    return g;
  }
  SideRun runs[2] = {run_side(original_exe, "original", spec), run_side(converted_exe, "converted", spec)};
  std::vector<RankSnapshot> snaps[2] = {read_snapshots(spec.work_dir / "original", spec.ranks),
                                        read_snapshots(spec.work_dir / "converted", spec.ranks)};
  g.original_ms = runs[0].wall_s * 1000.0;
  g.converted_ms = runs[1].wall_s * 1000.0;
  json exits = json::array(), stdouts = json::array(), buffers = json::array();
  for (std::size_t r = 0; r < runs[0].ranks.size() && r < runs[1].ranks.size(); ++r) {
    exits.push_back({{"rank", r}, {"original", runs[0].ranks[r].end}, {"converted", runs[1].ranks[r].end}});
    const StdoutComparison s = compare_stdout(runs[0].ranks[r].stdout_text, runs[1].ranks[r].stdout_text);
    json j{{"rank", r}, {"identical", s.identical}, {"identical_with_numbers_masked", s.identical_masked}};
    if (!s.first_difference.empty()) j["first_difference"] = s.first_difference;
    stdouts.push_back(j);
  }
  g.details["exit"] = exits;
  g.details["stdout"] = stdouts;
  json conv = json::array();
  for (const ConvertedReduction& c : reductions) conv.push_back({{"call", c.call}, {"line", c.line}});
  g.details["converted_reductions"] = conv;
  g.failure = run_failure(runs, snaps, spec);
  // Ran: every rank of both sides ended cleanly (the rewrite loop tells run failures from wrong output).
  const auto clean = [](const SideRun& s) {
    return s.launch_error.empty() && !s.timed_out &&
           std::all_of(s.ranks.begin(), s.ranks.end(), [](const RankEnd& r) { return r.ok; });
  };
  g.ran = clean(runs[0]) && clean(runs[1]);
  if (!g.failure.empty()) return g;
  const auto rank_dir = [&](const char* side, int r) {
    return spec.work_dir / side / "snapshots" / fmt::format("rank{}", r);
  };
  // Every rank's buffers, with the original's own spread where it was measured; the first difference.
  const auto compare_all = [&](const std::vector<OriginalSpread>* spreads) {
    std::string mismatch;
    buffers = json::array();
    for (int r = 0; r < spec.ranks; ++r)
      for (const BufferComparison& c : compare_rank(
               snaps[0][(std::size_t)r], rank_dir("original", r), snaps[1][(std::size_t)r], rank_dir("converted", r),
               reductions, spec.world > 0 ? spec.world : spec.ranks, spreads ? &(*spreads)[(std::size_t)r] : nullptr)) {
        buffers.push_back(buffer_comparison_to_json(c));
        if (!c.match && mismatch.empty())
          mismatch = fmt::format("buffer #{} ({} bytes, {}) differs on rank {}: {}", c.index, c.bytes, c.allocators, r,
                                 c.detail);
      }
    return mismatch;
  };
  std::string mismatch = compare_all(nullptr);
  if (!mismatch.empty()) {
    // Before blaming the conversion: does the original reproduce itself? (original_spread) Over
    // more than two ranks it sums its all-reduces in another order the second time (NCCL's tree
    // instead of its usual ring): a program that amplifies rounding (a greedy argmax over near
    // ties) then shows that its outputs depend on the order NCCL sums in, not only on its inputs.
    DiffRunSpec again_spec = spec;
    const bool reordered = reorders_sums(reductions, spec.world > 0 ? spec.world : spec.ranks);
    if (reordered) again_spec.env["NCCL_ALGO"] = kOtherSumOrder;
    // A third run when the difference stays: a buffer the original sums in an order that varies
    // (atomics) may come out the same twice by chance, and is then held to rounding alone.
    std::vector<OriginalSpread> spreads((std::size_t)spec.ranks);
    std::size_t within = 0, not_defined = 0;
    for (const char* side : {"original-again", "original-third"}) {
      const SideRun again = run_side(original_exe, side, again_spec);
      const std::vector<RankSnapshot> again_snaps = read_snapshots(spec.work_dir / side, spec.ranks);
      const SideRun pair[2] = {runs[0], again};
      const std::vector<RankSnapshot> pair_snaps[2] = {snaps[0], again_snaps};
      if (const std::string why = run_failure(pair, pair_snaps, spec, "the original's second run"); !why.empty()) {
        if (!g.details.contains("original_again")) g.details["original_again"] = {{"ran", false}, {"why", why}};
        break;
      }
      within = not_defined = 0;
      for (int r = 0; r < spec.ranks; ++r) {
        OriginalSpread& merged = spreads[(std::size_t)r];
        merge_spread(merged,
                     original_spread(snaps[0][(std::size_t)r], rank_dir("original", r), again_snaps[(std::size_t)r],
                                     rank_dir(side, r), reductions, spec.world > 0 ? spec.world : spec.ranks));
        within += merged.within.size();
        not_defined += merged.not_defined.size();
      }
      g.details["original_again"] = {{"ran", true},
                                     {"runs", side == std::string("original-third") ? 2 : 1},
                                     {"buffers_within_its_spread", within},
                                     {"buffers_not_defined", not_defined}};
      if (reordered) g.details["original_again"]["nccl_algo"] = kOtherSumOrder;
      if (within + not_defined > 0) mismatch = compare_all(&spreads);
      if (mismatch.empty()) break;
    }
    const bool any_compared =
        std::any_of(buffers.begin(), buffers.end(), [](const json& b) { return b.value("compared", false); });
    if (g.details["original_again"].value("ran", false) && mismatch.empty() && !any_compared && not_defined > 0)
      mismatch = fmt::format(
          "nothing left to compare: every buffer the original writes differs between runs of it{} beyond "
          "rounding, so the converted program cannot be checked against it",
          reordered ? fmt::format(" (the later summing its all-reduces in another order, NCCL_ALGO={})", kOtherSumOrder)
                    : "");
  }
  g.details["buffers"] = buffers;
  if (!mismatch.empty())
    mismatch += known_nccl_defect(reductions, spec.world > 0 ? spec.world : spec.ranks, spec.nccl_version);
  g.failure = mismatch;
  g.passed = mismatch.empty();
  return g;
}

std::filesystem::path build_snapshot_shim(const std::filesystem::path& work_dir, std::string* why) {
  auto tc = find_cuda_toolchain(why);
  if (!tc) return {};
  std::filesystem::create_directories(work_dir);
  const auto src = work_dir / "snapshot_shim.cpp";
  for (const auto& [name, text] : snapshot_shim_files())
    if (name == "snapshot_shim.cpp") write_file_atomic(src, text);
  const auto out = work_dir / "libbraid_snapshot.so";
  SubprocessOptions o;
  // nvcc as a host compiler driver: it knows CUDA's include folder.
  o.argv = {tc->nvcc.string(), "-O2", "-std=c++17", "-shared",    "-Xcompiler",
            "-fPIC",           "-o",  out.string(), src.string(), "-ldl"};
  o.cwd = work_dir;
  o.timeout_s = 300;
  const SubprocessResult r = run_subprocess(o);
  if (!r.succeeded()) {
    *why = "the snapshot shim does not compile: " + r.describe_end() + "\n" + tail(r.stderr_text, 2000);
    return {};
  }
  return out;
}

GateResult run_diff_gate(const Analysis& a, const std::string& original_source, const std::string& converted_source,
                         const std::vector<ConvertedReduction>& reductions, const GateOptions& options) {
  GateOptions o = options;
  o.work_dir = std::filesystem::absolute(o.work_dir);
  if (o.flags.empty()) o.flags = default_nvcc_flags();
  o.flags.insert(o.flags.end(), {"-cudart", "shared"});  // the shim interposes the shared runtime
  GateResult g;
  DiffRunSpec spec;
  const char* path = std::getenv("PATH");
  spec.launcher = choose_launcher(original_source, path ? path : "");
  spec.ranks = a.single_process_multi_gpu ? 1 : o.ranks;  // ncclCommInitAll drives every GPU from one process
  spec.world = o.ranks;
  // Threads of a rank per GPU allocate in an order that varies between runs; each GPU's does not.
  spec.per_device = a.single_process_multi_gpu;
  spec.args = o.program_args;
  spec.work_dir = o.work_dir;
  spec.timeout_s = o.run_timeout_s;
  if (const auto tc = find_cuda_toolchain(); tc && tc->nccl) spec.nccl_version = tc->nccl->library_version;
  g.details = diff_details(spec);  // what --json shows even when the builds fail
  std::string why;
  spec.shim = build_snapshot_shim(o.work_dir / "shim", &why);
  if (spec.shim.empty()) {
    g.failure = why;
    return g;
  }
  const char* names[2] = {"original", "converted"};
  const std::string* texts[2] = {&original_source, &converted_source};
  for (int i = 0; i < 2; ++i) {
    const BuildResult br = build_program(*texts[i], o.work_dir / names[i], o);
    if (!br.ok) {
      g.failure = fmt::format("{} does not compile: {}", names[i], br.error);
      return g;
    }
  }
  if (!o.run) {
    g.built = true;
    return g;
  }
  return diff_programs(o.work_dir / "original" / "program", o.work_dir / "converted" / "program", spec, reductions);
}

std::string diff_gate_summary(const GateResult& g) {
  std::string out = fmt::format("{} buffers match on {} ranks; wall time original {:.3f} s, converted {:.3f} s",
                                g.details.value("buffers", json::array()).size(), g.details.value("ranks", 0),
                                g.original_ms / 1000.0, g.converted_ms / 1000.0);
  const json again = g.details.value("original_again", json::object());
  const std::size_t within = again.value("buffers_within_its_spread", std::size_t{0}),
                    not_defined = again.value("buffers_not_defined", std::size_t{0});
  if (within + not_defined > 0)
    out += fmt::format(
        "; the original wrote {} of them differently in another run: {} held to its own spread, {} "
        "not compared",
        within + not_defined, within, not_defined);
  return out;
}

std::string diff_gate_to_text(const GateResult& g) {
  std::string out =
      fmt::format("differential gate ({} launcher, {} ranks): {}\n", g.details.value("launcher", std::string("?")),
                  g.details.value("ranks", 0), g.passed ? "passed" : "failed");
  for (const auto& b : g.details.value("buffers", json::array()))
    out += fmt::format("  rank {} buffer #{} {} bytes {} [{}]: {}{}\n", b.value("rank", 0), b.value("index", 0),
                       b.value("bytes", 0), b.value("allocator", std::string()), b.value("tolerance", std::string()),
                       b.value("match", false) ? (b.value("compared", false) ? "match" : "not compared") : "DIFFERS",
                       b.contains("detail") ? " (" + b.value("detail", std::string()) + ")" : "");
  for (const auto& s : g.details.value("stdout", json::array()))
    if (!s.value("identical", false))
      out += fmt::format("  rank {} stdout {}: {}\n", s.value("rank", 0),
                         s.value("identical_with_numbers_masked", false) ? "differs only in numbers" : "differs",
                         s.value("first_difference", std::string()));
  if (const json again = g.details.value("original_again", json::object()); again.value("ran", true) == false)
    out += "  the original did not run cleanly a second time: " + again.value("why", std::string()) + "\n";
  if (!g.failure.empty()) out += "  " + g.failure + "\n";
  return out;
}

}  // namespace braid::convert
