// deepgemm benchmark (Google Benchmark, GPU only; skips without a CUDA GPU): our fp8_gemm_nt
// (harness/kernels/deepgemm, DeepGEMM's SM90 heuristic picks the tile) side by side with
// libtorch's FP8 scaled matmul (at::_scaled_mm, cuBLASLt) in one run, for DeepSeek V4-Flash's
// FP8 linear shapes (hf-configs/deepseek-v4-flash.json):
//
//   BM_Fp8Gemm/<impl>/<shape>/<M>   impl 0: ours (WGMMA), 1: ours (mma.sync path, what sm_100a
//                                   compiles), 2: cuBLASLt with the same 1x128 / 128x128 block
//                                   scales (PyTorch's blockwise _scaled_mm; skipped where this
//                                   libtorch lacks it), 3: cuBLASLt with per-tensor scales (its
//                                   fastest FP8 path, an upper bound)
//                                   shape 0: fused wq_a+wkv (N 1536, K 4096), 1: wq_b (32768, 1024),
//                                   2: wo_b (4096, 8192), 3: shared expert w13 (4096, 4096)
//                                   M = 128, 1024, 4096
//
// Time: CUDA events around 20 back-to-back calls, queued behind large matmuls so host launch cost
// does not idle the GPU. Counters: `TFLOP/s` (2 M N K per call), `%peak` of the H200's dense FP8
// tensor peak (1979 TFLOP/s), `us/call`. The label names the config the heuristic picked.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>
#include <torch/version.h>

#include <functional>
#include <string>
#include <vector>

#include "bench/h200_ceilings.h"
#include "harness/jit/driver.h"
#include "harness/jit/jit.h"
#include "harness/kernels/deepgemm/deepgemm.h"
#include "harness/kernels/launch_util.h"

namespace cj = coldstart::jit;
namespace dg = coldstart::deepgemm;

