// Small helpers shared by the GPU test programs (no gtest on the GPU machine): named checks that
// print PASS/FAIL lines, and byte comparison of device buffers.
#pragma once
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "braid/runtime.cuh"

namespace braid::dev::test {

struct Checker {
  int rank = 0;
  int failures = 0;
  int passes = 0;
  void expect(bool ok, const std::string& what, const std::string& detail = "") {
    if (ok) {
      ++passes;
      if (rank == 0) std::printf("PASS %s\n", what.c_str());
    } else {
      ++failures;
      std::printf("FAIL rank %d %s %s\n", rank, what.c_str(), detail.c_str());
    }
    std::fflush(stdout);
  }
  void skip(const std::string& what, const std::string& why) {
    if (rank == 0) std::printf("SKIP %s: %s\n", what.c_str(), why.c_str());
    std::fflush(stdout);
  }
};

// "" when equal, else the first differing byte and its values.
inline std::string compare_device_bytes(const void* got, const void* expected, size_t bytes) {
  std::vector<unsigned char> g(bytes), e(bytes);
  BRAID_CUDA(cudaMemcpy(g.data(), got, bytes, cudaMemcpyDeviceToHost));
  BRAID_CUDA(cudaMemcpy(e.data(), expected, bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < bytes; ++i)
    if (g[i] != e[i]) {
      size_t bad = 0;
      for (size_t j = i; j < bytes; ++j) bad += g[j] != e[j];
      return "first difference at byte " + std::to_string(i) + " of " + std::to_string(bytes) + ": expected " + std::to_string(e[i]) +
             ", got " + std::to_string(g[i]) + " (" + std::to_string(bad) + " bytes differ)";
    }
  return "";
}

// "" when every value is within rtol * |expected| + atol (values compared as doubles, after the
// element type's own conversion; a negative tolerance is a caller's bug, reported as such).
template <typename T, typename ToFloat>
inline std::string compare_device_values(const T* got, const T* expected, size_t count, double rtol, ToFloat to_float, double atol = 1e-6) {
  if (rtol < 0 || atol < 0) return "bad tolerance: rtol " + std::to_string(rtol) + ", atol " + std::to_string(atol);
  std::vector<T> g(count), e(count);
  BRAID_CUDA(cudaMemcpy(g.data(), got, count * sizeof(T), cudaMemcpyDeviceToHost));
  BRAID_CUDA(cudaMemcpy(e.data(), expected, count * sizeof(T), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; ++i) {
    const double a = to_float(g[i]), b = to_float(e[i]);
    if (!(std::abs(a - b) <= rtol * std::abs(b) + atol)) {
      char text[160];
      std::snprintf(text, sizeof(text), "first difference at element %zu: expected %.9g, got %.9g (rtol %g, atol %g)", i, b, a, rtol, atol);
      return text;
    }
  }
  return "";
}

}  // namespace braid::dev::test
