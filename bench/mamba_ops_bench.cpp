// mamba_ops benchmarks (Google Benchmark through bench_util.h; GPU only, they skip without one):
// each mamba-ops kernel at Qwen3-Next-80B GDN shapes (TP 1: conv dim 8192, width 4, 32 value
// heads of 128, SSM state 32 x 128 x 128 fp32), and the NVRTC compile time of its keys.
//
//   BM_CausalConv1dFwd/<T>         T = 512 (4 sequences), 8192 (1 sequence), silu
//   BM_CausalConv1dUpdate/<B>      B = 1, 64, 256 decode rows
//   BM_GatedRmsNorm/<T>            M = 32 T rows of 128 (T = 1, 16, 8192), silu gate
//   BM_GatherInitialStates/<n>     n = 1, 16 SSM state rows gathered
//   BM_ScatterStates/<n>           n = 1, 16 SSM state rows scattered back
//
// Time: 3 warm-up calls (the first compiles), then CUDA events around 50 back-to-back calls on
// torch's current stream; the reported time is per call (launch gaps included when the kernel is
// shorter than a launch). Counters (bench_util.h): `GB/s` = the bytes each call must move (reads
// + writes) / time, against the device's HBM bandwidth; `compile_ms` = NVRTC + load time of the
// compile keys this row compiled (0 when an earlier row already compiled its key) and `compiles`
// their number. The label gives the shape and the names of the keys compiled.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "harness/jit/jit.h"
#include "harness/kernels/launch_util.h"
#include "harness/kernels/mamba_ops/mamba_ops.h"
#include "harness/kernels/model_shapes.h"

namespace cj = coldstart::jit;
namespace cb = coldstart::bench;
namespace mo = coldstart::mamba_ops;

