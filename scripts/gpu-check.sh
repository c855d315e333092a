#!/usr/bin/env bash
# The device machine's entry point, kept by name: `scripts/gpu.sh check` (scripts/gpu.sh help).
exec "$(dirname "$0")/gpu.sh" check "$@"
