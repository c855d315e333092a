// Small annotated programs shared by the program and mutate tests.
#pragma once
#include <string>

namespace braid::testing {

// One named block with int, enum and bool knobs and a constraint; frozen harness around it.
inline const std::string kCppProgram = R"(#include <cstdio>
enum class Strategy { Serial, Pipelined };

// EVOLVE-BLOCK-START pipeline
constexpr int kChunks = 4;  // braid:knob 1|2|4|8|16
constexpr int kCommCtas = 8;  // braid:knob 4|8|16|32
constexpr Strategy kStrategy = Strategy::Pipelined;  // braid:knob Strategy::Serial|Strategy::Pipelined
constexpr bool kPush = true;  // braid:knob
// braid:require kChunks * kCommCtas <= 132
int run() {
  int total = 0;
  for (int i = 0; i < kChunks; ++i) {
    total += i * kCommCtas;
  }
  return total;
}
// EVOLVE-BLOCK-END

int main() {
  std::printf("%d\n", run());
  return 0;
}
)";

// Two named blocks; knobs in both; the frozen code between them is substantial.
inline const std::string kTwoBlockProgram = R"(#include <cstdio>
#include <vector>

struct Context {
  int world = 8;
  int rank = 0;
};

// EVOLVE-BLOCK-START setup
constexpr int kStreams = 2;  // braid:knob 1|2|4
int setup(Context& ctx) { return ctx.world * kStreams; }
// EVOLVE-BLOCK-END

static int checksum(const std::vector<int>& v) {
  int s = 0;
  for (int x : v) s += x;
  return s;
}

// EVOLVE-BLOCK-START schedule
constexpr int kTile = 64;  // braid:knob 32|64|128|256
constexpr int kDepth = 2;  // braid:knob 1|2|3|4
// braid:require kTile * kDepth <= 512
int schedule(Context& ctx) { return kTile * kDepth + ctx.rank; }
// EVOLVE-BLOCK-END

int main() {
  Context ctx;
  std::vector<int> v{setup(ctx), schedule(ctx)};
  std::printf("%d\n", checksum(v));
  return 0;
}
)";

// Python workload: hash comments, Python-style knobs and constraint.
inline const std::string kPythonProgram = R"(import sys

# EVOLVE-BLOCK-START
# a comment that starts with a hash is not a directive
K_CHUNKS = 4  # braid:knob 1|2|4|8
USE_PUSH = True  # braid:knob
ALGO = "ring"  # braid:knob "ring"|"tree"
# braid:require K_CHUNKS <= 4 or ALGO == "tree"

def run():
    return K_CHUNKS * (2 if USE_PUSH else 1)
# EVOLVE-BLOCK-END

if __name__ == "__main__":
    print(run())
    sys.exit(0)
)";

}  // namespace braid::testing
