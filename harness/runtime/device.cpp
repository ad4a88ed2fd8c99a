#include "harness/runtime/device.h"

#include <ATen/ATen.h>
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <torch/version.h>

#include "harness/common/error.h"
#include "harness/jit/driver.h"
#include "harness/jit/jit.h"
#include "harness/runtime/graph.h"
#include "harness/runtime/meta_memory.h"

#ifdef COLDSTART_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace coldstart {

const char* device_mode_name(DeviceMode mode) {
  return mode == DeviceMode::kCuda ? "cuda" : "compile-only";
}

bool built_with_cuda() {
#ifdef COLDSTART_WITH_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

int parse_arch(const std::string& arch) { return parse_sm(arch, "--arch"); }

std::string version_string(int v) {  // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

bool cuda_usable(std::string* why) {
#ifdef COLDSTART_WITH_CUDA
  if (!jit::driver_available()) {
    *why = "no CUDA driver: " + jit::driver_unavailable_reason();
    return false;
  }
  if (!at::hasCUDA() || at::cuda::device_count() == 0) {
    *why = "libtorch sees no CUDA device";
    return false;
  }
  return true;
#else
  *why = "this build's libtorch has no CUDA (compile-only build)";
  return false;
#endif
}

}  // namespace

DeviceInfo select_device(const std::string& requested, const std::string& arch,
                         const std::string& target_name, int sm_count) {
  if (requested != "auto" && requested != "cuda" && requested != "compile-only") {
    throw InputError("--device '" + requested + "': expected auto, cuda or compile-only");
  }
  DeviceInfo info;
  info.torch_version = TORCH_VERSION;
  info.nvrtc_version = jit::nvrtc_version();
  if (jit::driver_available()) {
    int v = 0;
    if (jit::driver().cuDriverGetVersion(&v) == CUDA_SUCCESS) info.driver_version = version_string(v);
  }
  std::string why;
  const bool usable = requested != "compile-only" && cuda_usable(&why);
  if (requested == "cuda" && !usable) throw InputError("--device cuda: " + why);
  if (sm_count < 0 || sm_count > 1024) {
    throw InputError("--sm-count " + std::to_string(sm_count) + ": expected 1..1024");
  }
  if (!usable) {
    info.mode = DeviceMode::kCompileOnly;
    if (!target_name.empty()) {
      info.target = target_profile(target_name);
      if (!arch.empty() && parse_arch(arch) != info.target.sm) {
        throw InputError("--arch / COLDSTART_ARCH " + arch + " contradicts --target / "
                         "COLDSTART_TARGET " + target_name + " (" +
                         info.target.arch + ")");
      }
      if (sm_count > 0) info.target.sm_count = sm_count;
    } else {
      info.target = target_for_arch(arch.empty() ? "sm_90" : arch, sm_count);
    }
    info.sm = info.target.sm;
    info.sm_count = info.target.sm_count;
    // "compile-only: NVIDIA H200" for a profile's target, "compile-only (sm_75)" otherwise.
    info.name = info.target.profile.empty() ? "compile-only (" + info.arch() + ")"
                                            : "compile-only: " + info.target.device_name;
    return info;
  }
  if (sm_count != 0) throw InputError("--sm-count only sets the target in compile-only mode");
#ifdef COLDSTART_WITH_CUDA
  info.mode = DeviceMode::kCuda;
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(0);
  info.name = prop->name;
  info.sm = prop->major * 10 + prop->minor;
  info.sm_count = prop->multiProcessorCount;
  info.total_memory_bytes = static_cast<long long>(prop->totalGlobalMem);
  int rt = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) info.cuda_runtime_version = version_string(rt);
  if (!arch.empty() && parse_arch(arch) != info.sm) {
    throw InputError("--arch " + arch + " does not match the GPU (" + info.name + " is " +
                     info.arch() + "); --arch only picks the target in compile-only mode");
  }
  info.target.arch = info.arch();
  info.target.sm = info.sm;
  info.target.sm_count = info.sm_count;
  info.target.device_name = info.name;
  info.target.shared_memory_per_block = static_cast<int>(prop->sharedMemPerBlockOptin);
  info.target.memory_bytes = info.total_memory_bytes;
  if (!target_name.empty()) {
    // On a GPU the target can only name the GPU itself: an H100 and an H200 are both sm_90 with
    // 132 SMs, so the SMs and the memory (within 10%: the profile's figure is the datasheet's,
    // the driver's a little less) must match too, or the results would carry the wrong name.
    const Target t = target_profile(target_name);
    const double gib = 1024.0 * 1024 * 1024;
    const bool memory_differs =
        t.memory_bytes > 0 &&
        std::abs(static_cast<double>(t.memory_bytes - info.total_memory_bytes)) >
            0.1 * static_cast<double>(t.memory_bytes);
    if (t.sm != info.sm || (t.sm_count > 0 && t.sm_count != info.sm_count) || memory_differs) {
      throw InputError(fmt::format(
          "--target {} does not match the GPU ({} is {}, {} SMs, {:.1f} GiB; {} is {} ({}), {} "
          "SMs, {:.1f} GiB); --target only picks the target in compile-only mode",
          target_name, info.name, info.arch(), info.sm_count, info.total_memory_bytes / gib,
          target_name, t.device_name, t.arch, t.sm_count, t.memory_bytes / gib));
    }
  }
#endif
  return info;
}

