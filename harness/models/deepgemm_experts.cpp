// MoE backend "deepgemm_m_grouped": FP8 experts with 128x128 block scales through DeepGEMM's
// m-grouped contiguous GEMM (harness/kernels/deepgemm), as vLLM runs block-FP8 experts with its
// DEEPGEMM backend: the (token, k) pairs laid out per expert, each expert's run padded to 128 rows
// over vLLM's static row bound (deepgemm::m_grouped_contiguous_rows), activations quantized per
// 1x128 group, w13, the (clamped) SwiGLU, w2, then the weighted sum back per token in float32.
// The model routes (MoeRouting::kByModel: DeepSeek V4's scores and hash routing are torch ops).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include "harness/kernels/deepgemm/deepgemm.h"
#include "harness/kernels/deepgemm/dg_kernels.h"
#include "harness/models/layers_common.h"
#include "harness/models/moe.h"

namespace coldstart {
namespace {

namespace dg = deepgemm;

class DeepGemmExperts final : public MoeExperts {
 public:
  DeepGemmExperts(const MoeSpec& spec, const MixerContext& ctx)
      : MoeExperts(spec, ctx), meta_(ctx.device.is_meta()) {
    target_ = dg::gemm_target(ctx.target);
  }

  std::string backend() const override { return "deepgemm_m_grouped"; }

  void route(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) override {
    throw Error("deepgemm_m_grouped: the model routes its experts (MoeRouting::kByModel)");
  }

  // Returns float32 [T, H]; topk_weights already carry the model's scaling.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& topk_w, const at::Tensor& ids,
                     const MoeWeights& w) override {
    const int64_t T = x.size(0), E = spec_.num_experts, K = spec_.top_k, I = spec_.intermediate;
    const int64_t H = spec_.hidden;
    const int64_t rows = dg::m_grouped_contiguous_rows(T, K, E);
    const at::TensorOptions opt = x.options();
    at::Tensor a = at::zeros({rows, H}, opt);
    at::Tensor m_indices = at::full({rows}, -1, opt.dtype(at::kInt));
    at::Tensor dest;
    if (!meta_) {
      // Lay the (token, k) pairs out per expert, each expert's run starting at a 128-row boundary.
      const at::Tensor flat = ids.reshape({-1}).to(at::kLong);
      const at::Tensor order = at::argsort(flat);
      const at::Tensor sorted = flat.index({order});
      const at::Tensor counts = at::zeros({E}, opt.dtype(at::kLong)).scatter_add_(0, flat, at::ones_like(flat));
      const at::Tensor padded = (counts + 127).floor_divide(128) * 128;
      const at::Tensor seg_start = at::cumsum(padded, 0) - padded;
      const at::Tensor sorted_start = at::cumsum(counts, 0) - counts;
      const at::Tensor rank = at::arange(T * K, opt.dtype(at::kLong)) - sorted_start.index({sorted});
      const at::Tensor pos = seg_start.index({sorted}) + rank;  // row of the sorted pair
      dest = at::empty_like(pos).index_put_({order}, pos);      // row of pair (t, k)
      a.index_copy_(0, dest, x.repeat_interleave(K, 0));
      m_indices.index_put_({dest}, flat.to(at::kInt));
    } else {
      // Compile-only: the large allocations of the branch above, with their lifetimes, so the
      // meta memory count sees them (libtorch 1.13 has no meta kernels for floor_divide or
      // repeat_interleave): the pair -> row map and x repeated top_k times.
      dest = at::empty({T * K}, opt.dtype(at::kLong));
      const at::Tensor repeated = at::empty({T * K, H}, opt);
    }
    const dg::Fp8Activation aq = dg::quantize_fp8(a);
    at::Tensor h = at::empty({rows, 2 * I}, opt);
    dg::m_grouped_fp8_gemm_nt_contiguous(*ctx_.jit, target_, aq.data, aq.sf, w.w13, w.w13_scale, h, m_indices);
    const dg::Fp8Activation hq = dg::quantize_fp8(clamped_swiglu(h, spec_.swiglu_limit));
    at::Tensor y = at::empty({rows, H}, opt);
    dg::m_grouped_fp8_gemm_nt_contiguous(*ctx_.jit, target_, hq.data, hq.sf, w.w2, w.w2_scale, y, m_indices);
    at::Tensor out = at::zeros({T, H}, opt.dtype(at::kFloat));
    if (!meta_) {
      const at::Tensor routed = y.index({dest}).to(at::kFloat) * topk_w.reshape({-1, 1});
      out.index_add_(0, at::arange(T, opt.dtype(at::kLong)).repeat_interleave(K), routed);
    } else {
      // Compile-only: the gathered rows, their float copy and the weighted product, which the
      // statement above holds at once.
      const at::Tensor gathered = at::empty({T * K, H}, opt);
      const at::Tensor as_float = at::empty({T * K, H}, opt.dtype(at::kFloat));
      const at::Tensor routed = at::empty({T * K, H}, opt.dtype(at::kFloat));
    }
    return out;
  }

 private:
  bool meta_;
  dg::GemmTarget target_;
};

std::vector<ScenarioProblem> check(const MoeSpec& s, const EngineConfig&, const Target*) {
  std::vector<ScenarioProblem> out;
  if (s.routing != MoeRouting::kByModel) {
    out.push_back({"model", "deepgemm_m_grouped takes the model's own top-k (no router kernel)"});
  }
  if (s.activation == MoeActivation::kRelu2) {
    out.push_back({"model", "deepgemm_m_grouped runs gated SwiGLU experts only, not relu2"});
  }
  // K of both GEMMs (H for w13, N for w2) must be a multiple of 128 (m_grouped_fp8_gemm_nt_contiguous).
  if (s.hidden % 128 != 0 || s.intermediate % 128 != 0) {
    out.push_back({"model", fmt::format("deepgemm_m_grouped needs the hidden and intermediate sizes "
                                        "multiples of 128 (got {} and {})", s.hidden, s.intermediate)});
  }
  return out;
}

MoeBackendInfo deepgemm_backend() {
  MoeBackendInfo b;
  b.name = "deepgemm_m_grouped";
  b.weight_format = "fp8_block128";
  b.description = "FP8 128x128-block experts: m-grouped contiguous FP8 GEMMs over vLLM's static "
                  "row bound, model-computed routing";
  b.make = [](const MoeSpec& s, const MixerContext& ctx) -> std::unique_ptr<MoeExperts> {
    return std::make_unique<DeepGemmExperts>(s, ctx);
  };
  b.kernels = dg::all_kernels();
  b.check = check;
  return b;
}

}  // namespace

CS_REGISTER_MOE_BACKEND(deepgemm_backend());

}  // namespace coldstart
