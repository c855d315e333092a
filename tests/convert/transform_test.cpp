#include <gtest/gtest.h>

#include <filesystem>

#include "braid/convert/transform.hpp"
#include "braid/util/fs.hpp"

using namespace braid::convert;

namespace {

std::filesystem::path corpus(const std::string& name) {
  return std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus" / name;
}

Conversion convert_file(const std::filesystem::path& p) {
  const std::string src = braid::read_file(p);
  return transform(analyze(p.filename().string(), src), src);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(Transform, EveryCorpusProgramConvertsCompletely) {
  const std::map<std::string, std::vector<std::string>> expected = {
      {"allreduce_after_kernel.cu", {"braid_converted::all_reduce<0>(grad, sum"}},
      {"ring_sendrecv.cu",
       {"braid_converted::group_start()", "braid_converted::send<0>(mine", "braid_converted::recv<0>(incoming",
        "braid_converted::group_end<0>()"}},
      {"alltoallv_counts.cu", {"braid_converted::send<0>(sendbuf + send_disp[p]", "braid_converted::group_end<0>()"}},
      {"grouped_collectives.cu",
       {"braid_converted::group_start()", "braid_converted::all_reduce<0>(weights",
        "braid_converted::all_reduce<2>(bias", "braid_converted::all_gather<3>(shard",
        "braid_converted::group_end<1>()"}},
      {"two_streams.cu", {"braid_converted::all_gather<0>(shard, gathered, kShard, ncclFloat, comm, comm_stream)"}},
      {"loop_reduce_scatter.cu",
       {"braid_converted::reduce_scatter<0>(full, shard", "braid_converted::all_gather<1>(shard, full"}},
      {"broadcast_root.cu", {"braid_converted::broadcast<0>(params, local"}},
      {"alltoall_tokens.cu", {"braid_converted::all_to_all<0>(dispatch, received"}},
  };
  for (const auto& [name, parts] : expected) {
    SCOPED_TRACE(name);
    Conversion c = convert_file(corpus(name));
    EXPECT_TRUE(c.complete()) << conversion_to_text(c);
    EXPECT_EQ(c.converted_calls, c.nccl_calls);
    for (const std::string& p : parts) EXPECT_TRUE(contains(c.source, p)) << p;
    // Stage A: symmetric allocation, teardown before the communicator goes, the prelude.
    EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&"));
    EXPECT_TRUE(contains(c.source, "braid_converted::comm_destroy(comm)"));
    EXPECT_TRUE(contains(
        c.source, "namespace braid_converted { constexpr int kCallSites = " + std::to_string(c.call_sites) +
                      "; constexpr bool kOneThreadDrivesRanks = false; constexpr bool kRankPerThread = false; }"));
    EXPECT_FALSE(contains(c.source, "BRAID_NCCL(ncclAllReduce(") || contains(c.source, "BRAID_NCCL(ncclAllGather("));
    // Annotations stay for the gate.
    EXPECT_TRUE(contains(c.source, "// braid:input"));
    braid::json j = conversion_to_json(c);
    EXPECT_TRUE(j["complete"].get<bool>());
    EXPECT_TRUE(j["unconverted"].empty());
  }
}

TEST(Transform, HarnessSeedGetsWindowsAndHooks) {
  Conversion c = convert_file(std::filesystem::path(BRAID_SOURCE_DIR) / "workloads/gemm_allgather/seed.cu");
  EXPECT_TRUE(c.complete());
  EXPECT_TRUE(contains(c.source, "c.alloc_window(\"gathered\""));
  EXPECT_TRUE(contains(c.source, "braid_converted::adopt_harness(c);"));
  EXPECT_TRUE(contains(c.source, "braid_converted::release_harness(c);"));
  EXPECT_TRUE(
      contains(c.source, "braid_converted::all_gather<0>(a.ptr, gathered.ptr, a.count, ncclBfloat16, c.comm, s)"));
}

TEST(Transform, WhatNoRuleHandlesIsLeftWithItsLine) {
  const std::string src =
      "#include <nccl.h>\n"
      "int main() {\n"
      "  float* x; float* y; float* z;\n"
      "  cudaMalloc(&x, 1024);\n"
      "  cudaMalloc(&y, 1024);\n"
      "  cudaMallocAsync(&z, 1024, 0);\n"
      "  ncclAllReduce(x, y, 256, ncclFloat8e4m3, ncclSum, comm, 0);\n"
      "  ncclAllReduce(x, y, 256, ncclInt32, ncclAvg, comm, 0);\n"
      "  ncclAllReduce(z, z, 256, ncclFloat, ncclSum, comm, 0);\n"
      "  ncclAllReduce(x, y, 256, dtype, ncclSum, other, 0);\n"
      "  ncclAllGather(x, y, 64, ncclFloat, comm, 0);\n"
      "  ncclReduce(x, y, 256, ncclHalf, ncclMax, 0, comm, 0);\n"
      "  cudaFree(y);\n"
      "  cudaFree(z);\n"
      "}\n";
  Conversion c = transform(analyze("p.cu", src), src);
  EXPECT_EQ(c.nccl_calls, 6);
  EXPECT_EQ(c.converted_calls, 4);
  ASSERT_EQ(c.left.size(), 3u);
  // The stream-ordered buffer's all-reduce converts (it falls back to host NCCL at run time on
  // every rank); its allocation site is left to the LLM loop's stage A.
  EXPECT_EQ(c.left[0].line, 6);
  EXPECT_EQ(c.left[0].construct, "cudaMallocAsync");
  EXPECT_TRUE(contains(c.left[0].reason, "buffer `z` cannot move to symmetric memory by rule")) << c.left[0].reason;
  EXPECT_EQ(c.left[1].line, 7);
  EXPECT_TRUE(contains(c.left[1].reason, "`ncclFloat8e4m3` has no device reduction")) << c.left[1].reason;
  EXPECT_EQ(c.left[2].line, 8);
  EXPECT_TRUE(contains(c.left[2].reason, "ncclAvg on an integer type"));
  // A second communicator converts too: the runtime binds `other` at its first converted call.
  EXPECT_TRUE(contains(c.source, "all_reduce<1>(x, y, 256, dtype, ncclSum, other, 0)")) << c.source;
  // Converted calls' buffers became symmetric; every free goes through the run-time lookup.
  EXPECT_TRUE(contains(c.source, "braid_converted::all_gather<2>(x, y, 64"));
  EXPECT_TRUE(contains(c.source, "braid_converted::all_reduce<0>(z, z, 256"));
  EXPECT_TRUE(contains(c.source, "braid_converted::reduce<3>(x, y, 256, ncclHalf, ncclMax, 0"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&x, 1024)"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&y, 1024)"));
  EXPECT_TRUE(contains(c.source, "  cudaMallocAsync(&z"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_free(y)"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_free(z)"));  // not ours: the lookup sends it to cudaFree
  EXPECT_FALSE(c.complete());
  EXPECT_TRUE(
      contains(conversion_to_text(c), "p.cu:6: cudaMallocAsync: buffer `z` cannot move to symmetric memory by rule"));
}

TEST(Transform, AGroupWithAMemberWithoutARuleStaysHost) {
  const std::string src =
      "#include <nccl.h>\n"
      "int main() {\n"
      "  float* x; float* y;\n"
      "  cudaMalloc(&x, 1024);\n"
      "  cudaMalloc(&y, 1024);\n"
      "  ncclGroupStart();\n"
      "  ncclAllGather(x, y, 64, ncclFloat, comm, 0);\n"
      "  ncclReduce(x, y, 256, ncclFloat8e5m2, ncclSum, 0, comm, 0);\n"
      "  ncclGroupEnd();\n"
      "}\n";
  Conversion c = transform(analyze("g.cu", src), src);
  EXPECT_EQ(c.converted_calls, 0);
  ASSERT_EQ(c.left.size(), 2u);
  EXPECT_TRUE(contains(c.left[0].reason, "its group (line 6) stays host NCCL")) << c.left[0].reason;
  EXPECT_EQ(c.source, src);  // nothing converted: no prelude, no renamed brackets
}

// One thread driving a rank per GPU (ncclCommInitAll): converted, the communicators bound together
// at their creation, the runtime told so (kOneThreadDrivesRanks), the program's group kept open in NCCL.
TEST(Transform, OneThreadDrivingEveryGpuConverts) {
  const std::string src =
      "#include <nccl.h>\n"
      "int main() {\n"
      "  float* x[2];\n"
      "  for (int i = 0; i < 2; ++i) cudaMalloc(&x[i], 1024);\n"
      "  ncclCommInitAll(comms, 2, devs);\n"
      "  ncclGroupStart();\n"
      "  for (int i = 0; i < 2; ++i) ncclAllReduce(x[i], x[i], 256, ncclFloat, ncclSum, comms[i], s[i]);\n"
      "  ncclGroupEnd();\n"
      "}\n";
  Conversion c = transform(analyze("all.cu", src), src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_init_all(comms, 2, devs)"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&x[i], 1024)"));
  EXPECT_TRUE(contains(c.source, "constexpr bool kOneThreadDrivesRanks = true;"));
  EXPECT_TRUE(contains(conversion_to_text(c), "opens the NCCL group"));
}

