#include "braid/convert/snapshot_compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "braid/util/fs.hpp"

namespace braid::convert {
namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(text);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

bool parse_size(const std::string& s, std::uint64_t* v) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), ::isdigit)) return false;
  *v = std::stoull(s);
  return true;
}

bool parse_int(const std::string& s, int* v) {
  if (s.empty() || !std::all_of(s.begin() + (s[0] == '-' ? 1 : 0), s.end(), ::isdigit) || s == "-") return false;
  *v = std::stoi(s);
  return true;
}

// ncclDataType_t as nccl.h 2.28 numbers it: element sizes, rounding units (0: an integer type).
struct DtypeFacts {
  const char* name;
  std::size_t size;
  double eps;
};
const DtypeFacts kDtypes[] = {{"int8", 1, 0},       {"uint8", 1, 0},        {"int32", 4, 0},
                              {"uint32", 4, 0},     {"int64", 8, 0},        {"uint64", 8, 0},
                              {"fp16", 2, 0x1p-10}, {"fp32", 4, 0x1p-23},   {"fp64", 8, 0x1p-52},
                              {"bf16", 2, 0x1p-7},  {"fp8e4m3", 1, 0x1p-3}, {"fp8e5m2", 1, 0x1p-2}};
const char* const kOps[] = {"sum", "prod", "max", "min", "avg"};

double half_to_double(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v = exp == 0 ? std::ldexp(man, -24) : exp == 31 ? (man ? NAN : INFINITY) : std::ldexp(1024 + man, exp - 25);
  return sign ? -v : v;
}
double bf16_to_double(std::uint16_t b) {
  const std::uint32_t u = (std::uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
double fp8_to_double(std::uint8_t v, bool e4m3) {
  const int sign = v >> 7;
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int exp = (v & 0x7f) >> mbits, man = v & ((1 << mbits) - 1);
  double r;
  if (e4m3 && exp == 15 && man == 7) r = NAN;
  else if (!e4m3 && exp == 31) r = man ? NAN : INFINITY;
  else r = exp == 0 ? std::ldexp(man, 1 - bias - mbits) : std::ldexp((1 << mbits) + man, exp - bias - mbits);
  return sign ? -r : r;
}

// Element i of a float buffer of NCCL dtype `dtype`, as a double.
double element(const std::string& bytes, std::size_t i, int dtype) {
  const char* p = bytes.data() + i * kDtypes[dtype].size;
  switch (dtype) {
    case 6: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return half_to_double(h);
    }
    case 7: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case 8: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case 9: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_double(h);
    }
    default: return fp8_to_double((std::uint8_t)*p, dtype == 10);
  }
}

bool floating(int dtype) { return dtype >= 0 && dtype < (int)std::size(kDtypes) && kDtypes[dtype].eps > 0; }

// max |x| over the finite elements of a buffer read as `dtype`: the scale of its differences.
double largest_magnitude(const std::string& bytes, int dtype) {
  double scale = 0.0;
  for (std::size_t i = 0; i < bytes.size() / kDtypes[dtype].size; ++i)
    if (const double x = element(bytes, i, dtype); std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  return scale;
}

std::string compare_exact(const std::string& a, const std::string& b) {
  const auto diff = std::mismatch(a.begin(), a.end(), b.begin());
  if (diff.first == a.end()) return "";
  const std::size_t at = (std::size_t)(diff.first - a.begin());
  return fmt::format("byte {}: original 0x{:02x} converted 0x{:02x}", at, (unsigned char)a[at], (unsigned char)b[at]);
}

}  // namespace

RankSnapshot parse_manifest(const std::string& text) {
  RankSnapshot s;
  std::map<std::size_t, SnapshotBuffer> buffers;
  int n = 0;
  for (const std::string& line : split(text, '\n')) {
    ++n;
    if (line.empty()) continue;
    const auto f = split(line, '\t');
    std::uint64_t index = 0, bytes = 0;
    if (f[0] == "end" && f.size() == 1) {
      s.ended = true;
    } else if (f[0] == "buffer" && f.size() == 5 && parse_size(f[1], &index) && parse_size(f[2], &bytes)) {
      buffers[index] = SnapshotBuffer{index, bytes, f[3], f[4]};
    } else if (SnapshotReduction r; f[0] == "reduce" && f.size() == 5 && parse_size(f[1], &index) &&
                                    parse_int(f[2], &r.dtype) && parse_int(f[3], &r.op)) {
      r.index = index;
      r.call = f[4];
      s.reductions.push_back(r);
    } else if (f[0] == "addresses" && f.size() == 2 && parse_size(f[1], &index)) {
      s.address_tables.insert(index);
    } else {
      s.problems.push_back(fmt::format("manifest line {}: `{}`", n, line));
    }
  }
  for (auto& [index, b] : buffers) s.buffers.push_back(b);
  return s;
}

