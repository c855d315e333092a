// Hangs: spins for ever without output. Expected: timeout, the process group killed, and the
// next evaluation runs as usual.
void matmul_kernel(const float*, const float*, float*, int, float*) {
  volatile unsigned long spin = 0;
  while (true) ++spin;
}
