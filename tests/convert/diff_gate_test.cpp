// The differential gate without a GPU: manifest parsing, the tolerance formula and its derivation
// from the conversion, the buffer comparator, stdout masking, the launcher choice, and whole gate
// runs over fake "programs" (shell scripts that write snapshots as the shim does, exit non-zero or
// hang); the snapshot shim's bookkeeping against a fake CUDA runtime.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/diff_gate.hpp"
#include "braid/convert/snapshot_compare.hpp"
#include "braid/convert/transform.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/subprocess.hpp"

using namespace braid;
using namespace braid::convert;

namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("braid-diffgate-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.begin(), s.size());
  return s;
}

// A fake program: a bash script that writes the given manifest and 0.bin (hex bytes) for its rank,
// then runs `tail` (exit N, sleep, ...).
std::filesystem::path fake_program(const std::filesystem::path& dir, const std::string& name,
                                   const std::string& manifest, const std::string& bin_escaped,
                                   const std::string& tail = "exit 0") {
  const auto p = dir / name;
  write_file_atomic(p,
                    "#!/usr/bin/env bash\n"
                    "r=${BRAID_RANK:-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}}\n"
                    "d=$BRAID_SNAPSHOT_DIR/rank$r\nmkdir -p \"$d\"\n"
                    "printf '" +
                        manifest +
                        "' > \"$d/manifest.tsv\"\n"
                        "printf '" +
                        bin_escaped +
                        "' > \"$d/0.bin\"\n"
                        "printf '\\x00\\x00\\x40\\x40' > \"$d/1.bin\"\n"  // buffer 1 where listed: 3.0f, always
                        "echo \"rank $r took 1.$RANDOM ms\"\n" +
                        tail + "\n");
  std::filesystem::permissions(p, std::filesystem::perms::owner_all);
  return p;
}

DiffRunSpec local_spec(const std::filesystem::path& dir, int ranks = 2) {
  DiffRunSpec s;
  s.ranks = ranks;
  s.work_dir = dir / "work";
  s.timeout_s = 20;
  return s;
}

const char* const kOneFloatBuffer = "buffer\\t0\\t8\\tcudaMalloc\\tfreed\\nreduce\\t0\\t7\\t0\\tncclAllReduce\\nend\\n";
const char* const kOnePlusOne = "\\x00\\x00\\x80\\x3f\\x00\\x00\\x00\\x40";  // 1.0f 2.0f
const char* const kOnePlusUlp = "\\x01\\x00\\x80\\x3f\\x00\\x00\\x00\\x40";  // 1.0f + 1 ulp, 2.0f

}  // namespace

TEST(DiffGateManifest, ParsesBuffersReductionsAndEnd) {
  const RankSnapshot s = parse_manifest(
      "buffer\t1\t8\tncclMemAlloc\tlive-at-"
      "exit\nbuffer\t0\t16\tcudaMalloc\tfreed\nreduce\t0\t7\t0\tncclAllReduce\nend\n");
  ASSERT_EQ(s.buffers.size(), 2u);
  EXPECT_EQ(s.buffers[0].index, 0u);  // by index, whatever the order of release
  EXPECT_EQ(s.buffers[0].bytes, 16u);
  EXPECT_EQ(s.buffers[1].allocator, "ncclMemAlloc");
  EXPECT_EQ(s.buffers[1].state, "live-at-exit");
  ASSERT_EQ(s.reductions.size(), 1u);
  EXPECT_EQ(s.reductions[0].dtype, 7);
  EXPECT_EQ(s.reductions[0].op, 0);
  EXPECT_TRUE(s.ended);
  EXPECT_TRUE(s.problems.empty());
}

TEST(DiffGateManifest, NamesUnreadableLinesAndMissingEnd) {
  const RankSnapshot s = parse_manifest("buffer\tx\t8\tcudaMalloc\tfreed\nbuffer\t0\t8\tcudaMalloc\tfreed\n");
  EXPECT_FALSE(s.ended);
  EXPECT_EQ(s.buffers.size(), 1u);
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_NE(s.problems[0].find("line 1"), std::string::npos);
  const auto dir = fresh_dir("missing");
  EXPECT_FALSE(read_rank_snapshot(dir, 3).found);
  EXPECT_EQ(read_rank_snapshot(dir, 3).rank, 3);
}

TEST(DiffGateTolerance, FormulaByDtypeOpAndRanks) {
  const Tolerance fp32 = reduction_tolerance(7, 0, 4);
  EXPECT_FALSE(fp32.exact);
  EXPECT_DOUBLE_EQ(fp32.rel, 4 * std::ldexp(1.0, -23));
  EXPECT_EQ(fp32.element, 4u);
  EXPECT_DOUBLE_EQ(reduction_tolerance(7, 4, 4).rel, 5 * std::ldexp(1.0, -23));  // avg: one more rounding
  EXPECT_DOUBLE_EQ(reduction_tolerance(6, 0, 2).rel, 2 * std::ldexp(1.0, -10));  // fp16
  EXPECT_DOUBLE_EQ(reduction_tolerance(9, 0, 2).rel, 2 * std::ldexp(1.0, -7));   // bf16, wider
  EXPECT_TRUE(reduction_tolerance(2, 0, 8).exact);                               // int32 sum: any order gives the same
  EXPECT_TRUE(reduction_tolerance(7, 2, 8).exact);                               // fp32 max: no rounding
  EXPECT_TRUE(reduction_tolerance(-1, -1, 8).exact);
  EXPECT_NE(fp32.text.find("fp32 sum over 4 ranks"), std::string::npos);
}

