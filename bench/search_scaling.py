#!/usr/bin/env python3
"""Evaluations per hour of time-boxed `braid evolve` runs with 1, 2, 4, 8 GPUs (scripts/gpu.sh scale).

Each argument is G=START=RESULTS: the GPU count, the run's start (epoch seconds) and its results
folder. Counted: the run's own evaluations (programs that are not migrant copies), stored within
--seconds of the start. Two rates, both honest, named apart:
  - whole run: evaluations / --seconds (start-up included: the seed's build and bench come first);
  - steady: (n - 1) / (last - first) over the evaluations after the seed; none (nan) for a burst,
    evaluations after the seed spread over less than a tenth of the run's time after the seed (a
    short run where parallel builds finish together: the rate would be that of the burst).
The ideal line is the one-lease run's steady rate times the leases (G / ranks). Mean build and GPU
seconds per evaluation (the cascade's timings) say which side limits: builds run on the CPU and
hold no GPU.
"""
import argparse
import json
import sqlite3
import statistics
import sys


def load(results, start, seconds):
    db = sqlite3.connect(f"file:{results}/evolution.db?mode=ro", uri=True)
    rows = db.execute(
        "SELECT generation, created_at, correct, timings FROM programs WHERE migrated_from = '' ORDER BY created_at").fetchall()
    rows = [r for r in rows if r[1] is not None and r[1] <= start + seconds]
    timings = [json.loads(r[3] or "{}") for r in rows]
    return rows, timings


def mean_of(timings, *keys):
    vals = [sum(t.get(k, 0.0) for k in keys) for t in timings if any(k in t for k in keys)]
    return statistics.mean(vals) if vals else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="G=START=RESULTS")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--seconds", type=float, required=True)
    args = ap.parse_args()
    table = []
    for item in args.runs:
        g, start, results = item.split("=", 2)
        g, start = int(g), float(start)
        try:
            rows, timings = load(results, start, args.seconds)
        except sqlite3.Error as e:
            print(f"G={g}: {results}: {e}", file=sys.stderr)
            continue
        after_seed = [r for r in rows if r[0] > 0]
        seed_end = max((r[1] for r in rows if r[0] == 0), default=start)
        steady = float("nan")
        if len(after_seed) >= 3:
            span = after_seed[-1][1] - after_seed[0][1]
            if span > 0 and span >= 0.1 * (start + args.seconds - seed_end):
                steady = (len(after_seed) - 1) / span * 3600
        table.append(dict(g=g, leases=g // args.ranks, n=len(rows), correct=sum(1 for r in rows if r[2]),
                          whole=len(rows) / args.seconds * 3600, steady=steady,
                          build=mean_of(timings, "build"), gpu=mean_of(timings, "run", "bench")))
    if not table:
        sys.exit("no run could be read")
    base = next((t for t in table if t["leases"] == 1), table[0])
    per_lease = base["steady"] / base["leases"]
    print(f"| GPUs | leases of {args.ranks} | evaluations in {args.seconds:.0f} s | correct | per hour, whole run "
          "| per hour, steady | ideal (linear) | of ideal | build s (mean) | GPU s (mean) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t in table:
        ideal = per_lease * t["leases"]
        print(f"| {t['g']} | {t['leases']} | {t['n']} | {t['correct']} | {t['whole']:.0f} | {t['steady']:.0f} "
              f"| {ideal:.0f} | {t['steady'] / ideal:.2f} | {t['build']:.1f} | {t['gpu']:.1f} |")


if __name__ == "__main__":
    main()
