// fused_experts benchmarks (Google Benchmark through bench_util.h; GPU only, they skip without
// one) for two MoE shapes, with the config vLLM's tables give each M
// (fixtures/tuned-configs/fused_moe):
//
//   BM_FusedMoe/qwen3next_h200/M:<M>   Qwen3-Next (E 512, top-10, N 512, hidden 2048, gated
//                                      silu), H200 table, M = 1, 8, 32, 64, 512, 4096
//   BM_FusedMoe/nano_h200/M:<M>        Nemotron-3 Nano (E 128, top-6, N 1856, hidden 2688,
//                                      non-gated relu2, grouped_topk router), M = 1, 64, 2048,
//                                      with the config vLLM uses on an H200 (no bf16 table for
//                                      this shape: its default config)
//   BM_FusedMoe/nano_h100table/M:<M>   the same with vLLM's H100 table (E=128,N=1856,device_name=
//                                      NVIDIA_H100_80GB_HBM3.json), run on this GPU
//
//   fused_moe_bench [TABLE_DIR] [Google Benchmark flags]
//       TABLE_DIR default: $COLDSTART_SOURCE_DIR/fixtures/tuned-configs/fused_moe, else
//       ./fixtures/tuned-configs/fused_moe.
//
// Time: the whole fused_experts call (alignment, both GEMMs, the activation, moe_sum), CUDA events
// around each call on torch's current stream, 30 timed calls after 3 warm-up ones; the reported
// time is their mean. Eight routings with different experts are cycled so that consecutive calls
// do not find their experts' weights in L2. Counters (bench_util.h): `GB/s` = the active experts'
// weight bytes (distinct experts in topk_ids x (w13 rows + N) x H x 2 bytes) / time against the
// device's HBM; `TFLOP/s` of both GEMMs (2 * M * top_k * H * (w13 rows + N)) against its dense
// bf16 peak; `experts` (mean distinct experts per routing); `naive` (1: the naive block
// assignment path, 0: the aligned one); `w13_us`, `w2_us`: each GEMM alone on the same alignment
// outputs (mean of 30 calls timed the same way), and `gemms_GB/s`, `gemms_TFLOP/s` and their
// `%peak_` from the two together; Nano rows add `router_us` (grouped_topk). The label names the
// shape, the table's device, the tuning key and config chosen, and the path.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "harness/jit/jit.h"
#include "harness/kernels/fused_moe/fused_moe.h"
#include "harness/kernels/launch_util.h"

namespace fm = coldstart::fused_moe;
namespace cj = coldstart::jit;
namespace cb = coldstart::bench;

namespace {

constexpr int kWarmup = 3, kReps = 30, kRoutings = 8;

struct Case {
  const char* name;   ///< benchmark name part
  const char* label;  ///< model, for the label
  fm::MoeShape s;
  fm::ConfigSource src;
  std::vector<int64_t> ms;
};

// One case's expert weights. Kept for the case whose rows run now (its rows run one after the
// other), remade when another case's row starts.
struct Weights {
  const Case* c = nullptr;
  at::Tensor w13, w2, bias;
};

const Weights& weights_for(const Case& c) {
  static Weights& w = *new Weights;  // never destroyed: no tensor freed after CUDA's teardown
  if (w.c != &c) {
    w = Weights{};  // free the previous case's weights first
    const fm::MoeShape& s = c.s;
    const int64_t rows = s.activation == fm::Activation::kSilu ? 2 * s.intermediate : s.intermediate;
    fm::precompile_aot_kernels(cb::default_runtime(), s);
    const auto f = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
    at::manual_seed(1);
    w.w13 = (at::randn({s.num_experts, rows, s.hidden}, f) * 0.02).to(at::kBFloat16);
    w.w2 = (at::randn({s.num_experts, s.hidden, s.intermediate}, f) * 0.02).to(at::kBFloat16);
    w.bias = at::randn({s.num_experts}, f) * 0.1;
    w.c = &c;
  }
  return w;
}

void BM_FusedMoe(benchmark::State& state, const Case* cp) {
  const Case& c = *cp;
  const fm::MoeShape& s = c.s;
  cj::JitRuntime& rt = cb::default_runtime();
  const Weights& wt = weights_for(c);
  const bool gated = s.activation == fm::Activation::kSilu;
  const int64_t m = state.range(0);
  const int64_t E = s.num_experts, N = s.intermediate, H = s.hidden, k = s.top_k;
  const int64_t w13_rows = gated ? 2 * N : N;
  const double w_expert_bytes = static_cast<double>(w13_rows + N) * H * 2;
  const auto f = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);

  const at::Tensor hidden = at::randn({m, H}, f).to(at::kBFloat16);
  std::vector<at::Tensor> ids, weights, logits;
  double experts = 0;
  for (int r = 0; r < kRoutings; ++r) {
    logits.push_back(at::randn({m, E}, f));
    at::Tensor w = at::empty({m, k}, f);
    at::Tensor id = at::empty({m, k}, f.dtype(at::kInt));
    if (s.use_grouped_topk) {
      fm::grouped_topk(rt, s, logits.back(), wt.bias, w, id);
    } else {
      fm::topk_softmax(rt, s, logits.back(), w, id);
    }
    weights.push_back(w);
    ids.push_back(id);
    experts += static_cast<double>(std::get<0>(at::_unique(id.reshape({-1}))).numel());
  }
  experts /= kRoutings;
  void* stream = coldstart::kernels::stream_for(hidden);
  cb::TimingOptions o;
  o.warmup = kWarmup;

