# Sourced: sets BRAID_CUDA_HOME, BRAID_NVCC, BRAID_NCCL_INCLUDE, BRAID_NCCL_LIB where found.
# NCCL headers: the first of BRAID_NCCL_INCLUDE (as given), NCCL_HOME, the Python wheel (nvidia.nccl,
# the NCCL PyTorch loads), the CUDA toolkit and /usr that has nccl_device.h (NCCL >= 2.28's device
# API), else the first with nccl.h. The library: the first of those roots with libnccl (a wheel may
# ship the library without headers, or without the device ones).
BRAID_CUDA_HOME=""
for c in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
  if [ -n "$c" ] && [ -x "$c/bin/nvcc" ]; then BRAID_CUDA_HOME="$c"; break; fi
done
BRAID_NVCC=""
[ -n "$BRAID_CUDA_HOME" ] && BRAID_NVCC="$BRAID_CUDA_HOME/bin/nvcc"
BRAID_NCCL_WHEEL=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
braid_nccl_given=${BRAID_NCCL_INCLUDE:-}
braid_nccl_roots=("${NCCL_HOME:-}" "$BRAID_NCCL_WHEEL" "$BRAID_CUDA_HOME" /usr)
BRAID_NCCL_INCLUDE=""
for f in nccl_device.h nccl.h; do
  for d in "$braid_nccl_given" "${braid_nccl_roots[@]/%//include}"; do
    if [ -n "$d" ] && [ "$d" != /include ] && [ -f "$d/$f" ]; then BRAID_NCCL_INCLUDE=$d; break 2; fi
  done
done
BRAID_NCCL_LIB=""
for n in "${braid_nccl_roots[@]}"; do
  [ -n "$n" ] || continue
  for l in "$n/lib64" "$n/lib" "$n/lib/x86_64-linux-gnu"; do
    if [ -e "$l/libnccl.so.2" ] || [ -e "$l/libnccl.so" ]; then BRAID_NCCL_LIB="$l"; break 2; fi
  done
done
unset braid_nccl_given braid_nccl_roots
export BRAID_CUDA_HOME BRAID_NVCC BRAID_NCCL_INCLUDE BRAID_NCCL_LIB BRAID_NCCL_WHEEL