// A thread per GPU given buffers the main thread made, started as later declarators of one
// declaration (`std::thread a(f, ..), b(f, ..)`): each start is a call of worker(), so `x` is
// followed to main's allocation. Started through a function pointer instead, the arguments are out
// of sight: the call stays host NCCL with that reason (on every rank).
TEST(Transform, AThreadPerGpuGivenMainsBuffers) {
  const std::string worker =
      "#include <nccl.h>\n#include <thread>\n"
      "void worker(int r, ncclUniqueId id, float* x) {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, r);\n"
      "  ncclAllReduce(x, x, 256, ncclFloat, ncclSum, comm, 0);\n"
      "}\n"
      "int main() {\n"
      "  float* x[2]; ncclUniqueId id;\n"
      "  for (int i = 0; i < 2; ++i) cudaMalloc(&x[i], 1024);\n";
  const std::string declared = worker +
                               "  std::thread a(worker, 0, id, x[0]), b(worker, 1, id, x[1]);\n"
                               "  a.join(); b.join();\n"
                               "}\n";
  Conversion c = transform(analyze("threads.cu", declared), declared);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "constexpr bool kRankPerThread = true;"));
  const std::string through_pointer = worker +
                                      "  auto entry = worker;\n"
                                      "  std::thread a(entry, 0, id, x[0]), b(entry, 1, id, x[1]);\n"
                                      "  a.join(); b.join();\n"
                                      "}\n";
  Conversion d = transform(analyze("threads.cu", through_pointer), through_pointer);
  EXPECT_EQ(d.converted_calls, 0);
  EXPECT_EQ(d.source, through_pointer);
  ASSERT_EQ(d.left.size(), 1u);
  EXPECT_TRUE(contains(d.left[0].reason, "`x` is a parameter of worker()")) << d.left[0].reason;
}

