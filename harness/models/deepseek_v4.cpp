// DeepSeek V4 (DeepseekV4ForCausalLM, DeepSeek-V4-Flash) at real shapes with random weights, its
// linear layers FP8 block-quantized through the DeepGEMM-style kernels (harness/kernels/deepgemm).
// Followed: TokenSpeed's python/tokenspeed/runtime/models/deepseek_v4.py and layers/
// deepseek_v4_mhc.py (lightseekorg/tokenspeed f4d8ec6e), vLLM's models/deepseek_v4.py and
// layers/mhc.py (vllm-project/vllm 023da1fc / 001a058b). One decoder layer:
//   hc_pre (attn)   the 4 residual streams [T, 4 * 4096] -> tf32_hc_prenorm_gemm against
//                   hc_attn_fn [24, 16384] (split-K, splits from the SM count as TokenSpeed's
//                   mhc_pre picks them) -> RMS-scaled mixes -> pre (sigmoid), post (2 sigmoid)
//                   and the 4x4 comb (softmax + 20 Sinkhorn normalizations) -> sum_i pre_i x_i
//   attn_norm -> fused wq_a+wkv fp8_gemm_nt (1536, 4096) -> q_norm -> wq_b fp8_gemm_nt
//                   (32768, 1024); kv_norm on the 512-wide latent KV
//   C4 layers: the indexer's wq_b fp8_gemm_nt (8192, 1024) on the normed q_a, weights_proj (bf16,
//                   64 x 4096) and its compressor (bf16, 512 x 4096) for the index key
//   the attention mixer (deepseek_v4_attention.cpp): cache insert, sparse indexer, attention
//   wo_a: fp8_einsum "bhr,hdr->bhd" over 8 groups (1024, 4096), wo_b fp8_gemm_nt (4096, 8192)
//   hc_post (attn), hc_pre (ffn), ffn_norm, MoE, hc_post (ffn)
//   MoE: router (fp32, 256 x 4096), sqrt(softplus) scores; layers < num_hash_layers take their
//                   experts from a token-id table, the others top-6 of score + correction bias;
//                   weights renormalized, x routed_scaling_factor; experts through
//                   m_grouped_fp8_gemm_nt_contiguous (w13 (4096, 4096), clamped SwiGLU, w2
//                   (4096, 2048)); the shared expert through fp8_gemm_nt (4096, 4096), (4096, 2048)
//   final: hc_head collapses the streams (sigmoid weights from hc_head_fn [4, 16384]), norm.
// Simplified (kernels, shapes and workspaces of the DeepGEMM path kept):
// - experts are FP8 with 128x128 block scales through DeepGEMM's m-grouped contiguous GEMM (V4-Flash
//   ships MXFP4 experts, which the H200 serves with Marlin W4A16 and the B200 with TRT-LLM / DeepGEMM
//   MegaMoE kernels); tokens are laid out per expert with torch operations into vLLM's static
//   bound of rows (compute_aligned_M in vllm/model_executor/layers/fused_moe/deep_gemm_utils.py:
//   M * top_k + E * 127, rounded up to 128) where vLLM runs its ep_scatter / ep_gather Triton kernels;
// - activations are quantized per 128-column group with torch operations (not a replayed kernel);
// - RoPE, the compressors' window pooling and the attention sink are left out; the layer kinds
//   (SWA, C4, C128) keep their kernels and what they attend to, as the mixer describes;
// - tensor parallelism is not replayed (tensor_parallel_size 1).
// The MTP layer (DeepSeekV4MTP, the draft model of speculative method "mtp") is DeepseekV4Model::Mtp
// at the end of this file.
#include "harness/models/deepseek_v4.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>

#include "harness/kernels/deepgemm/deepgemm.h"
#include "harness/kernels/deepgemm/deepgemm_indexer.h"
#include "harness/models/layers_common.h"
#include "harness/models/model.h"
#include "harness/models/spec_decode.engine_keys.h"

