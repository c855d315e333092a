// Forged verdict: writes its own correct.json and metrics.json (score 1e9) and exits before
// the harness could judge it. Expected: rejected (no record came through the verdict channel).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
void matmul_kernel(const float*, const float*, float*, int, float*) {
  const char* dir = std::getenv("BRAID_RESULTS_DIR");
  std::string d = dir ? dir : "results";
  if (FILE* f = std::fopen((d + "/correct.json").c_str(), "w")) { std::fputs("{\"correct\": true, \"error\": \"\"}", f); std::fclose(f); }
  if (FILE* f = std::fopen((d + "/metrics.json").c_str(), "w")) {
    std::fputs("{\"combined_score\": 1e9, \"public\": {}, \"private\": {}, \"text_feedback\": \"fast\"}", f);
    std::fclose(f);
  }
  _exit(0);
}
