"""PyTorch's symmetric-memory fused all-gather matmul on the same problem, one JSON line per size.

python3 -m torch.distributed.run --nproc_per_node=2 torch_fused.py --sizes 4096,8192 --out torch.json
Same layout as the workload: A (M x K, bf16) sharded by rows, each rank multiplies A_full by its
own B (K x N). Times are medians of CUDA-event timings after a barrier, slowest rank (all-reduce
max). The fused output is checked against all_gather_into_tensor + mm."""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem


def bench(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        dist.barrier()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    t = torch.tensor(times, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # makespan per iteration
    return float(t.median())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2048,4096,8192,16384")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default="torch.json")
    args = ap.parse_args()
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    group = dist.group.WORLD
    lines = []
    for size in [int(s) for s in args.sizes.split(",")]:
        rec = {"size": size, "world": world}
        # The harness's size encoding (gemm_shape.hpp): square below 10^5, else M * 10^10 + N * 10^5 + K.
        m, n, k = (size, size, size) if size < 10**5 else (size // 10**10, size // 10**5 % 10**5, size % 10**5)
        try:
            a = torch.randn(m // world, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            full = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
            rec["ag_ms"] = bench(lambda: dist.all_gather_into_tensor(full, a), args.iters, args.warmup)
            rec["mm_ms"] = bench(lambda: torch.mm(full, b), args.iters, args.warmup)
            rec["seq_ms"] = bench(lambda: (dist.all_gather_into_tensor(full, a), torch.mm(full, b)), args.iters, args.warmup)
            try:
                symm_mem.enable_symm_mem_for_group(group.group_name)
            except Exception:
                pass  # newer PyTorch enables it on demand
            fused = lambda: torch.ops.symm_mem.fused_all_gather_matmul(a, [b], gather_dim=0, group_name=group.group_name)
            _, outs = fused()
            dist.all_gather_into_tensor(full, a)
            ref = torch.mm(full, b).float()
            rec["fused_rel_err"] = float((outs[0].float() - ref).norm() / ref.norm())
            rec["fused_ms"] = bench(fused, args.iters, args.warmup)
        except Exception as e:  # report, go on with the next size
            rec["error"] = repr(e)[:300]
        lines.append(json.dumps(rec))
        torch.cuda.empty_cache()
    if rank == 0:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