namespace coldstart {
namespace deepseek_v4 {

int64_t kv_bytes_per_token(const Dims& d) { return 2 * d.head_dim + d.index_dim + 4; }

Dims dims(const ModelConfig& c, const EngineConfig* e) {
  Dims d;
  const ConfigView r{c, &d.problems};
  auto& pr = d.problems;
  d.hidden = c.hidden_size;
  d.heads = c.num_attention_heads;
  d.head_dim = c.head_dim;
  d.rope_dim = config_int(r, "qk_rope_head_dim", 64, 1);
  d.q_lora = config_int(r, "q_lora_rank", 0);
  d.o_groups = config_int(r, "o_groups", 0);
  d.o_lora = config_int(r, "o_lora_rank", 0);
  d.index_heads = config_int(r, "index_n_heads", 0);
  d.index_dim = config_int(r, "index_head_dim", 0);
  d.index_topk = config_int(r, "index_topk", 0);
  d.window = config_int(r, "sliding_window", 128, 1);
  d.hc_mult = config_int(r, "hc_mult", 0);
  d.hc_sinkhorn_iters = config_int(r, "hc_sinkhorn_iters", 20, 0);
  d.hc_eps = config_double(r, "hc_eps", 1e-6);
  d.eps = c.rms_norm_eps;
  d.experts = config_int(r, "n_routed_experts", 0);
  d.top_k = config_int(r, "num_experts_per_tok", 0);
  d.moe_inter = config_int(r, "moe_intermediate_size", 0);
  d.shared_experts = config_int(r, "n_shared_experts", 0, 0);
  d.routed_scaling = config_double(r, "routed_scaling_factor", 1.0);
  d.swiglu_limit = config_double(r, "swiglu_limit", 0.0);
  d.expert_dtype = config_string(r, "expert_dtype", "fp8");
  const int64_t hash_layers = config_int(r, "num_hash_layers", 0, 0);

  auto need = [&](const char* key, int64_t v, int64_t multiple) {
    if (v <= 0 || v % multiple != 0) {
      pr.push_back({fmt::format("model.{}", key),
                    fmt::format("{} must be a positive multiple of {} (the FP8 GEMMs' 128-wide scale blocks "
                                "and the kernels' tiles)",
                                v, multiple)});
    }
  };
  need("hidden_size", d.hidden, 128);
  need("q_lora_rank", d.q_lora, 128);
  need("o_lora_rank", d.o_lora, 128);
  need("moe_intermediate_size", d.moe_inter, 128);
  need("head_dim", d.head_dim, 128);
  if (d.o_groups <= 0 || d.q_width() % d.o_groups != 0 || (d.q_width() / d.o_groups) % 128 != 0) {
    pr.push_back({"model.o_groups", fmt::format("{} does not split {} heads x {} into 128-multiples", d.o_groups,
                                                d.heads, d.head_dim)});
  }
  // qk_rope_head_dim is the rotary slice of each head (qk_nope = head_dim - qk_rope, as in
  // DeepSeek's MLA), rotated in pairs.
  if (d.rope_dim % 2 != 0 || d.rope_dim > d.head_dim) {
    pr.push_back({"model.qk_rope_head_dim",
                   fmt::format("{} must be even and at most head_dim {} (the rotary part of each "
                               "head)",
                               d.rope_dim, d.head_dim)});
  }
  // Harness rules, not V4's: the indexer keeps index_topk tokens per query (0 keeps none, and
  // sparse attention would read nothing), and hc_eps floors the sigmoid / softmax mixing weights
  // (a negative or NaN one can zero or negate them).
  if (d.index_topk < 1) {
    pr.push_back({"model.index_topk",
                  fmt::format("{}: the indexer must keep at least one token per query", d.index_topk)});
  }
  if (!(d.hc_eps > 0) || !std::isfinite(d.hc_eps)) {
    pr.push_back({"model.hc_eps", fmt::format("must be a positive number, got {}", d.hc_eps)});
  }
  // The expert formats the replay knows: fp4 (the Flash checkpoint's) and fp8 (the default when
  // the key is absent). Both are replayed as FP8 blocks; another name is refused rather than
  // reported as replayed.
  if (d.expert_dtype != "fp4" && d.expert_dtype != "fp8") {
    pr.push_back({"model.expert_dtype",
                  fmt::format("'{}': the replay knows fp4 and fp8 experts", d.expert_dtype)});
  }
  if (d.hc_mult < 2) pr.push_back({"model.hc_mult", fmt::format("{}: the replay needs hyper-connections (>= 2)", d.hc_mult)});
  if (d.mix_hc() > 32 || d.mix_hc() % 8 != 0) {
    pr.push_back({"model.hc_mult", fmt::format("gives an HC GEMM of N = {}; DeepGEMM's SM90 tf32_hc_prenorm_gemm "
                                               "takes N <= 32, a multiple of 8",
                                               d.mix_hc())});
  }
  if (d.index_heads != 32 && d.index_heads != 64) {
    pr.push_back({"model.index_n_heads", fmt::format("{}: DeepGEMM's MQA-logits kernels take 32 or 64 heads", d.index_heads)});
  }
  if (d.index_dim != 32 && d.index_dim != 64 && d.index_dim != 128) {
    pr.push_back({"model.index_head_dim", fmt::format("{}: DeepGEMM's MQA-logits kernels take 32, 64 or 128", d.index_dim)});
  }
  if (d.experts <= 0 || d.top_k <= 0 || d.top_k > d.experts) {
    pr.push_back({"model.num_experts_per_tok", fmt::format("{} of {} routed experts", d.top_k, d.experts)});
  }
  const nlohmann::json* ratios = c.raw.contains("compress_ratios") ? &c.raw["compress_ratios"] : nullptr;
  if (ratios == nullptr || !ratios->is_array() ||
      static_cast<int64_t>(ratios->size()) < c.num_hidden_layers) {
    pr.push_back({"model.compress_ratios", fmt::format("must list one ratio per layer ({} layers)", c.num_hidden_layers)});
  } else {
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const auto& v = (*ratios)[l];
      // Compared as an integer of any width (get<int> would truncate 2^32 + 4 to 4).
      const int ratio = v.is_number_integer() && (v == 0 || v == 4 || v == 128) ? v.get<int>() : -1;
      if (ratio != 0 && ratio != 4 && ratio != 128) {
        pr.push_back({"model.compress_ratios",
                      fmt::format("entry {} is {}: V4 layers are 0 (SWA), 4 or 128", l, v.dump())});
      }
      d.layers.push_back({ratio, l < hash_layers});
    }
  }
  if (e != nullptr) {
    if (e->tensor_parallel_size != 1) {
      pr.push_back({"engine.tensor_parallel_size",
                    fmt::format("{}: DeepSeek V4 is replayed at one rank of TP 1 only", e->tensor_parallel_size)});
    }
    if (e->block_size != kIndexerBlockKv) {
      pr.push_back({"engine.block_size",
                    fmt::format("{}: the paged MQA-logits kernel reads the indexer cache in blocks of {} tokens "
                                "(DeepGEMM's SM90 kernel asserts it; the replay uses it on every arch); set block_size: {}",
                                e->block_size, kIndexerBlockKv, kIndexerBlockKv)});
    }
    // DeepSeekV4MultiTokenPredictor (deepseek_v4_mtp.py @ 023da1fc) builds
    // num_nextn_predict_layers MTP layers and runs layer (pass % n) at each drafter pass; the
    // replay builds exactly one (V4-Flash's count), and without one there is no head to draft.
    if (uses_mtp_drafter(*e)) {
      const int64_t n = config_int(r, "num_nextn_predict_layers", 0, 0);
      if (n != 1) {
        pr.push_back({"model.num_nextn_predict_layers",
                      fmt::format("{}: {}", n,
                                  n == 0 ? "the config has no MTP layer for speculative_method mtp to draft "
                                           "with; set speculative_method: synthetic"
                                         : "the replay builds one MTP layer (V4-Flash's count); vLLM would "
                                           "run layer (pass % n) at each drafter pass")});
      }
    }
    if (e->kv_cache_dtype != "auto") {
      pr.push_back({"engine.kv_cache_dtype",
                    fmt::format("'{}': the replay keeps V4's own cache layout (auto only)", e->kv_cache_dtype)});
    }
  }
  return d;
}

DeepGemmSites deepgemm_sites(const Dims& d) {
  DeepGemmSites s;
  auto add = [&](int64_t n, int64_t k) {
    for (const auto& p : s.fp8_linears) {
      if (p.first == n && p.second == k) return;
    }
    s.fp8_linears.emplace_back(n, k);
  };
  add(d.q_lora + d.kv_width(), d.hidden);  // fused wq_a + wkv
  add(d.q_width(), d.q_lora);              // wq_b
  add(d.hidden, d.o_groups * d.o_lora);    // wo_b
  for (const LayerKind& l : d.layers) {
    if (l.has_indexer()) {
      add(d.index_heads * d.index_dim, d.q_lora);  // indexer.wq_b
      s.indexer = true;
    }
  }
  if (d.shared_experts > 0) {
    add(2 * d.moe_inter * d.shared_experts, d.hidden);  // shared gate_up
    add(d.hidden, d.moe_inter * d.shared_experts);      // shared down
  }
  s.einsum_groups = d.o_groups;
  s.einsum_n = d.o_lora;
  s.einsum_k = d.o_group_in();
  s.hc_n = d.mix_hc();
  s.hc_k = d.hc_width();
  s.experts = d.experts;
  s.top_k = d.top_k;
  s.moe_w13 = {2 * d.moe_inter, d.hidden};
  s.moe_w2 = {d.hidden, d.moe_inter};
  s.index_heads = d.index_heads;
  s.index_dim = d.index_dim;
  return s;
}

}  // namespace deepseek_v4