TEST(Transform, PointToPointIsPairwiseAndBoundAtCreation) {
  const std::string src =
      "#include <nccl.h>\n"
      "int main() {\n"
      "  float *in, *out;\n"
      "  ncclComm_t comm;\n"
      "  ncclCommInitRank(&comm, world, id, rank);\n"
      "  cudaMalloc(&in, 4096);\n"
      "  cudaMalloc(&out, 4096);\n"
      "  if (rank > 0) ncclRecv(in, 1024, ncclFloat, rank - 1, comm, 0);\n"
      "  if (rank < world - 1) ncclSend(out, 1024, ncclFloat, rank + 1, comm, 0);\n"
      "  ncclCommDestroy(comm);\n"
      "}\n";
  Conversion c = transform(analyze("pp.cu", src), src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_init_rank(&comm, world, id, rank)"));
  EXPECT_TRUE(contains(c.source, "braid_converted::recv<0>(in"));
  EXPECT_TRUE(contains(c.source, "braid_converted::send<1>(out"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&in, 4096)"));   // the receive window
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&out, 4096)"));  // and the send's: both ends
}

// NCCL 2.28.9 hangs an ncclSend from a registered window into an unregistered receive buffer (2 x
// H200): a pair is in windows on both ends or on neither. A send whose buffer cannot be a window
// keeps every send/recv on its communicator host-driven (the receive too, on whatever rank it
// runs), with the reason; a collective on a buffer of their own still converts.
TEST(Transform, SendRecvPairIsWindowedOnBothEndsOrNeither) {
  const std::string src =
      "#include <nccl.h>\n"
      "int main() {\n"
      "  float *in, *out, *x;\n"
      "  ncclComm_t comm;\n"
      "  ncclCommInitRank(&comm, world, id, rank);\n"
      "  cudaMalloc(&in, 4096);\n"
      "  cudaMallocAsync(&out, 4096, 0);\n"
      "  cudaMalloc(&x, 4096);\n"
      "  if (rank > 0) ncclRecv(in, 1024, ncclFloat, rank - 1, comm, 0);\n"
      "  if (rank < world - 1) ncclSend(out, 1024, ncclFloat, rank + 1, comm, 0);\n"
      "  ncclAllGather(x, x, 256, ncclFloat, comm, 0);\n"
      "  ncclCommDestroy(comm);\n"
      "}\n";
  Conversion c = transform(analyze("pair.cu", src), src);
  EXPECT_EQ(c.nccl_calls, 3);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  ASSERT_EQ(c.left.size(), 2u) << conversion_to_text(c);
  EXPECT_EQ(c.left[0].line, 9);
  EXPECT_EQ(c.left[0].construct, "ncclRecv");
  EXPECT_TRUE(contains(c.left[0].reason, "symmetric windows on both ends or on neither")) << c.left[0].reason;
  EXPECT_TRUE(contains(c.left[0].reason, "line 10")) << c.left[0].reason;  // names the send that blocks it
  EXPECT_EQ(c.left[1].line, 10);
  EXPECT_TRUE(contains(c.left[1].reason, "comes from cudaMallocAsync")) << c.left[1].reason;
  // Neither end of the pair becomes a window; the all-gather's own buffer does.
  EXPECT_TRUE(contains(c.source, "  cudaMalloc(&in, 4096)"));
  EXPECT_TRUE(contains(c.source, "  cudaMallocAsync(&out, 4096, 0)"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&x, 4096)"));
  EXPECT_TRUE(contains(c.source, "if (rank > 0) ncclRecv(in"));
  EXPECT_TRUE(contains(c.source, "ncclSend(out"));
  // --explain prints the reason with the line.
  EXPECT_TRUE(contains(conversion_to_text(c),
                       "pair.cu:9: ncclRecv: a send/recv pair must be in symmetric windows on both ends or on neither"))
      << conversion_to_text(c);

  // The same pair with a send buffer that can be a window: both ends are, both convert.
  std::string both = src;
  both.replace(both.find("cudaMallocAsync(&out, 4096, 0)"), 30, "cudaMalloc(&out, 4096)");
  Conversion d = transform(analyze("pair.cu", both), both);
  EXPECT_EQ(d.converted_calls, 3) << conversion_to_text(d);
  EXPECT_TRUE(contains(d.source, "braid_converted::sym_malloc(&in, 4096)"));
  EXPECT_TRUE(contains(d.source, "braid_converted::sym_malloc(&out, 4096)"));

  // A host pair's buffer that a collective would make a window: the collective stays host too.
  std::string shared = src;
  shared.replace(shared.find("ncclAllGather(x, x,"), 19, "ncclAllGather(x, in,");
  Conversion e = transform(analyze("pair.cu", shared), shared);
  EXPECT_EQ(e.converted_calls, 0) << conversion_to_text(e);
  EXPECT_TRUE(contains(conversion_to_text(e),
                       "pair.cu:11: ncclAllGather: buffer `in` is also used by the host send/recv at line 9"))
      << conversion_to_text(e);
  EXPECT_TRUE(contains(e.source, "  cudaMalloc(&in, 4096)"));
}

TEST(Transform, GateInstrumentationReplacesAnnotations) {
  const auto p = corpus("two_streams.cu");
  const std::string src = braid::read_file(p);
  Analysis a = analyze("two_streams.cu", src);
  const std::string g = instrument_for_gate(a, src);
  EXPECT_TRUE(contains(g,
                       "braid_gate::clear(gathered, kShard * kMaxRanks * sizeof(float)); braid_gate::input(shard, "
                       "kShard * sizeof(float), \"shard\");"));
  EXPECT_TRUE(contains(g, "braid_gate::input(local, 1024 * sizeof(float), \"local\");"));
  EXPECT_TRUE(contains(g, "braid_gate::output(gathered, kShard * kMaxRanks * sizeof(float), \"gathered\");"));
  EXPECT_FALSE(contains(g, "// braid:output"));
}

// Users' idioms the rules follow: a data type computed by a function (`nccl_type<T>()`, decided
// at run time like any non-literal), a container filled with copies of a struct whose fields were
// allocated (`buckets.push_back(b)`), and NCCL included under `#ifdef`: the prelude goes after the
// block, so a build without the macro still has the converted calls' definitions.
TEST(Transform, UserIdiomsTypesByFunctionContainerCopiesAndConditionalIncludes) {
  const std::string src =
      "#include <vector>\n"
      "#ifdef MULTI_GPU\n"
      "#include <nccl.h>\n"
      "#endif\n"
      "struct Bucket { float* grad; size_t n; };\n"
      "template <typename T> ncclDataType_t nccl_type() { return ncclFloat; }\n"
      "template <typename T> void sum(T* b, size_t n, ncclComm_t c, cudaStream_t s) {\n"
      "  ncclAllReduce(b, b, n, nccl_type<T>(), ncclSum, c, s);\n"
      "}\n"
      "int main() {\n"
      "  ncclComm_t comm; cudaStream_t s;\n"
      "  ncclCommInitRank(&comm, 2, id, 0);\n"
      "  std::vector<Bucket> buckets;\n"
      "  for (int i = 0; i < 3; ++i) { Bucket b; b.n = 256; cudaMalloc(&b.grad, 1024); buckets.push_back(b); }\n"
      "  for (auto& b : buckets) ncclAllReduce(b.grad, b.grad, b.n, ncclFloat, ncclSum, comm, s);\n"
      "  float* x; cudaMalloc(&x, 1024);\n"
      "  sum(x, 256, comm, s);\n"
      "}\n";
  Conversion c = transform(analyze("p.cu", src), src);
  EXPECT_EQ(c.nccl_calls, 2);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "nccl_type<T>(), ncclSum, c, s)")) << c.source.substr(c.source.size() - 800);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&b.grad, 1024)"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&x, 1024)"));
  // The prelude comes after the #endif, not inside the #ifdef block.
  const std::size_t endif = c.source.find("#endif");
  const std::size_t prelude = c.source.find("namespace braid_converted");
  ASSERT_NE(endif, std::string::npos);
  EXPECT_GT(prelude, endif);
}

