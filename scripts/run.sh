#!/usr/bin/env bash
# The main job: set up, build, and replay the default scenario for every strategy, printing the
# comparison table and writing out/qwen3-8b-turboquant.json. Extra arguments go to
# `coldstart replay` (e.g. --set cudagraph_mode=full_and_piecewise, --device compile-only).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p out
exec "${COLDSTART_BUILD_DIR:-build}/coldstart" replay scenarios/qwen3-8b-turboquant.yaml \
  --json out/qwen3-8b-turboquant.json "$@"
