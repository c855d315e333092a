#!/usr/bin/env bash
# Candidates per hour of `braid evolve` with proposals asked one at a time (max_parallel_proposals
# 1) and concurrently (max_parallel_proposals P), against a loopback model that answers each
# mutation after LAT +- SPREAD seconds, on the CPU example slowed by EVAL_S seconds per
# evaluation. Each is compared with the bound min(evaluation capacity, P / LAT), where
# evaluation capacity = max_parallel_jobs / (mean measured evaluation time). CPU only.
#
#   bench/proposal_throughput.sh [build_dir]      (env: LAT SPREAD EVAL_S GENS JOBS PROPS OUT MODES LAG SAMPLING
#                                                        FOCUS_FOLLOW FEEDBACK)
# LAG: proposal_lag (0: braid's default). SAMPLING=1: the peer's edits vary like a model's at a
# temperature above 0 (default 0: the prompt alone picks the edit, so a prompt asked again gets
# the same edit, and a small knob space fills with rejected duplicates).
# FOCUS_FOLLOW: the share of the peer's answers (0..1, default 1) that keep to a prompt's list of
# one-knob changes to choose from (its focus among concurrent sibling proposals); the others
# choose as a model that ignored the line.
# FEEDBACK=0: use_text_feedback false (no diagnosis asked; the ceiling without its waits).
# MODES: the max_parallel_proposals values to run (default "1 $PROPS"). The bound counts one
# model answer per candidate; a patch that fails and is asked again costs more (see the column).
# "model slots busy": the mean share of the P slots asking, from the first ask to the last answer;
# "close s": from the last answer to the run's end (a fixed cost, so longer runs amortise it).
# Quick: LAT=2 SPREAD=1 EVAL_S=1 GENS=24 JOBS=2 PROPS=4; the issue's: LAT=20 SPREAD=10 EVAL_S=5.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
LAT=${LAT:-2} SPREAD=${SPREAD:-1} EVAL_S=${EVAL_S:-1} GENS=${GENS:-24} JOBS=${JOBS:-2} PROPS=${PROPS:-4}
OUT=${OUT:-$(mktemp -d /tmp/braid_proposal_bench.XXXXXX)}
for f in "$BUILD/braid" "$BUILD/bench/bench_llm_peer"; do
  [[ -x $f ]] || { echo "proposal_throughput.sh: $f: not built (cmake --build $BUILD --target braid bench_llm_peer)" >&2; exit 2; }
done
mkdir -p "$OUT"

# The CPU example, each evaluation slowed by EVAL_S seconds (a sleep before its bench stage).
WL=$OUT/workload
rm -rf "$WL" && cp -r "$ROOT/examples/matmul_cpu" "$WL"
printf '#!/bin/sh\nsleep %s\nexec "$@"\n' "$EVAL_S" > "$WL/slow.sh"
sed -i 's|^  bench: "{driver}|  bench: "sh {workload_dir}/slow.sh {driver}|' "$WL/workload.yaml"
# Evaluations overlap (max_parallel_jobs of them), so the capacity is JOBS / evaluation time.
sed -i 's|^  bench_timeout_s: 60|  bench_timeout_s: 600\n  bench_exclusive: false|' "$WL/workload.yaml"
grep -q 'slow.sh' "$WL/workload.yaml" && grep -q 'bench_exclusive: false' "$WL/workload.yaml" ||
  { echo "proposal_throughput.sh: could not slow $WL/workload.yaml" >&2; exit 2; }

# The model: a loopback peer that lives as long as fd 9 stays open.
rm -f "$OUT/peer.in" && mkfifo "$OUT/peer.in"
"$BUILD/bench/bench_llm_peer" "$LAT" "$SPREAD" 1 "${SAMPLING:-0}" "${FOCUS_FOLLOW:-1}" < "$OUT/peer.in" > "$OUT/peer.url" 2> "$OUT/peer.log" &
PEER=$!
exec 9> "$OUT/peer.in"
trap 'exec 9>&-; wait $PEER 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -s $OUT/peer.url ]] && break; sleep 0.1; done
URL=$(head -1 "$OUT/peer.url")
export OPENAI_API_KEY=sk-loopback-bench

