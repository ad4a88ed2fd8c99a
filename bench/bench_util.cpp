// The benches' shared helper: see bench_util.h.
#include "bench/bench_util.h"

#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "harness/jit/driver.h"

namespace coldstart::bench {

// ---- checked CUDA calls

void check_cuda(int status, const char* call, const char* file, int line) {
  if (status == static_cast<int>(cudaSuccess)) return;
  const auto e = static_cast<cudaError_t>(status);
  std::ostringstream msg;
  msg << file << ":" << line << ": " << call << " failed: " << cudaGetErrorName(e) << ": "
      << cudaGetErrorString(e);
  throw std::runtime_error(msg.str());
}

namespace {

// BENCH_CUDA_CHECK where throwing is not allowed (destructors): prints the error instead.
#define BENCH_CUDA_WARN(call)                                                  \
  do {                                                                         \
    try {                                                                      \
      BENCH_CUDA_CHECK(call);                                                  \
    } catch (const std::exception& e_) {                                       \
      std::fprintf(stderr, "warning: %s\n", e_.what());                        \
    }                                                                          \
  } while (0)

}  // namespace

// ---- device and ceilings

std::string gpu_unavailable_reason() {
  if (!jit::driver_available()) return "no CUDA driver: " + jit::driver_unavailable_reason();
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return std::string("no CUDA device: cudaGetDeviceCount: ") + cudaGetErrorString(e);
  }
  if (n == 0) return "no CUDA device";
#ifndef COLDSTART_WITH_CUDA
  return "this build's libtorch has no CUDA backend";
#else
  if (!at::hasCUDA()) return "libtorch sees no CUDA device";
  return "";
#endif
}

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    int dev = 0;
    BENCH_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp p{};
    BENCH_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    DeviceInfo d;
    d.name = p.name;
    d.sm = p.major * 10 + p.minor;
    d.sm_count = p.multiProcessorCount;
    return d;
  }();
  return info;
}

// Datasheet figures, dense (the datasheets quote tensor-core rates with 2:4 sparsity; dense is
// half of that):
//   NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: HBM3e 4.8 TB/s; BF16 1,979, FP8 3,958 and
//     TF32 989 TFLOPS with sparsity -> 989, 1,979 and 494 dense.
//   NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: HBM3 3.35 TB/s; BF16 1,979, FP8 3,958 and
//     TF32 989 TFLOPS with sparsity -> 989, 1,979 and 494 dense (the H200 has the same compute).
// Selection is by the exact device name, not by SM: sm_90 is shared by the H100 PCIe / NVL, the
// H200 NVL and GH200, whose ceilings differ. Other GPUs (B200 included, whose figures vary by
// board and power) fall back to the H200 entry, with a note in the report.
const std::vector<Ceilings>& ceiling_table() {
  static const std::vector<Ceilings> table = {
      {"NVIDIA H200 (SXM)", "NVIDIA H200", 4.8e12, 989e12, 1979e12, 494e12},
      {"NVIDIA H100 (SXM, 80 GB HBM3)", "NVIDIA H100 80GB HBM3", 3.35e12, 989e12, 1979e12, 494e12},
  };
  return table;
}

namespace {

struct CeilingChoice {
  const Ceilings* ceilings;
  std::string note;
};

const CeilingChoice& ceiling_choice() {
  static const CeilingChoice choice = [] {
    const DeviceInfo& d = device_info();
    for (const Ceilings& c : ceiling_table()) {
      if (d.name == c.device_name) return CeilingChoice{&c, ""};
    }
    const Ceilings& fallback = ceiling_table().front();
    return CeilingChoice{&fallback, "no ceilings for \"" + d.name + "\" (sm_" +
                                        std::to_string(d.sm) + "); percentages are of the " +
                                        fallback.target + "'s"};
  }();
  return choice;
}

double peak_of(const Ceilings& c, Peak p) {
  switch (p) {
    case Peak::kFp8: return c.fp8_flops_per_s;
    case Peak::kTf32: return c.tf32_flops_per_s;
    case Peak::kBf16: break;
  }
  return c.bf16_flops_per_s;
}

std::string describe(const Ceilings& c) {
  std::ostringstream s;
  s << c.target << ": HBM " << c.hbm_bytes_per_s * 1e-9 << " GB/s, dense TFLOP/s bf16 "
    << c.bf16_flops_per_s * 1e-12 << ", fp8 " << c.fp8_flops_per_s * 1e-12 << ", tf32 "
    << c.tf32_flops_per_s * 1e-12;
  return s.str();
}

}  // namespace

const Ceilings& ceilings() { return *ceiling_choice().ceilings; }

const std::string& ceilings_fallback_note() { return ceiling_choice().note; }

// ---- counters

void set_flops_counters(benchmark::State& state, double flops_per_call, double seconds_per_call,
                        Peak peak) {
  const double tflops = seconds_per_call > 0 ? flops_per_call / seconds_per_call * 1e-12 : 0.0;
  const double peak_tflops = peak_of(ceilings(), peak) * 1e-12;
  state.counters["TFLOP/s"] = tflops;
  state.counters["peak_TFLOP/s"] = peak_tflops;
  state.counters["%peak_TFLOP/s"] = 100.0 * tflops / peak_tflops;
}

