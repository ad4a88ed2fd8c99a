// The device a replay runs on: a CUDA GPU through libtorch, or compile-only mode (no GPU; tensors on
// torch's meta device, kernels compiled by NVRTC but never launched). Torch-free header.
#pragma once

#include <optional>
#include <string>

#include "harness/common/target.h"

namespace coldstart {

enum class DeviceMode { kCuda, kCompileOnly };

/// "cuda" | "compile-only"
const char* device_mode_name(DeviceMode mode);

/// Where a result came from; goes into the result's `meta` block.
struct DeviceInfo {
  DeviceMode mode = DeviceMode::kCompileOnly;
  std::string name;             ///< "NVIDIA H200", or in compile-only mode "compile-only: NVIDIA
                                ///< H200" (a profile's target) / "compile-only (sm_75)"
  int sm = 0;                   ///< compute capability * 10, e.g. 90; the target arch in compile-only
  int sm_count = 0;             ///< multiprocessors; 0 in compile-only
  long long total_memory_bytes = 0;  ///< 0 in compile-only
  std::string driver_version;   ///< "13.0" from cuDriverGetVersion; "" without a driver
  std::string cuda_runtime_version;  ///< CUDA version libtorch was built with ("" for CPU builds)
  std::string torch_version;    ///< "2.11.0"
  std::string nvrtc_version;    ///< "13.0"
  /// The GPU the plan is for: the device itself, or in compile-only mode the named profile
  /// (`--target`) or the flagship of `--arch` with `--sm-count`.
  Target target;
  std::string arch() const { return "sm_" + std::to_string(sm); }
};

/// Whether this build's libtorch has CUDA (the GPU backend was compiled in).
bool built_with_cuda();

/// Picks the device: "cuda" (error when no usable GPU), "compile-only", or "auto" (cuda when a GPU
/// and a CUDA libtorch are there, else compile-only). In compile-only mode the target is the
/// profile `target_name` ("h200", see target_profile()) or else the flagship of `arch` ("sm_90",
/// the default) with `sm_count` SMs when > 0. On a GPU, `arch` and `target_name` must match the
/// device when given, and `sm_count` must be 0. Throws InputError on a bad name or an impossible
/// request.
DeviceInfo select_device(const std::string& requested, const std::string& arch,
                         const std::string& target_name = "", int sm_count = 0);

/// Host-visible CUstream of torch's current CUDA stream (nullptr in compile-only mode).
void* current_cuda_stream();

/// Blocks until the GPU finished all work (no-op in compile-only mode).
void device_synchronize(DeviceMode mode);

/// Returns the caching allocator's unused blocks to the driver (torch.cuda.empty_cache()); no-op
/// without CUDA. Must not run while a stream captures (torch asserts).
void empty_device_cache();

/// Synchronizes without throwing and returns the device's error, "<name>: <description>"
/// (cudaErrorIllegalAddress ...), or "" when the device raised none (always "" in compile-only
/// mode). A sticky error stays: the CUDA context is unusable afterwards.
std::string device_fault_after_sync(DeviceMode mode);

}  // namespace coldstart
