#!/usr/bin/env bash
# braid's Slurm backend against a real single-node Slurm (tests/slurm/cluster.sh): the CPU
# example evolved through it, a job cancelled by scancel mid-run (requeued), a time-limit hit
# (TIMEOUT), kill -9 of braid with jobs in the queue and `braid resume`, Ctrl-C (scancel of
# braid's jobs), the node drained and resumed, the example's external evaluator (evaluate.py,
# evaluator kind external) evolved through it, and a `kind: gpu` workload whose harness is host
# code (tests/slurm/fake_gpu: nvcc builds it here, its 2 ranks run as job steps on the fake GPUs),
# evolved and then crashing on rank 1. Exit 77 (skip) where slurmd cannot run.
#   usage: slurm_test.sh BRAID_BINARY SOURCE_DIR
set -u
braid=$1
src=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/braid-slurm-test.XXXXXX)
cluster="$work/cluster"
keep_work=0

cleanup() {
  [[ -n "${bg_pid:-}" ]] && kill -9 "$bg_pid" 2>/dev/null
  [[ -n "${timeout_pid:-}" ]] && kill -9 "$timeout_pid" 2>/dev/null
  bash "$here/cluster.sh" stop "$cluster"
  if (( keep_work )); then echo "kept $work for inspection"; else rm -rf "$work"; fi
}

out=$(timeout 90 bash "$here/cluster.sh" start "$cluster")
rc=$?
if (( rc == 77 )); then rm -rf "$work"; exit 77; fi
if (( rc != 0 )); then echo "FAIL: cluster did not start (exit $rc)"; bash "$here/cluster.sh" stop "$cluster"; exit 1; fi
eval "$out"
trap cleanup EXIT
node=$(sinfo -h -N -o %N | head -1)

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); keep_work=1; }
pass() { echo "ok: $*"; }
q() { sqlite3 "$1/evolution.db" "$2"; }

# A copy of examples/matmul_cpu whose run step goes through slow_run.sh, with a slurm section.
make_workload() {  # name, slurm lines (indented 4)
  local w="$work/$1"
  mkdir -p "$w"
  cp "$src"/examples/matmul_cpu/{program.cpp,braid_split.hpp,config.yaml,evaluate.py} "$w"/ 2>/dev/null
  cp "$here/slow_run.sh" "$w/"
  python3 - "$src/examples/matmul_cpu/workload.yaml" "$w/workload.yaml" "$2" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
# A job runs one program: the example's single-binary harness, without the driver beside it.
text = re.sub(r"\n  # The driver.*\n  # program runs.*", "", text)
text = re.sub(r"\n  (driver_build|worker): .*", "", text).replace("{driver}", "{artifact}")
text = text.replace('run: "{artifact} --mode verify', 'run: "bash {workload_dir}/slow_run.sh {artifact} --mode verify')
text = text.replace("  bench_timeout_s: 60\n", "  bench_timeout_s: 60\n  slurm:\n" + sys.argv[3] + "\n")
open(sys.argv[2], "w").write(text)
PY
  echo "$w"
}

# The seed's noise runs and a new best's confirmation are jobs too (the first evolve checks them);
# the scenarios after it turn them off to stay short.
no_remeasure() { printf 'noise_runs: 0\nconfirm_runs: 0\n' >> "$1/config.yaml"; }
# Re-measurement through Slurm kept, bounded: on a loaded machine the noise multiplies the
# confirmation re-runs (3 x 3 per confirmation, two jobs each), and the run took 7 minutes once.
light_remeasure() { printf 'noise_runs: 2\nconfirm_runs: 1\n' >> "$1/config.yaml"; }

# "<job id> <job name>" of the jobs of results folder $1 in squeue states $2 (other tests' jobs
# share the cluster).
ours() {
  squeue -h -t "$2" -o '%i %j' | while read -r id name; do
    [[ "$name" == braid-* && -d "$1/slurm_jobs/${name#braid-}" ]] && echo "$id $name"
  done
}

# The braid process that `timeout` (pid $1) started.
braid_of() { pgrep -P "$1" | head -1; }

# Waits up to $2 seconds for the shell condition $1.
wait_until() {
  local deadline=$((SECONDS + $2))
  until eval "$1" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || return 1
    sleep 0.2
  done
}