TEST(DiffGateTolerance, OnlyBuffersOfConvertedReductions) {
  const RankSnapshot s = parse_manifest(
      "buffer\t0\t8\tcudaMalloc\tfreed\nbuffer\t1\t8\tcudaMalloc\tfreed\nreduce\t0\t7\t0\tncclAllReduce\n"
      "reduce\t1\t9\t0\tncclAllReduce\n");
  const std::vector<ConvertedReduction> fp32_sum = {{"ncclAllReduce", 10, 7, 0}};
  EXPECT_FALSE(buffer_tolerance(s, 0, fp32_sum, 2).exact);
  EXPECT_TRUE(buffer_tolerance(s, 1, fp32_sum, 2).exact);  // its bf16 reduction stayed host NCCL
  EXPECT_TRUE(buffer_tolerance(s, 0, {}, 2).exact);        // nothing converted
  const std::vector<ConvertedReduction> unknown = {{"ncclAllReduce", 10, std::nullopt, std::nullopt}};
  EXPECT_EQ(buffer_tolerance(s, 1, unknown, 2).dtype, 9);  // dtype through a variable: matches any
  // Over 4 ranks the converted fp32 sum's rounding may reach buffer 1 (computed from buffer 0): the
  // fp32 sum's allowance, read as buffer 1's own bf16; over 2 ranks the sums are exact, so none.
  const Tolerance downstream = buffer_tolerance(s, 1, fp32_sum, 4);
  EXPECT_FALSE(downstream.exact);
  EXPECT_EQ(downstream.dtype, 9);
  EXPECT_NE(downstream.text.find("downstream of a converted reduction"), std::string::npos) << downstream.text;
  EXPECT_TRUE(buffer_tolerance(s, 1, {}, 4).exact);  // nothing converted: nothing reaches it
  // A conversion that skipped work downstream still fails: stale or poisoned values are far beyond
  // the rounding of a 4-rank fp32 sum, which alone passes.
  const RankSnapshot fp32 = parse_manifest(
      "buffer\t0\t8\tcudaMalloc\tfreed\nbuffer\t1\t8\tcudaMalloc\tfreed\n"
      "reduce\t0\t7\t0\tncclAllReduce\n");
  const Tolerance gathered = buffer_tolerance(fp32, 1, fp32_sum, 4);
  ASSERT_FALSE(gathered.exact);
  EXPECT_EQ(compare_bytes(floats({3.0f, 100.0f}), floats({std::nextafter(3.0f, 4.0f), 100.0f}), gathered), "");
  EXPECT_NE(compare_bytes(floats({3.0f, 100.0f}), floats({0.75f, 100.0f}), gathered), "");  // one rank's share only
  EXPECT_NE(compare_bytes(floats({3.0f, 100.0f}), floats({std::nanf(""), 100.0f}), gathered), "");  // poison left
}

// A double checksum of float fields (hierarchical_node_split_fields: a converted fp32 reduce-scatter,
// then a converted fp64 average of the checksums) moves by the fp32 sum's units over 4 ranks, not
// by fp64's: read as fp64, allowed the coarser rounding; a checksum off by a whole unit still fails.
TEST(DiffGateTolerance, ADoubleComputedFromFloatSumsGetsTheFloatRounding) {
  const RankSnapshot s = parse_manifest(
      "buffer\t0\t64\tcudaMalloc\tfreed\nbuffer\t1\t8\tcudaMalloc\tfreed\n"
      "reduce\t0\t7\t0\tncclReduceScatter\nreduce\t1\t8\t4\tncclAllReduce\n");
  const std::vector<ConvertedReduction> both = {{"ncclReduceScatter", 10, 7, 0}, {"ncclAllReduce", 20, 8, 4}};
  const Tolerance checksum = buffer_tolerance(s, 1, both, 4);
  ASSERT_FALSE(checksum.exact);
  EXPECT_EQ(checksum.dtype, 8);
  EXPECT_DOUBLE_EQ(checksum.rel, 4 * std::ldexp(1.0, -23));
  EXPECT_NE(checksum.text.find("read as fp64"), std::string::npos) << checksum.text;
  const auto doubles = [](double v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); };
  EXPECT_EQ(compare_bytes(doubles(524288.875844121), doubles(524288.8762314916), checksum), "");
  EXPECT_NE(compare_bytes(doubles(524288.875844121), doubles(524289.875844121), checksum), "");
  EXPECT_DOUBLE_EQ(buffer_tolerance(s, 1, both, 2).rel, reduction_tolerance(8, 4, 2).rel);  // 2 ranks: its own only
}

