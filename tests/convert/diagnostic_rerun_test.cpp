// The diagnostic rerun's instrumentation (a pure source transformation) and how it reads the
// ranks' step markers; the instrumented programs compile with nvcc -c.
#include <gtest/gtest.h>

#include <filesystem>

#include "braid/convert/diagnostic_rerun.hpp"
#include "braid/convert/transform.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/fs.hpp"
#include "rewrite_script.hpp"

using namespace braid::convert;

namespace {

std::filesystem::path corpus(const std::string& dir, const std::string& name) {
  return std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert" / dir / name;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

braid::SubprocessResult rank_run(int exit_code, std::string stderr_text, bool timed_out = false) {
  braid::SubprocessResult r;
  r.started = true;
  r.exit_code = exit_code;
  r.timed_out = timed_out;
  r.stderr_text = std::move(stderr_text);
  return r;
}

}  // namespace

TEST(DiagnosticRerun, StepAfterEveryKernelNcclAndCopyOfTheOriginal) {
  const auto path = corpus("corpus_llm", "reduce_to_root.cu");
  const std::string src = braid::read_file(path);
  const Instrumented inst = instrument_for_diagnosis(analyze("reduce_to_root.cu", src), src);
  ASSERT_EQ(inst.steps.size(), 3u);
  EXPECT_EQ(inst.steps[0].line, 32);
  EXPECT_EQ(inst.steps[0].call, "ncclAllReduce");
  EXPECT_EQ(inst.steps[0].text, "ncclAllReduce(grads, grads_sum, kGrads, ncclFloat, ncclSum, comm, stream)");
  EXPECT_EQ(inst.steps[1].line, 33);
  EXPECT_EQ(inst.steps[1].call, "scale");
  EXPECT_EQ(inst.steps[2].line, 34);
  // Right after the statement (its wrapper macro and ';' included), with the call's communicator.
  EXPECT_NE(inst.source.find("BRAID_NCCL(ncclAllReduce(grads, grads_sum, kGrads, ncclFloat, ncclSum, comm, stream)); "
                             "braid_diag::step(1, 32, comm);"),
            std::string::npos);
  EXPECT_NE(inst.source.find("scale<<<256, 256, 0, stream>>>(grads_sum, kGrads, 0.5f); braid_diag::step(2, 33, nullptr);"),
            std::string::npos);
  EXPECT_NE(inst.source.find("namespace braid_diag {"), std::string::npos);
  // Nothing else changed: removing the insertions gives the program back.
  std::string back = inst.source;
  const std::size_t h0 = back.find("\n// ==== braid diagnostic rerun"), h1 = back.find("// ==== end of diagnostic step markers ====\n");
  back.erase(h0, h1 + std::string("// ==== end of diagnostic step markers ====\n").size() - h0);
  for (std::size_t at; (at = back.find(" braid_diag::step(")) != std::string::npos;) back.erase(at, back.find(';', at) + 1 - at);
  EXPECT_EQ(back, src);
}

TEST(DiagnosticRerun, GroupsAreCheckedAtTheirEnd) {
  const auto path = corpus("corpus", "ring_sendrecv.cu");
  const std::string src = braid::read_file(path);
  const Instrumented inst = instrument_for_diagnosis(analyze("ring_sendrecv.cu", src), src);
  for (const InstrumentedStep& s : inst.steps) EXPECT_TRUE(s.call != "ncclSend" && s.call != "ncclRecv") << s.call;
  EXPECT_NE(inst.source.find("BRAID_NCCL(ncclGroupEnd()); braid_diag::step("), std::string::npos);
  EXPECT_NE(inst.source.find(", comm);"), std::string::npos);  // the group's communicator, from its members
  EXPECT_EQ(inst.source.find("BRAID_NCCL(ncclSend(mine, kBlock, ncclFloat32, next, comm, stream)); braid_diag"), std::string::npos);
}

TEST(DiagnosticRerun, UnbracedBodiesGetBracesAndConditionsAreLeftAlone) {
  const std::string src = R"(#include <nccl.h>
int main() {
  float* a = nullptr;
  float* b = nullptr;
  cudaMalloc(&a, 1024 * sizeof(float));
  cudaMalloc(&b, 1024 * sizeof(float));
  ncclComm_t comm;
  cudaStream_t s;
  int rank = 0;
  // braid:input a
  if (rank == 0)
    BRAID_NCCL(ncclAllReduce(a, b, 1024, ncclFloat, ncclSum, comm, s));
  else
    (void)cudaMemcpyAsync(b, a, 1024 * sizeof(float), cudaMemcpyDeviceToDevice, s);
  if (ncclAllGather(a, b, 512, ncclFloat, comm, s) != ncclSuccess) return 1;
  // braid:output b
  return 0;
}
)";
  const Instrumented inst = instrument_for_diagnosis(analyze("bodies.cu", src), src);
  EXPECT_NE(inst.source.find("{ BRAID_NCCL(ncclAllReduce(a, b, 1024, ncclFloat, ncclSum, comm, s)); braid_diag::step(1, 12, comm); }"),
            std::string::npos)
      << inst.source;
  EXPECT_NE(inst.source.find("{ (void)cudaMemcpyAsync(b, a, 1024 * sizeof(float), cudaMemcpyDeviceToDevice, s); braid_diag::step(2, 14, nullptr); }"),
            std::string::npos)
      << inst.source;
  // A call inside a condition is no statement of its own: no step after it.
  EXPECT_EQ(inst.steps.size(), 2u);
  EXPECT_NE(inst.source.find("if (ncclAllGather(a, b, 512, ncclFloat, comm, s) != ncclSuccess) return 1;\n"), std::string::npos);
}

