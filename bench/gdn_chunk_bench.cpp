// gdn_chunk benchmarks (Google Benchmark, GPU only; they skip without a CUDA GPU):
//
//   BM_GdnChunkChain/<T>/<S>  the whole chunked prefill chain (chunk_gated_delta_rule: cumsum,
//                             kkt, solve_tril, w/u, state recurrence, output) at Qwen3-Next-80B-A3B
//                             dims (Hk 16, Hv 32, K = V = 128), T tokens in S equal sequences.
//   BM_GdnPostConv/<T>        fused_post_conv at the same dims.
//
// Counters: `TFLOP/s` = matmul FLOPs of the chain / time, and `%peak` against the H200's dense bf16
// peak (bench/h200_ceilings.h); `us/token` = time / T. The FLOPs counted, per 64-token chunk and value head (full
// 64x64 blocks, as the kernels compute them; solve_tril's triangular solve and elementwise work
// not counted):
//   kkt 2*64*64*K + w/u 2*64*64*(K + V) + state 2 * 2*64*K*V + output 2*64*K*V + 2*64*64*(K + V)
//   = 2*64*(3*64*K + 2*64*V + 3*K*V)   (11.5 MFLOP at K = V = 128).
// Post-conv: `GB/s` = bytes read + written (conv rows, a, b in; q, k, v, g, beta out) / time, and
// `%peak` against the H200's HBM (h200_ceilings.h). Autotuning is warm (one call before timing; with
// GDNC_CACHE_DIR set the picks and binaries come from that cache directory). Times are CUDA events
// around each call on torch's current stream.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/h200_ceilings.h"
#include "harness/jit/driver.h"
#include "harness/jit/jit.h"
#include "harness/kernels/gdn_chunk/gdn_chunk.h"
#include "harness/kernels/launch_util.h"

namespace cj = coldstart::jit;
namespace gc = coldstart::gdn_chunk;

