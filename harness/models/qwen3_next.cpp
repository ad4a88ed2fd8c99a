// Qwen3-Next (Qwen3NextForCausalLM): a hybrid of gated-delta-net (GDN) linear attention and gated
// full attention, every layer followed by a sparse MoE with a shared expert. Followed:
// vllm/model_executor/models/qwen3_next.py and vllm/model_executor/layers/mamba/gdn/
// qwen_gdn_linear_attn.py (vllm-project/vllm 00545a8a):
// - layer l is full attention when (l + 1) % full_attention_interval == 0, else GDN;
// - GDN: in_proj_qkvz [H -> 2*Hk*K + 2*Hv*V] and in_proj_ba [H -> 2*Hv], unpacked into contiguous
//   mixed_qkv [N, conv_dim], z [N, Hv, V], b and a [N, Hv]; the GDN core (conv1d, recurrence) is
//   the mixer; after it the gated RMSNorm (RMSNormGated, norm before an SiLU gate by z: a
//   runtime-compiled kernel, mamba_ops::gated_rms_norm, over N * Hv rows of V) and out_proj.
//   The checkpoint's interleaved GQA layout of in_proj_qkvz only decides which weight rows feed
//   which head; with random weights the harness splits the projection plainly;
// - gated attention: q_proj yields q and a per-head output gate ([N, Hq, 2D] split in halves), q /
//   k RMSNorm of the (1 + w) kind (GemmaRMSNorm), neox RoPE on the first
//   partial_rotary_factor * D dims, attention through the backend, output * sigmoid(gate), o_proj;
// - sparse MoE: router linear [E, H] -> softmax top-k (renormalized when norm_topk_prob) -> the
//   fused-MoE kernels with vLLM's tuned table for E and N = moe_intermediate_size; plus a shared
//   expert (SiLU MLP of shared_expert_intermediate_size) scaled by sigmoid(shared_expert_gate(x)).
// Projections, norms and the shared expert are libtorch operations (an engine's ahead-of-time
// kernels); the gated RMSNorm and the expert GEMMs are runtime-compiled as vLLM's Triton kernels
// are, so they compile where vLLM's would: in the profile run, the capture's eager warmups, or
// on the hot path.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <map>

#include "harness/kernels/mamba_ops/mamba_ops.h"
#include "harness/models/layers_common.h"
#include "harness/models/model.h"

namespace coldstart {
namespace {

/// The dimensions Qwen3-Next adds to a dense config.
struct NextDims {
  int interval = 4;          // full_attention_interval
  int64_t hk = 16, hv = 32;  // GDN key / value heads
  int64_t dk = 128, dv = 128;
  int64_t conv_kernel = 4;
  int64_t experts = 512, top_k = 10, moe_inter = 512, shared_inter = 512;
  bool norm_topk = true;
  double partial_rotary = 0.25;
  std::vector<ScenarioProblem> problems;  ///< config values of the wrong type

  int64_t conv_dim() const { return 2 * hk * dk + hv * dv; }
};


NextDims next_dims(const ModelConfig& c) {
  NextDims d;
  const ConfigView r{c, &d.problems};
  d.interval = static_cast<int>(config_int(r, "full_attention_interval", d.interval));
  d.hk = config_int(r, "linear_num_key_heads", d.hk, 1);
  d.hv = config_int(r, "linear_num_value_heads", d.hv, 1);
  d.dk = config_int(r, "linear_key_head_dim", d.dk, 1);
  d.dv = config_int(r, "linear_value_head_dim", d.dv, 1);
  d.conv_kernel = config_int(r, "linear_conv_kernel_dim", d.conv_kernel, 1);
  d.experts = config_int(r, "num_experts", d.experts);
  d.top_k = config_int(r, "num_experts_per_tok", d.top_k);
  d.moe_inter = config_int(r, "moe_intermediate_size", d.moe_inter, 1);
  d.shared_inter = config_int(r, "shared_expert_intermediate_size", d.shared_inter, 0);
  d.norm_topk = config_bool(r, "norm_topk_prob", d.norm_topk);
  d.partial_rotary = config_double(r, "partial_rotary_factor", d.partial_rotary);
  return d;
}

bool is_attention_layer(const NextDims& d, int layer) { return (layer + 1) % d.interval == 0; }

struct Qwen3NextLayerWeights {
  at::Tensor input_norm, post_norm;
  // GDN
  at::Tensor in_qkvz, in_ba, gate_norm, out_proj;
  // attention
  at::Tensor qkv, q_norm, k_norm, o_proj;
  // MoE
  at::Tensor router, w13, w2, shared_gate_up, shared_down, shared_gate;
};

class Qwen3NextModel final : public Model {
 public:
  Qwen3NextModel(const ModelConfig& c, const MixerContext& ctx)
      : c_(c), d_(next_dims(c)), ctx_(ctx), device_(ctx.device) {}