TEST(DiagnosticRerun, ConvertedProgramStepsSkipTheGeneratedPrelude) {
  const auto path = corpus("corpus_llm", "reduce_to_root.cu");
  const std::string src = braid::read_file(path);
  const Conversion c = transform(analyze("reduce_to_root.cu", src), src);
  const std::string rewrite = braid::testing::rewrite_correct(c.source);
  const Instrumented inst = instrument_for_diagnosis(analyze_converted("reduce_to_root.cu", rewrite), rewrite);
  // all_reduce<0>, scale, all_reduce<1>, the root's copy: nothing from the prelude's fallbacks.
  ASSERT_EQ(inst.steps.size(), 4u);
  EXPECT_EQ(inst.steps[0].text, "braid_converted::all_reduce<0>(grads, grads_sum, kGrads, ncclFloat, ncclSum, comm, stream)");
  EXPECT_EQ(inst.steps[2].text, "braid_converted::all_reduce<1>(loss, loss_scratch, kLoss, ncclFloat, ncclSum, comm, stream)");
  EXPECT_EQ(inst.steps[3].call, "cudaMemcpyAsync");
  EXPECT_EQ(count(inst.source, "braid_diag::step("), 4u);
  EXPECT_NE(inst.source.find("{ BRAID_CUDA(cudaMemcpyAsync(loss_total, loss_scratch, kLoss * sizeof(float), "
                             "cudaMemcpyDeviceToDevice, stream)); braid_diag::step(4, "),
            std::string::npos);
}

