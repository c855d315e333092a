# Sourced by the scripts that run on a GPU machine: NVLink multicast off, CUDA and NCCL found
# (scripts/find-cuda.sh), and the NCCL the ranks load on LD_LIBRARY_PATH. On a lent machine NCCL is
# the Python wheel's libnccl.so.2, which may come without device headers: then the headers carried by
# scripts/gpu.sh bundle (.device-carry/nccl-include) are used; their version is checked by
# scripts/gpu.sh check. Sets BRAID_NCCL_INCLUDE (a directory with nccl_device.h) and BRAID_NCCL_LIB
# (one with libnccl.so.2), or leaves either empty and says so in braid_gpu_env_missing.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
braid_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$braid_root/scripts/find-cuda.sh"
if [ ! -f "$BRAID_NCCL_INCLUDE/nccl_device.h" ]; then
  for d in "$braid_root/.device-carry/nccl-include" "$braid_root/.device-carry/dev-D/nccl-include"; do
    if [ -f "$d/nccl_device.h" ]; then BRAID_NCCL_INCLUDE=$d; break; fi
  done
fi
braid_gpu_env_missing=""
[ -n "$BRAID_NVCC" ] || braid_gpu_env_missing+="nvcc (CUDA_HOME, /usr/local/cuda*); "
[ -f "$BRAID_NCCL_INCLUDE/nccl_device.h" ] || braid_gpu_env_missing+="NCCL device headers nccl_device.h (NCCL_HOME, the CUDA toolkit, the nvidia.nccl wheel, .device-carry/nccl-include); "
[ -e "$BRAID_NCCL_LIB/libnccl.so.2" ] || braid_gpu_env_missing+="libnccl.so.2 (NCCL_HOME, the nvidia.nccl wheel, the CUDA toolkit); "
braid_carried_lib=""
[ -d "$braid_root/.device-carry/bin/lib" ] && braid_carried_lib="$braid_root/.device-carry/bin/lib:"
export LD_LIBRARY_PATH="$braid_carried_lib${BRAID_NCCL_LIB:+$BRAID_NCCL_LIB:}${BRAID_CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export BRAID_NCCL_INCLUDE BRAID_NCCL_LIB
unset braid_carried_lib
