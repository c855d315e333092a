#include "braid/convert/diagnostic_rerun.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "braid/convert/diff_gate.hpp"
#include "braid/convert/transform.hpp"
#include "braid/util/text.hpp"

namespace braid::convert {
namespace {

// Defined once after the includes; every step synchronises so an asynchronous error surfaces at
// the step that caused it, not at some later call.
const char* const kDiagHelpers = R"DIAG(
// ==== braid diagnostic rerun: step markers (generated) ====
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <nccl.h>
namespace braid_diag {
inline void step(int n, int line, ncclComm_t comm) {
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "BRAID_DIAG step %d line %d failed: %s (%s)\n", n, line, cudaGetErrorString(e), cudaGetErrorName(e));
    std::fflush(stderr);
    std::_Exit(86);
  }
  if (comm != nullptr) {
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
      std::fprintf(stderr, "BRAID_DIAG step %d line %d failed: NCCL %s\n", n, line, ncclGetErrorString(async));
      std::fflush(stderr);
      std::_Exit(86);
    }
  }
  std::fprintf(stderr, "BRAID_DIAG step %d line %d ok\n", n, line);
  std::fflush(stderr);
}
}  // namespace braid_diag
// ==== end of diagnostic step markers ====
)DIAG";

std::string one_line(const std::string& text, std::size_t max_chars = 100) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (is_space(c)) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  if (out.size() > max_chars) out = out.substr(0, max_chars - 3) + "...";
  return out;
}

struct Site {
  std::size_t call_begin = 0, call_end = 0;
  StatementRange stmt;
  int line = 0;
  std::string name;
  std::string comm;  // communicator expression, "" when none is known
};

std::string comm_of(const std::string& nccl_name, const std::vector<Argument>& args) {
  const NcclSignature* sig = nccl_signature(nccl_name);
  if (sig == nullptr || sig->comm < 0 || (int)args.size() != sig->arity) return "";
  return args[(std::size_t)sig->comm].text;
}

bool is_step_call(const Call& c) {
  switch (c.kind) {
    case CallKind::Kernel:
    case CallKind::Cublas: return true;
    case CallKind::Nccl: return nccl_signature(c.name) != nullptr || c.name == "ncclGroupEnd";
    case CallKind::Memory: return c.name.rfind("cudaMemcpy", 0) == 0;
    default: return false;
  }
}

}  // namespace

Instrumented instrument_for_diagnosis(const Analysis& a, const std::string& source) {
  std::vector<Site> sites;
  for (const Call& c : a.calls) {
    if (!is_step_call(c)) continue;
    if (c.group >= 0 && c.name != "ncclGroupEnd") continue;  // checked after the group's end
    if (c.stmt_end == 0) continue;                           // inside a condition or a lambda
    Site s;
    s.call_begin = c.call_begin;
    s.call_end = c.call_end;
    s.stmt = StatementRange{c.stmt_begin, c.stmt_end, c.stmt_is_body};
    s.line = c.line;
    s.name = c.name;
    if (c.kind == CallKind::Nccl) {
      s.comm = comm_of(c.name, c.args);
      if (c.name == "ncclGroupEnd" && c.group >= 0)
        for (std::size_t m : a.groups[(std::size_t)c.group].members)
          if (s.comm.empty()) s.comm = comm_of(a.calls[m].name, a.calls[m].args);
    }
    sites.push_back(s);
  }
  std::sort(sites.begin(), sites.end(), [](const Site& x, const Site& y) { return x.call_begin < y.call_begin; });

  Instrumented out;
  struct Insert {
    std::size_t at;
    std::string text;
  };
  std::vector<Insert> inserts;
  for (const Site& s : sites) {
    InstrumentedStep st;
    st.step = (int)out.steps.size() + 1;
    st.line = s.line;
    st.call = s.name;
    st.text = one_line(source.substr(s.call_begin, s.call_end - s.call_begin));
    out.steps.push_back(st);
    const std::string check =
        fmt::format(" braid_diag::step({}, {}, {});", st.step, st.line, s.comm.empty() ? "nullptr" : s.comm);
    // Braces keep an unbraced if/else/loop body one statement once the check follows it.
    if (s.stmt.control_body) inserts.push_back(Insert{s.stmt.begin, "{ "});
    inserts.push_back(Insert{s.stmt.end, s.stmt.control_body ? check + " }" : check});
  }
  inserts.push_back(Insert{prelude_position(source), kDiagHelpers});
  // Back to front, so earlier positions stay valid; at one position the later-listed text goes last.
  std::stable_sort(inserts.begin(), inserts.end(), [](const Insert& x, const Insert& y) { return x.at > y.at; });
  out.source = source;
  for (const Insert& in : inserts) out.source.insert(in.at, in.text);
  return out;
}

