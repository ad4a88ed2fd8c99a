// coldstart: the CUDA driver API, loaded at run time with dlopen("libcuda.so.1").
//
// The harness never links libcuda: the same binary must start on a machine without a driver,
// where it runs in compile-only mode (NVRTC needs no GPU). `cuda.h` is included for its types and
// prototypes only; every call goes through the function pointers in DriverApi, which are resolved
// with cuGetProcAddress (for the ABI version of the CUDA headers this was built with) or, on a
// driver without it, with dlsym of the versioned symbol names cuda.h maps to.
#pragma once

#include <cuda.h>
#include <nvrtc.h>

#include <string>

#include "harness/common/error.h"

namespace coldstart::jit {

/// Function pointers of the driver API calls the harness makes. A member is named like the call
/// in cuda.h (so `driver().cuDeviceTotalMem(...)` reads as the real call; cuda.h's macros map
/// names such as cuDeviceTotalMem to their current versioned symbol, here and at the call site).
/// Every member is non-null once driver() returns, except `cuFuncLoad` (CUDA 12.4+ drivers only),
/// `cuLaunchKernelEx` and `cuTensorMapEncodeTiled` (12.0+).
struct DriverApi {
#define CS_DRIVER_FN(name) decltype(&::name) name = nullptr
  CS_DRIVER_FN(cuInit);
  CS_DRIVER_FN(cuDriverGetVersion);
  CS_DRIVER_FN(cuGetErrorName);
  CS_DRIVER_FN(cuGetErrorString);
  CS_DRIVER_FN(cuDeviceGet);
  CS_DRIVER_FN(cuDeviceGetCount);
  CS_DRIVER_FN(cuDeviceGetAttribute);
  CS_DRIVER_FN(cuDeviceGetName);
  CS_DRIVER_FN(cuDeviceTotalMem);
  CS_DRIVER_FN(cuCtxGetCurrent);
  CS_DRIVER_FN(cuCtxSetCurrent);
  CS_DRIVER_FN(cuDevicePrimaryCtxRetain);
  CS_DRIVER_FN(cuModuleLoadData);
  CS_DRIVER_FN(cuModuleUnload);
  CS_DRIVER_FN(cuModuleGetFunction);
  CS_DRIVER_FN(cuLaunchKernel);
  CS_DRIVER_FN(cuFuncSetAttribute);
  CS_DRIVER_FN(cuFuncGetAttribute);
  CS_DRIVER_FN(cuStreamCreate);
  CS_DRIVER_FN(cuStreamDestroy);
  CS_DRIVER_FN(cuStreamSynchronize);
  /// Capture state of a stream: the autotuner refuses to benchmark while a stream captures.
  CS_DRIVER_FN(cuStreamIsCapturing);
  CS_DRIVER_FN(cuStreamBeginCapture);
  CS_DRIVER_FN(cuStreamEndCapture);
  CS_DRIVER_FN(cuGraphDestroy);
  CS_DRIVER_FN(cuEventCreate);
  CS_DRIVER_FN(cuEventRecord);
  CS_DRIVER_FN(cuEventSynchronize);
  CS_DRIVER_FN(cuEventElapsedTime);
  CS_DRIVER_FN(cuEventDestroy);
  CS_DRIVER_FN(cuMemAlloc);
  CS_DRIVER_FN(cuMemFree);
  CS_DRIVER_FN(cuMemcpyHtoD);
  CS_DRIVER_FN(cuMemcpyDtoH);
  CS_DRIVER_FN(cuMemsetD8);
  /// Optional (nullptr on drivers older than 12.4): forces a function's module code onto the GPU
  /// now instead of at its first launch under CUDA lazy loading (CUDA_MODULE_LOADING=LAZY).
  /// Declared here, not taken from cuda.h, so that a build against older headers (a
  /// distribution's CUDA 11.8) still finds it on a newer driver.
  CUresult (*cuFuncLoad)(CUfunction) = nullptr;
  /// Optional (nullptr before CUDA 12.0 drivers): cluster launches and TMA descriptors.
#if CUDA_VERSION >= 12000
  CS_DRIVER_FN(cuLaunchKernelEx);
  CS_DRIVER_FN(cuTensorMapEncodeTiled);
#endif
#undef CS_DRIVER_FN
};

/// True when libcuda.so.1 could be loaded, every required symbol resolved, cuInit(0) succeeded and
/// at least one device is present. Never throws; the first call does the loading (thread-safe).
bool driver_available();

/// Why driver_available() is false ("dlopen(libcuda.so.1) failed: ...", "cuInit(0) failed:
/// CUDA_ERROR_NO_DEVICE (...)"); empty when the driver is available.
const std::string& driver_unavailable_reason();

/// The loaded driver API. Throws CudaError("CUDA driver unavailable: <reason>") when
/// driver_available() is false.
const DriverApi& driver();

/// The driver's CUDA version as "major.minor" (e.g. "13.0"); "" when there is no driver.
std::string driver_version();

/// Makes the primary context of device 0 current on the calling thread (retaining it once per
/// process, as torch does), unless it already is. Cost when already current: one
/// cuCtxGetCurrent. Throws CudaError when there is no driver or a driver call fails.
void ensure_context();

/// The primary context of device 0 (retained on first use). Throws like ensure_context().
CUcontext primary_context();

/// "sm_<major><minor>" of device 0, e.g. "sm_90". Throws CudaError without a driver/GPU.
std::string current_device_arch();

/// "CUDA_ERROR_xxx (<description>)" for a driver result; falls back to the number when the
/// driver cannot name it.
std::string cu_result_text(CUresult result);

/// Throws CudaError("<file>:<line>: <call> failed: CUDA_ERROR_xxx (<string>)").
[[noreturn]] void throw_cu_error(CUresult result, const char* call, const char* file, int line);

/// Throws CudaError("<file>:<line>: <call> failed: <nvrtcGetErrorString> (nvrtcResult <n>)").
[[noreturn]] void throw_nvrtc_error(nvrtcResult result, const char* call, const char* file,
                                    int line);

}  // namespace coldstart::jit

/// Checks a driver API call (written as `driver().cuXxx(...)`); on failure throws
/// coldstart::CudaError naming the file, line, the call text and the driver's error name/string.
#define CS_CU_CHECK(call)                                                          \
  do {                                                                             \
    const CUresult cs_cu_result_ = (call);                                         \
    if (cs_cu_result_ != CUDA_SUCCESS) {                                           \
      ::coldstart::jit::throw_cu_error(cs_cu_result_, #call, __FILE__, __LINE__);  \
    }                                                                              \
  } while (0)

/// Checks an NVRTC call; on failure throws coldstart::CudaError with file, line, call text and
/// nvrtcGetErrorString. (A failed nvrtcCompileProgram is reported by the compiler with its log.)
#define CS_NVRTC_CHECK(call)                                                           \
  do {                                                                                 \
    const nvrtcResult cs_nvrtc_result_ = (call);                                       \
    if (cs_nvrtc_result_ != NVRTC_SUCCESS) {                                           \
      ::coldstart::jit::throw_nvrtc_error(cs_nvrtc_result_, #call, __FILE__, __LINE__);\
    }                                                                                  \
  } while (0)
