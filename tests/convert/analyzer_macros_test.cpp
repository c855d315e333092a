// The analyzer on calls written inside the file's macros (macros.hpp: each use is a call site, read
// in its expansion) and on class fields set by constructors (buffer_flow.hpp: member-initialiser
// lists and assignments followed to the construction site).
#include <gtest/gtest.h>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/macros.hpp"
#include "braid/convert/transform.hpp"
#include "braid/util/error.hpp"

using namespace braid::convert;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<const Call*> collectives(const Analysis& a) {
  std::vector<const Call*> out;
  for (std::size_t i : a.nccl_collectives()) out.push_back(&a.calls[i]);
  return out;
}

const std::string kMacroProgram =
    "#include <nccl.h>\n"                                                                                 // 1
    "#define NCCLCHECK(cmd) do { ncclResult_t r = (cmd); if (r != ncclSuccess) exit(1); } while (0)\n"    // 2
    "#define DT ncclHalf\n"                                                                               // 3
    "#define N_LAYERS 4\n"                                                                                // 4
    "#define ALLREDUCE(buf, n) \\\n  NCCLCHECK(ncclAllReduce(buf, buf, n, DT, ncclSum, comm, stream))\n"  // 5-6
    "#define SYNC_LOSS NCCLCHECK(ncclAllReduce(loss, loss, 2, ncclFloat, ncclSum, comm, stream))\n"       // 7
    "ncclComm_t comm;\n"                                                                                  // 8
    "cudaStream_t stream;\n"                                                                              // 9
    "void reduce_emb(half* e, size_t n) { ALLREDUCE(e, n); }\n"                                           // 10
    "int main() {\n"                                                                                      // 11
    "  half *grads, *emb;\n"                                                                              // 12
    "  float* loss;\n"                                                                                    // 13
    "  ncclCommInitRank(&comm, 2, id, 0);\n"                                                              // 14
    "  cudaMalloc(&grads, N_LAYERS * 1024 * sizeof(half));\n"                                             // 15
    "  cudaMalloc(&emb, 2048);\n"                                                                         // 16
    "  cudaMalloc(&loss, 8);\n"                                                                           // 17
    "  for (int l = 0; l < N_LAYERS; ++l) {\n"                                                            // 18
    "    ALLREDUCE(grads + l * 1024,\n              1024);\n"                                             // 19-20
    "  }\n"                                                                                               // 21
    "  reduce_emb(emb, 1024);\n"                                                                          // 22
    "  SYNC_LOSS;\n"                                                                                      // 23
    "  NCCLCHECK(ncclAllReduce(loss, loss, 2, ncclFloat, ncclMax, comm, stream));\n"                      // 24
    "}\n";

}  // namespace