DiagnosticReport locate_failing_step(const Instrumented& inst, const std::vector<SubprocessResult>& ranks) {
  DiagnosticReport rep;
  struct RankMarks {
    int last_ok = 0;
    int failed = 0;
    std::string error;
  };
  std::vector<RankMarks> marks(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    std::istringstream in(ranks[r].stderr_text);
    for (std::string line; std::getline(in, line);) {
      const std::size_t at = line.find("BRAID_DIAG step ");
      if (at == std::string::npos) continue;
      int step = 0, src_line = 0;
      char word[16] = {0};
      if (std::sscanf(line.c_str() + at, "BRAID_DIAG step %d line %d %15s", &step, &src_line, word) != 3) continue;
      if (std::string(word) == "ok") {
        marks[r].last_ok = step;
      } else if (std::string(word) == "failed:") {
        marks[r].failed = step;
        const std::size_t colon = line.find("failed: ", at);
        marks[r].error = trimmed(line.substr(colon + 8));
      }
    }
  }
  auto step_info = [&](int n) -> const InstrumentedStep* {
    if (n < 1 || n > (int)inst.steps.size()) return nullptr;
    return &inst.steps[(std::size_t)n - 1];
  };
  auto describe = [&](const InstrumentedStep& s, const std::string& error) {
    return fmt::format("the failing step: line {} `{}`: {}", s.line, s.text, error);
  };
  // A rank whose own step failed names the cause; otherwise the first rank that crashed (others
  // time out waiting for it), then the first that timed out.
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (marks[r].failed > 0)
      if (const InstrumentedStep* s = step_info(marks[r].failed)) {
        rep.located = true;
        rep.failing_rank = (int)r;
        rep.step = *s;
        rep.error = marks[r].error;
        rep.text = fmt::format("{} (rank {})", describe(*s, rep.error), r);
        return rep;
      }
  int chosen = -1;
  for (int pass = 0; pass < 2 && chosen < 0; ++pass)
    for (std::size_t r = 0; r < ranks.size() && chosen < 0; ++r)
      if (!ranks[r].succeeded() && (pass == 1 || !ranks[r].timed_out)) chosen = (int)r;
  if (chosen < 0) {
    rep.text = ranks.empty()
                   ? "the instrumented rerun ran no rank"
                   : "the instrumented rerun passed on every rank: with a synchronisation after every step the "
                     "failure does not occur, so an ordering problem between streams or kernels is likely";
    return rep;
  }
  const RankMarks& m = marks[(std::size_t)chosen];
  rep.failing_rank = chosen;
  rep.error = ranks[(std::size_t)chosen].describe_end();
  // The rank's own last words (an exception's message, an abort), markers left out.
  std::string tail;
  {
    std::istringstream in(ranks[(std::size_t)chosen].stderr_text);
    for (std::string line; std::getline(in, line);)
      if (line.find("BRAID_DIAG step ") == std::string::npos && !trimmed(line).empty()) tail += trimmed(line) + " | ";
    if (tail.size() > 300) tail = "..." + tail.substr(tail.size() - 300);
    if (!tail.empty()) tail.resize(tail.size() - 3);
  }
  if (const InstrumentedStep* s = step_info(m.last_ok + 1)) {
    rep.located = true;
    rep.step = *s;
    rep.text = fmt::format("{} (rank {}{})", describe(*s, rep.error), chosen,
                           m.last_ok > 0 ? fmt::format(", after step {} at line {} passed", m.last_ok,
                                                       inst.steps[(std::size_t)m.last_ok - 1].line)
                                         : std::string(", before any instrumented step passed"));
  } else {
    rep.text = fmt::format("rank {} ended ({}) after the last instrumented step (line {}) passed", chosen, rep.error,
                           inst.steps.empty() ? 0 : inst.steps.back().line);
  }
  if (!tail.empty()) rep.text += "; stderr: " + tail;
  return rep;
}

DiagnosticReport diagnostic_rerun(const Analysis& analysis, const std::string& source, const GateOptions& options) {
  DiagnosticReport rep;
  const Instrumented inst = instrument_for_diagnosis(analysis, source);
  const bool harness = analysis.uses_harness && analysis.annotations.empty();
  std::string text = inst.source;
  std::vector<std::string> args;
  if (harness) {
    std::istringstream words(options.harness_args);
    for (std::string w; words >> w;) args.push_back(w);
    args.insert(args.end(), {"--mode", "bench", "--seed", std::to_string(options.seed)});
  } else {
    // Same seeded inputs as the gate, so the rerun meets the data the failing run met.
    text = instrument_for_gate(analyze_converted(analysis.file, inst.source), inst.source);
  }
  const std::filesystem::path dir = options.work_dir / "diagnosis";
  if (harness) args.insert(args.end(), {"--results_dir", dir.string()});
  // A program with neither markers nor harness (the differential gate's): its own command line and
  // the bootstrap names the gate gives it.
  std::map<std::string, std::string> env;
  if (!harness && analysis.annotations.empty()) {
    args = options.program_args;
    env = user_rank_env(options.ranks, dir);
  }
  const BuildResult built = build_program(text, dir, options);
  if (!built.ok) {
    rep.text = "the instrumented copy does not compile: " + built.error;
    return rep;
  }
  std::filesystem::remove(dir / "nccl.id");
  return locate_failing_step(
      inst, run_local_ranks(dir / "program", args, options.ranks, dir, options.seed, options.run_timeout_s, env));
}

}  // namespace braid::convert
