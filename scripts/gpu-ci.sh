#!/usr/bin/env bash
# Nightly GPU CI / GPU check: builds against the PyTorch install's libtorch (CUDA), runs every test
# (GPU tests included), replays every scenario under scenarios/ on the GPU with --check (each
# scenario's expect: rules must hold, else this script fails), checks that compile-only mode
# works with this libtorch (--target b200), and runs the benchmarks. Everything goes to $OUT
# (default ./out/gpu): gpu-ci.log, the merged results (results.json) and their JUnit, Markdown,
# HTML and trace reports, one log and results file per scenario under replay/, bench JSON.
#
#   scripts/gpu-ci.sh [--preset tests|replay|nightly] [SM, default: the GPU's, e.g. 90]
#
# Presets: two calls of at most 10 minutes each on an H200 (16 cores), one after the other on the
# same build directory (the second rebuilds nothing when the tree is current, else it builds):
#   tests    build, tests (`ctest -j$(nproc)`: unit, compile, gpu and e2e labels; the e2e tests
#            replay every scenario in compile-only mode with this libtorch), doctor, bench
#   replay   build, replay (every scenario once on the GPU, one scenario at a time)
#   nightly  every step, compile-only --target b200 too, and the replay with 3 runs per strategy:
#            timings fit to compare with baselines/ (longer than one call; see README.md)
# Without --preset every step runs as in nightly. GPU_CI_STEPS (e.g. "build tests") replaces the
# preset's steps; each listed step fails the script as it would in a full run.
#
# Other knobs: GPU_CI_SCENARIOS (space-separated paths or globs relative to the repository root,
# default "scenarios/*.yaml") limits the replay and compile-only steps; GPU_CI_SHARD=K/N keeps the
# K-th of every N of those (split the replay over N device calls when one call cannot hold it, e.g.
# after the machine went cold and the call must build again; give each part its own OUT and
# fold the parts' results.json with `coldstart merge`); COLDSTART_REPEAT (runs per
# strategy, default: the preset's); GPU_CI_REPLAY_JOBS (scenarios replayed at once, default 1:
# each replay sizes its KV cache from its scenario's gpu_memory_utilization, 0.9 by default, so
# two at once run out of memory unless their scenarios set less); GPU_CI_CTEST_JOBS (default
# nproc; each GPU test declares its threads to CTest) and GPU_CI_CTEST_ARGS (e.g. "-L gpu",
# "-LE e2e") shape the tests step. A GPU run needs python3's torch with CUDA and a visible GPU
# (exit 2 otherwise). Relative OUT and COLDSTART_BUILD_DIR are taken from the repository root.
# COLDSTART_BUILD_DIR (default build-gpu). GPU_CI_BENCH_BASELINE (a directory or file of bench
# JSON, relative to the repository root; default baselines/bench-<gpu>, e.g. bench-h200, when it
# exists; "" for none): the bench report's earlier run.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,34p' "$0"; }
die() { echo "gpu-ci: $*" >&2; exit 2; }
PRESET=""
ARCH=""
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) [ $# -ge 2 ] && [ -n "$2" ] || die "--preset needs a name (tests, replay, nightly)"; PRESET=$2; shift 2 ;;
    --preset=*) PRESET=${1#--preset=}; [ -n "$PRESET" ] || die "--preset needs a name (tests, replay, nightly)"; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [ -z "$ARCH" ] || die "one SM number at most (got '$ARCH' and '$1')"
       [[ "$1" =~ ^[1-9][0-9]{1,2}$ ]] || die "'$1' is not an SM number such as 86, 90 or 100"
       ARCH=$1; shift ;;
  esac
done
case "$PRESET" in
  tests)       steps="build tests bench";        repeat=1 ;;
  replay)      steps="build replay";             repeat=1 ;;
  nightly|"")  steps="build tests replay compile-only bench"; repeat=3 ;;
  *) die "unknown preset '$PRESET' (tests, replay, nightly)" ;;