TEST(DiagnosticRerun, LocatesTheFailingStep) {
  const auto path = corpus("corpus_llm", "reduce_to_root.cu");
  const std::string src = braid::read_file(path);
  const Instrumented inst = instrument_for_diagnosis(analyze("reduce_to_root.cu", src), src);
  // A rank whose step reported a CUDA error.
  DiagnosticReport d = locate_failing_step(
      inst, {rank_run(124, "BRAID_DIAG step 1 line 32 ok\n", true),
             rank_run(86, "BRAID_DIAG step 1 line 32 ok\nBRAID_DIAG step 2 line 33 failed: an illegal memory access was encountered "
                          "(cudaErrorIllegalAddress)\n")});
  EXPECT_TRUE(d.located);
  EXPECT_EQ(d.failing_rank, 1);
  EXPECT_EQ(d.step.line, 33);
  EXPECT_EQ(d.text,
            "the failing step: line 33 `scale<<<256, 256, 0, stream>>>(grads_sum, kGrads, 0.5f)`: an illegal memory access was "
            "encountered (cudaErrorIllegalAddress) (rank 1)");
  // A rank that died (a thrown DeviceError) after step 2: the step after the last one that passed.
  braid::SubprocessResult aborted = rank_run(-1, "BRAID_DIAG step 1 line 32 ok\nBRAID_DIAG step 2 line 33 ok\nterminate called: ncclReduce failed\n");
  aborted.term_signal = 6;
  d = locate_failing_step(inst, {rank_run(0, "BRAID_DIAG step 3 line 34 ok\n"), aborted});
  EXPECT_TRUE(d.located);
  EXPECT_EQ(d.failing_rank, 1);
  EXPECT_EQ(d.step.line, 34);
  EXPECT_NE(d.text.find("the failing step: line 34 `ncclReduce(loss, loss_total, kLoss, ncclFloat, ncclSum, 0, comm, stream)`"),
            std::string::npos)
      << d.text;
  EXPECT_NE(d.text.find("after step 2 at line 33 passed"), std::string::npos) << d.text;
  EXPECT_NE(d.text.find("terminate called: ncclReduce failed"), std::string::npos) << d.text;
  // Every rank passed: the failure did not reproduce with synchronisation.
  d = locate_failing_step(inst, {rank_run(0, "BRAID_DIAG step 3 line 34 ok\n"), rank_run(0, "BRAID_DIAG step 3 line 34 ok\n")});
  EXPECT_FALSE(d.located);
  EXPECT_NE(d.text.find("passed on every rank"), std::string::npos);
}

// What diagnostic_rerun builds (instrumented, then gate-instrumented) compiles; no GPU needed.
TEST(DiagnosticRerun, InstrumentedCorpusCompilesWithNvcc) {
  if (!braid::find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const auto path = corpus("corpus_llm", "reduce_to_root.cu");
  const std::string src = braid::read_file(path);
  const Conversion c = transform(analyze("reduce_to_root.cu", src), src);
  const std::string rewrite = braid::testing::rewrite_correct(c.source);
  const Instrumented inst = instrument_for_diagnosis(analyze_converted("reduce_to_root.cu", rewrite), rewrite);
  const std::string text = instrument_for_gate(analyze_converted("reduce_to_root.cu", inst.source), inst.source);
  const auto work = std::filesystem::current_path() / "convert-nvcc" / "diagnostic_reduce_to_root";
  braid::BuildResult r = compile_only(text, work, "instrumented", path.parent_path(), {"-O0", "-std=c++20", "--expt-relaxed-constexpr"});
  EXPECT_TRUE(r.ok) << r.error;
  // The corpus originals as the rerun would build them (no prelude: quick).
  for (const char* name : {"reduce_to_root.cu", "split_stream_exchange.cu"}) {
    const std::string orig = braid::read_file(corpus("corpus_llm", name));
    const Instrumented oi = instrument_for_diagnosis(analyze(name, orig), orig);
    EXPECT_GE(oi.steps.size(), 3u) << name;
    const std::string gated = instrument_for_gate(analyze(name, oi.source), oi.source);
    braid::BuildResult b = compile_only(gated, work, std::string("original_") + name, path.parent_path(), {"-O0", "-std=c++20"});
    EXPECT_TRUE(b.ok) << name << ": " << b.error;
  }
}

TEST(DiagnosticRerun, KnobbedSitesAreReadAsTheirNcclCalls) {
  const auto path = corpus("corpus_llm", "reduce_to_root.cu");
  const std::string src = braid::read_file(path);
  std::string conv = transform(analyze("reduce_to_root.cu", src), src).source;
  braid::testing::replace_once(conv, "braid_converted::all_reduce<0>(", "braid_converted::all_reduce<0, Shape<kIssuer, kCtas, kChunk>>(");
  const Analysis a = analyze_converted("reduce_to_root.cu", conv);
  int all_reduces = 0;
  for (const Call& c : a.calls)
    if (c.name == "ncclAllReduce") {
      ++all_reduces;
      EXPECT_EQ(c.buffers, (std::vector<std::string>{"grads", "grads_sum"}));
    }
  EXPECT_EQ(all_reduces, 1);
  EXPECT_EQ(a.annotations.size(), 4u);
}
