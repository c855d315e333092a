#!/usr/bin/env bash
# Fresh machine: install, build, and run braid's main job on the bundled CPU example.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
rm -rf results/matmul_cpu
build/braid evolve examples/matmul_cpu --results results/matmul_cpu "$@"
build/braid top results/matmul_cpu
