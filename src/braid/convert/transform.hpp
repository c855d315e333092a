// Transformer: rules that turn a host-driven NCCL program into a device-initiated one.
//
// Stage A (infrastructure): buffers that converted calls touch move to symmetric memory
// (cudaMalloc/ncclMemAlloc -> braid_converted::sym_malloc/sym_nccl_alloc, frees alike; harness
// buffers: ctx.alloc -> ctx.alloc_window), windows are registered and one device communicator
// created on first use, teardown runs before ncclCommDestroy/Finalize (or the harness teardown).
// Stage B (collectives): each convertible NCCL call is renamed to a drop-in replacement with the
// same arguments (braid_converted::all_gather<SITE>, all_reduce, reduce_scatter, broadcast,
// bcast, all_to_all; send/recv inside groups with group_start/group_end<SITE>), implemented in
// the inserted prelude from device/include/braid/comm.cuh. SITE gives each call site its own
// barrier indices, so collectives on different streams never share one.
// What no rule handles stays a host NCCL call (still correct) and is listed with its line.
#pragma once
#include <string>
#include <vector>

#include "braid/convert/analyzer.hpp"
#include "braid/util/json.hpp"

namespace braid::convert {

struct Change {
  int line = 0;
  std::string stage;  // "A" or "B"
  std::string rule;   // symmetric-allocation, all-gather, ...
  std::string before, after;
  std::string why;
};

struct Unconverted {
  int line = 0;
  std::string construct;
  std::string reason;
};

struct Conversion {
  std::string file;
  std::string source;  // converted text
  std::vector<Change> changes;
  std::vector<Unconverted> left;
  int call_sites = 0;
  int converted_calls = 0;
  int nccl_calls = 0;
  std::vector<std::string> inlined_headers;  // headers written into the file (header_inline.hpp)
  bool complete() const { return left.empty() && converted_calls == nccl_calls; }
};

Conversion transform(const Analysis& analysis, const std::string& source);

// For the verification gate: `// braid:input x` becomes a call that fills x with seeded random
// values (small integers, so sums are exact in any order) and starts the clock; `// braid:output x`
// stops it and writes x of this rank to $BRAID_GATE_DIR. Applied to the original and the converted
// program alike.
std::string instrument_for_gate(const Analysis& analysis, const std::string& source);

// Where generated text goes: after the last #include line (it needs NCCL's and braid's headers
// declared first).
std::size_t prelude_position(const std::string& source);

// The analysis of a converted program (by the rules or a rewrite): generated namespaces
// (braid_converted, braid_gate) are read as blank and each `braid_converted::x<SITE>(...)` as the
// NCCL/CUDA call it replaced, so calls, buffers and annotations are found as in the original; byte
// positions and lines are the converted program's own. Throws UserError like analyze().
Analysis analyze_converted(const std::string& file, const std::string& source);

// How the ranks of a converted program sit in its processes, as its runtime must know: one per
// process, every rank of the process driven by one thread (ncclCommInitAll), or a thread per rank.
enum class RanksInProcess { One, OneThreadDrivesAll, ThreadPerRank };

// The prelude text inserted after the includes: a kCallSites preamble, then the embedded
// device/include/braid/converted/prelude.cuh (and prelude_harness.cuh for harness programs).
std::string converted_prelude(int call_sites, bool harness, RanksInProcess ranks = RanksInProcess::One);

json conversion_to_json(const Conversion& c);
std::string conversion_to_text(const Conversion& c);

}  // namespace braid::convert
