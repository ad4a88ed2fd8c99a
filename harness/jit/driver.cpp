// Loads the CUDA driver with dlopen and resolves the calls the harness makes. See driver.h.
#include "harness/jit/driver.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include <fmt/format.h>

namespace coldstart::jit {
namespace {

#define CS_STR_RAW(x) #x
#define CS_STR_EXPANDED(x) CS_STR_RAW(x)

struct DriverState {
  void* handle = nullptr;
  DriverApi api;
  bool available = false;
  std::string reason;
};

// cuGetProcAddress gained its status argument (and the _v2 symbol) in CUDA 12.0; headers older
// than that (a distribution's CUDA 11.8) declare the four-argument form.
#if CUDA_VERSION >= 12000
using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);
constexpr const char* kGetProcAddressSymbol = "cuGetProcAddress_v2";
#else
using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t);
constexpr const char* kGetProcAddressSymbol = "cuGetProcAddress";
#endif

// Resolves one symbol: cuGetProcAddress with the base name for this header's CUDA_VERSION when the
// driver has it, else dlsym of the versioned name cuda.h maps the base name to.
void* resolve(void* handle, GetProcAddressFn get_proc, const char* base, const char* versioned) {
  if (get_proc != nullptr) {
    void* fn = nullptr;
#if CUDA_VERSION >= 12000
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get_proc(base, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS &&
        status == CU_GET_PROC_ADDRESS_SUCCESS && fn != nullptr) {
      return fn;
    }
#else
    if (get_proc(base, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT) == CUDA_SUCCESS && fn != nullptr)
      return fn;
#endif
  }
  return dlsym(handle, versioned);
}

DriverState load_driver() {
  DriverState s;
  dlerror();
  s.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (s.handle == nullptr) {
    const char* err = dlerror();
    s.reason = fmt::format("dlopen(libcuda.so.1) failed: {}", err ? err : "unknown error");
    return s;
  }
  auto get_proc = reinterpret_cast<GetProcAddressFn>(dlsym(s.handle, kGetProcAddressSymbol));
  std::string missing;
#define CS_RESOLVE(name, required)                                                          \
  do {                                                                                      \
    void* p = resolve(s.handle, get_proc, CS_STR_RAW(name), CS_STR_EXPANDED(name));         \
    s.api.name = reinterpret_cast<decltype(s.api.name)>(p);                                 \
    if (p == nullptr && (required)) missing += std::string(missing.empty() ? "" : ", ") +   \
                                               CS_STR_EXPANDED(name);                       \
  } while (0)
  CS_RESOLVE(cuInit, true);
  CS_RESOLVE(cuDriverGetVersion, true);
  CS_RESOLVE(cuGetErrorName, true);
  CS_RESOLVE(cuGetErrorString, true);
  CS_RESOLVE(cuDeviceGet, true);
  CS_RESOLVE(cuDeviceGetCount, true);
  CS_RESOLVE(cuDeviceGetAttribute, true);
  CS_RESOLVE(cuDeviceGetName, true);
  CS_RESOLVE(cuDeviceTotalMem, true);
  CS_RESOLVE(cuCtxGetCurrent, true);
  CS_RESOLVE(cuCtxSetCurrent, true);
  CS_RESOLVE(cuDevicePrimaryCtxRetain, true);
  CS_RESOLVE(cuModuleLoadData, true);
  CS_RESOLVE(cuModuleUnload, true);
  CS_RESOLVE(cuModuleGetFunction, true);
  CS_RESOLVE(cuLaunchKernel, true);
  CS_RESOLVE(cuFuncSetAttribute, true);
  CS_RESOLVE(cuFuncGetAttribute, true);
  CS_RESOLVE(cuStreamCreate, true);
  CS_RESOLVE(cuStreamDestroy, true);
  CS_RESOLVE(cuStreamSynchronize, true);
  CS_RESOLVE(cuStreamIsCapturing, true);
  CS_RESOLVE(cuStreamBeginCapture, true);
  CS_RESOLVE(cuStreamEndCapture, true);
  CS_RESOLVE(cuGraphDestroy, true);
  CS_RESOLVE(cuEventCreate, true);
  CS_RESOLVE(cuEventRecord, true);
  CS_RESOLVE(cuEventSynchronize, true);
  CS_RESOLVE(cuEventElapsedTime, true);
  CS_RESOLVE(cuEventDestroy, true);
  CS_RESOLVE(cuMemAlloc, true);
  CS_RESOLVE(cuMemFree, true);
  CS_RESOLVE(cuMemcpyHtoD, true);
  CS_RESOLVE(cuMemcpyDtoH, true);
  CS_RESOLVE(cuMemsetD8, true);
  CS_RESOLVE(cuFuncLoad, false);
#if CUDA_VERSION >= 12000
  CS_RESOLVE(cuLaunchKernelEx, false);
  CS_RESOLVE(cuTensorMapEncodeTiled, false);
#endif
#undef CS_RESOLVE
  if (!missing.empty()) {
    s.reason = "libcuda.so.1 lacks required symbols: " + missing;
    return s;
  }
  const CUresult init = s.api.cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    const char* text = nullptr;
    s.api.cuGetErrorName(init, &name);
    s.api.cuGetErrorString(init, &text);
    s.reason = fmt::format("cuInit(0) failed: {} ({})", name ? name : "?", text ? text : "?");
    return s;
  }
  int count = 0;
  const CUresult rc = s.api.cuDeviceGetCount(&count);
  if (rc != CUDA_SUCCESS || count == 0) {
    s.reason = rc != CUDA_SUCCESS ? "cuDeviceGetCount failed" : "no CUDA device present";
    return s;
  }
  s.available = true;
  return s;
}

