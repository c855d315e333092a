// The analyzer and the rules on idioms of users' programs that the corpus met (corpus_user):
// lambdas and std::function helpers, range-for allocation, stores through a pointer, functions
// called through a struct's function-pointer field, helpers called inside an NCCL group,
// communicators created per local GPU, macros of the program's own headers and of -D flags.
#include <gtest/gtest.h>

#include <filesystem>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/build_flags.hpp"
#include "braid/convert/transform.hpp"
#include "braid/util/fs.hpp"

#include "analyzer_test_util.hpp"

using namespace braid::convert;
using namespace braid::convert::test;

namespace {

const std::string kPrologue =
    "#include <nccl.h>\n"
    "#include <cuda_runtime.h>\n"
    "#include <functional>\n"
    "#include <vector>\n";

}  // namespace

// A lambda bound to a name is a function: its parameters are followed to its calls, what it
// captures to the enclosing function's variables; range-for `auto&` allocations name the container.
TEST(AnalyzerUserIdioms, LambdasAndRangeForAllocations) {
  const std::string src =
      kPrologue +
      "struct Layer { float* shard; float* grad; };\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s;\n"
      "  ncclCommInitRank(&comm, 2, id, 0);\n"
      "  std::vector<Layer> layers(4);\n"
      "  for (auto& L : layers) { cudaMalloc(&L.shard, 1024); cudaMalloc(&L.grad, 1024); }\n"
      "  float* full; cudaMalloc(&full, 4096);\n"
      "  auto gather = [&](int l) { ncclAllGather(layers[l].shard, full, 256, ncclFloat, comm, s); };\n"
      "  std::function<void(const Layer&)> scatter = [&](const Layer& L) {\n"
      "    ncclAllReduce(L.grad, L.grad, 256, ncclFloat, ncclAvg, comm, s);\n"
      "  };\n"
      "  for (int l = 0; l < 4; ++l) { gather(l); scatter(layers[l]); }\n"
      "  for (auto& L : layers) { cudaFree(L.shard); cudaFree(L.grad); }\n"
      "  cudaFree(full);\n"
      "}\n";
  const Analysis a = analyze("user.cu", src);
  ASSERT_TRUE(a.buffers.count("layers[].shard"));
  ASSERT_TRUE(a.buffers.count("layers[].grad"));
  const Call& rs = first_call(a, "ncclAllReduce");
  EXPECT_EQ(rs.unresolved, "");
  EXPECT_EQ(rs.arg_buffers.at(1), std::vector<std::string>{"layers[].grad"});
  EXPECT_EQ(rs.comm_paths, std::vector<std::string>{"comm"});
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  // The all-reduce's windows are the layers' gradients, allocated through the range-for reference.
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&L.grad, 1024)"))
      << c.source.substr(c.source.find("int main"));
  EXPECT_TRUE(contains(c.source, "cudaMalloc(&L.shard, 1024)"));
}

// Two lambdas of one name are not one function: their calls stay unfollowed, host NCCL.
TEST(AnalyzerUserIdioms, ALambdaNameDefinedTwiceIsNotFollowed) {
  const std::string src = kPrologue +
                          "ncclComm_t comm; cudaStream_t s;\n"
                          "void a(float* x) { auto red = [&](float* p) { ncclAllReduce(p, p, 4, ncclFloat, ncclSum, "
                          "comm, s); }; red(x); }\n"
                          "void b(float* y) { auto red = [&](float* q) { ncclAllReduce(q, q, 4, ncclFloat, ncclSum, "
                          "comm, s); }; red(y); }\n"
                          "int main() { float* g; cudaMalloc(&g, 16); a(g); b(g); }\n";
  const Analysis a = analyze("user.cu", src);
  for (std::size_t i : a.nccl_collectives()) EXPECT_NE(a.calls[i].unresolved, "");
}

// `*p = v;` stores through p: p still points at its allocation (llm.c's unified buffer).
TEST(AnalyzerUserIdioms, AStoreThroughAPointerIsNoAlias) {
  const std::string src = kPrologue +
                          "struct Cfg { float* unified; ncclComm_t comm; cudaStream_t s; };\n"
                          "float sum(float value, Cfg* cfg) {\n"
                          "  float* u = cfg->unified;\n"
                          "  *u = value;\n"
                          "  ncclAllReduce(u, u, 1, ncclFloat, ncclSum, cfg->comm, cfg->s);\n"
                          "  return *u;\n"
                          "}\n"
                          "int main() { Cfg cfg; cudaMallocManaged(&cfg.unified, 4); sum(1.0f / 3, &cfg); }\n";
  const Analysis a = analyze("user.cu", src);
  const Call& c = first_call(a, "ncclAllReduce");
  EXPECT_EQ(c.unresolved, "");
  EXPECT_EQ(c.arg_buffers.at(0), std::vector<std::string>{"cfg.unified"});
}

// nccl-tests' shape: the collective in a function stored in a struct's function-pointer field,
// called through it inside a group with `in_place ? recv : send`; the call joins that group.
TEST(AnalyzerUserIdioms, FunctionPointerFieldsAreFollowedToTheirCalls) {
  const std::string src =
      kPrologue +
      "int RunColl(void* sendbuff, void* recvbuff, size_t count, ncclComm_t comm, cudaStream_t s) {\n"
      "  ncclAllReduce(sendbuff, recvbuff, count, ncclFloat, ncclSum, comm, s);\n"
      "  return 0;\n"
      "}\n"
      "struct testColl { const char name[20]; int (*runColl)(void*, void*, size_t, ncclComm_t, cudaStream_t); };\n"
      "struct testColl allReduceTest = {\"AllReduce\", RunColl};\n"
      "struct Args { void* send; void* recv; ncclComm_t comm; cudaStream_t s; struct testColl* coll; };\n"
      "void start(struct Args* args, int in_place) {\n"
      "  ncclGroupStart();\n"
      "  args->coll->runColl(in_place ? args->recv : args->send, args->recv, 256, args->comm, args->s);\n"
      "  ncclGroupEnd();\n"
      "}\n"
      "int main() {\n"
      "  struct Args args; ncclUniqueId id;\n"
      "  args.coll = &allReduceTest;\n"
      "  ncclCommInitRank(&args.comm, 2, id, 0);\n"
      "  cudaMalloc(&args.send, 1024); cudaMalloc(&args.recv, 1024);\n"
      "  start(&args, 0); start(&args, 1);\n"
      "}\n";
  const Analysis a = analyze("user.cu", src);
  const Call& c = first_call(a, "ncclAllReduce");
  EXPECT_EQ(c.unresolved, "");
  EXPECT_EQ(c.arg_buffers.at(0), (std::vector<std::string>{"args.recv", "args.send"}));
  ASSERT_GE(c.group, 0);
  const Conversion conv = transform(a, src);
  EXPECT_EQ(conv.converted_calls, 1) << conversion_to_text(conv);
  EXPECT_TRUE(contains(conv.source, "braid_converted::group_start()"));
}

// A function used as a value in any other way (a callback, a std::function copy) may be called
// with arguments the file does not show: its parameters are not followed.
TEST(AnalyzerUserIdioms, AFunctionUsedAsAValueKeepsItsParametersUnfollowed) {
  const std::string src = kPrologue +
                          "ncclComm_t comm; cudaStream_t s;\n"
                          "void reduce(float* g) { ncclAllReduce(g, g, 4, ncclFloat, ncclSum, comm, s); }\n"
                          "void for_each_bucket(void (*f)(float*));\n"
                          "int main() { float* g; cudaMalloc(&g, 16); reduce(g); for_each_bucket(reduce); }\n";
  const Analysis a = analyze("user.cu", src);
  const Call& c = first_call(a, "ncclAllReduce");
  EXPECT_TRUE(contains(c.unresolved, "also used as a value at line 8")) << c.unresolved;
}

// A send in a helper (or lambda) called between ncclGroupStart/End is a member of that group:
// the brackets convert with it, so it never launches alone. Called inside two groups, it stays.
TEST(AnalyzerUserIdioms, HelpersCalledInsideAGroupJoinIt) {
  const std::string body =
      "ncclComm_t comm; cudaStream_t s;\n"
      "void send_to(float* b, int peer) { ncclSend(b, 4, ncclFloat, peer, comm, s); }\n"
      "void recv_from(float* b, int peer) { ncclRecv(b, 4, ncclFloat, peer, comm, s); }\n"
      "int main() {\n"
      "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  float *a, *b; cudaMalloc(&a, 16); cudaMalloc(&b, 16);\n"
      "  ncclGroupStart(); send_to(a, 1); recv_from(b, 1); ncclGroupEnd();\n";
  const std::string one = kPrologue + body + "}\n";
  const Conversion c = convert_text(one);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(
      c.source, "braid_converted::group_start(); send_to(a, 1); recv_from(b, 1); braid_converted::group_end<0>();"))
      << c.source.substr(c.source.find("int main"));
  const std::string two = kPrologue + body + "  ncclGroupStart(); recv_from(b, 1); send_to(a, 1); ncclGroupEnd();\n}\n";
  const Analysis a2 = analyze("user.cu", two);
  EXPECT_TRUE(contains(first_call(a2, "ncclSend").unresolved, "runs inside the groups at lines"));
  EXPECT_EQ(transform(a2, two).converted_calls, 0);
}

// One communicator per local GPU (nccl-tests' `-g N`): several ranks in one process, untouched.
// nccl-tests' `-g N`: one thread creates a communicator per GPU inside one group. Converted: that
// group is bracketed too, so the runtime binds the communicators together when it ends.
TEST(AnalyzerUserIdioms, CommunicatorsCreatedInALoopOfOneThreadConvert) {
  const std::string src =
      kPrologue +
      "int main(int argc, char** argv) {\n"
      "  int n = argc; ncclComm_t comms[8]; float* bufs[8]; ncclUniqueId id;\n"
      "  ncclGroupStart();\n"
      "  for (int i = 0; i < n; i++) { cudaSetDevice(i); ncclCommInitRank(comms + i, n, id, i); }\n"
      "  ncclGroupEnd();\n"
      "  for (int i = 0; i < n; i++) cudaMalloc(&bufs[i], 16);\n"
      "  ncclGroupStart();\n"
      "  for (int i = 0; i < n; i++) ncclAllReduce(bufs[i], bufs[i], 4, ncclFloat, ncclSum, comms[i], 0);\n"
      "  ncclGroupEnd();\n"
      "}\n";
  const Analysis a = analyze("user.cu", src);
  EXPECT_TRUE(a.single_process_multi_gpu);
  EXPECT_TRUE(a.one_thread_drives_ranks);
  EXPECT_TRUE(contains(a.single_process_why, "in a loop (line 8)")) << a.single_process_why;
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  // The creating group opens and closes through the runtime (bound at its end).
  const std::size_t create = c.source.find("braid_converted::comm_init_rank(comms + i");
  ASSERT_NE(create, std::string::npos) << c.source;
  EXPECT_NE(c.source.rfind("braid_converted::group_start()", create), std::string::npos);
  EXPECT_NE(c.source.find("braid_converted::group_end<", create), std::string::npos);
}

// A program constant named like an enumerator (llm.c's `ncclFloatX`) is decided at run time;
// fp8 enumerators still have no device reduction.
TEST(AnalyzerUserIdioms, OnlyNcclEnumeratorsAreLiteralTypes) {
  const std::string src = kPrologue +
                          "const ncclDataType_t ncclFloatX = ncclBfloat16;\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  void* g; cudaMalloc(&g, 64);\n"
                          "  ncclAllReduce(g, g, 8, ncclFloatX, ncclAvg, comm, s);\n"
                          "  ncclAllReduce(g, g, 8, ncclFloat8e4m3, ncclSum, comm, s);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1);
  ASSERT_EQ(c.left.size(), 1u);
  EXPECT_TRUE(contains(c.left[0].reason, "ncclFloat8e4m3")) << c.left[0].reason;
}

