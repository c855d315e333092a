#!/usr/bin/env bash
# Installs every Debian package braid needs (idempotent) and reports what it found of CUDA and
# NCCL. CUDA and NCCL are found, never downloaded: CUDA_HOME, NCCL_HOME, /usr/local/cuda*, and
# the NCCL of a Python wheel (site-packages/nvidia/nccl).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git python3 sqlite3 procps
  libsqlite3-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev libspdlog-dev
  libcurl4-openssl-dev libssl-dev libxxhash-dev libcpp-httplib-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang-format
  openmpi-bin libopenmpi-dev
  slurmctld slurmd slurm-client munge
  chromium chromium-driver
)
# The web UI's browser tests drive Debian's chromium through playwright-core (npm, web/); a
# node from elsewhere (e.g. nodesource, which bundles npm) is kept.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

web_dir="$(dirname "$0")/../web"
if [ ! -f "$web_dir/node_modules/playwright-core/package.json" ]; then
  echo "setup: installing web/ test dependencies (npm ci)"
  (cd "$web_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
    echo "setup: npm ci failed in web/: browser tests will be skipped"
fi

# CUDA / NCCL discovery (informational here): braid's one order (src/braid/platform/toolchain.hpp),
# in bash before braid is built, else from `braid env --shell`.
source "$(dirname "$0")/find-cuda.sh"
if [ -n "${BRAID_NVCC:-}" ]; then
  echo "setup: nvcc $BRAID_NVCC"
else
  echo "setup: no nvcc found (CUDA_HOME, /usr/local/cuda*): GPU workloads cannot be built here"
fi
if [ -n "${BRAID_NCCL_INCLUDE:-}" ]; then
  echo "setup: NCCL headers $BRAID_NCCL_INCLUDE, library ${BRAID_NCCL_LIB:-<none>}"
else
  echo "setup: no NCCL found (NCCL_HOME, CUDA include dir, python wheel nvidia.nccl): device workloads cannot be built"
fi
