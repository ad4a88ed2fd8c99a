// CUDA API host time by kind through CUPTI's callback API. See api_timer.h.
#include "harness/jit/api_timer.h"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#if __has_include(<cupti_callbacks.h>)
#include <cupti_callbacks.h>
#define CS_HAVE_CUPTI 1
#else
#define CS_HAVE_CUPTI 0
#endif

namespace coldstart::jit {
namespace {

bool starts(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool has(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

}  // namespace

const char* host_part_name(HostPart part) {
  switch (part) {
    case HostPart::kAllocator: return "allocator";
    case HostPart::kModule: return "module";
    case HostPart::kLaunch: return "launch";
    case HostPart::kGraphLaunch: return "graph_launch";
    case HostPart::kWait: return "wait";
    case HostPart::kOtherApi: return "other_api";
    case HostPart::kJitTimed: return "jit_timed";
    case HostPart::kJitLaunch: return "jit_launch";
    case HostPart::kModelHost: return "model_host";
    case HostPart::kReporting: return "reporting";
    case HostPart::kEngineHost: return "engine_host";
  }
  return "other_api";
}

HostPart classify_api_call(std::string_view name) {
  // CUPTI names carry a version suffix ("cudaMalloc_v3020"); the base name decides.
  if (const size_t v = name.find("_v"); v != std::string_view::npos) name = name.substr(0, v);
  // Waits first: a synchronous copy or memset blocks on the GPU's earlier work, and libtorch's
  // copies to pageable host memory block too, so every copy counts as a wait.
  if (has(name, "Synchronize") || has(name, "Memcpy") ||
      ((starts(name, "cudaMemset") || starts(name, "cuMemset")) && !has(name, "Async")))
    return HostPart::kWait;
  if (starts(name, "cudaGraphLaunch") || starts(name, "cuGraphLaunch") ||
      starts(name, "cudaGraphUpload") || starts(name, "cuGraphUpload"))
    return HostPart::kGraphLaunch;
  if (starts(name, "cudaLaunch") || starts(name, "cuLaunch")) return HostPart::kLaunch;
  if (has(name, "Malloc") || starts(name, "cudaFree") || starts(name, "cuMemFree") ||
      starts(name, "cuMemAlloc") || starts(name, "cuMemCreate") || starts(name, "cuMemRelease") ||
      starts(name, "cuMemMap") || starts(name, "cuMemUnmap") || starts(name, "cuMemSetAccess") ||
      starts(name, "cuMemAddress") || has(name, "HostAlloc") || has(name, "HostRegister") ||
      has(name, "HostUnregister") || has(name, "MemPool"))
    return HostPart::kAllocator;
  if (starts(name, "cuModule") || starts(name, "cuLibrary") || starts(name, "cuKernel") ||
      starts(name, "cuLink") || starts(name, "cudaGetFuncBySymbol") || starts(name, "cudaGetKernel") ||
      starts(name, "cudaFuncGetAttributes") || starts(name, "cudaFuncSetAttribute") ||
      starts(name, "cuFuncGetAttribute") || starts(name, "cuFuncSetAttribute") ||
      starts(name, "cuFuncGetModule") || starts(name, "cuFuncLoad"))
    return HostPart::kModule;
  return HostPart::kOtherApi;
}

double api_stall_ms(const HostTimes& t) {
  double s = 0;
  for (HostPart p : {HostPart::kAllocator, HostPart::kModule, HostPart::kLaunch,
                     HostPart::kGraphLaunch, HostPart::kOtherApi})
    s += t[static_cast<size_t>(p)];
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

struct TimerState {
  std::atomic<bool> active{false};
  std::atomic<std::thread::id> measured{};
  std::array<std::atomic<long long>, kNumHostParts> ns{};  // totals, nanoseconds
};
TimerState g_state;

// The measured thread's frames: the innermost open one is charged until the next change.
struct Frames {
  int top = -1;            // the part charged now; -1 before start() on this thread
  std::vector<int> stack;  // the parts below it
  Clock::time_point last;  // when `top` was last charged up to
  int opaque = 0;          // opaque frames open: nothing inside opens a frame
  int api_depth = 0;       // API calls in flight (a runtime call makes driver calls)
  bool api_frame = false;  // the outermost API call in flight opened a frame
};
thread_local Frames t;

bool on_measured_thread() {
  return g_state.active.load(std::memory_order_relaxed) &&
         std::this_thread::get_id() == g_state.measured.load(std::memory_order_relaxed);
}

void charge(Clock::time_point now) {
  if (t.top >= 0) {
    g_state.ns[static_cast<size_t>(t.top)].fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - t.last).count(),
        std::memory_order_relaxed);
  }
  t.last = now;
}

void push(int part) {
  charge(Clock::now());
  t.stack.push_back(t.top);
  t.top = part;
}

void pop() {
  charge(Clock::now());
  t.top = t.stack.back();
  t.stack.pop_back();
}

// Kind per (domain, callback id), filled on first sight: classifying by name once per function.
std::mutex g_kinds_mu;
std::vector<signed char> g_kinds[2];

HostPart kind_of(int domain_slot, unsigned cbid, const char* name) {
  std::lock_guard<std::mutex> lock(g_kinds_mu);
  auto& kinds = g_kinds[domain_slot];
  if (cbid >= 65536) return classify_api_call(name ? name : "");
  if (kinds.size() <= cbid) kinds.resize(cbid + 1, -1);
  if (kinds[cbid] < 0) kinds[cbid] = static_cast<signed char>(classify_api_call(name ? name : ""));
  return static_cast<HostPart>(kinds[cbid]);
}

#if CS_HAVE_CUPTI
using SubscribeFn = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
using EnableDomainFn = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
using ResultStringFn = CUptiResult (*)(CUptiResult, const char**);

void CUPTIAPI on_api_call(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  if (!on_measured_thread()) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite == CUPTI_API_ENTER) {
    if (t.api_depth++ > 0) return;
    t.api_frame = t.opaque == 0 && t.top >= 0;
    if (t.api_frame)
      push(static_cast<int>(kind_of(domain == CUPTI_CB_DOMAIN_RUNTIME_API ? 0 : 1, cbid, cb->functionName)));
    return;
  }
  if (t.api_depth == 0 || --t.api_depth > 0) return;
  if (t.api_frame) pop();
  t.api_frame = false;
}

// The CUPTI library: one that is already loaded (libtorch's profiler may have brought one),
// else the toolkit's. CUPTI's soname carries the CUDA major version.
void* open_cupti(std::string* why_not) {
  const std::string major = std::to_string(CUDA_VERSION / 1000);
  std::vector<std::string> names = {"libcupti.so." + major, "libcupti.so"};
  for (const std::string& n : names)
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_NOLOAD)) return h;
  std::vector<std::string> tried;
  std::vector<std::string> roots;
  if (const char* home = std::getenv("CUDA_HOME")) roots.emplace_back(home);
  roots.emplace_back("/usr/local/cuda");
  for (const std::string& n : names) {
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    tried.push_back(n);
    for (const std::string& root : roots) {
      for (const char* sub : {"/lib64/", "/lib/", "/extras/CUPTI/lib64/"}) {
        const std::string path = root + sub + n;
        if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
        tried.push_back(path);
      }
    }
  }
  *why_not = fmt::format("CUPTI not found (tried {})", fmt::join(tried, ", "));
  return nullptr;
}