// Macros of the program's quoted headers (nested too) and of -D flags are read at their uses;
// under -D the #ifdef'd alternative of a two-body macro is the one compiled.
TEST(AnalyzerUserIdioms, HeaderAndCommandLineMacros) {
  const auto dir = std::filesystem::temp_directory_path() / ("braid-idioms-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "inc");
  braid::write_file_atomic(dir / "common.h",
                           "#pragma once\n#include \"inc/check.h\"\n"
                           "#define AR_SUM(b, n) CHECK(ncclAllReduce(b, b, n, REAL_T, ncclSum, comm, s))\n");
  braid::write_file_atomic(dir / "inc/check.h",
                           "#define CHECK(x) do { if ((x) != ncclSuccess) return 1; } while (0)\n");
  const std::string src = kPrologue +
                          "#include \"common.h\"\n"
                          "#ifdef USE_BF16\n#define REAL_T ncclBfloat16\n#else\n#define REAL_T ncclFloat\n#endif\n"
                          "ncclComm_t comm; cudaStream_t s;\n"
                          "int main() {\n"
                          "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  float* g; cudaMalloc(&g, 64);\n"
                          "  AR_SUM(g, 16);\n"
                          "  return 0;\n"
                          "}\n";
  const std::string file = (dir / "user.cu").string();
  const Analysis without = analyze(file, src);
  ASSERT_EQ(without.macro_uses.size(), 1u);
  EXPECT_EQ(first_call(without, "ncclAllReduce").args[3].text, "REAL_T");  // two bodies, no -D: decided at run time
  const Analysis with = analyze(file, src, true, SourceContext{{}, {"USE_BF16"}});
  EXPECT_EQ(first_call(with, "ncclAllReduce").args[3].text, "ncclBfloat16");
  const Conversion c = transform(with, src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  // The use is written as its expansion; macros without NCCL calls in it stay for the compiler.
  EXPECT_TRUE(contains(c.source, "CHECK(braid_converted::all_reduce<0>(g, g, 16, REAL_T, ncclSum, comm, s));"))
      << c.source;
  // -I: the header found in an include folder rather than beside the file.
  const Analysis elsewhere = analyze("user.cu", src, true, SourceContext{{dir.string()}, {}});
  EXPECT_EQ(elsewhere.macro_uses.size(), 1u);
  std::filesystem::remove_all(dir);
}

// A field written with what a helper returns (llm.c: `model.params_memory =
// malloc_and_point_parameters(...)` in main, used through a parameter elsewhere) is the helper's
// allocation; a field written with something braid cannot follow keeps the reason.
TEST(AnalyzerUserIdioms, FieldsWrittenWithAHelpersResult) {
  const std::string src =
      kPrologue +
      "struct Model { void* params; size_t n; };\n"
      "ncclComm_t comm; cudaStream_t s;\n"
      "void* alloc_params(size_t n) { void* p; cudaMalloc(&p, n * 4); return p; }\n"
      "void gather(Model* m, int rank, int world) {\n"
      "  float* params = (float*)m->params;\n"
      "  size_t shard = m->n / world;\n"
      "  ncclAllGather(params + shard * rank, params, shard, ncclFloat, comm, s);\n"
      "}\n"
      "void* external_alloc(size_t);\n"
      "void sum(Model* m) { ncclAllReduce(m->params, m->params, m->n, ncclFloat, ncclSum, comm, s); }\n"
      "int main() {\n"
      "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  Model model; model.n = 1024;\n"
      "  model.params = alloc_params(model.n);\n"
      "  gather(&model, 0, 2);\n"
      "  Model other; other.params = external_alloc(64);\n"
      "  sum(&other);\n"
      "}\n";
  const Analysis a = analyze("user.cu", src);
  const Call& g = first_call(a, "ncclAllGather");
  EXPECT_EQ(g.unresolved, "");
  EXPECT_EQ(g.arg_buffers.at(1), std::vector<std::string>{"p"});
  EXPECT_NE(first_call(a, "ncclAllReduce").unresolved, "");
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "void* p; braid_converted::sym_malloc(&p, n * 4); return p;"));
}

// Megatron's shape: communicators in a singleton reached through an accessor (`mpu().dp_comm`,
// created through `auto& s = mpu()`), buffers through getters (`fc->weight()`), a buffer
// parameter given nullptr by a call that does not use it, and methods of one name in two classes.
TEST(AnalyzerUserIdioms, AccessorsSingletonsAndGetters) {
  const std::string src =
      kPrologue +
      "struct State { ncclComm_t comm; cudaStream_t s; };\n"
      "static State& mpu() { static State state; return state; }\n"
      "void init() { auto& s = mpu(); ncclUniqueId id; ncclCommInitRank(&s.comm, 2, id, 0); }\n"
      "class Col {\n"
      " public:\n"
      "  Col() { cudaMalloc(&w_, 64); }\n"
      "  float* weight() { return w_; }\n"
      "  void forward(float* x, float* full, int n) { if (full) ncclAllGather(x, full, n, ncclFloat, mpu().comm, "
      "mpu().s); }\n"
      " private:\n"
      "  float* w_;\n"
      "};\n"
      "class Row {\n"
      " public:\n"
      "  void forward(float* x, int n) { (void)x; (void)n; }\n"
      "};\n"
      "int main() {\n"
      "  init();\n"
      "  Col c; Row r; float *x, *full; cudaMalloc(&x, 64); cudaMalloc(&full, 128);\n"
      "  c.forward(x, nullptr, 16); c.forward(x, full, 16); r.forward(x, 3);\n"
      "  if (mpu().comm) ncclAllReduce(c.weight(), c.weight(), 16, ncclFloat, ncclSum, mpu().comm, mpu().s);\n"
      "}\n";
  const Analysis a = analyze("user.cu", src);
  ASSERT_EQ(a.comm_inits.size(), 1u);
  EXPECT_EQ(a.comm_inits[0].path, "state.comm");
  const Call& ag = first_call(a, "ncclAllGather");
  EXPECT_EQ(ag.unresolved, "");
  EXPECT_EQ(ag.arg_buffers.at(1), std::vector<std::string>{"full"});
  const Call& ar = first_call(a, "ncclAllReduce");
  EXPECT_EQ(ar.unresolved, "");
  EXPECT_EQ(ar.arg_buffers.at(0), std::vector<std::string>{"w_"});
  EXPECT_EQ(ar.comm_paths, std::vector<std::string>{"state.comm"});
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_init_rank(&s.comm, 2, id, 0)"));
}

// A lambda bound to no name (a hook pushed into a vector) may be called anywhere, inside a group
// too: in a file with groups, its calls stay host NCCL; without groups they convert.
TEST(AnalyzerUserIdioms, UnnamedLambdasInAFileWithGroups) {
  const std::string hooks = kPrologue +
                            "int main() {\n"
                            "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                            "  float* g; cudaMalloc(&g, 64);\n"
                            "  std::vector<std::function<void()>> hooks;\n"
                            "  hooks.push_back([&] { ncclAllReduce(g, g, 16, ncclFloat, ncclSum, comm, s); });\n"
                            "  for (auto& h : hooks) h();\n";
  EXPECT_EQ(convert_text(hooks + "}\n").converted_calls, 1);
  const std::string grouped = hooks + "  ncclGroupStart(); hooks[0](); ncclGroupEnd();\n}\n";
  const Analysis a = analyze("user.cu", grouped);
  EXPECT_TRUE(contains(first_call(a, "ncclAllReduce").unresolved, "lambda bound to no name"));
  EXPECT_EQ(transform(a, grouped).converted_calls, 0);
}

// A buffer argument that may be a window or stream-ordered memory depending on the rank would run
// on the device on some ranks and as host NCCL on others: it stays host NCCL.
TEST(AnalyzerUserIdioms, AnArgumentOfMixedAllocatorsStaysHost) {
  const std::string src =
      kPrologue +
      "int main(int argc, char** argv) {\n"
      "  int rank = argc; ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, rank);\n"
      "  float *a, *b; cudaMalloc(&a, 64); cudaMallocAsync(&b, 64, s);\n"
      "  ncclAllReduce(rank == 0 ? a : b, a, 16, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 0);
  ASSERT_EQ(c.left.size(), 1u);
  EXPECT_TRUE(contains(c.left[0].reason, "ranks could disagree")) << c.left[0].reason;
}

// A non-blocking creation (`config.blocking = 0`): NCCL registers no symmetric window on such a
// communicator, so nothing on it converts (each call says why); the same creation with a
// blocking config binds and its sends convert.
TEST(AnalyzerUserIdioms, NonBlockingCreationsDoNotBind) {
  const auto program = [](const std::string& config_line) {
    return kPrologue +
           "int main(int argc, char** argv) {\n"
           "  int rank = argc; ncclComm_t comm; ncclUniqueId id; cudaStream_t s;\n"
           "  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;\n" +
           config_line +
           "  ncclCommInitRankConfig(&comm, 2, id, rank, &config);\n"
           "  float* b; cudaMalloc(&b, 64);\n"
           "  if (rank == 0) ncclSend(b, 16, ncclFloat, 1, comm, s);\n"
           "  if (rank == 1) ncclRecv(b, 16, ncclFloat, 0, comm, s);\n"
           "}\n";
  };
  const std::string nonblocking = program("  config.blocking = 0;\n");
  const Analysis a = analyze("user.cu", nonblocking);
  ASSERT_EQ(a.comm_inits.size(), 1u);
  EXPECT_TRUE(a.comm_inits[0].nonblocking);
  const Conversion none = transform(a, nonblocking);
  EXPECT_EQ(none.converted_calls, 0);
  ASSERT_EQ(none.left.size(), 2u);
  for (const Unconverted& u : none.left) EXPECT_TRUE(contains(u.reason, "created non-blocking (line")) << u.reason;
  const Conversion blocking = convert_text(program("  config.cgaClusterSize = 2;\n"));
  EXPECT_EQ(blocking.converted_calls, 2) << conversion_to_text(blocking);
  EXPECT_TRUE(contains(blocking.source, "braid_converted::comm_init_rank_config(&comm"));
}

// A user's data-parallel communicator made non-blocking (polled in its own loop) beside a blocking
// tensor-parallel one: the non-blocking one is never the one bound, even with more calls on it, so
// the blocking one's all-reduce still converts.
TEST(AnalyzerUserIdioms, ABlockingCommunicatorBesideANonBlockingOneConverts) {
  const std::string src = kPrologue +
                          "static void make_dp(ncclComm_t* dp, ncclUniqueId id, int n, int r) {\n"
                          "  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;\n"
                          "  cfg.blocking = 0;\n"
                          "  ncclCommInitRankConfig(dp, n, id, r, &cfg);\n"
                          "}\n"
                          "int main(int argc, char** argv) {\n"
                          "  int rank = argc; ncclUniqueId id, id2; cudaStream_t s;\n"
                          "  ncclComm_t tp, dp;\n"
                          "  ncclCommInitRank(&tp, 2, id, rank);\n"
                          "  make_dp(&dp, id2, 2, rank);\n"
                          "  float *act, *grad;\n"
                          "  cudaMalloc(&act, 4096);\n"
                          "  cudaMalloc(&grad, 4096);\n"
                          "  ncclAllReduce(act, act, 1024, ncclFloat, ncclSum, tp, s);\n"
                          "  ncclAllReduce(grad, grad, 512, ncclFloat, ncclSum, dp, s);\n"
                          "  ncclAllReduce(grad + 512, grad + 512, 512, ncclFloat, ncclSum, dp, s);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  ASSERT_EQ(c.left.size(), 2u) << conversion_to_text(c);
  for (const Unconverted& u : c.left) EXPECT_TRUE(contains(u.reason, "created non-blocking (line")) << u.reason;
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_init_rank(&tp")) << c.source;
  // The same helper with a blocking config: both communicators convert, each bound at its creation
  // (dp's through the pointer the helper is given), where every rank passes.
  std::string blocking = src;
  blocking.replace(blocking.find("cfg.blocking = 0;"), 17, "cfg.cgaClusterSize = 2;");
  const Conversion b = convert_text(blocking);
  EXPECT_EQ(b.converted_calls, 3) << conversion_to_text(b);
  EXPECT_TRUE(contains(b.source, "braid_converted::comm_init_rank(&tp")) << b.source;
  EXPECT_TRUE(contains(b.source, "braid_converted::comm_init_rank_config(dp, n, id, r, &cfg)")) << b.source;
}

// A window the program registers on a whole buffer is the runtime's own (NCCL's symmetric-memory
// examples: ncclMemAlloc, then ncclCommWindowRegister, then host collectives): the calls on it
// convert, and the program's register/deregister get and leave the runtime's handle. A window from
// inside a buffer is never registered a second time: calls that need it as a window stay host NCCL.
// ncclCommRegister is a local registration, not a window: it stays as written and the buffer's
// calls convert (NCCL's example 04_user_buffer_registration).
TEST(AnalyzerUserIdioms, TheProgramsWholeBufferWindowIsTheRuntimesOwn) {
  const std::string src = kPrologue +
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  void *mine, *plain; ncclWindow_t win;\n"
                          "  ncclMemAlloc(&mine, 4096); cudaMalloc(&plain, 4096);\n"
                          "  ncclCommWindowRegister(comm, mine, 4096, &win, NCCL_WIN_COLL_SYMMETRIC);\n"
                          "  ncclAllReduce(mine, mine, 16, ncclFloat, ncclSum, comm, s);\n"
                          "  ncclAllReduce(plain, plain, 16, ncclFloat, ncclSum, comm, s);\n"
                          "  ncclCommWindowDeregister(comm, win);\n"
                          "  ncclMemFree(mine);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_nccl_alloc(&mine, 4096)")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::window_register(comm, mine, 4096, &win, NCCL_WIN_COLL_SYMMETRIC)"));
  EXPECT_TRUE(contains(c.source, "braid_converted::window_deregister(comm, win)"));

  for (const std::string other :
       {"ncclCommWindowRegister(comm, (char*)mine + 1024, 2048, &win, NCCL_WIN_COLL_SYMMETRIC)"}) {
    std::string own = src;
    const std::string whole = "ncclCommWindowRegister(comm, mine, 4096, &win, NCCL_WIN_COLL_SYMMETRIC)";
    own.replace(own.find(whole), whole.size(), other);
    own.replace(own.find("ncclWindow_t win;"), 17, "ncclWindow_t win; void* handle;");
    const Conversion k = convert_text(own);
    EXPECT_EQ(k.converted_calls, 1) << other << "\n" << conversion_to_text(k);
    bool told = false;
    for (const Unconverted& u : k.left) told = told || contains(u.reason, "registered by the program itself (line 9");
    EXPECT_TRUE(told) << conversion_to_text(k);
    EXPECT_TRUE(contains(k.source, "ncclMemAlloc(&mine, 4096)"));
    EXPECT_FALSE(contains(k.source, "braid_converted::window_register"));
  }

  std::string local = src;  // cudaMalloc'd buffers, each registered locally, as NCCL's example 04 does
  local.replace(local.find("ncclWindow_t win;"), 17, "void *sh, *rh;");
  local.replace(local.find("ncclMemAlloc(&mine, 4096);"), 26, "cudaMalloc(&mine, 4096);");
  const std::string whole = "ncclCommWindowRegister(comm, mine, 4096, &win, NCCL_WIN_COLL_SYMMETRIC)";
  local.replace(local.find(whole), whole.size(),
                "ncclCommRegister(comm, mine, 4096, &sh); ncclCommRegister(comm, plain, 4096, &rh)");
  local.replace(local.find("ncclCommWindowDeregister(comm, win)"), 35,
                "ncclCommDeregister(comm, sh); ncclCommDeregister(comm, rh)");
  local.replace(local.find("ncclMemFree(mine)"), 17, "cudaFree(mine); cudaFree(plain)");
  const Conversion l = convert_text(local);
  EXPECT_EQ(l.converted_calls, 2) << conversion_to_text(l);
  EXPECT_TRUE(contains(l.source, "braid_converted::sym_malloc(&mine, 4096)")) << l.source;
  EXPECT_TRUE(contains(l.source, "ncclCommRegister(comm, mine, 4096, &sh)")) << l.source;
  EXPECT_TRUE(contains(l.source, "ncclCommDeregister(comm, rh)")) << l.source;
  EXPECT_TRUE(contains(l.source, "braid_converted::sym_free(plain)")) << l.source;
}

