#!/usr/bin/env python3
"""PyTorch eager and torch.compile timings of the serving-kernel ops, on one GPU, for
scripts/gpu.sh bench serving-kernels.

  torch_ops.py --ops add_rmsnorm,softmax --sizes add_rmsnorm=32008192,16384008192 ... --out torch.json

Sizes are rows * 1000000 + width, as the workloads name them. Each op is what the workload
computes (see workloads/serving_kernels/<op>/<op>.cuh), written as a PyTorch user would:
  add_rmsnorm  s = x + residual; out = (s.float() * rsqrt(mean(s.float()^2) + 1e-5) * w.float()).bf16()
  silu_mul     F.silu(x[:, :I]) * x[:, I:]
  rope         NeoX rotation of q (T, Hq, 128) and k (T, 8, 128) by cos_sin[positions], fp32 math
  softmax      torch.softmax(logits, -1) on logits already scaled to [-100, 100)
Timing mirrors the braid harness: two input sets alternate, before every timed iteration (untimed)
the inputs are reloaded from a stash, then CUDA events around one call; the median over iterations.
A device-to-device copy of (read + write) / 2 bytes is timed the same way (torch's copy rate).
Writes {op: {size: {"eager_ms", "compile_ms", "copy_ms", "bytes"}}}; a failure of one variant is
recorded as {"error": "..."} for it and the rest go on."""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F

EPS = 1e-5
HEAD = 128
KV_HEADS = 8
MAX_POS = 131072
THETA = 500000.0


def add_rmsnorm(x, r, w):
    s = x + r
    f = s.float()
    out = (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(torch.bfloat16)
    return out, s


def silu_mul(x):
    d = x.shape[-1] // 2
    return F.silu(x[:, :d]) * x[:, d:]


def rope(positions, q, k, cos_sin):
    cs = cos_sin.index_select(0, positions)
    cos, sin = cs[:, None, : HEAD // 2], cs[:, None, HEAD // 2:]

    def rotate(x, heads):
        x = x.view(x.shape[0], heads, HEAD).float()
        x1, x2 = x[..., : HEAD // 2], x[..., HEAD // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(torch.bfloat16).flatten(1)

    return rotate(q, q.shape[1] // HEAD), rotate(k, KV_HEADS)


def softmax(logits):
    return torch.softmax(logits, dim=-1)


def rand_bf16(*shape, scale=1.0):
    return ((torch.rand(*shape, device="cuda") * 2 - 1) * scale).to(torch.bfloat16)


def make_inputs(op, rows, width, g):
    """One input set (a tuple of arguments) and the op's (read, write) bytes."""
    torch.manual_seed(g)
    if op == "add_rmsnorm":
        args = (rand_bf16(rows, width), rand_bf16(rows, width), rand_bf16(width))
        return args, (2 * rows * width + width) * 2, 2 * rows * width * 2
    if op == "silu_mul":
        return (rand_bf16(rows, 2 * width),), 2 * rows * width * 2, rows * width * 2
    if op == "rope":
        positions = torch.randint(0, MAX_POS, (rows,), device="cuda")
        inv = THETA ** (-torch.arange(0, HEAD // 2, dtype=torch.float64, device="cuda") * 2 / HEAD)
        angle = torch.arange(MAX_POS, dtype=torch.float64, device="cuda")[:, None] * inv[None, :]
        cos_sin = torch.cat((angle.cos(), angle.sin()), dim=-1).float()
        heads = width // HEAD + KV_HEADS
        args = (positions, rand_bf16(rows, width), rand_bf16(rows, KV_HEADS * HEAD), cos_sin)
        return args, rows * heads * HEAD * 2 + rows * 4 + rows * HEAD * 4, rows * heads * HEAD * 2
    if op == "softmax":
        return (rand_bf16(rows, width, scale=100.0),), rows * width * 2, rows * width * 2
    raise ValueError(op)


def time_fn(fn, sets, warmup, iters):
    """Median ms of fn(*args) with the harness's protocol: reload (untimed), events around the call."""
    live = tuple(a.clone() for a in sets[0])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for it in range(warmup + iters):
        for dst, src in zip(live, sets[it % len(sets)]):
            dst.copy_(src)
        torch.cuda.synchronize()
        start.record()
        fn(*live)
        end.record()
        torch.cuda.synchronize()
        if it >= warmup:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", required=True)
    ap.add_argument("--sizes", action="append", default=[], help="op=size,size (rows * 1000000 + width)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    sizes = {}
    for item in a.sizes:
        op, _, values = item.partition("=")
        sizes[op] = [int(v) for v in values.split(",") if v]
    fns = {"add_rmsnorm": add_rmsnorm, "silu_mul": silu_mul, "rope": rope, "softmax": softmax}
    result = {}
    for op in a.ops.split(","):
        result[op] = {}
        compiled = None if a.no_compile else torch.compile(fns[op], dynamic=False)
        for size in sizes.get(op, []):
            rows, width = size // 1000000, size % 1000000
            entry = {}
            try:
                sets = []
                for g in (1, 2):
                    args, read, write = make_inputs(op, rows, width, g)
                    sets.append(args)
                entry["bytes"] = read + write
                half = (read + write) // 2 // 16 * 16
                src = torch.empty(half, dtype=torch.uint8, device="cuda").random_(0, 255)
                dst = torch.empty_like(src)
                entry["copy_ms"] = time_fn(lambda s, d: d.copy_(s), [(src, dst)], a.warmup, a.iters)
                entry["eager_ms"] = time_fn(fns[op], sets, a.warmup, a.iters)
                if compiled is not None:
                    try:
                        entry["compile_ms"] = time_fn(compiled, sets, a.warmup, a.iters)
                    except Exception as e:  # noqa: BLE001 -- recorded, the other variants go on
                        entry["compile_error"] = f"{type(e).__name__}: {e}"[:300]
                del sets, src, dst
            except Exception as e:  # noqa: BLE001
                entry["error"] = f"{type(e).__name__}: {e}"[:300]
            torch.cuda.empty_cache()
            result[op][str(size)] = entry
            print(op, size, json.dumps(entry), file=sys.stderr, flush=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