EnableDomainFn g_enable = nullptr;
ResultStringFn g_result_text = nullptr;
CUpti_SubscriberHandle g_subscriber = nullptr;

bool subscribe(std::string* why_not) {
  void* h = open_cupti(why_not);
  if (h == nullptr) return false;
  auto sub = reinterpret_cast<SubscribeFn>(dlsym(h, "cuptiSubscribe"));
  auto enable = reinterpret_cast<EnableDomainFn>(dlsym(h, "cuptiEnableDomain"));
  auto text = reinterpret_cast<ResultStringFn>(dlsym(h, "cuptiGetResultString"));
  if (sub == nullptr || enable == nullptr) {
    *why_not = "libcupti lacks cuptiSubscribe / cuptiEnableDomain";
    return false;
  }
  auto failed = [&](const char* call, CUptiResult r) {
    const char* s = nullptr;
    if (text == nullptr || text(r, &s) != CUPTI_SUCCESS || s == nullptr) s = "unknown CUPTI error";
    *why_not = fmt::format("{} failed: {} ({})", call, s, static_cast<int>(r));
    return false;
  };
  CUpti_SubscriberHandle handle = nullptr;
  if (const CUptiResult r = sub(&handle, reinterpret_cast<CUpti_CallbackFunc>(&on_api_call), nullptr);
      r != CUPTI_SUCCESS)
    return failed("cuptiSubscribe", r);
  g_enable = enable;
  g_result_text = text;
  g_subscriber = handle;
  if (const CUptiResult r = enable(1, handle, CUPTI_CB_DOMAIN_RUNTIME_API); r != CUPTI_SUCCESS)
    return failed("cuptiEnableDomain(runtime API)", r);
  if (const CUptiResult r = enable(1, handle, CUPTI_CB_DOMAIN_DRIVER_API); r != CUPTI_SUCCESS)
    return failed("cuptiEnableDomain(driver API)", r);
  return true;
}
#endif

}  // namespace

