#!/usr/bin/env bash
# CTest `gpu`: the LLM rewrite loop through the verification gate on 2 GPUs. A scripted loopback
# model first answers reduce_to_root.cu with a rewrite that compiles but writes loss_total on
# every rank, then the fix once the gate's failure and the judge's diagnosis are in its prompt.
# Usage: rewrite_gate_test.sh <braid build dir> (holds tests/rewrite_gate_driver). Skips (77)
# where fewer than 2 GPUs exist.
set -uo pipefail
build=${1:?usage: rewrite_gate_test.sh <braid build dir>}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# A build made elsewhere (a bundle carried to the GPU machine) finds the shipped prompts and the
# device headers of this checkout.
export BRAID_PROMPTS_DIR=${BRAID_PROMPTS_DIR:-$root/prompts}
export BRAID_DEVICE_INCLUDE=${BRAID_DEVICE_INCLUDE:-$root/device/include}
export NCCL_NVLS_ENABLE=0
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
  echo "SKIPPED: fewer than 2 GPUs"
  exit 77
fi
driver=${BRAID_REWRITE_GATE_DRIVER:-$build/tests/rewrite_gate_driver}  # or a bundled one (scripts/bundle-for-device.sh)
if [ ! -x "$driver" ]; then
  echo "no $driver: build the rewrite_gate_driver target"
  exit 1
fi
work=$(mktemp -d)
"$driver" "$here/corpus_llm/reduce_to_root.cu" "$work"
rc=$?
if [ "$rc" -ne 0 ]; then
  echo "--- recorded attempts and rank logs in $work (kept)"
  ls -R "$work/record" 2>/dev/null
  for f in "$work"/gate/*/rank*.stderr; do [ -s "$f" ] && { echo "== $f"; tail -20 "$f"; }; done
  exit "$rc"
fi
rm -rf "$work"
exit 0