namespace {

namespace shapes = coldstart::kernels::shapes;
constexpr shapes::GdnHeads kGdn = shapes::kQwen3NextGdnTp1;
constexpr int64_t kDim = shapes::conv_dim(kGdn), kSlots = 257,
                  kPage = 3 * kDim + shapes::state_elems(kGdn) * 2;

// What the rows share: the runtime and the paged conv / SSM state caches.
struct Shared {
  cj::JitRuntime rt{cj::JitOptions{}};
  at::Tensor pages, conv, w, ssm;
};

at::TensorOptions on_gpu(at::ScalarType t) {
  return at::TensorOptions().device(at::kCUDA).dtype(t);
}

Shared& shared() {
  static Shared* s = [] {
    auto* p = new Shared;
    p->pages = at::randn({kSlots, kPage}, on_gpu(at::kBFloat16));
    p->conv = p->pages.as_strided({kSlots, 3, kDim}, {kPage, kDim, 1}, 0);
    p->w = at::randn({kDim, 4}, on_gpu(at::kBFloat16));
    p->ssm = at::randn({kSlots, kGdn.num_v_heads, kGdn.head_v_dim, kGdn.head_k_dim}, on_gpu(at::kFloat));
    return p;
  }();
  return *s;
}

// What a row compiled. Google Benchmark runs a row's function more than once; only the first
// run compiles, so this is kept across runs, by row label.
struct RowCompiles {
  double ms = 0;     // NVRTC + load, summed
  int count = 0;     // compile keys
  std::string keys;  // their names (the key up to its argument list), comma-separated
};
std::map<std::string, RowCompiles> g_compiled;

// Times `fn` as the header says and sets the row's counters and label (`row`, followed by the
// keys it compiled).
template <class F>
void run_row(benchmark::State& state, const std::string& row, const at::Tensor& on_stream,
             double bytes, F&& fn) {
  Shared& s = shared();
  const size_t before = s.rt.monitor().num_records();
  cb::TimingOptions o;
  o.warmup = 3;
  o.calls = 50;
  const double sec = cb::run_timed_loop(state, coldstart::kernels::stream_for(on_stream), o, fn);
  RowCompiles& c = g_compiled[row];
  const std::vector<cj::CompileRecord> records = s.rt.monitor().records();
  for (size_t i = before; i < records.size(); ++i) {
    c.ms += records[i].compile_ms;
    c.count += 1;
    c.keys += (c.keys.empty() ? "" : ", ") + records[i].key.substr(0, records[i].key.find('('));
  }
  cb::set_bytes_counters(state, bytes, sec);
  state.counters["compile_ms"] = c.ms;
  state.counters["compiles"] = c.count;
  state.SetLabel(c.keys.empty() ? row : row + "; compiled: " + c.keys);
}

void BM_CausalConv1dFwd(benchmark::State& state) {
  Shared& s = shared();
  const int64_t t = state.range(0), b = t == 512 ? 4 : 1;
  const at::Tensor x = at::randn({t, kDim + int64_t{kGdn.num_v_heads} * kGdn.head_v_dim}, on_gpu(at::kBFloat16)).narrow(1, 0, kDim);
  const at::Tensor out = at::empty({t, kDim}, on_gpu(at::kBFloat16));
  const at::Tensor qsl = at::arange(0, t + 1, t / b, on_gpu(at::kInt));
  const at::Tensor ci = at::arange(1, b + 1, on_gpu(at::kInt));
  const at::Tensor has = at::ones({b}, on_gpu(at::kBool));
  run_row(state,
          "causal_conv1d_fwd T=" + std::to_string(t) + " B=" + std::to_string(b) +
              " dim=" + std::to_string(kDim) + " w=4",
          out, 4.0 * t * kDim, [&] {
            mo::causal_conv1d_fwd(s.rt, x, s.w, at::Tensor(), s.conv, qsl, ci, has,
                                  mo::Activation::kSilu, out);
          });
}

void BM_CausalConv1dUpdate(benchmark::State& state) {
  Shared& s = shared();
  const int64_t b = state.range(0);
  const at::Tensor x = at::randn({b, kDim}, on_gpu(at::kBFloat16));
  const at::Tensor idx = at::arange(0, b, on_gpu(at::kInt));
  run_row(state, "causal_conv1d_update B=" + std::to_string(b) + " dim=" + std::to_string(kDim) + " w=4", x,
          2.0 * b * kDim * 8.0, [&] {
            mo::causal_conv1d_update(s.rt, x, s.conv, s.w, at::Tensor(), mo::Activation::kSilu,
                                     idx, x);
          });
}

void BM_GatedRmsNorm(benchmark::State& state) {
  Shared& s = shared();
  const int64_t m = 32 * state.range(0);
  const at::Tensor nw = at::randn({128}, on_gpu(at::kBFloat16));
  const at::Tensor x = at::randn({m, 128}, on_gpu(at::kBFloat16));
  const at::Tensor z = at::randn({m, 128}, on_gpu(at::kBFloat16));
  const at::Tensor out = at::empty({m, 128}, on_gpu(at::kBFloat16));
  run_row(state, "gated_rms_norm M=" + std::to_string(m) + " N=128 silu", out,
          3.0 * m * 128 * 2, [&] {
            mo::gated_rms_norm(s.rt, x, z, nw, 1e-6, true, mo::Activation::kSilu, 128, 132, out);
          });
}

// n SSM state rows (32 x 128 x 128 fp32), read once and written once.
double state_bytes(int64_t n) { return 2.0 * n * shapes::state_elems(kGdn) * 4; }

void BM_GatherInitialStates(benchmark::State& state) {
  Shared& s = shared();
  const int64_t n = state.range(0);
  const at::Tensor idx = at::arange(3, 3 + n, on_gpu(at::kInt));
  const at::Tensor has = at::ones({n}, on_gpu(at::kBool));
  const at::Tensor g = at::empty({n, kGdn.num_v_heads, kGdn.head_v_dim, kGdn.head_k_dim}, s.ssm.options());
  run_row(state, "gather_initial_states n=" + std::to_string(n) + " row=32x128x128 fp32", g,
          state_bytes(n), [&] { mo::gather_initial_states(s.rt, s.ssm, idx, has, g); });
}

void BM_ScatterStates(benchmark::State& state) {
  Shared& s = shared();
  const int64_t n = state.range(0);
  const at::Tensor idx = at::arange(3, 3 + n, on_gpu(at::kInt));
  const at::Tensor g = at::randn({n, kGdn.num_v_heads, kGdn.head_v_dim, kGdn.head_k_dim}, s.ssm.options());
  run_row(state, "scatter_states n=" + std::to_string(n) + " row=32x128x128 fp32", g,
          state_bytes(n), [&] { mo::scatter_states(s.rt, s.ssm, g, idx); });
}

}  // namespace

BENCHMARK(BM_CausalConv1dFwd)->Arg(512)->Arg(8192)->UseManualTime()->Iterations(20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CausalConv1dUpdate)
    ->Arg(1)
    ->Arg(64)
    ->Arg(256)
    ->UseManualTime()->Iterations(20)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GatedRmsNorm)
    ->Arg(1)
    ->Arg(16)
    ->Arg(8192)
    ->UseManualTime()->Iterations(20)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GatherInitialStates)->Arg(1)->Arg(16)->UseManualTime()->Iterations(20)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ScatterStates)->Arg(1)->Arg(16)->UseManualTime()->Iterations(20)->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) { return cb::bench_main("mamba_ops_bench", argc, argv); }
