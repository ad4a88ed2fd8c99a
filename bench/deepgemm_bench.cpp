// deepgemm benchmark (Google Benchmark through bench_util.h; GPU only, skips without one): our fp8_gemm_nt
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
// does not idle the GPU; the reported time is per call. Counters (bench_util.h): `TFLOP/s`
// (2 M N K per call) against the device's dense FP8 tensor peak. The label names the config the
// heuristic picked.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>
#include <torch/version.h>

#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "harness/jit/jit.h"
#include "harness/kernels/deepgemm/deepgemm.h"
#include "harness/kernels/launch_util.h"
#include "harness/kernels/model_shapes.h"

namespace cj = coldstart::jit;
namespace dg = coldstart::deepgemm;
namespace cb = coldstart::bench;

namespace {

constexpr int kCalls = 20;

using Shape = coldstart::kernels::shapes::LinearShape;
const auto& kShapes = coldstart::kernels::shapes::kDeepSeekV4FlashLinears;
static_assert(std::size(coldstart::kernels::shapes::kDeepSeekV4FlashLinears) == 4,
              "BM_Fp8Gemm's ArgsProduct lists shapes 0..3");
const char* const kImpls[] = {"ours-wgmma", "ours-mma.sync", "cublaslt-blockwise", "cublaslt-per-tensor"};

at::TensorOptions on_gpu(at::ScalarType t) { return at::TensorOptions().device(at::kCUDA).dtype(t); }

void BM_Fp8Gemm(benchmark::State& state) {
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
    const dg::GemmTarget target{90, cb::device_info().sm_count};
    const dg::GemmOptions opt{impl == 1};
    call = [&, sfa, target, opt] { dg::fp8_gemm_nt(cb::default_runtime(), target, a, sfa, b, sfb, d, opt); };
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
        cb::synchronize(stream);
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
  cb::TimingOptions o;
  o.warmup = 1;  // compile / warm up
  o.calls = kCalls;
  o.before = [&] {
    for (int i = 0; i < 4; ++i) (void)at::mm(big, big);
  };
  const double sec = cb::run_timed_loop(state, stream, o, call);
  cb::set_flops_counters(state, 2.0 * m * n * k, sec, cb::Peak::kFp8);
  state.SetLabel(label);
}

}  // namespace

BENCHMARK(BM_Fp8Gemm)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2, 3}, {128, 1024, 4096}})
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) { return cb::bench_main("deepgemm_bench", argc, argv); }
