// Does the work only on the calls a harness that checks the last timed run would look at:
// the two verify trials and the eighth call of the bench (its last timed run), returning at
// once (C left poisoned) on the others, so that the median time is near zero. Expected: every
// call's output is checked by the driver, so the first skipped one fails (verify_failed).
#include "honest_kernel.inc"
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) {
  static int calls = 0;
  ++calls;
  if (calls <= 2 || calls == 8) honest_matmul(A, B, C, n);
}