TEST(AnalyzerMacros, EachUseIsACallSiteWithItsArgumentsSubstituted) {
  const Analysis a = analyze("m.cu", kMacroProgram);
  const std::vector<const Call*> cs = collectives(a);
  ASSERT_EQ(cs.size(), 4u);
  ASSERT_EQ(a.macro_uses.size(), 3u);
  // The helper's use: its parameter is followed to the caller's allocation.
  EXPECT_EQ(cs[0]->line, 10);
  EXPECT_EQ(cs[0]->function, "reduce_emb");
  EXPECT_EQ(cs[0]->args[0].text, "e");
  EXPECT_EQ(cs[0]->args[3].text, "ncclHalf");  // DT read as the compiler sees it
  EXPECT_EQ(cs[0]->buffers, std::vector<std::string>{"emb"});
  // The loop's use, its arguments over two lines.
  EXPECT_EQ(cs[1]->line, 19);
  EXPECT_GE(cs[1]->loop, 0);
  EXPECT_EQ(cs[1]->args[0].text, "grads + l * 1024");
  EXPECT_EQ(cs[1]->buffers, std::vector<std::string>{"grads"});
  EXPECT_EQ(cs[1]->macro_use, 1);
  const MacroUse& use = a.macro_uses[1];
  EXPECT_EQ(use.name, "ALLREDUCE");
  EXPECT_EQ(use.expansion,
            "NCCLCHECK(ncclAllReduce(grads + l * 1024, grads + l * 1024, 1024, DT, ncclSum, comm, stream))");
  EXPECT_EQ(kMacroProgram.substr(use.begin, use.end - use.begin), "ALLREDUCE(grads + l * 1024,\n              1024)");
  // The call's byte range and statement are the use's (diagnostic_rerun inserts after it).
  EXPECT_EQ(cs[1]->call_begin, use.begin);
  EXPECT_EQ(kMacroProgram.substr(cs[1]->stmt_begin, cs[1]->stmt_end - cs[1]->stmt_begin),
            "ALLREDUCE(grads + l * 1024,\n              1024);");
  EXPECT_EQ(cs[1]->expansion_at, use.expansion.find("ncclAllReduce"));
  // An object-like macro, and a call in a wrapper macro written out (no macro use: as today).
  EXPECT_EQ(cs[2]->line, 23);
  EXPECT_EQ(a.macro_uses[2].name, "SYNC_LOSS");
  EXPECT_EQ(cs[3]->macro_use, -1);
  EXPECT_EQ(cs[3]->args[4].text, "ncclMax");
  EXPECT_EQ(a.constants.at("N_LAYERS"), 4);
  EXPECT_EQ(a.buffers.at("grads").bytes.value(), 4 * 1024 * 2);
  EXPECT_TRUE(a.unsupported.empty());
  // The graph names the uses.
  EXPECT_TRUE(contains(analysis_to_text(a), "[in macro ALLREDUCE]"));
  EXPECT_TRUE(contains(analysis_to_text(a), "line 23   SYNC_LOSS -> NCCLCHECK(ncclAllReduce(loss, loss, 2,"));
  EXPECT_EQ(analysis_to_json(a)["calls"][a.nccl_collectives()[2]]["macro"], "SYNC_LOSS");
}

TEST(AnalyzerMacros, ConvertedUsesAreWrittenAsTheirExpansion) {
  const Conversion c = transform(analyze("m.cu", kMacroProgram), kMacroProgram);
  EXPECT_EQ(c.converted_calls, 4);
  // The #define lines stay; each use becomes its expansion with the converted call.
  EXPECT_TRUE(contains(
      c.source, "#define ALLREDUCE(buf, n) \\\n  NCCLCHECK(ncclAllReduce(buf, buf, n, DT, ncclSum, comm, stream))\n"));
  EXPECT_TRUE(contains(c.source,
                       "void reduce_emb(half* e, size_t n) { NCCLCHECK(braid_converted::all_reduce<0>(e, e, n, DT, "
                       "ncclSum, comm, stream)); }"));
  EXPECT_TRUE(contains(c.source,
                       "    NCCLCHECK(braid_converted::all_reduce<1>(grads + l * 1024, grads + l * 1024, 1024, DT, "
                       "ncclSum, comm, stream));\n"));
  EXPECT_TRUE(contains(
      c.source, "  NCCLCHECK(braid_converted::all_reduce<2>(loss, loss, 2, ncclFloat, ncclSum, comm, stream));\n"));
  EXPECT_TRUE(contains(
      c.source, "  NCCLCHECK(braid_converted::all_reduce<3>(loss, loss, 2, ncclFloat, ncclMax, comm, stream));\n"));
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&grads, N_LAYERS * 1024 * sizeof(half))"));
  bool told = false;
  for (const Change& ch : c.changes) told = told || contains(ch.why, "written in macro ALLREDUCE");
  EXPECT_TRUE(told);
  // Read again (the rewrite loop, annotation): the calls are where the uses were, written out.
  const Analysis again = analyze_converted("m.cu", c.source);
  EXPECT_EQ(again.nccl_collectives().size(), 4u);
  EXPECT_TRUE(again.macro_uses.empty());
}