esac
STEPS=" ${GPU_CI_STEPS:-$steps} "
[ -n "${STEPS// /}" ] || die "GPU_CI_STEPS names no step (build tests replay compile-only bench)"
for s in $STEPS; do
  case "$s" in build|tests|replay|compile-only|bench) ;; *) die "unknown step '$s' in GPU_CI_STEPS (build tests replay compile-only bench)" ;; esac
done
REPEAT=${COLDSTART_REPEAT:-$repeat}
REPLAY_JOBS=${GPU_CI_REPLAY_JOBS:-1}
[[ "$REPEAT" =~ ^[1-9][0-9]{0,2}$ ]] || die "COLDSTART_REPEAT='$REPEAT' is not an integer in 1..999"
[[ "$REPLAY_JOBS" =~ ^[1-9][0-9]{0,2}$ ]] || die "GPU_CI_REPLAY_JOBS='$REPLAY_JOBS' is not an integer in 1..999"
[ -z "${GPU_CI_CTEST_JOBS:-}" ] || [[ "$GPU_CI_CTEST_JOBS" =~ ^[1-9][0-9]{0,2}$ ]] ||
  die "GPU_CI_CTEST_JOBS='$GPU_CI_CTEST_JOBS' is not an integer in 1..999"
# Scenario paths: space-separated, globs expanded (relative to the repository root).
SCENARIOS=()
if [ -n "${GPU_CI_BENCH_BASELINE:-}" ] && [ ! -e "$GPU_CI_BENCH_BASELINE" ]; then
  die "GPU_CI_BENCH_BASELINE='$GPU_CI_BENCH_BASELINE' names no file or directory (relative paths are taken from the repository root)"
