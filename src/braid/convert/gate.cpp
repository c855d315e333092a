#include "braid/convert/gate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>

#include "braid/convert/diff_gate.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/subprocess.hpp"

namespace braid::convert {
namespace {

NvccBuilder make_builder(const std::filesystem::path& work_dir) {
  std::string why;
  auto tc = find_cuda_toolchain(&why);
  if (!tc) throw SystemError("no CUDA toolchain: " + why);
  return NvccBuilder(*tc, work_dir / "cache", 2);
}

BuildResult build(NvccBuilder& builder, const std::filesystem::path& src, const std::filesystem::path& out,
                  const std::filesystem::path& source_dir, const std::vector<std::string>& flags,
                  const std::vector<std::string>& libs = {}) {
  BuildInput in;
  in.source = src;
  in.output = out;
  in.flags = flags.empty() ? default_nvcc_flags() : flags;
  if (!source_dir.empty()) in.includes.push_back(source_dir);
  in.libs = {"-lcublas"};
  in.libs.insert(in.libs.end(), libs.begin(), libs.end());
  in.display_name = src.filename().string();
  in.timeout_s = 600;
  in.log_dir = out.parent_path();
  return builder.build(in);
}

float bf16_to_float(uint16_t v) {
  uint32_t u = (uint32_t)v << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// "" when equal within the kind's tolerance, else the first difference. Reductions over `ranks`
// may add in another order than the original (NCCL's ring rounds each bf16 partial sum): past
// 2 ranks, bf16 gets 1/128 more absolute slack per rank.
std::string compare_output(const std::string& kind, const std::string& a, const std::string& b, int ranks) {
  if (a.size() != b.size()) return fmt::format("sizes differ ({} vs {} bytes)", a.size(), b.size());
  const std::size_t esize = kind == "b16" ? 2 : 4;
  for (std::size_t i = 0; i + esize <= a.size(); i += esize) {
    double x = 0, y = 0;
    if (kind == "int") {
      int32_t p, q;
      std::memcpy(&p, a.data() + i, 4);
      std::memcpy(&q, b.data() + i, 4);
      if (p != q) return fmt::format("element {}: original {} converted {}", i / esize, p, q);
      continue;
    }
    if (kind == "b16") {
      uint16_t p, q;
      std::memcpy(&p, a.data() + i, 2);
      std::memcpy(&q, b.data() + i, 2);
      x = bf16_to_float(p);
      y = bf16_to_float(q);
    } else {
      float p, q;
      std::memcpy(&p, a.data() + i, 4);
      std::memcpy(&q, b.data() + i, 4);
      x = p;
      y = q;
    }
    const double tol =
        kind == "b16" ? 1e-2 * (1.0 + std::fabs(x)) + std::max(0, ranks - 2) / 128.0 : 1e-5 * (1.0 + std::fabs(x));
    if (!(std::fabs(x - y) <= tol) && !(std::isnan(x) && std::isnan(y)))
      return fmt::format("element {}: original {} converted {}", i / esize, x, y);
  }
  return "";
}

std::string rank_failures(const std::vector<SubprocessResult>& runs, const std::filesystem::path& dir) {
  std::string why;
  for (std::size_t r = 0; r < runs.size(); ++r)
    if (!runs[r].succeeded()) {
      std::string err = runs[r].stderr_text;
      if (err.size() > 600) err = err.substr(err.size() - 600);
      why += fmt::format("rank {}: {}; stderr: {}\n", r, runs[r].describe_end(), err);
    }
  return why;
}

}  // namespace

std::vector<SubprocessResult> run_local_ranks(const std::filesystem::path& exe, const std::vector<std::string>& args,
                                              int ranks, const std::filesystem::path& dir, unsigned long long seed,
                                              double timeout_s, const std::map<std::string, std::string>& env) {
  std::vector<SubprocessResult> out((std::size_t)ranks);
  std::vector<std::thread> threads;
  const std::string run_id = fmt::format("gate{}_{}", (long)::getpid(), dir.filename().string());
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      SubprocessOptions o;
      o.argv = {exe.string()};
      o.argv.insert(o.argv.end(), args.begin(), args.end());
      o.cwd = dir;
      o.env_add = {{"BRAID_RANK", std::to_string(r)},
                   {"BRAID_WORLD_SIZE", std::to_string(ranks)},
                   {"BRAID_LOCAL_RANK", std::to_string(r)},
                   {"BRAID_EVAL_DIR", dir.string()},
                   {"BRAID_RUN_ID", run_id},
                   {"BRAID_GATE_DIR", dir.string()},
                   {"BRAID_GATE_SEED", std::to_string(seed)},
                   {"NCCL_NVLS_ENABLE", "0"}};
      for (const auto& [name, value] : env) o.env_add[name] = value == "{rank}" ? std::to_string(r) : value;
      o.timeout_s = timeout_s;
      o.stdout_path = dir / fmt::format("rank{}.stdout", r);
      o.stderr_path = dir / fmt::format("rank{}.stderr", r);
      out[(std::size_t)r] = run_subprocess(o);
    });
  for (auto& t : threads) t.join();
  return out;
}

