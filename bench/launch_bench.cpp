// Launch-path benchmarks of the JIT runtime (Google Benchmark).
//
//   BM_JitLaunchHit      compile key from ~8 arguments (4 pointers, 3 ints, 1 float), cache lookup
//                        and cuLaunchKernel through JitRuntime::launch, on a cache hit.   [GPU]
//   BM_BareLaunch        cuLaunchKernel of the same CUfunction with the same arguments.  [GPU]
//   BM_EnsureHit*        the key/hash/lookup part alone (JitRuntime in compile-only mode,
//                        ensure() on a hit); runs everywhere, no GPU needed.             [CPU]
//
// The added host time per launch is BM_JitLaunchHit - BM_BareLaunch (target: < 2 us). Launches
// go to one stream, synchronized every 1024 iterations so the launch queue never fills up.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "harness/jit/compiled_kernel.h"
#include "harness/jit/driver.h"
#include "harness/jit/jit.h"

namespace cj = coldstart::jit;

namespace {

const char* const kEmptySource = R"(
extern "C" __global__ void nearly_empty(float* a, const float* b, const unsigned char* c,
                                        const unsigned short* d, int n, int m, long long k,
                                        float s) {
  if (n < 0 && threadIdx.x == 0) a[0] = b[0] * s + c[0] + d[0] + m + k;  // never true
}
)";

const cj::KernelSource& kernel() {
  static const cj::KernelSource k{
      "nearly_empty", "nearly_empty", kEmptySource, {"a", "b", "c", "d", "n", "m", "k", "s"}, {}};
  return k;
}

const std::vector<cj::Constexpr> kConstexprs = {{"BLOCK", 128}, {"HEAD_DIM", 128}};

std::vector<cj::KernelArg> make_args(uint64_t a, uint64_t b, uint64_t c, uint64_t d, int n) {
  return {cj::KernelArg::pointer(a, cj::DType::kF32),  cj::KernelArg::pointer(b, cj::DType::kF32),
          cj::KernelArg::pointer(c, cj::DType::kU8),   cj::KernelArg::pointer(d, cj::DType::kBF16),
          cj::KernelArg::i32(n),                       cj::KernelArg::i32(1),
          cj::KernelArg::i64(4096),                    cj::KernelArg::f32(0.5f)};
}

// ---- GPU part

struct GpuFixture {
  std::unique_ptr<cj::JitRuntime> rt;
  CUstream stream = nullptr;
  CUdeviceptr buf = 0;
  std::string error;  // non-empty: skip with this reason
};

GpuFixture& gpu() {
  static GpuFixture f = [] {
    GpuFixture g;
    if (!cj::driver_available()) {
      g.error = "no GPU: " + cj::driver_unavailable_reason();
      return g;
    }
    try {
      cj::JitOptions o;
      g.rt = std::make_unique<cj::JitRuntime>(o);
      cj::ensure_context();
      const cj::DriverApi& d = cj::driver();
      CS_CU_CHECK(d.cuStreamCreate(&g.stream, CU_STREAM_NON_BLOCKING));
      CS_CU_CHECK(d.cuMemAlloc(&g.buf, 1 << 20));
    } catch (const std::exception& e) {
      g.error = std::string("GPU set-up failed: ") + e.what();
    }
    return g;
  }();
  return f;
}

cj::LaunchDims dims() {
  cj::LaunchDims d;
  d.grid[0] = 1;
  d.block[0] = 32;
  return d;
}

void BM_JitLaunchHit(benchmark::State& state) {
  GpuFixture& g = gpu();
  if (!g.error.empty()) {
    state.SkipWithError(g.error.c_str());
    return;
  }
  const cj::LaunchDims ld = dims();
  const uint64_t p = g.buf;
  g.rt->launch(kernel(), kConstexprs, make_args(p, p + 4096, p + 8192, p + 12288, 64), ld,
               g.stream);  // the compile, outside the timing
  int64_t i = 0;
  for (auto _ : state) {
    // Arguments built from "tensors" each time, as a model's forward pass does.
    std::vector<cj::KernelArg> args = make_args(p, p + 4096, p + 8192, p + 12288, 64);
    g.rt->launch(kernel(), kConstexprs, args, ld, g.stream);
    if ((++i & 1023) == 0) CS_CU_CHECK(cj::driver().cuStreamSynchronize(g.stream));
  }
  CS_CU_CHECK(cj::driver().cuStreamSynchronize(g.stream));
  state.counters["compiles"] = static_cast<double>(g.rt->monitor().records().size());
}
BENCHMARK(BM_JitLaunchHit);

