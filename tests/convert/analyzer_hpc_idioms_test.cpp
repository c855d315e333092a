// The analyzer and the rules on idioms of HPC programs (MPI plus NCCL, C-style code): arrays of
// structs handed to helpers by element pointer, per-stream buffers in malloc'd pointer arrays.
#include <gtest/gtest.h>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/transform.hpp"

using namespace braid::convert;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const Call& first_call(const Analysis& a, const std::string& name) {
  for (const Call& c : a.calls)
    if (c.name == name) return c;
  throw std::runtime_error("no call " + name);
}

const std::string kPrologue =
    "#include <nccl.h>\n"
    "#include <cuda_runtime.h>\n"
    "struct field { float* d; float* slice; size_t n; };\n"
    "struct field fields[4];\n"
    "ncclComm_t comm;\n"
    "cudaStream_t s;\n";

}  // namespace

// A pointer to one element of an array of structs (`&fields[f]`, `fields + f`), given to a helper
// or bound to a local, is that element: `fl->d` is `fields[].d`, the field allocated in the loop
// (before, `fields.d`, no allocation: host NCCL).
TEST(AnalyzerHpcIdioms, AnElementPointerOfAnArrayOfStructsNamesTheElementsField) {
  for (const std::string arg : {"&fields[f]", "fields + f"}) {
    const std::string src = kPrologue +
                            "int sum(struct field* fl) {\n"
                            "  return (int)ncclAllReduce(fl->d, fl->d, fl->n, ncclFloat, ncclSum, comm, s);\n"
                            "}\n"
                            "int main() {\n"
                            "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
                            "  for (int f = 0; f < 4; f++) cudaMalloc((void**)&fields[f].d, 4096);\n"
                            "  for (int f = 0; f < 4; f++) sum(" +
                            arg +
                            ");\n"
                            "  for (int f = 0; f < 4; f++) { struct field* fl = " +
                            arg +
                            "; ncclBroadcast(fl->d, fl->d, 1024, ncclFloat, 0, comm, s); }\n"
                            "}\n";
    const Analysis a = analyze("hpc.cu", src);
    for (const char* name : {"ncclAllReduce", "ncclBroadcast"}) {
      const Call& c = first_call(a, name);
      EXPECT_EQ(c.unresolved, "") << arg << ": " << name;
      EXPECT_EQ(c.buffers, (std::vector<std::string>{"fields[].d"})) << arg << ": " << name;
    }
    EXPECT_EQ(transform(a, src).converted_calls, 2) << arg;
  }
}