BuildResult compile_only(const std::string& source, const std::filesystem::path& work_dir, const std::string& name,
                         const std::filesystem::path& source_dir, const std::vector<std::string>& flags) {
  // nvcc runs in the builder's own folder: relative paths would name other files there.
  const std::filesystem::path work = std::filesystem::absolute(work_dir);
  std::filesystem::create_directories(work);
  const auto src = work / (name + ".cu");
  write_file_atomic(src, source);
  NvccBuilder builder = make_builder(work);
  std::vector<std::string> f = flags.empty() ? default_nvcc_flags() : flags;
  f.push_back("-c");  // compile and assemble; CI has no GPU to run on and need not link
  return build(builder, src, work / (name + ".o"),
               source_dir.empty() ? source_dir : std::filesystem::absolute(source_dir), f);
}

BuildResult compile_user_program(const std::string& source, const std::filesystem::path& work_dir, const std::string& name,
                                 const std::filesystem::path& source_dir, BuildFlags& flags, std::string* note) {
  const BuildResult first = compile_only(source, work_dir, name, source_dir, flags.compile_flags());
  const bool standard_named = std::any_of(flags.extra.begin(), flags.extra.end(),
                                          [](const std::string& f) { return f.rfind("-std=", 0) == 0; });
  if (first.ok || standard_named) return first;
  BuildFlags cxx17 = flags;
  cxx17.extra.push_back("-std=c++17");
  const BuildResult again = compile_only(source, work_dir / "c++17", name, source_dir, cxx17.compile_flags());
  if (!again.ok) return first;
  flags = cxx17;
  const std::string error = first.error.substr(0, first.error.find('\n', first.error.find_first_not_of(" \n")));
  *note = "built as C++17 (nvcc's default; no -std given): braid's default -std=c++20 failed: " + error;
  return again;
}

