// The helper every kernel benchmark uses, so that all of them time the same way, compare against
// the same ceilings and write the same JSON fields:
//
//   - bench_main(): the program's main. Parses Google Benchmark's flags, decides whether a GPU is
//     usable and, if not, prints "<bench>: skipped (<reason>)", writes an empty-run report to
//     --benchmark_out (valid JSON, the reason under context.skipped) and exits 0.
//   - EventTimer / run_timed_loop() / mean_seconds(): GPU time of a callable from two CUDA events
//     on a stream (torch's current stream in the benches), for Google Benchmark loops that use
//     UseManualTime().
//   - ceilings(): the running device's ceilings from one table (ceiling_table()).
//   - set_flops_counters() / set_bytes_counters(): achieved TFLOP/s and GB/s and their percent of
//     the ceiling, as Google Benchmark user counters (so they land in the JSON).
//
// Every CUDA call made here goes through BENCH_CUDA_CHECK, which names the file, line and call.
// The CUDA runtime API is used (libcudart from the toolkit); the header itself needs no CUDA
// header, so it compiles in a build against a CPU-only libtorch.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "harness/jit/jit.h"

namespace coldstart::bench {

// ---- checked CUDA calls

/// Throws std::runtime_error "<file>:<line>: <call> failed: <error name>: <error string>" when
/// `status` (a cudaError_t, as int) is not cudaSuccess. Use it through BENCH_CUDA_CHECK.
void check_cuda(int status, const char* call, const char* file, int line);

/// Checks one CUDA runtime call (the caller includes <cuda_runtime.h>): on failure throws with the
/// file, line and text of the call. bench_main() turns the exception into a message and exit 1.
#define BENCH_CUDA_CHECK(call) \
  ::coldstart::bench::check_cuda(static_cast<int>(call), #call, __FILE__, __LINE__)

// ---- the skip path and main

/// Why the GPU benchmarks cannot run in this process, or "" when they can: no CUDA driver, no
/// CUDA device, a libtorch built without CUDA, or one that sees no device.
std::string gpu_unavailable_reason();

/// Called by bench_main() on the GPU path, after the flags are parsed and before the benchmarks
/// run, with the arguments Google Benchmark did not recognise (argv[1..], program name dropped).
/// It may register benchmarks (benchmark::RegisterBenchmark) that depend on the device. Returns
/// false to reject the arguments (bench_main then exits 1).
using SetupFn = std::function<bool(const std::vector<std::string>& positional)>;

/// The main of a GPU benchmark program named `bench` (used in the skip line and the report).
/// Without a usable GPU: prints "<bench>: skipped (<reason>)" to stdout, writes an empty-run
/// report to --benchmark_out if given (in --benchmark_out_format, JSON by default; the reason is
/// under context.skipped) and returns 0. With one: records the device and its ceilings in the
/// report's context, runs `setup` (if given; without it, unrecognised arguments are an error),
/// then the registered benchmarks. Returns the process exit status: 0, or 1 on bad arguments or
/// when a benchmark throws (the error is printed to stderr).
int bench_main(const char* bench, int argc, char** argv, const SetupFn& setup = {});

// ---- device and ceilings

/// The CUDA device the benchmarks run on (the runtime's current device, 0 unless set).
struct DeviceInfo {
  std::string name;  ///< cudaDeviceProp::name, e.g. "NVIDIA H200"
  int sm = 0;        ///< compute capability as major * 10 + minor, e.g. 90
  int sm_count = 0;  ///< streaming multiprocessors
};

/// The current device's name, compute capability and SM count (queried once, then cached).
/// Needs a GPU: call it only from a benchmark or a SetupFn.
const DeviceInfo& device_info();

/// One target's datasheet ceilings. All rates are dense (no 2:4 structured sparsity: none of the
/// kernels uses it).
struct Ceilings {
  const char* target;            ///< the product the figures are for, e.g. "NVIDIA H200 (SXM)"
  const char* device_name;       ///< the cudaDeviceProp::name that selects this entry (exact)
  double hbm_bytes_per_s;        ///< HBM bandwidth, bytes/s
  double bf16_flops_per_s;       ///< dense BF16 tensor-core FLOP/s
  double fp8_flops_per_s;        ///< dense FP8 tensor-core FLOP/s
  double tf32_flops_per_s;       ///< dense TF32 tensor-core FLOP/s
};

/// Every target with known ceilings (datasheet sources in bench_util.cpp); the first entry, the
/// H200, is the fallback for a device not in it.
const std::vector<Ceilings>& ceiling_table();

/// The entry of ceiling_table() whose device_name is this device's name; the H200's when none is
/// (then fallback_note() says so). Needs a GPU (see device_info()).
const Ceilings& ceilings();

/// Empty when ceilings() matched the device; otherwise a sentence naming the device and the
/// fallback, also recorded in the report's context (ceilings_note).
const std::string& ceilings_fallback_note();

// ---- counters

/// Which tensor-core peak a FLOP count is compared with.
enum class Peak { kBf16, kFp8, kTf32 };

/// Sets state.counters "TFLOP/s" (flops_per_call / seconds_per_call, in 1e12 FLOP/s),
/// "peak_TFLOP/s" (the device's dense `peak` from ceilings(), same unit) and "%peak_TFLOP/s"
/// (the first as a percent of the second).
void set_flops_counters(benchmark::State& state, double flops_per_call, double seconds_per_call,
                        Peak peak);

/// Sets state.counters "GB/s" (bytes_per_call / seconds_per_call, in 1e9 B/s), "peak_GB/s" (the
/// device's HBM bandwidth from ceilings(), same unit) and "%peak_GB/s".
void set_bytes_counters(benchmark::State& state, double bytes_per_call, double seconds_per_call);

// ---- shared set-up

/// One JIT runtime with default options (in-memory and default disk cache) for the whole
/// program, made on first use and never destroyed (kernels may still be queued at exit).
jit::JitRuntime& default_runtime();

/// Enqueues `n` bf16 8192 x 8192 matmuls on torch's current CUDA stream: work that keeps the GPU
/// busy while the host queues a measurement's launches (use it as TimingOptions::before), so
/// host launch cost does not leave the GPU idle between timed calls.
void queue_busy_matmuls(int n = 4);

// ---- timing

/// A pair of CUDA events on one stream: start() records the first, stop_seconds() records the
/// second, waits for it and returns the GPU time between them in seconds. Not copyable.
class EventTimer {
 public:
  /// `stream` is a cudaStream_t (torch's stream, e.g. kernels::stream_for(tensor)); nullptr is
  /// the legacy default stream.
  explicit EventTimer(void* stream);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start();
  double stop_seconds();

 private:
  void* stream_;
  void* start_ = nullptr;  // cudaEvent_t
  void* stop_ = nullptr;   // cudaEvent_t
};

/// Waits until all work queued on `stream` (a cudaStream_t) has finished (checked).
void synchronize(void* stream);

/// How a callable is timed. Calls receive a running index (0, 1, 2, ... over the warm-up and every
/// timed call) that benches use to cycle inputs; a callable taking no argument is fine too.
struct TimingOptions {
  int warmup = 1;  ///< untimed calls before the first measurement (compiles, autotuning)
  int calls = 1;   ///< calls between the two events of one measurement; time is per call
  /// Enqueued before each measurement's start event, untimed: e.g. large matmuls that keep the
  /// GPU busy while the host queues the timed calls, so host launch cost does not idle the GPU.
  std::function<void()> before;
};

namespace detail {
template <class F>
void call_with_index(F& fn, int64_t i) {
  if constexpr (std::is_invocable_v<F&, int64_t>) {
    fn(i);
  } else {
    (void)i;
    fn();
  }
}

template <class F>
double measure(EventTimer& timer, const TimingOptions& o, int64_t& index, F& fn) {
  if (o.before) o.before();
  timer.start();
  for (int j = 0; j < o.calls; ++j) call_with_index(fn, index++);
  return timer.stop_seconds() / o.calls;
}
}  // namespace detail

/// Runs the benchmark loop of `state` (registered with UseManualTime()): o.warmup untimed calls
/// of fn, then per iteration one measurement of o.calls calls between two events on `stream`;
/// each iteration's manual time is that measurement's seconds per call, so the report's
/// real_time is the time of one call. Returns the mean seconds per call over all iterations
/// (0 if the loop ran none), for set_*_counters().
///
/// With o.calls > 1, register the benchmark with ->Iterations(n): Google Benchmark sizes its
/// iteration count from the manual time, which is 1/o.calls of what an iteration takes, so left
/// to itself it runs o.calls times longer than its --benchmark_min_time (mamba_ops_bench's rows,
/// 50 calls each, ran ~25 s apiece on the H200 that way).
template <class F>
double run_timed_loop(benchmark::State& state, void* stream, const TimingOptions& o, F&& fn) {
  int64_t index = 0;
  for (; index < o.warmup; ++index) detail::call_with_index(fn, index);
  EventTimer timer(stream);
  double total = 0;
  int64_t n = 0;
  for (auto _ : state) {
    const double s = detail::measure(timer, o, index, fn);
    state.SetIterationTime(s);
    total += s;
    ++n;
  }
  return n > 0 ? total / static_cast<double>(n) : 0.0;
}

/// The same measurement outside a benchmark loop (a second quantity reported as a counter):
/// o.warmup untimed calls, then `reps` measurements; returns the mean seconds per call.
template <class F>
double mean_seconds(void* stream, const TimingOptions& o, int reps, F&& fn) {
  int64_t index = 0;
  for (; index < o.warmup; ++index) detail::call_with_index(fn, index);
  EventTimer timer(stream);
  double total = 0;
  for (int r = 0; r < reps; ++r) total += detail::measure(timer, o, index, fn);
  return reps > 0 ? total / reps : 0.0;
}

}  // namespace coldstart::bench