namespace {

using deepseek_v4::Dims;
namespace dg = deepgemm;

struct LayerWeights {
  at::Tensor hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  at::Tensor attn_norm, q_norm, kv_norm, ffn_norm;
  // FP8 weights (uint8 e4m3) and their [ceil(N/128), K/128] block scales
  at::Tensor wqkv_a, wqkv_a_s, wq_b, wq_b_s, wo_a, wo_a_s, wo_b, wo_b_s;
  at::Tensor idx_wq_b, idx_wq_b_s, idx_weights_proj, idx_compressor;  // last two bf16
  at::Tensor gate, gate_bias, tid2eid;
  at::Tensor w13, w13_s, w2, w2_s, shared_up, shared_up_s, shared_down, shared_down_s;
};

/// The hyper-connection mixing of one sublayer (TokenSpeed mhc_pre): layer input, post weights and
/// the 4x4 comb for hc_post.
struct HcMix {
  at::Tensor input;  // [T, H] bf16
  at::Tensor post;   // [T, hc] float
  at::Tensor comb;   // [T, hc, hc] float
};

class DeepseekV4Model : public Model {
 public:
  DeepseekV4Model(const ModelConfig& c, const MixerContext& ctx)
      : c_(c), d_(deepseek_v4::dims(c, ctx.engine)), ctx_(ctx), device_(ctx.device) {
    target_ = dg::gemm_target(ctx.target);
  }

