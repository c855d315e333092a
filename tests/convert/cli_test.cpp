// `braid convert` through the binary: --explain/--json, -o with its summaries, and bad input
// (one line naming file and line, exit code 2, nothing written).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "braid/util/fs.hpp"
#include "braid/util/json.hpp"
#include "braid/util/subprocess.hpp"

namespace {

struct Ran {
  int code;
  std::string out, err;
};

Ran braid_convert(const std::vector<std::string>& args) {
  braid::SubprocessOptions o;
  o.argv = {BRAID_BIN, "convert"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.timeout_s = 300;
  o.cwd = std::filesystem::temp_directory_path();
  braid::SubprocessResult r = braid::run_subprocess(o);
  return {r.exit_code, r.stdout_text, r.stderr_text};
}

std::filesystem::path corpus(const std::string& name) {
  return std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus" / name;
}

std::filesystem::path fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("braid-convert-cli-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

TEST(ConvertCli, ExplainPrintsTheGraphAndWritesJson) {
  const auto dir = fresh_dir("explain");
  Ran r = braid_convert({corpus("two_streams.cu").string(), "--explain", "--json", (dir / "g.json").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ncclAllGather on comm_stream touches shard,gathered"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(event gathered_ready: comm_stream -> compute)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 of 1 NCCL calls converted by rules (complete)"), std::string::npos);
  braid::json j = braid::json::parse(braid::read_file(dir / "g.json"));
  EXPECT_EQ(j["streams"].size(), 2u);
  EXPECT_EQ(j["buffers"]["gathered"]["bytes"].get<long>(), 1048576L * 8 * 4);
  EXPECT_TRUE(j["conversion"]["complete"].get<bool>());
  std::filesystem::remove_all(dir);
}

TEST(ConvertCli, OutputWritesSourceAndSummaries) {
  const auto dir = fresh_dir("out");
  const auto out = dir / "ring.cu";
  Ran r = braid_convert({corpus("ring_sendrecv.cu").string(), "-o", out.string(), "--no-build"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(braid::read_file(out).find("braid_converted::send<0>(mine"), std::string::npos);
  braid::json s = braid::json::parse(braid::read_file(out.string() + ".summary.json"));
  EXPECT_EQ(s["status"], "unchecked");
  EXPECT_FALSE(s["accepted"].get<bool>());
  EXPECT_EQ(s["converted_calls"].get<int>(), 2);
  EXPECT_NE(braid::read_file(out.string() + ".summary.txt").find("stage B send"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// A host-only source (.cpp) comes back with kernels: the summary says to build it as CUDA; a .cu does not need saying.
TEST(ConvertCli, AHostOnlySourceIsToldToBuildAsCuda) {
  const auto dir = fresh_dir("cpp");
  std::filesystem::copy_file(corpus("ring_sendrecv.cu"), dir / "ring.cpp");
  Ran r = braid_convert({(dir / "ring.cpp").string(), "-o", (dir / "ring_conv.cpp").string(), "--no-build"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("note: ring_conv.cpp now holds device code"), std::string::npos) << r.out;
  EXPECT_NE(braid::read_file(dir / "ring_conv.cpp.summary.txt").find("LANGUAGE CUDA"), std::string::npos);
  r = braid_convert({(dir / "ring.cpp").string(), "-o", (dir / "ring_conv.cu").string(), "--no-build"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("now holds device code"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(ConvertCli, BadInputExitsTwoAndWritesNothing) {
  const auto dir = fresh_dir("bad");
  braid::write_file_atomic(dir / "notes.cu", "Remember to buy milk.\n");
  braid::write_file_atomic(dir / "plain.cu", "#include <cstdio>\nint main() { return 0; }\n");
  braid::write_file_atomic(dir / "open.cu",
                           "#include <nccl.h>\nint main() {\n  float* b;\n  cudaMalloc(&b, 64);\n  ncclGroupStart();\n"
                           "  ncclAllReduce(b, b, 16, ncclFloat, ncclSum, comm, 0);\n}\n");
  const std::map<std::string, std::string> expected = {
      {"notes.cu", "notes.cu: is not C++/CUDA source"},
      {"plain.cu", "plain.cu: has no NCCL collective or point-to-point call"},
      {"open.cu", "open.cu:5: ncclGroupStart without a matching ncclGroupEnd"},
      {"missing.cu", "missing.cu: no such file"},
  };
  for (const auto& [name, message] : expected) {
    SCOPED_TRACE(name);
    const auto out = dir / (name + ".out.cu");
    Ran r = braid_convert({(dir / name).string(), "-o", out.string(), "--json", (dir / (name + ".json")).string()});
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
    EXPECT_FALSE(std::filesystem::exists(dir / (name + ".json")));
  }
  std::filesystem::remove_all(dir);
}

TEST(ConvertCli, NothingConvertibleWithOutputExitsTwoButPrintsTheGraph) {
  const auto dir = fresh_dir("none");
  braid::write_file_atomic(
      dir / "nosize.cu", "#include <nccl.h>\nvoid f(float* p) {\n\n  ncclAllGather(p, p, 4, ncclFloat, comm, 0);\n}\n");
  const auto out = dir / "out.cu";
  Ran r = braid_convert(
      {(dir / "nosize.cu").string(), "-o", out.string(), "--explain", "--json", (dir / "g.json").string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("nosize.cu: no NCCL call can be converted by rules (1 found"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.out.find("ncclAllGather"), std::string::npos) << r.out;  // the graph, always
  EXPECT_NE(r.out.find("`p` is a parameter of f(), which is not called in this file"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_TRUE(std::filesystem::exists(dir / "g.json"));
  std::filesystem::remove_all(dir);
}

TEST(ConvertCli, AFolderIsNamedAsOne) {
  const auto dir = fresh_dir("folder");
  Ran r = braid_convert({dir.string(), "--explain"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("is a folder: give one CUDA/NCCL source file"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(ConvertCli, RelativeOutputIsTheCallersFolder) {
  const auto dir = fresh_dir("relative");
  braid::SubprocessOptions o;
  o.argv = {BRAID_BIN, "convert", corpus("ring_sendrecv.cu").string(), "-o", "sub/out.cu", "--no-build"};
  o.cwd = dir;
  o.timeout_s = 60;
  std::filesystem::create_directories(dir / "sub");
  braid::SubprocessResult r = braid::run_subprocess(o);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_TRUE(std::filesystem::exists(dir / "sub/out.cu"));
  EXPECT_TRUE(std::filesystem::exists(dir / "sub/out.cu.summary.json"));
  std::filesystem::remove_all(dir);
}

TEST(ConvertCli, VerifyWithoutMarkersRunsTheDifferentialGate) {
  // A user's program: no // braid: markers, no harness. Without a GPU (or toolkit) the gate
  // fails as a value; with one it passes; either way it is the differential gate that ran.
  const auto dir = fresh_dir("diffgate");
  const auto user = std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus_user/embedding_allgather_types.cu";
  Ran r = braid_convert({user.string(), "-o", (dir / "out.cu").string(), "--no-build", "--verify", "--ranks", "1",
                         "--json", (dir / "g.json").string()});
  ASSERT_TRUE(r.code == 0 || r.code == 1) << r.err;
  braid::json j = braid::json::parse(braid::read_file(dir / "g.json"));
  EXPECT_EQ(j["gate"]["details"]["mode"], "differential") << j["gate"].dump();
  EXPECT_EQ(j["gate"]["details"]["launcher"], "local");
  EXPECT_EQ(r.code == 0, j["gate"]["passed"].get<bool>());
  if (r.code == 1) EXPECT_NE(r.err.find("the verification gate failed"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(ConvertCli, ProgramArgsMustParse) {
  const auto dir = fresh_dir("progargs");
  const auto user = std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus_user/embedding_allgather_types.cu";
  Ran r = braid_convert(
      {user.string(), "-o", (dir / "out.cu").string(), "--no-build", "--verify", "--program-args", "'unterminated"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--program-args"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "out.cu"));
  std::filesystem::remove_all(dir);
}

// The gate's time limit per side is the user's to raise (a program that trains for minutes), and
// a limit that is no positive number of seconds stops before anything is written.
TEST(ConvertCli, GateTimeoutMustBePositive) {
  const auto dir = fresh_dir("gatetimeout");
  const auto user = std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus_user/embedding_allgather_types.cu";
  for (const char* bad : {"0", "-5"}) {
    Ran r = braid_convert(
        {user.string(), "-o", (dir / "out.cu").string(), "--no-build", "--verify", "--gate-timeout", bad});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("--gate-timeout"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "out.cu"));
  }
  std::filesystem::remove_all(dir);
}

// The program's own headers and the build's -D macros reach the analysis: a collective written in
// a header's macro is converted, and -DUSE_BF16 picks the bf16 body of an #ifdef'd type macro.
TEST(ConvertCli, HeaderMacrosAndDefinesAreRead) {
  const auto user = std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus_user";
  const auto d = fresh_dir("headers");
  const Ran r =
      braid_convert({(user / "nccl_example_one_device_per_process.cu").string(), "--json", (d / "a.json").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const braid::json j = braid::json::parse(braid::read_file(d / "a.json"));
  EXPECT_EQ(j["conversion"]["converted_calls"].get<int>(), 2) << j["conversion"].dump(2);
  const Ran bf16 =
      braid_convert({(user / "c_style_globals_use_bf16.cu").string(), "-DUSE_BF16", "--json", (d / "b.json").string()});
  ASSERT_EQ(bf16.code, 0) << bf16.err;
  const std::string calls = braid::json::parse(braid::read_file(d / "b.json"))["calls"].dump();
  EXPECT_NE(calls.find("ncclBfloat16"), std::string::npos);
  EXPECT_EQ(calls.find("NCCL_REAL"), std::string::npos);
  std::filesystem::remove_all(d);
}

// A helper in the program's header converts with the file (the header is written in), the user's
// -std replaces braid's default (a C++17 program that names a variable `requires`), and
// --keep-headers leaves the header's call host NCCL.
TEST(ConvertCli, HeaderHelpersConvertAndTheUsersStandardIsKept) {
  const auto d = fresh_dir("helper-header");
  std::filesystem::create_directories(d / "include");
  braid::write_file_atomic(d / "include/comm.h",
                           "#pragma once\n#include <nccl.h>\n"
                           "inline void sum(float* g, size_t n, ncclComm_t c, cudaStream_t s) {\n"
                           "  ncclAllReduce(g, g, n, ncclFloat, ncclSum, c, s);\n}\n");
  braid::write_file_atomic(d / "main.cu",
                           "#include <nccl.h>\n#include \"comm.h\"\n"
                           "int main() {\n  int requires = 0;\n"
                           "  ncclUniqueId id; ncclGetUniqueId(&id);\n"
                           "  ncclComm_t comm; ncclCommInitRank(&comm, 1, id, requires);\n"
                           "  cudaStream_t s; cudaStreamCreate(&s);\n"
                           "  float* g; cudaMalloc(&g, 4096);\n  sum(g, 1024, comm, s);\n"
                           "  ncclAllGather(g, g, 256, ncclFloat, comm, s);\n  cudaFree(g);\n"
                           "  ncclCommDestroy(comm);\n}\n");
  const std::vector<std::string> flags = {"-I", (d / "include").string(), "--nvcc-flags", "-std=c++17"};
  std::vector<std::string> args = {(d / "main.cu").string(), "-o", (d / "out.cu").string()};
  args.insert(args.end(), flags.begin(), flags.end());
  const Ran r = braid_convert(args);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 of 2 NCCL calls converted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"comm.h\" is written into the converted file"), std::string::npos) << r.out;
  EXPECT_NE(braid::read_file(d / "out.cu").find("// braid: begin of \"comm.h\""), std::string::npos);

  args = {(d / "main.cu").string(), "--keep-headers"};
  args.insert(args.end(), flags.begin(), flags.end());
  const Ran kept = braid_convert(args);
  ASSERT_EQ(kept.code, 0) << kept.err;
  EXPECT_NE(kept.out.find("1 of 2 NCCL calls converted"), std::string::npos) << kept.out;
  std::filesystem::remove_all(d);
}