// A program whose own header includes mpi.h (llm.c's train_gpt2.cu through llmc/zero.cuh) is an
// MPI program: its flags and launcher are MPI's.
TEST(AnalyzerUserIdioms, MpiIncludedThroughTheProgramsHeader) {
  const auto dir = std::filesystem::temp_directory_path() / ("braid-idioms-mpi-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "llmc");
  braid::write_file_atomic(dir / "llmc/zero.cuh", "#pragma once\n#ifdef USE_MPI\n#include <mpi.h>\n#endif\n");
  const std::string src = kPrologue + "#include \"llmc/zero.cuh\"\nint main() { return 0; }\n";
  BuildFlags user;
  user.includes = {(dir / "nowhere").string()};  // answers for MPI where no wrapper does
  EXPECT_TRUE(resolve_build_flags((dir / "train.cu").string(), src, user).mpi);
  EXPECT_FALSE(resolve_build_flags((dir / "train.cu").string(), kPrologue + "int main() { return 0; }\n", user).mpi);
  std::filesystem::remove_all(dir);
}

// `#if NAME` with NAME given as -DNAME (1) or -DNAME=0 picks that branch's definition; without
// the flag both bodies stay (ambiguous, decided at run time).
TEST(AnalyzerUserIdioms, IfOnAFlagsValue) {
  const std::string src = kPrologue +
                          "#if USE_HALF\n#define AR_T ncclHalf\n#else\n#define AR_T ncclFloat\n#endif\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  void* g; cudaMalloc(&g, 64);\n"
                          "  ncclAllReduce(g, g, 8, AR_T, ncclSum, comm, s);\n"
                          "}\n";
  const auto dtype = [&](const std::vector<std::string>& defines) {
    const Analysis a = analyze("user.cu", src, true, SourceContext{{}, defines});
    return first_call(a, "ncclAllReduce").args[3].text;
  };
  EXPECT_EQ(dtype({"USE_HALF"}), "ncclHalf");
  EXPECT_EQ(dtype({"USE_HALF=0"}), "ncclFloat");
  EXPECT_EQ(dtype({}), "AR_T");
}

// Megatron style: a second communicator made by its own ncclCommInitRank beside the data-parallel
// one. The runtime binds both, each at its creation; every symmetric allocation is a window on
// each, registered in the same order on every rank.
TEST(AnalyzerUserIdioms, SecondCommunicatorByItsOwnInitRank) {
  const std::string src = kPrologue +
                          "#include <cuda_bf16.h>\n"
                          "struct Groups { ncclComm_t tp_comm; ncclComm_t dp_comm; };\n"
                          "int main() {\n"
                          "  Groups g; ncclUniqueId dp_id, tp_id; cudaStream_t s;\n"
                          "  ncclCommInitRank(&g.dp_comm, 2, dp_id, 0);\n"
                          "  ncclCommInitRank(&g.tp_comm, 2, tp_id, 0);\n"
                          "  __nv_bfloat16 *out, *grad; float* loss;\n"
                          "  cudaMalloc(&out, 1024 * sizeof(__nv_bfloat16));\n"
                          "  cudaMalloc(&grad, 4096 * sizeof(__nv_bfloat16));\n"
                          "  cudaMalloc(&loss, sizeof(float));\n"
                          "  for (int step = 0; step < 3; ++step) {\n"
                          "    ncclAllReduce(out, out, 1024, ncclBfloat16, ncclSum, g.tp_comm, s);\n"
                          "    ncclAllReduce(grad, grad, 4096, ncclBfloat16, ncclAvg, g.dp_comm, s);\n"
                          "    ncclAllReduce(loss, loss, 1, ncclFloat, ncclAvg, g.dp_comm, s);\n"
                          "  }\n"
                          "  cudaFree(out); cudaFree(grad); cudaFree(loss);\n"
                          "  ncclCommDestroy(g.tp_comm); ncclCommDestroy(g.dp_comm);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 3) << conversion_to_text(c);
  EXPECT_TRUE(c.complete()) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::all_reduce<0>(out, out, 1024, ncclBfloat16, ncclSum, g.tp_comm, s)"))
      << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_init_rank(&g.dp_comm, 2, dp_id, 0);")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_init_rank(&g.tp_comm, 2, tp_id, 0);")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&out, 1024 * sizeof(__nv_bfloat16));")) << c.source;
}

// The usual helper (`allreduce_half(buf, n, comm, s)`) called with the tensor- and the data-parallel
// communicator converts once and serves both: each is bound at its creation, the call finds its
// windows on the one it is given. A send/recv helper given two communicators stays host NCCL
// (its pairing is checked per communicator), and so does its partner.
TEST(AnalyzerUserIdioms, AHelperGivenTwoCommunicatorsConvertsForBoth) {
  const auto program = [](const std::string& helper, const std::string& calls) {
    return kPrologue + "#include <cuda_fp16.h>\n" + helper +
           "int main(int argc, char** argv) {\n"
           "  int rank = argc; ncclUniqueId id, id2; cudaStream_t s;\n"
           "  ncclComm_t tp, dp;\n"
           "  ncclCommInitRank(&tp, 2, id, rank);\n"
           "  ncclCommInitRank(&dp, 2, id2, rank);\n"
           "  __half *act, *grad; cudaMalloc(&act, 4096); cudaMalloc(&grad, 8192);\n" +
           calls + "}\n";
  };
  const Conversion both =
      convert_text(program("static void allreduce_half(__half* buf, size_t n, ncclComm_t comm, cudaStream_t st) {\n"
                           "  ncclAllReduce(buf, buf, n, ncclHalf, ncclSum, comm, st);\n"
                           "}\n",
                           "  for (int step = 0; step < 2; ++step) {\n"
                           "    allreduce_half(act, 2048, tp, s);\n"
                           "    allreduce_half(grad, 4096, dp, s);\n"
                           "  }\n"));
  EXPECT_EQ(both.converted_calls, 1) << conversion_to_text(both);
  EXPECT_TRUE(both.complete()) << conversion_to_text(both);
  EXPECT_TRUE(contains(both.source, "braid_converted::all_reduce<0>(buf, buf, n, ncclHalf, ncclSum, comm, st)"))
      << both.source;
  EXPECT_TRUE(contains(both.source, "braid_converted::comm_init_rank(&tp")) << both.source;
  EXPECT_TRUE(contains(both.source, "braid_converted::comm_init_rank(&dp")) << both.source;
  EXPECT_TRUE(contains(both.source, "braid_converted::sym_malloc(&act, 4096)")) << both.source;
  EXPECT_TRUE(contains(both.source, "braid_converted::sym_malloc(&grad, 8192)")) << both.source;

  const Conversion p2p = convert_text(
      program("static void send_half(__half* buf, size_t n, int peer, ncclComm_t comm, cudaStream_t st) {\n"
              "  ncclSend(buf, n, ncclHalf, peer, comm, st);\n"
              "}\n",
              "  send_half(act, 2048, 1 - rank, tp, s);\n"
              "  send_half(grad, 4096, 1 - rank, dp, s);\n"
              "  ncclRecv(act, 2048, ncclHalf, 1 - rank, tp, s);\n"));
  EXPECT_EQ(p2p.converted_calls, 0) << conversion_to_text(p2p);
  ASSERT_EQ(p2p.left.size(), 2u) << conversion_to_text(p2p);
  EXPECT_TRUE(contains(p2p.left[0].reason, "a send/recv site is converted on one communicator")) << p2p.left[0].reason;
}

// llm.c makes its gradients lazily, on the first backward pass (`if (model->grads_memory == NULL)`):
// a condition every rank evaluates alike, so every rank allocates there, in the same order, and
// the buffer becomes symmetric (its window registration is collective), also in the else of such a
// condition (the multi-GPU Jacobi's `if (user_buffer_reg) {..} else { cudaMalloc(..) }`), in an
// else-if chain of such conditions, and under a call that returns alike for alike arguments (a
// function of this file naming nothing per-rank; one braid cannot see given alike arguments, as
// llm.c's `else if (ends_with_bin(load_filename))`). A condition on the rank (or its else), or on
// a call that may differ per rank (`rand()`, `is_master()`), is not known to be alike: those stay.
TEST(AnalyzerUserIdioms, LazyAllocationUnderAConditionEveryRankEvaluatesAlike) {
  const auto program = [](const std::string& lazy) {
    return kPrologue +
           "typedef struct { float* grads_memory; float* acts; size_t n; } GPT2;\n"
           "static int use_big_workspace() { return 1; }\n"
           "static void backward(GPT2* model, int step, ncclComm_t comm, cudaStream_t s) {\n" +
           lazy +
           "  ncclAllReduce(model->grads_memory, model->grads_memory, model->n, ncclFloat, ncclAvg, comm, s);\n"
           "}\n"
           "int main(int argc, char** argv) {\n"
           "  int rank = 0; MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
           "  ncclUniqueId id; ncclComm_t comm; cudaStream_t s;\n"
           "  ncclCommInitRank(&comm, 2, id, rank);\n"
           "  GPT2 model; model.grads_memory = NULL; model.n = 1 << 20;\n"
           "  for (int step = 0; step < 4; ++step) backward(&model, step, comm, s);\n"
           "}\n";
  };
  const Conversion lazy =
      convert_text(program("  if (model->grads_memory == NULL) {\n"
                           "    cudaMalloc((void**)&model->grads_memory, model->n * sizeof(float));\n"
                           "  }\n"));
  EXPECT_EQ(lazy.converted_calls, 1) << conversion_to_text(lazy);
  EXPECT_TRUE(contains(lazy.source, "braid_converted::sym_malloc((void**)&model->grads_memory")) << lazy.source;
  const Conversion unbraced =
      convert_text(program("  if (step == 0) cudaMalloc((void**)&model->grads_memory, model->n * sizeof(float));\n"));
  EXPECT_EQ(unbraced.converted_calls, 1) << conversion_to_text(unbraced);
  const Conversion in_else = convert_text(
      program("  if (model->acts) { } else { cudaMalloc((void**)&model->grads_memory, model->n * 4); }\n"));
  EXPECT_EQ(in_else.converted_calls, 1) << conversion_to_text(in_else);
  for (const std::string& alike :
       {std::string("  if (use_big_workspace()) cudaMalloc((void**)&model->grads_memory, model->n * 4);\n"),
        std::string(
            "  if (step == 0) { if (model->acts) { } else if (step < 1) { cudaMalloc((void**)&model->grads_memory, "
            "model->n * 4); } }\n"),
        std::string("  if (step > 0) { } else if (ends_with_bin(\"x.bin\")) { } else { "
                    "cudaMalloc((void**)&model->grads_memory, "
                    "model->n * 4); }\n")}) {
    const Conversion c = convert_text(program(alike));
    EXPECT_EQ(c.converted_calls, 1) << alike << conversion_to_text(c);
  }
  for (const std::string& not_alike :
       {std::string("  if (rank == 0) cudaMalloc((void**)&model->grads_memory, model->n * sizeof(float));\n"),
        std::string("  if (rand() % 2) cudaMalloc((void**)&model->grads_memory, model->n * 4);\n"),
        std::string("  if (is_master()) cudaMalloc((void**)&model->grads_memory, model->n * 4);\n"),
        std::string("  if (rank == 0) { } else { cudaMalloc((void**)&model->grads_memory, model->n * 4); }\n"),
        std::string("  if (rank == 0) { } else cudaMalloc((void**)&model->grads_memory, model->n * 4);\n"),
        std::string(
            "  if (step == 0) { if (model->acts) { } else if (rank < 1) { cudaMalloc((void**)&model->grads_memory, "
            "model->n * 4); } }\n")}) {
    const Conversion c = convert_text(program(not_alike));
    EXPECT_EQ(c.converted_calls, 0) << not_alike << conversion_to_text(c);
    ASSERT_EQ(c.left.size(), 1u) << not_alike;
    EXPECT_TRUE(contains(c.left[0].reason, "under a condition")) << c.left[0].reason;
  }
}

