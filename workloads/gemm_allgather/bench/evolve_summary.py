#!/usr/bin/env python3
"""Evaluations-to-target of a `braid evolve` run of gemm_allgather.

evolve_summary.py RESULTS_DIR [--target 1.05] [--sizes 4096,8192,16384]
Reads RESULTS_DIR/evolution.db in evaluation order (generation, then creation time) and prints,
per evaluation, the knob vector, the verdict, the ratio to the bound at each target size and the
best-so-far worst ratio; then the first evaluation at which one verified program is at or under
the target at every target size (the initial program counts as evaluation 0). Copies are not
evaluations and are left out: migrants (a program copied to another island) and the initial
program's copies on the other islands."""
import json
import os
import sqlite3
import sys


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    results = args[0]
    target = float(args[args.index("--target") + 1]) if "--target" in args else 1.05
    sizes = [int(s) for s in (args[args.index("--sizes") + 1] if "--sizes" in args else "4096,8192,16384").split(",")]
    db = sqlite3.connect(os.path.join(results, "evolution.db"))
    rows = db.execute("SELECT id, generation, correct, failure_kind, knob_key, public_metrics, combined_score "
                      "FROM programs WHERE migrated_from = '' AND (patch_type != 'seed' OR island_idx = "
                      "(SELECT MIN(island_idx) FROM programs WHERE patch_type = 'seed')) "
                      "ORDER BY generation, created_at").fetchall()
    best_worst, reached = None, {}
    print(f"| eval | verdict | score | " + " | ".join(f"ratio {s}" for s in sizes) + " | worst | best worst so far | knobs |")
    print("|" + "---|" * (len(sizes) + 6))
    for n, (pid, gen, correct, failure, knobs, public, score) in enumerate(rows):
        ratios = {}
        try:
            for s in json.loads(public or "{}").get("sizes", []):
                ratios[int(s["size"])] = s.get("ratio_to_bound")
        except (ValueError, TypeError):
            pass
        worst = None
        if correct and all(ratios.get(s) for s in sizes):
            worst = max(ratios[s] for s in sizes)
            best_worst = worst if best_worst is None else min(best_worst, worst)
            for t in (target, 1.02):
                if worst <= t and t not in reached:
                    reached[t] = n
        cells = [f"{ratios[s]:.3f}" if ratios.get(s) else "-" for s in sizes]
        print(f"| {n} | {'ok' if correct else failure} | {score if score is None else round(score, 4)} | " + " | ".join(cells) +
              f" | {worst if worst is None else round(worst, 3)} | {best_worst if best_worst is None else round(best_worst, 3)} | {knobs} |")
    for t in (target, 1.02):
        print(f"target {t}: " + (f"reached at evaluation {reached[t]} of {len(rows) - 1}" if t in reached else f"not reached in {len(rows) - 1} evaluations"))
    # The run's own verdict (stop_when), with its re-runs when the goal asks for confirmation.
    meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('target_reached', 'target_refuted')").fetchall())
    order = {row[0]: n for n, row in enumerate(rows)}
    if "target_refuted" in meta:
        for item in json.loads(meta["target_refuted"]).values():
            print(f"not confirmed: evaluation {order.get(item.get('id'), '?')} ({item.get('id')}): runs {item.get('runs')}, {item.get('why')}")
    if "target_reached" in meta:
        t = json.loads(meta["target_reached"])
        runs = f", runs {t['runs']}" if "runs" in t else ""
        print(f"stop_when: {t.get('goal')} met at evaluation {order.get(t.get('id'), '?')} ({t.get('id')}), value {t.get('value'):.4g}{runs}")


if __name__ == "__main__":
    main()
