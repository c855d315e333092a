// read_user_program (pipeline/user_flags.hpp): `convert` and `run` read a program with its own
// headers that call NCCL written in, unless --keep-headers.
#include <gtest/gtest.h>

#include <filesystem>

#include "braid/convert/transform.hpp"
#include "braid/pipeline/user_flags.hpp"
#include "braid/util/fs.hpp"

using namespace braid::convert;
namespace fs = std::filesystem;

TEST(UserProgram, HeadersAreWrittenInUnlessKept) {
  const fs::path dir = fs::temp_directory_path() / "braid_user_program_keep";
  fs::remove_all(dir);
  fs::create_directories(dir / "include");
  braid::write_file_atomic(dir / "include/comm.h",
                           "#pragma once\n#include <nccl.h>\n\n\n\n"
                           "inline void allreduce_grads(float* g, size_t n, ncclComm_t c, cudaStream_t s) {\n"
                           "  ncclAllReduce(g, g, n, ncclFloat, ncclSum, c, s);\n}\n");
  const std::string src =
      "#include <nccl.h>\n#include \"comm.h\"\nint main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  float* g; cudaMalloc(&g, 4096);\n  allreduce_grads(g, 1024, comm, s);\n"
      "  ncclAllGather(g, g, 256, ncclFloat, comm, s);\n  cudaFree(g);\n}\n";
  braid::write_file_atomic(dir / "main.cu", src);
  braid::UserFlags flags;
  flags.includes = {(dir / "include").string()};
  EXPECT_NE(braid::read_user_program(dir / "main.cu", flags).text, src);
  flags.keep_headers = true;
  const InlinedSource kept = braid::read_user_program(dir / "main.cu", flags);
  EXPECT_EQ(kept.text, src);
  EXPECT_TRUE(kept.headers.empty());
  // Then the header's call stays host, with the reason (the file alone is written).
  const Analysis a = analyze((dir / "main.cu").string(), src, true, SourceContext{flags.includes, {}});
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_NE(conversion_to_text(c).find("written in header comm.h:7"), std::string::npos) << conversion_to_text(c);
  fs::remove_all(dir);
}
