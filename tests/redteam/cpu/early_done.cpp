// Answers before it has finished: each call starts a thread that computes C row by row and
// returns at once, so the worker replies "done" while the output is still being written (a
// time near zero if the late rows were not looked at). Expected: the driver copies C out at
// the answer and checks every element, so the step fails (verify_failed).
#include <thread>
#include "honest_kernel.inc"
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) {
  static std::thread late;
  if (late.joinable()) late.join();
  late = std::thread([=] {
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int k = 0; k < n; ++k) acc += A[i * n + k] * B[k * n + j];
        C[i * n + j] = acc;
      }
  });
}