TEST(DiffGateTolerance, DerivedFromTheConversion) {
  const std::string src =
      read_file(std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus_user/embedding_allgather_types.cu");
  const Analysis a = analyze("embedding_allgather_types.cu", src);
  const Conversion c = transform(a, src);
  const auto converted = converted_reductions(a, c);
  const auto all = all_reductions(a);
  ASSERT_EQ(all.size(), 2u);  // fp64 sum and int32 sum
  EXPECT_EQ(all[0].dtype, std::optional<int>(8));
  EXPECT_EQ(all[1].dtype, std::optional<int>(2));
  EXPECT_EQ(all[0].op, std::optional<int>(0));
  EXPECT_LE(converted.size(), all.size());
  for (const auto& r : converted) EXPECT_EQ(r.call, "ncclAllReduce");
  EXPECT_EQ(nccl_dtype_number("ncclHalf"), std::optional<int>(6));
  EXPECT_EQ(nccl_op_number("ncclAvg"), std::optional<int>(4));
  EXPECT_FALSE(nccl_dtype_number("dtype").has_value());
}

TEST(DiffGateCompare, BytesWithinAndBeyondTolerance) {
  const Tolerance exact;
  EXPECT_EQ(compare_bytes("abcd", "abcd", exact), "");
  EXPECT_NE(compare_bytes("abcd", "abXd", exact).find("byte 2"), std::string::npos);
  EXPECT_NE(compare_bytes("abcd", "abc", exact).find("sizes differ"), std::string::npos);
  const Tolerance t = reduction_tolerance(7, 0, 2);
  const float one_ulp = std::nextafter(1.0f, 2.0f);
  EXPECT_EQ(compare_bytes(floats({1.0f, 100.0f}), floats({one_ulp, 100.0f}), t), "");
  double max_diff = 0;
  EXPECT_NE(compare_bytes(floats({1.0f, 100.0f}), floats({1.01f, 100.0f}), t, &max_diff).find("element 0"),
            std::string::npos);
  EXPECT_NEAR(max_diff, 0.01, 1e-6);
  EXPECT_EQ(compare_bytes(floats({NAN, 1.0f}), floats({NAN, 1.0f}), t), "");
  EXPECT_NE(compare_bytes(floats({1.0f}), floats({one_ulp}), exact), "");  // not a reduction: bit-exact
  // bf16: 1.0 and 1.0078125 (one bf16 ulp) within 2 ranks' tolerance.
  const std::string a("\x80\x3f", 2), b("\x81\x3f", 2);
  EXPECT_EQ(compare_bytes(a, b, reduction_tolerance(9, 0, 2)), "");
}

TEST(DiffGateCompare, RankCountsSizesAndStates) {
  const auto dir = fresh_dir("rank");
  std::filesystem::create_directories(dir / "o");
  std::filesystem::create_directories(dir / "c");
  write_file_atomic(dir / "o/0.bin", floats({1.0f, 2.0f}));
  write_file_atomic(dir / "c/0.bin", floats({1.0f, 2.0f}));
  write_file_atomic(dir / "o/1.bin", "abcd");
  write_file_atomic(dir / "c/1.bin", "abcd");
  const RankSnapshot o = parse_manifest(
      "buffer\t0\t8\tcudaMalloc\tfreed\nbuffer\t1\t4\tcudaMalloc\tfreed\nbuffer\t2\t4\tcudaMalloc\tunreadable\n");
  const RankSnapshot c = parse_manifest("buffer\t0\t8\tncclMemAlloc\tfreed\nbuffer\t1\t4\tcudaMalloc\tlive-at-exit\n");
  const auto r = compare_rank(o, dir / "o", c, dir / "c", {}, 2);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_TRUE(r[0].match);
  EXPECT_TRUE(r[0].compared);
  EXPECT_EQ(r[0].allocators, "cudaMalloc -> ncclMemAlloc");
  EXPECT_TRUE(r[1].match);
  EXPECT_EQ(r[1].state, "freed -> live-at-exit");
  EXPECT_FALSE(r[2].match);
  EXPECT_NE(r[2].detail.find("only in the original"), std::string::npos);
  const RankSnapshot bigger = parse_manifest("buffer\t0\t12\tcudaMalloc\tfreed\n");
  EXPECT_NE(compare_rank(o, dir / "o", bigger, dir / "c", {}, 2)[0].detail.find("sizes differ"), std::string::npos);
  const RankSnapshot lost = parse_manifest("buffer\t0\t8\tcudaMalloc\tunreadable\n");
  EXPECT_FALSE(compare_rank(o, dir / "o", lost, dir / "c", {}, 2)[0].match);  // readable in the original only
}

// Per-rank peer pointers, expert operand tables: the allocator's addresses differ between the two
// programs (and a converted program's symmetric heap moves them), what they point to must not.
TEST(DiffGateCompare, AddressTablesByWhatEachWordPointsTo) {
  const auto dir = fresh_dir("addr");
  for (const char* side : {"o", "c"}) std::filesystem::create_directories(dir / side);
  write_file_atomic(dir / "o/1.bin", std::string("\x00\x10\x00\x04\x7f\x00\x00\x00", 8) + std::string(8, '\0'));
  write_file_atomic(dir / "c/1.bin", std::string("\x00\x10\x00\x00\x7f\x00\x00\x00", 8) + std::string(8, '\0'));
  write_file_atomic(dir / "o/1.addr", "#0+4096\ndevice\n");
  write_file_atomic(dir / "c/1.addr", "#0+4096\ndevice\n");
  const RankSnapshot o = parse_manifest("addresses\t1\nbuffer\t1\t16\tcudaMalloc\tfreed\n");
  RankSnapshot c = o;
  ASSERT_EQ(o.address_tables, std::set<std::size_t>{1});
  auto r = compare_rank(o, dir / "o", c, dir / "c", {}, 2);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].match) << r[0].detail;
  EXPECT_TRUE(r[0].compared);
  EXPECT_NE(r[0].tolerance.find("device addresses"), std::string::npos);

  write_file_atomic(dir / "c/1.addr", "#0+4096\n#2+0\n");  // the peer's buffer became one of its own
  r = compare_rank(o, dir / "o", c, dir / "c", {}, 2);
  EXPECT_FALSE(r[0].match);
  EXPECT_NE(r[0].detail.find("word 1: the original points to device memory"), std::string::npos) << r[0].detail;
  EXPECT_NE(r[0].detail.find("to buffer #2+0"), std::string::npos) << r[0].detail;

  c.address_tables.clear();  // numbers where the original had addresses
  r = compare_rank(o, dir / "o", c, dir / "c", {}, 2);
  EXPECT_FALSE(r[0].match);
  EXPECT_NE(r[0].detail.find("device addresses in the original only"), std::string::npos) << r[0].detail;

  // The original's second run pointing the same way adds nothing to its spread.
  write_file_atomic(dir / "c/1.addr", "#0+4096\ndevice\n");
  EXPECT_TRUE(original_spread(o, dir / "o", o, dir / "c", {}, 2).not_defined.empty());
}

