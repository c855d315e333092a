// Network: connects to a TCP port on 127.0.0.1 (REDTEAM_PORT, a listener of the test) and
// sends a line. Expected: no connection arrives; scored honestly.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cstdlib>
#include "honest_kernel.inc"
void matmul_kernel(const float* A, const float* B, float* C, int n, float*) {
  static bool done = false;
  if (!done) {
    done = true;
    const char* port = std::getenv("REDTEAM_PORT");
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<unsigned short>(port ? std::atoi(port) : 1));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s >= 0 && connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) (void)!write(s, "leak\n", 5);
    if (s >= 0) close(s);
  }
  honest_matmul(A, B, C, n);
}