  std::string name() const override { return c_.architecture; }

  // Qwen3NextSparseMoeBlock's routed experts: bf16, topk_softmax over the router logits, gated
  // SiLU.
  std::vector<MoeSpec> moe_specs() const override {
    MoeSpec s;
    s.num_experts = d_.experts;
    s.intermediate = d_.moe_inter;
    s.hidden = c_.hidden_size;
    s.top_k = static_cast<int>(d_.top_k);
    s.renormalize = d_.norm_topk;
    s.routing = MoeRouting::kSoftmaxTopk;
    s.activation = MoeActivation::kSiluGated;
    return {s};
  }

  std::vector<MixerSpec> layer_plan() const override {
    std::vector<MixerSpec> plan;
    for (int l = 0; l < c_.num_hidden_layers; ++l) {
      MixerSpec s;
      s.layer = l;
      if (is_attention_layer(d_, l)) {
        s = attention_spec(l);
      } else {
        // mixed_qkv [N, conv_dim], b [N, Hv], a [N, Hv], all contiguous (vLLM unpacks the
        // interleaved projection into fresh tensors); output core_attn_out [N, Hv*V].
        s.kind = "gdn";
        s.num_heads = d_.hv;
        s.num_kv_heads = d_.hk;
        s.head_dim = d_.dv;
        s.output_width = d_.hv * d_.dv;
        s.input_widths = {d_.conv_dim(), d_.hv, d_.hv};
        s.input_row_strides = {d_.conv_dim(), d_.hv, d_.hv};
        s.params = {{"head_k_dim", d_.dk}, {"conv_kernel", d_.conv_kernel},
                    {"rms_norm_eps", c_.rms_norm_eps}};
      }
      plan.push_back(std::move(s));
    }
    return plan;
  }

  int64_t load_weights(uint64_t seed) override {
    WeightMaker m(device_);
    if (!device_.is_meta()) at::manual_seed(seed);
    const int64_t H = c_.hidden_size, V = c_.vocab_size;
    const double sh = 1.0 / std::sqrt(static_cast<double>(H));
    embed_ = m.normal({V, H}, 1.0);
    layers_.clear();
    for (int l = 0; l < c_.num_hidden_layers; ++l)
      layers_.push_back(layer_weights(m, is_attention_layer(d_, l)));
    final_norm_ = m.zeros(H);
    lm_head_ = c_.tie_word_embeddings ? embed_ : m.normal({V, H}, sh);
    // RoPE over the rotary part of each head.
    rope_ = rope_table(c_.max_position_embeddings, rotary_dim(), c_.rope_theta, device_);
    // The experts' ahead-of-time ops compile here, while the weights load, never on the hot path.
    moe_ = make_moe_experts(moe_specs().front(), ctx_);
    moe_->precompile();
    return m.bytes();
  }

  at::Tensor compute_logits(const at::Tensor& hidden) override {
    return at::linear(hidden, lm_head_).to(at::kFloat);
  }

  nlohmann::json report() const override { return moe_ ? moe_->report() : nlohmann::json(); }

