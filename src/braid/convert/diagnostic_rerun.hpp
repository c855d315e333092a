// Diagnostic rerun: when a rewritten program fails at run time, a copy instrumented with a
// synchronisation, an error check and a step marker after every kernel launch, NCCL, cuBLAS and
// memcpy call is rerun through the gate's machinery; the last marker each rank printed names the
// failing step: "the failing step: line N `ncclAllGather(...)`: <cuda error>".
// The instrumentation is a pure source transformation (testable on CPU).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/gate.hpp"

namespace braid::convert {

struct InstrumentedStep {
  int step = 0;      // 1-based, in source order
  int line = 0;      // line of the call in the program given
  std::string call;  // the call's name
  std::string text;  // the call's text, shortened to one line
};

struct Instrumented {
  std::string source;
  std::vector<InstrumentedStep> steps;
};

// Inserts after every kernel launch / NCCL / cuBLAS / memcpy statement and every call of the
// converted replacements (braid_converted::...) a `braid_diag::step(N, line, comm)` that
// synchronises the device, checks cudaGetLastError (and the communicator's asynchronous NCCL
// error) and prints "BRAID_DIAG step N line L ok" or "BRAID_DIAG step N line L failed: <error>"
// (then exits 86) to stderr. Calls inside ncclGroupStart/End are checked after the group's end
// (synchronising inside an open group would deadlock); calls inside the generated prelude and
// gate code are not instrumented. An unbraced if/else/loop body gets braces around it.
// `analysis`: analyze() of an original program or analyze_converted() of a converted one (the
// generated prelude's calls are then not steps).
Instrumented instrument_for_diagnosis(const Analysis& analysis, const std::string& source);

struct DiagnosticReport {
  bool located = false;
  int failing_rank = -1;
  InstrumentedStep step;  // the failing step (or the step after the last one that passed)
  std::string error;      // the CUDA/NCCL error text printed, or how the rank ended
  std::string text;       // "the failing step: line N `call(...)`: error" or why not located
};

// Reads the markers in every rank's stderr (index = rank) and how each rank ended.
DiagnosticReport locate_failing_step(const Instrumented& inst, const std::vector<SubprocessResult>& ranks);

// Builds the instrumented `source` and runs it on options.ranks local ranks (gate machinery),
// then locates the failing step. Expected failures (build fails, nothing located) are values.
DiagnosticReport diagnostic_rerun(const Analysis& analysis, const std::string& source, const GateOptions& options);

}  // namespace braid::convert