TEST(Transform, APreludeStaysInsideAWholeFileIncludeGuard) {
  EXPECT_EQ(prelude_position("#ifndef P_H\n#define P_H\n#include <nccl.h>\nint x;\n#endif\n"),
            std::string("#ifndef P_H\n#define P_H\n#include <nccl.h>").size());
  EXPECT_EQ(prelude_position("#include <a.h>\n#if X\n#include <b.h>\n#else\n#include <c.h>\n#endif\nint y;\n"),
            std::string("#include <a.h>\n#if X\n#include <b.h>\n#else\n#include <c.h>\n#endif").size());
}

// Buffers from an allocation helper that returns the pointer (a template too), allocated inside
// an `if (cudaMalloc(...) != cudaSuccess)` check that every rank runs; a helper called under a
// condition keeps its callers' buffers host NCCL (window registration is collective).
TEST(Transform, BuffersFromReturningAllocationHelpers) {
  const std::string src =
      "#include <nccl.h>\n"
      "template <typename T> T* device_alloc(size_t n) {\n"
      "  T* p = nullptr;\n"
      "  if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) exit(1);\n"
      "  return p;\n"
      "}\n"
      "float* scratch(size_t n) { float* q; cudaMalloc((void**)&q, n * 4); return q; }\n"
      "int main() {\n"
      "  ncclComm_t comm; cudaStream_t s;\n"
      "  ncclCommInitRank(&comm, 2, id, 0);\n"
      "  float* act = device_alloc<float>(1024);\n"
      "  float* dbg = nullptr;\n"
      "  if (rank == 0) dbg = scratch(16);\n"
      "  float* tmp = scratch(64);\n"
      "  ncclAllReduce(act, act, 1024, ncclFloat, ncclSum, comm, s);\n"
      "  ncclAllReduce(tmp, tmp, 64, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  Conversion c = transform(analyze("p.cu", src), src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&p, n * sizeof(T))"));
  EXPECT_TRUE(contains(c.source, "cudaMalloc((void**)&q, n * 4)"));  // scratch() is called under `if`
  ASSERT_EQ(c.left.size(), 1u);
  EXPECT_TRUE(contains(c.left[0].reason, "scratch() is called under a condition")) << c.left[0].reason;
}

