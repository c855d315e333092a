#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs onto a GPU machine that has CUDA, cuBLAS, nvcc and the
# NCCL wheel but none of our Debian -dev libraries: stripped braid binaries built here, the
# non-system shared libraries they load (found with ldd, placed in lib/ beside them: rpath
# $ORIGIN/lib), and NCCL's device headers when the wheel there lacks them.
# Usage: scripts/bundle-for-device.sh [build dir] [out dir]   (defaults: build .device-carry)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-.device-carry}
rm -rf "$out/bin"
mkdir -p "$out/bin/lib"
system='linux-vdso|ld-linux|libc\.so|libresolv|libutil|libnss|libm\.so|libstdc\+\+|libgcc_s|libpthread|libdl\.so|librt\.so|libcuda\.so|libcudart|libcublas|libnccl'
for exe in "$build/braid" "$build/tests/gpu/gpu_test_primitives" "$build/tests/gpu/gpu_test_harness" "$build/tests/gpu/gpu_test_redteam" "$build/tests/gpu/gpu_test_harness_report" \
           "$build/device/bench_allgather" "$build/device/bench_gemm_split_probe" "$build/tests/gpu/cascade/gpu_cascade_test" \
           "$build/tests/rewrite_gate_driver" "$build/tests/annotate_gate_driver" \
           "$build/tests/test_cli" "$build/tests/profile_prompt_driver"; do
  [ -x "$exe" ] || { echo "bundle: missing $exe (build it first)"; exit 1; }
  strip -o "$out/bin/$(basename "$exe")" "$exe"
  { ldd "$exe" | awk '/=> \// {print $3}' | grep -Ev "$system" || true; } | while read -r lib; do
    cp -Lf "$lib" "$out/bin/lib/"
  done
done
source scripts/find-cuda.sh
mkdir -p "$out/nccl-include"
cp -r "$BRAID_NCCL_INCLUDE"/nccl.h "$BRAID_NCCL_INCLUDE"/nccl_device.h "$BRAID_NCCL_INCLUDE"/nccl_device "$out/nccl-include/"
du -sh "$out"
