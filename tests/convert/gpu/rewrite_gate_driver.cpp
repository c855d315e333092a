// GPU check of the LLM rewrite loop (run by tests/convert/rewrite_gate_test.sh): a loopback model
// first rewrites reduce_to_root.cu so that it compiles and runs but writes `loss_total` on every
// rank; only after the gate's failure text and the judge's diagnosis reach its prompt does it
// answer with the fix, which must pass the gate on 2 local ranks (or BRAID_GATE_RANKS).
// Then a rewrite that fails at run time on every rank: the diagnostic rerun must name the failing
// step (the oversized cudaMemcpyAsync) in the outcome that the next prompt shows.
// Usage: rewrite_gate_driver <corpus_llm/reduce_to_root.cu> <work dir>. Exit 0 when every check holds.
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "../../llm/loopback_llm_server.hpp"
#include "../rewrite_script.hpp"
#include "braid/convert/rewrite_loop.hpp"
#include "braid/llm/model_spec.hpp"
#include "braid/util/fs.hpp"
#include "gate_ranks.hpp"

using namespace braid::convert;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <reduce_to_root.cu> <work dir>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path program = argv[1], work = argv[2];
  const std::string source = braid::read_file(program);
  const Analysis analysis = analyze(program.filename().string(), source);
  const Conversion rules = transform(analysis, source);
  const std::string right = braid::testing::rewrite_correct(rules.source);
  const std::string diagnosis =
      "DIAG-GPU: loss_total is written on every rank, but ncclReduce leaves it untouched on non-root ranks; copy the "
      "reduced scratch buffer into loss_total on rank 0 only.";

  braid::testing::LoopbackLlmServer server;
  std::mutex mu;
  std::vector<std::string> rewrite_prompts, judge_prompts;
  server.set_responder([&](const std::string&, const std::vector<std::pair<std::string, std::string>>& m) -> std::optional<std::string> {
    std::lock_guard lock(mu);
    const std::string& p = m.back().second;
    if (has(p, "You review one attempt")) {
      judge_prompts.push_back(p);
      // Diagnoses from what the gate reported, as a model would.
      return has(p, "differs on rank 1") ? diagnosis : std::string("The outcome does not say which rank differs.");
    }
    rewrite_prompts.push_back(p);
    // Like a model: edit the current program as shown (its generated block folded to one line).
    const std::string shown = braid::testing::cuda_block(p, 1);
    if (has(p, "wrong_output") && has(p, "DIAG-GPU"))
      return braid::testing::fenced(braid::testing::rewrite_correct(shown), "Only the root copies the sum.");
    return braid::testing::fenced(braid::testing::rewrite_all_ranks_write(shown), "All-reduce in place of the rooted reduction.");
  });
  braid::llm::RetryPolicy policy;
  policy.max_retries = 0;
  auto client = braid::llm::make_http_client(braid::llm::parse_model_spec("local:scripted@" + server.base_url()), "", policy);

  RewriteOptions o;
  o.run_gate = true;
  o.gate.ranks = braid::testing::gate_ranks_from_env();
  o.gate.work_dir = work / "gate";
  o.gate.source_dir = program.parent_path();
  o.record_dir = work / "record";
  o.max_iterations_per_stage = 3;
  const RewriteResult r = rewrite_loop(analysis, source, rules, *client, *client, o);
  std::printf("%s\n", r.to_json().dump(2).c_str());

  check(r.accepted, "accepted after the fix: " + r.failure);
  check(r.attempts.size() == 2, "two attempts");
  if (r.attempts.size() >= 1) {
    const RewriteAttempt& first = r.attempts[0];
    check(first.outcome == "wrong_output", "first rewrite: wrong_output (got " + first.outcome + ")");
    check(has(first.outcome_text, "loss_total") && has(first.outcome_text, "rank 1"), "gate names loss_total on rank 1: " + first.outcome_text);
    check(judge_prompts.size() == 1 && has(judge_prompts[0], first.outcome_text), "the gate's failure text reached the judge");
    check(first.diagnosis == diagnosis, "the judge's diagnosis is kept with the attempt");
  }
  if (r.attempts.size() >= 2) {
    check(r.attempts[1].outcome == "passed", "second rewrite passes the gate on " + std::to_string(o.gate.ranks) + " ranks (got " + r.attempts[1].outcome + ")");
    check(rewrite_prompts.size() == 2 && has(rewrite_prompts[1], r.attempts[0].outcome_text) && has(rewrite_prompts[1], diagnosis),
          "the failure text and the diagnosis reached the second rewrite prompt");
  }
  check(r.source == right, "the accepted program is the fix");
  check(std::filesystem::exists(work / "record" / "stageB_iter2.cu"), "attempts recorded");

  // Run failure: located by the diagnostic rerun, then fixed.
  const std::string crashing = braid::testing::rewrite_copy_overflows(rules.source);
  braid::testing::LoopbackLlmServer server2;
  std::vector<std::string> prompts2;
  server2.set_responder([&](const std::string&, const std::vector<std::pair<std::string, std::string>>& m) -> std::optional<std::string> {
    std::lock_guard lock(mu);
    const std::string& p = m.back().second;
    if (has(p, "You review one attempt")) return std::string("The copy after the all-reduce is longer than loss_total.");
    prompts2.push_back(p);
    if (has(p, "the failing step: line")) return braid::testing::fenced(right, "Copy size fixed; only the root copies.");
    return braid::testing::fenced(crashing, "All-reduce, then copy.");
  });
  auto client2 = braid::llm::make_http_client(braid::llm::parse_model_spec("local:scripted@" + server2.base_url()), "", policy);
  RewriteOptions o2 = o;
  o2.gate.work_dir = work / "gate2";
  o2.gate.run_timeout_s = 60;
  o2.record_dir = work / "record2";
  const RewriteResult r2 = rewrite_loop(analysis, source, rules, *client2, *client2, o2);
  std::printf("%s\n", r2.to_json().dump(2).c_str());
  check(r2.accepted && r2.attempts.size() == 2, "run failure then fix: accepted in two attempts");
  if (!r2.attempts.empty()) {
    const RewriteAttempt& first = r2.attempts[0];
    check(first.outcome == "run_failed", "crashing rewrite: run_failed (got " + first.outcome + ")");
    check(has(first.outcome_text, "the failing step: line") && has(first.outcome_text, "cudaMemcpyAsync(loss_total, loss_scratch"),
          "the diagnostic rerun names the oversized copy: " + first.outcome_text);
    check(prompts2.size() >= 2 && has(prompts2[1], "the failing step: line"), "the located step reached the next prompt");
  }
  std::printf("%s\n", failures == 0 ? "REWRITE GATE: PASS" : "REWRITE GATE: FAIL");
  return failures == 0 ? 0 : 1;
}
