// qwen-gdn-warmup: vLLM's Qwen GDN Triton warmup (vllm.model_executor.warmup.qwen_triton_warmup,
// the seed ../shared/seeds/qwen-gdn-triton-warmup.txt), run in kernel_warmup before graph
// capture. Keyed from the loaded model's first GDN layer (its dims, its bound conv-state and
// SSM-state tensors, A_log and dt_bias), it compiles, in the seed's order:
//   1. the gated RMSNorm at the engine's max token count (the seed's
//      _warm_gated_rms_norm_kernel; its body is not in the seed: the row count here is
//      max_num_batched_tokens * Hv rows of V, as the layer's norm sees them [inference]);
//   2. causal_conv1d_fwd on one token in the null block of the layer's real conv state, with an
//      uninitialized has_initial_state (vllm 1f3a054c: _warm_causal_conv1d_fwd_kernel);
//   3. fused_post_conv_prep at lengths 1, 2 and 16 ("L=1, non-divisible and divisible runtime
//      L", vllm 1f3a054c _FLA_POST_CONV_WARMUP_LENGTHS);
//   4. the decode update (skipped for pooling models; none replayed here) on one token with a
//      state of the serving page stride and [1, 1] state indices (vllm 1f3a054c);
//   5. the state gather / scatter in the seed's four alignment / stride cases, scatter with a
//      float32 source and one of the state dtype;
//   6. with num_speculative_tokens > 0, the fused MTP decode kernel for the request counts
//      {1, ceil(SMs / Hv), 4 * SMs / Hv + 1} that select value tiles 32, 64 and V (the seed runs
//      it on ROCm only; this is the CUDA replay of that kernel).
// What it does not touch (the chunked-prefill chain, which vLLM warms in the profile run; the
// fused-MoE GEMMs; attention) is left to the engine's own startup, and what that misses shows up
// as hot-path compiles in the result.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "harness/models/spec_decode.engine_keys.h"
#include "harness/kernels/gdn_chunk/gdn_chunk.h"
#include "harness/kernels/gdn_decode/gdn_decode.h"
#include "harness/kernels/mamba_ops/mamba_ops.h"
#include "harness/runtime/host_upload.h"
#include "warmers/warmer.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace {

/// The mixers this file's warmers warm (Warmer::mixers_used).
const MixerRef kGdn{"gdn"};

class QwenGdnWarmup final : public Warmer {
 public:
  std::string name() const override { return "qwen-gdn-warmup"; }
  std::vector<std::string> mixers_used() const override { return {kGdn.name()}; }
  std::string description() const override {
    return "Qwen3-Next GDN: gated RMSNorm at max tokens, conv1d fwd, post-conv (L 1/2/16), "
           "decode update, state gather/scatter variants, MTP decode tiles with spec decode "
           "(vLLM qwen_triton_warmup)";
  }

