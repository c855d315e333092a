#!/usr/bin/env bash
# A single-node Slurm cluster in a folder, for braid's slurm tests (and by hand):
#   cluster.sh start DIR   munged, slurmctld and slurmd on 127.0.0.1 with their own slurm.conf,
#                          munge key, state folders and free ports; no systemd, no cgroups.
#                          Prints `export SLURM_CONF=DIR/etc/slurm.conf`. Exit 77 when this
#                          machine cannot run them (packages missing, slurmd refuses).
#   cluster.sh stop DIR    ends the daemons it started (by their recorded pids).
# The node claims 8 CPUs and 4 GPUs (gres without device files), so --gpus-per-task and four
# jobs in flight work on a 2-core machine (SlurmdParameters=config_overrides).
set -u
cmd=${1:-}
dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: cluster.sh start|stop DIR" >&2; exit 2; }

skip() { echo "SKIP: $*" >&2; exit 77; }

stop_cluster() {
  for name in slurmd slurmctld munged; do
    local pidfile="$dir/run/$name.pid"
    [[ -f "$pidfile" ]] || continue
    local pid; pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
    rm -f "$pidfile"
  done
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Waits up to $2 seconds for `$1` to succeed.
wait_for() {
  local deadline=$((SECONDS + $2))
  until eval "$1" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || return 1
    sleep 0.2
  done
}

start_cluster() {
  for tool in munged slurmctld slurmd sbatch squeue scontrol scancel python3; do
    command -v "$tool" >/dev/null 2>&1 || skip "$tool is not installed (apt-get install slurmctld slurmd slurm-client munge)"
  done
  mkdir -p "$dir"/{etc,run,log,munge,ctld,spool,dev}
  dir=$(cd "$dir" && pwd)
  chmod 700 "$dir/munge" "$dir/etc"
  # munged refuses group/world-writable parents of its key unless forced; the test's folder is
  # private to this run.
  head -c 1024 /dev/urandom > "$dir/etc/munge.key"
  chmod 400 "$dir/etc/munge.key"
  local user; user=$(id -un)
  local host; host=$(hostname -s)
  local ctld_port d_port
  ctld_port=$(free_port); d_port=$(free_port)
  while [[ "$d_port" == "$ctld_port" ]]; do d_port=$(free_port); done
  cat > "$dir/etc/slurm.conf" <<CONF
ClusterName=braidtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.daemon.pid
SlurmdPidFile=$dir/run/slurmd.daemon.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
MinJobAge=600
KillWait=2
InactiveLimit=0
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=60
MpiDefault=none
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=4000 Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  # Four fake GPUs: gres/gpu counts device files; empty files stand in (nothing opens them
  # without task/cgroup), so jobs get CUDA_VISIBLE_DEVICES and --gpus-per-task is enforced.
  mkdir -p "$dir/dev"
  touch "$dir"/dev/gpu{0,1,2,3}
  echo "Name=gpu File=$dir/dev/gpu[0-3]" > "$dir/etc/gres.conf"
  export SLURM_CONF="$dir/etc/slurm.conf"

  setsid munged -F --force --key-file="$dir/etc/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/run/munged.daemon.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed" \
    </dev/null >"$dir/log/munged.out" 2>&1 &
  echo $! > "$dir/run/munged.pid"
  wait_for "test -S '$dir/munge/munge.socket'" 10 || { stop_cluster; skip "munged did not start: $(tail -3 "$dir/log/munged.out" "$dir/log/munged.log" 2>/dev/null)"; }

  setsid slurmctld -D -i -f "$SLURM_CONF" </dev/null >"$dir/log/slurmctld.out" 2>&1 &
  echo $! > "$dir/run/slurmctld.pid"
  wait_for "scontrol ping | grep -q UP" 20 || { stop_cluster; skip "slurmctld did not start: $(tail -5 "$dir/log/slurmctld.log" "$dir/log/slurmctld.out" 2>/dev/null)"; }

  setsid slurmd -D -f "$SLURM_CONF" -N "$host" </dev/null >"$dir/log/slurmd.out" 2>&1 &
  echo $! > "$dir/run/slurmd.pid"
  if ! wait_for "sinfo -h -N -o %T | grep -Eq '^(idle|mixed|allocated)'" 30; then
    local why; why=$(tail -5 "$dir/log/slurmd.log" "$dir/log/slurmd.out" 2>/dev/null; sinfo -h -N -o '%T %E' 2>&1)
    stop_cluster
    skip "slurmd did not bring the node up: $why"
  fi
  echo "export SLURM_CONF=$SLURM_CONF"
}

case "$cmd" in
  start) start_cluster ;;
  stop) stop_cluster ;;
  *) echo "usage: cluster.sh start|stop DIR" >&2; exit 2 ;;
esac
