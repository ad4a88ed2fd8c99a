// mamba_ops_bench: time of each mamba-ops kernel at Qwen3-Next-80B GDN shapes (TP 1: conv dim
// 8192, width 4, 32 value heads of 128, SSM state 32 x 128 x 128 fp32) on the current GPU, and
// the NVRTC compile time of each compile key. Prints a Markdown table; without a CUDA GPU (or a
// CUDA libtorch) it says so and exits 0.
//
// Timing: 3 warm-up calls (the first compiles), then `iters` calls between two device
// synchronizations; the mean per call (launch included). Bytes = the bytes each call must move
// (reads + writes), for an effective bandwidth.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "harness/jit/jit.h"
#include "harness/kernels/mamba_ops/mamba_ops.h"

#ifdef COLDSTART_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace {

using namespace coldstart;
using namespace coldstart::mamba_ops;

#ifdef COLDSTART_WITH_CUDA
void row(const char* name, const std::string& shape, double bytes, const std::function<void()>& fn,
         int iters = 50) {
  for (int i = 0; i < 3; ++i) fn();
  c10::cuda::device_synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  c10::cuda::device_synchronize();
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      iters;
  std::printf("| %s | %s | %.1f | %.0f |\n", name, shape.c_str(), us, bytes / us / 1e3);
}
#endif

}  // namespace

int main() {
#ifndef COLDSTART_WITH_CUDA
  std::printf("mamba_ops_bench: skipped (this build's libtorch has no CUDA backend)\n");
  return 0;
#else
  if (!at::hasCUDA()) {
    std::printf("mamba_ops_bench: skipped (no CUDA device)\n");
    return 0;
  }
  jit::JitRuntime rt(jit::JitOptions{});
  const auto bf = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const auto i32 = at::TensorOptions().device(at::kCUDA).dtype(at::kInt);
  const int64_t dim = 8192, slots = 257, page = 3 * dim + 32 * 128 * 128 * 2;
  const at::Tensor pages = at::randn({slots, page}, bf);
  const at::Tensor conv = pages.as_strided({slots, 3, dim}, {page, dim, 1}, 0);
  const at::Tensor w = at::randn({dim, 4}, bf);
  std::printf("| kernel | shape | us / call | GB/s |\n|---|---|---|---|\n");
  for (int64_t t : {512, 8192}) {
    const int64_t b = t == 512 ? 4 : 1;
    const at::Tensor x = at::randn({t, dim + 4096}, bf).narrow(1, 0, dim);
    const at::Tensor out = at::empty({t, dim}, bf);
    const at::Tensor qsl = at::arange(0, t + 1, t / b, i32);
    const at::Tensor ci = at::arange(1, b + 1, i32);
    const at::Tensor has = at::ones({b}, at::TensorOptions().device(at::kCUDA).dtype(at::kBool));
    row("causal_conv1d_fwd", "T=" + std::to_string(t) + " B=" + std::to_string(b) + " dim=8192 w=4",
        4.0 * t * dim, [&] {
          causal_conv1d_fwd(rt, x, w, at::Tensor(), conv, qsl, ci, has, Activation::kSilu, out);
        });
  }
  for (int64_t b : {1, 64, 256}) {
    const at::Tensor x = at::randn({b, dim}, bf);
    const at::Tensor idx = at::arange(0, b, i32);
    row("causal_conv1d_update", "B=" + std::to_string(b) + " dim=8192 w=4", 2.0 * b * dim * 8.0,
        [&] { causal_conv1d_update(rt, x, conv, w, at::Tensor(), Activation::kSilu, idx, x); });
  }
  const at::Tensor nw = at::randn({128}, bf);
  for (int64_t t : {1, 16, 8192}) {
    const int64_t m = 32 * t;
    const at::Tensor x = at::randn({m, 128}, bf), z = at::randn({m, 128}, bf);
    const at::Tensor out = at::empty({m, 128}, bf);
    row("gated_rms_norm", "M=" + std::to_string(m) + " N=128 silu", 3.0 * m * 128 * 2, [&] {
      gated_rms_norm(rt, x, z, nw, 1e-6, true, Activation::kSilu, 128, 132, out);
    });
  }
  const at::Tensor ssm =
      at::randn({slots, 32, 128, 128}, at::TensorOptions().device(at::kCUDA).dtype(at::kFloat));
  for (int64_t n : {1, 16}) {
    const at::Tensor idx = at::arange(3, 3 + n, i32);
    const at::Tensor has = at::ones({n}, at::TensorOptions().device(at::kCUDA).dtype(at::kBool));
    const at::Tensor g = at::empty({n, 32, 128, 128}, ssm.options());
    const double bytes = 2.0 * n * 32 * 128 * 128 * 4;
    row("gather_initial_states", "n=" + std::to_string(n) + " row=32x128x128 fp32", bytes,
        [&] { gather_initial_states(rt, ssm, idx, has, g); });
    row("scatter_states", "n=" + std::to_string(n) + " row=32x128x128 fp32", bytes,
        [&] { scatter_states(rt, ssm, g, idx); });
  }
  std::printf("\n| compile key | NVRTC + load ms |\n|---|---|\n");
  for (const jit::CompileRecord& r : rt.monitor().records()) {
    std::printf("| %s | %.0f |\n", r.key.substr(0, r.key.find('(')).c_str(), r.compile_ms);
  }
  return 0;
#endif
}