const DriverState& state() {
  static const DriverState s = load_driver();  // thread-safe one-time init
  return s;
}

std::string basename_of(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}

}  // namespace

bool driver_available() { return state().available; }

const std::string& driver_unavailable_reason() { return state().reason; }

const DriverApi& driver() {
  const DriverState& s = state();
  if (!s.available) throw CudaError("CUDA driver unavailable: " + s.reason);
  return s.api;
}

std::string driver_version() {
  if (!driver_available()) return "";
  int v = 0;
  CS_CU_CHECK(driver().cuDriverGetVersion(&v));
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

CUcontext primary_context() {
  static std::once_flag once;
  static CUcontext ctx = nullptr;
  std::call_once(once, [] {
    const DriverApi& d = driver();
    CUdevice dev = 0;
    CS_CU_CHECK(d.cuDeviceGet(&dev, 0));
    CUcontext c = nullptr;
    CS_CU_CHECK(d.cuDevicePrimaryCtxRetain(&c, dev));
    ctx = c;  // retained for the life of the process, as torch does
  });
  return ctx;
}

void ensure_context() {
  const DriverApi& d = driver();
  const CUcontext want = primary_context();
  CUcontext cur = nullptr;
  CS_CU_CHECK(d.cuCtxGetCurrent(&cur));
  if (cur != want) CS_CU_CHECK(d.cuCtxSetCurrent(want));
}

std::string current_device_arch() {
  const DriverApi& d = driver();
  CUdevice dev = 0;
  CS_CU_CHECK(d.cuDeviceGet(&dev, 0));
  int major = 0;
  int minor = 0;
  CS_CU_CHECK(d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CS_CU_CHECK(d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  return fmt::format("sm_{}{}", major, minor);
}

std::string cu_result_text(CUresult result) {
  const DriverState& s = state();
  const char* name = nullptr;
  const char* text = nullptr;
  if (s.api.cuGetErrorName != nullptr) s.api.cuGetErrorName(result, &name);
  if (s.api.cuGetErrorString != nullptr) s.api.cuGetErrorString(result, &text);
  return fmt::format("{} ({})", name ? name : fmt::format("CUresult {}", static_cast<int>(result)),
                     text ? text : "no description");
}

void throw_cu_error(CUresult result, const char* call, const char* file, int line) {
  throw CudaError(
      fmt::format("{}:{}: {} failed: {}", basename_of(file), line, call, cu_result_text(result)));
}

void throw_nvrtc_error(nvrtcResult result, const char* call, const char* file, int line) {
  throw CudaError(fmt::format("{}:{}: {} failed: {} (nvrtcResult {})", basename_of(file), line,
                              call, nvrtcGetErrorString(result), static_cast<int>(result)));
}

}  // namespace coldstart::jit
