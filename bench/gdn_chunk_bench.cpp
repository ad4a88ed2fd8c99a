// gdn_chunk benchmarks (Google Benchmark through bench_util.h; GPU only, they skip without one):
//
//   BM_GdnChunkChain/<T>/<S>  the whole chunked prefill chain (chunk_gated_delta_rule: cumsum,
//                             kkt, solve_tril, w/u, state recurrence, output) at Qwen3-Next-80B-A3B
//                             dims (Hk 16, Hv 32, K = V = 128), T tokens in S equal sequences.
//   BM_GdnPostConv/<T>        fused_post_conv at the same dims.
//
// Counters (bench_util.h): the chain reports `TFLOP/s` = matmul FLOPs of the chain / time against
// the device's dense bf16 peak, plus `GFLOP` per call; the post-conv reports `GB/s` = bytes read
// + written (conv rows, a, b in; q, k, v, g, beta out) / time against its HBM bandwidth. Both add
// `us/token` = time / T. The FLOPs counted, per 64-token chunk and value head (full 64x64 blocks,
// as the kernels compute them; solve_tril's triangular solve and elementwise work not counted):
//   kkt 2*64*64*K + w/u 2*64*64*(K + V) + state 2 * 2*64*K*V + output 2*64*K*V + 2*64*64*(K + V)
//   = 2*64*(3*64*K + 2*64*V + 3*K*V)   (11.5 MFLOP at K = V = 128).
// Autotuning is warm (one call before timing; with GDNC_CACHE_DIR set the picks and binaries come
// from that cache directory). Time: CUDA events around each call on torch's current stream.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "harness/jit/jit.h"
#include "harness/kernels/gdn_chunk/gdn_chunk.h"
#include "harness/kernels/launch_util.h"

namespace cj = coldstart::jit;
namespace gc = coldstart::gdn_chunk;
namespace cb = coldstart::bench;

namespace {

const gc::GdnDims kDims = gc::gdn_dims(coldstart::kernels::shapes::kQwen3NextGdnTp1);

cj::JitRuntime& runtime() {
  static cj::JitRuntime* rt = [] {
    cj::JitOptions o;
    if (const char* dir = std::getenv("GDNC_CACHE_DIR")) o.cache_dir = dir;
    return new cj::JitRuntime(o);
  }();
  return *rt;
}

at::TensorOptions on_gpu(at::ScalarType t) {
  return at::TensorOptions().device(at::kCUDA).dtype(t);
}

void BM_GdnChunkChain(benchmark::State& state) {
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
  // Default options: one warm-up call (autotune, compile), then one call per measurement.
  const double sec = cb::run_timed_loop(state, coldstart::kernels::stream_for(out), {}, call);
  const double nt = static_cast<double>(gc::num_chunks(lens));
  const double flops = nt * hv * 2.0 * 64 * (3.0 * 64 * K + 2.0 * 64 * V + 3.0 * K * V);
  cb::set_flops_counters(state, flops, sec, cb::Peak::kBf16);
  state.counters["us/token"] = sec * 1e6 / static_cast<double>(T);
  state.counters["GFLOP"] = flops * 1e-9;
}

void BM_GdnPostConv(benchmark::State& state) {
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
  const double sec = cb::run_timed_loop(state, coldstart::kernels::stream_for(o.q), {}, call);
  const double bytes = static_cast<double>(T) *
                       (2.0 * 2 * kDims.conv_dim() + 2.0 * 2 * hv + 2.0 * 4 * hv);
  cb::set_bytes_counters(state, bytes, sec);
  state.counters["us/token"] = sec * 1e6 / static_cast<double>(T);
}

}  // namespace

BENCHMARK(BM_GdnChunkChain)->Args({4096, 1})->Args({4096, 8})->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GdnPostConv)->Arg(4096)->Arg(16384)->UseManualTime()->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) { return cb::bench_main("gdn_chunk_bench", argc, argv); }