RankSnapshot read_rank_snapshot(const std::filesystem::path& dir, int rank) {
  const auto text = try_read_file(dir / fmt::format("rank{}", rank) / "manifest.tsv");
  RankSnapshot s = text ? parse_manifest(*text) : RankSnapshot{};
  s.rank = rank;
  s.found = text.has_value();
  return s;
}

std::optional<int> nccl_dtype_number(const std::string& name) {
  static const std::map<std::string, int> names = {
      {"ncclInt8", 0},        {"ncclChar", 0},       {"ncclUint8", 1},   {"ncclInt32", 2},   {"ncclInt", 2},
      {"ncclUint32", 3},      {"ncclInt64", 4},      {"ncclUint64", 5},  {"ncclFloat16", 6}, {"ncclHalf", 6},
      {"ncclFloat32", 7},     {"ncclFloat", 7},      {"ncclFloat64", 8}, {"ncclDouble", 8},  {"ncclBfloat16", 9},
      {"ncclFloat8e4m3", 10}, {"ncclFloat8e5m2", 11}};
  const auto it = names.find(name);
  return it == names.end() ? std::nullopt : std::optional<int>(it->second);
}

std::optional<int> nccl_op_number(const std::string& name) {
  static const std::map<std::string, int> names = {
      {"ncclSum", 0}, {"ncclProd", 1}, {"ncclMax", 2}, {"ncclMin", 3}, {"ncclAvg", 4}};
  const auto it = names.find(name);
  return it == names.end() ? std::nullopt : std::optional<int>(it->second);
}

namespace {

// The reductions of `a`, those for which `keep(call)` holds.
template <typename Keep>
std::vector<ConvertedReduction> reductions_where(const Analysis& a, Keep keep) {
  std::vector<ConvertedReduction> out;
  for (const Call& c : a.calls) {
    const NcclSignature* sig = c.kind == CallKind::Nccl ? nccl_signature(c.name) : nullptr;
    if (sig == nullptr || sig->op < 0 || (int)c.args.size() <= std::max(sig->op, sig->dtype) || !keep(c)) continue;
    out.push_back({c.name, c.line, nccl_dtype_number(c.args[(std::size_t)sig->dtype].text),
                   nccl_op_number(c.args[(std::size_t)sig->op].text)});
  }
  return out;
}

}  // namespace

std::vector<ConvertedReduction> converted_reductions(const Analysis& a, const Conversion& conv) {
  return reductions_where(a, [&](const Call& c) {
    return std::any_of(conv.changes.begin(), conv.changes.end(),
                       [&](const Change& ch) { return ch.stage == "B" && ch.line == c.line; });
  });
}

std::vector<ConvertedReduction> all_reductions(const Analysis& a) {
  return reductions_where(a, [](const Call&) { return true; });
}

Tolerance reduction_tolerance(int dtype, int op, int ranks) {
  Tolerance t;
  t.text = "bit-exact";
  if (!floating(dtype) || op < 0 || op > 4 || op == 2 || op == 3) return t;
  const int p = std::max(ranks, 1);
  t.exact = false;
  t.dtype = dtype;
  t.element = kDtypes[dtype].size;
  t.rel = (op == 4 ? p + 1 : p) * kDtypes[dtype].eps;
  t.text =
      fmt::format("{} {} over {} ranks: rel {:.3g} (+ rel * max|original|)", kDtypes[dtype].name, kOps[op], p, t.rel);
  return t;
}