TEST(DiffGateStdout, NumbersMasked) {
  EXPECT_EQ(mask_numbers("took 1.25 ms, 3e-4 err, rank -2"), "took # ms, # err, rank #");
  const auto same = compare_stdout("a 1\nb\n", "a 1\nb\n");
  EXPECT_TRUE(same.identical);
  const auto timing = compare_stdout("took 1.5 ms\n", "took 0.9 ms\n");
  EXPECT_FALSE(timing.identical);
  EXPECT_TRUE(timing.identical_masked);
  EXPECT_NE(timing.first_difference.find("line 1"), std::string::npos);
  const auto words = compare_stdout("ok\n", "bad\n");
  EXPECT_FALSE(words.identical_masked);
}

TEST(DiffGateLauncher, MpiProgramsUseMpirunFromPath) {
  EXPECT_TRUE(includes_mpi("#include <cstdio>\n#include <mpi.h>\nint main(){}"));
  EXPECT_TRUE(includes_mpi("  # include \"mpi.h\"\n"));
  EXPECT_FALSE(includes_mpi("// no mpi.h here\n#include <nccl.h>\n"));
  EXPECT_EQ(choose_launcher("#include <nccl.h>\n", "").kind, LauncherKind::Local);
  const auto dir = fresh_dir("path");
  const LauncherChoice missing = choose_launcher("#include <mpi.h>\n", (dir / "bin").string());
  EXPECT_EQ(missing.kind, LauncherKind::Mpirun);
  EXPECT_NE(missing.failure.find("no mpirun is on PATH"), std::string::npos);
  std::filesystem::create_directories(dir / "bin");
  write_file_atomic(dir / "bin/mpirun", "#!/bin/sh\n");
  std::filesystem::permissions(dir / "bin/mpirun", std::filesystem::perms::owner_all);
  const LauncherChoice found = choose_launcher("#include <mpi.h>\n", "/nonexistent:" + (dir / "bin").string());
  EXPECT_TRUE(found.failure.empty());
  EXPECT_EQ(found.mpirun, dir / "bin/mpirun");
}

TEST(DiffGateRun, MatchingProgramsPassWithinTolerance) {
  const auto dir = fresh_dir("pass");
  const auto o = fake_program(dir, "original", kOneFloatBuffer, kOnePlusOne);
  const auto c = fake_program(dir, "converted", kOneFloatBuffer, kOnePlusUlp);
  const GateResult g = diff_programs(o, c, local_spec(dir), {{"ncclAllReduce", 12, 7, 0}});
  EXPECT_TRUE(g.passed) << g.failure;
  ASSERT_EQ(g.details["buffers"].size(), 2u);  // one buffer on each of 2 ranks
  EXPECT_TRUE(g.details["buffers"][0]["match"].get<bool>());
  EXPECT_EQ(g.details["launcher"], "local");
  // stdout differs in its timing only: reported, not a failure
  EXPECT_TRUE(g.details["stdout"][0]["identical_with_numbers_masked"].get<bool>());
  EXPECT_NE(diff_gate_to_text(g).find("rank 1 buffer #0 8 bytes cudaMalloc"), std::string::npos);
}

TEST(DiffGateRun, BufferMismatchFails) {
  const auto dir = fresh_dir("mismatch");
  const auto o = fake_program(dir, "original", kOneFloatBuffer, kOnePlusOne);
  const auto c = fake_program(dir, "converted", kOneFloatBuffer, kOnePlusUlp);
  const GateResult g = diff_programs(o, c, local_spec(dir), {});  // no converted reduction: bit-exact
  EXPECT_FALSE(g.passed);
  EXPECT_TRUE(g.ran);
  EXPECT_NE(g.failure.find("buffer #0 (8 bytes, cudaMalloc) differs on rank 0"), std::string::npos) << g.failure;
}