  std::string name() const override { return "deepseek-v4"; }

  std::vector<MoeSpec> moe_specs() const override {
    MoeSpec s;
    s.num_experts = d_.experts;
    s.intermediate = d_.moe_inter;
    s.hidden = d_.hidden;
    s.top_k = static_cast<int>(d_.top_k);
    s.routing = MoeRouting::kByModel;  // sqrt(softplus) scores + bias, or the hash table
    s.activation = MoeActivation::kClampedSwiglu;
    s.swiglu_limit = d_.swiglu_limit;
    s.weight_format = "fp8_block128";
    return {s};
  }

  std::vector<MixerSpec> layer_plan() const override {
    std::vector<MixerSpec> plan;
    for (size_t l = 0; l < d_.layers.size(); ++l) plan.push_back(mixer_spec(static_cast<int>(l), d_.layers[l]));
    return plan;
  }

  std::unique_ptr<Model> make_mtp_drafter() override;

  /// The pre-hc_head streams of the last forward pass, flat: [max_num_batched_tokens, hc_mult * H]
  /// bf16 (vLLM's _mtp_hidden_buffer, read by get_mtp_target_hidden_states).
  at::Tensor mtp_target_hidden() const override { return mtp_hidden_; }

  int64_t load_weights(uint64_t seed) override {
    WeightMaker m(device_);
    if (!device_.is_meta()) at::manual_seed(seed);
    const at::TensorOptions on = at::TensorOptions().device(device_);
    const int64_t H = d_.hidden, V = c_.vocab_size, hc = d_.hc_mult;
    int64_t bytes = 0;
    embed_ = m.normal({V, H}, 1.0);
    layers_.clear();
    for (const deepseek_v4::LayerKind& kind : d_.layers) layers_.push_back(layer_weights(m, kind, bytes));
    hc_head_fn_ = m.normal({hc, d_.hc_width()}, 0.01).to(at::kFloat);
    hc_head_base_ = m.normal({hc}, 0.1).to(at::kFloat);
    final_norm_ = m.ones(H);
    lm_head_ = m.normal({V, H}, 1.0 / std::sqrt(static_cast<double>(H)));
    // DeepseekV4Model.__init__ allocates the MTP drafter's input buffer on the last PP rank whether
    // or not a drafter runs (vllm/model_executor/models/deepseek_v4.py @ 023da1fc), so it is part
    // of what model loading takes.
    mtp_hidden_ = at::empty({ctx_.engine->max_num_batched_tokens, d_.hc_width()}, on.dtype(at::kBFloat16));
    bytes += mtp_hidden_.numel() * 2;
    moe_ = make_moe_experts(moe_specs().front(), ctx_);
    moe_->precompile();
    return m.bytes() + bytes;
  }

  at::Tensor compute_logits(const at::Tensor& hidden) override {
    return at::linear(hidden, lm_head_).to(at::kFloat);
  }

  nlohmann::json report() const override {
    const deepseek_v4::DeepGemmSites s = deepseek_v4::deepgemm_sites(d_);
    nlohmann::json kinds = nlohmann::json::array();
    for (const auto& l : d_.layers) kinds.push_back(l.compress_ratio == 0 ? "swa" : (l.compress_ratio == 4 ? "c4" : "c128"));
    nlohmann::json linears = nlohmann::json::array();
    for (const auto& [n, k] : s.fp8_linears) linears.push_back({{"N", n}, {"K", k}});
    return {{"layer_kinds", kinds},
            {"experts_replayed_as", "fp8 128x128 blocks through m_grouped_fp8_gemm_nt_contiguous (checkpoint: " +
                                        d_.expert_dtype + ")"},
            {"deepgemm_sites",
             {{"fp8_gemm_nt", linears},
              {"fp8_einsum", {{"groups", s.einsum_groups}, {"N", s.einsum_n}, {"K", s.einsum_k}}},
              {"tf32_hc_prenorm_gemm", {{"N", s.hc_n}, {"K", s.hc_k}}},
              {"m_grouped_fp8_gemm_nt_contiguous",
               {{"experts", s.experts}, {"w13", {s.moe_w13.first, s.moe_w13.second}}, {"w2", {s.moe_w2.first, s.moe_w2.second}}}},
              {"indexer", {{"heads", s.index_heads}, {"head_dim", s.index_dim}, {"present", s.indexer}}}}}};
  }

  void piece(int i, ForwardState& st, const ForwardBatch& batch) override {
    const int L = static_cast<int>(d_.layers.size());
    if (i == 0) {
      const at::Tensor x = embed_.index({batch.input_ids});  // [T, H]
      st.residual = x.unsqueeze(1).expand({x.size(0), d_.hc_mult, d_.hidden}).contiguous();  // the hc streams
    } else {
      after_attention(w(i - 1), d_.layers[static_cast<size_t>(i - 1)], st, batch);
    }
    if (i == L) {
      // The drafter's input, stashed by a copy inside the last piece (vLLM: "captured copy_").
      const int64_t T = st.residual.size(0);
      mtp_hidden_.narrow(0, 0, T).copy_(st.residual.reshape({T, d_.hc_width()}));
      st.hidden = hc_head(st.residual, hc_head_fn_, hc_head_base_, final_norm_);
      return;
    }
    before_attention(w(i), d_.layers[static_cast<size_t>(i)], st);
  }