  void run(WarmupContext& ctx) override {
    const std::vector<Mixer*> layers = ctx.mixers(kGdn);
    Mixer* layer = nullptr;
    for (Mixer* m : layers) {
      if (!m->cache_views().empty()) {
        layer = m;
        break;
      }
    }
    if (!layer) {
      ctx.skip(layers.empty() ? "no GDN layer, nothing to warm"
                              : "no bound GDN cache, nothing to warm");
      return;
    }
    Layer g = describe(*layer);
    jit::JitRuntime& rt = ctx.jit();
    const bool gpu = ctx.mode() == DeviceMode::kCuda;
    const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(ctx.device());
    auto filled = [&](at::Tensor t) {
      if (gpu) t.normal_();
      return t;
    };

    // 1. gated RMSNorm at the engine's max token count.
    const int64_t max_tokens = std::max(1, ctx.scenario().engine.max_num_batched_tokens);
    {
      const int64_t rows = max_tokens * g.hv;
      at::Tensor x = filled(at::empty({rows, g.v}, bf16));
      at::Tensor z = filled(at::empty({rows, g.v}, bf16));
      at::Tensor w = gpu ? at::ones({g.v}, bf16) : at::empty({g.v}, bf16);
      at::Tensor out = at::empty({rows, g.v}, bf16);
      mamba_ops::gated_rms_norm(rt, x, z, w, 1e-6, /*norm_before_gate=*/true,
                                mamba_ops::Activation::kSilu, g.v, ctx.target().sm_count, out);
    }
    // 2. conv1d forward: one token in the null block of the real conv state.
    {
      at::Tensor x = filled(at::empty({1, g.conv_dim}, bf16));
      at::Tensor out = at::empty({1, g.conv_dim}, bf16);
      at::Tensor weight = filled(at::empty({g.conv_dim, g.width}, bf16));
      at::Tensor cache_indices = ints({0}, ctx);
      at::Tensor has_init = at::zeros({1}, at::TensorOptions().dtype(at::kBool).device(ctx.device()));
      at::Tensor qsl = ints({0, 1}, ctx);
      mamba_ops::causal_conv1d_fwd(rt, x, weight, at::Tensor(), g.conv_state, qsl, cache_indices,
                                   has_init, mamba_ops::Activation::kSilu, out);
    }
    // 3. fused post-conv at L = 1, 2, 16.
    for (int64_t L : {1, 2, 16}) {
      at::Tensor conv_out = filled(at::empty({L, g.conv_dim}, bf16));
      at::Tensor a = filled(at::empty({L, g.hv}, bf16));
      at::Tensor b = filled(at::empty({L, g.hv}, bf16));
      gdn_chunk::PostConvOut pc;
      pc.q = at::empty({L, g.hk, g.k}, bf16);
      pc.k = at::empty({L, g.hk, g.k}, bf16);
      pc.v = at::empty({L, g.hv, g.v}, bf16);
      pc.g = at::empty({L, g.hv}, bf16.dtype(at::kFloat));
      pc.beta = at::empty({L, g.hv}, bf16.dtype(at::kFloat));
      gdn_chunk::fused_post_conv(rt, g.chunk_dims(), conv_out, a, b, g.a_log, g.dt_bias, pc);
    }
    // 4. decode update: one token, a state row of the serving page stride.
    {
      at::Tensor q = filled(at::empty({1, g.hk, g.k}, bf16));
      at::Tensor k = filled(at::empty({1, g.hk, g.k}, bf16));
      at::Tensor v = filled(at::empty({1, g.hv, g.v}, bf16));
      at::Tensor a = filled(at::empty({1, g.hv}, bf16));
      at::Tensor b = filled(at::empty({1, g.hv}, bf16));
      const int64_t stride = g.ssm_state.stride(0);
      at::Tensor buf = at::zeros({stride}, g.ssm_state.options());
      at::Tensor state = buf.as_strided({1, g.hv, g.v, g.k}, {stride, g.v * g.k, g.k, 1});
      at::Tensor indices = ints({0}, ctx).view({1, 1});
      at::Tensor out = at::empty({1, g.hv, g.v}, bf16);
      gdn_decode::fused_sigmoid_gating_delta_rule_update(
          rt, g.decode_dims(), g.a_log, a, b, g.dt_bias, q, k, v, state, indices, ints({0, 1}, ctx),
          at::Tensor(), out, 1.0f / std::sqrt(static_cast<float>(g.k)), true);
    }
    // 5. state gather / scatter in the four cases serving hits.
    {
      at::Tensor state = at::zeros({2, g.hv, g.v, g.k}, g.ssm_state.options());
      at::Tensor idx_pool = at::zeros({6}, at::TensorOptions().dtype(at::kInt).device(ctx.device()));
      at::Tensor has_pool = at::zeros({2}, at::TensorOptions().dtype(at::kBool).device(ctx.device()));
      const std::pair<at::Tensor, at::Tensor> cases[] = {
          {idx_pool.narrow(0, 0, 1), has_pool.narrow(0, 0, 1)},  // aligned, contiguous
          {idx_pool.narrow(0, 1, 1), has_pool.narrow(0, 1, 1)},  // unaligned
          {idx_pool.narrow(0, 4, 1), has_pool.narrow(0, 1, 1)},  // aligned indices, unaligned mask
          {idx_pool.as_strided({1}, {2}), has_pool.narrow(0, 0, 1)},  // strided (spec decode)
      };
      for (const auto& [idx, has] : cases) {
        at::Tensor gathered = at::empty({1, g.hv, g.v, g.k}, state.options());
        mamba_ops::gather_initial_states(rt, state, idx, has, gathered);
        mamba_ops::scatter_states(rt, state, gathered.to(at::kFloat), idx);
        mamba_ops::scatter_states(rt, state, gathered, idx);
      }
    }
    // 6. MTP decode kernel tiles, with speculative decoding configured.
    const int spec = num_speculative_tokens(ctx.scenario().engine);
    int mtp = 0;
    if (spec > 0) mtp = warm_mtp(ctx, g, spec);
    ctx.log(fmt::format("qwen-gdn-warmup: layer {} ({}), {} MTP request count(s)",
                        layer->spec().layer, layer->compile_config(), mtp));
  }

