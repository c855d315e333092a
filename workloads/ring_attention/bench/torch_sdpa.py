#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention (flash backend only) at the block kernel's shapes.

Same shapes and timing as `block_bench bench`: batch 1, 32 query heads, Hkv key/value heads, head
dim 128, bf16, the whole sequence in one call, CUDA events around each call, median. Prints
"torch S Hkv causal median_ms TFLOP/s how" per shape, where `how` says how GQA was given to it
(enable_gqa, or K/V expanded to 32 heads when this PyTorch's flash backend does not take GQA; the
FLOPs are the same either way).
"""
import argparse
import sys

HQ, D = 32, 128


def int_list(s):
    return [int(x) for x in s.split(",") if x]


def flops(seq, causal):
    return 4.0 * seq * seq * HQ * D * (0.5 if causal else 1.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seqs", type=int_list, default=[8192, 16384, 32768, 65536])
    ap.add_argument("--hkv", type=int_list, default=[8, 32])
    ap.add_argument("--causal", type=int_list, default=[0, 1])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"torch_sdpa.py: PyTorch with torch.nn.attention is needed: {e}", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch_sdpa.py: no CUDA device", file=sys.stderr)
        return 3
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    # Flash backend only (an error rather than a silent fallback), entered once: its context
    # manager stays out of the timed calls.
    backend = sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    backend.__enter__()
    for seq in args.seqs:
        for hkv in args.hkv:
            # [S][H][128] like the workload, seen as (1, H, S, 128).
            q = (torch.rand(1, seq, HQ, D, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16).transpose(1, 2)
            k = (torch.rand(1, seq, hkv, D, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16).transpose(1, 2)
            v = (torch.rand(1, seq, hkv, D, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16).transpose(1, 2)
            for causal in args.causal:
                how = "enable_gqa" if hkv != HQ else "mha"
                kk, vv = k, v

                def call():
                    if how == "enable_gqa":
                        return F.scaled_dot_product_attention(q, kk, vv, is_causal=bool(causal), enable_gqa=True)
                    return F.scaled_dot_product_attention(q, kk, vv, is_causal=bool(causal))

                try:
                    call()
                except (RuntimeError, TypeError):
                    if how != "enable_gqa":
                        raise
                    how = "expanded"
                    kk = k.repeat_interleave(HQ // hkv, dim=1)
                    vv = v.repeat_interleave(HQ // hkv, dim=1)
                    call()
                times = []
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                for it in range(args.warmup + args.iters):
                    start.record()
                    call()
                    end.record()
                    end.synchronize()
                    if it >= args.warmup:
                        times.append(start.elapsed_time(end))
                times.sort()
                med = times[len(times) // 2]
                print(f"torch {seq} {hkv} {causal} {med:.4f} {flops(seq, causal) / (med * 1e-3) / 1e12:.1f} {how}", flush=True)
                del kk, vv
            del q, k, v
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