Tolerance buffer_tolerance(const RankSnapshot& original, std::size_t index,
                           const std::vector<ConvertedReduction>& converted, int ranks) {
  const auto is_converted = [&](const SnapshotReduction& r) {
    return std::any_of(converted.begin(), converted.end(), [&](const ConvertedReduction& c) {
      return (!c.dtype || *c.dtype == r.dtype) && (!c.op || *c.op == r.op);
    });
  };
  Tolerance widest = reduction_tolerance(-1, -1, ranks);
  const auto widen = [&](int dtype, int op) {
    const Tolerance t = reduction_tolerance(dtype, op, ranks);
    if (!t.exact && (widest.exact || t.rel > widest.rel)) widest = t;
  };
  std::optional<int> own_dtype;
  for (const SnapshotReduction& r : original.reductions) {
    if (r.index != index) continue;
    if (!own_dtype) own_dtype = r.dtype;
    if (is_converted(r)) widen(r.dtype, r.op);
  }
  if (ranks <= 2) return widest;  // two operands sum the same in either order
  // Downstream, the error is the upstream reduction's: a float sum feeding a double checksum moves
  // it by float's units. Read in the buffer's own type, allowed the coarsest converted rounding.
  Tolerance down = reduction_tolerance(-1, -1, ranks);
  for (const SnapshotReduction& r : original.reductions) {
    const Tolerance upstream = reduction_tolerance(r.dtype, r.op, ranks);
    if (!is_converted(r) || upstream.exact || (!down.exact && upstream.rel <= down.rel)) continue;
    Tolerance t = reduction_tolerance(own_dtype.value_or(r.dtype), r.op, ranks);
    if (t.exact) continue;  // an integer buffer stays bit-exact
    t.rel = std::max(t.rel, upstream.rel);
    t.text = "downstream of a converted reduction (its rounding reaches what is computed from it): " + upstream.text +
             (t.dtype == upstream.dtype ? "" : fmt::format(", read as {}", kDtypes[t.dtype].name));
    down = t;
  }
  return !down.exact && (widest.exact || down.rel > widest.rel) ? down : widest;
}

std::string compare_bytes(const std::string& a, const std::string& b, const Tolerance& t, double* max_diff) {
  if (max_diff) *max_diff = 0.0;
  if (a.size() != b.size()) return fmt::format("sizes differ ({} vs {} bytes)", a.size(), b.size());
  if (t.exact || a.size() % t.element != 0) return compare_exact(a, b);
  const std::size_t n = a.size() / t.element;
  const double scale = largest_magnitude(a, t.dtype);
  std::string first;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = element(a, i, t.dtype), y = element(b, i, t.dtype);
    if ((std::isnan(x) && std::isnan(y)) || x == y) continue;
    const double d = std::fabs(x - y);
    if (max_diff && !std::isnan(d)) *max_diff = std::max(*max_diff, d);
    const double allowed = t.rel * (std::fabs(x) + scale) + t.abs;
    if (!(d <= allowed) && first.empty())
      first = fmt::format("element {}: original {} converted {} (allowed {:.3g})", i, x, y, allowed);
  }
  return first;
}

namespace {

bool readable_state(const std::string& state) { return state == "freed" || state == "live-at-exit"; }

std::optional<std::string> snapshot_bytes(const std::filesystem::path& dir, std::size_t index) {
  return try_read_file(dir / fmt::format("{}.bin", index));
}

// What each word of an address table points to, one line per word (the shim's <index>.addr):
// "" when it is the same on both sides, else the first word that differs.
std::string compare_address_tables(const RankSnapshot& o, const std::filesystem::path& odir, const RankSnapshot& c,
                                   const std::filesystem::path& cdir, std::size_t index) {
  const auto words = [&](const RankSnapshot& s, const std::filesystem::path& dir) -> std::vector<std::string> {
    if (!s.address_tables.count(index)) return {};
    const auto text = try_read_file(dir / fmt::format("{}.addr", index));
    return text ? split(*text, '\n') : std::vector<std::string>{};
  };
  const auto a = words(o, odir), b = words(c, cdir);
  if (a.empty() || b.empty())
    return fmt::format("device addresses in the {} only", a.empty() ? "converted program" : "original");
  const auto point = [](const std::string& w) {
    return w == "-" ? std::string("null") : w[0] == '#' ? "buffer " + w : "device memory of no buffer of its own";
  };
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i)
    if (i >= a.size() || i >= b.size() || a[i] != b[i])
      return fmt::format("word {}: the original points to {}, the converted program to {}", i,
                         i < a.size() ? point(a[i]) : "nothing", i < b.size() ? point(b[i]) : "nothing");
  return "";
}

// Rounding in another order moves a value by a few units of its last place, a little more after
// many iterations; two runs of the original further apart than this (relative to the buffer's
// largest value) computed something other than a function of the inputs.
double not_a_function_of_inputs(int dtype) { return std::max(1e-3, 64 * kDtypes[dtype].eps); }

