// coldstart doctor. The GPU facts come from the driver API (harness/jit/driver.h), so they show
// even when this build's libtorch has no CUDA; the graph check is the only torch user.
#include "harness/cli/doctor.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/jit/driver.h"
#include "harness/jit/jit.h"
#include "harness/jit/nvrtc_archs.h"
#include "harness/runtime/device.h"
#include "harness/runtime/graph.h"

namespace coldstart::cli {
namespace {

// A kernel with no includes: checks NVRTC itself. Each thread writes 2*i+1.
const char* const kFillSource = R"(
extern "C" __global__ void cs_doctor_fill(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * static_cast<float>(i) + 1.0f;
}
)";

// The replay's kernels include the toolkit's bf16 header; this checks NVRTC finds it.
const char* const kHeaderSource = R"(
#include <cuda_bf16.h>
extern "C" __global__ void cs_doctor_bf16(__nv_bfloat16* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(static_cast<float>(i));
}
)";

jit::KernelSource fill_kernel() {
  return jit::KernelSource{"cs_doctor_fill", "cs_doctor_fill", kFillSource, {"out", "n"}, {"n"}};
}

jit::KernelSource header_kernel() {
  return jit::KernelSource{"cs_doctor_bf16", "cs_doctor_bf16", kHeaderSource, {"out", "n"}, {"n"}};
}

constexpr int kElems = 64;

enum class State { kOk, kFail, kSkip };

struct Check {
  std::string name;
  State state = State::kSkip;
  std::string detail;  ///< what happened (one line)
  std::string advice;  ///< what to do; empty when nothing is to be done
};

const char* state_tag(State s) {
  switch (s) {
    case State::kOk: return "[ ok ]";
    case State::kFail: return "[FAIL]";
    case State::kSkip: return "[skip]";
  }
  return "";
}

