#!/usr/bin/env bash
# Runs every test: set up, build, then CTest. GPU tests skip (with the reason) where there is no
# GPU; CTest counts them as skipped, never as passed.
#
# Then the sanitizer pass: the torch-free parser, isolation and cache tests (CTest label
# `sanitize`: the scenario loader's, expect, result, isolate, jit and paths tests) and the
# scenario / HF config fuzzer (harness/replay/fuzz, COLDSTART_FUZZ_SECONDS, default 10), built
# with AddressSanitizer + UndefinedBehaviorSanitizer into a second tree, build-asan
# (COLDSTART_ASAN_BUILD_DIR), which builds only those targets. A fuzz finding is saved under
# build-asan/fuzz-findings/ and fails the run. COLDSTART_SANITIZE=0 skips the pass. Arguments go
# to both CTest runs. The exit status is non-zero when either pass fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${COLDSTART_BUILD_DIR:-build}
rc=0
(cd "$BUILD_DIR" && ctest --output-on-failure -j"$(nproc)" "$@") || rc=$?

if [ "${COLDSTART_SANITIZE:-1}" != 0 ]; then
  ASAN_DIR=${COLDSTART_ASAN_BUILD_DIR:-build-asan}
  start=$(date +%s)
  # The CUDA toolkit setup.sh found (it configured the first tree with it).
  cuda_root=$(sed -n 's/^CUDAToolkit_ROOT:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt" | head -n1)
  cmake -S . -B "$ASAN_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLDSTART_SANITIZE=ON \
    -DCOLDSTART_BUILD_BENCH=OFF ${cuda_root:+-DCUDAToolkit_ROOT="$cuda_root"} \
    -DCOLDSTART_FUZZ_SECONDS="${COLDSTART_FUZZ_SECONDS:-10}" ${COLDSTART_CMAKE_ARGS:-} >/dev/null
  cmake --build "$ASAN_DIR" --target cs_sanitize_tests -j"$(nproc)"
  built=$(date +%s)
  # UBSan: print the stack of a report (-fno-sanitize-recover makes every report fatal).
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
  (cd "$ASAN_DIR" && ctest -L sanitize --output-on-failure -j"$(nproc)" "$@") || rc=$?
  echo "test.sh: sanitizer pass: build $((built - start)) s, tests $(($(date +%s) - built)) s" >&2
fi
exit "$rc"
