#!/usr/bin/env bash
# CTest `gpu`: the LLM rewrite loop through the verification gate on 2 GPUs. A scripted loopback
# model first answers reduce_to_root.cu with a rewrite that compiles but writes loss_total on
# every rank, then the fix once the gate's failure and the judge's diagnosis are in its prompt.
# Usage: rewrite_gate_test.sh <braid build dir> (holds tests/rewrite_gate_driver). Skips (77)
# where fewer than 2 GPUs exist.
set -uo pipefail
build=${1:?usage: rewrite_gate_test.sh <braid build dir>}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/gpu_gate_setup.sh"
gpu_gate_setup "$0" "$build" rewrite_gate_driver "${BRAID_REWRITE_GATE_DRIVER:-}"  # sets root, driver; a bundled driver may be given
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