  void piece(int i, ForwardState& st, const ForwardBatch& batch) override {
    const int L = c_.num_hidden_layers;
    if (i == 0) {
      st.hidden = embed_.index({batch.input_ids});
    } else {
      const Qwen3NextLayerWeights& w = layers_[i - 1];
      at::Tensor mixed;
      if (is_attention_layer(d_, i - 1)) {
        mixed = attention_output(w, st);
      } else {
        // RMSNormGated over every head's V values, gated by SiLU(z), then out_proj.
        const at::Tensor z = st.carry.at(0);
        const int64_t N = st.mixer_out.size(0);
        at::Tensor normed = at::empty({N * d_.hv, d_.dv}, st.mixer_out.options());
        mamba_ops::gated_rms_norm(*ctx_.jit, st.mixer_out.reshape({N * d_.hv, d_.dv}),
                                  z.reshape({N * d_.hv, d_.dv}), w.gate_norm, c_.rms_norm_eps,
                                  /*norm_before_gate=*/true, mamba_ops::Activation::kSilu,
                                  /*group_size=*/d_.dv, sm_count(), normed);
        mixed = at::linear(normed.view({N, d_.hv * d_.dv}), w.out_proj);
      }
      st.residual = mixed + st.residual;
      st.hidden = moe(w, gemma_rms_norm(st.residual, w.post_norm, c_.rms_norm_eps), batch);
    }
    st.carry.clear();
    if (i == L) {
      st.residual = st.hidden + st.residual;
      st.hidden = gemma_rms_norm(st.residual, final_norm_, c_.rms_norm_eps);
      return;
    }
    const Qwen3NextLayerWeights& w = layers_[i];
    st.residual = (i == 0) ? st.hidden : st.hidden + st.residual;
    const at::Tensor h = gemma_rms_norm(st.residual, w.input_norm, c_.rms_norm_eps);
    if (is_attention_layer(d_, i)) {
      attention_inputs(w, h, st, batch);
    } else {
      gdn_inputs(w, h, st);
    }
  }

 private:
  class Mtp;

  /// Gated full attention at decoder layer `layer`: q [N, Hq*D] and k [N, Hk*D] contiguous after
  /// norm + RoPE; v a column slice of the fused projection [N, (2*Hq + 2*Hk) * D] (q and its
  /// gate, k, v).
  MixerSpec attention_spec(int layer) const {
    const int64_t D = c_.head_dim, Hq = c_.num_attention_heads, Hk = c_.num_key_value_heads;
    return MixerSpec::attention(layer, Hq, Hk, D, {Hq * D, Hk * D, (2 * Hq + 2 * Hk) * D});
  }

  /// One decoder layer's weights: gated attention or GDN, then the sparse MoE.
  Qwen3NextLayerWeights layer_weights(WeightMaker& m, bool attention) const {
    const int64_t H = c_.hidden_size, D = c_.head_dim, Hq = c_.num_attention_heads,
                  Hk = c_.num_key_value_heads;
    const double sh = 1.0 / std::sqrt(static_cast<double>(H));
    auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
    Qwen3NextLayerWeights w;
    w.input_norm = m.zeros(H);  // (1 + w) norms: w = 0 is the identity scale
    w.post_norm = m.zeros(H);
    if (attention) {
      w.qkv = m.normal({(2 * Hq + 2 * Hk) * D, H}, sh);
      w.q_norm = m.zeros(D);
      w.k_norm = m.zeros(D);
      w.o_proj = m.normal({H, Hq * D}, inv_sqrt(Hq * D));
    } else {
      w.in_qkvz = m.normal({d_.conv_dim() + d_.hv * d_.dv, H}, sh);
      w.in_ba = m.normal({2 * d_.hv, H}, sh);
      w.gate_norm = m.ones(d_.dv);  // RMSNormGated's weight (plain scale)
      w.out_proj = m.normal({H, d_.hv * d_.dv}, inv_sqrt(d_.hv * d_.dv));
    }
    w.router = m.normal({d_.experts, H}, sh);
    w.w13 = m.normal({d_.experts, 2 * d_.moe_inter, H}, sh);
    w.w2 = m.normal({d_.experts, H, d_.moe_inter}, inv_sqrt(d_.moe_inter));
    w.shared_gate_up = m.normal({2 * d_.shared_inter, H}, sh);
    w.shared_down = m.normal({H, d_.shared_inter}, inv_sqrt(d_.shared_inter));
    w.shared_gate = m.normal({1, H}, sh);
    return w;
  }

