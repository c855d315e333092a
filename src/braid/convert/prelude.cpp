// The text that `braid convert` inserts after a program's includes: a generated preamble (the
// program's number of call sites), then device/include/braid/converted/prelude.cuh with its parts
// written out (stage A infrastructure and the stage B replacements built from braid's primitives,
// comm.cuh) and, for harness programs, prelude_harness.cuh. Both are embedded at build time
// (prelude_files.hpp), so the text is the headers' as nvcc compiles them in
// tests/convert/nvcc_compile_test.cpp.
#include <fmt/format.h>

#include "braid/convert/prelude_files.hpp"
#include "braid/convert/transform.hpp"
#include "braid/util/error.hpp"

namespace braid::convert {
namespace {

const std::string& embedded(const std::string& name) {
  for (const auto& [file, text] : converted_prelude_files())
    if (file == name) return text;
  throw SystemError("device/include/braid/converted/" + name + " was not embedded into this build");
}

}  // namespace

std::string converted_prelude(int call_sites, bool harness, RanksInProcess ranks) {
  // The headers read braid_converted::kCallSites, kOneThreadDrivesRanks and kRankPerThread: the
  // parts that vary with the program.
  const std::string preamble = fmt::format(
      "\nnamespace braid_converted {{ constexpr int kCallSites = {}; constexpr bool kOneThreadDrivesRanks = {}; "
      "constexpr bool kRankPerThread = {}; }}\n",
      call_sites < 1 ? 1 : call_sites, ranks == RanksInProcess::OneThreadDrivesAll ? "true" : "false",
      ranks == RanksInProcess::ThreadPerRank ? "true" : "false");
  // Only programs built on the harness know Context and Buffer.
  return preamble + "\n" + embedded("prelude.cuh") + (harness ? "\n" + embedded("prelude_harness.cuh") : "");
}

}  // namespace braid::convert
