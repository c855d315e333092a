#!/usr/bin/env bash
# The ring attention block kernel on one GPU (workloads/ring_attention/bench/block_bench.cu verify):
# against the fp32 reference at small shapes, causal and not, Hkv 8 and 32, the whole sequence in
# one call and split the ring's way (P = 2 and 4, contiguous and zig-zag, state carried between
# calls, finalize inline and as its own kernel). Skips (77) where there is no GPU.
# Usage: ring_attention_gpu_test.sh [build dir]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU (nvidia-smi -L lists none)"; exit 77; fi
source "$root/scripts/gpu-env.sh"
[ -z "$braid_gpu_env_missing" ] || { echo "FAIL: not found: $braid_gpu_env_missing"; exit 1; }
work=${1:-$root/build}/ring-attention-gpu-test
mkdir -p "$work/nccl-link"
ln -sf "$BRAID_NCCL_LIB/libnccl.so.2" "$work/nccl-link/libnccl.so"
wl=$root/workloads/ring_attention
"$BRAID_NVCC" -O3 -std=c++20 --expt-relaxed-constexpr -arch=sm_90 -I"$root/device/include" -I"$wl" -I"$BRAID_NCCL_INCLUDE" \
  "$wl/bench/block_bench.cu" -o "$work/block_bench" -L"$work/nccl-link" -lnccl -Xlinker -rpath,"$BRAID_NCCL_LIB" || { echo "FAIL: build"; exit 1; }
"$work/block_bench" verify
