#!/usr/bin/env bash
# CTest `cpu`: scripts/find-cuda.sh and scripts/gpu-env.sh pick CUDA and NCCL in the order of
# src/braid/platform/toolchain.hpp, on fake installs: NCCL_HOME, then the Python wheel, then the
# CUDA toolkit; headers that have nccl_device.h before those that do not; a BRAID_NCCL_INCLUDE given
# by the caller first; and on a GPU machine the headers carried in .device-carry/nccl-include when no
# install has them. Every find-cuda.sh case runs twice, through the bash search (the bootstrap before
# braid is built) and through `braid env --shell` (the binary, $1): both must give the answer.
# Last, on this machine as it is, the two print the same lines.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd -P)
braid_bin=${1:-$src/build/braid}
[ -x "$braid_bin" ] || { echo "FAIL: no braid binary at '$braid_bin' (pass it as the first argument)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() {  # name got want
  if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: got '$2', want '$3'"; fails=$((fails + 1)); fi
}
mk_nccl() {  # root [device]: nccl.h (and nccl_device.h) under include/, libnccl.so.2 under lib/
  mkdir -p "$1/include" "$1/lib"
  touch "$1/include/nccl.h" "$1/lib/libnccl.so.2"
  [ "${2:-}" = device ] && touch "$1/include/nccl_device.h"
  return 0
}
cuda=$tmp/cuda
mkdir -p "$cuda/bin" "$cuda/lib64"
printf '#!/bin/sh\n' >"$cuda/bin/nvcc" && chmod +x "$cuda/bin/nvcc"
mk_nccl "$cuda" device
wheel_site=$tmp/site
wheel=$wheel_site/nvidia/nccl
mk_nccl "$wheel" device
touch "$wheel/__init__.py"
# Runs find-cuda.sh (or gpu-env.sh) in a clean shell and prints one variable: the bash search's
# answer when it equals braid's, else both.
probe_with() {  # how script var [env assignments...]
  local how=$1 script=$2 var=$3
  shift 3
  env -i PATH="$PATH" HOME="$tmp" CUDA_HOME="$cuda" "$how" "$@" bash -c "source '$script' >/dev/null 2>&1; echo \"\${$var}\""
}
# braid's answer straight from `braid env --shell` (find-cuda.sh would fall back to bash silently).
probe_braid() {  # var [env assignments...]
  local var=$1
  shift
  env -i PATH="$PATH" HOME="$tmp" CUDA_HOME="$cuda" "$@" bash -c "eval \"\$('$braid_bin' env --shell)\" && echo \"\${$var}\""
}
probe() {  # script var [env assignments...]
  local by_bash by_braid
  by_bash=$(probe_with BRAID_FIND_CUDA_BASH=1 "$@")
  if [ "$1" = "$find" ]; then by_braid=$(shift && probe_braid "$@"); else by_braid=$(probe_with BRAID_BIN="$braid_bin" "$@"); fi
  if [ "$by_bash" = "$by_braid" ]; then echo "$by_bash"; else echo "bash '$by_bash' != braid '$by_braid'"; fi
}
find=$src/scripts/find-cuda.sh
expect "nvcc from CUDA_HOME" "$(probe "$find" BRAID_NVCC)" "$cuda/bin/nvcc"
expect "the wheel's device headers before the toolkit's" "$(probe "$find" BRAID_NCCL_INCLUDE PYTHONPATH="$wheel_site")" "$wheel/include"
expect "the wheel's library before the toolkit's" "$(probe "$find" BRAID_NCCL_LIB PYTHONPATH="$wheel_site")" "$wheel/lib"
expect "the wheel's root is exported" "$(probe "$find" BRAID_NCCL_WHEEL PYTHONPATH="$wheel_site")" "$wheel"
rm "$wheel/include/nccl_device.h"
expect "a wheel without device headers: the toolkit's" "$(probe "$find" BRAID_NCCL_INCLUDE PYTHONPATH="$wheel_site")" "$cuda/include"
expect "... with the wheel's library" "$(probe "$find" BRAID_NCCL_LIB PYTHONPATH="$wheel_site")" "$wheel/lib"
home=$tmp/nccl-home
mk_nccl "$home" device
expect "NCCL_HOME first (headers)" "$(probe "$find" BRAID_NCCL_INCLUDE PYTHONPATH="$wheel_site" NCCL_HOME="$home")" "$home/include"
expect "NCCL_HOME first (library)" "$(probe "$find" BRAID_NCCL_LIB PYTHONPATH="$wheel_site" NCCL_HOME="$home")" "$home/lib"
given=$tmp/given
mk_nccl "$given" device
expect "BRAID_NCCL_INCLUDE given by the caller wins" \
  "$(probe "$find" BRAID_NCCL_INCLUDE PYTHONPATH="$wheel_site" NCCL_HOME="$home" BRAID_NCCL_INCLUDE="$given/include")" "$given/include"
expect "a given BRAID_NCCL_INCLUDE without nccl_device.h loses to one with it" \
  "$(probe "$find" BRAID_NCCL_INCLUDE PYTHONPATH="$wheel_site" BRAID_NCCL_INCLUDE="$wheel/include")" "$cuda/include"