# Every evaluation of a results folder: one job submitted, its script started once, collected.
# Re-measurements (the seed's noise runs, confirmations of a new best) are jobs of their own,
# under labels that are not program ids; they are counted apart, and each must also run once.
check_once() {  # results, braid logs..., label
  local r=$1 label=$2; shift 2
  local evaluated submitted collected remeasured twice
  evaluated=$(q "$r" "select count(*) from programs where patch_type != 'migrant'")
  # Seeds of several islands share one evaluation.
  local seeds_shared; seeds_shared=$(q "$r" "select count(*) - count(distinct code) from programs where patch_type = 'seed'")
  evaluated=$((evaluated - seeds_shared))
  submitted=$(cat "$@" | grep -o "slurm: [^ ]* submitted as job" | awk '{print $2}' |
    grep -cFx -f <(q "$r" "select id from programs"))
  remeasured=$(cat "$@" | grep -o "slurm: [^ ]* submitted as job" | awk '{print $2}' |
    grep -vcFx -f <(q "$r" "select id from programs"))
  collected=$(q "$r" "select count(*) from slurm_jobs where state = 'collected' and candidate_id in (select id from programs)")
  twice=$(for f in "$r"/slurm_jobs/*/runs.log; do [[ $(wc -l < "$f") -ne 1 ]] && echo "$f"; done)
  if [[ "$submitted" == "$evaluated" && "$collected" == "$evaluated" && -z "$twice" ]]; then
    pass "$label: $evaluated evaluations, each submitted once and run once (+ $remeasured re-measurement jobs)"
  else
    fail "$label: $evaluated evaluations, $submitted submissions, $collected collected, run more than once: ${twice:-none}"
  fi
}

# --- TIMEOUT, in the background (Slurm enforces limits in whole minutes, so it takes ~70 s) ---
w_timeout=$(make_workload timeout_wl '    time: "1"
    gpus_per_task: 1
    poll_interval_s: 0.2')
sed -i 's/run_timeout_s: 30/run_timeout_s: 300/' "$w_timeout/workload.yaml"
no_remeasure "$w_timeout"
touch "$w_timeout/hang"   # the seed's job hangs: it meets its 1-minute limit
r_timeout="$work/r_timeout"
timeout 200 "$braid" evolve "$w_timeout" -g 1 -j 1 -s 3 -r "$r_timeout" > "$work/timeout.log" 2>&1 &
timeout_pid=$!

# --- a whole evolve of the CPU example, 4 jobs in flight, GPUs per task from fake gres ---
w=$(make_workload evolve_wl '    gpus_per_task: 1
    poll_interval_s: 0.2')
light_remeasure "$w"
r="$work/r_evolve"
# ~100 s alone; on a loaded 2-core machine (the whole suite at -j2) the best's confirmation re-runs
# grow with the noise (27 re-runs once) and the run took over 240 s: the limit is for hangs only.
if timeout 420 "$braid" evolve "$w" -g 8 -j 4 -s 11 -r "$r" > "$work/evolve.log" 2>&1; then
  ok=$(q "$r" "select count(*) from programs where failure_kind = 'ok'")
  total=$(q "$r" "select count(*) from programs")
  [[ "$ok" == "$total" && "$total" -ge 9 ]] && pass "evolve through Slurm: $total programs, all ok" || fail "evolve: $ok of $total ok"
  check_once "$r" "evolve" "$work/evolve.log"
  grep -q -- "--gpus-per-task=1" "$r"/slurm_jobs/*/job.sh && pass "job steps ask --gpus-per-task=1" || fail "no --gpus-per-task in job.sh"
else
  fail "evolve exited $? ($(tail -3 "$work/evolve.log"))"
fi

# --- scancel mid-run: the job ends CANCELLED, braid submits it again, it is scored once ---
w=$(make_workload cancel_wl '    poll_interval_s: 0.2')
no_remeasure "$w"
r="$work/r_cancel"
echo 3 > "$w/delay"
timeout 120 "$braid" evolve "$w" -g 2 -j 1 -s 5 -r "$r" > "$work/cancel.log" 2>&1 &
bg_pid=$!
wait_until "ours '$r' running | grep -q braid-" 30
victim=$(ours "$r" running | head -1)
scancel "${victim%% *}"
wait "$bg_pid"; rc=$?; bg_pid=
rm -f "$w/delay"
cand=${victim#* braid-}
if (( rc == 0 )) && grep -q "ended CANCELLED: not scored, submitting it again" "$work/cancel.log" &&
   [[ $(q "$r" "select attempts from slurm_jobs where candidate_id = '$cand'") == 2 ]] &&
   [[ $(q "$r" "select failure_kind from programs where id = '$cand'") == ok ]]; then
  pass "scancel of job ${victim%% *} ($cand): requeued, scored once from the second job"
else
  fail "scancel: braid exit $rc; $(grep -i cancel "$work/cancel.log" | tail -3)"
fi

# --- kill -9 of braid with jobs queued and running, then resume ---
w=$(make_workload kill_wl '    poll_interval_s: 0.2')
no_remeasure "$w"
r="$work/r_kill"
timeout 120 "$braid" evolve "$w" -g 8 -j 4 -s 9 -r "$r" > "$work/kill1.log" 2>&1 &
bg_pid=$!
wait_until "test -f '$r/slurm_jobs/'*/done" 60
echo 2 > "$w/delay"
wait_until "[ \$(ours '$r' pending,running | wc -l) -ge 4 ]" 60
kill -9 "$(braid_of "$bg_pid")"; wait "$bg_pid" 2>/dev/null; bg_pid=
in_queue=$(ours "$r" pending,running | wc -l)
rm -f "$w/delay"
if timeout 120 "$braid" resume "$r" > "$work/kill2.log" 2>&1; then
  adopted=$(grep -c "found again as job" "$work/kill2.log")
  done_gens=$(q "$r" "select count(*) from programs where patch_type not in ('seed', 'migrant')")
  [[ "$done_gens" == 8 && "$adopted" -ge 1 ]] && pass "kill -9 with $in_queue jobs in the queue: resume found $adopted again, 8 generations done" ||
    fail "kill -9: $done_gens generations, $adopted jobs found again"
  check_once "$r" "kill -9 + resume" "$work/kill1.log" "$work/kill2.log"
else
  fail "resume after kill -9 exited $? ($(tail -3 "$work/kill2.log"))"
fi

# --- Ctrl-C: braid cancels its jobs ---
w=$(make_workload int_wl '    poll_interval_s: 0.2')
no_remeasure "$w"  # re-measurements run one at a time; without them three evaluations are in flight
r="$work/r_int"
timeout 120 "$braid" evolve "$w" -g 6 -j 3 -s 13 -r "$r" > "$work/int.log" 2>&1 &
bg_pid=$!
wait_until "test -f '$r/slurm_jobs/'*/done" 60
echo 30 > "$w/delay"
wait_until "[ \$(ours '$r' running | wc -l) -ge 3 ]" 60
kill -INT "$(braid_of "$bg_pid")"; wait "$bg_pid"; rc=$?; bg_pid=
sleep 1
left=$(ours "$r" pending,running | wc -l)
cancelled=$(q "$r" "select count(*) from slurm_jobs where state = 'cancelled'")
rm -f "$w/delay"
(( rc == 130 && left == 0 && cancelled >= 3 )) && pass "Ctrl-C: braid exited 130 and scancelled its $cancelled jobs" ||
  fail "Ctrl-C: exit $rc, $left jobs left in the queue, $cancelled cancelled"

# --- the node drained: jobs wait (status shows them queued), then run when it is resumed ---
w=$(make_workload drain_wl '    poll_interval_s: 0.2')
no_remeasure "$w"
r="$work/r_drain"
scontrol update nodename="$node" state=drain reason=braid-test
timeout 120 "$braid" evolve "$w" -g 3 -j 2 -s 17 -r "$r" > "$work/drain.log" 2>&1 &
bg_pid=$!
if wait_until "ours '$r' pending | grep -q braid-" 30; then
  sleep 3
  still=$(squeue -h -t pending -o '%j %r' | grep -f <(ours "$r" pending | cut -d' ' -f2) | head -1)
  scontrol update nodename="$node" state=resume
  wait "$bg_pid"; rc=$?; bg_pid=
  total=$(q "$r" "select count(*) from programs where failure_kind = 'ok'")
  (( rc == 0 )) && [[ -n "$still" ]] && pass "drain: job waited ($still), ran after resume; $total programs ok" ||
    fail "drain: exit $rc, pending while drained: '$still'"
  check_once "$r" "drain" "$work/drain.log"
else
  scontrol update nodename="$node" state=resume
  fail "drain: no job was pending while the node was drained"
fi

# --- evaluator kind external: evaluate.py runs once per job, in an allocation of 2 tasks x 1 GPU ---
w="$work/external_wl"
mkdir -p "$w"
cp "$src"/examples/matmul_cpu/{program.cpp,braid_split.hpp,config.yaml,evaluate.py} "$w"/
no_remeasure "$w"
# Records the allocation the evaluator ran in, then runs it.
cat > "$w/allocation.sh" <<'SH'
echo "$SLURM_JOB_ID $SLURM_NTASKS $(hostname)" > "$BRAID_WORK_DIR/allocation"
exec "$@"
SH
cat > "$w/workload.yaml" <<'YAML'
name: matmul_cpu_external
program: program.cpp
language: cpp
config: config.yaml
evaluator:
  kind: external
  command: "bash allocation.sh python3 evaluate.py"
  timeout_s: 120
  slurm:
    ranks: 2
    gpus_per_task: 1
    poll_interval_s: 0.2
task: |
  Make matmul_kernel as fast as possible.
YAML
r="$work/r_external"
if timeout 240 "$braid" evolve "$w" -g 4 -j 2 -s 19 -r "$r" > "$work/external.log" 2>&1; then
  ok=$(q "$r" "select count(*) from programs where failure_kind = 'ok'")
  total=$(q "$r" "select count(*) from programs")
  allocations=$(cat "$r"/slurm_jobs/*/allocation 2>/dev/null | awk '$2 == 2' | wc -l)
  jobs=$(ls -d "$r"/slurm_jobs/*/ | wc -l)
  [[ "$ok" == "$total" && "$total" -ge 5 ]] && pass "external evaluator through Slurm: $total programs, all ok" ||
    fail "external: $ok of $total ok ($(q "$r" "select failure_kind || ': ' || substr(error_text, 1, 200) from programs where failure_kind != 'ok' limit 2"))"
  [[ "$allocations" == "$jobs" && "$jobs" -ge 1 ]] && grep -q "^once external 120 " "$r"/slurm_jobs/*/job.sh &&
    pass "external: evaluate.py ran once in each of $jobs jobs, each an allocation of 2 tasks" ||
    fail "external: $allocations of $jobs jobs recorded a 2-task allocation"
  check_once "$r" "external" "$work/external.log"
else
  fail "external evolve exited $? ($(tail -3 "$work/external.log"))"
fi

# --- evaluator kind gpu: nvcc builds here; verify and bench are job steps of 2 ranks x 1 GPU ---
w="$work/gpu_wl"
cp -r "$here/fake_gpu" "$w"
r="$work/r_gpu"
timeout 150 "$braid" evolve "$w" -g 3 -j 2 -s 23 -r "$r" > "$work/gpu.log" 2>&1
rc=$?
if grep -q "needs the CUDA toolkit here" "$work/gpu.log"; then
  echo "skipped: evaluator kind gpu (no nvcc here): $(grep -m1 "needs the CUDA toolkit" "$work/gpu.log")"
elif (( rc == 0 )); then
  ok=$(q "$r" "select count(*) from programs where failure_kind = 'ok'")
  total=$(q "$r" "select count(*) from programs")
  [[ "$ok" == "$total" && "$total" -ge 4 ]] && pass "gpu kind through Slurm: $total programs, all ok" ||
    fail "gpu kind: $ok of $total ok ($(q "$r" "select failure_kind || ': ' || substr(error_text, 1, 300) from programs where failure_kind != 'ok' limit 2"))"
  ranks_ok=1
  for d in "$r"/slurm_jobs/*/; do
    grep -q "rank 1 of 2, mode verify" "$d/logs/verify/rank1.stdout" && grep -q "rank 0 of 2, mode bench" "$d/logs/bench/rank0.stdout" || ranks_ok=0
  done
  (( ranks_ok )) && grep -q "^rank_step verify 60 " "$r"/slurm_jobs/*/job.sh &&
    grep -q -- "srun --ntasks=2 --kill-on-bad-exit=1 --gpus-per-task=1 --output=\"logs/\$name/rank%t.stdout\"" "$r"/slurm_jobs/*/job.sh &&
    pass "gpu kind: each step ran 2 ranks from Slurm's environment, logs per rank" || fail "gpu kind: rank logs or job steps missing"
  check_once "$r" "gpu kind" "$work/gpu.log"
  # rank 1 dies of SIGSEGV: srun's report is judged as a local launch's (run_failed, the rank named)
  touch "$w/crash_rank1"
  r="$work/r_gpu_crash"
  timeout 120 "$braid" evolve "$w" -g 1 -j 1 -s 29 -r "$r" > "$work/gpu_crash.log" 2>&1
  rc=$?
  kind=$(q "$r" "select failure_kind || ' | ' || error_text from programs where patch_type = 'seed' limit 1")
  if (( rc == 2 )) && [[ "$kind" == "run_failed | run+verify: rank 1: killed by signal SIGSEGV"* ]]; then
    pass "gpu kind: a rank's crash in a job step -> ${kind%%$'\n'*}"
  else
    fail "gpu kind crash: exit $rc, seed: $kind"
  fi
else
  fail "gpu kind evolve exited $rc ($(tail -3 "$work/gpu.log"))"
fi

# --- TIMEOUT result ---
wait "$timeout_pid"; rc=$?; timeout_pid=
kind=$(q "$r_timeout" "select failure_kind || ' | ' || error_text from programs where patch_type = 'seed' limit 1")
# A seed that fails ends the run with exit 2 (no candidate could be correct).
if (( rc == 2 )) && [[ "$kind" == timeout*"time limit"* ]]; then
  pass "time limit: the seed's job ended TIMEOUT -> $kind"
else
  fail "time limit: exit $rc, seed: $kind"
fi

if (( failures )); then echo "$failures check(s) failed"; exit 1; fi
echo "all slurm checks passed"
