#!/usr/bin/env bash
# Runs every test: set up, build, then CTest. GPU tests skip (with the reason) where there is no
# GPU; CTest counts them as skipped, never as passed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd "${COLDSTART_BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)" "$@"
