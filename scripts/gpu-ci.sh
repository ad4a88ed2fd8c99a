#!/usr/bin/env bash
# Nightly GPU CI / GPU check: builds against the PyTorch install's libtorch (CUDA), runs every test
# (GPU tests included), replays every scenario under scenarios/ on the GPU with --check (each
# scenario's expect: rules must hold: exit 3 otherwise, and this script fails), checks that
# compile-only mode works with this libtorch (--target b200), and runs the launch benchmark.
# Results go to $OUT (default ./out/gpu): merged results JSON, JUnit, Markdown, HTML, trace, bench
# JSON, and one log. The kernel-family benchmarks write <name>.json / <name>.txt there too.
#
#   OUT=/tmp/gpu scripts/gpu-ci.sh [sm arch number, default: the GPU's, e.g. 90]
#
# GPU_CI_STEPS (default "build tests replay compile-only bench") runs a subset, e.g. the build and
# tests in one job and the replays in a second on the same build directory; each listed step
# fails the script as it would in a full run. GPU_CI_SCENARIOS (default "scenarios/*.yaml") limits
# the replay and compile-only steps to some scenarios, e.g. to split the replays over two jobs.
# GPU_CI_CTEST_JOBS (default 4) sets CTest's parallelism; GPU_CI_CTEST_ARGS adds CTest arguments,
# e.g. "-I 1,600" and "-I 601," to split the tests over two jobs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
LOG="$OUT/gpu-ci.log"
: >"$LOG"
step() { echo "== $*" | tee -a "$LOG"; }
ARCH=${1:-$(python3 -c 'import torch; p=torch.cuda.get_device_capability(); print(p[0]*10+p[1])')}
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
BUILD=${COLDSTART_BUILD_DIR:-build-gpu}
STEPS=" ${GPU_CI_STEPS:-build tests replay compile-only bench} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
rc=0
read -r -a SCENARIOS <<<"${GPU_CI_SCENARIOS:-$(echo scenarios/*.yaml)}"

if want build; then
step "configure (libtorch from $TORCH_PREFIX, CUDA arch $ARCH)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$LOG" 2>&1
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" >>"$LOG" 2>&1 || { echo "configure failed" | tee -a "$LOG"; tail -40 "$LOG"; exit 1; }
step "build"
cmake --build "$BUILD" -j"$(nproc)" >>"$LOG" 2>&1 || { echo "build failed" | tee -a "$LOG"; grep -E "error|Error" "$LOG" | head -40; exit 1; }
fi

if want tests; then
step "tests"
(cd "$BUILD" && ctest --output-on-failure -j"${GPU_CI_CTEST_JOBS:-4}" --timeout 600 ${GPU_CI_CTEST_ARGS:-}) >>"$LOG" 2>&1 || rc=1
grep -E "tests passed|tests failed|Skipped|\*\*\*Failed|Total Test" "$LOG" | tail -20

step "doctor"
"$BUILD/coldstart" doctor >>"$LOG" 2>&1 || rc=1
fi

if want replay; then
step "replay (every scenario, ${COLDSTART_REPEAT:-3} runs per strategy, expectations checked)"
"$BUILD/coldstart" replay "${SCENARIOS[@]}" --check \
  --device cuda --repeat "${COLDSTART_REPEAT:-3}" --json "$OUT/results.json" --junit "$OUT/junit.xml" \
  --md "$OUT/report.md" --html "$OUT/report.html" --trace "$OUT/trace.json" 2>>"$LOG" | tee -a "$LOG"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "replay failed or an expectation is unmet" | tee -a "$LOG"; rc=1; }
fi

if want compile-only; then
step "compile-only with this libtorch (--target b200, every scenario, expectations checked)"
"$BUILD/coldstart" replay "${SCENARIOS[@]}" --check --device compile-only --target b200 \
  --json "$OUT/compile_only_b200.json" 2>>"$LOG" | tee -a "$LOG" | grep -E "expectations|UNMET"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "compile-only replay failed or an expectation is unmet" | tee -a "$LOG"; rc=1; }
fi

if want bench; then
step "launch benchmark"
"$BUILD/bench/launch_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_out="$OUT/launch_bench.json" --benchmark_out_format=json >>"$LOG" 2>&1 || rc=1
grep -E "^BM_" "$LOG" | tail -12
step "kernel family benchmarks (GDN prefill chain, GDN decode, mamba ops, fused MoE, Mamba2, DeepGEMM-style FP8 GEMM)"
for b in gdn_chunk_bench gdn_decode_bench mamba_ops_bench fused_moe_bench mamba_ssu_bench mamba_ssd_bench deepgemm_bench; do
  [ -x "$BUILD/bench/$b" ] || continue
  "$BUILD/bench/$b" --benchmark_out="$OUT/$b.json" --benchmark_out_format=json \
    >"$OUT/$b.txt" 2>&1 || { echo "$b failed" | tee -a "$LOG"; rc=1; }
done
fi
exit $rc