// One process, a rank per thread (each thread makes its communicator and every NCCL call of its
// rank): converted, whichever way the thread is started, with a runtime state per thread
// (kRankPerThread).
TEST(Transform, ARankPerThreadConverts) {
  const std::string worker =
      "#include <nccl.h>\n"
      "void worker(int r, int n, ncclUniqueId id) {\n"
      "  ncclComm_t comm; float* b; cudaStream_t s;\n"
      "  ncclCommInitRank(&comm, n, id, r);\n"
      "  cudaMalloc(&b, 4096);\n"
      "  ncclAllReduce(b, b, 1024, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const std::vector<std::string> starts = {
      "int main() { std::vector<std::thread> ts; for (int r = 0; r < 4; ++r) ts.emplace_back(worker, r, 4, id); }\n",
      "int main() { std::thread t(worker, 0, 1, id); t.join(); }\n",
      "int main() { auto f = std::async(std::launch::async, worker, 0, 1, id); f.get(); }\n",
      "using namespace std;\nint main() { auto f = async(launch::async, worker, 0, 1, id); f.get(); }\n",
      "void* entry(void* a) { worker(0, 1, id); return nullptr; }\n"
      "int main() { pthread_t t; pthread_create(&t, nullptr, entry, nullptr); }\n",
      "int main() {\n#pragma omp parallel num_threads(4)\n  worker(omp_get_thread_num(), 4, id);\n}\n",
      "int main() {\n#pragma omp parallel num_threads(4)\n  {\n    int r = omp_get_thread_num();\n    worker(r, 4, "
      "id);\n  }\n}\n"};
  for (const std::string& start : starts) {
    const std::string src = worker + start;
    Conversion c = transform(analyze("p.cu", src), src);
    EXPECT_EQ(c.converted_calls, 1) << start << conversion_to_text(c);
    EXPECT_TRUE(contains(c.source, "constexpr bool kRankPerThread = true;")) << start;
    EXPECT_TRUE(contains(c.source, "braid_converted::comm_init_rank(&comm, n, id, r)")) << start;
    EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&b, 4096)")) << start;
  }
  // A lambda thread that creates the communicator.
  const std::string lambda =
      "#include <nccl.h>\n"
      "int main() {\n"
      "  std::vector<std::thread> ts;\n"
      "  for (int r = 0; r < 2; ++r) ts.emplace_back([&, r] {\n"
      "    ncclComm_t comm; float* b; cudaStream_t s;\n"
      "    ncclCommInitRank(&comm, 2, id, r);\n"
      "    cudaMalloc(&b, 4096);\n"
      "    ncclAllReduce(b, b, 1024, ncclFloat, ncclSum, comm, s);\n"
      "  });\n"
      "}\n";
  Conversion c = transform(analyze("p.cu", lambda), lambda);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "constexpr bool kRankPerThread = true;"));
  // Buffers the main thread made, given to each thread as arguments: a thread start is a call, so
  // the buffer is followed to main's allocation (adopted by its GPU's thread at run time).
  const std::string given =
      "#include <nccl.h>\n"
      "void worker(int r, ncclUniqueId id, float* x) {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, r);\n"
      "  ncclAllReduce(x, x, 256, ncclFloat, ncclSum, comm, 0);\n"
      "}\n"
      "int main() {\n"
      "  float* x[2]; ncclUniqueId id;\n"
      "  for (int i = 0; i < 2; ++i) { cudaSetDevice(i); cudaMalloc(&x[i], 1024); }\n"
      "  std::vector<std::thread> ts;\n"
      "  for (int i = 0; i < 2; ++i) ts.emplace_back(worker, i, id, std::ref(x[i]));\n"
      "}\n";
  Conversion g = transform(analyze("p.cu", given), given);
  EXPECT_EQ(g.converted_calls, 1) << conversion_to_text(g);
  EXPECT_TRUE(contains(g.source, "braid_converted::sym_malloc(&x[i], 1024)"));
  EXPECT_TRUE(contains(conversion_to_text(g), "x of worker() <- x [ i ]")) << conversion_to_text(g);
  // A helper thread that does not create a communicator changes nothing.
  const std::string loader =
      "#include <nccl.h>\n"
      "void load(int k) {}\n"
      "int main() {\n"
      "  std::thread t(load, 3);\n"
      "  ncclComm_t comm; float* b; cudaStream_t s;\n"
      "  ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaMalloc(&b, 4096);\n"
      "  ncclAllReduce(b, b, 1024, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  Conversion d = transform(analyze("p.cu", loader), loader);
  EXPECT_EQ(d.converted_calls, 1) << conversion_to_text(d);
  EXPECT_TRUE(
      contains(d.source, "constexpr bool kOneThreadDrivesRanks = false; constexpr bool kRankPerThread = false;"));
}

// Threads that share communicators are left untouched with the reason: a communicator made in a
// thread but used outside it, nccl-tests' `-t` shape (one thread makes every GPU's communicator, a
// thread per GPU then drives each), and a background thread calling on the process's communicator.
TEST(Transform, ThreadsSharingCommunicatorsLeaveTheFileUntouched) {
  const std::string made_in_thread =
      "#include <nccl.h>\n"
      "ncclComm_t comms[2]; float* b[2];\n"
      "void init(int r, ncclUniqueId id) { cudaSetDevice(r); ncclCommInitRank(&comms[r], 2, id, r); }\n"
      "int main() {\n"
      "  std::vector<std::thread> ts;\n"
      "  for (int r = 0; r < 2; ++r) ts.emplace_back(init, r, id);\n"
      "  for (auto& t : ts) t.join();\n"
      "  for (int r = 0; r < 2; ++r) cudaMalloc(&b[r], 4096);\n"
      "  ncclGroupStart();\n"
      "  for (int r = 0; r < 2; ++r) ncclAllReduce(b[r], b[r], 1024, ncclFloat, ncclSum, comms[r], 0);\n"
      "  ncclGroupEnd();\n"
      "}\n";
  Conversion c = transform(analyze("p.cu", made_in_thread), made_in_thread);
  EXPECT_EQ(c.converted_calls, 0);
  EXPECT_EQ(c.source, made_in_thread);
  ASSERT_FALSE(c.left.empty());
  EXPECT_TRUE(contains(c.left[0].reason, "outside the threads")) << c.left[0].reason;
  const std::string driven_by_threads =
      "#include <nccl.h>\n"
      "ncclComm_t comms[2]; float* b[2];\n"
      "void run(int r) { cudaSetDevice(r); ncclAllReduce(b[r], b[r], 1024, ncclFloat, ncclSum, comms[r], 0); }\n"
      "int main() {\n"
      "  ncclGroupStart();\n"
      "  for (int r = 0; r < 2; ++r) { cudaSetDevice(r); cudaMalloc(&b[r], 4096); ncclCommInitRank(&comms[r], 2, id, "
      "r); }\n"
      "  ncclGroupEnd();\n"
      "  std::vector<std::thread> ts;\n"
      "  for (int r = 0; r < 2; ++r) ts.emplace_back(run, r);\n"
      "  for (auto& t : ts) t.join();\n"
      "}\n";
  Conversion d = transform(analyze("p.cu", driven_by_threads), driven_by_threads);
  EXPECT_EQ(d.converted_calls, 0);
  EXPECT_EQ(d.source, driven_by_threads);
  ASSERT_FALSE(d.left.empty());
  EXPECT_TRUE(contains(d.left[0].reason, "shared between threads")) << d.left[0].reason;
  // One rank per process with a background thread that all-reduces on the process's communicator,
  // and an allocation made while it runs: converted, that allocation's window registration (a
  // collective call) would be made beside the thread's calls.
  const std::string background =
      "#include <nccl.h>\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, rank);\n"
      "  float* g; cudaMalloc(&g, 4096);\n"
      "  std::thread reducer([&] { ncclAllReduce(g, g, 1024, ncclFloat, ncclSum, comm, 0); });\n"
      "  float* act; cudaMalloc(&act, 4096);\n"
      "  reducer.join();\n"
      "}\n";
  Conversion e = transform(analyze("p.cu", background), background);
  EXPECT_EQ(e.converted_calls, 0);
  ASSERT_FALSE(e.left.empty());
  EXPECT_TRUE(contains(e.left[0].reason, "calls ncclAllReduce (line 5) in a lambda, which another thread runs"))
      << e.left[0].reason;
  EXPECT_TRUE(contains(e.left[0].reason, "one rank, a background thread")) << e.left[0].reason;
  EXPECT_TRUE(contains(e.left[0].reason, "calls cudaMalloc (line 6) after the thread starts")) << e.left[0].reason;
  EXPECT_FALSE(contains(e.left[0].reason, "several ranks")) << e.left[0].reason;
}

