// braid/harness.cuh -- the frozen evaluation harness: every score it writes can be trusted.
//
// CONTRACT (shown to the LLM as documentation)
// A program is: a frozen Workload (buffers, reference, baseline, compute alone, communication
// alone) + a Candidate that the search evolves, four functions inside EVOLVE blocks:
//   Requirements requirements(const Problem&)  what the device communicator must provide
//                                              (barrier counts sized from the launch, GIN signals,
//                                              an extra resource buffer). multimem is rejected;
//                                              asking for GIN where Problem::platform.gin is false
//                                              fails, so pick the backend with effective_backend().
//   void setup(Context&)                       once per size, untimed: streams (ctx.new_stream()),
//                                              windows (ctx.alloc_window, same order on all ranks),
//                                              plain buffers (ctx.alloc), state (Role::State).
//   void run(Context&, cudaStream_t stream)    the timed work. Everything it launches must be done
//                                              when the harness's device sync returns; streams
//                                              from ctx.new_stream() are joined automatically,
//                                              work left on other streams is still timed.
//   void teardown(Context&)                    release what setup made (ctx buffers are freed by
//                                              the harness).
// The harness (frozen):
//   * fresh random inputs for EVERY run() call (warm-up and timed, every phase), generated on the
//     device from a secret drawn after setup() (--seed mixed with OS entropy), the call and the
//     rank: no two calls see the same inputs, so caching results or precomputing in setup() fails;
//   * before every call (untimed) the inputs are written and Receive, Intermediate and Output
//     buffers are poisoned (0xFF bytes: NaN for floats); State buffers are zeroed once and never
//     poisoned;
//   * canary bands (64 KiB of 0xA5) before and after every buffer, checked after the runs;
//   * per call: device idle, cross-rank barrier, CUDA events around run(), then a device sync
//     (work still running after the end event is timed too); the host clock times the same
//     call; the makespan is the slowest rank's time; the figure is the median over iterations;
//   * EVERY call (warm-up included) is verified, untimed, element by element on every rank
//     against the reference computed by another route on the same inputs, |got-exp| <= atol +
//     rtol*|exp|, NaN never passes; one bad call fails the candidate, naming rank, iteration,
//     buffer, first bad index, expected and got;
//   * baseline (host-driven), compute alone and communication alone are timed in the same run;
//     combined_score = geometric mean over sizes of baseline_ms / candidate_ms;
//   * plausibility: a size faster than 0.9 x max(compute alone, communication alone), or whose
//     CUDA-event and host-clock times disagree, is re-measured under a strict protocol (candidate
//     alone, host clock, which is then the figure); still implausible -> public "plausibility":
//     "flagged" with "plausibility_reason"; if the clocks still disagree, or device work the
//     candidate left running slowed the baseline or the bound, the score is withheld
//     (combined_score 0);
//   * NVLink multicast is off (NCCL_NVLS_ENABLE=0, lsaMultimem=false).
// Command line (filled by braid from workload.yaml):
//   --mode verify|bench  --size N (repeatable, or --sizes a,b,c)  --seed S  --rtol R --atol A
//   --warmup W --iters N --results_dir D (or env BRAID_METRICS_PATH); --input_sets K is accepted
//   and ignored (every call has its own inputs)
// Results: rank 0 writes D/correct.json {"correct","error"} and, in bench mode, D/metrics.json
// {"combined_score","public","private","text_feedback"}.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "braid/comm.cuh"
#include "braid/runtime.cuh"

// The parts, one concern each (braid/harness/, as NCCL's nccl_device/*.h under nccl_device.h);
// the headers above stay for programs that came to rely on them through this one.
#include "braid/harness/types.cuh"
#include "braid/harness/context.cuh"
#include "braid/harness/options.cuh"
#include "braid/harness/report.cuh"
#include "braid/harness/verify.cuh"
#include "braid/harness/plausibility.cuh"
#include "braid/harness/timing.cuh"
#include "braid/harness/protocol.cuh"
#include "braid/harness/json.cuh"
#include "braid/harness/results.cuh"
#include "braid/harness/main.cuh"