namespace {

const gc::GdnDims kDims{16, 32, 128, 128};
constexpr double kPeakTflops = coldstart::bench::kH200.bf16_flops_per_s * 1e-12;
constexpr double kPeakGBs = coldstart::bench::kH200.hbm_bytes_per_s * 1e-9;

bool gpu_ok(benchmark::State& state) {
  if (!at::hasCUDA()) {
    state.SkipWithError("needs a CUDA GPU and a CUDA libtorch");
    return false;
  }
  return true;
}

cj::JitRuntime& runtime() {
  static cj::JitRuntime* rt = [] {
    cj::JitOptions o;
    if (const char* dir = std::getenv("GDNC_CACHE_DIR")) o.cache_dir = dir;
    return new cj::JitRuntime(o);
  }();
  return *rt;
}

// Milliseconds of fn() between two events on `stream`.
template <class F>
double time_ms(void* stream, F&& fn) {
  const cj::DriverApi& d = cj::driver();
  CUevent a = nullptr, b = nullptr;
  d.cuEventCreate(&a, 0);
  d.cuEventCreate(&b, 0);
  d.cuEventRecord(a, static_cast<CUstream>(stream));
  fn();
  d.cuEventRecord(b, static_cast<CUstream>(stream));
  d.cuEventSynchronize(b);
  float ms = 0;
  d.cuEventElapsedTime(&ms, a, b);
  d.cuEventDestroy(a);
  d.cuEventDestroy(b);
  return ms;
}

at::TensorOptions on_gpu(at::ScalarType t) {
  return at::TensorOptions().device(at::kCUDA).dtype(t);
}

void BM_GdnChunkChain(benchmark::State& state) {
  if (!gpu_ok(state)) return;
  const int64_t T = state.range(0), S = state.range(1);
  const std::vector<int> lens(static_cast<size_t>(S), static_cast<int>(T / S));
  const int64_t hk = kDims.num_k_heads, hv = kDims.num_v_heads, K = kDims.head_k_dim,
                V = kDims.head_v_dim;
  at::manual_seed(1);
  auto norm = [](at::Tensor x) { return (x / x.norm(2, -1, true)).to(at::kBFloat16); };
  const at::Tensor q = norm(at::randn({T, hk, K}, on_gpu(at::kFloat)));
  const at::Tensor k = norm(at::randn({T, hk, K}, on_gpu(at::kFloat)));
  const at::Tensor v = at::randn({T, hv, V}, on_gpu(at::kBFloat16));
  const at::Tensor g = -at::rand({T, hv}, on_gpu(at::kFloat)) * 0.5 - 0.01;
  const at::Tensor beta = at::rand({T, hv}, on_gpu(at::kFloat));
  std::vector<int32_t> cu_host{0};
  for (int n : lens) cu_host.push_back(cu_host.back() + n);
  const at::Tensor cu = at::tensor(cu_host, at::kInt).to(at::kCUDA);
  const at::Tensor h0 = at::randn({S, hv, V, K}, on_gpu(at::kFloat)) * 0.1;
  const at::Tensor out = at::empty({T, hv, V}, on_gpu(at::kBFloat16));
  const at::Tensor ht = at::empty({S, hv, V, K}, on_gpu(at::kFloat));
  const at::Tensor scratch =
      at::empty({gc::chunk_scratch_bytes(kDims, T, lens)}, on_gpu(at::kByte));
  const float scale = 1.f / std::sqrt(static_cast<float>(K));
  auto call = [&] {
    gc::chunk_gated_delta_rule(runtime(), kDims, q, k, v, g, beta, scale, cu, lens, h0, out, ht,
                               scratch);
  };
  call();  // warm: autotune and compile
  void* stream = coldstart::kernels::stream_for(out);
  double total_ms = 0;
  for (auto _ : state) {
    const double ms = time_ms(stream, call);
    total_ms += ms;
    state.SetIterationTime(ms * 1e-3);
  }
  const double nt = static_cast<double>(gc::num_chunks(lens));
  const double flops = nt * hv * 2.0 * 64 * (3.0 * 64 * K + 2.0 * 64 * V + 3.0 * K * V);
  const double sec = total_ms * 1e-3 / static_cast<double>(state.iterations());
  state.counters["TFLOP/s"] = flops / sec * 1e-12;
  state.counters["%peak"] = 100.0 * flops / sec * 1e-12 / kPeakTflops;
  state.counters["us/token"] = sec * 1e6 / static_cast<double>(T);
  state.counters["GFLOP"] = flops * 1e-9;
}

void BM_GdnPostConv(benchmark::State& state) {
  if (!gpu_ok(state)) return;
  const int64_t T = state.range(0);
  const int64_t hk = kDims.num_k_heads, hv = kDims.num_v_heads, K = kDims.head_k_dim,
                V = kDims.head_v_dim;
  at::manual_seed(2);
  const at::Tensor conv = at::randn({T, kDims.conv_dim()}, on_gpu(at::kBFloat16));
  const at::Tensor ba = at::randn({T, 2 * hv}, on_gpu(at::kBFloat16));
  const at::Tensor A_log = at::rand({hv}, on_gpu(at::kFloat));
  const at::Tensor dt_bias = at::rand({hv}, on_gpu(at::kBFloat16));
  gc::PostConvOut o{at::empty({T, hk, K}, on_gpu(at::kBFloat16)),
                    at::empty({T, hk, K}, on_gpu(at::kBFloat16)),
                    at::empty({T, hv, V}, on_gpu(at::kBFloat16)),
                    at::empty({T, hv}, on_gpu(at::kFloat)), at::empty({T, hv}, on_gpu(at::kFloat))};
  auto call = [&] {
    gc::fused_post_conv(runtime(), kDims, conv, ba.narrow(1, hv, hv), ba.narrow(1, 0, hv), A_log,
                        dt_bias, o);
  };
  call();
  void* stream = coldstart::kernels::stream_for(o.q);
  double total_ms = 0;
  for (auto _ : state) {
    const double ms = time_ms(stream, call);
    total_ms += ms;
    state.SetIterationTime(ms * 1e-3);
  }
  const double bytes = static_cast<double>(T) *
                       (2.0 * 2 * kDims.conv_dim() + 2.0 * 2 * hv + 2.0 * 4 * hv);
  const double sec = total_ms * 1e-3 / static_cast<double>(state.iterations());
  state.counters["GB/s"] = bytes / sec * 1e-9;
  state.counters["%peak"] = 100.0 * bytes / sec * 1e-9 / kPeakGBs;
  state.counters["us/token"] = sec * 1e6 / static_cast<double>(T);
}

}  // namespace

BENCHMARK(BM_GdnChunkChain)->Args({4096, 1})->Args({4096, 8})->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GdnPostConv)->Arg(4096)->Arg(16384)->UseManualTime()->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
