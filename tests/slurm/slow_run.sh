#!/usr/bin/env bash
# Run-step wrapper of the slurm tests' workloads: waits <workload>/delay seconds (when that file
# exists) so a test can act on a running job, and hangs once if <workload>/hang exists (the first
# job to take it), so the job meets its Slurm time limit. Then runs the harness.
dir=${BRAID_WORKLOAD_DIR:?}
[[ -f "$dir/delay" ]] && sleep "$(cat "$dir/delay")"
if mv "$dir/hang" "$dir/hang.taken" 2>/dev/null; then sleep 600; fi
exec "$@"