void* current_cuda_stream() {
#ifdef COLDSTART_WITH_CUDA
  return static_cast<void*>(c10::cuda::getCurrentCUDAStream().stream());
#else
  return nullptr;
#endif
}

void empty_device_cache() {
#ifdef COLDSTART_WITH_CUDA
  if (at::cuda::is_available()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

std::string device_fault_after_sync(DeviceMode mode) {
#ifdef COLDSTART_WITH_CUDA
  if (mode != DeviceMode::kCuda) return "";
  cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err == cudaSuccess) return "";
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
#else
  (void)mode;
  return "";
#endif
}

void device_synchronize(DeviceMode mode) {
#ifdef COLDSTART_WITH_CUDA
  if (mode == DeviceMode::kCuda) c10::cuda::device_synchronize();
#else
  (void)mode;
#endif
}

// ---- graphs ---------------------------------------------------------------------------------

struct CapturedGraph::Impl {
#ifdef COLDSTART_WITH_CUDA
  at::cuda::CUDAGraph graph;
#endif
};

CapturedGraph::CapturedGraph(DeviceMode mode) : mode_(mode), impl_(std::make_unique<Impl>()) {}
CapturedGraph::~CapturedGraph() = default;
CapturedGraph::CapturedGraph(CapturedGraph&&) noexcept = default;
CapturedGraph& CapturedGraph::operator=(CapturedGraph&&) noexcept = default;

void CapturedGraph::capture(const std::function<void()>& body, GraphPool& pool) {
  if (mode_ == DeviceMode::kCompileOnly) {
    body();
    return;
  }
#ifdef COLDSTART_WITH_CUDA
  at::cuda::MempoolId_t id{pool.id_first, pool.id_second};
  impl_->graph.capture_begin(pool.valid ? id : at::cuda::MempoolId_t{0, 0});
  try {
    body();
  } catch (...) {
    // End the capture so the stream is usable again; the first error is the one reported.
    try {
      impl_->graph.capture_end();
    } catch (...) {
    }
    throw;
  }
  impl_->graph.capture_end();
  if (!pool.valid) {
    auto pid = impl_->graph.pool();
    pool.id_first = pid.first;
    pool.id_second = pid.second;
    pool.valid = true;
  }
#else
  (void)body;
  (void)pool;
  throw Error("CUDA graph capture needs a CUDA build");
#endif
}

struct CaptureStreamScope::Impl {
#ifdef COLDSTART_WITH_CUDA
  explicit Impl(c10::cuda::CUDAStream s) : guard(s) {}
  c10::cuda::CUDAStreamGuard guard;
#endif
};

CaptureStreamScope::CaptureStreamScope(DeviceMode mode) : mode_(mode) {
#ifdef COLDSTART_WITH_CUDA
  if (mode_ != DeviceMode::kCuda) return;
  static c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  c10::cuda::device_synchronize();
  impl_ = std::make_unique<Impl>(side);
#endif
}

CaptureStreamScope::~CaptureStreamScope() {
#ifdef COLDSTART_WITH_CUDA
  if (mode_ == DeviceMode::kCuda) c10::cuda::device_synchronize();
#endif
  impl_.reset();
}

void CapturedGraph::replay() {
  if (mode_ == DeviceMode::kCompileOnly) return;
#ifdef COLDSTART_WITH_CUDA
  impl_->graph.replay();
#endif
}

struct GpuSpans::Impl {
#ifdef COLDSTART_WITH_CUDA
  std::vector<std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>> spans;
#endif
  std::vector<double> stalls;  ///< per finished span: host stall inside it, ms
};

GpuSpans::GpuSpans(DeviceMode mode) : mode_(mode), impl_(std::make_unique<Impl>()) {}
GpuSpans::~GpuSpans() = default;

void GpuSpans::begin() {
#ifdef COLDSTART_WITH_CUDA
  if (mode_ != DeviceMode::kCuda || !active_) return;
  impl_->spans.emplace_back(at::cuda::CUDAEvent(cudaEventDefault), at::cuda::CUDAEvent(cudaEventDefault));
  impl_->spans.back().first.record();
  stall_at_begin_ = stall_clock_ ? stall_clock_() : 0.0;
#endif
}

void GpuSpans::end() {
#ifdef COLDSTART_WITH_CUDA
  if (mode_ != DeviceMode::kCuda || !active_ || impl_->spans.empty()) return;
  impl_->spans.back().second.record();
  impl_->stalls.resize(impl_->spans.size(), 0.0);
  impl_->stalls.back() = stall_clock_ ? stall_clock_() - stall_at_begin_ : 0.0;
#endif
}

double GpuSpans::take_total_ms() {
  double total = 0;
#ifdef COLDSTART_WITH_CUDA
  impl_->stalls.resize(impl_->spans.size(), 0.0);
  for (size_t i = 0; i < impl_->spans.size(); ++i) {
    auto& sp = impl_->spans[i];
    sp.second.synchronize();
    total += std::max(0.0, static_cast<double>(sp.first.elapsed_time(sp.second)) - impl_->stalls[i]);
  }
  impl_->spans.clear();
#endif
  impl_->stalls.clear();
  return total;
}

std::string configure_sdpa_backends(DeviceMode mode, bool allow_cudnn) {
#if defined(COLDSTART_WITH_CUDA) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))
  if (mode == DeviceMode::kCuda) at::globalContext().setSDPUseCuDNN(allow_cudnn);
#else
  (void)mode;
#endif
  return allow_cudnn ? "flash, mem-efficient, cudnn, math (libtorch default)"
                     : "flash, mem-efficient, math (cuDNN off, like an engine's FlashAttention prefill)";
}

MemoryStats memory_stats(DeviceMode mode) {
  MemoryStats s;
  if (mode != DeviceMode::kCuda) {
    // Compile-only: the meta device's counting allocator (meta_memory.h), when installed. With a
    // target's memory set as its limit, the device is that big and holds tensors plus the memory
    // modelled outside the allocator (the target's CUDA context; no cached segments): reserved =
    // allocated, free = total - allocated - outside.
    s.allocated = meta_allocated_bytes();
    s.peak_allocated = meta_peak_bytes();
    s.reserved = s.allocated;
    s.total_device = meta_memory_limit();
    s.free_device = s.total_device > 0
                        ? std::max(0LL, s.total_device - s.allocated - meta_outside_allocator_bytes())
                        : 0;
    return s;
  }
#ifdef COLDSTART_WITH_CUDA
  // Before torch's first CUDA allocation the caching allocator has no device state, and torch 2.x
  // refuses to read it ("Invalid device argument"): nothing is allocated yet.
  if (!c10::cuda::CUDACachingAllocator::get()->initialized()) return s;
  auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const size_t agg = 0;  // StatType::AGGREGATE in every libtorch 2.x (the enum moved namespaces)
  s.allocated = st.allocated_bytes[agg].current;
  s.reserved = st.reserved_bytes[agg].current;
  s.peak_allocated = st.allocated_bytes[agg].peak;
  s.segments_allocated = st.segment[agg].allocated;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
    s.free_device = static_cast<long long>(free_b);
    s.total_device = static_cast<long long>(total_b);
  }
#else
  (void)mode;
#endif
  return s;
}

void reset_peak_memory(DeviceMode mode) {
  if (mode != DeviceMode::kCuda) reset_meta_peak();
#ifdef COLDSTART_WITH_CUDA
  if (mode == DeviceMode::kCuda && c10::cuda::CUDACachingAllocator::get()->initialized())
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
#else
  (void)mode;
#endif
}

}  // namespace coldstart
