#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test. GPU tests (label gpu)
# report themselves as skipped where no GPU exists.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900 "$@"