 private:
  struct Layer {
    int64_t hk, hv, k, v, width, conv_dim;
    at::Tensor conv_state, ssm_state, a_log, dt_bias;
    gdn_chunk::GdnDims chunk_dims() const {
      return {static_cast<int>(hk), static_cast<int>(hv), static_cast<int>(k), static_cast<int>(v)};
    }
    gdn_decode::GdnDims decode_dims() const {
      return {static_cast<int>(hk), static_cast<int>(hv), static_cast<int>(k), static_cast<int>(v)};
    }
  };

  static Layer describe(const Mixer& m) {
    const MixerSpec& s = m.spec();
    Layer g;
    g.hk = s.num_kv_heads;
    g.hv = s.num_heads;
    g.k = s.params.value("head_k_dim", int64_t{128});
    g.v = s.head_dim;
    g.width = s.params.value("conv_kernel", int64_t{4});
    g.conv_dim = 2 * g.hk * g.k + g.hv * g.v;
    const std::vector<at::Tensor> cache = m.cache_views();
    const std::vector<at::Tensor> params = m.parameters();
    g.conv_state = cache.at(0);
    g.ssm_state = cache.at(1);
    g.a_log = params.at(1);
    g.dt_bias = params.at(2);
    return g;
  }

  static at::Tensor ints(const std::vector<int32_t>& v, WarmupContext& ctx) {
    return upload(v, at::kInt, ctx.device());
  }

  // The seed's request counts: the smallest that select BV = 32, 64 and V on this GPU.
  static int warm_mtp(WarmupContext& ctx, const Layer& g, int spec) {
    const int sms = ctx.target().sm_count;
    const int64_t hv = g.hv;
    std::set<int64_t> counts = {1, (sms + hv - 1) / hv, 4 * sms / hv + 1};
    const int64_t per_req = spec + 1;
    const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(ctx.device());
    int warmed = 0;
    for (int64_t reqs : counts) {
      if (reqs > ctx.scenario().engine.max_num_seqs) continue;
      const int64_t n = reqs * per_req;
      at::Tensor qkvz = at::zeros({n, g.conv_dim + hv * g.v}, bf16);
      at::Tensor ba = at::zeros({n, 2 * hv}, bf16);
      at::Tensor mixed_qkv = qkvz.narrow(1, 0, g.conv_dim);
      at::Tensor gate = qkvz.narrow(1, g.conv_dim, hv * g.v).view({n, hv, g.v});
      at::Tensor b = ba.narrow(1, 0, hv), a = ba.narrow(1, hv, hv);
      const int64_t stride = g.ssm_state.stride(0);
      at::Tensor buf = at::zeros({2 * stride}, g.ssm_state.options());
      at::Tensor state = buf.as_strided({2, hv, g.v, g.k}, {stride, g.v * g.k, g.k, 1});
      std::vector<int32_t> cu;
      for (int64_t r = 0; r <= reqs; ++r) cu.push_back(static_cast<int32_t>(r * per_req));
      at::Tensor indices = at::zeros({reqs, per_req}, bf16.dtype(at::kInt));
      at::Tensor accepted = ctx.mode() == DeviceMode::kCuda ? at::ones({reqs}, bf16.dtype(at::kInt))
                                                            : at::empty({reqs}, bf16.dtype(at::kInt));
      at::Tensor norm_w =
          ctx.mode() == DeviceMode::kCuda ? at::ones({g.v}, bf16) : at::empty({g.v}, bf16);
      at::Tensor out = at::empty({n, hv, g.v}, bf16);
      gdn_decode::fused_gdn_decode_post_conv_mtp(
          ctx.jit(), g.decode_dims(), mixed_qkv, a, b, g.a_log, g.dt_bias, indices, ints(cu, ctx),
          accepted, state, gate, norm_w, out, 1.0f / std::sqrt(static_cast<float>(g.k)), 1e-6f,
          "silu", ctx.target().sm_count);
      ++warmed;
    }
    return warmed;
  }
};

CS_REGISTER_WARMER(QwenGdnWarmup);

}  // namespace
}  // namespace coldstart
