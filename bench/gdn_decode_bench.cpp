// GDN decode benchmarks (Google Benchmark through bench_util.h; GPU only, they skip without one):
// achieved memory bandwidth of the decode update (gdn_decode_update) at decode batch sizes and of
// the fused MTP kernel (gdn_decode_mtp) at the request counts that select its three value tiles,
// for bf16 and float32 SSM states, at Qwen3-Next-80B-A3B TP1 dims.
//
//   BM_GdnDecodeUpdate/<state>/<B>   state 0: bf16, 1: fp32; B = 1, 8, 32, 128, 256
//   BM_GdnDecodeMtp/<state>/<reqs>   reqs = this device's MTP warm-up request counts
//                                    (mtp_warmup_request_counts), 4 tokens each; registered at
//                                    start-up since they depend on the SM count
//
// Bytes counted per launch: the state slots read and written (decode: one read + one write per
// sequence and value head; MTP: one read + one write per token), q/k/v (or mixed_qkv + the output
// gate), a, b and the bf16 output. Each launch uses a different set of state slots, sets cycled
// so that the state touched between two uses of a slot exceeds 256 MiB (more than the L2), so the
// state comes from HBM; every set is used once before timing (each set's index pointer alignment
// is its own compile key, which must not compile inside the timed loop). Launches are queued
// behind large matmuls so the host's launch cost does not leave the GPU idle between them; a
// measurement is CUDA events around `launches` launches, 5 measurements per row, and the
// reported time is per launch. Counters (bench_util.h): `GB/s` against the device's HBM
// bandwidth (the brief asks for >= 40% at B = 8..256), `MiB` per launch. The label names the
// kernel, state dtype and shape (with the MTP value tile BV).
//
// Usage: gdn_decode_bench [launches] [Google Benchmark flags]   (launches default 50)
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "harness/jit/jit.h"
#include "harness/kernels/gdn_decode/gdn_decode.h"
#include "harness/kernels/launch_util.h"

namespace gd = coldstart::gdn_decode;
namespace cb = coldstart::bench;

