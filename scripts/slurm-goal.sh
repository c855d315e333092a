#!/usr/bin/env bash
# Issue 27's goal, by hand: on the single-node test cluster (tests/slurm/cluster.sh), a
# 40-generation evolve of examples/matmul_cpu with 4 jobs in flight completes with every candidate
# evaluated exactly once through a `scancel` of a running job, `kill -9` of braid then `braid
# resume`, and the node drained then resumed; and Slurm's throughput is within 10% of the local
# backend's for the same evaluations, once Slurm's own scheduling latency is subtracted.
# Three evolves, same seed and config (the example's, -j 4, without re-measurements: noise_runs 0,
# confirm_runs 0, so that every run does the same evaluations, 1 seed + one per generation, each
# with its build; the noisy timings of a shared machine otherwise change how many confirmations a
# run makes), one workload copy each that differ only in their `slurm:` section:
#   faults  through Slurm, with the three injections (their pauses are in its wall time)
#   slurm   through Slurm, undisturbed: the throughput figure
#   local   the local backend
# Injections use tests/slurm/slow_run.sh's `delay` file (2 s before a job's run step) so that a
# job is surely running when it is cancelled and jobs are in the queue when braid is killed.
# Latency per job: submit (slurm_jobs.submitted_at) to the script's start (its folder's `started`);
# throughput with it subtracted: evaluations / (wall - total latency / 4 in flight).
# About 4 minutes on the 2-core development machine shared with other builds. Needs build/braid, sqlite3, and Slurm+munge (exit 77 without them).
# Usage: scripts/slurm-goal.sh [generations=40] [seed=7] [out=results/slurm-goal]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)
gens=${1:-40}
seed=${2:-7}
out=${3:-results/slurm-goal}
braid="$root/build/braid"
jobs=4
[[ -x "$braid" ]] || { echo "build braid first (scripts/build.sh)" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
cluster="$out/cluster"

started=$(bash tests/slurm/cluster.sh start "$cluster")
rc=$?
(( rc == 0 )) || { bash tests/slurm/cluster.sh stop "$cluster"; exit "$rc"; }
eval "$started"
cleanup() {
  if [[ -n "${bg_pid:-}" ]]; then
    kill -9 "$(braid_of "$bg_pid")" "$bg_pid" 2>/dev/null
  fi
  scontrol update nodename="$node" state=resume 2>/dev/null
  bash "$root/tests/slurm/cluster.sh" stop "$cluster"
}
trap cleanup EXIT
node=$(sinfo -h -N -o %N | head -1)

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
q() { sqlite3 "$1/evolution.db" "$2"; }
now() { date +%s.%N; }

# Waits up to $2 seconds for the shell condition $1.
wait_until() {
  local deadline=$((SECONDS + $2))
  until eval "$1" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || return 1
    sleep 0.1
  done
}

# A copy of examples/matmul_cpu whose run step goes through slow_run.sh; $2: its slurm section.
make_workload() {
  local w="$out/$1"
  mkdir -p "$w"
  cp examples/matmul_cpu/{program.cpp,braid_split.hpp,config.yaml} tests/slurm/slow_run.sh "$w"/
  printf 'noise_runs: 0\nconfirm_runs: 0\n' >> "$w/config.yaml"
  python3 - examples/matmul_cpu/workload.yaml "$w/workload.yaml" "$2" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
# A job runs one program: the example's single-binary harness, without the driver beside it.
text = re.sub(r"\n  # The driver.*\n  # program runs.*", "", text)
text = re.sub(r"\n  (driver_build|worker): .*", "", text).replace("{driver}", "{artifact}")
text = text.replace('run: "{artifact} --mode verify', 'run: "bash {workload_dir}/slow_run.sh {artifact} --mode verify')
if sys.argv[3]:
    text = text.replace("  bench_timeout_s: 60\n", "  bench_timeout_s: 60\n  slurm:\n" + sys.argv[3] + "\n")
open(sys.argv[2], "w").write(text)
PY
  echo "$w"
}

# "<job id> <job name>" of results folder $1's jobs in squeue states $2.
ours() {
  squeue -h -t "$2" -o '%i %j' | while read -r id name; do
    [[ "$name" == braid-* && -d "$1/slurm_jobs/${name#braid-}" ]] && echo "$id $name"
  done
}

# The braid process that `timeout` (pid $1) started.
braid_of() { pgrep -P "$1" | head -1; }

slurm_section='    gpus_per_task: 1
    poll_interval_s: 0.2'
w_faults=$(make_workload wl_faults "$slurm_section")
w_slurm=$(make_workload wl_slurm "$slurm_section")
w_local=$(make_workload wl_local "")
evolve=(evolve -g "$gens" -j "$jobs" -s "$seed" --llm none)

# --- 1. through Slurm, with a scancel, a kill -9 + resume and a drain ---
r="$out/r_faults"
t0=$(now)
timeout 600 "$braid" "${evolve[@]}" "$w_faults" -r "$r" > "$out/faults1.log" 2>&1 &
bg_pid=$!
# scancel: a job held 2 s at its run step is cancelled while running; braid must submit it again.
wait_until "test -f '$r/slurm_jobs/'*/done" 60
echo 2 > "$w_faults/delay"
wait_until "ours '$r' running | grep -Eq 'braid-[0-9a-f]{16}$'" 120
victim=$(ours "$r" running | grep -E 'braid-[0-9a-f]{16}$' | head -1)
scancel "${victim%% *}"
rm -f "$w_faults/delay"
cancelled=${victim#* braid-}
if wait_until "grep -q 'of $cancelled ended CANCELLED: not scored, submitting it again' '$out/faults1.log'" 30; then
  pass "scancel of job ${victim%% *} ($cancelled) while running: braid submits it again"
else
  fail "scancel of job ${victim%% *} ($cancelled): no resubmission in the log"
fi
# kill -9 with jobs in the queue, then resume (which must adopt them, not submit them again).
wait_until "[ \$(q '$r' \"select count(*) from programs where patch_type not in ('seed', 'migrant')\") -ge 8 ]" 120
echo 2 > "$w_faults/delay"
wait_until "[ \$(ours '$r' pending,running | wc -l) -ge $jobs ]" 60
in_queue=$(ours "$r" pending,running | wc -l)
gen_at_kill=$(q "$r" "select count(*) from programs where patch_type not in ('seed', 'migrant')")
kill -9 "$(braid_of "$bg_pid")"; wait "$bg_pid" 2>/dev/null
rm -f "$w_faults/delay"
t_kill=$(now)
timeout 600 "$braid" resume "$r" > "$out/faults2.log" 2>&1 &
bg_pid=$!
t_resume=$(now)
# drain: jobs pend (reason shown by squeue) while the node is drained, then run once it is resumed.
wait_until "[ \$(q '$r' \"select count(*) from programs where patch_type not in ('seed', 'migrant')\") -ge $((gens / 2)) ]" 180
scontrol update nodename="$node" state=drain reason=slurm-goal
t_drain=$(now)
if wait_until "ours '$r' pending | grep -q braid-" 60; then
  sleep 3
  reason=$(squeue -h -t pending -o '%j %r' | grep -f <(ours "$r" pending | cut -d' ' -f2) | head -1)
  drained_state=$(sinfo -h -N -o %T | head -1)
else
  reason="none pending"
  drained_state=drained
fi
scontrol update nodename="$node" state=resume
t_undrain=$(now)
wait "$bg_pid"; rc=$?; bg_pid=
t1=$(now)
if [[ "$reason" == *braid-* ]]; then pass "drain: node $drained_state, job pending ($reason), resumed"; else fail "drain: $reason"; fi
adopted=$(grep -c "found again as job" "$out/faults2.log")
if (( rc == 0 && adopted >= 1 )); then
  pass "kill -9 at generation $gen_at_kill with $in_queue jobs in the queue: resume found $adopted again and finished"
else
  fail "resume exited $rc, $adopted jobs found again ($(tail -2 "$out/faults2.log"))"
fi
faults_wall=$(python3 -c "print($t1 - $t0)")
faults_pauses=$(python3 -c "print(($t_resume - $t_kill) + ($t_undrain - $t_drain))")

# --- every candidate evaluated exactly once ---
# Slurm's own record (slurmctld.log: which job ids were allocated a node, which were killed, whose
# script exited) against braid's: every stored candidate's score comes from one job, whose script
# ran to its end; every other job braid submitted was killed before its script ended: the one
# cancelled by scancel (requeued, not scored), and the jobs that resume replaced because it
# re-proposed another program under the same candidate id (resume cancels them, queued or just
# started); every job braid recorded was collected.
python3 - "$r" "$gens" "$cancelled" "${victim%% *}" "$cluster/log/slurmctld.log" "$out/faults1.log" "$out/faults2.log" <<'PY' || failures=$((failures + 1))
import json, re, sqlite3, sys
r, gens, cancelled, victim, ctld, logs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
db = sqlite3.connect(f"{r}/evolution.db")
problems = []
per_gen = dict(db.execute("select generation, count(*) from programs where patch_type not in ('seed', 'migrant') group by generation"))
if sorted(per_gen) != list(range(1, gens + 1)) or any(n != 1 for n in per_gen.values()):
    problems.append(f"generations stored: {sorted(per_gen.items())}")
ledger = {c: (job, state, attempts) for c, job, state, attempts in db.execute("select candidate_id, job_id, state, attempts from slurm_jobs")}
final_jobs = {job: c for c, (job, _, _) in ledger.items()}
submitted = {}   # job id -> label, every submission braid logged
for log in logs:
    for label, job in re.findall(r"slurm: (\S+) submitted as job (\d+)", open(log).read()):
        submitted[job] = label
ctld_log = open(ctld).read()
allocated = re.findall(r"sched: Allocate JobId=(\d+) ", ctld_log)
started = set(allocated)
killed = set(re.findall(r"REQUEST_KILL_JOB JobId=(\d+) ", ctld_log))
exited = set(re.findall(r"_job_complete: JobId=(\d+) WEXITSTATUS", ctld_log))
if len(allocated) != len(started):
    problems.append("slurmctld allocated a job twice")
for cand, (job, state, attempts) in ledger.items():
    if state != "collected":
        problems.append(f"{cand}: job {job} left {state}")
scored = {}
for cand, kind, timings in db.execute("select id, failure_kind, timings from programs where patch_type != 'migrant'"):
    t = json.loads(timings)
    job = str(int(t.get("slurm_job", -1)))
    if job not in final_jobs:
        problems.append(f"{cand}: scored from job {job}, not a job braid collected")
    scored.setdefault(job, []).append(cand)
    if cand == cancelled and (kind != "ok" or t.get("slurm_attempts") != 2):
        problems.append(f"the cancelled candidate {cand}: {kind}, {t.get('slurm_attempts')} attempts")
if cancelled not in scored.get(ledger.get(cancelled, ("",))[0], []):
    problems.append(f"the cancelled candidate {cancelled} was not stored from its second job")
replaced = []
for job, label in submitted.items():
    if job in final_jobs:
        if job not in exited:
            problems.append(f"job {job} of {label} was collected but its script did not exit")
        continue
    if job in exited or job not in killed:
        problems.append(f"job {job} of {label} ran to its end but was not the one collected")
    elif job != victim:
        replaced.append(f"{label[:8]}:{job}{' (started)' if job in started else ''}")
stray = started - set(submitted)
if stray:
    problems.append(f"jobs started that braid never logged: {sorted(stray)}")
if problems:
    print("FAIL: exactly once:\n  " + "\n  ".join(problems))
    sys.exit(1)
remeasured = len(set(ledger) - {c for cs in scored.values() for c in cs})
print(f"ok: exactly once: {gens} generations stored once each; {len(ledger)} jobs collected ({remeasured} of them "
      f"re-measurements), each candidate scored from one job that ran to its end; killed before their end: the "
      f"scancelled {victim} and {len(replaced)} jobs of programs resume re-proposed differently ({', '.join(replaced) or 'none'})")
PY

# --- 2. through Slurm undisturbed, 3. locally ---
t0=$(now)
timeout 600 "$braid" "${evolve[@]}" "$w_slurm" -r "$out/r_slurm" > "$out/slurm.log" 2>&1 || fail "slurm evolve exited $?"
slurm_wall=$(python3 -c "print($(now) - $t0)")
t0=$(now)
timeout 600 "$braid" "${evolve[@]}" "$w_local" -r "$out/r_local" > "$out/local.log" 2>&1 || fail "local evolve exited $?"
local_wall=$(python3 -c "print($(now) - $t0)")

python3 - "$out" "$jobs" "$faults_wall" "$faults_pauses" "$slurm_wall" "$local_wall" <<'PY'
import json, re, sqlite3, statistics, sys
out, jobs = sys.argv[1], int(sys.argv[2])
faults_wall, faults_pauses, slurm_wall, local_wall = map(float, sys.argv[3:])

def evaluations(run, logs):
    """Evaluations run: candidates (a seed shared by islands once), the seed's noise runs and the
    re-runs of confirmations (each re-run times the candidate and the incumbent)."""
    db = sqlite3.connect(f"{out}/{run}/evolution.db")
    cands = db.execute("select count(distinct code) from programs where patch_type = 'seed'").fetchone()[0] + \
        db.execute("select count(*) from programs where patch_type not in ('seed', 'migrant')").fetchone()[0]
    text = "".join(open(f"{out}/{log}").read() for log in logs)
    noise = [int(n) - 1 for n in re.findall(r"noise: seed re-timed (\d+)x", text)][:1]  # logged again at the end
    confirm = sum(2 * int(n) for n in re.findall(r"(?:confirmed as the new best|not promoted) after (\d+) re-runs", text))
    return cands + sum(noise) + confirm, db

def latencies(db, run):
    """Submit -> script start per job (its last attempt), and script end -> braid noticing."""
    queue = []
    for cand, sub in db.execute("select candidate_id, submitted_at from slurm_jobs"):
        with open(f"{out}/{run}/slurm_jobs/{cand}/started") as f:
            queue.append(float(f.read().split()[1]) - sub)
    collect = [json.loads(t).get("slurm_collect") for (t,) in db.execute("select timings from programs")]
    njobs = db.execute("select count(*) from slurm_jobs").fetchone()[0]
    return queue, [c for c in collect if c is not None], njobs

rows = []
for name, run, logs, wall in (("slurm+faults", "r_faults", ["faults1.log", "faults2.log"], faults_wall - faults_pauses),
                              ("slurm", "r_slurm", ["slurm.log"], slurm_wall), ("local", "r_local", ["local.log"], local_wall)):
    evals, db = evaluations(run, logs)
    row = dict(name=name, wall=wall, evals=evals, rate=evals / wall * 60)
    if run != "r_local":
        queue, collect, njobs = latencies(db, run)
        adj = wall - sum(queue) / jobs
        row.update(jobs=njobs, qmed=statistics.median(queue), qtot=sum(queue), cmed=statistics.median(collect),
                   adj=adj, rate_adj=evals / adj * 60)
    rows.append(row)

local = rows[-1]["rate"]
print(f"\n{'run':<13} {'wall s':>7} {'evals':>5} {'jobs':>4} {'evals/min':>9} {'queue med':>9} {'queue sum':>9} "
      f"{'collect med':>11} {'wall-q/4':>8} {'evals/min-q':>11} {'raw ratio':>9} {'ratio-q':>7}")
for r in rows:
    if "adj" not in r:
        print(f"{r['name']:<13} {r['wall']:>7.1f} {r['evals']:>5} {'-':>4} {r['rate']:>9.1f} {'-':>9} {'-':>9} {'-':>11} "
              f"{'-':>8} {'-':>11} {'1.00':>9} {'1.00':>7}")
        continue
    print(f"{r['name']:<13} {r['wall']:>7.1f} {r['evals']:>5} {r['jobs']:>4} {r['rate']:>9.1f} {r['qmed']:>9.2f} {r['qtot']:>9.1f} "
          f"{r['cmed']:>11.2f} {r['adj']:>8.1f} {r['rate_adj']:>11.1f} {r['rate'] / local:>9.2f} {r['rate_adj'] / local:>7.2f}")
print(f"\nslurm+faults: wall without the {faults_pauses:.1f} s of injected pauses (kill -9 -> resume, the node drained);"
      " its jobs include the requeue and the 2 s delays of the injections.")
print("evals: candidates (a seed shared by islands once) + the seed's noise runs + confirmation re-runs (from the logs);"
      " jobs: Slurm jobs collected (should equal evals); queue: submit -> script start (s); wall-q/4: wall minus the"
      f" summed queue latency / {jobs} in flight; ratios: evals/min (raw, -q) over the local evals/min.")
ratio = rows[1]["rate_adj"] / local
print("the subtraction over-credits Slurm where braid builds the next candidates while jobs wait in the queue;"
      f" without it the undisturbed ratio is {rows[1]['rate'] / local:.2f}")
print(f"goal (undisturbed Slurm, latency subtracted, at least 90% of local throughput): ratio {ratio:.2f}: "
      f"{'met' if ratio >= 0.90 else 'NOT met'}")
PY

if (( failures )); then echo "$failures check(s) failed (logs and runs kept in $out)"; exit 1; fi
echo "all goal checks passed (runs in $out)"
