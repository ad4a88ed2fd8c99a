// CUDA graph capture through libtorch (at::cuda::CUDAGraph), with a compile-only stand-in.
#pragma once

#include <functional>
#include <memory>

#include "harness/runtime/device.h"

namespace coldstart {

/// A memory pool shared by every graph of one engine, as vLLM shares one pool across all capture
/// sizes. Opaque; empty until the first capture.
struct GraphPool {
  unsigned long long id_first = 0;
  unsigned long long id_second = 0;
  bool valid = false;
};

/// One captured graph. On CUDA, capture() runs `body` under stream capture (global capture mode,
/// like torch.cuda.graph) on the current stream, which must not be the default stream (use
/// CaptureStreamScope), and replay() launches it on the current stream. In compile-only mode
/// capture() runs `body` once (so compiles and workspace requests happen exactly as they would)
/// and replay() does nothing: a replay neither compiles nor asks the workspace for memory.
/// Throws CudaError when capture fails (e.g. a kernel compiled or memory allocated mid-capture).
class CapturedGraph {
 public:
  explicit CapturedGraph(DeviceMode mode);
  ~CapturedGraph();
  CapturedGraph(CapturedGraph&&) noexcept;
  CapturedGraph& operator=(CapturedGraph&&) noexcept;
  void capture(const std::function<void()>& body, GraphPool& pool);
  void replay();

 private:
  struct Impl;
  DeviceMode mode_;
  std::unique_ptr<Impl> impl_;
};

/// Makes a process-wide side stream torch's current stream for its lifetime (no-op in
/// compile-only mode). Graph capture needs a non-default stream, and the eager warmup runs before
/// each capture go on the same stream, as vLLM's capture does, so cuBLAS handles and workspaces
/// for that stream exist before capture begins. Synchronizes the device on entry and exit.
class CaptureStreamScope {
 public:
  explicit CaptureStreamScope(DeviceMode mode);
  ~CaptureStreamScope();
  CaptureStreamScope(const CaptureStreamScope&) = delete;
  CaptureStreamScope& operator=(const CaptureStreamScope&) = delete;

 private:
  struct Impl;
  DeviceMode mode_;
  std::unique_ptr<Impl> impl_;
};

/// GPU time of a set of spans on the current stream, measured with CUDA events (no host sync
/// until total_ms()). In compile-only mode nothing is recorded and total_ms() is 0.
class GpuSpans {
 public:
  explicit GpuSpans(DeviceMode mode);
  ~GpuSpans();
  /// Spans are recorded only while active (never during graph capture: a captured event record
  /// cannot be timed).
  void set_active(bool active) { active_ = active; }
  bool active() const { return active_; }
  /// A clock of host time (ms) that held the launching thread while the GPU waited for it (the
  /// JIT compiling, loading or autotuning: JitMonitor::host_stall_ms). What it advances inside a
  /// span is taken out of that span's GPU time, so a compile on the hot path is not counted
  /// twice, as compile time and as kernel time. Without one, spans are plain event time.
  void set_stall_clock(std::function<double()> clock) { stall_clock_ = std::move(clock); }
  void begin();
  void end();
  /// Sum of the finished spans, milliseconds (each less its host stall, never below 0); waits
  /// for them. Then forgets them.
  double take_total_ms();

 private:
  struct Impl;
  DeviceMode mode_;
  bool active_ = false;
  std::function<double()> stall_clock_;
  double stall_at_begin_ = 0;
  std::unique_ptr<Impl> impl_;
};

/// Selects libtorch's scaled-dot-product-attention backends for the prefill attention stand-in.
/// `allow_cudnn` false leaves flash / memory-efficient / math, which matches an engine whose
/// prefill runs FlashAttention (vLLM); cuDNN's backend builds an execution plan per new shape on
/// first use. No-op without CUDA. Returns a description of the setting for the result.
std::string configure_sdpa_backends(DeviceMode mode, bool allow_cudnn);

/// Device memory counters, bytes: torch's caching allocator on a GPU; in compile-only mode the
/// meta device's counting allocator (meta_memory.h) fills `allocated`, `peak_allocated` (0 until
/// track_meta_memory()) and `reserved` (= allocated), and `total_device` / `free_device` from its
/// limit (the target's memory; both 0 without one); segments stay 0.
struct MemoryStats {
  long long allocated = 0;       ///< currently allocated by tensors
  long long reserved = 0;        ///< held by the caching allocator (segments)
  long long peak_allocated = 0;  ///< since the last reset
  long long free_device = 0;     ///< cuMemGetInfo free
  long long total_device = 0;    ///< cuMemGetInfo total
  long long segments_allocated = 0;  ///< cumulative cudaMalloc calls of the caching allocator
};
MemoryStats memory_stats(DeviceMode mode);
void reset_peak_memory(DeviceMode mode);

}  // namespace coldstart
