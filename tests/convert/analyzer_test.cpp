#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/transform.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

using namespace braid::convert;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

namespace {

std::filesystem::path corpus(const std::string& name) { return std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus" / name; }

Analysis analyze_file(const std::filesystem::path& p) { return analyze(p.filename().string(), braid::read_file(p)); }

std::vector<std::string> nccl_names(const Analysis& a) {
  std::vector<std::string> out;
  for (std::size_t i : a.nccl_collectives()) out.push_back(a.calls[i].name);
  return out;
}

const Call& first_call(const Analysis& a, const std::string& name) {
  for (const Call& c : a.calls)
    if (c.name == name) return c;
  throw std::runtime_error("no call " + name);
}

// "file:line: problem" of the UserError that analysing `source` throws.
std::string bad_input(const std::string& source) {
  try {
    analyze("bad.cu", source);
  } catch (const braid::UserError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Analyzer, AllReduceAfterKernel) {
  Analysis a = analyze_file(corpus("allreduce_after_kernel.cu"));
  EXPECT_EQ(nccl_names(a), std::vector<std::string>{"ncclAllReduce"});
  const Call& ar = first_call(a, "ncclAllReduce");
  EXPECT_EQ(ar.line, 31);
  EXPECT_EQ(ar.stream, "stream");
  EXPECT_EQ(ar.buffers, (std::vector<std::string>{"grad", "sum"}));
  EXPECT_EQ(ar.function, "main");
  ASSERT_EQ(a.buffers.count("grad"), 1u);
  EXPECT_EQ(a.buffers.at("grad").bytes_expr, "kCount * sizeof(float)");
  EXPECT_EQ(a.buffers.at("grad").bytes.value(), (1 << 20) * 4);
  EXPECT_EQ(a.buffers.at("grad").element_type, "float");
  EXPECT_EQ(a.kernels, (std::vector<std::string>{"fill", "scale"}));
  // The scale kernel precedes the all-reduce on one stream.
  const Call& scale = first_call(a, "scale");
  EXPECT_EQ(scale.kind, CallKind::Kernel);
  EXPECT_EQ(scale.launch_config.size(), 4u);
  bool ordered = false;
  for (const Edge& e : a.edges)
    if (a.calls[e.from].name == "scale" && a.calls[e.to].name == "ncclAllReduce" && e.reason == "stream stream") ordered = true;
  EXPECT_TRUE(ordered);
  EXPECT_EQ(a.annotations.size(), 2u);
}

TEST(Analyzer, RingSendRecvInGroupInLoop) {
  Analysis a = analyze_file(corpus("ring_sendrecv.cu"));
  EXPECT_EQ(nccl_names(a), (std::vector<std::string>{"ncclSend", "ncclRecv"}));
  ASSERT_EQ(a.groups.size(), 1u);
  EXPECT_EQ(a.groups[0].start_line, 32);
  EXPECT_EQ(a.groups[0].end_line, 35);
  EXPECT_EQ(a.groups[0].members.size(), 2u);
  ASSERT_EQ(a.loops.size(), 2u);  // the kernel's grid-stride loop, then the ring's steps
  EXPECT_EQ(a.loops[1].kind, "for");
  EXPECT_EQ(a.loops[1].line, 31);
  const Call& send = first_call(a, "ncclSend");
  EXPECT_EQ(send.group, 0);
  EXPECT_EQ(send.loop, 1);
  EXPECT_EQ(send.args[3].text, "next");
  EXPECT_EQ(first_call(a, "ncclRecv").buffers, std::vector<std::string>{"incoming"});
}

TEST(Analyzer, AllToAllWithCountsUsesOffsetsIntoBuffers) {
  Analysis a = analyze_file(corpus("alltoallv_counts.cu"));
  const Call& send = first_call(a, "ncclSend");
  EXPECT_EQ(send.args[0].text, "sendbuf + send_disp[p]");
  EXPECT_EQ(send.buffers, std::vector<std::string>{"sendbuf"});
  EXPECT_EQ(a.buffers.at("sendbuf").element_type, "int");
  EXPECT_EQ(a.buffers.at("sendbuf").bytes.value(), (int64_t)(64 * 1024) * 8 * 9 / 2 * 4);
  EXPECT_EQ(a.constants.at("kSlots"), (int64_t)64 * 1024 * 8 * 9 / 2);
  EXPECT_EQ(send.group, 0);
  EXPECT_EQ(send.loop, 1);  // the second loop (the first computes counts)
}

TEST(Analyzer, GroupedCollectives) {
  Analysis a = analyze_file(corpus("grouped_collectives.cu"));
  EXPECT_EQ(nccl_names(a), (std::vector<std::string>{"ncclAllReduce", "ncclAllReduce", "ncclAllGather"}));
  ASSERT_EQ(a.groups.size(), 1u);
  EXPECT_EQ(a.groups[0].members.size(), 3u);
  EXPECT_EQ(a.buffers.at("gathered").bytes.value(), 128 * 1024 * 8 * 4);
  EXPECT_EQ(a.annotations.size(), 6u);
}

TEST(Analyzer, TwoStreamsAndAnEvent) {
  Analysis a = analyze_file(corpus("two_streams.cu"));
  EXPECT_EQ(a.streams, (std::vector<std::string>{"comm_stream", "compute"}));
  EXPECT_EQ(a.events, std::vector<std::string>{"gathered_ready"});
  EXPECT_EQ(first_call(a, "ncclAllGather").stream, "comm_stream");
  EXPECT_EQ(first_call(a, "add_into").stream, "compute");
  bool event_edge = false, buffer_edge = false;
  for (const Edge& e : a.edges) {
    if (e.reason == "event gathered_ready: comm_stream -> compute" && a.calls[e.from].name == "ncclAllGather" && a.calls[e.to].name == "add_into")
      event_edge = true;
    if (e.reason.find("buffer gathered across streams") == 0) buffer_edge = true;
  }
  EXPECT_TRUE(event_edge);
  EXPECT_TRUE(buffer_edge);
}

TEST(Analyzer, CollectivesInsideALoop) {
  Analysis a = analyze_file(corpus("loop_reduce_scatter.cu"));
  EXPECT_EQ(nccl_names(a), (std::vector<std::string>{"ncclReduceScatter", "ncclAllGather"}));
  for (std::size_t i : a.nccl_collectives()) EXPECT_EQ(a.calls[i].loop, 1);
  EXPECT_EQ(a.loops[1].header, "int step=0;step<kSteps;++step");
  EXPECT_EQ(a.buffers.at("full").element_type, "__nv_bfloat16");
  EXPECT_EQ(a.buffers.at("full").bytes.value(), 256 * 1024 * 8 * 2);
  EXPECT_EQ(first_call(a, "update").loop, 1);  // the launch, not the kernel's own loop
}

TEST(Analyzer, BroadcastAndAllToAll) {
  Analysis b = analyze_file(corpus("broadcast_root.cu"));
  const Call& bc = first_call(b, "ncclBroadcast");
  EXPECT_EQ(bc.args[4].text, "0");
  EXPECT_EQ(b.buffers.at("params").bytes.value(), 3 * 1000 * 1000 * 4);
  // The raw string and the comment that spell NCCL calls are not calls.
  Analysis t = analyze_file(corpus("alltoall_tokens.cu"));
  EXPECT_EQ(nccl_names(t), std::vector<std::string>{"ncclAlltoAll"});
  EXPECT_EQ(t.buffers.at("received").bytes.value(), 2048 * 128 * 8 * 4);
}

TEST(Analyzer, HarnessSeedOfTheGemmAllGatherWorkload) {
  Analysis a = analyze_file(std::filesystem::path(BRAID_SOURCE_DIR) / "workloads/gemm_allgather/seed.cu");
  EXPECT_TRUE(a.uses_harness);
  EXPECT_EQ(nccl_names(a), std::vector<std::string>{"ncclAllGather"});
  const Call& ag = first_call(a, "ncclAllGather");
  EXPECT_EQ(ag.function, "run");
  EXPECT_EQ(ag.stream, "s");
  EXPECT_EQ(ag.buffers, (std::vector<std::string>{"a", "gathered"}));
  EXPECT_EQ(a.buffers.at("gathered").harness_name, "gathered");
  EXPECT_EQ(a.buffers.at("gathered").bytes_expr, "gemm_allgather::shape(c).gathered_elems() * 2");
  EXPECT_EQ(a.buffers.at("a").bytes_expr, "a.bytes");  // sized by the workload at run time
  bool cublas = false;
  for (const Call& c : a.calls) cublas = cublas || (c.kind == CallKind::Cublas && c.name == "cublasSetStream");
  EXPECT_TRUE(cublas);
}

TEST(Analyzer, IntegerExpressions) {
  std::map<std::string, int64_t> k{{"kN", 10}};
  EXPECT_EQ(evaluate_integer("kN * sizeof(float) + (1 << 4)", k).value(), 56);
  EXPECT_EQ(evaluate_integer("(size_t)kN * 3 / 2 - -1", k).value(), 16);
  EXPECT_EQ(evaluate_integer("ns::kN % 4", k).value(), 2);
  EXPECT_FALSE(evaluate_integer("n * 4", k).has_value());
  EXPECT_FALSE(evaluate_integer("kN / 0", k).has_value());
  EXPECT_EQ(base_variable("(void*)buf"), "buf");
  EXPECT_EQ(base_variable("static_cast<const float*>(x) + 4"), "x");
  EXPECT_EQ(base_variable("&y[3]"), "y");
  EXPECT_EQ(base_variable("a.ptr"), "a");
}

// A macro whose body calls NCCL is followed at its uses (analyzer_macros_test.cpp); one whose
// definition depends on the build (two bodies, no #undef between) is reported at each use.
TEST(Analyzer, MacroDefinitionsHidingCallsAreReported) {
  const std::string src = "#include <nccl.h>\n#ifdef SUM\n#define AR(b) ncclAllReduce(b, b, 4, ncclFloat, ncclSum, comm, 0)\n#else\n"
                          "#define AR(b) ncclAllReduce(b, b, 4, ncclFloat, ncclMax, comm, 0)\n#endif\nint main() {\n float* b;\n"
                          " cudaMalloc(&b, 16);\n AR(b);\n ncclAllGather(b, b, 1, ncclFloat, comm, 0);\n}\n";
  Analysis a = analyze("m.cu", src);
  ASSERT_EQ(a.unsupported.size(), 1u);
  EXPECT_EQ(a.unsupported[0].line, 10);
  EXPECT_EQ(a.unsupported[0].construct, "AR (macro)");
  EXPECT_TRUE(contains(a.unsupported[0].reason, "defined more than once")) << a.unsupported[0].reason;
  EXPECT_EQ(a.nccl_collectives().size(), 1u);  // the all-gather; AR's call is not guessed
}

TEST(Analyzer, BadInputNamesFileAndLine) {
  EXPECT_EQ(bad_input("This is a plain English paragraph, not a program.\n"),
            "bad.cu: is not C++/CUDA source (no includes, declarations or functions)");
  EXPECT_EQ(bad_input("#include <cstdio>\nint main() { std::printf(\"hi\"); return 0; }\n"),
            "bad.cu: has no NCCL collective or point-to-point call (nothing to convert)");
  EXPECT_EQ(bad_input("#include <nccl.h>\nint main() {\n  float* b;\n  cudaMalloc(&b, 64);\n  ncclGroupStart();\n  ncclAllReduce(b, b, 16, ncclFloat, "
                      "ncclSum, comm, 0);\n  return 0;\n}\n"),
            "bad.cu:5: ncclGroupStart without a matching ncclGroupEnd");
  EXPECT_EQ(bad_input("#include <nccl.h>\nint main() {\n  ncclGroupEnd();\n}\n"), "bad.cu:3: ncclGroupEnd without a matching ncclGroupStart");
  EXPECT_EQ(bad_input("#include <nccl.h>\nint main() {\n  /* never closed\n"), "bad.cu:3: not C++/CUDA: unterminated /* comment");
  EXPECT_EQ(bad_input(std::string("\x7f" "ELF\0\1\1", 7)), "bad.cu: is not C++/CUDA source (binary data)");
}

TEST(Analyzer, NestedTemplatesClosingWithThreeBracketsAreNotLaunches) {
  const std::string src =
      "#include <vector>\n#include <nccl.h>\n"
      "std::vector<std::vector<std::vector<int>>> table;\n"
      "template <int N> __global__ void k(float* x) {}\n"
      "int main() {\n"
      "  float* x;\n"
      "  cudaMalloc(&x, 64 * sizeof(float));\n"
      "  k<4><<<1, 32>>>(x);\n"
      "  ncclAllReduce(x, x, 64, ncclFloat, ncclSum, comm, 0);\n"
      "}\n";
  Analysis a = analyze("t.cu", src);
  ASSERT_EQ(a.calls.size(), 3u);
  EXPECT_EQ(a.calls[1].kind, CallKind::Kernel);
  EXPECT_EQ(a.calls[1].name, "k");
  EXPECT_EQ(a.calls[1].stream, "0");  // default stream: the launch names none
  EXPECT_EQ(a.calls[1].buffers, std::vector<std::string>{"x"});
  EXPECT_TRUE(a.unsupported.empty());
}

TEST(Analyzer, ConstructsItDoesNotFollowAreListedWithTheirLines) {
  const std::string src =
      "#include <nccl.h>\n"
      "int main() {\n"
      "  float* x;\n"
      "  cudaMalloc(&x, 256);\n"
      "  ncclCommSplit(comm, 0, 0, &sub, nullptr);\n"
      "  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);\n"
      "  ncclAllReduce(x, x, 64, ncclFloat, ncclSum, comm, s);\n"
      "  auto fn = &ncclAllGather;\n"
      "}\n";
  Analysis a = analyze("u.cu", src);
  ASSERT_EQ(a.unsupported.size(), 2u);
  EXPECT_EQ(a.unsupported[0].line, 6);
  EXPECT_EQ(a.unsupported[0].construct, "cudaStreamBeginCapture");
  EXPECT_EQ(a.unsupported[1].line, 8);
  EXPECT_EQ(a.unsupported[1].construct, "ncclAllGather (not called by name)");
  ASSERT_EQ(a.comm_inits.size(), 1u);
  EXPECT_EQ(a.comm_inits[0].path, "sub");
  for (const Analysis& b : {analyze_file(corpus("two_streams.cu")), analyze_file(corpus("ring_sendrecv.cu"))}) EXPECT_TRUE(b.unsupported.empty());
}

TEST(Analyzer, AccessPathsNameAllocationSitesNotVariables) {
  EXPECT_EQ(access_path("&layers[l].w", true), "layers[].w");
  EXPECT_EQ(access_path("(void**)&bufs[i]", true), "bufs[]");
  EXPECT_EQ(access_path("(void**)sendbuff + i", true), "sendbuff[]");
  EXPECT_EQ(access_path("&model->params.shard", true), "model.params.shard");
  EXPECT_EQ(access_path("&kv[0]", true), "kv[0]");
  EXPECT_EQ(access_path("(float*)(model.workspace + 4096)", false), "model.workspace");
  EXPECT_EQ(access_path("static_cast<const void*>(bufs[i])", false), "bufs[]");
  EXPECT_EQ(access_path("&buf[off]", false), "buf");
  EXPECT_EQ(access_path("send_buf + soff", false), "send_buf");
  EXPECT_EQ(access_path("kv[1 - cur]", false), "kv[]");
  EXPECT_EQ(access_path("get_buffer()", false), "");
  EXPECT_TRUE(path_matches("kv[]", "kv[0]"));
  EXPECT_TRUE(path_matches("kv[1]", "kv[]"));
  EXPECT_FALSE(path_matches("p[0]", "p[1]"));
  EXPECT_FALSE(path_matches("layers[].w", "layers[].out"));
  EXPECT_FALSE(path_matches("x", "x[]"));
}

TEST(Analyzer, BuffersAreFollowedThroughHelpersAliasesAndFields) {
  const std::string src =
      "#include <nccl.h>\n"
      "struct Layer { float* w; float* out; };\n"
      "struct Model { Layer layers[4]; float* ws; };\n"
      "void reduce(float* g, size_t n, ncclComm_t c, cudaStream_t s) {\n"
      "  ncclAllReduce(g, g, n, ncclFloat, ncclSum, c, s);\n"
      "}\n"
      "void step(Model* m, ncclComm_t c, cudaStream_t s) {\n"
      "  for (int l = 0; l < 4; ++l) reduce(m->layers[l].out, 64, c, s);\n"
      "  float* logits = (float*)(m->ws + 16);\n"
      "  reduce(logits, 16, c, s);\n"
      "}\n"
      "void orphan(float* p, ncclComm_t c) { ncclAllGather(p, p, 4, ncclFloat, c, 0); }\n"
      "int main() {\n"
      "  Model model;\n"
      "  ncclComm_t comm;\n"
      "  ncclCommInitRank(&comm, 2, id, 0);\n"
      "  for (int l = 0; l < 4; ++l) {\n"
      "    cudaMalloc(&model.layers[l].w, 256);\n"
      "    cudaMalloc(&model.layers[l].out, 256);\n"
      "  }\n"
      "  cudaMalloc(&model.ws, 4096);\n"
      "  step(&model, comm, 0);\n"
      "}\n";
  Analysis a = analyze("h.cu", src);
  ASSERT_EQ(a.nccl_collectives().size(), 2u);
  const Call& ar = a.calls[a.nccl_collectives()[0]];
  EXPECT_TRUE(ar.unresolved.empty()) << ar.unresolved;
  EXPECT_EQ(ar.buffers, (std::vector<std::string>{"model.layers[].out", "model.ws"}));  // not `w`: another allocation site
  EXPECT_EQ(ar.comm_paths, std::vector<std::string>{"comm"});
  const Call& ag = a.calls[a.nccl_collectives()[1]];
  EXPECT_NE(ag.unresolved.find("parameter of orphan(), which is not called"), std::string::npos) << ag.unresolved;
  Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 1);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&model.layers[l].out, 256)"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&model.ws, 4096)"));
  EXPECT_TRUE(contains(c.source, "    cudaMalloc(&model.layers[l].w, 256)"));  // never touched by a converted call
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_init_rank(&comm"));
  ASSERT_EQ(c.left.size(), 1u);
  EXPECT_EQ(c.left[0].line, 12);
}