 private:
  class Mtp;

  const LayerWeights& w(int l) const { return layers_[static_cast<size_t>(l)]; }

  /// The mixer spec of decoder layer `layer` of kind `kind` (the target's layers and the MTP's).
  MixerSpec mixer_spec(int layer, const deepseek_v4::LayerKind& kind) const {
    MixerSpec s;
    s.kind = "mla_sparse";
    s.layer = layer;
    s.num_heads = d_.heads;
    s.num_kv_heads = 1;
    s.head_dim = d_.head_dim;
    s.output_width = d_.q_width();
    s.input_widths = {d_.q_width(), d_.kv_width()};
    if (kind.has_indexer()) {
      s.input_widths.push_back(d_.index_heads * d_.index_dim);  // indexer q
      s.input_widths.push_back(d_.index_heads);                 // indexer head weights
      s.input_widths.push_back(d_.index_dim);                   // indexer key
    }
    s.input_row_strides = s.input_widths;  // each a contiguous tensor of its own
    s.params = {{"compress_ratio", kind.compress_ratio}, {"window", d_.window},
                {"index_topk", d_.index_topk},            {"index_heads", d_.index_heads},
                {"index_head_dim", d_.index_dim},          {"bytes_per_token", deepseek_v4::kv_bytes_per_token(d_)}};
    return s;
  }

  /// A random FP8 weight [groups,] n x k (uint8 e4m3) and its [ceil(n/128), k/128] block scales;
  /// adds their bytes to `bytes`.
  void fp8_weight(int64_t n, int64_t k, at::Tensor& w, at::Tensor& s, int64_t& bytes, int64_t groups = 0) const {
    const at::TensorOptions on = at::TensorOptions().device(device_);
    std::vector<int64_t> shape = {n, k}, sshape = {(n + 127) / 128, k / 128};
    if (groups > 0) {
      shape.insert(shape.begin(), groups);
      sshape.insert(sshape.begin(), groups);
    }
    w = dg::random_fp8_weight(shape, on);
    // Block scales ~ 1/sqrt(K): unit-variance inputs give outputs of order one.
    s = device_.is_meta() ? at::empty(sshape, on.dtype(at::kFloat))
                          : at::full(sshape, 1.0 / std::sqrt(static_cast<double>(k)), on.dtype(at::kFloat));
    bytes += w.numel() + s.numel() * 4;
  }

  /// One decoder layer's weights (DeepseekV4DecoderLayer: hyper-connections, attention, MoE).
  LayerWeights layer_weights(WeightMaker& m, const deepseek_v4::LayerKind& kind, int64_t& bytes) const {
    const at::TensorOptions on = at::TensorOptions().device(device_);
    const int64_t H = d_.hidden, V = c_.vocab_size;
    LayerWeights w;
    for (auto* p : {&w.hc_attn_fn, &w.hc_ffn_fn}) *p = m.normal({d_.mix_hc(), d_.hc_width()}, 0.01).to(at::kFloat);
    for (auto* p : {&w.hc_attn_base, &w.hc_ffn_base}) *p = m.normal({d_.mix_hc()}, 0.1).to(at::kFloat);
    for (auto* p : {&w.hc_attn_scale, &w.hc_ffn_scale}) *p = m.ones(3).to(at::kFloat);
    w.attn_norm = m.ones(H);
    w.ffn_norm = m.ones(H);
    w.q_norm = m.ones(d_.q_lora);
    w.kv_norm = m.ones(d_.kv_width());
    fp8_weight(d_.q_lora + d_.kv_width(), H, w.wqkv_a, w.wqkv_a_s, bytes);
    fp8_weight(d_.q_width(), d_.q_lora, w.wq_b, w.wq_b_s, bytes);
    fp8_weight(d_.o_lora, d_.o_group_in(), w.wo_a, w.wo_a_s, bytes, d_.o_groups);
    fp8_weight(H, d_.o_groups * d_.o_lora, w.wo_b, w.wo_b_s, bytes);
    if (kind.has_indexer()) {
      fp8_weight(d_.index_heads * d_.index_dim, d_.q_lora, w.idx_wq_b, w.idx_wq_b_s, bytes);
      w.idx_weights_proj = m.normal({d_.index_heads, H}, 1.0 / std::sqrt(static_cast<double>(H)));
      w.idx_compressor = m.normal({d_.index_dim, H}, 1.0 / std::sqrt(static_cast<double>(H)));
    }
    w.gate = m.normal({d_.experts, H}, 1.0 / std::sqrt(static_cast<double>(H))).to(at::kFloat);
    w.gate_bias = m.normal({d_.experts}, 0.01).to(at::kFloat);
    if (kind.hash_routed) {
      w.tid2eid = device_.is_meta() ? at::empty({V, d_.top_k}, on.dtype(at::kLong))
                                    : at::randint(0, d_.experts, {V, d_.top_k}, on.dtype(at::kLong));
    }
    fp8_weight(2 * d_.moe_inter, H, w.w13, w.w13_s, bytes, d_.experts);
    fp8_weight(H, d_.moe_inter, w.w2, w.w2_s, bytes, d_.experts);
    if (d_.shared_experts > 0) {
      fp8_weight(2 * d_.moe_inter * d_.shared_experts, H, w.shared_up, w.shared_up_s, bytes);
      fp8_weight(H, d_.moe_inter * d_.shared_experts, w.shared_down, w.shared_down_s, bytes);
    }
    return w;
  }

