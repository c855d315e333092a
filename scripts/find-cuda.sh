# Sourced: sets BRAID_CUDA_HOME, BRAID_NVCC, BRAID_NCCL_INCLUDE, BRAID_NCCL_LIB (a folder),
# BRAID_NCCL_WHEEL and BRAID_DEVICE_INCLUDE ("" where nothing was found). Run (not sourced): prints
# them as NAME='value' lines.
#
# The search order is braid's, written once in src/braid/platform/toolchain.hpp: when a braid
# binary exists (BRAID_BIN, build/braid or .device-carry/bin/braid) this asks it
# (`braid env --shell`). Before braid is built (scripts/setup.sh, and CMake, which needs NCCL to
# configure the device targets) the same order is followed here in bash;
# tests/scripts/find_cuda_test.sh checks that both agree.
# BRAID_FIND_CUDA_BASH=1 forces the bash search.

# The bash search: prints NAME='value' lines like `braid env --shell`. Runs in a subshell
# (LC_ALL=C: globs sorted like the C++'s std::sort of names).
braid_find_cuda_bash() (
  LC_ALL=C
  shopt -s nullglob
  root=$1
  strip() { local p=$1; while [ "${#p}" -gt 1 ] && [ "${p%/}" != "$p" ]; do p=${p%/}; done; printf '%s' "$p"; }
  q() { printf "%s='%s'\n" "$1" "${2//\'/\'\\\'\'}"; }
  # nvcc: CUDA_HOME, CUDA_PATH, the folder above each nvcc in PATH, /usr/local/cuda, /usr/local/cuda-* newest first.
  homes=("$(strip "${CUDA_HOME:-}")" "$(strip "${CUDA_PATH:-}")")
  IFS=: read -ra path_dirs <<<"${PATH:-}"
  for d in "${path_dirs[@]}"; do
    d=$(strip "$d")
    [ "${d#/}" != "$d" ] && [ -f "$d/nvcc" ] && [ -x "$d/nvcc" ] || continue
    n=$(readlink -f "$d/nvcc") && homes+=("$(dirname "$(dirname "$n")")")
  done
  homes+=(/usr/local/cuda)
  while IFS= read -r d; do homes+=("$d"); done < <(for d in /usr/local/cuda-*; do echo "$d"; done | sort -t- -k2 -V -r -s)
  cuda_home="" nvcc=""
  for h in "${homes[@]}"; do
    if [ -n "$h" ] && [ -f "$h/bin/nvcc" ] && [ -x "$h/bin/nvcc" ]; then cuda_home=$h nvcc=$h/bin/nvcc; break; fi
  done
  # NCCL roots: NCCL_HOME, the Python wheel(s), the CUDA toolkit, /usr.
  roots=()
  [ -n "${NCCL_HOME:-}" ] && roots+=("$(strip "$NCCL_HOME")")
  wheels=()
  w=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null | awk 'NF { l = $0 } END { print l }')
  [ -n "$w" ] && wheels+=("$w")
  prefixes=()
  [ -n "${VIRTUAL_ENV:-}" ] && prefixes+=("$(strip "$VIRTUAL_ENV")/lib")
  [ -n "${HOME:-}" ] && prefixes+=("$(strip "$HOME")/.local/lib")
  for p in "${prefixes[@]}" /usr/local/lib /usr/lib; do
    for py in "$p"/python3*; do
      for pk in site-packages dist-packages; do [ -d "$py/$pk/nvidia/nccl" ] && wheels+=("$py/$pk/nvidia/nccl"); done
    done
  done
  roots+=("${wheels[@]}")
  [ -n "$cuda_home" ] && roots+=("$cuda_home")
  roots+=(/usr)
  # Headers: BRAID_NCCL_INCLUDE, then <root>/include; the first with nccl_device.h, else with nccl.h.
  incs=()
  [ -n "${BRAID_NCCL_INCLUDE:-}" ] && incs+=("$(strip "$BRAID_NCCL_INCLUDE")")
  for r in "${roots[@]}"; do incs+=("$r/include"); done
  include=""
  for need in nccl_device.h nccl.h; do
    for d in "${incs[@]}"; do
      if [ -f "$d/nccl.h" ] && [ -f "$d/$need" ]; then include=$d; break 2; fi
    done
  done
  # Library: BRAID_NCCL_LIB, then <root>/lib64, lib, lib/x86_64-linux-gnu; libnccl.so.2, else libnccl.so.
  libs=()
  [ -n "${BRAID_NCCL_LIB:-}" ] && libs+=("$(strip "$BRAID_NCCL_LIB")")
  for r in "${roots[@]}"; do libs+=("$r/lib64" "$r/lib" "$r/lib/x86_64-linux-gnu"); done
  lib=""
  for d in "${libs[@]}"; do
    if [ -f "$d/libnccl.so.2" ] || [ -f "$d/libnccl.so" ]; then lib=$d; break; fi
  done
  # braid's device headers: BRAID_DEVICE_INCLUDE, then this repository's device/include.
  device=""
  for d in "${BRAID_DEVICE_INCLUDE:-}" "$root/device/include"; do
    if [ -n "$d" ] && [ -f "$d/braid/harness.cuh" ]; then device=$(cd "$d" && pwd -P); break; fi
  done
  q BRAID_CUDA_HOME "$cuda_home"
  q BRAID_NVCC "$nvcc"
  q BRAID_NCCL_INCLUDE "$include"
  q BRAID_NCCL_LIB "$lib"
  q BRAID_NCCL_WHEEL "${wheels[0]:-}"
  q BRAID_DEVICE_INCLUDE "$device"
)

braid_find_cuda_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
braid_find_cuda_out=""
for braid_find_cuda_bin in "${BRAID_BIN:-}" "$braid_find_cuda_root/build/braid" "$braid_find_cuda_root/.device-carry/bin/braid"; do
  [ -z "${BRAID_FIND_CUDA_BASH:-}" ] && [ -n "$braid_find_cuda_bin" ] && [ -x "$braid_find_cuda_bin" ] || continue
  braid_find_cuda_out=$("$braid_find_cuda_bin" env --shell 2>/dev/null) || braid_find_cuda_out=""
  break
done
# An older binary without `braid env`, or none: the bash search.
[ -n "$braid_find_cuda_out" ] || braid_find_cuda_out=$(braid_find_cuda_bash "$braid_find_cuda_root")
eval "$braid_find_cuda_out"
export BRAID_CUDA_HOME BRAID_NVCC BRAID_NCCL_INCLUDE BRAID_NCCL_LIB BRAID_NCCL_WHEEL BRAID_DEVICE_INCLUDE
if [ "${BASH_SOURCE[0]}" = "$0" ]; then printf '%s\n' "$braid_find_cuda_out"; fi
unset braid_find_cuda_root braid_find_cuda_bin braid_find_cuda_out