expect "BRAID_NCCL_LIB given by the caller wins" \
  "$(probe "$find" BRAID_NCCL_LIB PYTHONPATH="$wheel_site" NCCL_HOME="$home" BRAID_NCCL_LIB="$given/lib")" "$given/lib"
expect "the wheel under a virtualenv's site-packages (python3 cannot import it)" \
  "$(mkdir -p "$tmp/venv/lib/python3.12/site-packages/nvidia" && cp -r "$wheel" "$tmp/venv/lib/python3.12/site-packages/nvidia/" &&
     probe "$find" BRAID_NCCL_WHEEL VIRTUAL_ENV="$tmp/venv")" "$tmp/venv/lib/python3.12/site-packages/nvidia/nccl"
expect "CUDA_HOME before CUDA_PATH" "$(probe "$find" BRAID_CUDA_HOME CUDA_PATH=/nonexistent)" "$cuda"
cuda2=$tmp/cuda2
mkdir -p "$cuda2/bin" && printf '#!/bin/sh\n' >"$cuda2/bin/nvcc" && chmod +x "$cuda2/bin/nvcc"
expect "CUDA_PATH when CUDA_HOME is empty" "$(probe "$find" BRAID_CUDA_HOME CUDA_HOME= CUDA_PATH="$cuda2/")" "$cuda2"
mkdir -p "$tmp/pathbin" && ln -s "$cuda2/bin/nvcc" "$tmp/pathbin/nvcc"
expect "nvcc in PATH: the toolkit behind the symlink" \
  "$(probe "$find" BRAID_CUDA_HOME CUDA_HOME= PATH="$tmp/pathbin:$PATH")" "$cuda2"
odd="$tmp/it's a dir"
mk_nccl "$odd" device
expect "a path with a quote and spaces survives eval" "$(probe "$find" BRAID_NCCL_INCLUDE NCCL_HOME="$odd")" "$odd/include"
expect "device headers of this repository" "$(probe "$find" BRAID_DEVICE_INCLUDE)" "$src/device/include"

fake_bin=$tmp/fake-braid
printf '#!/bin/sh\necho "BRAID_NVCC=/asked/braid"\n' >"$fake_bin" && chmod +x "$fake_bin"
expect "find-cuda.sh asks the braid binary when there is one" "$(probe_with BRAID_BIN="$fake_bin" "$find" BRAID_NVCC)" "/asked/braid"
expect "... and searches in bash when the binary fails" "$(probe_with BRAID_BIN=/bin/false "$find" BRAID_NVCC)" "$cuda/bin/nvcc"

# On this machine as it is: the bash search and `braid env --shell` print the same lines.
by_bash=$(BRAID_FIND_CUDA_BASH=1 bash "$find")
by_braid=$("$braid_bin" env --shell)
expect "this machine: bash search == braid env --shell" "$by_bash" "$by_braid"
echo "$by_braid" | sed 's/^/  /'

# gpu-env.sh in a copy of the scripts beside carried headers: used when no install has device ones.
repo=$tmp/repo
mkdir -p "$repo/scripts" "$repo/.device-carry/nccl-include"
cp "$src/scripts/find-cuda.sh" "$src/scripts/gpu-env.sh" "$repo/scripts/"
touch "$repo/.device-carry/nccl-include/nccl.h" "$repo/.device-carry/nccl-include/nccl_device.h"
rm "$cuda/include/nccl_device.h"
genv=$repo/scripts/gpu-env.sh
if [ -f /usr/include/nccl_device.h ]; then
  echo "skip carried-headers case: /usr/include has nccl_device.h"
else
  expect "gpu-env: carried headers when no install has nccl_device.h" \
    "$(probe "$genv" BRAID_NCCL_INCLUDE PYTHONPATH="$wheel_site")" "$repo/.device-carry/nccl-include"
  expect "gpu-env: nothing missing" "$(probe "$genv" braid_gpu_env_missing PYTHONPATH="$wheel_site")" ""
fi
expect "gpu-env: NVLink multicast off" "$(probe "$genv" NCCL_NVLS_ENABLE PYTHONPATH="$wheel_site")" "0"
expect "gpu-env: the wheel's library first on LD_LIBRARY_PATH" \
  "$(probe "$genv" LD_LIBRARY_PATH PYTHONPATH="$wheel_site" | cut -d: -f1)" "$wheel/lib"
rm "$wheel/lib/libnccl.so.2" "$cuda/lib/libnccl.so.2"
if [ -e /usr/lib/x86_64-linux-gnu/libnccl.so.2 ] || [ -e /usr/lib/libnccl.so.2 ] || [ -e /usr/lib64/libnccl.so.2 ]; then
  echo "skip missing-library case: /usr has libnccl"
else
  expect "gpu-env: a missing library is named" \
    "$(probe "$genv" braid_gpu_env_missing PYTHONPATH="$wheel_site" | grep -o 'libnccl.so.2 ([^)]*)' | head -1)" \
    "libnccl.so.2 (NCCL_HOME, the nvidia.nccl wheel, the CUDA toolkit)"
fi
[ "$fails" -eq 0 ] && echo "FIND-CUDA: PASS" || echo "FIND-CUDA: $fails FAILED"
[ "$fails" -eq 0 ]
