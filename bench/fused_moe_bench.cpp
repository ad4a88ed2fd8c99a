// fused_experts for Qwen3-Next's MoE shape (E 512, top-10, N 512, hidden 2048, bf16) on a GPU, with
// the config vLLM's H200 table gives each M (fixtures/tuned-configs/fused_moe).
//
//   fused_moe_bench [TABLE_DIR]     (default: $COLDSTART_SOURCE_DIR/fixtures/tuned-configs/fused_moe,
//                                    else ./fixtures/tuned-configs/fused_moe)
//
// For M = 1, 8, 32, 64, 512, 4096: the median time (CUDA events, 30 timed calls after warmup) of
// the whole fused_experts call (alignment, both GEMMs, silu_and_mul, moe_sum) and of each GEMM
// alone; the bytes of the active experts' weights (distinct experts in topk_ids x (2N*H + H*N) x 2
// bytes) per second against the H200's ~4.3 TB/s copy bandwidth, and TFLOP/s
// (2 * M * top_k * 3 * N * H flops) against ~790 TFLOP/s. Eight routings with different experts
// are cycled so that consecutive calls do not find their experts' weights in L2.
// Without a GPU it prints why and exits 0.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/jit/driver.h"
#include "harness/jit/jit.h"
#include "harness/kernels/fused_moe/fused_moe.h"
#include "harness/kernels/launch_util.h"

namespace fm = coldstart::fused_moe;
namespace cj = coldstart::jit;

namespace {

constexpr double kCopyTBs = 4.3;
constexpr double kPeakTflops = 790.0;

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

}  // namespace

int main(int argc, char** argv) {
  if (!cj::driver_available() || !at::hasCUDA()) {
    std::printf("fused_moe_bench: skipped, no GPU (%s)\n",
                cj::driver_available() ? "libtorch without CUDA"
                                       : cj::driver_unavailable_reason().c_str());
    return 0;
  }
  const char* src_dir = std::getenv("COLDSTART_SOURCE_DIR");
  const std::string table_dir =
      argc > 1 ? argv[1]
               : std::string(src_dir ? src_dir : ".") + "/fixtures/tuned-configs/fused_moe";
  const fm::MoeShape s{512, 512, 2048, 10, true};
  const fm::ConfigSource src{table_dir, "NVIDIA H200"};
  cj::JitRuntime rt(cj::JitOptions{});
  fm::precompile_aot_kernels(rt, s);

  const auto f = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  at::manual_seed(1);
  const at::Tensor w13 = (at::randn({512, 1024, 2048}, f) * 0.02).to(at::kBFloat16);
  const at::Tensor w2 = (at::randn({512, 2048, 512}, f) * 0.04).to(at::kBFloat16);
  const double w_expert_bytes = (2.0 * 512 * 2048 + 2048.0 * 512) * 2;
  Timer timer;

  std::printf("%6s %-74s %5s %9s %9s %9s %7s %9s %7s %8s %6s\n", "M", "config (H200 table)",
              "path", "total_us", "w13_us", "w2_us", "experts", "wGB/s", "%4.3T", "TFLOP/s",
              "%790");
  for (int64_t m : {1, 8, 32, 64, 512, 4096}) {
    const at::Tensor hidden = at::randn({m, 2048}, f).to(at::kBFloat16);
    std::vector<at::Tensor> ids, weights;
    double experts = 0;
    for (int r = 0; r < 8; ++r) {
      const at::Tensor probs = at::softmax(at::randn({m, 512}, f), 1);
      auto [w, id] = at::topk(probs, 10, 1);
      weights.push_back((w / w.sum(1, true)).contiguous());
      ids.push_back(id.to(at::kInt).contiguous());
      experts += static_cast<double>(std::get<0>(at::_unique(ids.back().reshape({-1}))).numel());
    }
    experts /= 8;
    at::Tensor out = at::empty({m, 2048}, hidden.options());
    void* stream = coldstart::kernels::stream_for(hidden);
    cj::Selection sel;
    const double total_ms = timer.median_ms(stream, 3, 30, [&](int i) {
      sel = fm::fused_experts(rt, s, src, hidden, w13, w2, weights[i % 8], ids[i % 8], out);
    });
    // The GEMMs alone, on the same alignment outputs as fused_experts computes them.
    const fm::GemmBlock blk = fm::gemm_block(sel.config);
    std::vector<fm::Alignment> asg;
    for (int r = 0; r < 8; ++r) asg.push_back(fm::prepare_expert_assignment(rt, s, ids[r], blk.block_m));
    const at::Tensor cache1 = at::empty({m, 10, 1024}, hidden.options());
    const at::Tensor cache2 = at::randn({m * 10, 512}, f).to(at::kBFloat16);
    const at::Tensor cache3 = at::empty({m, 10, 2048}, hidden.options());
    const double w13_ms = timer.median_ms(stream, 3, 30, [&](int i) {
      fm::gemm(rt, sel.config, hidden, w13, cache1, at::Tensor(), asg[i % 8], false, 10);
    });
    const double w2_ms = timer.median_ms(stream, 3, 30, [&](int i) {
      fm::gemm(rt, sel.config, cache2, w2, cache3, weights[i % 8], asg[i % 8], true, 1);
    });
    const double bytes = experts * w_expert_bytes;
    const double flops = 2.0 * m * 10 * (3.0 * 512 * 2048);
    const double gbs = bytes / (total_ms * 1e-3) / 1e9;
    const double tflops = flops / (total_ms * 1e-3) / 1e12;
    const bool naive = fm::uses_naive_block_assignment(m, 10, 512);
    std::printf("%6lld %-74s %5s %9.1f %9.1f %9.1f %7.1f %9.0f %6.1f%% %8.1f %5.1f%%\n",
                static_cast<long long>(m), (sel.tuning_key + " " + sel.config.name).c_str(),
                naive ? "naive" : "align", total_ms * 1e3, w13_ms * 1e3, w2_ms * 1e3, experts, gbs,
                100.0 * gbs / (kCopyTBs * 1e3), tflops, 100.0 * tflops / kPeakTflops);
    std::printf("%6s GEMMs alone: %.0f GB/s of weights (%.1f%% of 4.3 TB/s), %.1f TFLOP/s\n", "",
                bytes / ((w13_ms + w2_ms) * 1e-3) / 1e9,
                100.0 * bytes / ((w13_ms + w2_ms) * 1e-3) / 4.3e12,
                flops / ((w13_ms + w2_ms) * 1e-3) / 1e12);
  }
  return 0;
}