  /// fp8_gemm_nt of an activation against an FP8 weight: [T, N] bf16.
  at::Tensor linear_fp8(const at::Tensor& x, const at::Tensor& wt, const at::Tensor& ws) {
    const dg::Fp8Activation a = dg::quantize_fp8(x.contiguous());
    at::Tensor out = at::empty({x.size(0), wt.size(0)}, x.options().dtype(at::kBFloat16));
    if (x.size(0) > 0) dg::fp8_gemm_nt(*ctx_.jit, target_, a.data, a.sf, wt, ws, out);
    return out;
  }

  /// TokenSpeed mhc_pre: the HC GEMM (x . fn^T and sum x^2 over split-K), RMS-scaled mixes,
  /// pre / post weights and the Sinkhorn-normalized comb; input = sum_i pre_i x_i.
  HcMix hc_pre(const at::Tensor& streams, const at::Tensor& fn, const at::Tensor& base, const at::Tensor& scale) {
    const int64_t T = streams.size(0), hc = d_.hc_mult, K = d_.hc_width(), N = d_.mix_hc();
    const at::Tensor flat = streams.reshape({T, K});
    const int splits = dg::hc_num_splits(T, K, target_.num_sms);
    at::Tensor mul = at::empty({splits, T, N}, flat.options().dtype(at::kFloat));
    at::Tensor sqr = at::empty({splits, T}, flat.options().dtype(at::kFloat));
    if (T > 0) dg::tf32_hc_prenorm_gemm(*ctx_.jit, target_, flat, fn, mul, sqr);
    // The same torch operations on the meta device (compile-only): no values, but every
    // temporary is allocated as on the GPU, so the phases' memory matches (meta_memory.h).
    HcMix m;
    const at::Tensor rms = at::rsqrt(sqr.sum(0) / static_cast<double>(K) + d_.eps).unsqueeze(1);
    const at::Tensor mix = mul.sum(0) * rms;  // [T, 24]
    const at::Tensor pre = at::sigmoid(mix.narrow(1, 0, hc) * scale[0] + base.narrow(0, 0, hc)) + d_.hc_eps;
    m.post = 2.0 * at::sigmoid(mix.narrow(1, hc, hc) * scale[1] + base.narrow(0, hc, hc));
    at::Tensor comb = (mix.narrow(1, 2 * hc, hc * hc) * scale[2] + base.narrow(0, 2 * hc, hc * hc)).view({T, hc, hc});
    comb = at::softmax(comb, -1) + d_.hc_eps;
    comb = comb / comb.sum(1, true);
    for (int64_t it = 1; it < d_.hc_sinkhorn_iters; ++it) {
      comb = comb / comb.sum(2, true);
      comb = comb / comb.sum(1, true);
    }
    m.comb = comb;
    m.input = (streams.to(at::kFloat) * pre.unsqueeze(2)).sum(1).to(at::kBFloat16);
    return m;
  }

  /// hc_post: stream j = post_j * y + sum_i comb[i][j] * stream_i.
  at::Tensor hc_post(const at::Tensor& streams, const at::Tensor& y, const at::Tensor& post, const at::Tensor& comb) const {
    const at::Tensor mixed = at::einsum("tij,tid->tjd", {comb, streams.to(at::kFloat)});
    return (mixed + post.unsqueeze(2) * y.to(at::kFloat).unsqueeze(1)).to(at::kBFloat16);
  }

  void before_attention(const LayerWeights& lw, const deepseek_v4::LayerKind& kind, ForwardState& st) {
    const HcMix m = hc_pre(st.residual, lw.hc_attn_fn, lw.hc_attn_base, lw.hc_attn_scale);
    const at::Tensor x = rms_norm(m.input, lw.attn_norm, d_.eps);
    const at::Tensor qkv_a = linear_fp8(x, lw.wqkv_a, lw.wqkv_a_s);  // [T, q_lora + 512]
    const at::Tensor q_a = rms_norm(qkv_a.narrow(1, 0, d_.q_lora).contiguous(), lw.q_norm, d_.eps);
    const at::Tensor kv = rms_norm(qkv_a.narrow(1, d_.q_lora, d_.kv_width()).contiguous(), lw.kv_norm, d_.eps);
    const at::Tensor q = linear_fp8(q_a, lw.wq_b, lw.wq_b_s);  // [T, heads * head_dim]
    st.mixer_in = {q, kv};
    if (kind.has_indexer()) {
      st.mixer_in.push_back(linear_fp8(q_a, lw.idx_wq_b, lw.idx_wq_b_s));        // indexer q
      st.mixer_in.push_back(at::linear(x, lw.idx_weights_proj).contiguous());     // head weights
      st.mixer_in.push_back(at::linear(x, lw.idx_compressor).contiguous());       // index key
    }
    st.carry = {m.post, m.comb};
  }

