// The differential gate's comparison (diff_gate.hpp): what the snapshot shim
// (device/snapshot/snapshot_shim.cpp) wrote for each rank of the original and of the converted
// program, read back and compared buffer by buffer, and the ranks' stdout compared with numbers
// masked. Plain functions over plain values, so they are tested without a GPU.
//
// Tolerances, the one place they are defined (docs/run.md repeats them):
//   A buffer is compared bit for bit unless the original wrote it with a host NCCL reduction
//   (the shim's `reduce` lines: dtype and op as NCCL numbers them) whose dtype and op match a
//   reduction the conversion turned into device code (converted_reductions). Such a buffer is
//   read as elements of that dtype, and each element passes when
//       |converted - original| <= rel * |original| + rel * max|original over the buffer|
//       rel = k * P * eps(dtype),  k = 1 for sum and prod, (P + 1) / P for avg (one more rounding)
//   where P is the number of ranks and eps is 2^-52 (fp64), 2^-23 (fp32), 2^-10 (fp16), 2^-7
//   (bf16), 2^-3 (fp8 e4m3), 2^-2 (fp8 e5m2): every rank's contribution is one rounding, in an
//   order the device code may choose differently; the buffer-wide term covers sums that cancel.
//   Integer dtypes and min/max stay bit-exact (their results do not depend on the order).
//   NaN matches NaN.
//   A buffer the original itself writes differently from run to run is held to its own spread
//   instead (original_spread, below).
//   A table of device addresses (the shim's `addresses` lines) is compared by what each word
//   points to (the allocation's number and the offset), not by the addresses themselves, which
//   are the allocator's choice.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/transform.hpp"
#include "braid/util/json.hpp"

namespace braid::convert {

struct SnapshotBuffer {
  std::size_t index = 0;  // allocation order among the program's own allocations on this rank
  std::uint64_t bytes = 0;
  std::string allocator;  // cudaMalloc | cudaMallocManaged | cudaMallocAsync | ncclMemAlloc
  std::string state;      // freed | live-at-exit | unreadable | skipped
};

struct SnapshotReduction {
  std::size_t index = 0;    // the buffer written
  int dtype = -1, op = -1;  // ncclDataType_t, ncclRedOp_t
  std::string call;
};

struct RankSnapshot {
  int rank = 0;
  bool found = false;                   // the rank's folder and manifest exist
  bool ended = false;                   // the process reached exit()
  std::vector<SnapshotBuffer> buffers;  // by index
  std::vector<SnapshotReduction> reductions;
  std::set<std::size_t> address_tables;  // buffers of device addresses: <index>.addr, what each word points to
  std::vector<std::string> problems;     // manifest lines that could not be read
};

// One manifest (manifest.tsv's text); `found` is the caller's.
RankSnapshot parse_manifest(const std::string& text);
// <dir>/rank<r>/manifest.tsv; found = false when it is missing.
RankSnapshot read_rank_snapshot(const std::filesystem::path& dir, int rank);

// A reduction the conversion turned into device code; dtype/op nullopt when the source names
// them through a variable (then it matches any).
struct ConvertedReduction {
  std::string call;
  int line = 0;
  std::optional<int> dtype, op;
};
std::vector<ConvertedReduction> converted_reductions(const Analysis& analysis, const Conversion& conversion);
// Every reduction of the original: a whole program rewritten elsewhere (the LLM rewrite loop) may
// have moved any of them to device code.
std::vector<ConvertedReduction> all_reductions(const Analysis& analysis);
std::optional<int> nccl_dtype_number(const std::string& name);  // "ncclFloat32" -> 7
std::optional<int> nccl_op_number(const std::string& name);     // "ncclSum" -> 0

struct Tolerance {
  bool exact = true;
  int dtype = -1;           // the element type read when not exact
  std::size_t element = 1;  // its size
  double rel = 0.0;
  double abs = 0.0;  // added to every element's allowance (the original's own spread)
  std::string text;  // "bit-exact", "fp32 sum over 4 ranks: rel 4.8e-07 (+ rel * max|x|)"
};
Tolerance reduction_tolerance(int dtype, int op, int ranks);
// The tolerance of buffer `index`: the widest over its reductions that match a converted one. Over
// more than 2 ranks a converted floating reduction sums in another order than NCCL's, and its
// rounding reaches whatever the program computes from the result (an all-gather of reduced
// slices, an optimizer step, a double checksum of float fields): every buffer then gets the
// widest converted reduction's relative tolerance, read in its own reductions' type where it has
// some.
Tolerance buffer_tolerance(const RankSnapshot& original, std::size_t index,
                           const std::vector<ConvertedReduction>& converted, int ranks);

// The original run a second time, after the converted program differed from it: what the original
// itself does not reproduce (atomicAdd partial sums, timings, slots claimed in a race) is not the
// conversion's doing. A buffer that differs between the two runs of the original is held to the
// original's own spread: read as the element type of its reductions (else of the program's one
// floating reduction type), each converted element may differ from the first run by its usual
// allowance plus kSpreadFactor times the largest difference between the two runs. It is not
// compared, and the gate says so, when it has no element type to read it by, when the differences
// are not finite, or when they are beyond rounding (more than max(1e-3, 64 eps) of its largest
// value: a timing, a clock, a race's outcome is not a function of the program's inputs).
inline constexpr double kSpreadFactor = 10.0;
struct OriginalSpread {
  std::map<std::size_t, Tolerance> within;         // buffer index -> tolerance widened by the spread
  std::map<std::size_t, std::string> not_defined;  // buffer index -> why it is not compared
};
// `into` widened by `more` (the spread of another run): a buffer not defined in either is not
// defined; held to the wider of two spreads.
void merge_spread(OriginalSpread& into, const OriginalSpread& more);
OriginalSpread original_spread(const RankSnapshot& first, const std::filesystem::path& first_dir,
                               const RankSnapshot& again, const std::filesystem::path& again_dir,
                               const std::vector<ConvertedReduction>& converted, int ranks);

// "" when `converted` matches `original` within `t`, else the first difference.
std::string compare_bytes(const std::string& original, const std::string& converted, const Tolerance& t,
                          double* max_diff = nullptr);

struct BufferComparison {
  int rank = 0;
  std::size_t index = 0;
  std::uint64_t bytes = 0;
  std::string allocators;  // "cudaMalloc" or "cudaMalloc -> ncclMemAlloc"
  std::string state;       // the original's
  std::string tolerance;
  bool compared = false;  // contents were compared (both readable)
  bool match = false;
  double max_diff = 0.0;
  std::string detail;  // why not, or what was not compared
};

// Every buffer of one rank: counts, sizes and contents (files <dir>/<index>.bin of each side).
std::vector<BufferComparison> compare_rank(const RankSnapshot& original, const std::filesystem::path& original_dir,
                                           const RankSnapshot& converted, const std::filesystem::path& converted_dir,
                                           const std::vector<ConvertedReduction>& reductions, int ranks,
                                           const OriginalSpread* spread = nullptr);

// Numbers (integers, decimals, exponents) replaced by '#', for stdout lines that hold timings.
std::string mask_numbers(const std::string& line);
struct StdoutComparison {
  bool identical = false;
  bool identical_masked = false;  // equal once numbers are masked
  std::string first_difference;   // "line 3: `...` vs `...`"
};
StdoutComparison compare_stdout(const std::string& original, const std::string& converted);

json buffer_comparison_to_json(const BufferComparison& c);

}  // namespace braid::convert