fi
for p in ${GPU_CI_SCENARIOS:-scenarios/*.yaml}; do
  [ -f "$p" ] || die "GPU_CI_SCENARIOS: '$p' is no scenario file (a glob that matched nothing?)"
  SCENARIOS+=("$p")
done
[ ${#SCENARIOS[@]} -gt 0 ] || die "GPU_CI_SCENARIOS names no scenario"
# GPU_CI_SHARD=K/N keeps the K-th of every N scenarios (1-based, in the order above).
if [ -n "${GPU_CI_SHARD:-}" ]; then
  [[ "$GPU_CI_SHARD" =~ ^([1-9][0-9]?)/([1-9][0-9]?)$ ]] && [ "${BASH_REMATCH[1]}" -le "${BASH_REMATCH[2]}" ] ||
    die "GPU_CI_SHARD='$GPU_CI_SHARD': expected K/N with 1 <= K <= N <= 99, e.g. 1/2"
  k=${BASH_REMATCH[1]}; n=${BASH_REMATCH[2]}
  kept=()
  for i in "${!SCENARIOS[@]}"; do [ $(( i % n + 1 )) -eq "$k" ] && kept+=("${SCENARIOS[$i]}"); done
  [ ${#kept[@]} -gt 0 ] || die "GPU_CI_SHARD=$GPU_CI_SHARD keeps none of the ${#SCENARIOS[@]} scenario(s)"
  SCENARIOS=("${kept[@]}")
fi

# A GPU CI run needs PyTorch with CUDA and a GPU it can see: without them CMake would take a CPU
# libtorch and every GPU test would skip, which must not pass for a green GPU run.
want() { [[ "$STEPS" == *" $1 "* ]]; }
if want build || want tests || want replay; then
  python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)' 2>/dev/null
  case $? in
    0) ;;
    3) die "python3's torch sees no CUDA GPU (torch.cuda.is_available() is False)" ;;
    *) die "python3 cannot import torch: a GPU CI run builds against PyTorch's libtorch" ;;
  esac
fi

BUILD=${COLDSTART_BUILD_DIR:-build-gpu}
if ! want build && [ ! -x "$BUILD/coldstart" ]; then
  die "no coldstart in $BUILD: add the build step (GPU_CI_STEPS=\"build ...\") or set COLDSTART_BUILD_DIR"
fi

OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
LOG="$OUT/gpu-ci.log"
: >"$LOG"
rc=0
summary=()
t_step=0
step() { t_step=$(date +%s); echo "== $* ($(date -u +%H:%M:%S))" | tee -a "$LOG"; }
# done_step NAME STATUS: one summary line per step, with its wall time.
done_step() {
  local s=$(( $(date +%s) - t_step ))
  summary+=("$(printf '%-13s %-5s %4d s' "$1" "$2" "$s")")
  echo "== $1: $2 in $s s" | tee -a "$LOG"
}
finish() {
  echo "== gpu-ci summary (preset ${PRESET:-nightly}, steps:$STEPS)" | tee -a "$LOG"
  printf '   %s\n' "${summary[@]}" | tee -a "$LOG"
  exit "$1"
}

if want build; then
  ARCH=${ARCH:-$(python3 -c 'import torch; p=torch.cuda.get_device_capability(); print(p[0]*10+p[1])')}
  TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
fi

if want build; then
  step "configure + build (libtorch from $TORCH_PREFIX, CUDA arch $ARCH)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$LOG" 2>&1
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
       -DCOLDSTART_COMPILE_ALL_ARCHS=ON \
       -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" >>"$LOG" 2>&1; then
    echo "configure failed" | tee -a "$LOG"; tail -40 "$LOG"; done_step build FAIL; finish 1
  fi
  if ! grep -q "CUDA backend: ON" "$LOG"; then
    echo "configure found a libtorch without CUDA (see $LOG)" | tee -a "$LOG"; done_step build FAIL; finish 1
  fi
  if ! cmake --build "$BUILD" -j"$(nproc)" >>"$LOG" 2>&1; then
    echo "build failed" | tee -a "$LOG"; grep -E "error|Error" "$LOG" | head -40
    done_step build FAIL; finish 1
  fi
  done_step build ok
fi

if want tests; then
  step "tests (ctest -j${GPU_CI_CTEST_JOBS:-$(nproc)} ${GPU_CI_CTEST_ARGS:-})"
  st=ok
  # shellcheck disable=SC2086
  (cd "$BUILD" && ctest --output-on-failure -j"${GPU_CI_CTEST_JOBS:-$(nproc)}" --timeout 600 \
     --output-junit "$(realpath -m "$OUT")/ctest-junit.xml" ${GPU_CI_CTEST_ARGS:-}) >>"$LOG" 2>&1 || st=FAIL
  grep -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Timeout|Exception|Total Test time" "$LOG" | tail -25
  # Per-label counts and times (CTest prints them at the end of a run).
  sed -n '/^Label Time Summary/,/^Total Test time/p' "$LOG" | tail -12
  "$BUILD/coldstart" doctor >>"$LOG" 2>&1 || st=FAIL
  [ "$st" = ok ] || rc=1
  done_step tests "$st"
fi

if want replay; then
  step "replay (${#SCENARIOS[@]} scenarios, $REPEAT runs per strategy, $REPLAY_JOBS at a time, expectations checked)"
  dir="$OUT/replay"
  rm -rf "$dir"; mkdir -p "$dir"
  rm -f "$OUT/results.json" "$OUT/junit.xml" "$OUT/report.md" "$OUT/report.html" "$OUT/trace.json" \
    "$OUT/table.txt"
  # One `coldstart replay --check` per scenario, at most REPLAY_JOBS at once; each writes
  # <name>.json / <name>.log / <name>.rc / <name>.seconds.
  for s in "${SCENARIOS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$REPLAY_JOBS" ]; do wait -n; done
    name=$(basename "$s" .yaml)
    (
      t0=$(date +%s)
      "$BUILD/coldstart" replay "$s" --check --device cuda --repeat "$REPEAT" \
        --json "$dir/$name.json" >"$dir/$name.log" 2>&1
      echo $? >"$dir/$name.rc"
      echo $(( $(date +%s) - t0 )) >"$dir/$name.seconds"
    ) &
  done
  wait
  st=ok
  jsons=()
  for s in "${SCENARIOS[@]}"; do
    name=$(basename "$s" .yaml)
    [ -f "$dir/$name.json" ] && jsons+=("$dir/$name.json")
    r=$(cat "$dir/$name.rc" 2>/dev/null || echo "?")
    echo "-- $name: exit $r in $(cat "$dir/$name.seconds" 2>/dev/null || echo '?') s" | tee -a "$LOG"
    cat "$dir/$name.log" >>"$LOG"
    if [ "$r" != 0 ]; then
      st=FAIL
      grep -E "UNMET|expectations|error|Error" "$dir/$name.log" | head -20
      echo "   last lines of $dir/$name.log:"; tail -n 5 "$dir/$name.log" | sed 's/^/   /'
    fi
  done
  if [ ${#jsons[@]} -gt 0 ] &&
     "$BUILD/coldstart" merge "${jsons[@]}" -o "$OUT/results.json" >>"$LOG" 2>&1; then
    "$BUILD/coldstart" report "$OUT/results.json" --junit "$OUT/junit.xml" --md "$OUT/report.md" \
      --html "$OUT/report.html" --trace "$OUT/trace.json" >"$OUT/table.txt" 2>>"$LOG" || st=FAIL
    cat "$OUT/table.txt" >>"$LOG"
  else
    st=FAIL
  fi
  [ "$st" = ok ] || { echo "a replay failed or an expectation is unmet" | tee -a "$LOG"; rc=1; }
  done_step replay "$st"
fi

if want compile-only; then
  step "compile-only with this libtorch (--target b200, every scenario, expectations checked)"
  st=ok
  "$BUILD/coldstart" replay "${SCENARIOS[@]}" --check --device compile-only --target b200 \
    --json "$OUT/compile_only_b200.json" 2>>"$LOG" | tee -a "$LOG" | grep -E "expectations|UNMET"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "compile-only replay failed or an expectation is unmet" | tee -a "$LOG"; st=FAIL; rc=1; }
  done_step compile-only "$st"
fi

if want bench; then
  step "benchmarks (launch, then the kernel families)"
  st=ok
  rm -f "$OUT"/*_bench.json "$OUT"/*_bench.txt "$OUT/bench-report.md"  # an earlier run's are not this one's
  "$BUILD/bench/launch_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    --benchmark_out="$OUT/launch_bench.json" --benchmark_out_format=json >>"$LOG" 2>&1 || st=FAIL
  grep -E "^BM_" "$LOG" | tail -12
  for b in gdn_chunk_bench gdn_decode_bench paged_decode_bench mamba_ops_bench fused_moe_bench mamba_ssu_bench mamba_ssd_bench deepgemm_bench; do
    [ -x "$BUILD/bench/$b" ] || continue
    t0=$(date +%s)
    "$BUILD/bench/$b" --benchmark_out="$OUT/$b.json" --benchmark_out_format=json \
      >"$OUT/$b.txt" 2>&1 || { echo "$b failed" | tee -a "$LOG"; st=FAIL; }
    echo "-- $b: $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
  done
  # One table of every bench's rate against the device's ceilings (coldstart bench-report),
  # with the time and speed-up against baselines/bench-<gpu> (e.g. bench-h200 for an "NVIDIA
  # H200") when that directory exists, or against GPU_CI_BENCH_BASELINE ("" for none).
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | awk '{print tolower($2)}')
  base=${GPU_CI_BENCH_BASELINE-baselines/bench-$gpu}
  base_args=()
  [ -n "$base" ] && [ -e "$base" ] && base_args=(--baseline "$base") && echo "bench baseline: $base" | tee -a "$LOG"
  "$BUILD/coldstart" bench-report "$OUT" "${base_args[@]}" --md "$OUT/bench-report.md" >/dev/null 2>>"$LOG" ||
    { echo "bench-report failed" | tee -a "$LOG"; st=FAIL; }
  [ "$st" = ok ] || rc=1
  done_step bench "$st"
fi
finish $rc
