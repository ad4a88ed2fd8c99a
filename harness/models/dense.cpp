// Dense decoder (Qwen3 / Llama family): RMSNorm, fused QKV projection, per-head q/k RMSNorm
// (Qwen3), neox-style RoPE, attention through the backend, SiLU-gated MLP. All libtorch
// operations (cuBLAS GEMMs etc.): an engine's ahead-of-time kernels, never JIT compiles.
// Under tensor_parallel_size the model is one rank's: query heads, KV heads (split, or replicated
// when fewer than ranks) and the MLP width as vLLM's QKVParallelLinear / MergedColumnParallelLinear
// shard them; embedding and LM head stay whole (vLLM splits them by vocabulary and gathers).
#include <ATen/ATen.h>

#include <cmath>

#include "harness/models/layers_common.h"
#include "harness/models/model.h"

namespace coldstart {
namespace {

struct DenseLayerWeights {
  at::Tensor input_norm, qkv, q_norm, k_norm, o_proj, post_norm, gate_up, down;
};

class DenseModel final : public Model {
 public:
  DenseModel(const ModelConfig& c, const MixerContext& ctx) : c_(c), ctx_(ctx), device_(ctx.device) {
    has_qk_norm_ = c.model_type == "qwen3";
    const int tp = ctx.engine ? ctx.engine->tensor_parallel_size : 1;
    std::vector<ScenarioProblem> ignored;  // the family's check reports them
    const AttentionShard a = shard_attention(c.num_attention_heads, c.num_key_value_heads, tp, ignored);
    c_.num_attention_heads = static_cast<int>(a.q_heads);
    c_.num_key_value_heads = static_cast<int>(a.kv_heads);
    c_.intermediate_size = static_cast<int>(c.intermediate_size / tp);
  }

  std::string name() const override { return c_.architecture; }

  std::vector<MixerSpec> layer_plan() const override {
    // Every layer: attention over q [N, Hq*D] and k [N, Hk*D] (contiguous after RoPE) and v, a
    // column slice of the fused QKV projection [N, (Hq + 2 Hk) * D].
    const int64_t D = c_.head_dim, Hq = c_.num_attention_heads, Hk = c_.num_key_value_heads;
    std::vector<MixerSpec> plan;
    for (int l = 0; l < c_.num_hidden_layers; ++l)
      plan.push_back(MixerSpec::attention(l, Hq, Hk, D, {Hq * D, Hk * D, (Hq + 2 * Hk) * D}));
    return plan;
  }

  int64_t load_weights(uint64_t seed) override {
    WeightMaker w(device_);
    if (!device_.is_meta()) at::manual_seed(seed);
    const int64_t H = c_.hidden_size, D = c_.head_dim, Hq = c_.num_attention_heads,
                  Hk = c_.num_key_value_heads, I = c_.intermediate_size, V = c_.vocab_size;
    embed_ = w.normal({V, H}, 1.0);
    layers_.clear();
    for (int l = 0; l < c_.num_hidden_layers; ++l) {
      DenseLayerWeights lw;
      lw.input_norm = w.ones(H);
      lw.qkv = w.normal({(Hq + 2 * Hk) * D, H}, 1.0 / std::sqrt(double(H)));
      if (has_qk_norm_) {
        lw.q_norm = w.ones(D);
        lw.k_norm = w.ones(D);
      }
      lw.o_proj = w.normal({H, Hq * D}, 1.0 / std::sqrt(double(Hq * D)));
      lw.post_norm = w.ones(H);
      lw.gate_up = w.normal({2 * I, H}, 1.0 / std::sqrt(double(H)));
      lw.down = w.normal({H, I}, 1.0 / std::sqrt(double(I)));
      layers_.push_back(std::move(lw));
    }
    final_norm_ = w.ones(H);
    lm_head_ = c_.tie_word_embeddings ? embed_ : w.normal({V, H}, 1.0 / std::sqrt(double(H)));
    // RoPE table [max_positions, D]: cos in the first half, sin in the second (float32).
    rope_ = rope_table(c_.max_position_embeddings, D, c_.rope_theta, device_);
    return w.bytes();
  }