run_mode() {  # $1 = max_parallel_proposals
  local p=$1 dir=$OUT/run_p$1
  rm -rf "$dir"
  cat > "$OUT/config_p$p.yaml" <<YAML
num_generations: $GENS
num_islands: 2
max_parallel_jobs: $JOBS
max_parallel_proposals: $p
proposal_lag: ${LAG:-0}
meta_rec_interval: 0
migration_interval: 0
confirm_runs: 0
noise_runs: 0
request_timeout_s: $(( ${LAT%.*} * 3 + 30 ))
api_type: host
code_embed_sim_threshold: 0.9999
use_text_feedback: $([[ ${FEEDBACK:-1} == 0 ]] && echo false || echo true)
YAML
  local t0 t1
  t0=$(date +%s.%N)
  "$BUILD/braid" evolve "$WL" --config "$OUT/config_p$p.yaml" --results "$dir" --seed 1 \
    --llm "openai:gpt-4.1-mini@$URL" > "$dir.log" 2>&1 || { echo "braid evolve failed: $dir.log" >&2; tail -5 "$dir.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 - "$dir/evolution.db" "$t0" "$t1" "$p" "$JOBS" "$LAT" <<'PY'
import json, sqlite3, sys
db, t0, t1, p, jobs, lat = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
c = sqlite3.connect(db)
children = c.execute("SELECT COUNT(*) FROM programs WHERE patch_type NOT IN ('seed','migrant')").fetchone()[0]
evals = [sum(v for v in json.loads(t or '{}').values() if isinstance(v, (int, float)))
         for (t,) in c.execute("SELECT timings FROM programs WHERE patch_type NOT IN ('seed','migrant') AND failure_kind != 'rejected'")]
# The search starts with the first model request (the seed's evaluation before it is set-up).
start = c.execute("SELECT MIN(created_at - latency_s) FROM llm_calls WHERE purpose = 'mutate'").fetchone()[0]
lats = [r[0] for r in c.execute("SELECT latency_s FROM llm_calls WHERE purpose = 'mutate' AND error_kind = ''")]
calls = c.execute("SELECT COUNT(*) FROM llm_calls WHERE purpose = 'mutate'").fetchone()[0]
search_s = t1 - start
# How full the model's slots were between the first ask and the last answer, and the run's close
# after the last answer (the last candidates' evaluations and feedback answers).
asks = c.execute("SELECT created_at - latency_s, created_at FROM llm_calls WHERE purpose = 'mutate'").fetchall()
last_answer = max(e for _, e in asks)
busy = sum(e - s for s, e in asks) / (p * (last_answer - start))
close_s = t1 - last_answer
rate = children * 3600.0 / search_s
mean_eval = sum(evals) / len(evals) if evals else float('nan')
mean_lat = sum(lats) / len(lats) if lats else lat
cap_eval = jobs * 3600.0 / mean_eval
cap_llm = p * 3600.0 / mean_lat
bound = min(cap_eval, cap_llm)
print(f"| {p} | {children} | {calls / children:.2f} | {search_s:.0f} | {mean_eval:.2f} | {mean_lat:.2f} | {cap_eval:.0f} | {cap_llm:.0f} | {busy:.2f} | {close_s:.0f} | {rate:.0f} | {rate / bound:.2f} |")
PY
}

echo "LAT=$LAT SPREAD=$SPREAD EVAL_S=$EVAL_S GENS=$GENS JOBS=$JOBS PROPS=$PROPS  (results in $OUT)"
echo "| max_parallel_proposals | candidates | model answers per candidate | search s | eval s (mean) | LLM s (mean) | eval capacity /h | LLM bound /h | model slots busy | close s | candidates /h | of bound |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for p in ${MODES:-1 $PROPS}; do run_mode "$p"; done
