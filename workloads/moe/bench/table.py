#!/usr/bin/env python3
"""Per-size table of scripts/gpu.sh bench moe: table.py RESULTS_DIR

RESULTS_DIR/<program>/metrics.json are harness results. Per size (T, E, skew): the seed's time,
the best verified program and its time, the bound (max of expert compute alone and exchange alone,
measured in the same runs), best / bound and seed / best; then every program's time per size."""
import json
import os
import sys


def decode(size):
    return size // 10000, (size // 10) % 1000, size % 10


def flagged(size_metrics):
    return size_metrics.get("plausibility") == "flagged"


def main():
    root = sys.argv[1]
    runs = {}
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "metrics.json")
        correct = os.path.join(root, name, "correct.json")
        if not os.path.exists(path):
            print(f"{name}: no metrics ({open(correct).read().strip() if os.path.exists(correct) else 'did not run'})")
            continue
        m = json.load(open(path))
        if m.get("combined_score", 0) <= 0:
            print(f"{name}: not scored: {m.get('text_feedback', '')[:200]}")
            continue
        runs[name] = {s["size"]: s for s in m["public"]["sizes"]}
        world = m["private"].get("world", "?")
    if "seed" not in runs:
        print("no verified seed run: no table")
        return 1
    print(f"ranks: {world}" + (" (1 rank: dispatch and combine are local copies; the skew has no rank to favour)" if world == 1 else ""))
    print("| T | E | skew | seed ms | best | best ms | bound ms (compute, exchange) | best / bound | speedup |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in sorted(runs["seed"], key=lambda s: (decode(s)[0], decode(s)[2])):
        t, e, skew = decode(size)
        seed = runs["seed"][size]
        # A timing the harness flagged (faster than its bound allows, even re-run alone) is no best.
        best_name, best = min(((n, r[size]) for n, r in runs.items() if size in r and not flagged(r[size])),
                              key=lambda x: x[1]["candidate_ms"], default=("seed", seed))
        bound = max(seed["compute_ms"], seed["comm_ms"])
        print(f"| {t} | {e} | {skew}:1 | {seed['candidate_ms']:.3f} | {best_name} | {best['candidate_ms']:.3f} | "
              f"{bound:.3f} ({seed['compute_ms']:.3f}, {seed['comm_ms']:.3f}) | {best['candidate_ms'] / bound:.2f} | "
              f"{seed['candidate_ms'] / best['candidate_ms']:.2f} |")
    # Every program side by side: its time per size, and its speedup over the seed there.
    sizes = sorted(runs["seed"], key=lambda s: (decode(s)[0], decode(s)[2]))
    print("\n## Every program: ms per size (speedup over the seed)\n")
    print("| program | " + " | ".join(f"T {decode(s)[0]} skew {decode(s)[2]}:1" for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name, r in runs.items():
        cells = []
        for size in sizes:
            ms = r[size]["candidate_ms"] if size in r else None
            mark = " !" if ms and flagged(r[size]) else ""
            cells.append(f"{ms:.3f} ({runs['seed'][size]['candidate_ms'] / ms:.2f}){mark}" if ms else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")
    if any(flagged(s) for r in runs.values() for s in r.values()):
        print("\n! the harness flagged this timing: faster than its bound allows, also re-run alone (host clock); "
              "not eligible as the best")
    return 0


if __name__ == "__main__":
    sys.exit(main())
