#!/usr/bin/env bash
# CTest `gpu` (convert_diff_gate): the differential gate, which needs no annotations, through
# `braid convert --verify` on user-style corpus programs (tests/convert/corpus_user/):
# embedding_allgather_types.cu (torchrun-style RANK/WORLD_SIZE bootstrap, any world size) on
# min(GPUs, 2) local ranks, and, where mpirun and an MPI compiler wrapper exist, mpi_dp_grads.cu
# under mpirun; with 2 GPUs or more, the programs where one thread drives every GPU of one process
# (single_process_init_all.cu: ncclCommInitAll; single_thread_group_init_fp16.cu: creations in one
# group, a send/recv ring) and where a thread per GPU is a rank (thread_per_gpu_ranks.cu: std::thread;
# pthread_per_gpu_fp16_ring.cu: pthreads, fp16, a ring, main frees after the join;
# threads_main_allocates_bf16.cu: buffers the main thread made, adopted by each GPU's thread). Each must pass
# with every buffer compared and matching.
# Usage: diff_gate_gpu_test.sh <braid binary>. Skips (77) without a GPU.
set -uo pipefail
braid=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" -lt 1 ]; then
  echo "SKIPPED: no GPU"
  exit 77
fi
ranks=$((gpus >= 2 ? 2 : 1))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0

gate() {  # gate <corpus program> <launcher>
  local name=$1 launcher=$2
  echo "== $name ($launcher, $ranks ranks)"
  "$braid" convert "$root/tests/convert/corpus_user/$name" -o "$out/$name" --verify --explain --ranks "$ranks" \
    --json "$out/$name.json" --work "$out/$name.work"
  local rc=$?
  python3 - "$out/$name.json" "$launcher" "$rc" <<'PY' || failed=1
import json, sys
path, launcher, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
gate = json.load(open(path)).get("gate", {})
d = gate.get("details", {})
problems = []
if rc != 0: problems.append(f"braid convert exited {rc}: {gate.get('failure', '')}")
if d.get("mode") != "differential": problems.append(f"mode {d.get('mode')!r}, not differential")
if d.get("launcher") != launcher: problems.append(f"launcher {d.get('launcher')!r}, not {launcher}")
buffers = d.get("buffers", [])
if not buffers: problems.append("no buffer compared")
problems += [f"buffer {b}" for b in buffers if not (b.get("match") and b.get("compared"))]
print("PASS" if not problems else "FAIL: " + "; ".join(problems), f"({len(buffers)} buffers)")
sys.exit(1 if problems else 0)
PY
}

gate embedding_allgather_types.cu local
if command -v mpirun >/dev/null && { command -v mpicxx >/dev/null || command -v mpicc >/dev/null; }; then
  gate mpi_dp_grads.cu mpirun
else
  echo "mpi_dp_grads.cu: SKIPPED (no mpirun or MPI compiler wrapper)"
fi
if [ "$gpus" -ge 2 ]; then
  gate single_process_init_all.cu local
  gate single_thread_group_init_fp16.cu local
  gate thread_per_gpu_ranks.cu local
  gate pthread_per_gpu_fp16_ring.cu local
  gate threads_main_allocates_bf16.cu local
else
  echo "single_process_init_all.cu, single_thread_group_init_fp16.cu, thread_per_gpu_ranks.cu, pthread_per_gpu_fp16_ring.cu, threads_main_allocates_bf16.cu: SKIPPED (several GPUs of one process need 2)"
fi
exit $failed