namespace {

constexpr double kPeakFp8Tflops = coldstart::bench::kH200.fp8_flops_per_s * 1e-12;
constexpr int kCalls = 20;

struct Shape {
  const char* name;
  int64_t n, k;
};
const Shape kShapes[] = {{"wqa_wkv", 1536, 4096}, {"wq_b", 32768, 1024}, {"wo_b", 4096, 8192}, {"shared_w13", 4096, 4096}};
const char* const kImpls[] = {"ours-wgmma", "ours-mma.sync", "cublaslt-blockwise", "cublaslt-per-tensor"};

cj::JitRuntime& runtime() {
  static cj::JitRuntime* rt = new cj::JitRuntime(cj::JitOptions{});
  return *rt;
}

at::TensorOptions on_gpu(at::ScalarType t) { return at::TensorOptions().device(at::kCUDA).dtype(t); }

template <class F>
double time_ms(void* stream, const at::Tensor& big, F&& fn) {
  const cj::DriverApi& d = cj::driver();
  CUevent a = nullptr, b = nullptr;
  CS_CU_CHECK(d.cuEventCreate(&a, 0));
  CS_CU_CHECK(d.cuEventCreate(&b, 0));
  for (int i = 0; i < 4; ++i) (void)at::mm(big, big);
  CS_CU_CHECK(d.cuEventRecord(a, static_cast<CUstream>(stream)));
  for (int i = 0; i < kCalls; ++i) fn();
  CS_CU_CHECK(d.cuEventRecord(b, static_cast<CUstream>(stream)));
  CS_CU_CHECK(d.cuEventSynchronize(b));
  float ms = 0;
  CS_CU_CHECK(d.cuEventElapsedTime(&ms, a, b));
  d.cuEventDestroy(a);
  d.cuEventDestroy(b);
  return ms;
}

int sm_count() {
  int sms = 0;
  CUdevice dev = 0;
  CS_CU_CHECK(cj::driver().cuDeviceGet(&dev, 0));
  CS_CU_CHECK(cj::driver().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  return sms;
}

void BM_Fp8Gemm(benchmark::State& state) {
  if (!at::hasCUDA() || !cj::driver_available()) {
    state.SkipWithError("needs a CUDA GPU and a CUDA libtorch");
    return;
  }
  const int impl = static_cast<int>(state.range(0));
  const Shape& s = kShapes[state.range(1)];
  const int64_t m = state.range(2), n = s.n, k = s.k;
  at::manual_seed(3);
  // Finite positive e4m3 codes (0x00..0x7d) and scales near 1.
  const at::Tensor a = at::randint(0, 0x7e, {m, k}, on_gpu(at::kByte));
  const at::Tensor b = at::randint(0, 0x7e, {n, k}, on_gpu(at::kByte));
  const at::Tensor sfa_rows = at::rand({m, k / 128}, on_gpu(at::kFloat)) + 0.5;
  const at::Tensor sfb = at::rand({(n + 127) / 128, k / 128}, on_gpu(at::kFloat)) + 0.5;
  const at::Tensor d = at::empty({m, n}, on_gpu(at::kBFloat16));
  const at::Tensor big = at::randn({8192, 8192}, on_gpu(at::kBFloat16));
  void* stream = coldstart::kernels::stream_for(d);
  std::function<void()> call;
  std::string label = std::string(kImpls[impl]) + " " + s.name;
  if (impl <= 1) {
    const at::Tensor sfa = dg::mn_major_scales(sfa_rows);
    const dg::GemmTarget target{90, sm_count()};
    const dg::GemmOptions opt{impl == 1};
    call = [&, sfa, target, opt] { dg::fp8_gemm_nt(runtime(), target, a, sfa, b, sfb, d, opt); };
    label += " " + dg::select_fp8_gemm_config({dg::GemmType::kNormal, m, n, k, 1}, 90, target.num_sms).name();
  } else {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
    const at::Tensor a8 = a.view(at::kFloat8_e4m3fn);
    const at::Tensor b8 = b.view(at::kFloat8_e4m3fn).t();  // [K, N] column-major, as cuBLASLt wants
    at::Tensor out = at::empty({m, n}, on_gpu(at::kBFloat16));
    std::vector<std::function<void()>> tries;
    if (impl == 2) {
      // Blockwise scales (PyTorch >= 2.8 on SM90): A [M, K/128] M-major; B [K/128, N/128] in
      // either major (the accepted one differs between versions; both are tried).
      const at::Tensor sa = sfa_rows.t().contiguous().t();
      const at::Tensor sb_rows = sfb.t().contiguous();          // [K/128, N/128], N/128 contiguous
      const at::Tensor sb_cols = sfb.contiguous().t();          // [K/128, N/128], K/128 contiguous
      tries.push_back([=]() mutable { at::_scaled_mm_out(out, a8, b8, sa, sb_rows, {}, {}, at::kBFloat16, false); });
      tries.push_back([=]() mutable { at::_scaled_mm_out(out, a8, b8, sa, sb_cols, {}, {}, at::kBFloat16, false); });
    } else {
      const at::Tensor one = at::ones({}, on_gpu(at::kFloat));
      tries.push_back([=]() mutable { at::_scaled_mm_out(out, a8, b8, one, one, {}, {}, at::kBFloat16, false); });
    }
    std::string why;
    for (auto& t : tries) {
      try {
        t();
        CS_CU_CHECK(cj::driver().cuStreamSynchronize(static_cast<CUstream>(stream)));
        call = t;
        break;
      } catch (const std::exception& e) {
        why = std::string(e.what()).substr(0, 300);
      }
    }
    if (!call) {
      state.SkipWithError((label + ": this libtorch refuses it: " + why).c_str());
      return;
    }
#else
    state.SkipWithError("libtorch without FP8 dtypes (< 2.1)");
    return;
#endif
  }
  call();  // compile / warm up
  double total_ms = 0;
  for (auto _ : state) {
    const double ms = time_ms(stream, big, call);
    total_ms += ms;
    state.SetIterationTime(ms * 1e-3 / kCalls);
  }
  const double sec = total_ms * 1e-3 / (static_cast<double>(state.iterations()) * kCalls);
  const double flops = 2.0 * m * n * k;
  state.counters["TFLOP/s"] = flops / sec * 1e-12;
  state.counters["%peak"] = 100.0 * flops / sec * 1e-12 / kPeakFp8Tflops;
  state.counters["us/call"] = sec * 1e6;
  state.SetLabel(label);
}

}  // namespace

BENCHMARK(BM_Fp8Gemm)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2, 3}, {128, 1024, 4096}})
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
