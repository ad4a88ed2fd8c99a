// fused_experts on a GPU for two MoE shapes, with the config vLLM's tables give each M
// (fixtures/tuned-configs/fused_moe):
//   - Qwen3-Next (E 512, top-10, N 512, hidden 2048, gated silu), H200 table, M = 1 .. 4096;
//   - Nemotron-3 Nano (E 128, top-6, N 1856, hidden 2688, non-gated relu2, grouped_topk router),
//     M = 1, 64, 2048, once with the config vLLM uses on an H200 (no bf16 table for this shape:
//     its default config) and once with vLLM's H100 table (E=128,N=1856,device_name=
//     NVIDIA_H100_80GB_HBM3.json), both run on this GPU.
//
//   fused_moe_bench [TABLE_DIR]     (default: $COLDSTART_SOURCE_DIR/fixtures/tuned-configs/fused_moe,
//                                    else ./fixtures/tuned-configs/fused_moe; arguments starting
//                                    with "--" are ignored, as gpu-ci.sh passes benchmark flags)
//
// Per row: the median time (CUDA events, 30 timed calls after warmup) of the whole fused_experts
// call (alignment, both GEMMs, the activation, moe_sum) and of each GEMM alone; the active
// experts' weight bytes (distinct experts in topk_ids x (w13 rows + N) x H x 2 bytes) per second
// against the H200's HBM (4.8 TB/s), and TFLOP/s of both GEMMs (2 * M * top_k * H * (w13 rows +
// N)) against the H200's dense bf16 tensor peak (~989 TFLOP/s). Nano rows add the
// grouped_topk router's time. Eight routings with different experts are cycled so that
// consecutive calls do not find their experts' weights in L2. Without a GPU it prints why and
// exits 0.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/h200_ceilings.h"
#include "harness/jit/driver.h"
#include "harness/jit/jit.h"
#include "harness/kernels/fused_moe/fused_moe.h"
#include "harness/kernels/launch_util.h"

namespace fm = coldstart::fused_moe;
namespace cj = coldstart::jit;