// The element type of a buffer with no reduction of its own: the program's one floating reduction
// type (recorded by the shim on any buffer, else named by a converted call); -1 when none or several.
int program_float_dtype(const RankSnapshot& run, const std::vector<ConvertedReduction>& converted) {
  std::set<int> seen;
  for (const SnapshotReduction& r : run.reductions)
    if (floating(r.dtype)) seen.insert(r.dtype);
  if (seen.empty())
    for (const ConvertedReduction& c : converted)
      if (c.dtype && floating(*c.dtype)) seen.insert(*c.dtype);
  return seen.size() == 1 ? *seen.begin() : -1;
}

// One buffer present on both sides: sizes, readability, then contents within the tolerance.
// `not_defined`: why the contents are not compared (the original does not define them); sizes and
// readability still are, and the files are not read.
BufferComparison compare_pair(const RankSnapshot& os, const SnapshotBuffer& o, const std::filesystem::path& odir,
                              const RankSnapshot& cs, const SnapshotBuffer& c, const std::filesystem::path& cdir,
                              const Tolerance& t, const std::string* not_defined = nullptr) {
  BufferComparison r;
  r.index = o.index;
  r.bytes = o.bytes;
  r.allocators = o.allocator == c.allocator ? o.allocator : o.allocator + " -> " + c.allocator;
  r.state = o.state == c.state ? o.state : o.state + " -> " + c.state;
  r.tolerance = t.text;
  if (o.bytes != c.bytes) {
    r.detail = fmt::format("sizes differ: original {} bytes, converted {}", o.bytes, c.bytes);
    return r;
  }
  if (!readable_state(o.state) || !readable_state(c.state)) {
    // What the original could not show cannot be checked; a converted buffer that became
    // unreadable where the original's was not is a difference.
    r.match = !readable_state(o.state) || c.state == "skipped";
    r.detail = fmt::format("not compared: original {}, converted {}", o.state, c.state);
    return r;
  }
  if (not_defined) {
    r.match = true;
    r.detail = "not compared: " + *not_defined;
    return r;
  }
  if (os.address_tables.count(o.index) || cs.address_tables.count(c.index)) {
    r.compared = true;
    r.tolerance = "device addresses: by the buffer and offset each word points to";
    r.detail = compare_address_tables(os, odir, cs, cdir, o.index);
    r.match = r.detail.empty();
    return r;
  }
  const auto a = snapshot_bytes(odir, o.index);
  const auto b = snapshot_bytes(cdir, c.index);
  if (!a || !b) {
    r.detail = fmt::format("snapshot file {}.bin missing on the {} side", o.index, !a ? "original" : "converted");
    return r;
  }
  r.compared = true;
  r.detail = compare_bytes(*a, *b, t, &r.max_diff);
  r.match = r.detail.empty();
  return r;
}

}  // namespace

void merge_spread(OriginalSpread& into, const OriginalSpread& more) {
  for (const auto& [index, why] : more.not_defined) {
    into.not_defined.emplace(index, why);
    into.within.erase(index);
  }
  for (const auto& [index, t] : more.within) {
    if (into.not_defined.count(index)) continue;
    auto it = into.within.find(index);
    if (it == into.within.end() || t.abs > it->second.abs) into.within[index] = t;
  }
}

OriginalSpread original_spread(const RankSnapshot& first, const std::filesystem::path& first_dir,
                               const RankSnapshot& again, const std::filesystem::path& again_dir,
                               const std::vector<ConvertedReduction>& converted, int ranks) {
  OriginalSpread out;
  const int program_dtype = program_float_dtype(first, converted);
  for (const SnapshotBuffer& b : first.buffers) {
    const auto twin = std::find_if(again.buffers.begin(), again.buffers.end(),
                                   [&](const SnapshotBuffer& a) { return a.index == b.index; });
    // A buffer the second run lacks, or sized or kept differently, is compared as before.
    if (twin == again.buffers.end() || twin->bytes != b.bytes || !readable_state(b.state) ||
        !readable_state(twin->state))
      continue;
    if (first.address_tables.count(b.index) || again.address_tables.count(b.index)) {
      if (const std::string d = compare_address_tables(first, first_dir, again, again_dir, b.index); !d.empty())
        out.not_defined[b.index] = "the original's addresses point elsewhere from run to run (" + d + ")";
      continue;
    }
    const auto x = snapshot_bytes(first_dir, b.index), y = snapshot_bytes(again_dir, b.index);
    if (!x || !y || *x == *y) continue;
    Tolerance t = buffer_tolerance(first, b.index, converted, ranks);
    if (t.exact && (program_dtype < 0 || b.bytes % kDtypes[program_dtype].size != 0)) {
      out.not_defined[b.index] =
          "the original writes it differently from run to run, and it has no floating element "
          "type to compare it by";
      continue;
    }
    if (t.exact) t = reduction_tolerance(program_dtype, 0, ranks);  // read as the program's floating type
    const double scale = largest_magnitude(*x, t.dtype);
    double spread = 0.0;
    bool finite = true;
    for (std::size_t i = 0; i < x->size() / t.element; ++i) {
      const double u = element(*x, i, t.dtype), v = element(*y, i, t.dtype);
      if (u == v || (std::isnan(u) && std::isnan(v))) continue;
      const double d = std::fabs(u - v);
      if (std::isfinite(d)) spread = std::max(spread, d);
      else finite = false;
    }
    if (!finite) {
      out.not_defined[b.index] = "the original writes it differently from run to run, with non-finite differences";
      continue;
    }
    if (spread > not_a_function_of_inputs(t.dtype) * scale) {
      out.not_defined[b.index] = fmt::format(
          "the original's two runs differ by up to {:.3g} ({:.2g} of its largest value): not a function of the "
          "program's inputs alone (a timing, a clock, a race's outcome, or the order NCCL sums in)",
          spread, scale > 0 ? spread / scale : 0.0);
      continue;
    }
    t.abs = kSpreadFactor * spread;
    t.text += fmt::format("; the original differs from itself by up to {:.3g} between two runs (+ {:g} x that)", spread,
                          kSpreadFactor);
    out.within[b.index] = t;
  }
  return out;
}