TEST(Analyzer, RankConditionalAllocationsAndP2pAreTold) {
  const std::string src =
      "#include <nccl.h>\n"
      "int main() {\n"
      "  float *a, *b;\n"
      "  cudaMalloc(&a, 1024);\n"
      "  if (rank == 0) cudaMalloc(&b, 1024);\n"
      "  ncclAllReduce(b, b, 256, ncclFloat, ncclSum, comm, 0);\n"
      "  if (rank > 0) ncclRecv(a, 256, ncclFloat, rank - 1, comm, 0);\n"
      "  ncclAllReduce(a, a, 256, ncclFloat, ncclAvg, comm, 0);\n"
      "}\n";
  Analysis a = analyze("r.cu", src);
  EXPECT_TRUE(a.buffers.at("b").conditional);
  EXPECT_FALSE(a.buffers.at("a").conditional);
  Conversion c = transform(a, src);
  // The ncclAvg all-reduce would make `a` a window under the host receive, whose other end is
  // not one: it stays host too (a send/recv pair is windowed on both ends or on neither).
  EXPECT_EQ(c.converted_calls, 0);
  ASSERT_EQ(c.left.size(), 3u);
  EXPECT_NE(c.left[0].reason.find("allocated under a condition"), std::string::npos) << c.left[0].reason;
  EXPECT_NE(c.left[1].reason.find("runs under a condition"), std::string::npos) << c.left[1].reason;
  EXPECT_NE(c.left[2].reason.find("buffer `a` is also used by the host send/recv at line 7"), std::string::npos) << c.left[2].reason;
}

