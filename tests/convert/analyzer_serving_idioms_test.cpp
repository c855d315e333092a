// The analyzer and the rules on idioms of inference-serving engines (corpus_user's serving
// programs): a custom all-reduce sharing its workspace through CUDA IPC beside an NCCL fallback,
// workspace arenas carved into views, decode steps captured in CUDA graphs, role-dependent
// (prefill/decode) buffers.
#include <gtest/gtest.h>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/transform.hpp"

#include "analyzer_test_util.hpp"

using namespace braid::convert;
using namespace braid::convert::test;

namespace {

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

// A decode step captured into a CUDA graph per batch size, its send/recv in a helper called inside
// the capture: a converted send/recv plans its messages on the host at each launch, which a
// replayed graph would repeat stale, so they stay host NCCL (and with them every send/recv on the
// communicator). A collective in the capture converts where the communicator is created in the
// file (the windows are registered there, never inside the capture), and stays host otherwise.
TEST(AnalyzerServingIdioms, SendRecvCapturedIntoAGraphStayHost) {
  const std::string src = kPrologue +
                          "ncclComm_t comm; cudaStream_t s; float *h, *g;\n"
                          "void step(int peer, int n) {\n"
                          "  ncclSend(h, n, ncclFloat, peer, comm, s);\n"
                          "  ncclRecv(h, n, ncclFloat, peer, comm, s);\n"
                          "  ncclAllReduce(g, g, n, ncclFloat, ncclSum, comm, s);\n"
                          "}\n"
                          "int main() {\n"
                          "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  cudaMalloc(&h, 4096); cudaMalloc(&g, 4096);\n"
                          "  cudaGraph_t graph;\n"
                          "  for (int bs = 1; bs <= 8; bs *= 2) {\n"
                          "    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);\n"
                          "    step(1, bs);\n"
                          "    cudaStreamEndCapture(s, &graph);\n"
                          "  }\n"
                          "  ncclSend(h, 4, ncclFloat, 1, comm, s);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(told(c, "captured into a CUDA graph (cudaStreamBeginCapture at line 14)")) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::all_reduce")) << c.source;
  EXPECT_FALSE(contains(c.source, "braid_converted::send")) << c.source;
  // Without the creation in the file, the first converted call would bind inside the capture.
  std::string lazy = src;
  lazy.replace(lazy.find("ncclCommInitRank(&comm, 2, id, 0);"), 34, "");
  const Conversion l = convert_text(lazy);
  EXPECT_EQ(l.converted_calls, 0) << conversion_to_text(l);
  EXPECT_TRUE(told(l, "would register the windows inside the capture")) << conversion_to_text(l);
}

// A workspace carved in steps, each view a field set from the one before it (`ws.b = ws.a + n`,
// `ws.a = ws.base`, a cast included): every view is the one allocation of `ws.base`.
TEST(AnalyzerServingIdioms, WorkspaceViewsCarvedFromEachOtherAreTheirAllocation) {
  const std::string src = kPrologue +
                          "struct Workspace { char* base; float* a; float* b; int* counts; };\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  Workspace ws;\n"
                          "  cudaMalloc(reinterpret_cast<void**>(&ws.base), 1 << 20);\n"
                          "  ws.a = reinterpret_cast<float*>(ws.base);\n"
                          "  ws.b = ws.a + 4096;\n"
                          "  ws.counts = reinterpret_cast<int*>(ws.b + 4096);\n"
                          "  ncclAllGather(ws.a, ws.b, 1024, ncclFloat, comm, s);\n"
                          "  ncclAllGather(ws.counts, ws.counts + 8, 1, ncclInt32, comm, s);\n"
                          "  cudaFree(ws.base);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(reinterpret_cast<void**>(&ws.base), 1 << 20)"))
      << c.source;
}