// A use whose call stays host NCCL is left as written; a free inside a macro is converted like a plain one.
TEST(AnalyzerMacros, UnconvertedUsesStayAsWritten) {
  const std::string src =
      "#include <nccl.h>\n"
      "#define TP_REDUCE(b) ncclAllReduce(b, b, 4, ncclFloat8e4m3, ncclSum, tp_comm, 0)\n"
      "#define DP_REDUCE(b) ncclAllReduce(b, b, 4, ncclFloat, ncclSum, dp_comm, 0)\n"
      "#define FREE(p) cudaFree(p)\n"
      "int main() {\n"
      "  float *a, *b;\n"
      "  cudaMalloc(&a, 16);\n"
      "  cudaMalloc(&b, 16);\n"
      "  DP_REDUCE(a);\n"
      "  DP_REDUCE(b);\n"
      "  TP_REDUCE(b);\n"
      "  FREE(a);\n"
      "}\n";
  const Conversion c = transform(analyze("u.cu", src), src);
  EXPECT_EQ(c.converted_calls, 2);
  EXPECT_TRUE(contains(c.source, "  TP_REDUCE(b);\n"));
  EXPECT_TRUE(contains(c.source, "  braid_converted::all_reduce<0>(a, a, 4, ncclFloat, ncclSum, dp_comm, 0);\n"));
  EXPECT_TRUE(contains(c.source, "  braid_converted::sym_free(a);\n"));
  ASSERT_EQ(c.left.size(), 1u);
  EXPECT_EQ(c.left[0].line, 11);
  EXPECT_TRUE(contains(c.left[0].reason, "`ncclFloat8e4m3` has no device reduction")) << c.left[0].reason;
}

TEST(AnalyzerMacros, NestedVariadicPastedAndStringisedMacros) {
  const std::string src =
      "#include <nccl.h>\n"
      "#define CHECK(x) do { if ((x) != 0) { printf(\"%s\", #x); exit(1); } } while (0)\n"
      "#define REDUCE(T, buf, n) CHECK(ncclAllReduce(buf, buf, n, nccl##T, ncclSum, comm, 0))\n"
      "#define REDUCE_F32(buf, ...) REDUCE(Float, buf, __VA_ARGS__)\n"
      "#define BAD(b) ncclAllGather(b, b, 1, ncclFloat, comm, 0)\n"
      "int main() {\n"
      "  float* g;\n"
      "  cudaMalloc(&g, 64);\n"
      "  REDUCE_F32(g, 16);\n"
      "  BAD(g, 2);\n"
      "}\n";
  const Analysis a = analyze("n.cu", src);
  ASSERT_EQ(a.nccl_collectives().size(), 1u);
  const Call& c = a.calls[a.nccl_collectives()[0]];
  EXPECT_EQ(c.line, 9);
  EXPECT_EQ(c.args[2].text, "16");
  EXPECT_EQ(c.args[3].text, "ncclFloat");
  EXPECT_EQ(a.macro_uses[0].expansion, "CHECK(ncclAllReduce(g, g, 16, ncclFloat, ncclSum, comm, 0))");
  ASSERT_EQ(a.unsupported.size(), 1u);
  EXPECT_EQ(a.unsupported[0].line, 10);
  EXPECT_TRUE(contains(a.unsupported[0].reason, "`BAD` takes 1 argument(s), the use passes 2"))
      << a.unsupported[0].reason;
  // The stringising wrapper, expanded on its own, as the preprocessor would.
  const MacroTable table(lex(src).tokens);
  EXPECT_EQ(table.expand_text("CHECK(f(a, \"b\"))", src.size()),
            "do { if ((f(a, \"b\")) != 0) { printf(\"%s\", \"f(a, \\\"b\\\")\"); exit(1); } } while (0)");
}