  /// Gated attention after the backend: the output gate (made before the mixer), then o_proj.
  static at::Tensor attention_output(const Qwen3NextLayerWeights& w, const ForwardState& st) {
    const at::Tensor gate = st.carry.at(0);
    return at::linear(st.mixer_out * at::sigmoid(gate), w.o_proj);
  }

  int64_t rotary_dim() const {
    return static_cast<int64_t>(std::llround(c_.head_dim * d_.partial_rotary));
  }
  int sm_count() const { return ctx_.target ? ctx_.target->sm_count : 132; }

  void gdn_inputs(const Qwen3NextLayerWeights& w, const at::Tensor& h, ForwardState& st) const {
    const int64_t N = h.size(0), cd = d_.conv_dim();
    const at::Tensor qkvz = at::linear(h, w.in_qkvz);  // [N, conv_dim + Hv*V]
    const at::Tensor ba = at::linear(h, w.in_ba);      // [N, 2*Hv]
    // vLLM copies every part out of the interleaved projection into its own tensor
    // (QwenGatedDeltaNetAttention.forward_cuda, qwen_gdn_linear_attn.py at 00545a8a: torch.cat
    // of q / k / v, reshapes of the split z / b / a). A fresh tensor has the standard strides at
    // any N: mixed_qkv's row stride is conv_dim even for one token. (`.contiguous()` would keep
    // a one-row slice as it is, with the projection's row stride, and the conv1d kernels' compile
    // keys hold that stride: a 1-token eager step would differ from the same step padded.)
    auto fresh = [](const at::Tensor& t) { return t.clone(at::MemoryFormat::Contiguous); };
    const at::Tensor mixed_qkv = fresh(qkvz.narrow(1, 0, cd));
    const at::Tensor z = fresh(qkvz.narrow(1, cd, d_.hv * d_.dv)).view({N, d_.hv, d_.dv});
    const at::Tensor b = fresh(ba.narrow(1, 0, d_.hv));
    const at::Tensor a = fresh(ba.narrow(1, d_.hv, d_.hv));
    st.mixer_in = {mixed_qkv, b, a};
    st.carry = {z};
  }

  void attention_inputs(const Qwen3NextLayerWeights& w, const at::Tensor& h, ForwardState& st,
                        const ForwardBatch& batch) const {
    const int64_t N = h.size(0), D = c_.head_dim, Hq = c_.num_attention_heads,
                  Hk = c_.num_key_value_heads;
    const at::Tensor qkv = at::linear(h, w.qkv);  // [N, (2*Hq + 2*Hk) * D]
    const at::Tensor q_gate = qkv.narrow(1, 0, 2 * Hq * D).view({N, Hq, 2 * D});
    at::Tensor q = q_gate.narrow(2, 0, D);
    const at::Tensor gate = q_gate.narrow(2, D, D).reshape({N, Hq * D});
    at::Tensor k = qkv.narrow(1, 2 * Hq * D, Hk * D).view({N, Hk, D});
    const at::Tensor v = qkv.narrow(1, (2 * Hq + Hk) * D, Hk * D);
    q = gemma_rms_norm(q, w.q_norm, c_.rms_norm_eps);
    k = gemma_rms_norm(k, w.k_norm, c_.rms_norm_eps);
    const at::Tensor cs = rope_.index({batch.positions}).unsqueeze(1);  // [N, 1, rot]
    st.mixer_in = {neox_rope(q, cs).reshape({N, Hq * D}), neox_rope(k, cs).reshape({N, Hk * D}), v};
    st.carry = {gate};
  }