  at::Tensor compute_logits(const at::Tensor& hidden) override {
    return at::linear(hidden, lm_head_).to(at::kFloat);
  }

  void piece(int i, ForwardState& st, const ForwardBatch& batch) override {
    const int L = c_.num_hidden_layers;
    if (i == 0) {
      st.hidden = embed_.index({batch.input_ids});
    } else {
      // Rest of layer i-1: output projection, residual, MLP.
      const DenseLayerWeights& w = layers_[i - 1];
      at::Tensor attn = at::linear(st.mixer_out, w.o_proj);
      tp_all_reduce(ctx_, attn, i - 1, "o_proj");  // RowParallelLinear's reduce_results
      st.residual = attn + st.residual;
      at::Tensor h = rms_norm(st.residual, w.post_norm, c_.rms_norm_eps);
      at::Tensor gu = at::linear(h, w.gate_up);
      const int64_t I = c_.intermediate_size;
      at::Tensor act = at::silu(gu.narrow(-1, 0, I)) * gu.narrow(-1, I, I);
      st.hidden = at::linear(act, w.down);
      tp_all_reduce(ctx_, st.hidden, i - 1, "down_proj");
    }
    if (i == L) {
      st.residual = st.hidden + st.residual;
      st.hidden = rms_norm(st.residual, final_norm_, c_.rms_norm_eps);
      return;
    }
    // Layer i up to attention.
    const DenseLayerWeights& w = layers_[i];
    st.residual = (i == 0) ? st.hidden : st.hidden + st.residual;
    at::Tensor h = rms_norm(st.residual, w.input_norm, c_.rms_norm_eps);
    at::Tensor qkv = at::linear(h, w.qkv);
    const int64_t N = qkv.size(0), D = c_.head_dim, Hq = c_.num_attention_heads,
                  Hk = c_.num_key_value_heads;
    at::Tensor q = qkv.narrow(-1, 0, Hq * D).view({N, Hq, D});
    at::Tensor k = qkv.narrow(-1, Hq * D, Hk * D).view({N, Hk, D});
    at::Tensor v = qkv.narrow(-1, (Hq + Hk) * D, Hk * D);
    if (has_qk_norm_) {
      q = rms_norm(q, w.q_norm, c_.rms_norm_eps);
      k = rms_norm(k, w.k_norm, c_.rms_norm_eps);
    }
    at::Tensor cs = rope_.index({batch.positions}).unsqueeze(1);  // [N, 1, D]
    st.mixer_in = {neox_rope(q, cs).reshape({N, Hq * D}), neox_rope(k, cs).reshape({N, Hk * D}), v};
  }

 private:
  ModelConfig c_;
  MixerContext ctx_;
  c10::Device device_;
  bool has_qk_norm_ = false;
  at::Tensor embed_, final_norm_, lm_head_, rope_;
  std::vector<DenseLayerWeights> layers_;
};

ModelFamilyInfo dense_family() {
  ModelFamilyInfo f;
  f.name = "dense";
  f.architectures = {"Qwen3ForCausalLM", "LlamaForCausalLM"};
  f.description = "dense decoder (Qwen3 / Llama): attention + SiLU MLP in every layer";
  f.make = [](const ModelConfig& c, const MixerContext& ctx) -> std::unique_ptr<Model> {
    return std::make_unique<DenseModel>(c, ctx);
  };
  f.check = [](const ModelConfig& c, const EngineConfig& e) {
    std::vector<ScenarioProblem> out;
    shard_attention(c.num_attention_heads, c.num_key_value_heads, e.tensor_parallel_size, out);
    shard_evenly(c.intermediate_size, e.tensor_parallel_size, "model.intermediate_size", out);
    return out;
  };
  return f;
}

}  // namespace

CS_REGISTER_MODEL_FAMILY(dense_family());

}  // namespace coldstart