// Disaggregated serving: the decode worker holds a larger KV pool than the prefill one. A window
// is registered collectively with one size on every rank, so a buffer whose size depends on the
// rank (through a role chosen from it, a value assigned under a condition on it, or a helper's
// parameter given one) is allocated as large as the largest rank's, agreed over the communicator
// at the allocation (sym_malloc_agreed); one sized by the rank count needs no agreement. Made
// before the communicator exists (nothing to agree over), or in a loop (an agreement and a
// registration at every trip), it stays as written.
TEST(AnalyzerServingIdioms, BuffersSizedByTheRankAreAgreedAfterTheCreation) {
  const auto program = [](const std::string& before, const std::string& after) {
    return kPrologue +
           "#include <mpi.h>\n"
           "struct Worker { int role; int blocks; float* pool; };\n"
           "float* make(size_t bytes) { float* p; cudaMalloc(&p, bytes); return p; }\n"
           "int main() {\n"
           "  int rank, world; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &world);\n"
           "  Worker w; w.role = rank == 0 ? 0 : 1;\n"
           "  w.blocks = w.role == 0 ? 256 : 1024;\n" +
           before + "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, world, id, rank);\n" +
           after +
           "  ncclAllReduce(w.pool, w.pool, 16, ncclFloat, ncclSum, comm, s);\n"
           "}\n";
  };
  const std::string pool = "  cudaMalloc(&w.pool, (size_t)w.blocks * 4096);\n";
  const Conversion c = convert_text(program("", pool));
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc_agreed(&w.pool, (size_t)w.blocks * 4096)")) << c.source;
  const Conversion early = convert_text(program(pool, ""));
  EXPECT_EQ(early.converted_calls, 0) << conversion_to_text(early);
  EXPECT_TRUE(told(early, "buffer `w.pool` is allocated (line 10) with a size that depends on the rank"))
      << conversion_to_text(early);
  EXPECT_TRUE(told(early, "where braid cannot place it after a communicator's creation on every path"))
      << conversion_to_text(early);
  const Conversion looped = convert_text(program("", "  for (int i = 0; i < 2; ++i) " + pool));
  EXPECT_EQ(looped.converted_calls, 0) << conversion_to_text(looped);
  EXPECT_TRUE(told(looped, "in a loop (an agreement and a registration at every trip)")) << conversion_to_text(looped);

  const std::string src =
      kPrologue +
      "#include <mpi.h>\n"
      "struct Worker { int role; int blocks; float* pool; };\n"
      "float* make(size_t bytes) { float* p; cudaMalloc(&p, bytes); return p; }\n"
      "int main() {\n"
      "  int rank, world; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &world);\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, world, id, rank);\n"
      "  size_t scratch = 0;\n"
      "  if (rank == 0) scratch = 1 << 20; else scratch = 1 << 16;\n"
      "  float* s1; cudaMalloc(&s1, scratch);\n"
      "  float* s2 = make(rank * 4096 + 4096);\n"
      "  float* even; cudaMalloc(&even, world * 4096);\n"
      "  ncclAllReduce(s1, s1, 16, ncclFloat, ncclSum, comm, s);\n"
      "  ncclAllReduce(s2, s2, 16, ncclFloat, ncclSum, comm, s);\n"
      "  ncclAllReduce(even, even, 16, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion d = convert_text(src);
  EXPECT_EQ(d.converted_calls, 3) << conversion_to_text(d);
  EXPECT_TRUE(contains(d.source, "braid_converted::sym_malloc_agreed(&s1, scratch)")) << d.source;
  EXPECT_TRUE(contains(d.source, "braid_converted::sym_malloc_agreed(&p, bytes)")) << d.source;
  EXPECT_TRUE(contains(d.source, "braid_converted::sym_malloc(&even, world * 4096)")) << d.source;
}

// A paged KV pool hands out views through a getter taking the block's coordinates
// (`pool.block(layer, id)` returning `blocks + (layer * n + id) * elems`, or `&blocks[...]`): the
// view is the field's allocation, followed in the caller's terms.
TEST(AnalyzerServingIdioms, ViewGettersTakingArgumentsAreTheirField) {
  const std::string src =
      kPrologue +
      "struct KvPool {\n"
      "  float* blocks; int n;\n"
      "  float* block(int layer, int id) const { return blocks + ((size_t)layer * n + id) * 4096; }\n"
      "  float* first(int layer) { return &blocks[layer * n * 4096]; }\n"
      "};\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  KvPool pool; pool.n = 64;\n"
      "  cudaMalloc(&pool.blocks, 4 * 64 * 4096 * sizeof(float));\n"
      "  ncclGroupStart();\n"
      "  for (int id = 0; id < 8; ++id) ncclSend(pool.block(0, id), 4096, ncclFloat, 1, comm, s);\n"
      "  ncclRecv(pool.first(1), 4096, ncclFloat, 1, comm, s);\n"
      "  ncclGroupEnd();\n"
      "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&pool.blocks")) << c.source;
}

// An expert-parallel step sized from counts the rank copies back from its own device (after the
// router, or an all-to-all of counts): each rank allocates a different size, so the receive buffer
// stays as written and the sends and receives stay host NCCL.
TEST(AnalyzerServingIdioms, BuffersSizedByCountsCopiedFromTheDeviceStayAsWritten) {
  const std::string src = kPrologue +
                          "#include <vector>\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  int *d_counts; cudaMalloc(&d_counts, 64);\n"
                          "  float* send; cudaMalloc(&send, 1 << 20);\n"
                          "  std::vector<int> h(2);\n"
                          "  for (int step = 0; step < 4; ++step) {\n"
                          "    cudaMemcpy(h.data(), d_counts, 8, cudaMemcpyDeviceToHost);\n"
                          "    size_t total = 0;\n"
                          "    for (int p = 0; p < 2; ++p) total += h[p];\n"
                          "    float* recv; cudaMalloc(&recv, total * 4096);\n"
                          "    ncclGroupStart();\n"
                          "    ncclSend(send, 1024, ncclFloat, 1, comm, s);\n"
                          "    ncclRecv(recv, 1024, ncclFloat, 1, comm, s);\n"
                          "    ncclGroupEnd();\n"
                          "    cudaFree(recv);\n"
                          "  }\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 0) << conversion_to_text(c);
  EXPECT_TRUE(told(c, "buffer `recv` is allocated (line 13) with a size that depends on the rank (`total * 4096`"))
      << conversion_to_text(c);
}
