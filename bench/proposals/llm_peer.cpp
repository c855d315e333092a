// bench_llm_peer: the loopback LLM server of tests/llm as a stand-alone peer for benchmarks. Every
// mutation answer comes after a latency drawn uniformly from [mean - spread, mean + spread]
// seconds; other requests (feedback, meta) are answered at once. Prints its base URL, then
// serves until killed (or stdin closes).
//   bench_llm_peer <mean_s> <spread_s> [seed [sampling [focus_follow]]]   (sampling 1: answers vary
//   like a model's at temperature > 0; 0, the default: the prompt alone picks the edit;
//   focus_follow: the share of answers, 0..1, that keep to the prompt's "choose from" list of
//   one-knob changes, default 1)
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "loopback_llm_server.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_llm_peer <mean_s> <spread_s> [seed [sampling [focus_follow]]]\n");
    return 2;
  }
  char* end = nullptr;
  const double mean = std::strtod(argv[1], &end);
  if (*end != '\0' || mean < 0) {
    std::fprintf(stderr, "bench_llm_peer: mean_s: expected seconds >= 0, got '%s'\n", argv[1]);
    return 2;
  }
  const double spread = std::strtod(argv[2], &end);
  if (*end != '\0' || spread < 0 || spread > mean) {
    std::fprintf(stderr, "bench_llm_peer: spread_s: expected seconds in [0, mean_s], got '%s'\n", argv[2]);
    return 2;
  }
  std::mt19937_64 rng(argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1);
  const bool sampling = argc > 4 && std::string(argv[4]) != "0";
  const double focus_follow = argc > 5 ? std::strtod(argv[5], &end) : 1.0;
  if (argc > 5 && (*end != '\0' || focus_follow < 0 || focus_follow > 1)) {
    std::fprintf(stderr, "bench_llm_peer: focus_follow: expected a share in [0, 1], got '%s'\n", argv[5]);
    return 2;
  }
  std::mutex rng_mu;
  std::atomic<int> in_flight{0}, most{0};
  braid::testing::LoopbackLlmServer server;
  server.set_focus_follow(focus_follow);
  server.set_responder([&](const std::string&, const std::vector<std::pair<std::string, std::string>>& m)
                           -> std::optional<std::string> {
    if (m.empty() || m.front().second.find("EVOLVE-BLOCK") == std::string::npos) return std::nullopt;
    double s;
    {
      std::lock_guard lock(rng_mu);
      s = std::uniform_real_distribution<double>(mean - spread, mean + spread)(rng);
    }
    int n = ++in_flight;
    for (int seen = most.load(); n > seen && !most.compare_exchange_weak(seen, n);) {
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(s));
    --in_flight;
    return std::nullopt;  // the server's prompt-driven edit, after the latency
  });
  // Answers sampled from the seed's stream, as a model at temperature > 0 (with sampling 0: the
  // prompt alone picks the edit, so a prompt asked again gets the same, rejected, edit).
  if (sampling) {
    server.set_sampling([&] {
      std::lock_guard lock(rng_mu);
      return rng();
    });
  }
  std::cout << server.base_url() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  std::fprintf(stderr, "bench_llm_peer: %zu requests, at most %d mutation answers at once\n", server.request_count(),
               most.load());
  return 0;
}
