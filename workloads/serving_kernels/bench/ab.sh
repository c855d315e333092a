#!/usr/bin/env bash
# Interleaved A/B of knob vectors of one serving op's gen0.cu on one GPU: differences of a few
# percent are smaller than the spread between processes, so every variant runs once per round, in
# rotating order, and the table gives medians over rounds of copy ms / candidate ms (the fraction of
# the copy rate) at each of the op's sizes. Every variant is verified first (a failing one is left
# out and said so).
#
#   workloads/serving_kernels/bench/ab.sh OP ROUNDS LABEL="kName=value ..." [LABEL="..." ...]
#   (LABEL= with nothing after it: gen0's defaults). Env: AB_ITERS (60), AB_OUT (ab-out).
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=/dev/null
source "$root/scripts/gpu-env.sh"
[ $# -ge 3 ] || { sed -n 2,9p "$0"; exit 2; }
op=$1 rounds=$2
shift 2
family=$root/workloads/serving_kernels
[ -f "$family/$op/gen0.cu" ] || { echo "ab.sh: no op $op under $family" >&2; exit 2; }
out=${AB_OUT:-ab-out}
iters=${AB_ITERS:-60}
mkdir -p "$out/nccl-link"
ln -sf "$BRAID_NCCL_LIB/libnccl.so.2" "$out/nccl-link/libnccl.so"
sizes=()
for s in $(grep -E '^\s*args:' "$family/$op/workload.yaml" | grep -oE -- '--size [0-9]+' | awk '{print $2}'); do sizes+=(--size "$s"); done
read -ra tol <<<"$(grep -E '^\s*args:' "$family/$op/workload.yaml" | grep -oE -- '--(rtol|atol) [^ "]+' | tr '\n' ' ')"

labels=()
for spec in "$@"; do
  label=${spec%%=*} knobs=${spec#*=}
  # shellcheck disable=SC2086
  python3 "$root/workloads/gemm_allgather/bench/make_variant.py" "$family/$op/gen0.cu" "$out/$label.cu" $knobs || exit 2
  "${BRAID_NVCC:-nvcc}" -O3 -std=c++20 --expt-relaxed-constexpr -lineinfo -arch=sm_90 -I"$root/device/include" -I"$family/$op" \
    -I"$family/common" -I"$BRAID_NCCL_INCLUDE" "$out/$label.cu" -o "$out/$label" -L"$out/nccl-link" -lnccl \
    -Xlinker -rpath -Xlinker "$BRAID_NCCL_LIB" >"$out/$label.build.log" 2>&1 &
  labels+=("$label")
done
wait
ok=()
for label in "${labels[@]}"; do
  if [ ! -x "$out/$label" ]; then echo "$label: build failed ($out/$label.build.log)"; continue; fi
  mkdir -p "$out/verify-$label"
  if timeout 120 "$out/$label" --mode verify --seed 7 "${tol[@]}" "${sizes[@]}" --results_dir "$out/verify-$label" >"$out/verify-$label.log" 2>&1; then
    ok+=("$label")
  else
    echo "$label: verify failed ($out/verify-$label.log)"
  fi
done
[ ${#ok[@]} -gt 0 ] || exit 1
for ((r = 0; r < rounds; r++)); do
  n=${#ok[@]}
  for ((k = 0; k < n; k++)); do
    label=${ok[$(((k + r) % n))]}
    mkdir -p "$out/r$r-$label"
    timeout 120 "$out/$label" --mode bench --seed $((r + 1)) "${tol[@]}" --warmup 5 --iters "$iters" --input_sets 2 "${sizes[@]}" \
      --results_dir "$out/r$r-$label" >"$out/r$r-$label.log" 2>&1 || echo "$label round $r: exit $?"
  done
done
python3 - "$out" "$rounds" "${ok[@]}" <<'EOF'
import json, statistics, sys
out, rounds, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
table = {}
for label in labels:
    for r in range(rounds):
        try:
            sizes = json.load(open(f"{out}/r{r}-{label}/metrics.json"))["public"]["sizes"]
        except (OSError, ValueError, KeyError):
            continue
        for s in sizes:
            if s.get("candidate_ms") and s.get("compute_ms"):
                table.setdefault(s["size"], {}).setdefault(label, []).append(s["compute_ms"] / s["candidate_ms"])
print("| variant | " + " | ".join(f"{size // 1000000} x {size % 1000000}" for size in sorted(table)) + " |")
print("|---|" + "---|" * len(table))
for label in labels:
    cells = []
    for size in sorted(table):
        v = table[size].get(label, [])
        cells.append(f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}, n={len(v)})" if v else "-")
    print(f"| {label} | " + " | ".join(cells) + " |")
print(f"\nfraction of the copy rate (copy ms / candidate ms, the copy timed in the same process): median (range) over {rounds} rounds")
EOF
