// The analyzer and the rules on idioms of inference-serving engines (corpus_user's serving
// programs): a custom all-reduce sharing its workspace through CUDA IPC beside an NCCL fallback,
// workspace arenas carved into views, decode steps captured in CUDA graphs, role-dependent
// (prefill/decode) buffers.
#include <gtest/gtest.h>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/transform.hpp"

using namespace braid::convert;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Conversion convert_text(const std::string& src) { return transform(analyze("serving.cu", src, true, {}), src); }

bool told(const Conversion& c, const std::string& part) {
  for (const Unconverted& u : c.left)
    if (contains(u.reason, part)) return true;
  return false;
}

const std::string kPrologue =
    "#include <nccl.h>\n"
    "#include <cuda_runtime.h>\n";

}  // namespace

// vLLM/TensorRT-LLM's custom all-reduce exports its workspace with cudaIpcGetMemHandle (here
// through a class given the pointer) and falls back to NCCL on the same buffer for large
// messages. Legacy IPC refuses ncclMemAlloc (cuMem) memory, so that buffer stays cudaMalloc and
// the calls needing it as a window stay host NCCL; another buffer still converts.
TEST(AnalyzerServingIdioms, BuffersExportedThroughCudaIpcStayCudaMalloc) {
  const std::string src = kPrologue +
                          "struct CustomAr {\n"
                          "  cudaIpcMemHandle_t h;\n"
                          "  CustomAr(char* ws) { cudaIpcGetMemHandle(&h, ws); }\n"
                          "};\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  char* arena; float* ids;\n"
                          "  cudaMalloc(&arena, 1 << 20); cudaMalloc(&ids, 4096);\n"
                          "  CustomAr* ar = new CustomAr(arena);\n"
                          "  float* x = (float*)(arena + 256);\n"
                          "  ncclAllReduce(x, x, 1024, ncclFloat, ncclSum, comm, s);\n"
                          "  ncclBroadcast(ids, ids, 16, ncclFloat, 0, comm, s);\n"
                          "  cudaFree(arena);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(told(c, "exported through cudaIpcGetMemHandle (line 5)")) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "cudaMalloc(&arena, 1 << 20)")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&ids, 4096)")) << c.source;
}