  // Qwen3NextSparseMoeBlock: the routed experts (the bf16 MoE backend) plus the gated shared
  // expert.
  at::Tensor moe(const Qwen3NextLayerWeights& w, const at::Tensor& h, const ForwardBatch& batch) {
    (void)batch;
    const int64_t M = h.size(0);
    const at::Tensor logits = at::linear(h, w.router);  // [M, E] bf16
    const auto f32 = h.options().dtype(at::kFloat);
    at::Tensor topk_w = at::empty({M, d_.top_k}, f32);
    at::Tensor topk_ids = at::empty({M, d_.top_k}, h.options().dtype(at::kInt));
    moe_->route(logits, at::Tensor(), topk_w, topk_ids);
    const at::Tensor routed = moe_->forward(h, topk_w, topk_ids, {w.w13, w.w2, {}, {}});
    const at::Tensor gu = at::linear(h, w.shared_gate_up);
    const int64_t I = d_.shared_inter;
    const at::Tensor shared =
        at::linear(at::silu(gu.narrow(-1, 0, I)) * gu.narrow(-1, I, I), w.shared_down);
    return routed + at::sigmoid(at::linear(h, w.shared_gate)) * shared;
  }

  /// The model's MTP head (below): only with num_speculative_tokens > 0 and the mtp method.
 public:
  std::unique_ptr<Model> make_mtp_drafter() override;

 private:
  ModelConfig c_;
  NextDims d_;
  MixerContext ctx_;
  c10::Device device_;
  std::unique_ptr<MoeExperts> moe_;
  at::Tensor embed_, final_norm_, lm_head_, rope_;
  std::vector<Qwen3NextLayerWeights> layers_;
};

// Qwen3NextMultiTokenPredictor, the MTP head vLLM runs as the draft model of method "mtp"
// (vllm/model_executor/models/qwen3_next_mtp.py @ ffdc9857): the token's embedding and the
// target's final-normed hidden state, each RMS-normed (pre_fc_norm_embedding, pre_fc_norm_hidden),
// concatenated in that order and projected by fc [2H -> H]; then one Qwen3NextDecoderLayer of
// the full-attention kind (gated attention and the sparse MoE, the residual starting at fc's
// output); then the final RMSNorm. num_nextn_predict_layers defaults to 1 there, which the
// Qwen3-Next config does not set; the replay builds one layer. EagleProposer.load_model shares
// the target's embedding and LM head with it. Its attention layer joins the target's KV cache
// config (one more attention layer, the same group); the harness numbers it num_hidden_layers.
class Qwen3NextModel::Mtp final : public Model {
 public:
  explicit Mtp(Qwen3NextModel& target) : t_(target) {}

  std::string name() const override { return t_.c_.architecture + " MTP"; }
  std::vector<MixerSpec> layer_plan() const override {
    return {t_.attention_spec(t_.c_.num_hidden_layers)};
  }
  std::vector<MoeSpec> moe_specs() const override { return t_.moe_specs(); }

  int64_t load_weights(uint64_t seed) override {
    WeightMaker m(t_.device_);
    if (!t_.device_.is_meta()) at::manual_seed(seed);
    const int64_t H = t_.c_.hidden_size;
    pre_fc_norm_embedding_ = m.zeros(H);
    pre_fc_norm_hidden_ = m.zeros(H);
    fc_ = m.normal({H, 2 * H}, 1.0 / std::sqrt(static_cast<double>(2 * H)));
    layer_ = t_.layer_weights(m, /*attention=*/true);
    norm_ = m.zeros(H);
    return m.bytes();
  }

  at::Tensor compute_logits(const at::Tensor& hidden) override { return t_.compute_logits(hidden); }

  void piece(int i, ForwardState& st, const ForwardBatch& batch) override {
    const double eps = t_.c_.rms_norm_eps;
    if (i == 0) {
      const at::Tensor e = gemma_rms_norm(t_.embed_.index({batch.input_ids}), pre_fc_norm_embedding_, eps);
      const at::Tensor h = gemma_rms_norm(st.target_hidden, pre_fc_norm_hidden_, eps);
      st.residual = at::linear(at::cat({e, h}, -1), fc_);
      t_.attention_inputs(layer_, gemma_rms_norm(st.residual, layer_.input_norm, eps), st, batch);
      return;
    }
    st.residual = attention_output(layer_, st) + st.residual;
    st.carry.clear();
    st.hidden = t_.moe(layer_, gemma_rms_norm(st.residual, layer_.post_norm, eps), batch);
    st.residual = st.hidden + st.residual;
    st.hidden = gemma_rms_norm(st.residual, norm_, eps);
  }

