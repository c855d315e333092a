// The GPU cascade's CPU-testable parts: nvcc builds (CUDA code compiles without a GPU), the
// compile cache and its key, error trimming, the GPU pool, workload validation, and the whole
// cascade driving a multi-rank program built by nvcc that speaks the harness's results contract
// (host code only, so it runs on a machine with no GPU).
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <regex>
#include <thread>

#include "braid/db/record.hpp"
#include "braid/eval/gpu_cascade.hpp"
#include "braid/eval/gpu_pool.hpp"
#include "braid/eval/nvcc_builder.hpp"
#include "braid/eval/workload.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "eval_test_support.hpp"

namespace braid {
namespace {

using testing::TempDir;

// A stand-in for a harness program: ranks from the bootstrap variables, rank 0 writes the
// verdict (and metrics in bench mode) into --results_dir; `--behave` picks a failure.
const char* kCandidate = R"(#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <pwd.h>
#include <unistd.h>
// --behave escape: what a cheating rank tries beside honest work (GpuCascadeCpu.RanksAreSandboxed).
void escape(const std::string& results, const std::string& run, const std::string& workload, int rank) {
  auto write = [](const std::string& path) {
    if (FILE* f = std::fopen(path.c_str(), "a")) { std::fputs("tampered\n", f); std::fclose(f); }
  };
  write(run + "/evolution.db");
  write(run + "/gen_0/prev/program.cu");
  write(workload + "/touched_by_rank" + std::to_string(rank));
  if (const passwd* pw = getpwuid(getuid())) write(std::string(pw->pw_dir) + "/braid_gpu_escape_" + std::to_string(getpid()));
  if (FILE* in = std::fopen((run + "/gen_0/prev/secret.txt").c_str(), "r")) {  // a previous candidate's file
    char buf[64] = {0};
    std::fread(buf, 1, sizeof buf - 1, in);
    std::fclose(in);
    if (FILE* out = std::fopen((results + "/stolen_by_rank" + std::to_string(rank)).c_str(), "w")) { std::fputs(buf, out); std::fclose(out); }
  }
  if (fork() == 0) {  // a setsid double fork that outlives the evaluation unless it is ended
    setsid();
    if (fork() == 0) {
      if (FILE* f = std::fopen((results + "/orphan_rank" + std::to_string(rank)).c_str(), "w")) { std::fprintf(f, "%d\n", getpid()); std::fclose(f); }
      for (;;) pause();
    }
    _exit(0);
  }
  usleep(200000);
}
__global__ void never_launched(int* p) { *p = 1; }  // device code compiles without a GPU
int main(int argc, char** argv) {
  std::string mode, results, behave = "ok", run, workload, seed = "0", data;
  for (int i = 1; i + 1 < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mode") mode = argv[++i];
    else if (a == "--results_dir") results = argv[++i];
    else if (a == "--behave") behave = argv[++i];
    else if (a == "--run") run = argv[++i];
    else if (a == "--workload") workload = argv[++i];
    else if (a == "--seed") seed = argv[++i];
    else if (a == "--data") data = argv[++i];
  }
  const char* r = std::getenv("BRAID_RANK");
  const int rank = r ? std::atoi(r) : 0;
  // braid's verdict channel, as the real harness takes it first thing (names split: this stand-in
  // is the candidate's text too, and a candidate may not name the channel).
  const char* channel = std::getenv((std::string("BRAID_RESULT") + "_FD").c_str());
  std::string token;
  if (channel) for (char c; read(std::atoi(channel), &c, 1) == 1 && c != '\n';) token += c;
  if (behave == "escape") escape(results, run, workload, rank);
  if (!data.empty()) {  // the workload's own input, named by absolute path in its args
    FILE* in = std::fopen(data.c_str(), "r");
    if (in == nullptr) { std::fprintf(stderr, "cannot read %s\n", data.c_str()); return 3; }
    std::fclose(in);
  }
  if (behave == "crash" && rank == 1) std::raise(SIGSEGV);
  if (behave == "hang" && rank == 0) for (;;) pause();
  if (behave == "cuda_error" && rank == 1) {
    std::fprintf(stderr, "harness: rank 1: candidate run: an illegal memory access was encountered\n");
    return 1;
  }
  if (rank != 0) return 0;
  const bool correct = behave != "wrong";
  FILE* f = std::fopen((results + "/correct.json").c_str(), "w");
  std::fprintf(f, "{\"correct\": %s, \"error\": \"%s\"}\n", correct ? "true" : "false",
               correct ? "" : "rank 1: buffer 'out' differs from the reference at index 7");
  std::fclose(f);
  if (mode == "bench" && correct) {
    f = std::fopen((results + "/metrics.json").c_str(), "w");
    std::fprintf(f, "{\"combined_score\": 1.25, \"public\": {\"speedup\": 1.25}, \"private\": {}, \"text_feedback\": \"fast\"}\n");
    std::fclose(f);
  }
  if (channel) {
    std::string rec = std::string("{\"braid_") + "verdict\": 1, \"token\": \"" + token + "\", \"mode\": \"" + mode + "\", \"seed\": " + seed +
                      ", \"rank\": 0, \"correct\": " + (correct ? "true" : "false") + ", \"error\": \"\", \"timed_ms\": 1.0";
    if (mode == "bench" && correct) rec += ", \"combined_score\": 1.25, \"public\": {\"speedup\": 1.25}, \"private\": {}, \"text_feedback\": \"fast\"";
    rec += "}\n";
    write(std::atoi(channel), rec.data(), rec.size());
  }
  // --behave forge: code that runs after the harness has written (an atexit handler) and rewrites
  // the verdict files with a score of its own.
  if (behave == "forge") {
    static std::string forged_dir;
    forged_dir = results;
    std::atexit([] {
      if (FILE* g = std::fopen((forged_dir + "/metrics.json").c_str(), "w")) {
        std::fprintf(g, "{\"combined_score\": 1000000.0, \"public\": {}, \"private\": {}, \"text_feedback\": \"forged\"}\n");
        std::fclose(g);
      }
    });
  }
  return correct ? 0 : 1;
}
)";

CudaToolchain toolchain_or_skip() {
  std::string why;
  auto tc = find_cuda_toolchain(&why);
  if (!tc) {
    ADD_FAILURE() << "nvcc is expected on CI: " << why;
    return {};
  }
  return *tc;
}

// The toolchain search itself is tested in tests/platform.

TEST(CompileCacheKey, FollowsIncludedHeaders) {
  TempDir dir("cache_key");
  std::filesystem::create_directories(dir / "inc" / "lib");
  write_file_atomic(dir / "prog.cu", "#include \"local.h\"\n#include <lib/api.h>\n#include <vector>\nint main() {}\n");
  write_file_atomic(dir / "local.h", "#pragma once\n");
  write_file_atomic(dir / "inc" / "lib" / "api.h", "#include \"detail.h\"\n");
  write_file_atomic(dir / "inc" / "lib" / "detail.h", "constexpr int kVersion = 1;\n");
  auto headers = included_headers(dir / "prog.cu", {dir / "inc"});
  ASSERT_EQ(headers.size(), 3u);
  CompileKeyInput input{dir / "prog.cu", {dir / "inc"}, {"-O3"}, "nvcc 13", "2.28.9"};
  const std::string key = compile_cache_key(input);
  EXPECT_EQ(key.size(), 32u);
  EXPECT_EQ(key, compile_cache_key(input));
  write_file_atomic(dir / "inc" / "lib" / "detail.h", "constexpr int kVersion = 2;\n");
  const std::string after_header = compile_cache_key(input);
  EXPECT_NE(after_header, key);
  input.flags = {"-O2"};
  EXPECT_NE(compile_cache_key(input), after_header);
  input.flags = {"-O3"};
  input.nccl_version = "2.29.0";
  EXPECT_NE(compile_cache_key(input), after_header);
}

TEST(NvccBuilder, BuildsCachesAndTrimsErrors) {
  CudaToolchain tc = toolchain_or_skip();
  TempDir dir("nvcc");
  auto builder = std::make_shared<NvccBuilder>(tc, dir / "cache", 2);
  write_file_atomic(dir / "good.cu",
                    "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\nint main() { return 0; }\n");
  BuildInput in;
  in.source = dir / "good.cu";
  in.output = dir / "good.out";
  in.flags = {"-O0", "-std=c++17"};
  in.link_nccl = false;
  in.timeout_s = 240;
  BuildResult first = builder->build(in);
  ASSERT_TRUE(first.ok) << first.error;
  EXPECT_FALSE(first.cached);
  EXPECT_TRUE(std::filesystem::exists(first.artifact));
  EXPECT_NE(std::find(first.command.begin(), first.command.end(), "-gencode=arch=compute_90,code=sm_90"),
            first.command.end());

  in.output = dir / "again.out";
  BuildResult second = builder->build(in);
  ASSERT_TRUE(second.ok);
  EXPECT_TRUE(second.cached);
  EXPECT_EQ(second.cache_key, first.cache_key);
  EXPECT_LT(second.wall_s, 1.0);
  EXPECT_TRUE(std::filesystem::exists(dir / "again.out"));

  write_file_atomic(dir / "work_program.cu",
                    "#include <vector>\n__global__ void k(float* x) {\n  x[threadIdx.x] = undeclared_name * 2;\n}\n"
                    "template <class T> void f() { T::missing(); }\nint main() { f<int>(); }\n");
  in.source = dir / "work_program.cu";
  in.output = dir / "bad.out";
  in.display_name = "program.cu";
  BuildResult bad = builder->build(in);
  EXPECT_FALSE(bad.ok);
  EXPECT_FALSE(bad.timed_out);
  EXPECT_NE(bad.error.find("program.cu(3)"), std::string::npos) << bad.error;
  EXPECT_NE(bad.error.find("undeclared_name"), std::string::npos) << bad.error;
  EXPECT_EQ(bad.error.find(dir.path().string()), std::string::npos) << bad.error;
  BuildResult bad_again = builder->build(in);
  EXPECT_TRUE(bad_again.cached);
  EXPECT_EQ(bad_again.error, bad.error);
}

TEST(GpuPool, DisjointLeasesExclusiveBenchAndQuarantine) {
  GpuPool pool({0, 1, 2, 3});
  auto a = pool.acquire(2, false);
  auto b = pool.acquire(2, false);
  ASSERT_TRUE(a && b);
  std::vector<int> all = a->devices();
  all.insert(all.end(), b->devices().begin(), b->devices().end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(a->cuda_visible_devices(), "0,1");

  // The exclusive lease waits for both, and a shared request behind it waits for it.
  std::atomic<bool> exclusive_got{false}, shared_got{false};
  std::thread exclusive([&] {
    auto lease = pool.acquire(2, true);
    exclusive_got = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(shared_got);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread shared([&] {
    auto lease = pool.acquire(1, false);
    shared_got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(exclusive_got);
  a->release();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(exclusive_got);  // b still runs
  b.reset();
  exclusive.join();
  shared.join();
  EXPECT_TRUE(exclusive_got && shared_got);

  pool.quarantine({2, 3}, "health probe failed after a timeout of c1 verify");
  EXPECT_EQ(pool.healthy(), (std::vector<int>{0, 1}));
  EXPECT_NE(pool.status_line().find("GPUs 2,3 quarantined (health probe failed"), std::string::npos)
      << pool.status_line();
  auto c = pool.acquire(2, false);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->devices(), (std::vector<int>{0, 1}));
  c->release();
  std::string why;
  EXPECT_FALSE(pool.acquire(3, false, &why));
  EXPECT_NE(why.find("only 2 of 4 are healthy"), std::string::npos) << why;
}

class GpuCascadeCpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cache_ = new TempDir("gpu_cascade_cache");
    auto tc = find_cuda_toolchain();
    if (tc) builder_ = std::make_shared<NvccBuilder>(*tc, cache_->path() / "nvcc", 2);
  }
  static void TearDownTestSuite() {
    builder_.reset();
    delete cache_;
  }

  // Two ranks of kCandidate (`--behave`, then `extra_args`) from `workload`, on the CPU.
  static GpuCascadeConfig config_for(const std::filesystem::path& workload, const std::string& behave,
                                     const std::string& extra_args = "") {
    GpuCascadeConfig config;
    config.workload_dir = workload;
    config.program_filename = "gen0.cu";
    config.ranks = 2;
    config.nvcc_flags = {"-O0", "-std=c++17"};
    config.args = "--behave " + behave + " --size 64" + extra_args;
    config.run_timeout_s = 5.0;
    config.bench_timeout_s = 5.0;
    config.build_timeout_s = 240;
    config.health_probe = false;  // needs a GPU; proven by tests/gpu/cascade
    return config;
  }

  EvalResult evaluate(const std::string& behave, const std::string& id, std::shared_ptr<GpuPool> pool = nullptr,
                      bool verify_in_bench = false) {
    TempDir workload("gpu_workload");
    GpuCascadeConfig config = config_for(workload.path(), behave);
    config.run_timeout_s = 2.0;
    config.peer_grace_s = 1.0;
    config.verify_in_bench = verify_in_bench;
    if (!pool) pool = std::make_shared<GpuPool>(std::vector<int>{0, 1});
    GpuCascadeEvaluator evaluator(config, builder_, pool);
    TempDir work("gpu_work");
    EvalRequest request{id, kCandidate, work.path(), 7};
    EvalResult result = evaluator.evaluate(request, {});
    last_correct_json_ = try_read_file(work / "results" / "correct.json").value_or("");
    last_rank_log_ = try_read_file(work / "logs" / "verify" / "rank0.stdout").value_or("") + "|";
    ran_verify_level_ = std::filesystem::exists(work / "logs" / "verify");
    return result;
  }

  static TempDir* cache_;
  static std::shared_ptr<NvccBuilder> builder_;
  std::string last_correct_json_, last_rank_log_;
  bool ran_verify_level_ = false;
};
TempDir* GpuCascadeCpu::cache_ = nullptr;
std::shared_ptr<NvccBuilder> GpuCascadeCpu::builder_;

TEST_F(GpuCascadeCpu, FailureKindsThenACorrectCandidate) {
  ASSERT_TRUE(builder_) << "nvcc is expected on CI";
  EvalResult ok = evaluate("ok", "c0");
  ASSERT_EQ(ok.failure, FailureKind::Ok) << ok.error_text;
  EXPECT_EQ(ok.level_reached, 3);
  EXPECT_TRUE(ok.correct);
  EXPECT_DOUBLE_EQ(ok.combined_score, 1.25);
  EXPECT_EQ(ok.text_feedback, "fast");
  EXPECT_FALSE(ok.private_metrics.value("build_cached", true));

  EvalResult wrong = evaluate("wrong", "c1");
  EXPECT_EQ(wrong.failure, FailureKind::VerifyFailed);
  EXPECT_NE(wrong.error_text.find("rank 1: buffer 'out' differs"), std::string::npos) << wrong.error_text;
  EXPECT_TRUE(wrong.private_metrics.value("build_cached", false));  // same source, other args

  EvalResult crash = evaluate("crash", "c2");
  EXPECT_EQ(crash.failure, FailureKind::RunFailed);
  EXPECT_NE(crash.error_text.find("rank 1: killed by signal SIGSEGV"), std::string::npos) << crash.error_text;
  EXPECT_NE(last_correct_json_.find("\"failure\": \"run_failed\""), std::string::npos) << last_correct_json_;

  EvalResult cuda = evaluate("cuda_error", "c3");
  EXPECT_EQ(cuda.failure, FailureKind::RunFailed);
  EXPECT_NE(cuda.error_text.find("illegal memory access"), std::string::npos) << cuda.error_text;
  EXPECT_NE(cuda.error_text.find("rank 1"), std::string::npos) << cuda.error_text;

  const auto t0 = std::chrono::steady_clock::now();
  EvalResult hang = evaluate("hang", "c4");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(hang.failure, FailureKind::Timeout);
  EXPECT_NE(hang.error_text.find("rank 0 still running"), std::string::npos) << hang.error_text;
  EXPECT_LT(took, 10.0);

  EvalResult again = evaluate("ok", "c5");
  EXPECT_EQ(again.failure, FailureKind::Ok) << again.error_text;
  EXPECT_NE(last_rank_log_.find("|"), std::string::npos);
}

// verify_in_bench: one bench run judges the candidate (no L2 run); its failures keep their kinds,
// and a crash there is the candidate's run failure, not a bench failure.
TEST_F(GpuCascadeCpu, VerifyInBenchRunsOnceAndKeepsFailureKinds) {
  ASSERT_TRUE(builder_) << "nvcc is expected on CI";
  EvalResult ok = evaluate("ok", "v0", nullptr, true);
  ASSERT_EQ(ok.failure, FailureKind::Ok) << ok.error_text;
  EXPECT_EQ(ok.level_reached, 3);
  EXPECT_DOUBLE_EQ(ok.combined_score, 1.25);
  EXPECT_FALSE(ran_verify_level_);
  EXPECT_EQ(ok.timings.count("run"), 0u);

  EvalResult wrong = evaluate("wrong", "v1", nullptr, true);
  EXPECT_EQ(wrong.failure, FailureKind::VerifyFailed);
  EXPECT_EQ(wrong.level_reached, 2);
  EXPECT_NE(wrong.error_text.find("rank 1: buffer 'out' differs"), std::string::npos) << wrong.error_text;

  EvalResult crash = evaluate("crash", "v2", nullptr, true);
  EXPECT_EQ(crash.failure, FailureKind::RunFailed);
  EXPECT_NE(crash.error_text.find("run+verify+bench"), std::string::npos) << crash.error_text;
  EXPECT_NE(crash.error_text.find("rank 1: killed by signal SIGSEGV"), std::string::npos) << crash.error_text;
  EXPECT_FALSE(ran_verify_level_);
}

TEST_F(GpuCascadeCpu, BuildFailureIsTrimmed) {
  ASSERT_TRUE(builder_);
  TempDir workload("gpu_workload_bad");
  GpuCascadeConfig config;
  config.workload_dir = workload.path();
  config.program_filename = "gen0.cu";
  config.nvcc_flags = {"-O0"};
  config.health_probe = false;
  GpuCascadeEvaluator evaluator(config, builder_, std::make_shared<GpuPool>(std::vector<int>{0, 1}));
  TempDir work("gpu_work_bad");
  EvalResult r = evaluator.evaluate({"b1", "int main() { return missing_symbol; }\n", work.path(), 1}, {});
  EXPECT_EQ(r.failure, FailureKind::BuildFailed);
  EXPECT_EQ(r.level_reached, 1);
  EXPECT_NE(r.error_text.find("gen0.cu(1)"), std::string::npos) << r.error_text;
  EXPECT_NE(r.error_text.find("missing_symbol"), std::string::npos);
}

// The ranks run in the sandbox's GPU profile (docs/sandbox.md, "GPU ranks"): a rank that tampers
// with the run's database, a previous candidate, the workload or the home, reads a previous
// candidate's files or leaves a setsid double fork behind reaches nothing, and its honest work is
// scored as usual. The level in force is stored with the result.
TEST_F(GpuCascadeCpu, RanksAreSandboxed) {
  ASSERT_TRUE(builder_) << "nvcc is expected on CI";
  TempDir workload("gpu_workload_escape");
  TempDir run("gpu_run_escape");
  write_file_atomic(run / "evolution.db", "db");
  std::filesystem::create_directories(run / "gen_0" / "prev");
  write_file_atomic(run / "gen_0" / "prev" / "program.cu", "prev");
  write_file_atomic(run / "gen_0" / "prev" / "secret.txt", "secret");
  const std::filesystem::path work = run / "gen_1" / "c9";
  std::filesystem::create_directories(work);
  const GpuCascadeConfig config = config_for(
      workload.path(), "escape", " --run " + run.path().string() + " --workload " + workload.path().string());
  GpuCascadeEvaluator evaluator(config, builder_, std::make_shared<GpuPool>(std::vector<int>{0, 1}));
  EvalResult r = evaluator.evaluate(EvalRequest{"c9", kCandidate, work, 7}, {});
  ASSERT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_DOUBLE_EQ(r.combined_score, 1.25);
  const std::string level = r.private_metrics.value("sandbox", std::string());
  EXPECT_NE(level, "off");
  EXPECT_NE(level.find("rlimits"), std::string::npos) << level;
  EXPECT_EQ(r.private_metrics.value("verdict_channel", std::string()), "files");

  // The keeper (or the kill token) ended the orphans with their rank.
  for (int rank = 0; rank < 2; ++rank) {
    auto pid_text = try_read_file(work / "results" / ("orphan_rank" + std::to_string(rank)));
    ASSERT_TRUE(pid_text) << "rank " << rank << " did not start its orphan";
    const pid_t pid = std::atoi(pid_text->c_str());
    bool alive = true;
    for (int i = 0; i < 40 && alive; ++i) {
      alive = ::kill(pid, 0) == 0;
      if (alive) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_FALSE(alive) << "rank " << rank << "'s setsid orphan " << pid << " outlived the evaluation";
  }

  if (!std::regex_search(level, std::regex("^landlock[0-9]")))
    GTEST_SKIP() << "no Landlock on this host (" << level << "): files unconfined";
  EXPECT_EQ(try_read_file(run / "evolution.db").value_or(""), "db");
  EXPECT_EQ(try_read_file(run / "gen_0" / "prev" / "program.cu").value_or(""), "prev");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(std::filesystem::exists(workload / ("touched_by_rank" + std::to_string(rank))));
    EXPECT_FALSE(std::filesystem::exists(work / "results" / ("stolen_by_rank" + std::to_string(rank))));
  }
  const char* home = std::getenv("HOME");
  std::error_code ec;
  if (home && *home)
    for (const auto& e : std::filesystem::directory_iterator(home, ec)) {
      const bool planted = e.path().filename().string().rfind("braid_gpu_escape_", 0) == 0;
      EXPECT_FALSE(planted) << e.path();
      if (planted) std::filesystem::remove(e.path(), ec);
    }
}

// A user's workload that names its own input by absolute path in `args` (under the home, which
// the sandbox hides) still reads it from the sandboxed ranks; an args path into the run folder
// (another candidate) stays hidden.
TEST_F(GpuCascadeCpu, InputsNamedInArgsStayReadable) {
  ASSERT_TRUE(builder_) << "nvcc is expected on CI";
  TempDir workload("gpu_workload_data");
  TempDir home("gpu_home_data");
  TempDir run("gpu_run_data");
  write_file_atomic(home / "weights.bin", "w");
  write_file_atomic(run / "evolution.db", "db");
  std::filesystem::create_directories(run / "gen_0" / "prev");
  write_file_atomic(run / "gen_0" / "prev" / "secret.txt", "secret");
  const std::filesystem::path work = run / "gen_1" / "c1";
  std::filesystem::create_directories(work);
  const std::string saved_home = std::getenv("HOME") ? std::getenv("HOME") : "";
  ::setenv("HOME", home.path().c_str(), 1);
  auto evaluate_reading = [&](const std::filesystem::path& input, const std::string& id) {
    const GpuCascadeConfig config = config_for(workload.path(), "ok", " --data " + input.string());
    return GpuCascadeEvaluator(config, builder_, std::make_shared<GpuPool>(std::vector<int>{0, 1}))
        .evaluate(EvalRequest{id, kCandidate, work, 7}, {});
  };
  EvalResult reads = evaluate_reading(home / "weights.bin", "c1");
  EvalResult peeks = evaluate_reading(run / "gen_0" / "prev" / "secret.txt", "c2");
  ::setenv("HOME", saved_home.c_str(), 1);
  EXPECT_EQ(reads.failure, FailureKind::Ok) << reads.error_text;
  EXPECT_DOUBLE_EQ(reads.combined_score, 1.25);
  if (!std::regex_search(reads.private_metrics.value("sandbox", std::string()), std::regex("^landlock[0-9]")))
    GTEST_SKIP() << "no Landlock on this host: files unconfined";
  EXPECT_EQ(peeks.failure, FailureKind::RunFailed);
  EXPECT_NE(peeks.error_text.find("cannot read"), std::string::npos) << peeks.error_text;
}

// `verdict: channel`: the verdict comes through braid's channel, not the files the candidate's
// process can rewrite after the harness (an atexit handler forging metrics.json is ignored); a
// candidate whose text names the channel is not run.
TEST_F(GpuCascadeCpu, VerdictChannelIgnoresFilesRewrittenAfterTheHarness) {
  ASSERT_TRUE(builder_) << "nvcc is expected on CI";
  TempDir workload("gpu_workload_channel");
  auto evaluate_with = [&](const std::string& behave, const std::string& code, const std::string& id) {
    GpuCascadeConfig config = config_for(workload.path(), behave);
    config.verdict_channel = true;
    TempDir work("gpu_work_channel");
    return GpuCascadeEvaluator(config, builder_, std::make_shared<GpuPool>(std::vector<int>{0, 1}))
        .evaluate(EvalRequest{id, code, work.path(), 7}, {});
  };
  EvalResult honest = evaluate_with("ok", kCandidate, "h1");
  ASSERT_EQ(honest.failure, FailureKind::Ok) << honest.error_text;
  EXPECT_DOUBLE_EQ(honest.combined_score, 1.25);
  EXPECT_EQ(honest.private_metrics.value("verdict_channel", std::string()), "verified");

  EvalResult forged = evaluate_with("forge", kCandidate, "f1");
  ASSERT_EQ(forged.failure, FailureKind::Ok) << forged.error_text;
  EXPECT_DOUBLE_EQ(forged.combined_score, 1.25);  // the channel's figure, not the rewritten file's

  EvalResult wrong = evaluate_with("wrong", kCandidate, "w1");
  EXPECT_EQ(wrong.failure, FailureKind::VerifyFailed) << wrong.error_text;

  std::string naming = kCandidate;
  naming += "\n// reads BRAID_RESULT_FD itself\n";
  EvalResult named = evaluate_with("ok", naming, "n1");
  EXPECT_EQ(named.failure, FailureKind::VerifyFailed);
  EXPECT_NE(named.error_text.find("names the verdict channel"), std::string::npos) << named.error_text;
}

// The profile level (workload.yaml `profile:`) end to end with a stand-in for ncu: a script that
// records its arguments, runs the program it wraps and prints an ncu --page raw CSV
// (tests/eval/ncu/add_rmsnorm_raw.csv). Its outcome is stored with the candidate; a missing ncu,
// a timeout or output that is no profile is a note, never the candidate's failure.
TEST_F(GpuCascadeCpu, ProfileLevelRunsNcuForTheBestAndNotesFailures) {
  ASSERT_TRUE(builder_) << "nvcc is expected on CI";
  TempDir workload("gpu_workload_profile");
  TempDir tools("fake_ncu");
  const std::string csv = (std::filesystem::path(BRAID_SOURCE_DIR) / "tests/eval/ncu/add_rmsnorm_raw.csv").string();
  auto script = [&](const std::string& name, const std::string& body) {
    const auto path = tools / name;
    write_file_atomic(path, "#!/bin/sh\n" + body);
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path.string();
  };
  const std::string fake_ncu =
      script("ncu", "printf '%s\\n' \"$@\" > " + (tools / "args").string() +
                        "\nwhile [ $# -gt 0 ]; do case \"$1\" in /*) break;; esac; shift; done\n"
                        "\"$@\" || exit $?\ncat " +
                        csv + "\n");
  auto evaluator_with = [&](const std::string& ncu, double timeout_s) {
    GpuCascadeConfig config;
    config.workload_dir = workload.path();
    config.program_filename = "gen0.cu";
    config.ranks = 1;
    config.nvcc_flags = {"-O0", "-std=c++17"};
    config.args = "--size 64";
    config.verify_in_bench = true;
    config.build_timeout_s = 240;
    config.health_probe = false;
    config.profile.enabled = true;
    config.profile.top_k = 1;
    config.profile.ncu = ncu;
    config.profile.timeout_s = timeout_s;
    config.profile.kernel_regex = "cand::";
    return std::make_unique<GpuCascadeEvaluator>(config, builder_, std::make_shared<GpuPool>(std::vector<int>{0}));
  };
  auto evaluate_with = [&](GpuCascadeEvaluator& evaluator, const std::string& id, const std::string& code) {
    TempDir work("gpu_work_profile");
    EvalResult r = evaluator.evaluate({id, code, work.path(), 3}, {});
    // The candidate's own verdict and metrics stay where the bench wrote them.
    EXPECT_TRUE(std::filesystem::exists(work / "results" / "metrics.json"));
    return r;
  };

  auto evaluator = evaluator_with(fake_ncu, 60.0);
  EvalResult best = evaluate_with(*evaluator, "p0", kCandidate);
  ASSERT_EQ(best.failure, FailureKind::Ok) << best.error_text;
  EXPECT_TRUE(best.correct);
  ASSERT_TRUE(best.public_metrics.contains("profile")) << best.public_metrics.dump();
  const std::string summary = profile_summary(best.public_metrics);
  EXPECT_EQ(summary.rfind("cand::add_rmsnorm_kernel<8, 4>(", 0), 0u) << best.public_metrics.dump();
  EXPECT_NE(summary.find("1093.3 us: DRAM 86% of peak, L2 41%, occupancy 72%, tensor 0%; stalls: long_scoreboard 18.9"),
            std::string::npos)
      << summary;
  EXPECT_TRUE(best.timings.contains("profile"));
  EXPECT_DOUBLE_EQ(best.public_metrics["speedup"].get<double>(), 1.25);  // the harness's metrics are kept
  // What ncu was given: the raw CSV page, the kernel filter, then the bench command writing its
  // results beside the candidate's.
  const std::string args = try_read_file(tools / "args").value_or("");
  EXPECT_EQ(args.rfind("--csv\n--page\nraw\n", 0), 0u) << args;
  EXPECT_NE(args.find("--kernel-name\nregex:cand::\n"), std::string::npos) << args;
  EXPECT_NE(args.find("--mode\nbench\n"), std::string::npos) << args;
  EXPECT_NE(args.find("/profile_results\n"), std::string::npos) << args;

  // The same program again (a re-measurement), and a re-measurement run of a program never
  // evaluated before: not profiled.
  std::filesystem::remove(tools / "args");
  EXPECT_FALSE(evaluate_with(*evaluator, "p0-confirm1", kCandidate).public_metrics.contains("profile"));
  auto fresh = evaluator_with(fake_ncu, 60.0);
  EvalResult rerun = evaluate_with(*fresh, "p9-noise1", kCandidate);
  EXPECT_TRUE(rerun.correct);
  EXPECT_FALSE(rerun.public_metrics.contains("profile"));
  EXPECT_FALSE(std::filesystem::exists(tools / "args"));

  // No ncu: a note; the candidate is as correct as before.
  auto missing = evaluator_with((tools / "no_such_ncu").string(), 60.0);
  EvalResult noted = evaluate_with(*missing, "p1", kCandidate);
  EXPECT_EQ(noted.failure, FailureKind::Ok);
  EXPECT_TRUE(noted.correct);
  EXPECT_NE(noted.public_metrics["profile"].value("note", "").find("no_such_ncu"), std::string::npos)
      << noted.public_metrics.dump();
  EXPECT_EQ(profile_summary(noted.public_metrics), "");

  // ncu refusing (no permission for the counters) and ncu past its time limit: notes.
  auto refused = evaluator_with(
      script("ncu_refused", "echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission'\nexit 1\n"), 60.0);
  EvalResult r = evaluate_with(*refused, "p2", kCandidate);
  EXPECT_EQ(r.failure, FailureKind::Ok);
  EXPECT_NE(r.public_metrics["profile"].value("note", "").find("==ERROR== ERR_NVGPUCTRPERM"), std::string::npos)
      << r.public_metrics.dump();
  auto slow = evaluator_with(script("ncu_slow", "sleep 30\n"), 1.0);
  const auto t0 = std::chrono::steady_clock::now();
  r = evaluate_with(*slow, "p3", kCandidate);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 15.0);
  EXPECT_EQ(r.failure, FailureKind::Ok);
  EXPECT_TRUE(r.correct);
  EXPECT_NE(r.public_metrics["profile"].value("note", "").find("timed out"), std::string::npos)
      << r.public_metrics.dump();
}

TEST(GpuWorkload, ValidatesTheGpuEvaluatorSection) {
  TempDir dir("gpu_yaml");
  write_file_atomic(dir / "gen0.cu", "int main() {}\n");
  auto load = [&](const std::string& evaluator) {
    write_file_atomic(dir / "workload.yaml", "name: t\nprogram: gen0.cu\nevaluator:\n" + evaluator);
    return load_workload(dir.path());
  };
  WorkloadSpec spec = load(
      "  kind: gpu\n  ranks: 2\n  launcher: mpirun\n  arch: sm_90a\n  nvcc_flags: [-O3, -std=c++20]\n"
      "  args: \"--size 4096 --results_dir {results_dir}\"\n  bench_exclusive: false\n  gpus: [2, 3]\n"
      "  includes: [inc]\n  run_timeout_s: 20\n");
  EXPECT_EQ(spec.evaluator["ranks"], 2);
  EXPECT_EQ(spec.evaluator["launcher"], "mpirun");
  EXPECT_EQ(spec.evaluator["bench_timeout_s"], 180.0);
  GpuCascadeConfig c = GpuCascadeConfig::from_json(spec.evaluator, spec.dir, "gen0.cu");
  EXPECT_EQ(c.launcher, LauncherKind::Mpirun);
  EXPECT_EQ(c.arch, "sm_90a");
  EXPECT_FALSE(c.bench_exclusive);
  EXPECT_EQ(c.gpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(c.includes.at(0), spec.dir / "inc");
  EXPECT_EQ(c.nvcc_flags, (std::vector<std::string>{"-O3", "-std=c++20"}));

  auto problem = [&](const std::string& evaluator) -> std::string {
    try {
      load(evaluator);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(problem("  kind: gpu\n  launcher: ssh\n").find("launcher 'ssh' is unknown"), std::string::npos);
  EXPECT_NE(problem("  kind: gpu\n  arch: hopper\n").find("arch 'hopper' is unknown"), std::string::npos);
  EXPECT_NE(problem("  kind: gpu\n  ranks: 0\n").find("'ranks' in evaluator must be a whole number"),
            std::string::npos);
  EXPECT_NE(problem("  kind: gpu\n  nvcc_flags: -O3\n").find("must be a list of strings"), std::string::npos);
  EXPECT_NE(problem("  kind: gpu\n  args: \"--x {nope}\"\n").find("unknown placeholder {nope}"), std::string::npos);
  EXPECT_NE(problem("  kind: gpu\n  build: make\n").find("unknown key 'build'"), std::string::npos);
  // The ranks' sandbox and the verdict's source.
  EXPECT_TRUE(c.sandbox.enabled);
  EXPECT_EQ(c.sandbox.max_processes, 4096);
  EXPECT_EQ(c.rank_memory_bytes, std::size_t{32768} << 20);  // resident, per rank
  EXPECT_EQ(GpuCascadeConfig::from_json(load("  kind: gpu\n  memory_limit_mb: 4096\n").evaluator, spec.dir, "gen0.cu")
                .rank_memory_bytes,
            std::size_t{4096} << 20);
  EXPECT_NE(problem("  kind: gpu\n  memory_limit_mb: 10\n").find("memory_limit_mb"), std::string::npos);
  EXPECT_FALSE(c.verdict_channel);
  WorkloadSpec channel = load("  kind: gpu\n  verdict: channel\n  sandbox: false\n  max_processes: 64\n");
  GpuCascadeConfig cc = GpuCascadeConfig::from_json(channel.evaluator, channel.dir, "gen0.cu");
  EXPECT_TRUE(cc.verdict_channel);
  EXPECT_FALSE(cc.sandbox.enabled);
  EXPECT_EQ(cc.sandbox.max_processes, 64);
  EXPECT_NE(problem("  kind: gpu\n  verdict: maybe\n").find("verdict 'maybe' is unknown"), std::string::npos);
  EXPECT_NE(problem("  kind: gpu\n  launcher: mpirun\n  verdict: channel\n").find("needs launcher local"),
            std::string::npos);
  EXPECT_NE(problem("  kind: gpu\n  max_processes: 3\n").find("at least 8"), std::string::npos);
}

// verdict: auto (the default) takes the channel where braid's own local ranks run a program on
// braid's harness, judged from the workload's program (a candidate cannot opt out); files
// elsewhere: a program without the harness, or ranks braid does not start itself.
TEST(GpuWorkload, VerdictAutoTakesTheChannelForProgramsOnBraidsHarness) {
  const std::filesystem::path source(BRAID_SOURCE_DIR);
  EXPECT_TRUE(runs_braid_harness(source / "workloads/gemm_allgather/gen0.cu", {source / "workloads/gemm_allgather"}));
  EXPECT_TRUE(
      runs_braid_harness(source / "workloads/serving_kernels/softmax/gen0.cu",
                         {source / "workloads/serving_kernels/softmax", source / "workloads/serving_kernels/common"}));
  TempDir dir("gpu_verdict_auto");
  write_file_atomic(dir / "own.cu", "#include <cstdio>\nint main() { std::puts(\"{}\"); }\n");
  write_file_atomic(dir / "wl.cuh", "#pragma once\n#include <braid/harness.cuh>\n");
  write_file_atomic(dir / "on_harness.cu",
                    "#include \"wl.cuh\"\nint main(int c, char** v) { return braid::dev::harness_main(c, v); }\n");
  write_file_atomic(dir / "own_main.cu", "#include \"wl.cuh\"\nint main() {}\n");
  EXPECT_FALSE(runs_braid_harness(dir / "own.cu", {}));
  EXPECT_FALSE(runs_braid_harness(dir / "own_main.cu", {}));  // the harness's headers, its own main
  EXPECT_TRUE(runs_braid_harness(dir / "on_harness.cu", {}));
  auto config = [&](const std::string& program, const std::string& keys) {
    write_file_atomic(dir / "workload.yaml", "name: t\nprogram: " + program + "\nevaluator:\n  kind: gpu\n" + keys);
    WorkloadSpec spec = load_workload(dir.path());
    return GpuCascadeConfig::from_json(spec.evaluator, spec.dir, program);
  };
  EXPECT_TRUE(config("on_harness.cu", "").verdict_channel);
  EXPECT_FALSE(config("own.cu", "").verdict_channel);
  EXPECT_FALSE(config("on_harness.cu", "  verdict: files\n").verdict_channel);
  EXPECT_FALSE(config("on_harness.cu", "  launcher: mpirun\n").verdict_channel);
  EXPECT_TRUE(config("own.cu", "  verdict: channel\n").verdict_channel);
}

TEST(GpuWorkload, NoGpuIsAClearError) {
  if (!detect_gpus().empty()) GTEST_SKIP() << "this machine has GPUs";
  TempDir dir("gpu_none");
  write_file_atomic(dir / "gen0.cu", "int main() {}\n");
  write_file_atomic(dir / "workload.yaml", "name: t\nprogram: gen0.cu\nevaluator: {kind: gpu, ranks: 2}\n");
  WorkloadSpec spec = load_workload(dir.path());
  try {
    make_evaluator(spec);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 2 GPUs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("workload.yaml"), std::string::npos);
  }
}

}  // namespace
}  // namespace braid