namespace {

constexpr double kHbmTBs = coldstart::bench::kH200.hbm_bytes_per_s * 1e-12;
constexpr double kPeakTflops = coldstart::bench::kH200.bf16_flops_per_s * 1e-12;

struct Timer {
  CUevent a = nullptr, b = nullptr;
  Timer() {
    CS_CU_CHECK(cj::driver().cuEventCreate(&a, 0));
    CS_CU_CHECK(cj::driver().cuEventCreate(&b, 0));
  }
  // Median milliseconds of `reps` timed calls of fn(i) after `warm` untimed ones.
  template <typename F>
  double median_ms(void* stream, int warm, int reps, F fn) {
    for (int i = 0; i < warm; ++i) fn(i);
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      CS_CU_CHECK(cj::driver().cuEventRecord(a, static_cast<CUstream>(stream)));
      fn(i);
      CS_CU_CHECK(cj::driver().cuEventRecord(b, static_cast<CUstream>(stream)));
      CS_CU_CHECK(cj::driver().cuEventSynchronize(b));
      float ms = 0;
      CS_CU_CHECK(cj::driver().cuEventElapsedTime(&ms, a, b));
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

struct Case {
  const char* label;
  fm::MoeShape s;
  fm::ConfigSource src;
  std::vector<int64_t> ms;
};

// Benchmarks one shape: prints one row (and a GEMMs-alone line) per M.
void run_case(cj::JitRuntime& rt, Timer& timer, const Case& c) {
  const fm::MoeShape& s = c.s;
  const bool gated = s.activation == fm::Activation::kSilu;
  const int64_t E = s.num_experts, N = s.intermediate, H = s.hidden, k = s.top_k;
  const int64_t w13_rows = gated ? 2 * N : N;
  fm::precompile_aot_kernels(rt, s);
  const auto f = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  at::manual_seed(1);
  const at::Tensor w13 = (at::randn({E, w13_rows, H}, f) * 0.02).to(at::kBFloat16);
  const at::Tensor w2 = (at::randn({E, H, N}, f) * 0.02).to(at::kBFloat16);
  const at::Tensor bias = at::randn({E}, f) * 0.1;
  const double w_expert_bytes = static_cast<double>(w13_rows + N) * H * 2;
  std::printf("\n%s: E=%lld top-%lld N=%lld H=%lld %s, configs for \"%s\"\n", c.label,
              static_cast<long long>(E), static_cast<long long>(k), static_cast<long long>(N),
              static_cast<long long>(H), gated ? "silu (gated)" : "relu2 (non-gated)",
              c.src.device_name.c_str());
  std::printf("%6s %-78s %5s %9s %9s %9s %9s %7s %9s %7s %8s %6s\n", "M", "config", "path",
              "router_us", "total_us", "w13_us", "w2_us", "experts", "wGB/s", "%4.8T", "TFLOP/s",
              "%989");
  for (int64_t m : c.ms) {
    const at::Tensor hidden = at::randn({m, H}, f).to(at::kBFloat16);
    std::vector<at::Tensor> ids, weights, logits;
    double experts = 0;
    for (int r = 0; r < 8; ++r) {
      logits.push_back(at::randn({m, E}, f));
      at::Tensor w = at::empty({m, k}, f);
      at::Tensor id = at::empty({m, k}, f.dtype(at::kInt));
      if (s.use_grouped_topk) {
        fm::grouped_topk(rt, s, logits.back(), bias, w, id);
      } else {
        fm::topk_softmax(rt, s, logits.back(), w, id);
      }
      weights.push_back(w);
      ids.push_back(id);
      experts += static_cast<double>(std::get<0>(at::_unique(id.reshape({-1}))).numel());
    }
    experts /= 8;
    void* stream = coldstart::kernels::stream_for(hidden);
    double router_ms = 0;
    if (s.use_grouped_topk) {
      router_ms = timer.median_ms(stream, 3, 30, [&](int i) {
        fm::grouped_topk(rt, s, logits[i % 8], bias, weights[i % 8], ids[i % 8]);
      });
    }
    at::Tensor out = at::empty({m, H}, hidden.options());
    cj::Selection sel;
    const double total_ms = timer.median_ms(stream, 3, 30, [&](int i) {
      sel = fm::fused_experts(rt, s, c.src, hidden, w13, w2, weights[i % 8], ids[i % 8], out);
    });
    // The GEMMs alone, on the same alignment outputs as fused_experts computes them.
    const fm::GemmBlock blk = fm::gemm_block(sel.config);
    std::vector<fm::Alignment> asg;
    for (int r = 0; r < 8; ++r) asg.push_back(fm::prepare_expert_assignment(rt, s, ids[r], blk.block_m));
    const at::Tensor cache1 = at::empty({m, k, w13_rows}, hidden.options());
    const at::Tensor cache2 = at::randn({m * k, N}, f).to(at::kBFloat16);
    const at::Tensor cache3 = at::empty({m, k, H}, hidden.options());
    const double w13_ms = timer.median_ms(stream, 3, 30, [&](int i) {
      fm::gemm(rt, sel.config, hidden, w13, cache1, at::Tensor(), asg[i % 8], false, static_cast<int>(k));
    });
    const double w2_ms = timer.median_ms(stream, 3, 30, [&](int i) {
      fm::gemm(rt, sel.config, cache2, w2, cache3, weights[i % 8], asg[i % 8], true, 1);
    });
    const double bytes = experts * w_expert_bytes;
    const double flops = 2.0 * m * k * static_cast<double>(H) * (w13_rows + N);
    const double gbs = bytes / (total_ms * 1e-3) / 1e9;
    const double tflops = flops / (total_ms * 1e-3) / 1e12;
    const bool naive = fm::uses_naive_block_assignment(m, s.top_k, E);
    char router[32] = "-";
    if (s.use_grouped_topk) std::snprintf(router, sizeof(router), "%.1f", router_ms * 1e3);
    std::printf("%6lld %-78s %5s %9s %9.1f %9.1f %9.1f %7.1f %9.0f %6.1f%% %8.1f %5.1f%%\n",
                static_cast<long long>(m), (sel.tuning_key + " " + sel.config.name).c_str(),
                naive ? "naive" : "align", router, total_ms * 1e3, w13_ms * 1e3, w2_ms * 1e3,
                experts, gbs, 100.0 * gbs / (kHbmTBs * 1e3), tflops, 100.0 * tflops / kPeakTflops);
    const double gemm_s = (w13_ms + w2_ms) * 1e-3;
    std::printf("%6s GEMMs alone: %.0f GB/s of weights (%.1f%% of %.1f TB/s), %.1f TFLOP/s "
                "(%.1f%% of %.0f)\n",
                "", bytes / gemm_s / 1e9, 100.0 * bytes / gemm_s / (kHbmTBs * 1e12), kHbmTBs,
                flops / gemm_s / 1e12, 100.0 * flops / gemm_s / 1e12 / kPeakTflops, kPeakTflops);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!cj::driver_available() || !at::hasCUDA()) {
    std::printf("fused_moe_bench: skipped, no GPU (%s)\n",
                cj::driver_available() ? "libtorch without CUDA"
                                       : cj::driver_unavailable_reason().c_str());
    return 0;
  }
  const char* src_dir = std::getenv("COLDSTART_SOURCE_DIR");
  std::string table_dir = std::string(src_dir ? src_dir : ".") + "/fixtures/tuned-configs/fused_moe";
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]).rfind("--", 0) != 0) table_dir = argv[i];
  }
  cj::JitRuntime rt(cj::JitOptions{});
  Timer timer;
  const fm::MoeShape qwen{512, 512, 2048, 10, true};
  run_case(rt, timer, Case{"Qwen3-Next", qwen, {table_dir, "NVIDIA H200"}, {1, 8, 32, 64, 512, 4096}});
  fm::MoeShape nano{128, 1856, 2688, 6, true};
  nano.activation = fm::Activation::kRelu2NoMul;
  nano.use_grouped_topk = true;
  run_case(rt, timer, Case{"Nemotron-3 Nano", nano, {table_dir, "NVIDIA H200"}, {1, 64, 2048}});
  run_case(rt, timer,
           Case{"Nemotron-3 Nano", nano, {table_dir, "NVIDIA H100 80GB HBM3"}, {1, 64, 2048}});
  return 0;
}