// NVIDIA/nccl#1950: a one-rank ncclAvg reduction of NCCL < 2.29.7 leaves its tail unwritten, so at
// one rank the failure says the original may be the wrong side; not at two ranks, a fixed NCCL or
// without an average.
TEST(DiffGateRun, OneRankAveragesNameTheKnownNcclDefect) {
  const auto dir = fresh_dir("avg1");
  const auto o = fake_program(dir, "original", kOneFloatBuffer, "\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x40");
  const auto c = fake_program(dir, "converted", kOneFloatBuffer, kOnePlusOne);
  const std::vector<ConvertedReduction> avg = {{"ncclReduceScatter", 9, 7, 4}};
  DiffRunSpec one = local_spec(dir, 1);
  one.nccl_version = "2.28.9+cuda13.0";
  const GateResult g = diff_programs(o, c, one, avg);
  EXPECT_FALSE(g.passed);
  EXPECT_NE(g.failure.find("NCCL 2.28.9+cuda13.0 may be the cause"), std::string::npos) << g.failure;
  EXPECT_NE(g.failure.find("NVIDIA/nccl#1950"), std::string::npos) << g.failure;
  one.nccl_version = "2.29.7+cuda13.0";
  EXPECT_EQ(diff_programs(o, c, one, avg).failure.find("may be the cause"), std::string::npos);
  one.nccl_version = "";
  EXPECT_NE(diff_programs(o, c, one, avg).failure.find("NCCL of unknown version may be"), std::string::npos);
  one.nccl_version = "2.28.9";
  EXPECT_EQ(diff_programs(o, c, one, {{"ncclReduceScatter", 9, 7, 0}}).failure.find("may be the cause"),
            std::string::npos);
  DiffRunSpec two = local_spec(dir, 2);
  two.nccl_version = "2.28.9";
  EXPECT_EQ(diff_programs(o, c, two, avg).failure.find("may be the cause"), std::string::npos);
}

TEST(DiffGateRun, ExitCodeMismatchFails) {
  const auto dir = fresh_dir("exit");
  const auto o = fake_program(dir, "original", kOneFloatBuffer, kOnePlusOne);
  const auto c =
      fake_program(dir, "converted", kOneFloatBuffer, kOnePlusOne, "[ \"$BRAID_RANK\" = 1 ] && exit 3; exit 0");
  const GateResult g = diff_programs(o, c, local_spec(dir), {});
  EXPECT_FALSE(g.passed);
  EXPECT_NE(g.failure.find("rank 1 ends differently"), std::string::npos) << g.failure;
  EXPECT_FALSE(g.ran);  // a run failure, not a wrong output
  EXPECT_NE(g.failure.find("exit code 3"), std::string::npos) << g.failure;
  const GateResult bad_original = diff_programs(c, o, local_spec(dir), {});
  EXPECT_NE(bad_original.failure.rfind("original does not run cleanly", 0), std::string::npos) << bad_original.failure;
}

TEST(DiffGateRun, HangNamesTheRanksStillRunning) {
  const auto dir = fresh_dir("hang");
  const auto o = fake_program(dir, "original", kOneFloatBuffer, kOnePlusOne);
  const auto c =
      fake_program(dir, "converted", kOneFloatBuffer, kOnePlusOne, "[ \"$BRAID_RANK\" = 1 ] && exec sleep 60; exit 0");
  DiffRunSpec spec = local_spec(dir);
  spec.timeout_s = 2;
  const GateResult g = diff_programs(o, c, spec, {});
  EXPECT_FALSE(g.passed);
  EXPECT_FALSE(g.ran);
  EXPECT_NE(g.failure.find("converted hangs"), std::string::npos) << g.failure;
  EXPECT_NE(g.failure.find("rank 1 still running"), std::string::npos) << g.failure;
  // Under mpirun rank ends may be unknown: the ranks whose snapshot never reached `end`.
  SideRun run;
  run.timed_out = true;
  const std::vector<RankSnapshot> snaps = {parse_manifest("end\n"), parse_manifest(""), parse_manifest("")};
  std::vector<RankSnapshot> ranked = snaps;
  for (int r = 0; r < 3; ++r) ranked[(std::size_t)r].rank = r;
  EXPECT_NE(hang_failure("converted", run, ranked, 5).find("ranks 1, 2 still running"), std::string::npos);
}

// An original that writes `first` in its first `same` runs and `later` in every later one (per
// rank), as a program with atomicAdd partial sums or timings in a buffer does.
std::filesystem::path changing_original(const std::filesystem::path& dir, const std::string& manifest,
                                        const std::string& first, const std::string& later, int same = 1) {
  const auto p = dir / "original";
  write_file_atomic(p,
                    "#!/usr/bin/env bash\n"
                    "r=${BRAID_RANK:-0}\nd=$BRAID_SNAPSHOT_DIR/rank$r\nmkdir -p \"$d\"\n"
                    "runs=\"" +
                        dir.string() +
                        "/runs$r\"\n"
                        "printf '" +
                        manifest +
                        "' > \"$d/manifest.tsv\"\n"
                        "printf '\\x00\\x00\\x40\\x40' > \"$d/1.bin\"\n"
                        "n=$(cat \"$runs\" 2>/dev/null | wc -l)\necho run >> \"$runs\"\n"
                        "if [ \"$n\" -ge " +
                        std::to_string(same) + " ]; then printf '" + later + "' > \"$d/0.bin\"; else printf '" + first +
                        "' > \"$d/0.bin\"; fi\n");
  std::filesystem::permissions(p, std::filesystem::perms::owner_all);
  return p;
}

const char* const kFloatReducedByTheProgram =  // a buffer the program reduces in fp32; no converted reduction
    "buffer\\t0\\t8\\tcudaMalloc\\tfreed\\nreduce\\t0\\t7\\t0\\tncclAllReduce\\nend\\n";
