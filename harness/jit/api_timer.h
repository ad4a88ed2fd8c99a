// Where the engine's thread spends its wall time, measured exactly: each moment of the thread is
// charged to what it is doing then (the innermost open frame): inside a CUDA runtime or driver
// API call, by kind (CUPTI's callback API; libcupti is dlopen'ed like the driver, so the binary
// starts without it), inside the JIT's own timed compile / load / autotune windows, in the JIT
// launch path, in the model's host code (libtorch dispatch, library heuristics), reporting, or
// else the engine's own code. It names first-request costs that wall time alone cannot separate:
// caching-allocator growth (cudaMalloc), lazy module loading inside the first launch of a
// libtorch or library kernel, a captured graph's first launch (its upload), the host waiting
// for the GPU. Torch-free.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace coldstart::jit {

/// What the thread is doing. The first six are CUDA API calls (classify_api_call).
enum class HostPart {
  kAllocator,    ///< device / pinned memory allocation, free, mapping (cudaMalloc, cuMemCreate, ...)
  kModule,       ///< module and library loads, function lookups and attributes
  kLaunch,       ///< kernel launches: a first launch under lazy loading loads its module here
  kGraphLaunch,  ///< graph launch / upload: a graph's first launch uploads it
  kWait,         ///< the host waiting for the GPU: synchronize, copies, blocking memsets
  kOtherApi,     ///< every other API call (streams, events, device queries, capture status)
  kJitTimed,     ///< the JIT's compile + module load and autotuning windows (ApiTimeExcluded),
                 ///< which the JIT monitor records and reports itself
  kJitLaunch,    ///< the JIT launch path outside those: key lookup, argument packing
  kModelHost,    ///< the model's host code: libtorch dispatch, library heuristics, config selection
  kReporting,    ///< the harness's own reporting (result snapshots), left out of TTFT
  kEngineHost,   ///< no frame open: the engine's code (scheduler, batch preparation, bookkeeping)
};
inline constexpr size_t kNumHostParts = 11;

/// "allocator", "module", "launch", "graph_launch", "wait", "other_api", "jit_timed",
/// "jit_launch", "model_host", "reporting", "engine_host": result keys.
const char* host_part_name(HostPart part);

/// The kind of the API function `name` as CUPTI reports it ("cudaMalloc_v3020",
/// "cuLaunchKernel", "cuMemCreate"; a version suffix is ignored): one of the first six parts.
/// Unknown names are kOtherApi.
HostPart classify_api_call(std::string_view name);

/// Milliseconds per part (index: HostPart).
using HostTimes = std::array<double, kNumHostParts>;

/// Host time the thread spent inside CUDA API calls doing work of its own rather than waiting for
/// the GPU (every API kind but kWait): what held a launching thread while the GPU may idle.
double api_stall_ms(const HostTimes& t);

/// The accounting of one thread (the engine's) for the rest of the process. The first call to
/// start() subscribes to CUPTI's runtime and driver API callbacks; calls made on other threads
/// are not counted. One per process (CUPTI takes one subscriber): later start() calls return the
/// same timer and move it to the calling thread (which must have no frame open). Returns nullptr
/// and sets `*why_not` when CUPTI cannot be loaded or subscribed (no libcupti, another
/// subscriber such as a profiler). Needs a CUDA driver; not for compile-only mode.
class ApiTimer {
 public:
  static ApiTimer* start(std::string* why_not);
  /// Totals so far (monotonic), ms per part, of the thread start() was last called on; exact up
  /// to now when called on that thread.
  HostTimes totals() const;
  /// api_stall_ms(totals()).
  double stall_ms() const { return api_stall_ms(totals()); }
  /// Turns CUPTI's API callbacks on or off (on after start()). Each callback costs host time on
  /// every CUDA call of every thread, so the engine keeps them on only while requests run: a
  /// warmer's startup is not slowed by the measurement. While off, API calls are charged to the
  /// frame around them. Call it on the timer's thread, outside any API call. Throws
  /// std::runtime_error naming the CUPTI error when CUPTI refuses.
  void set_api_callbacks(bool on);
};

/// Charges the calling thread's time to `part` while alive (nested frames take their own time).
/// No-op on other threads than the timer's, before start(), and inside an opaque frame.
class HostFrame {
 public:
  explicit HostFrame(HostPart part);
  ~HostFrame();
  HostFrame(const HostFrame&) = delete;
  HostFrame& operator=(const HostFrame&) = delete;

 protected:
  HostFrame(HostPart part, bool opaque);

 private:
  bool entered_ = false;
  bool opaque_ = false;
};

/// An opaque kJitTimed frame: host time that the JIT monitor measures and reports itself (the
/// JIT's compile + module load, the autotuner's timed candidate runs). API calls and frames
/// inside are not counted apart, so no millisecond is counted twice.
class ApiTimeExcluded : public HostFrame {
 public:
  ApiTimeExcluded() : HostFrame(HostPart::kJitTimed, true) {}
};

/// An opaque kReporting frame (result snapshots, which TTFT leaves out).
class ReportingFrame : public HostFrame {
 public:
  ReportingFrame() : HostFrame(HostPart::kReporting, true) {}
};

}  // namespace coldstart::jit