// `#define AR ncclAllReduce`: the use names the call, its arguments follow in the source.
TEST(AnalyzerMacros, AnAliasOfAnNcclFunctionIsACallSite) {
  const std::string src =
      "#include <nccl.h>\n#define AR ncclAllReduce\nint main() {\n  float* g;\n  cudaMalloc(&g, 64);\n"
      "  AR(g, g, 16, ncclFloat, ncclSum, comm, 0);\n}\n";
  const Analysis a = analyze("a.cu", src);
  ASSERT_EQ(a.nccl_collectives().size(), 1u);
  const Call& c = a.calls[a.nccl_collectives()[0]];
  EXPECT_EQ(c.name, "ncclAllReduce");
  EXPECT_EQ(c.buffers, std::vector<std::string>{"g"});
  EXPECT_EQ(src.substr(c.call_begin, c.call_end - c.call_begin), "AR(g, g, 16, ncclFloat, ncclSum, comm, 0)");
  EXPECT_EQ(src.substr(c.stmt_begin, c.stmt_end - c.stmt_begin), "AR(g, g, 16, ncclFloat, ncclSum, comm, 0);");
  const Conversion conv = transform(a, src);
  EXPECT_TRUE(contains(conv.source, "  braid_converted::all_reduce<0>(g, g, 16, ncclFloat, ncclSum, comm, 0);\n"));
}

TEST(AnalyzerMacros, AFileWhoseCallsAreAllInUnexpandableMacrosSaysSo) {
  const std::string src =
      "#include <nccl.h>\n#define AR(b) ncclAllReduce(b, b, 4, ncclFloat, ncclSum, comm, 0)\n#undef AR\n"
      "#define AR(b) ncclAllReduce(b, b, 4, ncclFloat, ncclMax, comm, 0)\n#define AR(b) ncclAllReduce(b)\n"
      "int main() {\n float* b;\n cudaMalloc(&b, 16);\n AR(b);\n}\n";
  try {
    analyze("x.cu", src);
    FAIL() << "no error";
  } catch (const braid::UserError& e) {
    EXPECT_TRUE(contains(e.what(), "has no NCCL collective")) << e.what();
    EXPECT_TRUE(contains(e.what(), "line 9: NCCL or memory calls inside macro `AR`")) << e.what();
  }
}

// Code the compiler never sees is not analysed: `#if 0`, and the `#else` of a macro the build defines.
TEST(AnalyzerMacros, BranchesKnownNotCompiledAreNotCode) {
  const std::string src =
      "#include <nccl.h>\n"                                                                       // 1
      "#if 0\n"                                                                                   // 2
      "void old(float* g, ncclComm_t c) { ncclAllReduce(g, g, 4, ncclFloat, ncclSum, c, 0); }\n"  // 3
      "#endif\n"                                                                                  // 4
      "int main() {\n"                                                                            // 5
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"                                   // 6
      "  float* b; cudaMalloc(&b, 16);\n"                                                         // 7
      "#ifdef USE_BCAST\n"                                                                        // 8
      "  ncclBroadcast(b, b, 4, ncclFloat, 0, comm, 0);\n"                                        // 9
      "#else\n"                                                                                   // 10
      "  ncclAllReduce(b, b, 4, ncclFloat, ncclSum, comm, 0);\n"                                  // 11
      "#endif\n"                                                                                  // 12
      "}\n";
  const Analysis without = analyze("x.cu", src);
  ASSERT_EQ(collectives(without).size(), 2u);  // USE_BCAST unknown: both branches may be compiled
  for (const Call* c : collectives(without)) EXPECT_NE(c->line, 3);
  SourceContext defined;
  defined.defines = {"USE_BCAST"};
  const Analysis with = analyze("x.cu", src, true, defined);
  ASSERT_EQ(collectives(with).size(), 1u);
  EXPECT_EQ(collectives(with)[0]->line, 9);
}

namespace {

const std::string kTrainer =
    "#include <nccl.h>\n"                                                                                // 1
    "class Trainer {\n"                                                                                  // 2
    " public:\n"                                                                                         // 3
    "  Trainer(ncclComm_t c, cudaStream_t s, size_t n) : comm_(c), stream_{s}, n_(n) {\n"                // 4
    "    cudaMalloc(&grads_, n * 4);\n"                                                                  // 5
    "  }\n"                                                                                              // 6
    "  void step();\n"                                                                                   // 7
    " private:\n"                                                                                        // 8
    "  ncclComm_t comm_;\n"                                                                              // 9
    "  cudaStream_t stream_;\n"                                                                          // 10
    "  size_t n_;\n"                                                                                     // 11
    "  float* grads_ = nullptr;\n"                                                                       // 12
    "};\n"                                                                                               // 13
    "void Trainer::step() { ncclAllReduce(grads_, grads_, n_, ncclFloat, ncclSum, comm_, stream_); }\n"  // 14
    "struct Stats {\n"                                                                                   // 15
    "  Stats(ncclComm_t c) { cudaMalloc(&buf, 8); this->comm = c; }\n"                                   // 16
    "  void sum() { ncclAllReduce(buf, buf, 2, ncclFloat, ncclSum, this->comm, 0); }\n"                  // 17
    "  ncclComm_t comm;\n"                                                                               // 18
    "  float* buf;\n"                                                                                    // 19
    "};\n";                                                                                              // 20

}  // namespace