// A group's sends and receives run as one p2p kernel on one communicator: a group mixing two
// communicators stays host NCCL with that reason; the same sends and receives in a group per
// communicator convert, each communicator bound at its creation.
TEST(AnalyzerUserIdioms, AGroupOverTwoCommunicatorsStaysHost) {
  const auto program = [](const std::string& exchange) {
    return kPrologue +
           "int main(int argc, char** argv) {\n"
           "  int rank = argc, peer = 1 - rank; ncclUniqueId id, id2; cudaStream_t s;\n"
           "  ncclComm_t row, col;\n"
           "  ncclCommInitRank(&row, 2, id, rank);\n"
           "  ncclCommInitRank(&col, 2, id2, rank);\n"
           "  float *a, *b; cudaMalloc(&a, 4096); cudaMalloc(&b, 4096);\n" +
           exchange + "}\n";
  };
  const Conversion mixed =
      convert_text(program("  ncclGroupStart();\n"
                           "  ncclSend(a, 256, ncclFloat, peer, row, s);\n"
                           "  ncclRecv(b, 256, ncclFloat, peer, col, s);\n"
                           "  ncclGroupEnd();\n"));
  EXPECT_EQ(mixed.converted_calls, 0) << conversion_to_text(mixed);
  ASSERT_EQ(mixed.left.size(), 2u) << conversion_to_text(mixed);
  for (const Unconverted& u : mixed.left) EXPECT_TRUE(contains(u.reason, "several communicators")) << u.reason;
  const Conversion apart =
      convert_text(program("  ncclGroupStart();\n"
                           "  ncclSend(a, 256, ncclFloat, peer, row, s);\n"
                           "  ncclRecv(b, 256, ncclFloat, peer, row, s);\n"
                           "  ncclGroupEnd();\n"
                           "  ncclGroupStart();\n"
                           "  ncclSend(b, 256, ncclFloat, peer, col, s);\n"
                           "  ncclRecv(a, 256, ncclFloat, peer, col, s);\n"
                           "  ncclGroupEnd();\n"));
  EXPECT_EQ(apart.converted_calls, 4) << conversion_to_text(apart);
  EXPECT_TRUE(contains(apart.source, "braid_converted::comm_init_rank(&row")) << apart.source;
  EXPECT_TRUE(contains(apart.source, "braid_converted::comm_init_rank(&col")) << apart.source;
}

// A struct filled through a pointer parameter (`alloc_layer(&layer, n)` doing `cudaMalloc(&l->out,
// ..)`) allocates `layer.out` where the helper has one unconditional call; a helper called for two
// structs allocates neither by name (one allocation site, two buffers), so those calls stay host.
TEST(AnalyzerUserIdioms, StructFilledThroughAPointerParameter) {
  const auto program = [](const std::string& calls) {
    return kPrologue +
           "struct Layer { float* out; size_t n; };\n"
           "static void alloc_layer(Layer* l, size_t n) { l->n = n; cudaMalloc(&l->out, n * sizeof(float)); }\n"
           "int main() {\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  Layer a, b;\n" +
           calls +
           "  ncclAllReduce(a.out, a.out, a.n, ncclFloat, ncclSum, comm, s);\n"
           "  cudaFree(a.out);\n"
           "}\n";
  };
  const Analysis once = analyze("user.cu", program("  alloc_layer(&a, 256);\n"));
  EXPECT_TRUE(once.buffers.count("a.out"));
  EXPECT_EQ(convert_text(program("  alloc_layer(&a, 256);\n")).converted_calls, 1);
  const Analysis twice = analyze("user.cu", program("  alloc_layer(&a, 256);\n  alloc_layer(&b, 64);\n"));
  EXPECT_FALSE(twice.buffers.count("a.out"));
  EXPECT_EQ(convert_text(program("  alloc_layer(&a, 256);\n  alloc_layer(&b, 64);\n")).converted_calls, 0);
  EXPECT_EQ(convert_text(program("  if (s) alloc_layer(&a, 256);\n")).converted_calls, 0);  // not on every path
}

// The same helper called in a loop over an array of structs (`for (l ...) alloc_layer(&layers[l])`,
// or `layers + l`) allocates one site per field for every element: `layers[].grad`, as
// `cudaMalloc(&bufs[i], ..)` in a loop is `bufs[]`. Given a pointer variable, or under a condition in
// the loop, the helper's allocations stay unnamed and the calls host NCCL.
TEST(AnalyzerUserIdioms, StructHelperCalledInALoopOverLayers) {
  const auto program = [](const std::string& loop) {
    return kPrologue +
           "struct Layer { float* w; float* grad; size_t n; };\n"
           "static void alloc_layer(Layer* l, size_t n) {\n"
           "  l->n = n; cudaMalloc(&l->w, n * sizeof(float)); cudaMalloc(&l->grad, n * sizeof(float));\n"
           "}\n"
           "static void free_layer(Layer* l) { cudaFree(l->w); cudaFree(l->grad); }\n"
           "int main() {\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  Layer layers[4];\n" +
           loop +
           "  for (int l = 3; l >= 0; --l)\n"
           "    ncclAllReduce(layers[l].grad, layers[l].grad, layers[l].n, ncclFloat, ncclAvg, comm, s);\n"
           "  ncclBroadcast(layers[0].w, layers[0].w, layers[0].n, ncclFloat, 0, comm, s);\n"
           "  for (int l = 0; l < 4; ++l) free_layer(&layers[l]);\n"
           "}\n";
  };
  const std::string by_address = "  for (int l = 0; l < 4; ++l) alloc_layer(&layers[l], 1024);\n";
  const Analysis a = analyze("user.cu", program(by_address));
  EXPECT_TRUE(a.buffers.count("layers[].grad"));
  EXPECT_TRUE(a.buffers.count("layers[].w"));
  EXPECT_EQ(first_call(a, "ncclAllReduce").arg_buffers.at(0), std::vector<std::string>{"layers[].grad"});
  const Conversion c = convert_text(program(by_address));
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&l->grad, n * sizeof(float))"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_free(l->grad)"));
  EXPECT_EQ(convert_text(program("  for (int l = 0; l < 4; ++l) alloc_layer(layers + l, 1024);\n")).converted_calls, 2);
  // A pointer variable is not followed to the element it points at; a conditional call may skip one.
  const Conversion through_pointer =
      convert_text(program("  for (int l = 0; l < 4; ++l) { Layer* p = &layers[l]; alloc_layer(p, 1024); }\n"));
  EXPECT_EQ(through_pointer.converted_calls, 0);
  ASSERT_FALSE(through_pointer.left.empty());
  EXPECT_TRUE(contains(through_pointer.left[0].reason, "has no cudaMalloc/ncclMemAlloc allocation in this file"))
      << through_pointer.left[0].reason;
  EXPECT_EQ(convert_text(program("  for (int l = 0; l < 4; ++l) if (l != 2) alloc_layer(&layers[l], 1024);\n"))
                .converted_calls,
            0);
}

// Stream-ordered per-step buffers (cudaMallocAsync in a helper filling a struct, cudaFreeAsync on the
// same stream): the sends and receives on them stay host NCCL with the reason (making them symmetric
// would register a window collectively at every step, with sizes not proven equal on every rank);
// a collective on one converts and falls back to host NCCL at run time on every rank; the frees go
// to sym_free_async, which frees each pointer with the allocator that made it.
TEST(AnalyzerUserIdioms, StreamOrderedStepBuffers) {
  const std::string src = kPrologue +
                          "struct Step { float* send; float* recv; float* load; };\n"
                          "static void alloc_step(Step* s, size_t n, cudaStream_t st) {\n"
                          "  cudaMallocAsync(&s->send, n * 4, st); cudaMallocAsync(&s->recv, n * 4, st);\n"
                          "  cudaMallocAsync(&s->load, 64, st);\n"
                          "}\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t st; int world = 2, rank = 0;\n"
                          "  ncclCommInitRank(&comm, world, id, rank);\n"
                          "  float* grad; cudaMalloc(&grad, 1024);\n"
                          "  for (int step = 0; step < 4; ++step) {\n"
                          "    Step sb; alloc_step(&sb, 4096, st);\n"
                          "    ncclGroupStart();\n"
                          "    for (int p = 0; p < world; ++p) {\n"
                          "      ncclSend(sb.send + p * 1024, 1024, ncclFloat, p, comm, st);\n"
                          "      ncclRecv(sb.recv + p * 1024, 1024, ncclFloat, p, comm, st);\n"
                          "    }\n"
                          "    ncclGroupEnd();\n"
                          "    ncclAllReduce(sb.load, sb.load, 16, ncclFloat, ncclAvg, comm, st);\n"
                          "    cudaFreeAsync(sb.send, st); cudaFreeAsync(sb.recv, st); cudaFreeAsync(sb.load, st);\n"
                          "  }\n"
                          "  ncclAllReduce(grad, grad, 256, ncclFloat, ncclSum, comm, st);\n"
                          "  cudaFree(grad);\n"
                          "}\n";
  const Analysis a = analyze("user.cu", src);
  ASSERT_TRUE(a.buffers.count("sb.send"));
  EXPECT_EQ(a.buffers.at("sb.send").allocator, "cudaMallocAsync");
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  bool send_left = false;
  for (const Unconverted& u : c.left)
    if (u.construct == "ncclSend") {
      send_left = true;
      EXPECT_TRUE(
          contains(u.reason, "comes from cudaMallocAsync (line 7): stream-ordered memory is never an NCCL window"))
          << u.reason;
      EXPECT_TRUE(contains(u.reason, "sizes braid cannot prove equal on every rank")) << u.reason;
    }
  EXPECT_TRUE(send_left) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "cudaMallocAsync(&s->send, n * 4, st)"));  // never made symmetric
  EXPECT_TRUE(contains(c.source, "braid_converted::all_reduce<"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_free_async(sb.load, st)"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&grad, 1024)"));
  EXPECT_TRUE(contains(c.source, "  ncclGroupStart();"));  // the group stays host NCCL whole
}

