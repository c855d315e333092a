#!/usr/bin/env bash
# How many evaluations the knob mutator needs to reach 95% of the best score it ever finds, on
# the CPU example, over 3 RNG seeds. Usage: scripts/knob-search-efficiency.sh [generations]
set -euo pipefail
cd "$(dirname "$0")/.."
gens=${1:-40}
out=results/knob-efficiency
rm -rf "$out"
mkdir -p "$out"
for seed in 1 2 3; do
  build/braid evolve examples/matmul_cpu --results "$out/seed$seed" --generations "$gens" --seed "$seed" --llm none \
    >"$out/seed$seed.log" 2>&1
done
python3 - "$out" <<'PY'
import sqlite3, sys, statistics
out = sys.argv[1]
rows = []
for seed in (1, 2, 3):
    db = sqlite3.connect(f"{out}/seed{seed}/evolution.db")
    # Evaluations in the order they were stored (migrants are copies, not evaluations).
    scores = [s if c else 0.0 for s, c in db.execute(
        "SELECT combined_score, correct FROM programs WHERE patch_type != 'migrant' ORDER BY rowid")]
    best = max(scores)
    to95 = next(i + 1 for i, s in enumerate(scores) if s >= 0.95 * best)
    seed_score = scores[0]
    rows.append((seed, len(scores), seed_score, best, to95))
print(f"{'seed':>4} {'evaluations':>11} {'seed score':>10} {'best':>8} {'evals to 95% of best':>21}")
for seed, n, s0, best, to95 in rows:
    print(f"{seed:>4} {n:>11} {s0:>10.3f} {best:>8.3f} {to95:>21}")
print(f"median evaluations to 95%: {statistics.median(r[4] for r in rows)}")
PY