std::string first_line(const std::string& text) {
  const auto nl = text.find('\n');
  return nl == std::string::npos ? text : text.substr(0, nl);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// "13.0" -> 130 (major*10 + minor); 0 when unparsable.
int version_number(const std::string& v) {
  int major = 0, minor = 0;
  if (std::sscanf(v.c_str(), "%d.%d", &major, &minor) < 1) return 0;
  return major * 10 + minor;
}

struct Gpu {
  std::string name;
  int sm = 0;
  int sm_count = 0;
  long long memory_bytes = 0;
};

// Every device the driver sees. Throws CudaError on a failing driver call.
std::vector<Gpu> list_gpus() {
  const jit::DriverApi& d = jit::driver();
  int count = 0;
  CS_CU_CHECK(d.cuDeviceGetCount(&count));
  std::vector<Gpu> gpus;
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    CS_CU_CHECK(d.cuDeviceGet(&dev, i));
    Gpu g;
    char name[256] = {0};
    CS_CU_CHECK(d.cuDeviceGetName(name, sizeof name - 1, dev));
    g.name = name;
    int major = 0, minor = 0;
    CS_CU_CHECK(d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CS_CU_CHECK(d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    g.sm = major * 10 + minor;
    CS_CU_CHECK(d.cuDeviceGetAttribute(&g.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    size_t bytes = 0;
    CS_CU_CHECK(d.cuDeviceTotalMem(&bytes, dev));
    g.memory_bytes = static_cast<long long>(bytes);
    gpus.push_back(g);
  }
  return gpus;
}

// Loads `cubin` with the driver, runs cs_doctor_fill over kElems floats and checks the values.
// Returns a one-line description; throws CudaError / Error on failure. Cleanup never hides the
// first error (its own failures are ignored).
std::string load_and_run(const std::vector<char>& cubin) {
  const jit::DriverApi& d = jit::driver();
  jit::ensure_context();
  CUmodule mod = nullptr;
  CUdeviceptr buf = 0;
  struct Cleanup {
    const jit::DriverApi& d;
    CUmodule& mod;
    CUdeviceptr& buf;
    ~Cleanup() {
      if (buf != 0) (void)d.cuMemFree(buf);
      if (mod != nullptr) (void)d.cuModuleUnload(mod);
    }
  } cleanup{d, mod, buf};
  const auto t0 = std::chrono::steady_clock::now();
  CS_CU_CHECK(d.cuModuleLoadData(&mod, cubin.data()));
  const double load_ms = ms_since(t0);
  CUfunction fn = nullptr;
  CS_CU_CHECK(d.cuModuleGetFunction(&fn, mod, "cs_doctor_fill"));
  CS_CU_CHECK(d.cuMemAlloc(&buf, kElems * sizeof(float)));
  int n = kElems;
  void* params[] = {&buf, &n};
  CS_CU_CHECK(d.cuLaunchKernel(fn, 1, 1, 1, kElems, 1, 1, 0, nullptr, params, nullptr));
  CS_CU_CHECK(d.cuStreamSynchronize(nullptr));
  std::vector<float> host(kElems, 0.f);
  CS_CU_CHECK(d.cuMemcpyDtoH(host.data(), buf, kElems * sizeof(float)));
  for (int i = 0; i < kElems; ++i) {
    if (host[i] != 2.0f * i + 1.0f) {
      throw Error(fmt::format("kernel ran but wrote {} at index {} (expected {})", host[i], i,
                              2.0f * i + 1.0f));
    }
  }
  return fmt::format("cuModuleLoadData {:.2f} ms; launched, {} values correct", load_ms, kElems);
}

// Captures `x += 1` into a CUDA graph on a side stream, replays it 3 times, checks x == 3.
std::string graph_roundtrip() {
#ifdef COLDSTART_WITH_CUDA
  CaptureStreamScope scope(DeviceMode::kCuda);
  at::Tensor x = at::zeros({256}, at::TensorOptions().device(at::kCUDA).dtype(at::kFloat));
  x.add_(1.0);  // eager run first, so the op's kernel is loaded before capture
  x.zero_();
  GraphPool pool;
  CapturedGraph graph(DeviceMode::kCuda);
  graph.capture([&] { x.add_(1.0); }, pool);
  for (int i = 0; i < 3; ++i) graph.replay();
  device_synchronize(DeviceMode::kCuda);
  const float lo = x.min().item<float>();
  const float hi = x.max().item<float>();
  if (lo != 3.0f || hi != 3.0f) {
    throw Error(fmt::format("replayed 3 times but values are {}..{} (expected 3)", lo, hi));
  }
  return "captured x.add_(1) on a side stream, replayed 3 times, values correct";
#else
  throw Error("not built with CUDA");
#endif
}

}  // namespace

int doctor_main() {
  std::ostream& out = std::cout;
  try {
    // ---- what this build is
    std::string nvrtc;
    std::string nvrtc_error;
    try {
      nvrtc = jit::nvrtc_version();
    } catch (const std::exception& e) {
      nvrtc_error = first_line(e.what());
    }
    const bool with_cuda = built_with_cuda();
    out << "coldstart doctor\n\nbuild\n";
    out << fmt::format("  libtorch       {} ({})\n", TORCH_VERSION,
                       with_cuda ? "CUDA backend built in" : "CPU only: compile-only build");
    out << fmt::format("  CUDA headers   {}.{} (the toolkit this was built with)\n",
                       CUDA_VERSION / 1000, (CUDA_VERSION % 1000) / 10);
    out << fmt::format("  NVRTC          {}\n", nvrtc.empty() ? "unavailable: " + nvrtc_error : nvrtc);
    if (!nvrtc.empty()) {
      // What --arch / --target may ask for with this toolkit (an older distribution toolkit lacks
      // sm_90a and sm_100).
      out << fmt::format("  NVRTC targets  {}\n", jit::nvrtc_targets_text());
    }

    // ---- what this machine has
    out << "\nmachine\n";
    const bool have_driver = jit::driver_available();
    std::vector<Gpu> gpus;
    std::string gpu_error;
    if (have_driver) {
      out << fmt::format("  driver         CUDA {} (libcuda.so.1)\n", jit::driver_version());
      try {
        gpus = list_gpus();
      } catch (const std::exception& e) {
        gpu_error = first_line(e.what());
      }
      for (size_t i = 0; i < gpus.size(); ++i) {
        const Gpu& g = gpus[i];
        out << fmt::format("  GPU {}          {}, sm_{}, {} SMs, {:.1f} GiB\n", i, g.name, g.sm,
                           g.sm_count, static_cast<double>(g.memory_bytes) / (1ull << 30));
      }
      if (!gpu_error.empty()) out << "  GPUs           cannot list: " << gpu_error << "\n";
    } else {
      out << "  driver         none (" << jit::driver_unavailable_reason() << ")\n";
    }
    DeviceInfo info;
    std::string select_error;
    try {
      info = select_device("auto", "");
    } catch (const std::exception& e) {
      select_error = first_line(e.what());
      info.mode = DeviceMode::kCompileOnly;
      info.sm = 90;
    }
    if (info.mode == DeviceMode::kCuda) {
      out << fmt::format("  CUDA runtime   {} (libtorch's)\n",
                         info.cuda_runtime_version.empty() ? "unknown" : info.cuda_runtime_version);
    }
    out << fmt::format("  mode           {} (what `--device auto` picks)\n",
                       device_mode_name(info.mode));

    // ---- checks
    std::vector<Check> checks;
    std::vector<std::string> notes;
    const bool gpu_visible = have_driver && !gpus.empty();
    const std::string arch = gpu_visible ? "sm_" + std::to_string(gpus[0].sm) : "sm_90";

    const std::string& why = jit::driver_unavailable_reason();
    if (!have_driver && why.rfind("dlopen", 0) == 0) {
      notes.push_back(
          "no libcuda.so.1 (" + why +
          "): compile-only mode works (kernels are compiled, never run; times are null). GPU "
          "runs need the NVIDIA driver: install it, or start the container with GPU access "
          "(e.g. `docker run --gpus all` with the NVIDIA container toolkit).");
    } else if (!have_driver) {
      notes.push_back(
          "the NVIDIA driver is installed but unusable (" + why +
          "): compile-only mode works. For GPU runs check `nvidia-smi` and that "
          "CUDA_VISIBLE_DEVICES (if set) names a GPU.");
    } else if (gpus.empty() && gpu_error.empty()) {
      notes.push_back("the driver sees no GPU: check `nvidia-smi` and CUDA_VISIBLE_DEVICES.");
    }
    if (gpu_visible && !with_cuda) {
      notes.push_back(
          "a GPU is present but this build's libtorch has no CUDA (e.g. Debian's libtorch-dev), "
          "so replays run compile-only. For GPU runs, build against a PyTorch install with CUDA "
          "(README, \"Building against a PyTorch install on a GPU machine\"; or -DTorch_DIR=...).");
    }
    if (gpu_visible && with_cuda && info.mode != DeviceMode::kCuda) {
      notes.push_back("the driver sees a GPU but libtorch does not (" +
                      (select_error.empty() ? std::string("torch reports no CUDA device")
                                            : select_error) +
                      "): check that libtorch's CUDA version is supported by driver CUDA " +
                      jit::driver_version() + ".");
    }

    // NVRTC: a kernel with no includes, for the GPU's arch (sm_90 without a GPU).
    Check compile{"NVRTC compile"};
    std::vector<char> cubin;
    const std::vector<jit::KernelArg> args = {jit::KernelArg::pointer(0, jit::DType::kF32),
                                              jit::KernelArg::i32(kElems)};
    try {
      const auto t0 = std::chrono::steady_clock::now();
      cubin = jit::compile_to_cubin(fill_kernel(), {}, args, arch);
      compile.state = State::kOk;
      compile.detail = fmt::format("tiny kernel -> {} cubin, {} bytes, {:.1f} ms", arch,
                                   cubin.size(), ms_since(t0));
    } catch (const std::exception& e) {
      compile.state = State::kFail;
      compile.detail = first_line(e.what());
      compile.advice =
          "NVRTC cannot compile for " + arch +
          ": check that libnvrtc.so matches the toolkit this was built with and knows this arch "
          "(a newer GPU needs a newer CUDA toolkit).";
    }
    checks.push_back(compile);

    Check headers{"NVRTC headers"};
    try {
      const std::vector<jit::KernelArg> hargs = {jit::KernelArg::pointer(0, jit::DType::kBF16),
                                                 jit::KernelArg::i32(kElems)};
      (void)jit::compile_to_cubin(header_kernel(), {}, hargs, arch);
      headers.state = State::kOk;
      headers.detail = "<cuda_bf16.h> found";
    } catch (const std::exception& e) {
      headers.state = State::kFail;
      std::string text = e.what();
      headers.detail = text.find("cuda_bf16.h") != std::string::npos
                           ? "<cuda_bf16.h> not found"
                           : first_line(text);
      headers.advice =
          "the kernels include CUDA headers: set COLDSTART_CUDA_INCLUDE_DIR to the toolkit's "
          "include directory (the one holding cuda_bf16.h), e.g. /usr/local/cuda/include.";
    }
    checks.push_back(headers);

    Check load{"driver load + launch"};
    if (!have_driver || !gpu_visible) {
      load.detail = "no usable GPU driver: kernels are compiled, never loaded (compile-only mode)";
    } else if (cubin.empty()) {
      load.detail = "nothing to load: the NVRTC compile failed";
    } else {
      try {
        load.detail = load_and_run(cubin);
        load.state = State::kOk;
      } catch (const std::exception& e) {
        load.state = State::kFail;
        load.detail = first_line(e.what());
        const int drv = version_number(jit::driver_version());
        const int rtc = version_number(nvrtc);
        load.advice =
            drv > 0 && rtc > drv
                ? fmt::format("NVRTC {} is newer than the driver (CUDA {}), which cannot load its "
                              "cubins: update the NVIDIA driver, or build against a CUDA toolkit "
                              "no newer than the driver.",
                              nvrtc, jit::driver_version())
                : "the driver could not load or run a cubin NVRTC made for this GPU: check "
                  "`nvidia-smi` for the GPU's state (a sticky error needs a driver reload).";
      }
    }
    checks.push_back(load);

    Check graphs{"CUDA graphs"};
    if (!with_cuda) {
      graphs.detail = "not built with CUDA: compile-only (graph capture runs the body once)";
    } else if (info.mode != DeviceMode::kCuda) {
      graphs.detail = "no GPU usable by libtorch: compile-only";
    } else {
      try {
        graphs.detail = graph_roundtrip();
        graphs.state = State::kOk;
      } catch (const std::exception& e) {
        graphs.state = State::kFail;
        graphs.detail = first_line(e.what());
        graphs.advice =
            "CUDA graph capture/replay through libtorch failed: the cuda mode's graph_capture "
            "phase will fail the same way; check the libtorch/driver versions above.";
      }
    }
    checks.push_back(graphs);

    // What the detected mode needs: compile-only needs NVRTC (and its headers); cuda needs all.
    const bool cuda_mode = info.mode == DeviceMode::kCuda;
    bool ready = true;
    for (const Check& c : checks) {
      const bool needed = cuda_mode || c.name == "NVRTC compile" || c.name == "NVRTC headers";
      if (needed && c.state != State::kOk) ready = false;
    }

    out << "\nchecks\n";
    for (const Check& c : checks) {
      out << fmt::format("  {} {:<21} {}\n", state_tag(c.state), c.name, c.detail);
    }
    std::vector<std::string> todo = notes;
    for (const Check& c : checks)
      if (!c.advice.empty()) todo.push_back(c.name + ": " + c.advice);
    if (!todo.empty()) {
      out << "\nwhat to do\n";
      for (const std::string& t : todo) out << "  - " << t << "\n";
    }
    out << "\n"
        << (ready ? fmt::format("ready: everything {} mode needs works\n",
                                device_mode_name(info.mode))
                  : fmt::format("NOT ready: {} mode needs the failed checks above\n",
                                device_mode_name(info.mode)));
    out.flush();
    return ready ? 0 : 1;
  } catch (const std::exception& e) {
    out.flush();
    std::cerr << "coldstart doctor: unexpected error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace coldstart::cli
