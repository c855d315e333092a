// GPU check of the annotator's knobs (run by tests/convert/annotate_gate_test.sh): every program
// given is converted and annotated by rules, then gen0 and knob settings that take other code
// paths of the prelude (thread and warp issuers, few and many CTAs, small and large chunks) each
// pass the verification gate against the original on 2 local ranks, or BRAID_GATE_RANKS (every
// rank's outputs compared). Prints one line per (program, setting) with the gate's times.
// Usage: annotate_gate_driver <work dir> <program.cu>...   Exit 0 when every gate passes.
#include <cstdio>
#include <filesystem>

#include "braid/convert/annotate.hpp"
#include "braid/convert/gate.hpp"
#include "braid/convert/transform.hpp"
#include "braid/program/program.hpp"
#include "braid/util/fs.hpp"
#include "gate_ranks.hpp"

using namespace braid::convert;

namespace {

struct Setting {
  const char* name;
  const char* issuer;
  const char* ctas;
  const char* chunk;
};

const Setting kSettings[] = {
    {"gen0", "braid::dev::Issuer::Cta", "0", "0"},
    {"thread-132ctas-16KiB", "braid::dev::Issuer::Thread", "132", "16384"},
    {"warp-8ctas-1MiB", "braid::dev::Issuer::Warp", "8", "1048576"},
    {"cta-16ctas-64KiB", "braid::dev::Issuer::Cta", "16", "65536"},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <work dir> <program.cu>...\n", argv[0]);
    return 2;
  }
  const std::filesystem::path work = argv[1];
  const int ranks = braid::testing::gate_ranks_from_env();
  int failures = 0;
  for (int i = 2; i < argc; ++i) {
    const std::filesystem::path path = argv[i];
    const std::string name = path.stem().string() == "seed" ? path.parent_path().filename().string() : path.stem().string();
    const std::string source = braid::read_file(path);
    const Analysis analysis = analyze(path.filename().string(), source);
    const Conversion rules = transform(analysis, source);
    const AnnotatedProgram annotated = annotate_rules(name, rules.source);
    const braid::Program gen0 = braid::Program::parse(annotated.source, name);
    for (const Setting& s : kSettings) {
      std::map<std::string, std::string> values;
      for (const AnnotatedSite& site : annotated.sites) {
        values[site.knobs[0]] = s.issuer;
        values[site.knobs[1]] = s.ctas;
        values[site.knobs[2]] = s.chunk;
      }
      const braid::EditResult variant = braid::with_knobs(gen0, values);
      if (!variant.ok()) {
        std::printf("FAIL %-24s %-22s knobs: %s\n", name.c_str(), s.name, variant.error.c_str());
        ++failures;
        continue;
      }
      GateOptions g;
      g.ranks = ranks;
      g.work_dir = work / name;  // one build cache per program: the original compiles once
      g.source_dir = std::filesystem::absolute(path).parent_path();
      const GateResult r = run_gate_on_candidate(analysis, source, analyze_converted(path.filename().string(), variant.text), variant.text, g);
      if (r.passed) {
        std::printf("PASS %-24s %-22s original %8.3f ms  annotated %8.3f ms\n", name.c_str(), s.name, r.original_ms, r.converted_ms);
      } else {
        std::printf("FAIL %-24s %-22s %s\n", name.c_str(), s.name, r.failure.c_str());
        ++failures;
      }
      std::fflush(stdout);
    }
  }
  return failures == 0 ? 0 : 1;
}
