// The program's own headers written into the file (header_inline.hpp): a collective in a helper of
// "comm.h" converts like one in the file, lines stay the user's, and headers that stay files are
// still found from wherever the converted file is built.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "braid/convert/header_inline.hpp"
#include "braid/convert/transform.hpp"
#include "braid/util/fs.hpp"

using namespace braid::convert;
namespace fs = std::filesystem;

namespace {

// A program in a folder of its own: main.cu, include/comm.h (a helper calling ncclAllReduce, which
// includes "types.h" beside it) and include/types.h (no NCCL).
struct Project {
  fs::path dir;
  explicit Project(const std::string& name) : dir(fs::temp_directory_path() / ("braid_header_inline_" + name)) {
    fs::remove_all(dir);
    fs::create_directories(dir / "include");
    braid::write_file_atomic(dir / "include/types.h", "#pragma once\ntypedef float grad_t;\n");
    braid::write_file_atomic(dir / "include/comm.h",
                             "#pragma once\n"
                             "#include <nccl.h>\n"
                             "#include \"types.h\"\n"
                             "\n"
                             "inline void allreduce_grads(grad_t* g, size_t n, ncclComm_t c, cudaStream_t s) {\n"
                             "  ncclAllReduce(g, g, n, ncclFloat, ncclSum, c, s);\n"
                             "}\n");
  }
  ~Project() { fs::remove_all(dir); }
  std::string main_text(const std::string& include_line) const {
    return "#include <nccl.h>\n" + include_line +
           "\n"
           "int main() {\n"
           "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  cudaStream_t s; cudaStreamCreate(&s);\n"
           "  float* g; cudaMalloc(&g, 4096);\n"
           "  allreduce_grads(g, 1024, comm, s);\n"
           "  ncclAllGather(g, g, 256, ncclFloat, comm, s);\n"  // line 8
           "  cudaFree(g);\n"
           "}\n";
  }
};

const Call* find_call(const Analysis& a, const std::string& name) {
  for (const Call& c : a.calls)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace

TEST(HeaderInline, AHelperInAHeaderConvertsWithTheFileAndLinesStayTheUsers) {
  Project p("helper");
  const std::string src = p.main_text("#include \"comm.h\"");
  const SourceContext context{{(p.dir / "include").string()}, {}};
  const InlinedSource in = inline_headers((p.dir / "main.cu").string(), src, context);
  ASSERT_EQ(in.headers.size(), 1u);
  EXPECT_EQ(in.headers[0].name, "comm.h");
  EXPECT_EQ(in.headers[0].include_line, 2);
  EXPECT_NE(in.text.find("inline void allreduce_grads"), std::string::npos);
  EXPECT_EQ(in.text.find("#pragma once\n"), std::string::npos) << "a #pragma once in the main file warns";
  // types.h stays a file, found through -I as before.
  EXPECT_NE(in.text.find("#include \"types.h\""), std::string::npos);

  const Analysis a = analyze("main.cu", in.text, true, with_inlined(context, in));
  const Call* helper = find_call(a, "ncclAllReduce");
  const Call* own = find_call(a, "ncclAllGather");
  ASSERT_TRUE(helper && own);
  EXPECT_EQ(helper->inlined_from, "comm.h:6");
  EXPECT_EQ(helper->line, 2);  // its #include's
  EXPECT_EQ(own->line, 8);     // the user's line, not the written file's
  EXPECT_TRUE(own->inlined_from.empty());

  const Conversion c = transform(a, in.text);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_EQ(c.inlined_headers, std::vector<std::string>{"comm.h"});
  // The prelude comes before the header's code, which now calls its primitives.
  EXPECT_LT(c.source.find("namespace braid_converted"), c.source.find("inline void allreduce_grads"));
  EXPECT_NE(conversion_to_text(c).find("\"comm.h\" is written into the converted file"), std::string::npos);
}

TEST(HeaderInline, AHeaderBesideTheWrittenOneIsNamedFromTheFilesFolder) {
  Project p("nested");
  const std::string src = p.main_text("#include \"include/comm.h\"");
  // No -I: types.h is found only beside comm.h, which is now in main.cu.
  const InlinedSource in = inline_headers((p.dir / "main.cu").string(), src, SourceContext{});
  ASSERT_EQ(in.headers.size(), 1u);
  EXPECT_NE(in.text.find("#include \"include/types.h\""), std::string::npos) << in.text;
}

TEST(HeaderInline, AHeaderIncludedAgainIsWrittenOnceAndAHeaderOfAHeaderIsNamed) {
  Project p("twice");
  braid::write_file_atomic(p.dir / "include/outer.h",
                           "#ifndef OUTER_H\n#define OUTER_H\n#include \"comm.h\"\n#endif\n");
  const std::string src = p.main_text("#include \"outer.h\"\n#include \"comm.h\"");
  const SourceContext context{{(p.dir / "include").string()}, {}};
  const InlinedSource in = inline_headers((p.dir / "main.cu").string(), src, context);
  ASSERT_EQ(in.headers.size(), 2u);  // outer.h, and comm.h inside it
  EXPECT_TRUE(in.headers[1].nested);
  EXPECT_NE(in.text.find("// braid: \"comm.h\" is written in above"), std::string::npos);
  const Analysis a = analyze("main.cu", in.text, true, with_inlined(context, in));
  const Call* helper = find_call(a, "ncclAllReduce");
  const Call* own = find_call(a, "ncclAllGather");
  ASSERT_TRUE(helper && own);
  EXPECT_EQ(helper->inlined_from, "comm.h:6");
  EXPECT_EQ(helper->line, 2);
  EXPECT_EQ(own->line, 9);  // one more #include line than the first test's program
}

TEST(HeaderInline, HeadersWithoutCallsTheLibrarysOwnAndBraidWorkloadsStayFiles) {
  Project p("plain");
  const SourceContext context{{(p.dir / "include").string()}, {}};
  const std::string only_types = p.main_text("#include \"types.h\"");
  EXPECT_EQ(inline_headers((p.dir / "main.cu").string(), only_types, context).text, only_types);
  // NCCL's own header found through -I declares the API: not the program's code.
  braid::write_file_atomic(
      p.dir / "include/nccl_like.h",
      "ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, int t, int o, void* c, void* st);\n");
  const std::string library = p.main_text("#include \"nccl_like.h\"");
  EXPECT_EQ(inline_headers((p.dir / "main.cu").string(), library, context).text, library);
  const std::string workload = p.main_text("#include \"braid/harness.cuh\"\n#include \"comm.h\"");
  EXPECT_EQ(inline_headers((p.dir / "main.cu").string(), workload, context).text, workload);
}

// A header included inside braces (`extern "C" {`, a namespace) gets the converted primitives
// before that construct: inside it, their templates would take C linkage or the namespace's name.
TEST(HeaderInline, ThePrimitivesGoOutsideBracesAroundTheInclude) {
  Project p("braces");
  const std::string src = p.main_text("namespace util {\n#include \"comm.h\"\n}\nusing util::allreduce_grads;");
  const SourceContext context{{(p.dir / "include").string()}, {}};
  const InlinedSource in = inline_headers((p.dir / "main.cu").string(), src, context);
  ASSERT_EQ(in.headers.size(), 1u);
  const std::size_t at = before_written_headers(in.text, in.headers);
  EXPECT_EQ(in.text.substr(at, 16), "\nnamespace util ") << in.text.substr(at, 40);
  const Conversion c = transform(analyze("main.cu", in.text, true, with_inlined(context, in)), in.text);
  EXPECT_LT(c.source.find("namespace braid_converted"), c.source.find("namespace util"));
  EXPECT_EQ(before_written_headers(src, {}), src.size());
}