void BM_BareLaunch(benchmark::State& state) {
  GpuFixture& g = gpu();
  if (!g.error.empty()) {
    state.SkipWithError(g.error.c_str());
    return;
  }
  const uint64_t p = g.buf;
  const cj::CompiledKernel& k =
      g.rt->ensure(kernel(), kConstexprs, make_args(p, p + 4096, p + 8192, p + 12288, 64));
  CUdeviceptr a = p, b = p + 4096, c = p + 8192, d = p + 12288;
  int n = 64, m = 1;
  long long kk = 4096;
  float s = 0.5f;
  void* params[] = {&a, &b, &c, &d, &n, &m, &kk, &s};
  const cj::DriverApi& drv = cj::driver();
  int64_t i = 0;
  for (auto _ : state) {
    CS_CU_CHECK(drv.cuLaunchKernel(k.function, 1, 1, 1, 32, 1, 1, 0, g.stream, params, nullptr));
    if ((++i & 1023) == 0) CS_CU_CHECK(drv.cuStreamSynchronize(g.stream));
  }
  CS_CU_CHECK(drv.cuStreamSynchronize(g.stream));
}
BENCHMARK(BM_BareLaunch);

// ---- CPU part: key/hash/lookup

cj::JitRuntime& cpu_runtime() {
  static cj::JitRuntime rt([] {
    cj::JitOptions o;
    o.arch = "sm_90";
    o.launch = false;
    return o;
  }());
  return rt;
}

// ensure() on a hit, arguments built inside the loop (the launch path minus cuLaunchKernel).
void BM_EnsureHit_BuildArgs(benchmark::State& state) {
  cj::JitRuntime& rt = cpu_runtime();
  const uint64_t p = uint64_t{1} << 32;
  rt.ensure(kernel(), kConstexprs, make_args(p, p + 4096, p + 8192, p + 12288, 64));
  for (auto _ : state) {
    std::vector<cj::KernelArg> args = make_args(p, p + 4096, p + 8192, p + 12288, 64);
    benchmark::DoNotOptimize(&rt.ensure(kernel(), kConstexprs, args));
  }
  state.counters["compiles"] = static_cast<double>(rt.monitor().records().size());
}
BENCHMARK(BM_EnsureHit_BuildArgs);

// ensure() on a hit with prebuilt arguments: the hash + lookup + verification alone.
void BM_EnsureHit(benchmark::State& state) {
  cj::JitRuntime& rt = cpu_runtime();
  const uint64_t p = uint64_t{1} << 32;
  const std::vector<cj::KernelArg> args = make_args(p, p + 4096, p + 8192, p + 12288, 64);
  rt.ensure(kernel(), kConstexprs, args);
  for (auto _ : state) benchmark::DoNotOptimize(&rt.ensure(kernel(), kConstexprs, args));
}
BENCHMARK(BM_EnsureHit);

// For scale: building the full CompileKey text, which the hit path avoids.
void BM_MakeCompileKeyText(benchmark::State& state) {
  const uint64_t p = uint64_t{1} << 32;
  const std::vector<cj::KernelArg> args = make_args(p, p + 4096, p + 8192, p + 12288, 64);
  for (auto _ : state) {
    std::string s = cj::make_compile_key(kernel(), kConstexprs, args, "sm_90", "nvrtc-13.0").str();
    benchmark::DoNotOptimize(s.data());
  }
}
BENCHMARK(BM_MakeCompileKeyText);

}  // namespace

BENCHMARK_MAIN();