// llm.c's pointer arrays: parameters carved from one allocation by `*(ptrs[i]) = iterator` over the
// fields' addresses, gradients reduced through the struct seen as an array (`(float**)&model->grads`),
// activations allocated one by one in a loop and used as `*(acts + i)` / `acts[i]`. A struct with a
// member that is no pointer is no array of pointers: its element stays unfollowed.
TEST(AnalyzerUserIdioms, LlmcPointerArrays) {
  const auto program = [](const std::string& extra_field) {
    return kPrologue + "typedef struct { float* wte; float* ln1w; float* fcw;" + extra_field +
           " } ParameterTensors;\n"
           "typedef struct { ParameterTensors params; ParameterTensors grads; size_t sizes[3]; float* params_memory;\n"
           "  float* grads_memory; float* acts[3]; } GPT2;\n"
           "float* malloc_and_point(ParameterTensors* params, size_t* sizes) {\n"
           "  float* memory; cudaMalloc((void**)&memory, 4096 * sizeof(float));\n"
           "  float** ptrs[] = {&params->wte, &params->ln1w, &params->fcw};\n"
           "  float* it = memory;\n"
           "  for (int i = 0; i < 3; i++) { *(ptrs[i]) = it; it += sizes[i]; }\n"
           "  return memory;\n"
           "}\n"
           "void build(GPT2* model) {\n"
           "  model->params_memory = malloc_and_point(&model->params, model->sizes);\n"
           "  model->grads_memory = malloc_and_point(&model->grads, model->sizes);\n"
           "  for (int i = 0; i < 3; i++) cudaMalloc((void**)&model->acts[i], 1024);\n"
           "}\n"
           "void reduce(GPT2* model, ncclComm_t comm, cudaStream_t s) {\n"
           "  float** grads = (float**)&model->grads;\n"
           "  for (int i = 0; i < 3; i++) ncclAllReduce(grads[i], grads[i], model->sizes[i], ncclFloat, ncclAvg, comm, "
           "s);\n"
           "  float** acts = model->acts;\n"
           "  ncclAllReduce(*(acts + 2), *(acts + 2), 256, ncclFloat, ncclSum, comm, s);\n"
           "  ncclAllReduce(model->acts[1], model->acts[1], 256, ncclFloat, ncclSum, comm, s);\n"
           "}\n"
           "int main() {\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  GPT2 model; build(&model);\n"
           "  reduce(&model, comm, s);\n"
           "  cudaFree(model.params_memory); cudaFree(model.grads_memory);\n"
           "  for (int i = 0; i < 3; i++) cudaFree(model.acts[i]);\n"
           "}\n";
  };
  const Analysis a = analyze("user.cu", program(""));
  EXPECT_TRUE(a.buffers.count("memory"));
  EXPECT_TRUE(a.buffers.count("model.acts[]"));
  const Call& grads = first_call(a, "ncclAllReduce");
  EXPECT_EQ(grads.unresolved, "");
  EXPECT_EQ(grads.arg_buffers.at(0), std::vector<std::string>{"memory"});
  const Conversion c = convert_text(program(""));
  EXPECT_EQ(c.converted_calls, 3) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc((void**)&memory, 4096 * sizeof(float))"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc((void**)&model->acts[i], 1024)"));
  // `int layers;` in the struct: `grads[i]` may be it, so the gradients stay host NCCL.
  const Conversion mixed = convert_text(program(" int layers;"));
  EXPECT_EQ(mixed.converted_calls, 2) << conversion_to_text(mixed);
}

// llm.c's gradient reduction: `floatX* const pointers[] = {grads.wte, grads.fcw}` (a copy of the
// struct) handed to a template taking `floatX* const (&pointers)[N]`: an element is any of the
// listed fields, followed to the allocation they point into. An array whose elements the function
// also stores into (or that starts as null pointers) is not read from its initialiser.
TEST(AnalyzerUserIdioms, BraceInitialisedPointerArrays) {
  const auto program = [](const std::string& declaration, const std::string& after) {
    return kPrologue +
           "typedef struct { float* wte; float* fcw; } ParameterTensors;\n"
           "ParameterTensors grads_of; float* grads_memory; float* other;\n"
           "void point(ParameterTensors* p) {\n"
           "  cudaMalloc((void**)&grads_memory, 4096);\n"
           "  float** ptrs[] = {&p->wte, &p->fcw};\n"
           "  char* it = (char*)grads_memory;\n"
           "  for (int i = 0; i < 2; i++) { *ptrs[i] = (float*)it; it += 2048; }\n"
           "}\n"
           "template <int N>\n"
           "void reduce(float* const (&pointers)[N], ncclComm_t comm, cudaStream_t s) {\n"
           "  for (int i = 0; i < N; ++i) ncclAllReduce(pointers[i], pointers[i], 512, ncclFloat, ncclAvg, comm, s);\n"
           "}\n"
           "int main() {\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  cudaMalloc(&other, 64);\n"
           "  point(&grads_of);\n"
           "  ParameterTensors grads = grads_of;\n" +
           declaration + after +
           "  reduce(pointers, comm, s);\n"
           "  cudaFree(grads_memory); cudaFree(other);\n"
           "}\n";
  };
  const std::string src = program("  float* const pointers[] = {grads.wte, grads.fcw};\n", "");
  const Analysis a = analyze("user.cu", src);
  const Call& ar = first_call(a, "ncclAllReduce");
  EXPECT_EQ(ar.unresolved, "");
  EXPECT_EQ(ar.arg_buffers.at(0), std::vector<std::string>{"grads_memory"});
  EXPECT_EQ(convert_text(src).converted_calls, 1) << conversion_to_text(convert_text(src));
  // Not const and stored into: its elements may be anything by the call.
  EXPECT_EQ(convert_text(program("  float* pointers[] = {grads.wte, grads.fcw};\n", "  pointers[1] = other + 4;\n"))
                .converted_calls,
            0);
  EXPECT_EQ(convert_text(program("  float* pointers[] = {nullptr, grads.fcw};\n", "")).converted_calls, 0);
}

// Code of the program's own headers (`#include "dev.h"`, found beside the file or through -I) that
// calls NCCL, allocates or frees is read where it is included: its calls are in the graph, followed
// through their parameters to the file's calls, and stay host NCCL (braid writes only the file).
// A send/recv there keeps the file's sends/receives on its communicator host (pairs are windowed on
// both ends or neither); a buffer a header's cudaFree releases never becomes a window (it would be
// freed with the wrong allocator), one released only by the file's own cudaFree does; a release in a
// header function the file never calls changes nothing.
TEST(AnalyzerUserIdioms, HeaderFunctionsAreReadAndKeptHost) {
  const auto dir = std::filesystem::temp_directory_path() / ("braid-header-fns-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "include");
  braid::write_file_atomic(dir / "include/dev.h",
                           "#pragma once\n"
                           "#include <nccl.h>\n"
                           "inline void dev_free(float* p) { cudaFree(p); }\n"
                           "inline void never_called(float* q) { cudaFree(q); }\n"
                           "inline void tp_sum(float* x, size_t n, ncclComm_t c, cudaStream_t st) {\n"
                           "  ncclAllReduce(x, x, n, ncclFloat, ncclSum, c, st);\n"
                           "}\n"
                           "inline void exchange(float* s, float* r, int peer, ncclComm_t c, cudaStream_t st) {\n"
                           "  ncclGroupStart();\n"
                           "  ncclSend(s, 4, ncclFloat, peer, c, st);\n"
                           "  ncclRecv(r, 4, ncclFloat, peer, c, st);\n"
                           "  ncclGroupEnd();\n"
                           "}\n");
  const std::string src = kPrologue +
                          "#include \"dev.h\"\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s;\n"
                          "  ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  float *g, *h, *x, *a, *b, *c, *d;\n"
                          "  cudaMalloc(&g, 64); cudaMalloc(&h, 64); cudaMalloc(&x, 64);\n"
                          "  cudaMalloc(&a, 64); cudaMalloc(&b, 64); cudaMalloc(&c, 64); cudaMalloc(&d, 64);\n"
                          "  ncclAllReduce(g, g, 16, ncclFloat, ncclSum, comm, s);\n"
                          "  ncclAllReduce(h, h, 16, ncclFloat, ncclSum, comm, s);\n"
                          "  tp_sum(x, 16, comm, s);\n"
                          "  exchange(a, b, 1, comm, s);\n"
                          "  ncclGroupStart();\n"
                          "  ncclSend(c, 4, ncclFloat, 1, comm, s);\n"
                          "  ncclRecv(d, 4, ncclFloat, 1, comm, s);\n"
                          "  ncclGroupEnd();\n"
                          "  dev_free(g);\n"
                          "  cudaFree(h);\n"
                          "  ncclCommDestroy(comm);\n"
                          "}\n";
  const std::string file = (dir / "user.cu").string();
  const Analysis a = analyze(file, src, true, SourceContext{{(dir / "include").string()}, {}});
  // The header's all-reduce is a call of the graph, at the #include's line, followed to `x`.
  const Call& sum = first_call(a, "ncclAllReduce");
  EXPECT_EQ(sum.header, "dev.h:6");
  EXPECT_EQ(sum.function, "tp_sum");
  EXPECT_EQ(sum.line, 5);
  EXPECT_EQ(sum.arg_buffers.at(0), std::vector<std::string>{"x"});
  EXPECT_TRUE(contains(analysis_to_text(a), "[in header dev.h:6, tp_sum()]")) << analysis_to_text(a);
  EXPECT_TRUE(contains(a.buffers.at("g").freed_in_header, "cudaFree in dev.h:3 (in dev_free())"));
  EXPECT_EQ(a.buffers.at("h").freed_in_header, "");  // never_called() frees nothing the file gives it
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.nccl_calls, 7);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);  // the all-reduce of h
  EXPECT_TRUE(contains(c.source, "braid_converted::all_reduce<0>(h, h, 16"));
  EXPECT_TRUE(contains(c.source, "cudaMalloc(&g, 64); braid_converted::sym_malloc(&h, 64); cudaMalloc(&x, 64);"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_free(h);"));
  EXPECT_TRUE(contains(c.source, "\n  ncclSend(c, 4, ncclFloat, 1, comm, s);"));
  EXPECT_TRUE(contains(c.source, "#include \"dev.h\"\n"));  // never edited
  std::map<std::string, std::string> why;
  for (const Unconverted& u : c.left) why[u.construct + ":" + std::to_string(u.line)] = u.reason;
  EXPECT_TRUE(
      contains(why["ncclAllReduce:5"], "written in header dev.h:6 (in tp_sum()), which braid does not rewrite"));
  EXPECT_TRUE(contains(why["ncclAllReduce:12"], "buffer `g` is released by cudaFree in dev.h:3 (in dev_free())"));
  EXPECT_TRUE(contains(why["ncclSend:17"],
                       "another send/recv on its communicator stays host NCCL: line 5 (written in header dev.h:10"))
      << why["ncclSend:17"];
  EXPECT_TRUE(contains(why["ncclRecv:18"], "in symmetric windows on both ends or on neither")) << why["ncclRecv:18"];
  // The library's own header found through -I (it declares the API: `ncclResult_t ncclAllReduce(`,
  // cuda_runtime.h's `cudaError_t cudaMalloc(` wrappers) is not the program's code, nor what it includes.
  braid::write_file_atomic(
      dir / "include/nccl.h",
      "#pragma once\n#include \"nccl_inner.h\"\n"
      "ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t o, "
      "ncclComm_t c, cudaStream_t st);\n"
      "inline void release(float* p) { cudaFree(p); }\n");
  braid::write_file_atomic(dir / "include/nccl_inner.h", "inline void drop(float* p) { cudaFree(p); }\n");
  std::string api = src;
  api.replace(api.find("#include \"dev.h\""), 16, "#include \"nccl.h\"");
  const Analysis without_api = analyze(file, api, true, SourceContext{{(dir / "include").string()}, {}});
  EXPECT_TRUE(std::none_of(without_api.calls.begin(), without_api.calls.end(),
                           [](const Call& x) { return !x.header.empty(); }));
  EXPECT_EQ(without_api.buffers.at("g").freed_in_header, "");
  // A communicator destroyed in a header would go before the converted runtime's windows: nothing converts.
  braid::write_file_atomic(dir / "include/dev.h",
                           "#pragma once\ninline void done(ncclComm_t c) { ncclCommDestroy(c); }\n");
  std::string destroyed = src;
  destroyed.replace(destroyed.find("ncclCommDestroy(comm);"), 22, "done(comm);");
  const Conversion d =
      transform(analyze(file, destroyed, true, SourceContext{{(dir / "include").string()}, {}}), destroyed);
  EXPECT_EQ(d.converted_calls, 0) << conversion_to_text(d);
  EXPECT_TRUE(contains(d.left.front().reason, "ncclCommDestroy in header dev.h:2 (in done())"))
      << conversion_to_text(d);
  std::filesystem::remove_all(dir);
}

// Megatron's p2p_communicate shape: a helper taking optional buffers (tested against null before
// its send/recv), called with `cond ? nullptr : buffer` where the pipeline ends. The null branch
// adds no buffer, as a call site passing nullptr does; the other is followed as before.
TEST(AnalyzerUserIdioms, ANullBranchOfAChosenPointerAddsNoBuffer) {
  const std::string src = kPrologue +
                          "void p2p(float* send, int to, float* recv, int from, ncclComm_t c, cudaStream_t s) {\n"
                          "  ncclGroupStart();\n"
                          "  if (send != nullptr) ncclSend(send, 256, ncclFloat, to, c, s);\n"
                          "  if (recv) ncclRecv(recv, 256, ncclFloat, from, c, s);\n"
                          "  ncclGroupEnd();\n"
                          "}\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; int rank = 0, world = 2;\n"
                          "  ncclCommInitRank(&comm, world, id, rank);\n"
                          "  float *act, *grad; cudaMalloc(&act, 1024); cudaMalloc(&grad, 1024);\n"
                          "  const bool first = rank == 0, last = rank == world - 1;\n"
                          "  p2p(last ? nullptr : act, rank + 1, first ? NULL : act, rank - 1, comm, s);\n"
                          "  p2p(first ? nullptr : grad, rank - 1, last ? nullptr : grad, rank + 1, comm, s);\n"
                          "}\n";
  const Analysis a = analyze("user.cu", src);
  const Call& send = first_call(a, "ncclSend");
  EXPECT_EQ(send.unresolved, "");
  EXPECT_EQ(send.arg_buffers.at(0), (std::vector<std::string>{"act", "grad"}));
  EXPECT_EQ(first_call(a, "ncclRecv").arg_buffers.at(0), (std::vector<std::string>{"act", "grad"}));
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&act, 1024); braid_converted::sym_malloc(&grad, 1024);"));
}