TEST(AnalyzerMembers, FieldsSetByConstructorsAreFollowedToTheConstructionSite) {
  const std::string src = kTrainer +
                          "int main() {\n"
                          "  ncclComm_t world;\n"
                          "  ncclCommInitRank(&world, 2, id, 0);\n"
                          "  Trainer t(world, 0, 1024);\n"
                          "  auto stats = std::make_unique<Stats>(world);\n"
                          "  t.step();\n"
                          "  stats->sum();\n"
                          "}\n";
  const Analysis a = analyze("t.cu", src);
  const std::vector<const Call*> cs = collectives(a);
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0]->function, "step");
  EXPECT_EQ(cs[0]->comm_paths, std::vector<std::string>{"world"});
  EXPECT_EQ(cs[0]->buffers, std::vector<std::string>{"grads_"});
  ASSERT_EQ(cs[0]->comm_via.size(), 2u);
  EXPECT_EQ(cs[0]->comm_via[0], "field comm_ of Trainer <- c (member-initialiser list of Trainer(), line 4)");
  EXPECT_EQ(cs[0]->comm_via[1], "c of Trainer() <- world (line 24, in main())");
  EXPECT_EQ(cs[1]->comm_paths, std::vector<std::string>{"world"});  // assigned in the body, through this->
  EXPECT_EQ(cs[0]->stream, "stream_");
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 2);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&grads_, n * 4)"));
}

// A field set from two communicators (one Trainer per parallel group) converts on both: the
// runtime binds each where it is created and finds the call's windows on the one it is given.
TEST(AnalyzerMembers, FieldsSetFromSeveralCommunicatorsConvertOnEachAndFromNoneStayHost) {
  const std::string src = kTrainer +
                          "int main() {\n"
                          "  ncclComm_t dp, tp;\n"
                          "  ncclCommInitRank(&dp, 2, id, 0);\n"
                          "  ncclCommInitRank(&tp, 2, id2, 0);\n"
                          "  Trainer a(dp, 0, 1024);\n"
                          "  Trainer b(tp, 0, 1024);\n"
                          "  a.step();\n"
                          "  b.step();\n"
                          "}\n";
  const Analysis a = analyze("t2.cu", src);
  EXPECT_EQ(collectives(a)[0]->comm_paths, (std::vector<std::string>{"dp", "tp"}));
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 1);
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_init_rank(&dp")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::comm_init_rank(&tp")) << c.source;
  // Stats is never constructed: its parameter leads nowhere.
  ASSERT_EQ(c.left.size(), 1u);
  EXPECT_EQ(c.left[0].line, 17);
  EXPECT_TRUE(contains(c.left[0].reason, "`c` is a parameter of Stats(), which is not called in this file"))
      << c.left[0].reason;
}

TEST(AnalyzerMembers, ConstructorHeadsWithInitialiserLists) {
  const std::vector<Token> code =
      code_tokens(lex("struct A { A(int x, int y) : a_(x), b_{y} {} public: A() {} int a_, b_; };").tokens);
  std::vector<std::string> found;
  for (std::size_t i = 0; i < code.size(); ++i)
    if (code[i].text == "{" && function_head(code, i).name != SIZE_MAX) {
      const FunctionHead h = function_head(code, i);
      found.push_back(code[h.name].text + (h.init_colon ? " with initialisers" : ""));
    }
  EXPECT_EQ(found, (std::vector<std::string>{"A with initialisers", "A"}));
}
