# Sourced by scripts/gpu.sh: time-limited children that end with the script.
#
# `timeout` puts itself and its command in a process group of their own, so a signal to the script
# (an outer `timeout`, Ctrl-C, Slurm ending the job) never reaches them: they ran on to their own
# limits. A rank left running on a GPU time-slices it with the next run's programs, whose CUDA
# events then miss the waits the host clock sees (2026-11-27, 4 x H100: a bench cut by an outer
# time limit left MoE ranks on all four GPUs, and the goal search after it had most scores withheld
# for clocks that disagreed by one time slice, ~2.4 ms). So every such child is recorded here and
# its group is ended when the script is.
child_groups=()
end_child_groups() {
  local g
  for g in "${child_groups[@]}"; do kill -TERM -- "-$g" 2>/dev/null || kill -TERM "$g" 2>/dev/null; done
  child_groups=()
}
trap 'end_child_groups; exit 143' TERM INT HUP

# `timeout ARGS...` as a recorded child, waited for (a wait returns at once on a signal, a
# foreground command would not).
timed() {  # timeout-arguments...
  timeout "$@" &
  local p=$!
  child_groups+=("$p")
  wait "$p"
}

# A subshell started with `( ... ) &` loses the trap above: this gives it back (call it first
# inside), and the caller records the subshell with `child_groups+=($!)`.
end_children_with_me() { trap 'end_child_groups; exit 143' TERM INT HUP; }