const char* const kUntypedBuffer = "buffer\\t0\\t8\\tcudaMallocManaged\\tfreed\\nend\\n";
// The same beside a result the original reproduces (buffer 1, the scripts' constant 1.bin).
const char* const kFloatReducedAndAResult =
    "buffer\\t0\\t8\\tcudaMalloc\\tfreed\\nbuffer\\t1\\t4\\tcudaMalloc\\tfreed\\nreduce\\t0\\t7\\t0\\tncclAllReduce\\ne"
    "nd\\n";
const char* const kUntypedAndAResult =
    "buffer\\t0\\t8\\tcudaMallocManaged\\tfreed\\nbuffer\\t1\\t4\\tcudaMalloc\\tfreed\\nend\\n";
const char* const kOnePlus4Ulp = "\\x04\\x00\\x80\\x3f\\x00\\x00\\x00\\x40";
const char* const kOnePlus8Ulp = "\\x08\\x00\\x80\\x3f\\x00\\x00\\x00\\x40";
const char* const kOnePointFive = "\\x00\\x00\\xc0\\x3f\\x00\\x00\\x00\\x40";

TEST(DiffGateRun, WhatTheOriginalDoesNotReproduceIsHeldToItsOwnSpread) {
  const auto dir = fresh_dir("spread");
  const auto o = changing_original(dir, kFloatReducedByTheProgram, kOnePlusOne, kOnePlus4Ulp);
  const auto c = fake_program(dir, "converted", kFloatReducedByTheProgram, kOnePlus8Ulp);
  const GateResult g = diff_programs(o, c, local_spec(dir), {});
  EXPECT_TRUE(g.passed) << g.failure;
  EXPECT_TRUE(g.details["original_again"]["ran"].get<bool>());
  EXPECT_EQ(g.details["original_again"]["buffers_within_its_spread"], 2);  // one buffer on each rank
  EXPECT_NE(g.details["buffers"][0]["tolerance"].get<std::string>().find("differs from itself by up to 4.77e-07"),
            std::string::npos)
      << g.details["buffers"][0];
  EXPECT_NE(diff_gate_summary(g).find("the original wrote 2 of them differently in another run: 2 held to its own "
                                      "spread, 0 not compared"),
            std::string::npos)
      << diff_gate_summary(g);
}

// The original's second run reproduces its first by chance (a sum whose order varies): the third
// shows the spread, and the converted program is held to it.
TEST(DiffGateRun, AThirdRunOfTheOriginalWhenTheSecondReproducedTheFirst) {
  const auto dir = fresh_dir("spread-third");
  const auto o = changing_original(dir, kFloatReducedByTheProgram, kOnePlusOne, kOnePlus4Ulp, 2);
  const auto c = fake_program(dir, "converted", kFloatReducedByTheProgram, kOnePlus8Ulp);
  const GateResult g = diff_programs(o, c, local_spec(dir), {});
  EXPECT_TRUE(g.passed) << g.failure;
  EXPECT_EQ(g.details["original_again"]["runs"], 2);
  EXPECT_EQ(g.details["original_again"]["buffers_within_its_spread"], 2);
  EXPECT_TRUE(std::filesystem::exists(dir / "work" / "original-third" / "snapshots" / "rank0" / "0.bin"));
}

TEST(DiffGateRun, BeyondTheOriginalsOwnSpreadStillFails) {
  const auto dir = fresh_dir("spread-beyond");
  const auto o = changing_original(dir, kFloatReducedByTheProgram, kOnePlusOne, kOnePlus4Ulp);
  const auto c = fake_program(dir, "converted", kFloatReducedByTheProgram, kOnePointFive);
  const GateResult g = diff_programs(o, c, local_spec(dir), {});
  EXPECT_FALSE(g.passed);
  EXPECT_NE(g.failure.find("element 0: original 1 converted 1.5"), std::string::npos) << g.failure;
}

TEST(DiffGateRun, AReproducibleOriginalKeepsTheStrictComparison) {
  const auto dir = fresh_dir("spread-none");
  const auto o = changing_original(dir, kFloatReducedByTheProgram, kOnePlusOne, kOnePlusOne);
  const auto c = fake_program(dir, "converted", kFloatReducedByTheProgram, kOnePlusUlp);
  const GateResult g = diff_programs(o, c, local_spec(dir), {});
  EXPECT_FALSE(g.passed);  // bit-exact: no converted reduction, and the original reproduces itself
  EXPECT_EQ(g.details["original_again"]["buffers_within_its_spread"], 0);
  EXPECT_TRUE(std::filesystem::exists(dir / "work" / "original-again" / "snapshots" / "rank1" / "0.bin"));
}

