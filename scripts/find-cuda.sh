# Sourced: sets BRAID_CUDA_HOME, BRAID_NVCC, BRAID_NCCL_INCLUDE, BRAID_NCCL_LIB where found.
BRAID_CUDA_HOME=""
for c in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
  if [ -n "$c" ] && [ -x "$c/bin/nvcc" ]; then BRAID_CUDA_HOME="$c"; break; fi
done
BRAID_NVCC=""
[ -n "$BRAID_CUDA_HOME" ] && BRAID_NVCC="$BRAID_CUDA_HOME/bin/nvcc"
BRAID_NCCL_INCLUDE=""
BRAID_NCCL_LIB=""
wheel_nccl=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
for n in "${NCCL_HOME:-}" "$BRAID_CUDA_HOME" "$wheel_nccl" /usr; do
  if [ -n "$n" ] && [ -f "$n/include/nccl.h" ]; then
    BRAID_NCCL_INCLUDE="$n/include"
    for l in "$n/lib64" "$n/lib" "$n/lib/x86_64-linux-gnu"; do
      if [ -e "$l/libnccl.so.2" ] || [ -e "$l/libnccl.so" ]; then BRAID_NCCL_LIB="$l"; break; fi
    done
    break
  fi
done
export BRAID_CUDA_HOME BRAID_NVCC BRAID_NCCL_INCLUDE BRAID_NCCL_LIB