  void after_attention(const LayerWeights& lw, const deepseek_v4::LayerKind& kind, ForwardState& st,
                       const ForwardBatch& batch) {
    const int64_t T = st.residual.size(0);
    // wo_a: per output group, [T, 4096] x [1024, 4096]^T (fp8_einsum "bhr,hdr->bhd").
    const at::Tensor o = st.mixer_out.narrow(0, 0, T).view({T, d_.o_groups, d_.o_group_in()});
    const dg::Fp8Activation oq = dg::quantize_fp8_groups(o);
    at::Tensor z = at::empty({T, d_.o_groups, d_.o_lora}, o.options().dtype(at::kBFloat16));
    if (T > 0) dg::fp8_einsum_bhr_hdr_bhd(*ctx_.jit, target_, oq.data, oq.sf, lw.wo_a, lw.wo_a_s, z);
    const at::Tensor y = linear_fp8(z.view({T, d_.o_groups * d_.o_lora}), lw.wo_b, lw.wo_b_s);
    st.residual = hc_post(st.residual, y, st.carry.at(0), st.carry.at(1));
    const HcMix m = hc_pre(st.residual, lw.hc_ffn_fn, lw.hc_ffn_base, lw.hc_ffn_scale);
    const at::Tensor x = rms_norm(m.input, lw.ffn_norm, d_.eps);
    st.residual = hc_post(st.residual, moe(lw, kind, x, batch), m.post, m.comb);
  }

  /// Routed experts (the fp8_block128 MoE backend over the model's own routing) + shared expert.
  at::Tensor moe(const LayerWeights& lw, const deepseek_v4::LayerKind& kind, const at::Tensor& x,
                 const ForwardBatch& batch) {
    const int64_t T = x.size(0), K = d_.top_k;
    const at::TensorOptions opt = x.options();
    at::Tensor ids = at::empty({T, K}, opt.dtype(at::kLong)), topk_w = at::empty({T, K}, opt.dtype(at::kFloat));
    {
      const at::Tensor scores = at::sqrt(at::softplus(at::linear(x.to(at::kFloat), lw.gate)));  // [T, E]
      if (kind.hash_routed) {
        ids = lw.tid2eid.index({batch.input_ids.narrow(0, 0, T)});
      } else {
        ids = std::get<1>(at::topk(scores + lw.gate_bias, K, -1));
      }
      topk_w = scores.gather(1, ids);
      topk_w = topk_w / topk_w.sum(1, true) * d_.routed_scaling;
    }
    at::Tensor out = moe_->forward(x, topk_w, ids, {lw.w13, lw.w2, lw.w13_s, lw.w2_s});
    if (d_.shared_experts > 0) {
      const at::Tensor su = linear_fp8(x, lw.shared_up, lw.shared_up_s);
      const at::Tensor sd = linear_fp8(clamped_swiglu(su, d_.swiglu_limit), lw.shared_down, lw.shared_down_s);
      out += sd.to(at::kFloat);
    }
    return out.to(at::kBFloat16);
  }

  /// hc_head: sigmoid-weighted sum of the streams [T, hc, H] (weights from `fn` [hc, hc * H] and
  /// `base` [hc]), then the RMSNorm `norm`: [T, H] bf16.
  at::Tensor hc_head(const at::Tensor& streams, const at::Tensor& fn, const at::Tensor& base,
                     const at::Tensor& norm) const {
    const int64_t T = streams.size(0);
    const at::Tensor flat = streams.reshape({T, d_.hc_width()}).to(at::kFloat);
    const at::Tensor rms = at::rsqrt(flat.pow(2).mean(1, true) + d_.eps);
    const at::Tensor wts = at::sigmoid(at::linear(flat, fn) * rms + base) + d_.hc_eps;  // [T, hc]
    const at::Tensor x = (streams.to(at::kFloat) * wts.unsqueeze(2)).sum(1).to(at::kBFloat16);
    return rms_norm(x, norm, d_.eps);
  }