 private:
  Qwen3NextModel& t_;
  Qwen3NextLayerWeights layer_;
  at::Tensor pre_fc_norm_embedding_, pre_fc_norm_hidden_, fc_, norm_;
};

std::unique_ptr<Model> Qwen3NextModel::make_mtp_drafter() { return std::make_unique<Mtp>(*this); }

std::vector<ScenarioProblem> check_next(const ModelConfig& c, const EngineConfig& e) {
  NextDims d = next_dims(c);
  std::vector<ScenarioProblem> out = std::move(d.problems);
  if (d.interval <= 0) {
    out.push_back({"model.full_attention_interval",
                   fmt::format("must be positive, got {}", d.interval)});
  }
  // Which layers hold the sparse MoE: Qwen3NextDecoderLayer.__init__ in vLLM's
  // vllm/model_executor/models/qwen3_next.py builds Qwen3NextSparseMoeBlock for a layer not in
  // mlp_only_layers when num_experts > 0 and (layer_idx + 1) % decoder_sparse_step == 0 (else a
  // dense Qwen3NextMLP), so a step of 0 raises ZeroDivisionError there. The replay puts the MoE
  // in every layer: step 1 and no mlp_only_layers only.
  const ConfigView r{c, &out};
  const int64_t step = config_int(r, "decoder_sparse_step", 1);
  if (step != 1) {
    out.push_back({"model.decoder_sparse_step",
                   fmt::format("{}: {}the replay puts the sparse MoE in every layer "
                               "(decoder_sparse_step 1)",
                               step, step <= 0 ? "vLLM divides the layer index by it; " : "")});
  }
  const auto only = c.raw.find("mlp_only_layers");
  if (only != c.raw.end() && !only->is_null() && !(only->is_array() && only->empty())) {
    out.push_back({"model.mlp_only_layers",
                   "must be empty: the replay puts the sparse MoE in every layer"});
  }
  if (d.hk <= 0 || d.hv % std::max<int64_t>(d.hk, 1) != 0) {
    out.push_back({"model.linear_num_value_heads",
                   fmt::format("{} value heads is not a multiple of {} key heads", d.hv, d.hk)});
  }
  if (d.experts < 1 || d.top_k < 1 || d.top_k > d.experts) {
    out.push_back({"model.num_experts_per_tok",
                   fmt::format("top-{} of {} experts: the top-k must be in 1..num_experts",
                               d.top_k, d.experts)});
  }
  const int64_t rot = static_cast<int64_t>(std::llround(c.head_dim * d.partial_rotary));
  if (rot <= 0 || rot % 2 != 0 || rot > c.head_dim) {
    out.push_back({"model.partial_rotary_factor",
                   fmt::format("gives a rotary width of {} of head_dim {}", rot, c.head_dim)});
  }
  if (e.tensor_parallel_size != 1) {
    out.push_back({"engine.tensor_parallel_size",
                   fmt::format("{} ranks: qwen3-next is replayed at tensor_parallel_size 1 only",
                               e.tensor_parallel_size)});
  }
  return out;
}

ModelFamilyInfo qwen3_next_family() {
  ModelFamilyInfo f;
  f.name = "qwen3-next";
  f.architectures = {"Qwen3NextForCausalLM"};
  f.description = "Qwen3-Next hybrid: gated-delta-net + gated attention every "
                  "full_attention_interval layers, sparse MoE with a shared expert";
  f.make = [](const ModelConfig& c, const MixerContext& ctx) -> std::unique_ptr<Model> {
    return std::make_unique<Qwen3NextModel>(c, ctx);
  };
  f.check = check_next;
  return f;
}

}  // namespace

CS_REGISTER_MODEL_FAMILY(qwen3_next_family());

}  // namespace coldstart
