#!/usr/bin/env bash
# CTest `cpu`: scripts/find-cuda.sh and scripts/gpu-env.sh pick CUDA and NCCL in the documented
# order, on fake installs: NCCL_HOME, then the Python wheel, then the CUDA toolkit; headers that
# have nccl_device.h before those that do not; a BRAID_NCCL_INCLUDE given by the caller first; and
# on a GPU machine the headers carried in .device-carry/nccl-include when no install has them.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
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
# Runs find-cuda.sh (or gpu-env.sh) in a clean shell and prints one variable.
probe() {  # script var [env assignments...]
  local script=$1 var=$2
  shift 2
  env -i PATH="$PATH" HOME="$tmp" CUDA_HOME="$cuda" "$@" bash -c "source '$script' >/dev/null 2>&1; echo \"\${$var}\""
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