// Views into one allocation stored in a container (`views.push_back(flat + offsets[l])`,
// `hv[l] = (half*)ws + off`): an element is that allocation, as an element copied from a struct
// variable is its fields. An element of another container stays unfollowed.
TEST(AnalyzerUserIdioms, ViewsStoredInAContainerAreTheirAllocation) {
  const std::string src = kPrologue +
                          "#include <cuda_fp16.h>\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s;\n"
                          "  ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  std::vector<size_t> offsets = {0, 1024, 4096, 8192};\n"
                          "  float* flat; cudaMalloc(&flat, 16384 * sizeof(float));\n"
                          "  char* ws; cudaMalloc(&ws, 65536);\n"
                          "  std::vector<float*> views;\n"
                          "  for (int l = 0; l < 4; ++l) views.push_back(flat + offsets[l]);\n"
                          "  half* hv[4];\n"
                          "  for (int l = 0; l < 4; ++l) hv[l] = (half*)ws + offsets[l];\n"
                          "  std::vector<float*> others;\n"
                          "  for (int l = 0; l < 4; ++l) others.push_back(views[l]);\n"
                          "  for (int l = 0; l < 4; ++l) {\n"
                          "    ncclAllReduce(views[l], views[l], 1024, ncclFloat, ncclSum, comm, s);\n"
                          "    ncclAllReduce(hv[l], hv[l], 1024, ncclHalf, ncclSum, comm, s);\n"
                          "    ncclAllReduce(others[l], others[l], 1024, ncclFloat, ncclSum, comm, s);\n"
                          "  }\n"
                          "  cudaFree(flat); cudaFree(ws);\n"
                          "}\n";
  const Analysis a = analyze("user.cu", src);
  std::vector<const Call*> reductions;
  for (const Call& c : a.calls)
    if (c.name == "ncclAllReduce") reductions.push_back(&c);
  ASSERT_EQ(reductions.size(), 3u);
  EXPECT_EQ(reductions[0]->arg_buffers.at(0), std::vector<std::string>{"flat"});
  EXPECT_EQ(reductions[1]->arg_buffers.at(0), std::vector<std::string>{"ws"});
  EXPECT_NE(reductions[2]->unresolved, "");
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&flat, 16384 * sizeof(float))"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&ws, 65536)"));
}

// A class template's instances (`DataParallel<half> dp(comm, ...)`, `new DataParallel<float>(...)`)
// are constructions of the class: its fields are followed to the constructor's arguments there.
TEST(AnalyzerUserIdioms, ClassTemplateInstancesAreConstructions) {
  const auto program = [](const std::string& construction) {
    return kPrologue +
           "#include <cuda_fp16.h>\n"
           "template <typename T>\n"
           "class DataParallel {\n"
           " public:\n"
           "  DataParallel(ncclComm_t comm, cudaStream_t s, size_t n) : comm_(comm), stream_(s), n_(n) {\n"
           "    cudaMalloc(&grads_, n * sizeof(T));\n"
           "  }\n"
           "  ~DataParallel() { cudaFree(grads_); }\n"
           "  void sync() { ncclAllReduce(grads_, grads_, n_, ncclHalf, ncclSum, comm_, stream_); }\n"
           " private:\n"
           "  ncclComm_t comm_; cudaStream_t stream_; size_t n_; T* grads_;\n"
           "};\n"
           "int main() {\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s;\n"
           "  ncclCommInitRank(&comm, 2, id, 0);\n" +
           construction + "  ncclCommDestroy(comm);\n}\n";
  };
  for (const std::string construction : {"  DataParallel<half> dp(comm, s, 1 << 20);\n  dp.sync();\n",
                                         "  auto* dp = new DataParallel<half>(comm, s, 1 << 20);\n  dp->sync();\n"}) {
    const std::string src = program(construction);
    const Analysis a = analyze("user.cu", src);
    const Call& ar = first_call(a, "ncclAllReduce");
    EXPECT_EQ(ar.comm_paths, std::vector<std::string>{"comm"}) << construction;
    const Conversion c = transform(a, src);
    EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
    EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&grads_, n * sizeof(T));")) << construction;
  }
}

// An allocation in a constructor or helper that some rank may not run (`if (rank == 0)
// DeviceBuffer<char> scratch(64);`) is rank-dependent: window registration is collective, so the
// class's buffer stays as written and its calls host NCCL; constructed on every rank, it converts.
// Class templates' constructions (`DeviceBuffer<float> grads(n)`) are constructions.
TEST(AnalyzerUserIdioms, AllocationsInAHelperCalledUnderAConditionStayAsWritten) {
  const auto program = [](const std::string& scratch) {
    return kPrologue +
           "template <class T> class DeviceBuffer {\n"
           " public:\n"
           "  explicit DeviceBuffer(size_t n) { cudaMalloc(&ptr_, n * sizeof(T)); }\n"
           "  ~DeviceBuffer() { cudaFree(ptr_); }\n"
           "  T* data() { return ptr_; }\n"
           " private:\n"
           "  T* ptr_ = nullptr;\n"
           "};\n"
           "static float* g_stats;\n"
           "static void alloc_stats() { cudaMalloc(&g_stats, 64); }\n"
           "int main(int argc, char** argv) {\n"
           "  int rank = argc; ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, "
           "rank);\n"
           "  DeviceBuffer<float> grads(1024);\n" +
           scratch +
           "  ncclAllReduce(grads.data(), grads.data(), 1024, ncclFloat, ncclSum, comm, s);\n"
           "  if (rank == 0) alloc_stats();\n"
           "  ncclAllReduce(g_stats, g_stats, 16, ncclFloat, ncclMax, comm, s);\n"
           "}\n";
  };
  const Conversion every = convert_text(program("  DeviceBuffer<char> scratch(64);\n"));
  EXPECT_EQ(every.converted_calls, 1) << conversion_to_text(every);
  EXPECT_TRUE(contains(every.source, "braid_converted::sym_malloc(&ptr_, n * sizeof(T))")) << every.source;
  const Conversion some = convert_text(program("  if (rank == 0) { DeviceBuffer<char> scratch(64); }\n"));
  EXPECT_EQ(some.converted_calls, 0) << conversion_to_text(some);
  EXPECT_TRUE(contains(some.source, "{ cudaMalloc(&ptr_, n * sizeof(T)); }")) << some.source;
  ASSERT_EQ(some.left.size(), 2u) << conversion_to_text(some);
  EXPECT_TRUE(contains(some.left[0].reason,
                       "buffer `ptr_` is allocated (line 7) in DeviceBuffer(), which may run on some ranks only "
                       "(called under a condition, or "
                       "constructed out of braid's sight, at line 18)"))
      << some.left[0].reason;
  EXPECT_TRUE(contains(some.left[1].reason,
                       "buffer `g_stats` is allocated (line 14) in alloc_stats(), which may run on some ranks only"))
      << some.left[1].reason;
}

// A constructor also runs where its class is a member of another (`struct Model { Buf<float> g{n}; }`,
// `new Model()` under a condition) or an element of a container braid does not follow
// (`std::vector<Buf<float>>` filled in place and given away): those make its allocation
// rank-dependent too.
TEST(AnalyzerUserIdioms, ConstructorsRunAsMembersAndContainerElements) {
  const auto program = [](const std::string& more) {
    return kPrologue +
           "template <class T> struct Buf {\n"
           "  T* p;\n"
           "  Buf(size_t n) { cudaMalloc(&p, n * sizeof(T)); }\n"
           "  ~Buf() { cudaFree(p); }\n"
           "  T* data() { return p; }\n"
           "};\n"
           "struct Model { Buf<float> w{1024}; Buf<float> g{1024}; Buf<float>* spare = nullptr; };\n"
           "int main(int argc, char** argv) {\n"
           "  int rank = argc; ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, "
           "rank);\n"
           "  Model m;\n" +
           more +
           "  ncclAllReduce(m.g.data(), m.g.data(), 1024, ncclFloat, ncclSum, comm, s);\n"
           "}\n";
  };
  EXPECT_EQ(convert_text(program("")).converted_calls, 1);
  const Conversion member = convert_text(program("  if (rank == 0) { Model* extra = new Model(); delete extra; }\n"));
  EXPECT_EQ(member.converted_calls, 0);
  ASSERT_EQ(member.left.size(), 1u);
  EXPECT_TRUE(contains(member.left[0].reason,
                       "in Model(), which may run on some ranks only (called under a condition, or "
                       "constructed out of braid's sight, at line 15)"))
      << member.left[0].reason;
  const Conversion element =
      convert_text(program("  std::vector<Buf<float>> extra;\n  extra.emplace_back(16);\n  keep(extra);\n"));
  EXPECT_EQ(element.converted_calls, 0);
  ASSERT_EQ(element.left.size(), 1u);
  EXPECT_TRUE(contains(element.left[0].reason, "in Buf(), which may run on some ranks only")) << element.left[0].reason;
  EXPECT_TRUE(contains(element.left[0].reason, "at line 15)")) << element.left[0].reason;
  EXPECT_EQ(convert_text(program("  std::vector<Buf<float>*> pointers;\n")).converted_calls, 1);  // no construction
}

// A smart pointer's raw pointer handed to a helper (`allreduce_sum(grad.get(), ..)`) or offset
// (`grad.get() + 16`) is what it owns; a `std::shared_ptr` declared empty and given its pointer by
// one assignment with a lambda deleter is followed through the assignment. A std::map of RAII
// tensors filled with `emplace(key, Tensor(n))` and `m[key] = Tensor(n)` constructs each where
// braid sees it (the map itself only default-constructs and moves).
TEST(AnalyzerUserIdioms, SmartPointerArgumentsOffsetsAndMapsOfTensors) {
  const std::string smart =
      kPrologue +
      "#include <memory>\n"
      "struct CudaDeleter { void operator()(void* p) const { cudaFree(p); } };\n"
      "template <typename T> using DevPtr = std::unique_ptr<T, CudaDeleter>;\n"
      "template <typename T> DevPtr<T> make_dev(size_t n) { T* p = nullptr; cudaMalloc(&p, n * "
      "sizeof(T)); return DevPtr<T>(p); }\n"
      "static void allreduce_sum(float* buf, size_t n, ncclComm_t c, cudaStream_t s) {\n"
      "  ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c, s);\n"
      "}\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  auto grad = make_dev<float>(4096);\n"
      "  DevPtr<float> out = make_dev<float>(8192);\n"
      "  std::shared_ptr<float> loss;\n"
      "  { float* p = nullptr; cudaMalloc(&p, 256); loss = std::shared_ptr<float>(p, [](float* q) { "
      "cudaFree(q); }); }\n"
      "  allreduce_sum(grad.get(), 4096, comm, s);\n"
      "  ncclAllGather(grad.get() + 16, out.get(), 1024, ncclFloat, comm, s);\n"
      "  allreduce_sum(loss.get(), 64, comm, s);\n"
      "}\n";
  const Conversion c = convert_text(smart);
  EXPECT_EQ(c.converted_calls, 2) << left_text(c);
  EXPECT_TRUE(c.left.empty()) << left_text(c);
  EXPECT_TRUE(contains(c.source, "loss = std::shared_ptr<float>(p, [](float* q) { braid_converted::sym_free(q); })"))
      << c.source;
  // Given a second pointer later (`loss = ...` after a declaration with a value): not followed.
  std::string repointed = smart;
  repointed.replace(repointed.find("std::shared_ptr<float> loss;"), 28,
                    "std::shared_ptr<float> loss = std::shared_ptr<float>(grad.get(), [](float*) {});");
  const Conversion again = convert_text(repointed);
  EXPECT_TRUE(contains(left_text(again), "owns another pointer")) << left_text(again);

  const std::string map =
      kPrologue +
      "#include <map>\n#include <string>\n#include <utility>\n"
      "class Tensor {\n"
      " public:\n"
      "  Tensor() = default;\n"
      "  explicit Tensor(size_t n) : n_(n) { cudaMalloc(&data_, n * sizeof(float)); }\n"
      "  Tensor(Tensor&& o) noexcept : data_(std::exchange(o.data_, nullptr)), n_(o.n_) {}\n"
      "  Tensor& operator=(Tensor&& o) noexcept { std::swap(data_, o.data_); n_ = o.n_; return *this; }\n"
      "  ~Tensor() { if (data_) cudaFree(data_); }\n"
      "  float* data() const { return data_; }\n"
      "  size_t numel() const { return n_; }\n"
      " private:\n"
      "  float* data_ = nullptr;\n"
      "  size_t n_ = 0;\n"
      "};\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  std::map<std::string, Tensor> grads;\n"
      "  grads.emplace(\"embed\", Tensor(1 << 20));\n"
      "  grads[\"mlp\"] = Tensor(4 << 20);\n"
      "  for (auto& [name, t] : grads) ncclAllReduce(t.data(), t.data(), t.numel(), ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion m = convert_text(map);
  EXPECT_EQ(m.converted_calls, 1) << left_text(m);
  EXPECT_TRUE(contains(m.source, "braid_converted::sym_malloc(&data_, n * sizeof(float))")) << m.source;
}