  at::Tensor out = at::empty({m, H}, hidden.options());
  cj::Selection sel;
  const double total_s = cb::run_timed_loop(state, stream, o, [&](int64_t i) {
    sel = fm::fused_experts(rt, s, c.src, hidden, wt.w13, wt.w2, weights[i % kRoutings],
                            ids[i % kRoutings], out);
  });

  if (s.use_grouped_topk) {
    const double router_s = cb::mean_seconds(stream, o, kReps, [&](int64_t i) {
      fm::grouped_topk(rt, s, logits[i % kRoutings], wt.bias, weights[i % kRoutings],
                       ids[i % kRoutings]);
    });
    state.counters["router_us"] = router_s * 1e6;
  }
  // The GEMMs alone, on the same alignment outputs as fused_experts computes them.
  const fm::GemmBlock blk = fm::gemm_block(sel.config);
  std::vector<fm::Alignment> asg;
  for (int r = 0; r < kRoutings; ++r) {
    asg.push_back(fm::prepare_expert_assignment(rt, s, ids[r], blk.block_m));
  }
  const at::Tensor cache1 = at::empty({m, k, w13_rows}, hidden.options());
  const at::Tensor cache2 = at::randn({m * k, N}, f).to(at::kBFloat16);
  const at::Tensor cache3 = at::empty({m, k, H}, hidden.options());
  const double w13_s = cb::mean_seconds(stream, o, kReps, [&](int64_t i) {
    fm::gemm(rt, sel.config, hidden, wt.w13, cache1, at::Tensor(), asg[i % kRoutings], false,
             static_cast<int>(k));
  });
  const double w2_s = cb::mean_seconds(stream, o, kReps, [&](int64_t i) {
    fm::gemm(rt, sel.config, cache2, wt.w2, cache3, weights[i % kRoutings], asg[i % kRoutings],
             true, 1);
  });

  const double bytes = experts * w_expert_bytes;
  const double flops = 2.0 * m * k * static_cast<double>(H) * (w13_rows + N);
  cb::set_bytes_counters(state, bytes, total_s);
  cb::set_flops_counters(state, flops, total_s, cb::Peak::kBf16);
  const double gemm_s = w13_s + w2_s;
  const double gemm_gbs = bytes / gemm_s * 1e-9, gemm_tflops = flops / gemm_s * 1e-12;
  state.counters["experts"] = experts;
  state.counters["naive"] = fm::uses_naive_block_assignment(m, s.top_k, E) ? 1 : 0;
  state.counters["w13_us"] = w13_s * 1e6;
  state.counters["w2_us"] = w2_s * 1e6;
  state.counters["gemms_GB/s"] = gemm_gbs;
  state.counters["gemms_%peak_GB/s"] = 100.0 * gemm_gbs / (cb::ceilings().hbm_bytes_per_s * 1e-9);
  state.counters["gemms_TFLOP/s"] = gemm_tflops;
  state.counters["gemms_%peak_TFLOP/s"] =
      100.0 * gemm_tflops / (cb::ceilings().bf16_flops_per_s * 1e-12);
  const std::string shape = "E=" + std::to_string(E) + " top-" + std::to_string(k) +
                            " N=" + std::to_string(N) + " H=" + std::to_string(H) +
                            (gated ? " silu" : " relu2");
  state.SetLabel(std::string(c.label) + " " + shape + ", configs for \"" + c.src.device_name +
                 "\": " + sel.tuning_key + " " + sel.config.name + " [" +
                 (fm::uses_naive_block_assignment(m, s.top_k, E) ? "naive" : "align") + "]");
}

// On the GPU path: reads the optional table directory and registers the cases' rows.
bool setup(const std::vector<std::string>& positional) {
  const char* src_dir = std::getenv("COLDSTART_SOURCE_DIR");
  std::string table_dir = std::string(src_dir ? src_dir : ".") + "/fixtures/tuned-configs/fused_moe";
  if (positional.size() > 1 || (positional.size() == 1 && positional[0].rfind("--", 0) == 0)) {
    std::fprintf(stderr, "usage: fused_moe_bench [TABLE_DIR] [Google Benchmark flags]\n");
    return false;
  }
  if (positional.size() == 1) table_dir = positional[0];
  const fm::MoeShape qwen = fm::moe_shape(coldstart::kernels::shapes::kQwen3NextMoe);
  const fm::MoeShape nano = fm::moe_shape(coldstart::kernels::shapes::kNemotronNanoMoe);
  // Owned for the whole run: the registered rows point at them.
  static const std::vector<Case> cases = {
      {"qwen3next_h200", "Qwen3-Next", qwen, {table_dir, "NVIDIA H200"}, {1, 8, 32, 64, 512, 4096}},
      {"nano_h200", "Nemotron-3 Nano", nano, {table_dir, "NVIDIA H200"}, {1, 64, 2048}},
      {"nano_h100table", "Nemotron-3 Nano", nano, {table_dir, "NVIDIA H100 80GB HBM3"}, {1, 64, 2048}},
  };
  for (const Case& c : cases) {
    auto* b = benchmark::RegisterBenchmark((std::string("BM_FusedMoe/") + c.name).c_str(),
                                           BM_FusedMoe, &c);
    for (int64_t m : c.ms) b->Arg(m);
    b->ArgName("M")->UseManualTime()->Iterations(kReps)->Unit(benchmark::kMicrosecond);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) { return cb::bench_main("fused_moe_bench", argc, argv, setup); }
