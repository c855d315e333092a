# Sourced by the GPU gate tests of tests/convert: `gpu_gate_setup <script> <build dir> <driver
# target> <driver override>` sets `root` and `driver` (the override's value, else the target in
# <build dir>/tests), points binaries built elsewhere (a bundle carried to the GPU machine) at this
# checkout's prompts and device headers, keeps NVLink multicast off, and exits 77 (skipped) below
# 2 GPUs or 1 when the driver is missing.
gpu_gate_setup() {
  local here
  here=$(cd "$(dirname "$1")" && pwd)
  root=$(cd "$here/../.." && pwd)
  export BRAID_PROMPTS_DIR=${BRAID_PROMPTS_DIR:-$root/prompts}
  export BRAID_DEVICE_INCLUDE=${BRAID_DEVICE_INCLUDE:-$root/device/include}
  export NCCL_NVLS_ENABLE=0
  if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then
    echo "SKIPPED: fewer than 2 GPUs"
    exit 77
  fi
  driver=${4:-$2/tests/$3}
  if [ ! -x "$driver" ]; then
    echo "no $driver: build the $3 target"
    exit 1
  fi
}