  ModelConfig c_;
  Dims d_;
  MixerContext ctx_;
  c10::Device device_;
  dg::GemmTarget target_;
  std::unique_ptr<MoeExperts> moe_;
  at::Tensor embed_, final_norm_, lm_head_, hc_head_fn_, hc_head_base_, mtp_hidden_;
  std::vector<LayerWeights> layers_;
};

// DeepSeekV4MTP, the draft model of speculative method "mtp" (vllm/model_executor/models/
// deepseek_v4_mtp.py @ 023da1fc): the token's embedding, zeroed at position 0 and RMS-normed
// (enorm), through e_proj; the target's pre-hc_head streams [T, hc, H] (Model::mtp_target_hidden),
// RMS-normed per stream (hnorm), through h_proj (a [T * hc, H] FP8 GEMM); their sum (e_proj's
// output broadcast over the streams) enters one DeepseekV4DecoderLayer. Its forward returns the
// flat pre-hc_head streams, which the next drafter pass reads as its own target hidden states;
// compute_logits applies the layer's own hc_head, the shared head's norm and the LM head.
// e_proj / h_proj are FP8 ReplicatedLinear layers (fp8_gemm_nt, N = K = hidden). The layer's
// attention: vLLM's DeepseekV4Attention gives a layer past num_hidden_layers compress_ratio 1
// (the sliding window only, no indexer), and its MoE routes by score (the MTP block gets no
// input_ids, so no hash table). EagleProposer.load_model shares the embedding and LM head with
// the target; its attention layer joins the target's KV cache config as layer num_hidden_layers.
// num_nextn_predict_layers is 1 in V4-Flash's config; the replay builds one layer.
class DeepseekV4Model::Mtp final : public Model {
 public:
  explicit Mtp(DeepseekV4Model& target) : t_(target) {}

  std::string name() const override { return "deepseek-v4 MTP"; }
  std::vector<MixerSpec> layer_plan() const override {
    return {t_.mixer_spec(static_cast<int>(t_.d_.layers.size()), kind_)};
  }
  std::vector<MoeSpec> moe_specs() const override { return t_.moe_specs(); }

  int64_t load_weights(uint64_t seed) override {
    WeightMaker m(t_.device_);
    if (!t_.device_.is_meta()) at::manual_seed(seed);
    const int64_t H = t_.d_.hidden, hc = t_.d_.hc_mult;
    int64_t bytes = 0;
    enorm_ = m.ones(H);
    hnorm_ = m.ones(H);
    t_.fp8_weight(H, H, e_proj_, e_proj_s_, bytes);
    t_.fp8_weight(H, H, h_proj_, h_proj_s_, bytes);
    layer_ = t_.layer_weights(m, kind_, bytes);
    hc_head_fn_ = m.normal({hc, t_.d_.hc_width()}, 0.01).to(at::kFloat);
    hc_head_base_ = m.normal({hc}, 0.1).to(at::kFloat);
    norm_ = m.ones(H);
    return m.bytes() + bytes;
  }

  at::Tensor compute_logits(const at::Tensor& hidden) override {
    const int64_t rows = hidden.size(0);
    const at::Tensor streams = hidden.reshape({rows, t_.d_.hc_mult, t_.d_.hidden});
    return t_.compute_logits(t_.hc_head(streams, hc_head_fn_, hc_head_base_, norm_));
  }

  void piece(int i, ForwardState& st, const ForwardBatch& batch) override {
    const Dims& d = t_.d_;
    if (i == 0) {
      const int64_t T = batch.input_ids.size(0);
      at::Tensor e = t_.embed_.index({batch.input_ids});  // [T, H]
      e = e.masked_fill(batch.positions.narrow(0, 0, T).eq(0).unsqueeze(1), 0);
      e = t_.linear_fp8(rms_norm(e, enorm_, d.eps), e_proj_, e_proj_s_);
      const at::Tensor prev = st.target_hidden.narrow(0, 0, T).reshape({T * d.hc_mult, d.hidden});
      const at::Tensor h = t_.linear_fp8(rms_norm(prev, hnorm_, d.eps), h_proj_, h_proj_s_);
      st.residual = (h.view({T, d.hc_mult, d.hidden}) + e.unsqueeze(1)).contiguous();
      t_.before_attention(layer_, kind_, st);
      return;
    }
    t_.after_attention(layer_, kind_, st, batch);
    st.hidden = st.residual.reshape({st.residual.size(0), d.hc_width()});
  }

 private:
  DeepseekV4Model& t_;
  deepseek_v4::LayerKind kind_{0, false};  // sliding window only, routed by score
  LayerWeights layer_;
  at::Tensor enorm_, hnorm_, e_proj_, e_proj_s_, h_proj_, h_proj_s_, hc_head_fn_, hc_head_base_, norm_;
};

std::unique_ptr<Model> DeepseekV4Model::make_mtp_drafter() { return std::make_unique<Mtp>(*this); }

ModelFamilyInfo deepseek_v4_family() {
  ModelFamilyInfo f;
  f.name = "deepseek-v4";
  f.architectures = {"DeepseekV4ForCausalLM"};
  f.description = "DeepSeek V4 (V4-Flash): hyper-connections, sparse-indexed latent attention (SWA / C4 / C128 "
                  "layers), FP8 linears and experts through DeepGEMM-style kernels";
  f.make = [](const ModelConfig& c, const MixerContext& ctx) -> std::unique_ptr<Model> {
    return std::make_unique<DeepseekV4Model>(c, ctx);
  };
  f.check = [](const ModelConfig& c, const EngineConfig& e) { return deepseek_v4::dims(c, &e).problems; };
  return f;
}

}  // namespace

CS_REGISTER_MODEL_FAMILY(deepseek_v4_family());

}  // namespace coldstart
