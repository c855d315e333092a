// Benchmarks that do not disturb each other. The GPU cascade holds the whole node for its bench
// level itself (bench_exclusive, eval/gpu_pool.hpp). The cascade and external evaluators run
// their steps inside one opaque evaluate() call, so the runner cannot tell the bench from the
// build: with `bench_exclusive: true` (their default) it runs their evaluations one at a time,
// re-measurements included. Proposals still run ahead, up to max_parallel_jobs.
#pragma once
#include <memory>

#include "braid/eval/evaluator.hpp"
#include "braid/util/json.hpp"

namespace braid {

// True when evaluations of this validated evaluator section must not overlap.
bool evaluations_exclusive(const json& evaluator_section);

// `inner` unchanged when its evaluations may overlap, else wrapped so that they never do.
std::unique_ptr<Evaluator> with_exclusive_bench(std::unique_ptr<Evaluator> inner, const json& evaluator_section);

}  // namespace braid