namespace {

// Builds, runs and compares the two gate-ready texts (instrumented or harness programs).
GateResult gate_texts(const Analysis& a, bool harness, const std::string& orig_text, const std::string& conv_text,
                      const GateOptions& options) {
  GateOptions o = options;
  o.work_dir = std::filesystem::absolute(o.work_dir);
  GateResult g;
  std::filesystem::create_directories(o.work_dir);
  NvccBuilder builder = make_builder(o.work_dir);
  struct Side {
    const char* name;
    const std::string* text;
    std::filesystem::path exe, dir;
  } sides[2] = {{"original", &orig_text, {}, {}}, {"converted", &conv_text, {}, {}}};
  for (Side& s : sides) {
    s.dir = o.work_dir / s.name;
    std::filesystem::create_directories(s.dir);
    write_file_atomic(s.dir / "program.cu", *s.text);
    s.exe = s.dir / "program";
    BuildResult br = build(builder, s.dir / "program.cu", s.exe, o.source_dir, o.flags, o.libs);
    if (!br.ok) {
      g.failure = fmt::format("{} does not compile: {}", s.name, br.error);
      return g;
    }
  }
  g.built = true;
  if (!o.run) return g;
  std::vector<std::string> args;
  if (harness) {
    std::string w;
    for (char c : o.harness_args + " ") {
      if (c == ' ') {
        if (!w.empty()) args.push_back(w);
        w.clear();
      } else {
        w += c;
      }
    }
    args.insert(args.end(), {"--mode", "bench", "--seed", std::to_string(o.seed)});
  }
  std::vector<SubprocessResult> runs[2];
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> side_args = args;
    if (harness) side_args.insert(side_args.end(), {"--results_dir", sides[i].dir.string()});
    runs[i] = run_local_ranks(sides[i].exe, side_args, o.ranks, sides[i].dir, o.seed, o.run_timeout_s);
    const std::string why = rank_failures(runs[i], sides[i].dir);
    if (!why.empty()) {
      g.failure = fmt::format("{} failed on {} ranks:\n{}", sides[i].name, o.ranks, why);
      return g;
    }
  }
  g.ran = true;
  if (harness) {
    for (int i = 0; i < 2; ++i) {
      auto correct = json::parse(read_file(sides[i].dir / "correct.json"));
      auto metrics = json::parse(read_file(sides[i].dir / "metrics.json"));
      g.details[sides[i].name] = {{"correct", correct}, {"public", metrics.value("public", json::object())}};
      if (!correct.value("correct", false)) {
        g.failure =
            fmt::format("{} fails the harness verification: {}", sides[i].name, correct.value("error", std::string()));
        return g;
      }
      double ms = 0;
      for (auto& s : metrics["public"].value("sizes", json::array())) ms += s.value("candidate_ms", 0.0);
      (i == 0 ? g.original_ms : g.converted_ms) = ms;
    }
    g.passed = true;
    return g;
  }
  json outputs = json::array();
  for (const Annotation& an : a.annotations) {
    if (an.kind != "output") continue;
    for (int r = 0; r < o.ranks; ++r) {
      const std::string base = fmt::format("{}.rank{}", an.buffer, r);
      std::string kinds[2], bins[2];
      double ms[2] = {0, 0};
      for (int i = 0; i < 2; ++i) {
        auto meta = try_read_file(sides[i].dir / (base + ".meta"));
        auto bin = try_read_file(sides[i].dir / (base + ".bin"));
        if (!meta || !bin) {
          g.failure = fmt::format("{} wrote no output `{}` on rank {}", sides[i].name, an.buffer, r);
          return g;
        }
        char kind[8] = {0};
        std::size_t esize = 0;
        std::sscanf(meta->c_str(), "%7s %zu %lf", kind, &esize, &ms[i]);
        kinds[i] = kind;
        bins[i] = *bin;
      }
      g.original_ms = std::max(g.original_ms, ms[0]);
      g.converted_ms = std::max(g.converted_ms, ms[1]);
      const std::string diff = compare_output(kinds[0], bins[0], bins[1], o.ranks);
      outputs.push_back({{"buffer", an.buffer}, {"rank", r}, {"bytes", bins[0].size()}, {"match", diff.empty()}});
      if (!diff.empty()) {
        g.details["outputs"] = outputs;
        g.failure = fmt::format("output `{}` differs on rank {}: {}", an.buffer, r, diff);
        return g;
      }
    }
  }
  g.details["outputs"] = outputs;
  for (int i = 0; i < 2; ++i) {
    std::string notes;
    for (auto& r : runs[i])
      if (r.stderr_text.find("braid_converted:") != std::string::npos) notes += r.stderr_text;
    if (!notes.empty()) g.details[std::string(sides[i].name) + "_fallbacks"] = notes;
  }
  g.passed = true;
  return g;
}

}  // namespace

BuildResult build_program(const std::string& source, const std::filesystem::path& dir, const GateOptions& o) {
  std::filesystem::create_directories(dir);
  write_file_atomic(dir / "program.cu", source);
  NvccBuilder builder = make_builder(o.work_dir);
  return build(builder, dir / "program.cu", dir / "program", o.source_dir, o.flags, o.libs);
}

GateResult run_gate(const Analysis& a, const std::string& original_source, const Conversion& conv,
                    const GateOptions& o) {
  const bool harness = a.uses_harness && a.annotations.empty();
  if (!harness && a.annotations.empty())
    return run_diff_gate(a, original_source, conv.source, converted_reductions(a, conv), o);
  const std::string orig_text = harness ? original_source : instrument_for_gate(a, original_source);
  // The converted side is the same rules applied to the instrumented original (the prelude's own
  // NCCL calls would not survive a second analysis); both sides then differ only by the rules.
  const std::string conv_text = harness ? conv.source : transform(analyze(a.file, orig_text), orig_text).source;
  return gate_texts(a, harness, orig_text, conv_text, o);
}

GateResult run_gate_on_candidate(const Analysis& a, const std::string& original_source, const Analysis& candidate,
                                 const std::string& candidate_source, const GateOptions& o) {
  const bool harness = a.uses_harness && a.annotations.empty();
  if (!harness && a.annotations.empty())
    return run_diff_gate(a, original_source, candidate_source, all_reductions(a), o);
  const std::string orig_text = harness ? original_source : instrument_for_gate(a, original_source);
  const std::string cand_text = harness ? candidate_source : instrument_for_gate(candidate, candidate_source);
  return gate_texts(a, harness, orig_text, cand_text, o);
}

json gate_to_json(const GateResult& g) {
  json j{{"built", g.built}, {"ran", g.ran}, {"passed", g.passed}, {"details", g.details}};
  if (!g.failure.empty()) j["failure"] = g.failure;
  if (g.ran) {
    j["original_ms"] = g.original_ms;
    j["converted_ms"] = g.converted_ms;
    if (g.original_ms > 0) j["time_ratio"] = g.converted_ms / g.original_ms;
  }
  return j;
}

}  // namespace braid::convert