ApiTimer* ApiTimer::start(std::string* why_not) {
  static std::string reason;
  static const bool ok = [] {
#if CS_HAVE_CUPTI
    return subscribe(&reason);
#else
    reason = "built without CUPTI headers (cupti_callbacks.h)";
    return false;
#endif
  }();
  if (!ok) {
    if (why_not) *why_not = reason;
    return nullptr;
  }
  // This thread's base frame: the engine's own code.
  if (t.top < 0) {
    t.top = static_cast<int>(HostPart::kEngineHost);
    t.last = Clock::now();
  }
  g_state.measured.store(std::this_thread::get_id());
  g_state.active.store(true);
  static ApiTimer timer;
  return &timer;
}

void ApiTimer::set_api_callbacks(bool on) {
#if CS_HAVE_CUPTI
  for (CUpti_CallbackDomain domain : {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API}) {
    if (const CUptiResult r = g_enable(on ? 1 : 0, g_subscriber, domain); r != CUPTI_SUCCESS) {
      const char* s = nullptr;
      if (g_result_text == nullptr || g_result_text(r, &s) != CUPTI_SUCCESS || s == nullptr)
        s = "unknown CUPTI error";
      throw std::runtime_error(fmt::format("cuptiEnableDomain({}, {} API) failed: {} ({})", on ? 1 : 0,
                                           domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "runtime" : "driver",
                                           s, static_cast<int>(r)));
    }
  }
  // A call in flight when callbacks went off never reports its exit: forget it.
  if (!on) {
    t.api_depth = 0;
    t.api_frame = false;
  }
#else
  (void)on;
#endif
}

HostTimes ApiTimer::totals() const {
  if (on_measured_thread()) charge(Clock::now());
  HostTimes out{};
  for (size_t k = 0; k < kNumHostParts; ++k) out[k] = g_state.ns[k].load(std::memory_order_relaxed) / 1e6;
  return out;
}

HostFrame::HostFrame(HostPart part) : HostFrame(part, false) {}

HostFrame::HostFrame(HostPart part, bool opaque) {
  if (!on_measured_thread() || t.opaque > 0 || t.top < 0) return;
  push(static_cast<int>(part));
  entered_ = true;
  opaque_ = opaque;
  if (opaque_) ++t.opaque;
}

HostFrame::~HostFrame() {
  if (!entered_) return;
  if (opaque_) --t.opaque;
  pop();
}

}  // namespace coldstart::jit