TEST(DiffGateRun, ATimingTheOriginalDoesNotReproduceIsNotCompared) {
  // 1.0 then 1.25 ms between two runs of the original: beyond any rounding, so not a function of the
  // inputs; the converted program's 3.0 ms (a slower first step) is not a wrong result.
  const auto dir = fresh_dir("spread-timing");
  const char* const kOnePointTwoFive = "\\x00\\x00\\xa0\\x3f\\x00\\x00\\x00\\x40";
  const char* const kThree = "\\x00\\x00\\x40\\x40\\x00\\x00\\x00\\x40";
  const auto o = changing_original(dir, kFloatReducedAndAResult, kOnePlusOne, kOnePointTwoFive);
  const auto c = fake_program(dir, "converted", kFloatReducedAndAResult, kThree);
  const GateResult g = diff_programs(o, c, local_spec(dir), {});
  EXPECT_TRUE(g.passed) << g.failure;
  EXPECT_EQ(g.details["original_again"]["buffers_not_defined"], 2);
  EXPECT_NE(diff_gate_to_text(g).find("differ by up to 0.25 (0.12 of its largest value): not a function of the "
                                      "program's inputs"),
            std::string::npos)
      << diff_gate_to_text(g);
  // With nothing but such buffers, nothing is checked: that is no pass.
  const auto dir2 = fresh_dir("spread-timing-alone");
  const auto o2 = changing_original(dir2, kFloatReducedByTheProgram, kOnePlusOne, kOnePointTwoFive);
  const auto c2 = fake_program(dir2, "converted", kFloatReducedByTheProgram, kThree);
  const GateResult alone = diff_programs(o2, c2, local_spec(dir2), {});
  EXPECT_FALSE(alone.passed);
  EXPECT_NE(alone.failure.find("nothing left to compare"), std::string::npos) << alone.failure;
  EXPECT_FALSE(alone.details["original_again"].contains("nccl_algo"));  // no converted sum to reorder
}

// Over more than two ranks, the original's second run sums its all-reduces by tree: the original
// here writes another value under NCCL_ALGO=allreduce:tree (as a greedy decode over near ties does),
// so that buffer is not the conversion's to match, and the reason names the order.
TEST(DiffGateRun, TheSecondRunOfTheOriginalSumsInAnotherOrder) {
  const auto dir = fresh_dir("spread-order");
  const auto o = dir / "original";
  write_file_atomic(o,
                    "#!/usr/bin/env bash\n"
                    "r=${BRAID_RANK:-0}\nd=$BRAID_SNAPSHOT_DIR/rank$r\nmkdir -p \"$d\"\n"
                    "printf '" +
                        std::string(kFloatReducedAndAResult) +
                        "' > \"$d/manifest.tsv\"\n"
                        "printf '\\x00\\x00\\x40\\x40' > \"$d/1.bin\"\n"
                        "if [ \"$NCCL_ALGO\" = allreduce:tree ]; then printf '" +
                        kOnePointFive + "' > \"$d/0.bin\"; else printf '" + kOnePlusOne + "' > \"$d/0.bin\"; fi\n");
  std::filesystem::permissions(o, std::filesystem::perms::owner_all);
  const char* const kThree = "\x00\x00\x40\x40\x00\x00\x00\x40";
  const auto c = fake_program(dir, "converted", kFloatReducedAndAResult, kThree);
  const std::vector<ConvertedReduction> fp32_sum = {{"ncclAllReduce", 10, 7, 0}};
  const GateResult two = diff_programs(o, c, local_spec(dir, 2), fp32_sum);
  EXPECT_FALSE(two.passed);  // two ranks sum the same in either order: the strict comparison stands
  EXPECT_FALSE(two.details["original_again"].contains("nccl_algo"));
  const GateResult four = diff_programs(o, c, local_spec(dir, 4), fp32_sum);
  EXPECT_TRUE(four.passed) << four.failure;
  EXPECT_EQ(four.details["original_again"]["nccl_algo"], "allreduce:tree");
  EXPECT_EQ(four.details["original_again"]["buffers_not_defined"], 4);
  EXPECT_NE(diff_gate_to_text(four).find("or the order NCCL sums in"), std::string::npos) << diff_gate_to_text(four);
}

TEST(DiffGateRun, AnUntypedBufferTheOriginalDoesNotReproduceIsNotCompared) {
  const auto dir = fresh_dir("spread-untyped");
  const auto o = changing_original(dir, kUntypedAndAResult, kOnePlusOne, kOnePointFive);  // e.g. timings
  const auto c = fake_program(dir, "converted", kUntypedAndAResult, kOnePlusUlp);
  const GateResult g = diff_programs(o, c, local_spec(dir), {});
  EXPECT_TRUE(g.passed) << g.failure;
  EXPECT_FALSE(g.details["buffers"][0]["compared"].get<bool>());
  EXPECT_NE(diff_gate_to_text(g).find("not compared (not compared: the original writes it differently from run to "
                                      "run, and it has no floating element type"),
            std::string::npos)
      << diff_gate_to_text(g);
  // ... but its size still counts.
  const auto dir2 = fresh_dir("spread-untyped-size");
  const auto o2 = changing_original(dir2, kUntypedBuffer, kOnePlusOne, kOnePointFive);
  const auto c2 =
      fake_program(dir2, "converted", "buffer\\t0\\t4\\tcudaMallocManaged\\tfreed\\nend\\n", "\\x00\\x00\\x80\\x3f");
  EXPECT_FALSE(diff_programs(o2, c2, local_spec(dir2), {}).passed);
}

TEST(DiffGateRun, NoSnapshotIsAFailureNotAPass) {
  const auto dir = fresh_dir("nosnap");
  const auto p = dir / "plain";
  write_file_atomic(p, "#!/usr/bin/env bash\nexit 0\n");
  std::filesystem::permissions(p, std::filesystem::perms::owner_all);
  const GateResult g = diff_programs(p, p, local_spec(dir, 1), {});
  EXPECT_FALSE(g.passed);
  EXPECT_NE(g.failure.find("no buffer snapshot on rank 0"), std::string::npos) << g.failure;
}