namespace {

const gd::GdnDims kDims = gd::gdn_dims(coldstart::kernels::shapes::kQwen3NextGdnTp1);
constexpr int64_t kConvDim = 2 * 16 * 128 + 32 * 128;
constexpr int64_t kSsm = 32 * 128 * 128;
constexpr int kPerReq = 4;  // MTP tokens per request
int g_launches = 50;        // launches per measurement (the optional first argument)

at::TensorOptions cuda(at::ScalarType t) { return at::TensorOptions().device(at::kCUDA).dtype(t); }

at::ScalarType state_type(int64_t arg) { return arg == 0 ? at::kBFloat16 : at::kFloat; }

// Number of slot sets of `set_bytes` each so that a cycle touches more than 256 MiB.
int64_t num_sets(double set_bytes) {
  return std::max<int64_t>(2, static_cast<int64_t>(std::ceil(256.0 * (1 << 20) / set_bytes)));
}

// Times launch(i) as the header says (warm-up: every slot set once) and sets the counters.
template <typename F>
void time_row(benchmark::State& state, int64_t sets, double bytes, void* stream, F&& launch) {
  cb::TimingOptions o;
  o.warmup = static_cast<int>(sets);
  o.calls = g_launches;
  o.before = [] { cb::queue_busy_matmuls(); };
  const double sec = cb::run_timed_loop(state, stream, o, launch);
  cb::set_bytes_counters(state, bytes, sec);
  state.counters["MiB"] = bytes / (1 << 20);
}

void BM_GdnDecodeUpdate(benchmark::State& state) {
  const at::ScalarType st = state_type(state.range(0));
  const int64_t batch = state.range(1);
  coldstart::jit::JitRuntime& rt = cb::default_runtime();
  const int64_t elt = st == at::kFloat ? 4 : 2;
  const double state_bytes = 2.0 * batch * kSsm * elt;  // read + write
  const double io_bytes = batch * (2.0 * 2048 + 4096) * 2 + batch * 64 * 2 + batch * 4096 * 2;
  const int64_t sets = num_sets(state_bytes / 2);
  const at::Tensor state_t = at::randn({sets * batch, 32, 128, 128}, cuda(at::kFloat)).mul_(0.1).to(st);
  const at::Tensor slots = at::randperm(sets * batch, cuda(at::kLong)).to(at::kInt).view({sets, batch});
  const at::Tensor conv = at::randn({batch, kConvDim}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor ba = at::randn({batch, 64}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor A_log = at::rand({32}, cuda(at::kFloat));
  const at::Tensor dt_bias = at::randn({32}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor cu = at::arange(batch + 1, cuda(at::kInt));
  const at::Tensor out = at::empty({batch, 32, 128}, cuda(at::kBFloat16));
  const at::Tensor q = conv.narrow(1, 0, 2048).view({batch, 16, 128});
  const at::Tensor k = conv.narrow(1, 2048, 2048).view({batch, 16, 128});
  const at::Tensor v = conv.narrow(1, 4096, 4096).view({batch, 32, 128});
  const float scale = 1.0f / std::sqrt(128.0f);
  time_row(state, sets, state_bytes + io_bytes, coldstart::kernels::stream_for(out), [&](int64_t i) {
    gd::fused_sigmoid_gating_delta_rule_update(rt, kDims, A_log, ba.narrow(1, 32, 32),
                                               ba.narrow(1, 0, 32), dt_bias, q, k, v, state_t,
                                               slots[i % sets], cu, at::Tensor(), out, scale, true);
  });
  state.SetLabel(std::string("update ") + (st == at::kFloat ? "fp32" : "bf16") +
                 " B=" + std::to_string(batch));
}

void BM_GdnDecodeMtp(benchmark::State& state) {
  const at::ScalarType st = state_type(state.range(0));
  const int64_t reqs = state.range(1), per_req = kPerReq;
  const int num_sms = cb::device_info().sm_count;
  coldstart::jit::JitRuntime& rt = cb::default_runtime();
  const int64_t elt = st == at::kFloat ? 4 : 2;
  const int64_t l = reqs * per_req;
  const double state_bytes = static_cast<double>(reqs + l) * kSsm * elt;  // 1 read + T writes
  const double io_bytes = l * (kConvDim + 2.0 * 4096) * 2 + l * 64 * 2;
  const int64_t sets = num_sets(state_bytes);
  // Slot 0 is vLLM's null block; each set holds reqs * per_req distinct slots >= 1.
  const at::Tensor state_t = at::randn({sets * l + 1, 32, 128, 128}, cuda(at::kFloat)).mul_(0.1).to(st);
  const at::Tensor slots = (at::randperm(sets * l, cuda(at::kLong)) + 1).to(at::kInt).view({sets, reqs, per_req});
  const at::Tensor qkvz = at::randn({l, kConvDim + 4096}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor ba = at::randn({l, 64}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor A_log = at::rand({32}, cuda(at::kFloat));
  const at::Tensor dt_bias = at::randn({32}, cuda(at::kFloat)).to(at::kBFloat16);
  const at::Tensor norm_w = at::ones({128}, cuda(at::kBFloat16));
  const at::Tensor cu = at::arange(0, l + 1, per_req, cuda(at::kInt));
  const at::Tensor acc = at::full({reqs}, static_cast<int>(per_req), cuda(at::kInt));
  const at::Tensor out = at::empty({l, 32, 128}, cuda(at::kBFloat16));
  const float scale = 1.0f / std::sqrt(128.0f);
  time_row(state, sets, state_bytes + io_bytes, coldstart::kernels::stream_for(out), [&](int64_t i) {
    gd::fused_gdn_decode_post_conv_mtp(rt, kDims, qkvz.narrow(1, 0, kConvDim), ba.narrow(1, 32, 32),
                                       ba.narrow(1, 0, 32), A_log, dt_bias, slots[i % sets], cu,
                                       acc, state_t, qkvz.narrow(1, kConvDim, 4096).view({l, 32, 128}),
                                       norm_w, out, scale, 1e-6f, "silu", num_sms);
  });
  const int bv = gd::mtp_value_tile(static_cast<int>(reqs), num_sms, kDims);
  state.SetLabel(std::string("mtp ") + (st == at::kFloat ? "fp32" : "bf16") +
                 " reqs=" + std::to_string(reqs) + " T=" + std::to_string(per_req) +
                 " BV=" + std::to_string(bv));
}

// On the GPU path: reads the optional launch count and registers the MTP rows for this device.
bool setup(const std::vector<std::string>& positional) {
  if (positional.size() > 1 || (positional.size() == 1 && std::atoi(positional[0].c_str()) < 1)) {
    std::fprintf(stderr, "usage: gdn_decode_bench [launches >= 1] [Google Benchmark flags]\n");
    return false;
  }
  if (positional.size() == 1) g_launches = std::atoi(positional[0].c_str());
  auto* b = benchmark::RegisterBenchmark("BM_GdnDecodeMtp", BM_GdnDecodeMtp);
  for (int64_t st : {0, 1}) {
    for (int reqs : gd::mtp_warmup_request_counts(cb::device_info().sm_count, kDims)) {
      b->Args({st, reqs});
    }
  }
  b->UseManualTime()->Iterations(5)->Unit(benchmark::kMicrosecond);
  return true;
}

}  // namespace

BENCHMARK(BM_GdnDecodeUpdate)
    ->ArgsProduct({{0, 1}, {1, 8, 32, 128, 256}})
    ->UseManualTime()
    ->Iterations(5)
    ->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) { return cb::bench_main("gdn_decode_bench", argc, argv, setup); }
