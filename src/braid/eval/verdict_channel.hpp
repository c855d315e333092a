// The verdict channel: how a frozen harness hands braid its verdict and metrics so that a
// candidate cannot forge them by dropping files (issue 17). Harness side, in any language:
//
//   Environment braid sets for every candidate process (each step, each rank):
//     BRAID_EVAL_TOKEN   32 hex digits, new for every step of every evaluation
//     BRAID_RESULT_FD    a descriptor (3) of a pipe only braid reads: write the record there; or,
//     BRAID_RESULT_PATH  where no descriptor can pass (ranks under mpirun/srun): a file braid
//                        created; append the record (one write of the whole line, O_APPEND)
//     BRAID_SEED, BRAID_RESULTS_DIR, BRAID_WORK_DIR, BRAID_WORKLOAD_DIR as before
//   Read the token at start-up (before any candidate code runs) and write ONE record per
//   process, after the candidate's code has run for the last time:
//     {"braid_verdict": 1, "token": "<BRAID_EVAL_TOKEN>", "mode": "verify" | "bench",
//      "seed": <the --seed given>, "rank": <0 for a single process>,
//      "correct": true | false, "error": "<why, when not correct>",
//      "combined_score": <number>, "public": {...}, "private": {...}, "text_feedback": "...",
//      "timed_ms": <milliseconds inside every timed region, baselines included>}
//   as one line of JSON ending in '\n'. combined_score is required when correct in bench mode
//   (and in verify mode when the workload has no bench step); metrics are optional otherwise.
//
// braid's checks (any failure rejects the candidate, naming the check):
//   - a record came (rank 0's at least, for multi-rank runs) and each line is a JSON object
//     with "braid_verdict": 1;
//   - the token is this step's, the mode is this step's, the seed is the one braid passed;
//   - at most one record per rank; every rank that wrote one agrees on "correct";
//   - combined_score and every number in public/private are finite;
//   - timed_ms <= 1.05 x the step's wall time braid measured + 50 ms (a harness cannot have
//     timed more than it ran; an inflated baseline shows here).
// correct.json / metrics.json in the results folder are then written by braid from the
// record (for people and tools); files a candidate drops there are overwritten, never read.
//
// Workloads whose harness predates the channel (`verdict: files` in workload.yaml, or `auto`
// with a program that never mentions BRAID_EVAL_TOKEN) are read from the files as before, and
// every such result is marked "verdict_channel": "unverified-channel" in its private metrics.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "braid/eval/evaluator.hpp"
#include "braid/util/json.hpp"

namespace braid {

// 32 random hex digits from the kernel's generator.
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
  json metrics = json::object();  // {"combined_score", "public", "private", "text_feedback"} of rank 0
};

// Reads the records of one step (the text of every rank's channel, concatenated).
ChannelVerdict read_channel(const std::string& records, const ChannelExpectation& expect);

// Writes results/correct.json and (when metrics are present) results/metrics.json from a
// verdict that passed the checks, replacing whatever the candidate left there.
void write_contract_files(const std::filesystem::path& results, const ChannelVerdict& verdict);

// How a workload's verdict reaches braid.
enum class VerdictSource { Channel, Files };
// "channel" | "files" | "auto": auto is Channel when `harness_text` mentions BRAID_EVAL_TOKEN.
VerdictSource resolve_verdict_source(const std::string& setting, const std::string& harness_text);

}  // namespace braid