void set_bytes_counters(benchmark::State& state, double bytes_per_call, double seconds_per_call) {
  const double gbs = seconds_per_call > 0 ? bytes_per_call / seconds_per_call * 1e-9 : 0.0;
  const double peak_gbs = ceilings().hbm_bytes_per_s * 1e-9;
  state.counters["GB/s"] = gbs;
  state.counters["peak_GB/s"] = peak_gbs;
  state.counters["%peak_GB/s"] = 100.0 * gbs / peak_gbs;
}

// ---- timing

EventTimer::EventTimer(void* stream) : stream_(stream) {
  cudaEvent_t a = nullptr, b = nullptr;
  BENCH_CUDA_CHECK(cudaEventCreate(&a));
  start_ = a;
  try {
    BENCH_CUDA_CHECK(cudaEventCreate(&b));
  } catch (...) {
    BENCH_CUDA_WARN(cudaEventDestroy(a));
    throw;
  }
  stop_ = b;
}

EventTimer::~EventTimer() {
  BENCH_CUDA_WARN(cudaEventDestroy(static_cast<cudaEvent_t>(start_)));
  BENCH_CUDA_WARN(cudaEventDestroy(static_cast<cudaEvent_t>(stop_)));
}

void EventTimer::start() {
  BENCH_CUDA_CHECK(
      cudaEventRecord(static_cast<cudaEvent_t>(start_), static_cast<cudaStream_t>(stream_)));
}

double EventTimer::stop_seconds() {
  const auto a = static_cast<cudaEvent_t>(start_);
  const auto b = static_cast<cudaEvent_t>(stop_);
  BENCH_CUDA_CHECK(cudaEventRecord(b, static_cast<cudaStream_t>(stream_)));
  BENCH_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return static_cast<double>(ms) * 1e-3;
}

void synchronize(void* stream) {
  BENCH_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

// ---- main

namespace {

// The value of `--<flag>=value` in argv, else `fallback` (Google Benchmark takes only this form).
std::string flag_value(int argc, char** argv, const std::string& flag, const std::string& fallback) {
  const std::string prefix = "--" + flag + "=";
  std::string value = fallback;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(prefix, 0) == 0) value = a.substr(prefix.size());  // the last one wins
  }
  return value;
}

// Writes a report of no runs to `path` with Google Benchmark's own reporter for `format` (its
// context, custom context included, and an empty benchmark list). False if it cannot be written.
bool write_empty_report(const std::string& path, const std::string& format) {
  std::ofstream f(path);
  if (!f) return false;
  std::unique_ptr<benchmark::BenchmarkReporter> r;
  if (format == "csv") {
    // Deprecated upstream, but still what --benchmark_out_format=csv selects.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    r = std::make_unique<benchmark::CSVReporter>();
#pragma GCC diagnostic pop
  } else if (format == "console") {
    r = std::make_unique<benchmark::ConsoleReporter>(benchmark::ConsoleReporter::OO_None);
  } else {
    r = std::make_unique<benchmark::JSONReporter>();
  }
  r->SetOutputStream(&f);
  r->SetErrorStream(&f);
  benchmark::BenchmarkReporter::Context context;
  context.name_field_width = 0;
  r->ReportContext(context);
  r->Finalize();
  f.flush();
  return static_cast<bool>(f);
}

}  // namespace

int bench_main(const char* bench, int argc, char** argv, const SetupFn& setup) {
  // Read before Initialize, which removes the flags it recognises from argv.
  const std::string out = flag_value(argc, argv, "benchmark_out", "");
  const std::string out_format = flag_value(argc, argv, "benchmark_out_format", "json");
  benchmark::Initialize(&argc, argv);
  if (!setup && benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    const std::string reason = gpu_unavailable_reason();
    if (!reason.empty()) {
      std::printf("%s: skipped (%s)\n", bench, reason.c_str());
      benchmark::AddCustomContext("skipped", reason);
      if (!out.empty() && !write_empty_report(out, out_format)) {
        std::fprintf(stderr, "%s: cannot write %s\n", bench, out.c_str());
        return 1;
      }
      benchmark::Shutdown();
      return 0;
    }
    const DeviceInfo& d = device_info();
    benchmark::AddCustomContext("device", d.name + " (sm_" + std::to_string(d.sm) + ", " +
                                              std::to_string(d.sm_count) + " SMs)");
    benchmark::AddCustomContext("ceilings", describe(ceilings()));
    if (!ceilings_fallback_note().empty()) {
      benchmark::AddCustomContext("ceilings_note", ceilings_fallback_note());
      std::fprintf(stderr, "%s: %s\n", bench, ceilings_fallback_note().c_str());
    }
    if (setup && !setup(std::vector<std::string>(argv + 1, argv + argc))) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", bench, e.what());
    return 1;
  }
}

jit::JitRuntime& default_runtime() {
  static auto* rt = new jit::JitRuntime(jit::JitOptions{});
  return *rt;
}

void queue_busy_matmuls(int n) {
  static const at::Tensor* big = new at::Tensor(at::randn(
      {8192, 8192}, at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16)));
  for (int i = 0; i < n; ++i) (void)at::mm(*big, *big);
}

}  // namespace coldstart::bench