// A struct that allocates its own field in a member function (`void init(n) { cudaMalloc(&buf, ..); }`),
// its field read from outside (`ncclAllReduce(ws.buf, ..)`): that allocation, as through an accessor.
// Called under a condition it stays host NCCL. A class's unused group wrappers
// (`void start_coalescing() { ncclGroupStart(); }`, never called) do not refuse the file.
TEST(AnalyzerUserIdioms, FieldsAllocatedByTheirClassAndUnusedGroupWrappers) {
  const auto program = [](const std::string& init) {
    return kPrologue +
           "struct Workspace {\n"
           "  float* buf = nullptr; size_t n = 0;\n"
           "  void init(size_t count) { n = count; cudaMalloc(&buf, n * sizeof(float)); }\n"
           "  void release() { cudaFree(buf); }\n"
           "};\n"
           "class ProcessGroup {\n"
           " public:\n"
           "  void start_coalescing() { ncclGroupStart(); }\n"
           "  void end_coalescing() { ncclGroupEnd(); }\n"
           "};\n"
           "int main(int argc, char** argv) {\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  Workspace ws;\n" +
           init +
           "  ncclAllReduce(ws.buf, ws.buf, ws.n, ncclFloat, ncclSum, comm, s);\n"
           "  ws.release();\n"
           "}\n";
  };
  const Conversion c = convert_text(program("  ws.init(1 << 20);\n"));
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&buf, n * sizeof(float))")) << c.source;
  const Conversion some = convert_text(program("  if (argc > 1) ws.init(1 << 20);\n"));
  EXPECT_EQ(some.converted_calls, 0);
  EXPECT_TRUE(contains(left_text(some), "in init(), which may run on some ranks only")) << left_text(some);
}

// Smart pointers hold the buffer they were made from: `buf.get()` is what `buf` owns, made by
// `std::unique_ptr<float, CudaFree>(p)`, direct initialisation, or a (namespace-qualified) helper
// returning an alias of a smart pointer type (`using device_ptr = std::unique_ptr<T, CudaFree>`).
// A release function used as a value (`&cudaFree` as the deleter) becomes the run-time lookup.
TEST(AnalyzerUserIdioms, SmartPointersAreFollowedToTheirAllocation) {
  const std::string src = kPrologue +
                          "#include <memory>\n"
                          "struct CudaFree { void operator()(void* p) const { cudaFree(p); } };\n"
                          "namespace util {\n"
                          "template <class T> using device_ptr = std::unique_ptr<T, CudaFree>;\n"
                          "template <class T> device_ptr<T> make_device(size_t n) {\n"
                          "  T* p = nullptr;\n"
                          "  cudaMalloc(&p, n * sizeof(T));\n"
                          "  return device_ptr<T>(p);\n"
                          "}\n"
                          "}  // namespace util\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  util::device_ptr<float> metrics = util::make_device<float>(2);\n"
                          "  float* raw; cudaMalloc(&raw, 4096);\n"
                          "  std::unique_ptr<float, decltype(&cudaFree)> owned(raw, &cudaFree);\n"
                          "  ncclAllGather(metrics.get(), owned.get(), 2, ncclFloat, comm, s);\n"
                          "}\n";
  const Analysis a = analyze("user.cu", src);
  const Call& ag = first_call(a, "ncclAllGather");
  EXPECT_EQ(ag.unresolved, "");
  EXPECT_EQ(ag.arg_buffers.at(0), std::vector<std::string>{"p"});
  EXPECT_EQ(ag.arg_buffers.at(1), std::vector<std::string>{"raw"});
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&raw, 4096)")) << c.source;
  EXPECT_TRUE(contains(c.source, "void operator()(void* p) const { braid_converted::sym_free(p); }")) << c.source;
  // cudaFree as the deleter frees a symmetric allocation: it is the run-time lookup too.
  EXPECT_TRUE(contains(
      c.source, "std::unique_ptr<float, decltype(&braid_converted::sym_free)> owned(raw, &braid_converted::sym_free);"))
      << c.source;
  // Given another pointer later (`owned.reset(q)`), what it owns at the call is not followed.
  std::string reset = src;
  reset.insert(reset.find("  ncclAllGather("), "  float* q; cudaMalloc(&q, 64); owned.reset(q);\n");
  const Conversion r = convert_text(reset);
  EXPECT_EQ(r.converted_calls, 0);
  ASSERT_EQ(r.left.size(), 1u);
  EXPECT_TRUE(contains(r.left[0].reason, "`owned` owns another pointer from line 20 on (reset, swap or assignment)"))
      << r.left[0].reason;
}

// ncclCommInitRankScalable is a creation: the bound one is rewritten to bind where every rank
// passes; a config with `blocking = 0` keeps its calls host NCCL, and so does a split of it given
// no config (NCCL gives the split its parent's mode).
TEST(AnalyzerUserIdioms, ScalableCreationBindsAndSplitsInheritNonBlocking) {
  const auto program = [](const std::string& config_line) {
    return kPrologue +
           "int main(int argc, char** argv) {\n"
           "  int rank = argc; ncclUniqueId ids[2]; cudaStream_t s;\n"
           "  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;\n" +
           config_line +
           "  ncclComm_t world, even = NULL;\n"
           "  ncclCommInitRankScalable(&world, 4, rank, 2, ids, &config);\n"
           "  ncclCommSplit(world, rank % 2 == 0 ? 0 : NCCL_SPLIT_NOCOLOR, rank, &even, NULL);\n"
           "  double* loss; cudaMalloc(&loss, 64);\n"
           "  long long* counts; cudaMalloc(&counts, 64);\n"
           "  ncclAllReduce(counts, counts, 8, ncclInt64, ncclSum, world, s);\n"
           "  ncclAllReduce(loss, loss, 8, ncclDouble, ncclMax, world, s);\n"
           "  if (even != NULL) ncclAllReduce(loss, loss, 8, ncclDouble, ncclSum, even, s);\n"
           "}\n";
  };
  const Conversion blocking = convert_text(program("  config.minCTAs = 4;\n"));
  EXPECT_EQ(blocking.converted_calls, 3) << conversion_to_text(blocking);
  EXPECT_TRUE(contains(blocking.source, "braid_converted::comm_init_rank_scalable(&world, 4, rank, 2, ids, &config)"))
      << blocking.source;
  // The split binds where it is made: every rank calls ncclCommSplit, the NOCOLOR ones get NULL.
  EXPECT_TRUE(contains(blocking.source, "braid_converted::comm_split(world, rank % 2 == 0 ? 0 : NCCL_SPLIT_NOCOLOR"))
      << blocking.source;
  const Analysis a = analyze("user.cu", program("  config.blocking = 0;\n"));
  ASSERT_EQ(a.comm_inits.size(), 2u);
  EXPECT_TRUE(a.comm_inits[0].nonblocking);
  EXPECT_TRUE(a.comm_inits[1].nonblocking);  // the split, with no config of its own
  const Conversion none = convert_text(program("  config.blocking = 0;\n"));
  EXPECT_EQ(none.converted_calls, 0);
  ASSERT_EQ(none.left.size(), 3u);
  EXPECT_TRUE(contains(none.left[2].reason, "split with no config from a non-blocking parent")) << none.left[2].reason;
}

// A group opened by a bracket its function leaves unpaired (a scope guard's constructor and
// destructor, group_begin()/group_end() wrappers not called in pairs: here the opening one is an
// unbraced if's body) holds calls braid does not follow: those in its
// scope (to the guard's block end, or the closing wrapper's call) and in the functions called
// there stay host NCCL; calls after it convert. A nested ncclGroupStart/End is part of the outer
// group, which converts whole.
TEST(AnalyzerUserIdioms, GroupBracketsInGuardsAndWrappersHoldTheirCalls) {
  const std::string src =
      kPrologue +
      "struct GroupGuard { GroupGuard() { ncclGroupStart(); } ~GroupGuard() { ncclGroupEnd(); } };\n"
      "static void group_end_checked() { ncclGroupEnd(); }\n"
      "static void group_begin() { ncclGroupStart(); }\n"
      "static void halo(float* a, float* b, int peer, ncclComm_t comm, cudaStream_t s) {\n"
      "  GroupGuard g;\n"
      "  ncclSend(a, 256, ncclFloat, peer, comm, s);\n"
      "  ncclRecv(b, 256, ncclFloat, peer, comm, s);\n"
      "}\n"
      "static void reduce_pair(float* x, float* y, ncclComm_t comm, cudaStream_t s) {\n"
      "  ncclAllReduce(x, x, 256, ncclFloat, ncclSum, comm, s);\n"
      "  ncclAllReduce(y, y, 256, ncclFloat, ncclSum, comm, s);\n"
      "}\n"
      "int main(int argc, char** argv) {\n"
      "  int rank = argc; ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, rank);\n"
      "  float *a, *b, *x, *y, *z; cudaMalloc(&a, 4096); cudaMalloc(&b, 4096);\n"
      "  cudaMalloc(&x, 4096); cudaMalloc(&y, 4096); cudaMalloc(&z, 4096);\n"
      "  halo(a, b, 1 - rank, comm, s);\n"
      "  if (rank >= 0) group_begin();\n"
      "  reduce_pair(x, y, comm, s);\n"
      "  group_end_checked();\n"
      "  ncclAllReduce(z, z, 256, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Analysis a = analyze("user.cu", src);
  EXPECT_TRUE(a.groups.empty());
  ASSERT_EQ(a.group_brackets.size(), 4u);
  EXPECT_EQ(a.group_brackets[0].function, "GroupGuard");
  EXPECT_TRUE(a.group_brackets[0].opens);
  EXPECT_EQ(a.group_brackets[1].function, "~GroupGuard");
  EXPECT_FALSE(a.group_brackets[1].opens);
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::all_reduce<0>(z, z, 256")) << c.source;
  ASSERT_EQ(c.left.size(), 4u) << conversion_to_text(c);
  EXPECT_TRUE(
      contains(c.left[0].reason, "may run inside an NCCL group that GroupGuard() opens or closes (line 5) unpaired"))
      << c.left[0].reason;
  EXPECT_TRUE(contains(c.left[2].reason, "group_begin() opens or closes (line 7) unpaired")) << c.left[2].reason;
  // Nested brackets in one function: one group, converted whole.
  const std::string nested =
      kPrologue +
      "int main(int argc, char** argv) {\n"
      "  int rank = argc; ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, rank);\n"
      "  float *a, *b; cudaMalloc(&a, 4096); cudaMalloc(&b, 4096);\n"
      "  ncclGroupStart();\n"
      "  ncclGroupStart();\n"
      "  ncclSend(a, 256, ncclFloat, 1 - rank, comm, s);\n"
      "  ncclRecv(b, 256, ncclFloat, 1 - rank, comm, s);\n"
      "  ncclGroupEnd();\n"
      "  ncclGroupEnd();\n"
      "}\n";
  const Analysis n = analyze("user.cu", nested);
  ASSERT_EQ(n.groups.size(), 1u);
  EXPECT_EQ(n.groups[0].start_line, 8);
  EXPECT_EQ(n.groups[0].end_line, 13);
  const Conversion nc = transform(n, nested);
  EXPECT_EQ(nc.converted_calls, 2) << conversion_to_text(nc);
}

// Group wrappers called in pairs (`pg.start_coalescing(); pg.send(..); pg.recv(..);
// pg.end_coalescing();`, torch.distributed's shape): one group whose members are the calls reached
// between each pair, converted whole; the wrappers' own ncclGroupStart/End become the runtime's
// group brackets. Not a pair, the calls stay held: the opening call under an unbraced if, the
// closing one in another function, another object's send or receive between them (maybe another
// communicator), two opens before a close.
TEST(AnalyzerUserIdioms, GroupWrappersCalledInPairsAreAGroup) {
  const auto program = [](const std::string& step, const std::string& extra = "") {
    return kPrologue +
           "class ProcessGroup {\n"
           " public:\n"
           "  ProcessGroup(ncclUniqueId id, int rank, int size) : rank_(rank), size_(size) {\n"
           "    ncclCommInitRank(&comm_, size, id, rank); cudaStreamCreate(&stream_);\n"
           "  }\n"
           "  void start_coalescing() { ncclGroupStart(); }\n"
           "  void end_coalescing() { ncclGroupEnd(); }\n"
           "  void send(const __half* p, size_t n, int peer) { ncclSend(p, n, ncclHalf, peer, comm_, stream_); }\n"
           "  void recv(__half* p, size_t n, int peer) { ncclRecv(p, n, ncclHalf, peer, comm_, stream_); }\n"
           "  int rank() const { return rank_; }\n"
           "  int size() const { return size_; }\n"
           " private:\n"
           "  ncclComm_t comm_; cudaStream_t stream_; int rank_, size_;\n"
           "};\n" +
           extra +
           "static void exchange(ProcessGroup& pg, __half* out, __half* in, size_t n) {\n"
           "  const int next = (pg.rank() + 1) % pg.size(), prev = (pg.rank() + pg.size() - 1) % pg.size();\n" +
           step +
           "}\n"
           "int main(int argc, char** argv) {\n"
           "  ncclUniqueId id; ProcessGroup pg(id, argc, 2);\n"
           "  __half *a, *b; cudaMalloc(&a, 1 << 20); cudaMalloc(&b, 1 << 20);\n"
           "  for (int step = 0; step < 4; ++step) exchange(pg, a, b, 1 << 19);\n"
           "}\n";
  };
  const std::string paired = program(
      "  pg.start_coalescing();\n"
      "  pg.send(out, n, next);\n"
      "  pg.recv(in, n, prev);\n"
      "  pg.end_coalescing();\n");
  const Analysis a = analyze("user.cu", paired);
  ASSERT_EQ(a.groups.size(), 1u);
  EXPECT_EQ(a.groups[0].start_line, 10);
  EXPECT_EQ(a.groups[0].end_line, 11);
  EXPECT_EQ(a.groups[0].members.size(), 2u);
  EXPECT_EQ(a.groups[0].regions.size(), 1u);
  EXPECT_EQ(first_call(a, "ncclSend").group, 0);
  EXPECT_EQ(first_call(a, "ncclRecv").group, 0);
  const Conversion c = transform(a, paired);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "void start_coalescing() { braid_converted::group_start(); }")) << c.source;
  EXPECT_TRUE(contains(c.source, "void end_coalescing() { braid_converted::group_end<0>(); }")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::send<0>(p, n, ncclHalf, peer, comm_, stream_)")) << c.source;
  EXPECT_TRUE(
      contains(conversion_to_text(c), "runs inside the group that start_coalescing() opens (line 10) through send()"))
      << conversion_to_text(c);
  // Written directly between the calls, and with the pair's calls inside an error-checking macro.
  const std::string direct = program(
      "  CHECK(pg.start_coalescing());\n"
      "  pg.send(out, n, next);\n"
      "  pg.recv(in, n, prev);\n"
      "  CHECK(pg.end_coalescing());\n",
      "#define CHECK(x) x\n");
  EXPECT_EQ(convert_text(direct).converted_calls, 2) << left_text(convert_text(direct));
  // Not pairs: each keeps the bracket's reason and both calls stay host NCCL.
  const std::vector<std::string> unpaired = {
      "  if (next != prev) pg.start_coalescing();\n"
      "  pg.send(out, n, next);\n"
      "  pg.recv(in, n, prev);\n"
      "  pg.end_coalescing();\n",
      "  pg.start_coalescing();\n"
      "  pg.send(out, n, next);\n"
      "  pg.recv(in, n, prev);\n"
      "  finish(pg);\n",
      "  ProcessGroup other(ncclUniqueId{}, next, 2);\n"
      "  pg.start_coalescing();\n"
      "  pg.send(out, n, next);\n"
      "  other.recv(in, n, prev);\n"
      "  pg.end_coalescing();\n",
      "  pg.start_coalescing();\n"
      "  pg.start_coalescing();\n"
      "  pg.send(out, n, next);\n"
      "  pg.recv(in, n, prev);\n"
      "  pg.end_coalescing();\n"
      "  pg.end_coalescing();\n",
  };
  for (const std::string& step : unpaired) {
    const bool finishes = contains(step, "finish(pg)");
    const Conversion u =
        convert_text(program(step, finishes ? "static void finish(ProcessGroup& pg) { pg.end_coalescing(); }\n" : ""));
    EXPECT_EQ(u.converted_calls, 0) << step << u.source;
    EXPECT_TRUE(told(u, "start_coalescing() opens or closes (line 10) unpaired")) << step << left_text(u);
  }
}