// One rank with two communicators made together in a group (two ids, one rank argument: not a rank
// per GPU) and two background threads, each calling on its own: both lives lie between the windows'
// making and release, so both convert. The group of creations stays an NCCL group (binding inside it
// failed with "ncclDevCommCreate: invalid usage" on H200). A third thread started after an
// allocation breaks the rule.
TEST(Transform, TwoBackgroundThreadsEachOnItsOwnCommunicatorConvert) {
  const auto program = [](const std::string& third) {
    return "#include <nccl.h>\n#include <thread>\n"
           "struct Channel { ncclComm_t comm; float* buf; size_t n; };\n"
           "static void grads(Channel* ch) { for (int i = 0; i < 4; ++i) ncclAllReduce(ch->buf, ch->buf, ch->n, "
           "ncclFloat, ncclSum, ch->comm, 0); }\n"
           "static void stats(Channel* ch) { ncclBroadcast(ch->buf, ch->buf, ch->n, ncclFloat, 0, ch->comm, 0); }\n"
           "int main() {\n"
           "  int rank = 0; MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
           "  ncclUniqueId ids[2]; Channel g, s;\n"
           "  ncclGroupStart();\n"
           "  ncclCommInitRank(&g.comm, 2, ids[0], rank);\n"
           "  ncclCommInitRank(&s.comm, 2, ids[1], rank);\n"
           "  ncclGroupEnd();\n"
           "  g.n = 1024; s.n = 16;\n"
           "  cudaMalloc(&g.buf, 4096); cudaMalloc(&s.buf, 64);\n"
           "  std::thread t1(grads, &g);\n"
           "  std::thread t2(stats, &s);\n" +
           third +
           "  t1.join();\n  t2.join();\n"
           "  cudaFree(g.buf); cudaFree(s.buf);\n"
           "}\n";
  };
  const std::string two = program("");
  const Conversion c = transform(analyze("p.cu", two), two);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  // The group of creations stays NCCL's; the runtime binds its communicators at its end.
  EXPECT_TRUE(contains(c.source, "braid_converted::creation_group_start();")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::creation_group_end();")) << c.source;
  EXPECT_TRUE(contains(conversion_to_text(c),
                       "a background thread runs stats() (2 threads, started from line 15, all "
                       "ended by line 18)"))
      << conversion_to_text(c);
  const std::string late = program("  float* x; cudaMalloc(&x, 64);\n  std::thread t3(stats, &s);\n  t3.join();\n");
  const Conversion l = transform(analyze("p.cu", late), late);
  EXPECT_EQ(l.converted_calls, 0);
  ASSERT_FALSE(l.left.empty());
  EXPECT_TRUE(contains(l.left[0].reason, "calls cudaMalloc (line 17) after the thread starts")) << l.left[0].reason;
}

// A background thread (a reducer fed by the training loop) converts when its whole life lies between
// the windows' making and their release, in the creating function's order (every rank's alike):
// everything allocated before it starts, everything freed after it is joined, collectives only.
// Anything else leaves the file untouched with what broke the rule.
TEST(Transform, ABackgroundThreadBetweenTheAllocationsAndTheReleasesConverts) {
  const std::string base =
      "#include <nccl.h>\n"
      "#include <thread>\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, rank);\n"
      "  float* g; cudaMalloc(&g, 4096);\n"
      "  float* loss; cudaMalloc(&loss, 4);\n"
      "  std::thread reducer([&] { ncclAllReduce(g, g, 1024, ncclFloat, ncclSum, comm, 0); });\n"
      "  reducer.join();\n"
      "  ncclAllReduce(loss, loss, 1, ncclFloat, ncclSum, comm, 0);\n"
      "  cudaFree(g); cudaFree(loss);\n"
      "  ncclCommDestroy(comm);\n"
      "}\n";
  const Conversion ok = transform(analyze("p.cu", base), base);
  EXPECT_EQ(ok.converted_calls, 2) << conversion_to_text(ok);
  EXPECT_TRUE(ok.left.empty()) << conversion_to_text(ok);
  EXPECT_TRUE(
      contains(conversion_to_text(ok), "a background thread runs a lambda (started at line 7, ended by line 8)"))
      << conversion_to_text(ok);
  // The thread held by an object whose block ends before the releases (its destructor joins).
  const std::string held =
      "#include <nccl.h>\n"
      "#include <thread>\n"
      "class Reducer {\n"
      " public:\n"
      "  Reducer(ncclComm_t c, float* g) : comm_(c), g_(g) { worker_ = std::thread([this] { run(); }); }\n"
      "  ~Reducer() { worker_.join(); }\n"
      " private:\n"
      "  void run() { ncclAllReduce(g_, g_, 1024, ncclFloat, ncclSum, comm_, 0); }\n"
      "  ncclComm_t comm_; float* g_; std::thread worker_;\n"
      "};\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, rank);\n"
      "  float* g; cudaMalloc(&g, 4096);\n"
      "  {\n"
      "    Reducer r(comm, g);\n"
      "  }\n"
      "  cudaFree(g);\n"
      "}\n";
  const Conversion h = transform(analyze("p.cu", held), held);
  EXPECT_EQ(h.converted_calls, 1) << conversion_to_text(h);
  EXPECT_TRUE(contains(conversion_to_text(h), "(started at line 15, ended by line 16)")) << conversion_to_text(h);
  // A pthread: its life ends at the pthread_join of the handle pthread_create was given.
  const std::string pthread =
      "#include <nccl.h>\n"
      "#include <pthread.h>\n"
      "ncclComm_t comm; float* g;\n"
      "void* reduce(void*) {\n"
      "  ncclAllReduce(g, g, 1024, ncclFloat, ncclSum, comm, 0);\n"
      "  return nullptr;\n"
      "}\n"
      "int main() {\n"
      "  ncclCommInitRank(&comm, 2, id, rank);\n"
      "  cudaMalloc(&g, 4096);\n"
      "  pthread_t tid;\n"
      "  pthread_create(&tid, nullptr, reduce, nullptr);\n"
      "  pthread_join(tid, nullptr);\n"
      "  cudaFree(g);\n"
      "}\n";
  const Conversion pt = transform(analyze("p.cu", pthread), pthread);
  EXPECT_EQ(pt.converted_calls, 1) << conversion_to_text(pt);
  EXPECT_TRUE(
      contains(conversion_to_text(pt), "a background thread runs reduce() (started at line 12, ended by line 13)"))
      << conversion_to_text(pt);
  // `src` with `from` replaced by `to` converts nothing, for the reason `why`.
  const auto refused_in = [&](std::string src, const std::string& from, const std::string& to, const std::string& why) {
    src.replace(src.find(from), from.size(), to);
    const Conversion c = transform(analyze("p.cu", src), src);
    EXPECT_EQ(c.converted_calls, 0) << why << "\n" << conversion_to_text(c);
    ASSERT_FALSE(c.left.empty()) << why;
    EXPECT_TRUE(contains(c.left[0].reason, why)) << c.left[0].reason;
  };
  refused_in(pthread, "  pthread_join(tid, nullptr);\n", "", "starts pthread `tid` and joins it nowhere");
  refused_in(pthread, "  pthread_join(tid, nullptr);\n  cudaFree(g);\n",
             "  cudaFree(g);\n  pthread_join(tid, nullptr);\n", "calls cudaFree (line 13) before the thread has ended");
  refused_in(pthread, "  pthread_join(tid, nullptr);\n", "  pthread_detach(tid);\n", "pthread_detach");
  refused_in(pthread, "  pthread_join(tid, nullptr);\n", "  if (rank == 0) pthread_join(tid, nullptr);\n",
             "starts pthread `tid` and joins it nowhere");
  // Started and joined by helpers a worker struct is handed to (`start(&w)` creates `&w->tid`,
  // `stop(&w)` joins `w->tid`), the worker reaching its buffers through `w.model = &model`.
  const std::string helpers =
      "#include <nccl.h>\n"
      "#include <pthread.h>\n"
      "struct Model { float* g; };\n"
      "struct Worker { pthread_t tid; ncclComm_t comm; Model* model; };\n"
      "void* reduce(void* p) {\n"
      "  Worker* w = (Worker*)p;\n"
      "  ncclAllReduce(w->model->g, w->model->g, 1024, ncclFloat, ncclSum, w->comm, 0);\n"
      "  return nullptr;\n"
      "}\n"
      "void start(Worker* w) { pthread_create(&w->tid, nullptr, reduce, w); }\n"
      "void stop(Worker* w) { pthread_join(w->tid, nullptr); }\n"
      "int main() {\n"
      "  Worker worker; Model model;\n"
      "  ncclCommInitRank(&worker.comm, 2, id, rank);\n"
      "  cudaMalloc(&model.g, 4096);\n"
      "  worker.model = &model;\n"
      "  start(&worker);\n"
      "  stop(&worker);\n"
      "  cudaFree(model.g);\n"
      "}\n";
  const Conversion hp = transform(analyze("p.cu", helpers), helpers);
  EXPECT_EQ(hp.converted_calls, 1) << conversion_to_text(hp);
  EXPECT_TRUE(
      contains(conversion_to_text(hp), "a background thread runs reduce() (started at line 17, ended by line 18)"))
      << conversion_to_text(hp);
  EXPECT_TRUE(contains(conversion_to_text(hp), "worker . model = & model (line 16")) << conversion_to_text(hp);
  // A join the helper makes only sometimes, a stop after the free, a start under a condition.
  refused_in(helpers, "{ pthread_join(w->tid, nullptr); }", "{ if (w->comm) pthread_join(w->tid, nullptr); }",
             "starts pthread `w->tid` and joins it nowhere");
  refused_in(helpers, "  stop(&worker);\n  cudaFree(model.g);\n", "  cudaFree(model.g);\n  stop(&worker);\n",
             "before the thread has ended");
  refused_in(helpers, "{ pthread_create(&w->tid, nullptr, reduce, w); }",
             "{ if (w->comm) pthread_create(&w->tid, nullptr, reduce, w); }", "in a loop or under a condition");
  // A std::jthread joins in its destructor: its life ends with its block.
  std::string jthread = base;
  jthread.replace(jthread.find("  std::thread reducer"), std::string("  std::thread reducer").size(),
                  "  {\n  std::jthread reducer");
  jthread.replace(jthread.find("  reducer.join();\n"), std::string("  reducer.join();\n").size(), "  }\n");
  const Conversion j = transform(analyze("p.cu", jthread), jthread);
  EXPECT_EQ(j.converted_calls, 2) << conversion_to_text(j);
  EXPECT_TRUE(contains(conversion_to_text(j), "(started at line 8, ended by line 9)")) << conversion_to_text(j);
  std::string late = jthread;  // a free inside the jthread's block runs while it may still be running
  late.replace(late.find("  }\n  ncclAllReduce(loss"), std::string("  }\n").size(), "  cudaFree(loss);\n  }\n");
  const Conversion l = transform(analyze("p.cu", late), late);
  EXPECT_EQ(l.converted_calls, 0) << conversion_to_text(l);
  const auto refused = [&](const std::string& from, const std::string& to, const std::string& why) {
    std::string src = base;
    const auto at = src.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    src.replace(at, from.size(), to);
    const Conversion c = transform(analyze("p.cu", src), src);
    EXPECT_EQ(c.converted_calls, 0) << why << "\n" << conversion_to_text(c);
    ASSERT_FALSE(c.left.empty()) << why;
    EXPECT_TRUE(contains(c.left[0].reason, why)) << c.left[0].reason;
    EXPECT_EQ(c.source, src);
  };
  refused("  reducer.join();\n", "  cudaFree(loss);\n  reducer.join();\n",
          "calls cudaFree (line 8) before the thread has ended");
  refused("  reducer.join();\n", "  reducer.detach();\n", "detach");
  refused("ncclAllReduce(g, g, 1024, ncclFloat, ncclSum, comm, 0);", "ncclSend(g, 1024, ncclFloat, 1, comm, 0);",
          "calls ncclSend (line 7) in the thread");
  refused(
      "  std::thread reducer([&] { ncclAllReduce(g, g, 1024, ncclFloat, ncclSum, comm, 0); });\n  reducer.join();\n",
      "  for (int i = 0; i < 2; ++i) {\n"
      "    std::thread reducer([&] { ncclAllReduce(g, g, 1024, ncclFloat, ncclSum, comm, 0); });\n"
      "    reducer.join();\n  }\n",
      "in a loop");
  refused("  reducer.join();\n", "", "joins it nowhere");
  refused("  reducer.join();\n", "  if (rank == 0) reducer.join();\n", "joins it nowhere");
}

// A communicator class: member functions name the field bare (`comm`); it is the communicator
// created as `c.comm` when that is the only creation with that field name (its creation binds the
// runtime), and is matched to neither creation when two objects of the class each create one.
TEST(Transform, CommunicatorFieldNamedBareInMemberFunctions) {
  const std::string cls =
      "#include <nccl.h>\n"
      "struct Comm {\n"
      "  ncclComm_t comm; cudaStream_t stream;\n"
      "  void sum(float* b, size_t n) { ncclAllReduce(b, b, n, ncclFloat, ncclSum, comm, stream); }\n"
      "};\n";
  const std::string one = cls +
                          "int main() {\n"
                          "  Comm c; float* g;\n"
                          "  ncclCommInitRank(&c.comm, 2, id, 0);\n"
                          "  cudaMalloc(&g, 4096);\n"
                          "  c.sum(g, 1024);\n"
                          "}\n";
  Conversion c = transform(analyze("p.cu", one), one);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_init_rank(&c.comm"));
  const std::string two = cls +
                          "int main() {\n"
                          "  Comm dp, tp; float* g;\n"
                          "  ncclCommInitRank(&dp.comm, 2, id, 0);\n"
                          "  ncclCommInitRank(&tp.comm, 2, id2, 0);\n"
                          "  cudaMalloc(&g, 4096);\n"
                          "  dp.sum(g, 1024);\n"
                          "}\n";
  Conversion d = transform(analyze("p.cu", two), two);
  EXPECT_FALSE(contains(d.source, "comm_init_rank(&dp.comm")) << conversion_to_text(d);
  EXPECT_FALSE(contains(d.source, "comm_init_rank(&tp.comm"));
}

// A window is registered with the same size on every rank, so an allocation sized by the rank is
// made as large as the largest rank's, agreed over the communicator at the allocation: after the
// thread's own creation (a rank per thread, sized by the variable its communicator is created
// with), and in a template class's constructor (`DeviceBuffer<float> x(64 * (rank + 1))`) whose
// construction comes after the creation. Constructed before it, the buffer stays as written.
TEST(Transform, SizesByTheRankAreAgreedAfterTheCreationInThreadsAndTemplateConstructors) {
  const std::string thread =
      "#include <nccl.h>\n"
      "void worker(int r, ncclUniqueId id) {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, r);\n"
      "  float* x; cudaMalloc(&x, 1024 * (r + 1));\n"
      "  ncclAllReduce(x, x, 256, ncclFloat, ncclSum, comm, 0);\n"
      "}\n"
      "int main() { std::vector<std::thread> ts; for (int i = 0; i < 2; ++i) ts.emplace_back(worker, i, id); }\n";
  Conversion c = transform(analyze("t.cu", thread), thread);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc_agreed(&x, 1024 * (r + 1))")) << c.source;
  const std::string raii =
      "#include <nccl.h>\n"
      "template <typename T> struct DeviceBuffer {\n"
      "  T* ptr_ = nullptr;\n"
      "  explicit DeviceBuffer(size_t n) { cudaMalloc(&ptr_, n * sizeof(T)); }\n"
      "  ~DeviceBuffer() { cudaFree(ptr_); }\n"
      "  T* data() { return ptr_; }\n"
      "};\n"
      "int main(int argc, char** argv) {\n"
      "  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, rank);\n"
      "  DeviceBuffer<float> x(64 * (rank + 1));\n"
      "  ncclAllReduce(x.data(), x.data(), 64, ncclFloat, ncclSum, comm, 0);\n"
      "}\n";
  Conversion d = transform(analyze("r.cu", raii), raii);
  EXPECT_EQ(d.converted_calls, 1) << conversion_to_text(d);
  EXPECT_TRUE(contains(d.source, "braid_converted::sym_malloc_agreed(&ptr_, n * sizeof(T))")) << d.source;
  std::string early = raii;
  const std::string made = "  DeviceBuffer<float> x(64 * (rank + 1));\n";
  early.erase(early.find(made), made.size());
  early.insert(early.find("  ncclComm_t comm;"), made);
  Conversion e = transform(analyze("r.cu", early), early);
  EXPECT_EQ(e.converted_calls, 0) << conversion_to_text(e);
  ASSERT_EQ(e.left.size(), 1u);
  EXPECT_TRUE(contains(e.left[0].reason, "with a size that depends on the rank")) << e.left[0].reason;
  EXPECT_TRUE(contains(e.left[0].reason, "where braid cannot place it after a communicator's creation"))
      << e.left[0].reason;
}