std::vector<BufferComparison> compare_rank(const RankSnapshot& original, const std::filesystem::path& odir,
                                           const RankSnapshot& converted, const std::filesystem::path& cdir,
                                           const std::vector<ConvertedReduction>& reductions, int ranks,
                                           const OriginalSpread* spread) {
  std::vector<BufferComparison> out;
  const std::size_t n = std::max(original.buffers.size(), converted.buffers.size());
  for (std::size_t i = 0; i < n; ++i) {
    const SnapshotBuffer* o = i < original.buffers.size() ? &original.buffers[i] : nullptr;
    const SnapshotBuffer* c = i < converted.buffers.size() ? &converted.buffers[i] : nullptr;
    BufferComparison r;
    if (o && c && o->index == c->index && spread && spread->not_defined.count(o->index)) {
      r = compare_pair(original, *o, odir, converted, *c, cdir, reduction_tolerance(-1, -1, ranks),
                       &spread->not_defined.at(o->index));
    } else if (o && c && o->index == c->index) {
      const bool widened = spread && spread->within.count(o->index);
      r = compare_pair(original, *o, odir, converted, *c, cdir,
                       widened ? spread->within.at(o->index) : buffer_tolerance(original, o->index, reductions, ranks));
    } else {
      const SnapshotBuffer& only = o ? *o : *c;
      r.index = only.index;
      r.bytes = only.bytes;
      r.allocators = only.allocator;
      r.state = only.state;
      r.detail = o && c ? fmt::format("allocation order differs: original #{}, converted #{}", o->index, c->index)
                        : fmt::format("allocation #{} ({} bytes) only in the {}", only.index, only.bytes,
                                      o ? "original" : "converted");
    }
    r.rank = original.rank;
    out.push_back(r);
  }
  return out;
}

std::string mask_numbers(const std::string& line) {
  static const std::regex number(R"([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)");
  return std::regex_replace(line, number, "#");
}

StdoutComparison compare_stdout(const std::string& original, const std::string& converted) {
  StdoutComparison c;
  c.identical = original == converted;
  const auto a = split(original, '\n'), b = split(converted, '\n');
  c.identical_masked = a.size() == b.size();
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "", y = i < b.size() ? b[i] : "";
    if (x == y) continue;
    if (c.first_difference.empty()) c.first_difference = fmt::format("line {}: `{}` vs `{}`", i + 1, x, y);
    if (mask_numbers(x) != mask_numbers(y)) c.identical_masked = false;
  }
  if (a.size() != b.size() && c.first_difference.empty())
    c.first_difference = fmt::format("{} lines vs {}", a.size(), b.size());
  return c;
}

json buffer_comparison_to_json(const BufferComparison& c) {
  json j{{"rank", c.rank},   {"index", c.index},         {"bytes", c.bytes},       {"allocator", c.allocators},
         {"state", c.state}, {"tolerance", c.tolerance}, {"compared", c.compared}, {"match", c.match}};
  if (c.max_diff > 0) j["max_abs_diff"] = c.max_diff;
  if (!c.detail.empty()) j["detail"] = c.detail;
  return j;
}

}  // namespace braid::convert