TEST(DiffGateRun, MissingMpirunIsAFailureValue) {
  const auto dir = fresh_dir("nompi");
  DiffRunSpec spec = local_spec(dir);
  spec.launcher = choose_launcher("#include <mpi.h>\n", (dir / "none").string());
  const GateResult g = diff_programs(dir / "x", dir / "y", spec, {});
  EXPECT_FALSE(g.passed);
  EXPECT_NE(g.failure.find("mpirun"), std::string::npos);
}

TEST(DiffGateRun, UnderMpirun) {
  const char* path = std::getenv("PATH");
  DiffRunSpec spec = local_spec(fresh_dir("mpirun"));
  spec.launcher = choose_launcher("#include <mpi.h>\n", path ? path : "");
  if (!spec.launcher.failure.empty()) GTEST_SKIP() << "no mpirun on PATH";
  const auto dir = spec.work_dir.parent_path();
  const auto o = fake_program(dir, "original", kOneFloatBuffer, kOnePlusOne);
  const auto c = fake_program(dir, "converted", kOneFloatBuffer, kOnePlusUlp);
  GateResult g = diff_programs(o, c, spec, {{"ncclAllReduce", 12, 7, 0}});
  EXPECT_TRUE(g.passed) << g.failure;
  EXPECT_EQ(g.details["launcher"], "mpirun");
  EXPECT_EQ(g.details["buffers"].size(), 2u);
  g = diff_programs(o, c, spec, {});
  EXPECT_NE(g.failure.find("differs on rank"), std::string::npos) << g.failure;
}

TEST(DiffGateShim, BookkeepingAgainstAFakeCudaRuntime) {
#ifndef BRAID_SNAPSHOT_SHIM
  GTEST_SKIP() << "the snapshot shim was not built here (no cuda_runtime_api.h)";
#else
  const auto dir = fresh_dir("shim");
  SubprocessOptions o;
  o.argv = {BRAID_SNAPSHOT_FAKE_PROGRAM};
  o.env_add = {
      {"LD_PRELOAD", BRAID_SNAPSHOT_SHIM}, {"BRAID_SNAPSHOT_DIR", (dir / "snap").string()}, {"BRAID_RANK", "1"}};
  o.timeout_s = 30;
  const SubprocessResult r = run_subprocess(o);
  ASSERT_TRUE(r.succeeded()) << r.describe_end() << r.stderr_text;
  const RankSnapshot s = read_rank_snapshot(dir / "snap", 1);
  ASSERT_TRUE(s.found);
  EXPECT_TRUE(s.ended);
  EXPECT_TRUE(s.problems.empty());
  ASSERT_EQ(s.buffers.size(), 6u);  // the prelude-marked allocations took no number
  EXPECT_EQ(s.buffers[0].bytes, 16u);
  EXPECT_EQ(s.buffers[0].state, "freed");
  EXPECT_EQ(s.buffers[1].allocator, "ncclMemAlloc");
  EXPECT_EQ(s.buffers[1].bytes, 8u);  // the size asked for, not the rounded one
  EXPECT_EQ(s.buffers[1].state, "live-at-exit");
  EXPECT_EQ(s.buffers[2].allocator, "cudaMallocAsync");
  ASSERT_EQ(s.reductions.size(), 1u);
  EXPECT_EQ(s.reductions[0].index, 0u);  // a + 1 lies inside #0
  EXPECT_EQ(s.reductions[0].dtype, 7);
  EXPECT_EQ(read_file(dir / "snap/rank1/0.bin"), floats({1.0f, 2.0f, 3.0f, 4.0f}));
  EXPECT_EQ(read_file(dir / "snap/rank1/1.bin"), "symmetri");
  EXPECT_EQ(read_file(dir / "snap/rank1/2.bin"), std::string(12, '\0'));  // zero-filled at allocation
  // The table of addresses, written as what its words point to; a buffer of numbers is not one.
  EXPECT_EQ(s.address_tables, std::set<std::size_t>{3});
  EXPECT_EQ(read_file(dir / "snap/rank1/3.addr"), "#1+4\n-\n");
  // A pitched allocation is pitch x height bytes; the prelude's one-row pitch probe is not counted.
  EXPECT_EQ(s.buffers[4].allocator, "cudaMallocPitch");
  EXPECT_EQ(s.buffers[4].bytes, 1536u);
  EXPECT_EQ(read_file(dir / "snap/rank1/4.bin"), std::string(1536, '\0'));
  EXPECT_EQ(read_file(dir / "snap/rank1/5.bin"), "gpu1");
  // Several ranks in one process: each GPU counts its own (threads allocate in varying order).
  o.env_add["BRAID_SNAPSHOT_PER_DEVICE"] = "1";
  o.env_add["BRAID_SNAPSHOT_DIR"] = (dir / "per-device").string();
  const SubprocessResult p = run_subprocess(o);
  ASSERT_TRUE(p.succeeded()) << p.describe_end() << p.stderr_text;
  const RankSnapshot d = read_rank_snapshot(dir / "per-device", 1);
  ASSERT_EQ(d.buffers.size(), 6u);
  EXPECT_EQ(d.buffers[3].index, 3u);
  EXPECT_EQ(d.buffers[4].index, 4u);
  EXPECT_EQ(d.buffers[5].index, 100000u);
  EXPECT_EQ(read_file(dir / "per-device/rank1/100000.bin"), "gpu1");
#endif
}
