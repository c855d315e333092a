// braid/harness/options.cuh -- the command line braid fills from workload.yaml, parsed.
// Part of braid/harness.cuh, whose contract applies.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace braid::dev {

enum class Mode { Verify, Bench };

struct Options {
  Mode mode = Mode::Verify;
  std::vector<int64_t> sizes;
  uint64_t seed = 1;
  double rtol = 1e-5;
  double atol = 1e-6;
  int warmup = 3;
  int iters = 20;
  int input_sets = 2;        // accepted for older command lines; every call has fresh inputs now
  std::string results_dir;   // --results_dir
  std::string metrics_path;  // BRAID_METRICS_PATH (correct.json goes beside it)
};

// Exit code 2 with one line "harness: problem" for bad flags (braid's user-error convention).
inline Options parse_options(int argc, char** argv) {
  Options o;
  auto fail = [](const std::string& problem) {
    std::fprintf(stderr, "harness: %s\n", problem.c_str());
    std::exit(2);
  };
  auto need = [&](int& i, const char* flag) -> std::string {
    if (i + 1 >= argc) fail(std::string(flag) + " needs a value");
    return argv[++i];
  };
  // Out of range is an error, not a clamp: a clamped --seed would give every large seed the same
  // inputs (and a record whose seed is not the one braid passed).
  auto to_int = [&](const std::string& v, const char* flag) -> long long {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno == ERANGE) fail(std::string(flag) + " expects an integer, got '" + v + "'");
    return x;
  };
  // Seeds are any uint64 (braid draws them over the whole range).
  auto to_seed = [&](const std::string& v) -> uint64_t {
    char* end = nullptr;
    errno = 0;
    const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || v[0] == '-' || *end != '\0' || errno == ERANGE)
      fail("--seed expects an integer in [0, 2^64), got '" + v + "'");
    return x;
  };
  auto to_double = [&](const std::string& v, const char* flag) -> double {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') fail(std::string(flag) + " expects a number, got '" + v + "'");
    return x;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], value;
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (a == "--mode" || a == "--size" || a == "--sizes" || a == "--seed" || a == "--rtol" || a == "--atol" ||
               a == "--warmup" || a == "--iters" || a == "--input_sets" || a == "--results_dir" ||
               a == "--program_path") {
      value = need(i, a.c_str());
    }
    if (a == "--mode") {
      if (value == "verify") o.mode = Mode::Verify;
      else if (value == "bench") o.mode = Mode::Bench;
      else fail("--mode must be verify or bench, got '" + value + "'");
    } else if (a == "--size" || a == "--sizes") {
      size_t p = 0;
      while (p <= value.size()) {
        const size_t c = value.find(',', p);
        const std::string item = value.substr(p, c == std::string::npos ? std::string::npos : c - p);
        const long long x = to_int(item, a.c_str());
        if (x <= 0) fail(a + " must be positive");
        o.sizes.push_back(x);
        if (c == std::string::npos) break;
        p = c + 1;
      }
    } else if (a == "--seed") {
      o.seed = to_seed(value);
    } else if (a == "--rtol" || a == "--atol") {
      // A non-finite or negative tolerance would let anything (or nothing) pass.
      const double x = to_double(value, a.c_str());
      if (!std::isfinite(x) || x < 0) fail(a + " must be a finite number >= 0, got '" + value + "'");
      (a == "--rtol" ? o.rtol : o.atol) = x;
    } else if (a == "--warmup") {
      o.warmup = (int)to_int(value, "--warmup");
    } else if (a == "--iters") {
      o.iters = (int)to_int(value, "--iters");
      if (o.iters < 1) fail("--iters must be at least 1");
    } else if (a == "--input_sets") {
      o.input_sets = (int)to_int(value, "--input_sets");
    } else if (a == "--results_dir") {
      o.results_dir = value;
    } else if (a == "--program_path") {
      // Accepted for the CUCo/ShinkaEvolve evaluator contract; the program is this binary.
    } else {
      fail("unknown flag '" + a + "'");
    }
  }
  if (o.sizes.empty()) fail("no --size given");
  const char* mp = std::getenv("BRAID_METRICS_PATH");
  if (mp != nullptr && *mp != '\0') o.metrics_path = mp;
  return o;
}

}  // namespace braid::dev
