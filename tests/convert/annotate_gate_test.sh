#!/usr/bin/env bash
# CTest `gpu`: the annotator's knobs through the verification gate on 2 GPUs. Every corpus
# program and the gemm_allgather seed, annotated by rules, pass the gate at gen0 and at knob
# settings that take the prelude's other launch paths (thread/warp issuers, 8..132 CTAs, 16 KiB..
# 1 MiB chunks). Usage: annotate_gate_test.sh <braid build dir> (holds tests/annotate_gate_driver).
# Skips (77) where fewer than 2 GPUs exist.
set -uo pipefail
build=${1:?usage: annotate_gate_test.sh <braid build dir>}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/gpu_gate_setup.sh"
gpu_gate_setup "$0" "$build" annotate_gate_driver "${BRAID_ANNOTATE_DRIVER:-}"  # sets root, driver; a bundled driver may be given
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
