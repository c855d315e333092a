#!/usr/bin/env bash
# CTest `gpu`: the annotator's knobs through the verification gate on 2 GPUs. Every corpus
# program and the gemm_allgather seed, annotated by rules, pass the gate at gen0 and at knob
# settings that take the prelude's other launch paths (thread/warp issuers, 8..132 CTAs, 16 KiB..
# 1 MiB chunks). Usage: annotate_gate_test.sh <braid build dir> (holds tests/annotate_gate_driver).
# Skips (77) where fewer than 2 GPUs exist.
set -uo pipefail
build=${1:?usage: annotate_gate_test.sh <braid build dir>}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# A build made elsewhere (a bundle carried to the GPU machine) finds this checkout's device headers.
export BRAID_DEVICE_INCLUDE=${BRAID_DEVICE_INCLUDE:-$root/device/include}
export NCCL_NVLS_ENABLE=0
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
  echo "SKIPPED: fewer than 2 GPUs"
  exit 77
fi
driver=${BRAID_ANNOTATE_DRIVER:-$build/tests/annotate_gate_driver}  # or a bundled one (scripts/bundle-for-device.sh)
if [ ! -x "$driver" ]; then
  echo "no $driver: build the annotate_gate_driver target"
  exit 1
fi
work=$(mktemp -d)
"$driver" "$work" "$here"/corpus/*.cu "$root/workloads/gemm_allgather/seed.cu"
rc=$?
if [ "$rc" -ne 0 ]; then
  echo "--- gate work folders in $work (kept)"
  for f in "$work"/*/*/rank*.stderr; do [ -s "$f" ] && { echo "== $f"; tail -20 "$f"; }; done
  exit "$rc"
fi
rm -rf "$work"
exit 0