// A caching allocator hands out blocks it keeps in its own free lists: a pointer taken back out of
// such a container is not traced to one allocation, and the reason says so (it used to say the
// file has no cudaMalloc, beside the allocator's own).
TEST(AnalyzerUserIdioms, ACachingAllocatorsBlocksAreSaidToBeNotTraced) {
  const std::string src = kPrologue +
                          "#include <map>\n"
                          "#include <vector>\n"
                          "class CachingAllocator {\n"
                          " public:\n"
                          "  void* allocate(size_t bytes) {\n"
                          "    auto& list = free_[bytes];\n"
                          "    if (!list.empty()) { void* p = list.back(); list.pop_back(); return p; }\n"
                          "    void* p = nullptr; cudaMalloc(&p, bytes); return p;\n"
                          "  }\n"
                          "  void release(void* p, size_t bytes) { free_[bytes].push_back(p); }\n"
                          " private:\n"
                          "  std::map<size_t, std::vector<void*>> free_;\n"
                          "};\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  CachingAllocator alloc;\n"
                          "  float* grad = static_cast<float*>(alloc.allocate(1 << 22));\n"
                          "  ncclAllReduce(grad, grad, 1 << 20, ncclFloat, ncclSum, comm, s);\n"
                          "  alloc.release(grad, 1 << 22);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 0);
  EXPECT_TRUE(told(c, "is a pointer taken out of `free_`, which the program fills itself (line 14)")) << left_text(c);
}

// A pointer variable set to a run-time choice (nccl-tests' in-place input,
// `int* in = in_place ? recv + rank * n : send`) is either buffer, as the choice written in the
// call is; a branch braid cannot follow keeps the call host NCCL with its reason.
TEST(AnalyzerUserIdioms, AnAliasOfARunTimeChoiceIsEitherBuffer) {
  const auto program = [](const std::string& other) {
    return kPrologue +
           "int main(int argc, char** argv) {\n"
           "  int rank = argc, in_place = argc > 2; ncclComm_t comm; ncclUniqueId id; cudaStream_t s;\n"
           "  ncclCommInitRank(&comm, 2, id, rank);\n"
           "  int *send, *recv; cudaMalloc(&send, 4096); cudaMalloc(&recv, 8192);\n"
           "  int* in = in_place ? recv + (size_t)rank * 1024 : " +
           other +
           ";\n"
           "  ncclAllGather(in, recv, 1024, ncclInt32, comm, s);\n"
           "}\n";
  };
  const std::string src = program("send");
  const Analysis a = analyze("user.cu", src);
  const Call& ag = first_call(a, "ncclAllGather");
  EXPECT_EQ(ag.unresolved, "");
  EXPECT_EQ(ag.arg_buffers.at(0), (std::vector<std::string>{"recv", "send"}));
  EXPECT_EQ(transform(a, src).converted_calls, 1);
  const Conversion unknown = convert_text(program("external_input()"));
  EXPECT_EQ(unknown.converted_calls, 0);
  ASSERT_EQ(unknown.left.size(), 1u);
  EXPECT_TRUE(contains(unknown.left[0].reason, "external_input")) << unknown.left[0].reason;
}

// An aborted communicator (nccl-tests' error path) is forgotten by the runtime: no deregistration
// or device-communicator destruction on it, so the program's later frees cannot reach it.
TEST(AnalyzerUserIdioms, AbortForgetsTheCommunicator) {
  const std::string src = kPrologue +
                          "int main(int argc, char** argv) {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  float* g; cudaMalloc(&g, 4096);\n"
                          "  ncclAllReduce(g, g, 1024, ncclFloat, ncclSum, comm, s);\n"
                          "  ncclResult_t async; ncclCommGetAsyncError(comm, &async);\n"
                          "  if (async != ncclSuccess) ncclCommAbort(comm); else ncclCommDestroy(comm);\n"
                          "  cudaFree(g);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(
      c.source,
      "if (async != ncclSuccess) braid_converted::comm_abort(comm); else braid_converted::comm_destroy(comm);"))
      << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_free(g);")) << c.source;
}

// A registry of tensors by name: a struct whose fields a returning helper fills (`t.grad =
// device_alloc(n)`), moved into a map by `[] = std::move(t)`, `emplace(key, std::move(t))` or
// `try_emplace(key, t)`, then all-reduced over the map (structured bindings). The map's element
// is a copy of `t`, and `t.grad` was written with the helper's buffer.
TEST(AnalyzerUserIdioms, MapElementsCopiedFromStructsWhoseFieldsHelpersFilled) {
  for (const std::string store : {"params[name] = std::move(t);", "params.emplace(name, std::move(t));",
                                  "params.try_emplace(name, t);", "params[name] = t;"}) {
    SCOPED_TRACE(store);
    const std::string src =
        kPrologue +
        "#include <map>\n#include <string>\n"
        "struct Tensor { float* data; float* grad; size_t numel; };\n"
        "static float* device_alloc(size_t n) { float* p; cudaMalloc(&p, n * 4); return p; }\n"
        "int main() {\n"
        "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
        "  std::map<std::string, Tensor> params;\n"
        "  for (const char* name : {\"wq\", \"wk\"}) {\n"
        "    Tensor t; t.numel = 1024;\n"
        "    t.grad = device_alloc(t.numel);\n"
        "    " +
        store +
        "\n"
        "  }\n"
        "  for (auto& [name, t] : params) ncclAllReduce(t.grad, t.grad, t.numel, ncclFloat, ncclSum, comm, s);\n"
        "}\n";
    const Conversion c = convert_text(src);
    EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
    EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&p, n * 4)")) << c.source;
    EXPECT_TRUE(contains(conversion_to_text(c), "params holds copies of t")) << conversion_to_text(c);
  }
}

// A size drawn from a generator seeded with the rank (`std::mt19937 rng(1000 + rank)`) depends on
// the rank like the rank itself: the allocation is agreed, not a plain symmetric one.
TEST(AnalyzerUserIdioms, AGeneratorSeededWithTheRankGivesRankDependentSizes) {
  const std::string src = kPrologue +
                          "#include <random>\n"
                          "int main() {\n"
                          "  int rank = 0; MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
                          "  ncclUniqueId id; ncclComm_t comm; cudaStream_t s; ncclCommInitRank(&comm, 2, id, rank);\n"
                          "  std::mt19937 rng(1000 + rank);\n"
                          "  const size_t n = rng() % 4096 + 1;\n"
                          "  float* p; cudaMalloc(&p, n * sizeof(float));\n"
                          "  ncclAllReduce(p, p, 1, ncclFloat, ncclSum, comm, s);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc_agreed(&p, n * sizeof(float))")) << c.source;
}

// Communicators kept in an array indexed by named constants (`comms[kPairs]`, `comms[kAll]`) are
// one path to the analysis; each of their unconditional creations binds where it is made, so a
// send/recv on the second one never binds at its first call on two ranks only.
TEST(AnalyzerUserIdioms, EveryCreationOfACommunicatorArrayBindsWhereItIsMade) {
  const std::string src = kPrologue +
                          "#include <array>\n"
                          "enum GroupKind { kPairs = 0, kAll = 1 };\n"
                          "int main() {\n"
                          "  int rank = 0; MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
                          "  ncclUniqueId id; ncclComm_t root; cudaStream_t s; ncclCommInitRank(&root, 4, id, rank);\n"
                          "  std::array<ncclComm_t, 2> comms{};\n"
                          "  ncclCommSplit(root, rank % 2, rank, &comms[kPairs], nullptr);\n"
                          "  ncclCommSplit(root, 0, rank, &comms[kAll], nullptr);\n"
                          "  float* buf; cudaMalloc(&buf, 4096);\n"
                          "  ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, comms[kPairs], s);\n"
                          "  if (rank == 0) ncclSend(buf, 1024, ncclFloat, 1, comms[kAll], s);\n"
                          "  if (rank == 1) ncclRecv(buf, 1024, ncclFloat, 0, comms[kAll], s);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_split(root, rank % 2, rank, &comms[kPairs], nullptr)"))
      << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_split(root, 0, rank, &comms[kAll], nullptr)")) << c.source;
}

// A class's own `get()` returning its smart pointer's `p_.get()` (braid used to loop on it and
// crash), and a smart pointer member declared empty and given its pointer by `reset(p)` in the
// constructor: followed to the allocation, as an assignment would be.
TEST(AnalyzerUserIdioms, AGetAccessorOverASmartPointerGivenItsPointerByReset) {
  const std::string src =
      kPrologue +
      "#include <memory>\n"
      "template <typename T> class Buffer {\n"
      " public:\n"
      "  explicit Buffer(size_t n) : n_(n) { T* p = nullptr; cudaMalloc(&p, n * sizeof(T)); p_.reset(p); }\n"
      "  T* get() const { return p_.get(); }\n"
      "  size_t size() const { return n_; }\n"
      " private:\n"
      "  struct Del { void operator()(T* p) const { cudaFree(p); } };\n"
      "  std::unique_ptr<T, Del> p_;\n"
      "  size_t n_ = 0;\n"
      "};\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  Buffer<float> g(1 << 20);\n"
      "  ncclAllReduce(g.get(), g.get(), g.size(), ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&p, n * sizeof(T))")) << c.source;
}
