#!/usr/bin/env python3
"""The serving-kernel comparison table: table.py RESULTS_DIR [--torch torch.json]

RESULTS_DIR/<op>/<program>/metrics.json are braid harness results (program: gen0 = the defaults,
best = the given or evolved program); each run times the seed (baseline) and the copy bound
(compute alone) in the same process. Per op and shape it prints the copy time, the seed, gen0 and
best times, PyTorch eager and torch.compile (from torch_ops.py, a separate process), and:
  best/copy   fraction of the copy rate the best program reaches (copy_ms / best_ms; goal >= 0.95
              at large shapes)
  vs compile  torch.compile time / best time (goal >= 1; softmax >= 1.5)
  vs seed     seed time / best time"""
import argparse
import json
import os


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def shape(size):
    return f"{size // 1000000} x {size % 1000000}"


def fmt(x, digits=4):
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b <= 0 else a / b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--torch", default="")
    a = ap.parse_args()
    torch = load(a.torch) if a.torch else None
    print("| op | rows x width | copy ms | seed ms | gen0 ms | best ms | best GB/s | torch eager ms | torch.compile ms | "
          "best/copy | vs compile | vs seed | compile/its copy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for op in sorted(os.listdir(a.results)):
        runs = {}
        for program in ("gen0", "best"):
            # Timings of a program that did not verify are not shown (its metrics.json exists).
            c = load(os.path.join(a.results, op, program, "correct.json"))
            m = load(os.path.join(a.results, op, program, "metrics.json"))
            if c is not None and not c.get("correct", False):
                print(f"| {op} | {program} failed: {c.get('error', '')[:200]} |")
            elif m is not None:
                runs[program] = {s["size"]: s for s in m["public"]["sizes"]}
        if not runs:
            continue
        sizes = sorted({s for r in runs.values() for s in r})
        for size in sizes:
            g, b = runs.get("gen0", {}).get(size), runs.get("best", {}).get(size)
            ref = b or g
            best = b if b is not None else g
            t = (torch or {}).get(op, {}).get(str(size), {})
            copy_ms = ref.get("compute_ms")
            seed_ms = ref.get("baseline_ms")
            best_ms = best.get("candidate_ms") if best else None
            compile_ms = t.get("compile_ms")
            print(f"| {op} | {shape(size)} | {fmt(copy_ms)} | {fmt(seed_ms)} | {fmt(g.get('candidate_ms') if g else None)} | "
                  f"{fmt(b.get('candidate_ms') if b else None)} | {fmt(best.get('candidate_GBps') if best else None, 0)} | "
                  f"{fmt(t.get('eager_ms'))} | {fmt(compile_ms)} | {fmt(ratio(copy_ms, best_ms), 3)} | "
                  f"{fmt(ratio(compile_ms, best_ms), 2)} | {fmt(ratio(seed_ms, best_ms), 2)} | {fmt(ratio(t.get('copy_ms'), compile_ms), 3)} |")
    print()
    print("best = the given/evolved program where there is one, else gen0's defaults. Times are medians; "
          "copy, seed, gen0 and best from the braid harness (one process per program, interleaved), torch "
          "from its own process with the same reload-then-time protocol.")


if __name__ == "__main__":
    main()
