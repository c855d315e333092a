// The verdict channel: how a frozen harness hands braid its verdict and metrics so that a
// candidate cannot forge them by dropping files (issue 17, docs/sandbox.md). Harness side:
//
//   BRAID_RESULT_FD=3 in the environment names a socket braid holds the other end of. On it,
//   before the harness runs any candidate code, the harness reads ONE line: a 32-hex-digit
//   nonce, new for every step of every evaluation; braid wrote it there before the process
//   existed, so it is in no environment, file or command line. The harness keeps the nonce and
//   writes ONE record per process on the same descriptor after the candidate's code has run
//   for the last time:
//     {"braid_verdict": 1, "token": "<the nonce>", "mode": "verify" | "bench",
//      "seed": <the --seed given>, "rank": <0 for a single process>,
//      "correct": true | false, "error": "<why, when not correct>",
//      "combined_score": <number>, "public": {...}, "private": {...}, "text_feedback": "...",
//      "timed_ms": <milliseconds inside every timed region, baselines included>,
//      "failure": "<optional, when not correct: build_failed, run_failed, bench_failed, ...>"}
//   as one line of JSON ending in '\n'. combined_score and timed_ms are required when correct in
//   bench mode (and in verify mode when the workload has no bench step).
//
// braid's checks (any failure rejects the candidate as verify_failed, naming the check):
//   - each line is a JSON object with "braid_verdict": 1;
//   - the token is this step's nonce, the mode is this step's, the seed is the one braid passed;
//   - at most one record per rank, rank 0's present; every rank agrees on "correct";
//   - combined_score and every number in public/private are finite;
//   - timed_ms <= 1.05 x the step's wall time braid measured + 50 ms (a harness cannot have
//     timed more than it ran; an inflated baseline shows here).
// correct.json / metrics.json in the results folder are then written by braid from the
// record (for people and tools); files a candidate drops there are overwritten, never read.
//
// In a single binary, candidate code in the harness's own process that read the socket before the
// harness (a static initialiser) could take the nonce and forge a record. braid's GPU harness
// takes it in a constructor of priority 101, ahead of every default-priority initialiser, and
// channel_tampering refuses candidate code that asks to run earlier (an explicit constructor
// priority, init_priority, an .init_array entry). Code that patches the harness's memory is not
// stopped. A cascade with a driver (cascade.hpp, docs/sandbox.md) closes all of it: only the
// driver, a process the candidate's code never runs in, holds the channel.
//
// Workloads whose harness predates the channel (`verdict: files` in workload.yaml, or `auto`
// with a program that never mentions BRAID_RESULT_FD) are read from the files as before, and
// every such result is marked "verdict_channel": "unverified-channel" in its private metrics.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "braid/eval/evaluator.hpp"
#include "braid/util/json.hpp"

namespace braid {

// 32 random hex digits from the kernel's generator: the nonce of one step.
std::string new_eval_token();

struct ChannelExpectation {
  std::string token;
  std::string mode;          // "verify" or "bench"
  std::uint64_t seed = 0;
  double wall_s = 0.0;       // the step's wall time as braid measured it
  bool needs_score = false;  // combined_score required when correct
};

struct ChannelVerdict {
  bool received = false;     // at least one record came
  std::string problem;       // a check that failed; "" when the records are consistent
  bool correct = false;
  std::string error;
  std::string failure;       // rank 0's "failure" (a braid failure kind, e.g. build_failed) when not correct
  json metrics = json::object();  // {"combined_score", "public", "private", "text_feedback"} of rank 0
};

// Reads the records of one step (the text of every rank's channel, concatenated).
ChannelVerdict read_channel(const std::string& records, const ChannelExpectation& expect);

// Writes results/correct.json and (when metrics are present) results/metrics.json from a
// verdict that passed the checks, replacing whatever the candidate left there.
void write_contract_files(const std::filesystem::path& results, const ChannelVerdict& verdict);

// How a workload's verdict reaches braid.
enum class VerdictSource { Channel, Files };
// "channel" | "files" | "auto": auto is Channel when `harness_text` mentions BRAID_RESULT_FD.
VerdictSource resolve_verdict_source(const std::string& setting, const std::string& harness_text);

// "" or why `candidate` (a whole program) touches the verdict channel: it names
// BRAID_RESULT_FD or braid_verdict more often than the workload's frozen `harness` does, or asks to
// run before main (constructor priorities, init_priority, .init_array) more often. Evolved code
// has no business with the channel; this catches the plain attempts at the nonce before they run
// (the runtime checks catch the rest that reach braid, see above).
std::string channel_tampering(const std::string& candidate, const std::string& harness);

}  // namespace braid
