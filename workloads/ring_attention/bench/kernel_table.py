#!/usr/bin/env python3
"""Joins `block_bench bench` and `torch_sdpa.py` lines into the kernel-vs-PyTorch table.

kernel_table.py OURS_LOG TORCH_LOG [--need 0.7]
Lines: "kernel|kernel_rt2|torch S Hkv causal median_ms TFLOP/s [how]". Prints a markdown table
(one row per shape: the workload's kernel and PyTorch, medians and TFLOP/s, ratio = our throughput
/ PyTorch's; the two-row-tile build's TFLOP/s and ratio when its lines are there) and a last line
"kernel/pytorch: min R over N shapes (need >= 0.7): PASS|FAIL" for the workload's kernel; exit 1 on
FAIL or a missing side."""
import sys


def read(path, tag):
    rows = {}
    try:
        with open(path) as f:
            for line in f:
                w = line.split()
                if len(w) >= 6 and w[0] == tag:
                    rows[(int(w[1]), int(w[2]), int(w[3]))] = (float(w[4]), float(w[5]), w[6] if len(w) > 6 else "")
    except FileNotFoundError:
        pass
    return rows


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    need = float(argv[argv.index("--need") + 1]) if "--need" in argv else 0.7
    ours, torch, rt2 = read(argv[1], "kernel"), read(argv[2], "torch"), read(argv[1], "kernel_rt2")
    print("| S | Hkv | causal | kernel ms | kernel TFLOP/s | PyTorch ms | PyTorch TFLOP/s | kernel / PyTorch | PyTorch GQA |"
          + (" rt2 TFLOP/s | rt2 / PyTorch |" if rt2 else ""))
    print("|---:|---:|:---:|---:|---:|---:|---:|---:|:---|" + ("---:|---:|" if rt2 else ""))
    ratios = []
    for key in sorted(set(ours) | set(torch)):
        s, hkv, causal = key
        o, t = ours.get(key), torch.get(key)
        ratio = t[0] / o[0] if o and t else None
        if ratio is not None:
            ratios.append(ratio)
        cell = lambda x, i, fmt: fmt.format(x[i]) if x else "-"
        extra = ""
        if rt2:
            r2 = rt2.get(key)
            extra = f" {cell(r2, 1, '{:.0f}')} | {f'{t[0] / r2[0]:.2f}' if r2 and t else '-'} |"
        print(f"| {s} | {hkv} | {'yes' if causal else 'no'} | {cell(o, 0, '{:.3f}')} | {cell(o, 1, '{:.0f}')} | "
              f"{cell(t, 0, '{:.3f}')} | {cell(t, 1, '{:.0f}')} | {f'{ratio:.2f}' if ratio is not None else '-'} | {t[2] if t else '-'} |" + extra)
    if not ratios or len(ratios) != len(set(ours) | set(torch)):
        print(f"kernel/pytorch: {len(ratios)} shapes with both sides of {len(set(ours) | set(torch))}: FAIL (a side is missing)")
        return 1
    faster = sum(1 for k in rt2 if k in ours and rt2[k][0] < ours[k][0])
    if rt2:
        print(f"rt2 (RING_ATTENTION_ROW_TILES=2) faster than the workload's kernel at {faster} of {len(rt2)} shapes")
    worst = min(ratios)
    verdict = "PASS" if worst >= need else "FAIL"
    print(f"kernel/pytorch: min {worst:.2f} over {len(ratios)} shapes (need >= {need}): {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
