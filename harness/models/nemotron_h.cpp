// NemotronH (NemotronHForCausalLM: Nemotron-H, Nemotron-3 Nano / Super): a hybrid whose decoder
// layers each hold one block named by hybrid_override_pattern: M = Mamba2, * = attention,
// E = MoE, - = MLP. Followed: vllm/model_executor/models/nemotron_h.py (vllm-project/vllm
// 00b08dc4) and MambaMixer2 (mamba/mamba2/mamba_mixer2.py @ 2e0714af):
// - every layer: RMSNorm (fused residual add) -> its block; final norm_f;
// - M: in_proj [H -> I + conv_dim + heads] gives [gate | xBC | dt]; the conv + SSM core is the
//   Mamba2 mixer (mamba2_mixer.cpp); then Mixer2RMSNormGated and out_proj. With n_groups != 1
//   (Nemotron-3: 8) vLLM's norm takes forward_native, i.e. torch operations: x * silu(gate) in
//   float32, an RMS per group of I_full / n_groups columns, times the weight;
// - *: qkv_proj, attention through the backend (no rotary embedding: NemotronHAttention has
//   none), o_proj;
// - E: NemotronHMoE: a float32 router (GateLinear, out_dtype float32), sigmoid scores with
//   e_score_correction_bias and grouped top-k (n_group / topk_group), routed experts through the
//   fused-MoE kernels with the non-gated relu2 activation, on the latent width when
//   moe_latent_size is set (fc1_latent_proj before, fc2_latent_proj after, both replicated),
//   routed_scaling_factor on the routed output, plus the relu2 shared expert on the hidden size;
// - -: relu2 MLP (up_proj -> relu(x)^2 -> down_proj).
// Only M and * layers have a token mixer: the layer plan lists those, and E / - layers run inside
// the pieces between mixers (so they are graph-captured with them, as in vLLM's piecewise mode).
//
// Tensor parallelism (engine.tensor_parallel_size): the model is rank 0's. Attention heads as
// QKVParallelLinear splits them (KV heads replicated when fewer than ranks); Mamba heads split,
// groups split when tp divides n_groups, else (n_groups == 1 only) replicated; expert
// intermediate (FusedMoE), shared-expert and MLP widths split; router and latent projections
// replicated; embedding and LM head kept whole. With engine.ranks: all the ranks meet in the
// all-reduces after out_proj / o_proj / the MoE / the MLP (tp_all_reduce: RowParallelLinear's
// reduce_results, FusedMoE's); the all-reduce inside the gated norm for n_groups == 1 is left
// out.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>

#include "harness/dist/ranks.engine_keys.h"
#include "harness/models/moe.engine_keys.h"
#include "harness/models/recurrent_state.engine_keys.h"
#include "harness/common/paths.h"
#include "harness/models/layers_common.h"
#include "harness/models/mamba2_layer.h"
#include "harness/models/model.h"

namespace coldstart {
namespace {

/// The NemotronH config at one rank, and what vLLM would refuse.
struct NemotronDims {
  std::string pattern;  // one character per decoder layer
  int tp = 1;
  int ep = 1;  // expert-parallel ranks (1: none; else tp)
  double eps = 1e-5;
  // attention
  AttentionShard attn;
  int64_t head_dim = 128;
  // Mamba2
  Mamba2Dims mamba;
  int64_t mamba_full_intermediate = 0, mamba_full_groups = 0;
  // MoE
  int64_t experts = 0, top_k = 0, moe_inter = 0, shared_inter = 0, latent = 0;
  int64_t n_group = 1, topk_group = 1;
  bool norm_topk = true;
  double routed_scaling = 1.0;
  // MLP ('-' layers)
  int64_t mlp_inter = 0;
  std::vector<ScenarioProblem> problems;

  int64_t moe_hidden(int64_t hidden) const { return latent > 0 ? latent : hidden; }
  int64_t in_proj_width() const { return mamba.intermediate() + mamba.conv_dim() + mamba.heads; }
};

/// vLLM's config hook for NemotronH (vllm/model_executor/models/config.py,
/// NemotronHForCausalLMConfig): mamba_ssm_cache_dtype "auto" becomes the HF config's value, or
/// float32 when the config has none.
std::string resolve_ssm_dtype(const ModelConfig& c, const EngineConfig* e,
                              std::vector<ScenarioProblem>* problems = nullptr) {
  const std::string engine = e ? mamba_ssm_cache_dtype(*e) : "auto";
  if (engine != "auto") return engine;
  return config_string(ConfigView{c, problems}, "mamba_ssm_cache_dtype", "float32");
}

NemotronDims nemotron_dims(const ModelConfig& c, const EngineConfig* e) {
  NemotronDims d;
  const ConfigView r{c, &d.problems};
  d.tp = e ? e->tensor_parallel_size : 1;
  auto& pr = d.problems;
  const std::string full = config_string(r, "hybrid_override_pattern", "");
  if (static_cast<int>(full.size()) < c.num_hidden_layers) {
    pr.push_back({"model.hybrid_override_pattern",
                  fmt::format("has {} layer kinds, fewer than num_hidden_layers {}", full.size(),
                              c.num_hidden_layers)});
  }
  d.pattern = full.substr(0, std::min<size_t>(full.size(), c.num_hidden_layers));
  for (size_t l = 0; l < d.pattern.size(); ++l) {
    if (std::string("M*E-").find(d.pattern[l]) == std::string::npos) {
      pr.push_back({"model.hybrid_override_pattern",
                    fmt::format("layer {} has kind '{}'; NemotronH layers are M, *, E or -", l,
                                d.pattern[l])});
    }
  }
  const bool mixers = d.pattern.find_first_of("M*") != std::string::npos;
  if (!d.pattern.empty() && !mixers) {
    pr.push_back({"model.hybrid_override_pattern",
                  fmt::format("'{}' has no Mamba2 (M) or attention (*) layer: nothing keeps a "
                              "cache, which the replay needs",
                              d.pattern)});
  } else if (d.pattern.find('M') != std::string::npos && d.pattern.find('*') == std::string::npos) {
    pr.push_back({"model.hybrid_override_pattern",
                  fmt::format("'{}' has no attention (*) layer: vLLM sizes the cache of "
                              "attention-free models by other rules, which are not replayed",
                              d.pattern)});
  }
  d.eps = config_double(r, "layer_norm_epsilon", config_double(r, "norm_eps", c.rms_norm_eps));
  d.head_dim = c.head_dim;
  d.attn = shard_attention(c.num_attention_heads, c.num_key_value_heads, d.tp, pr);

  const int64_t mheads = config_int(r, "mamba_num_heads", 0, 1);
  const int64_t mgroups = config_int(r, "n_groups", 1, 1);
  d.mamba.head_dim = config_int(r, "mamba_head_dim", 64, 1);
  d.mamba.state = config_int(r, "ssm_state_size", 128, 1);
  d.mamba.conv_kernel = config_int(r, "conv_kernel", 4, 1);
  d.mamba.chunk_size = config_int(r, "chunk_size", 256, 1);
  d.mamba.conv_bias = config_bool(r, "use_conv_bias", true);
  const std::string ssm_dtype = resolve_ssm_dtype(c, e, &d.problems);
  if (ssm_dtype != "float32" && ssm_dtype != "bfloat16") {
    pr.push_back({"model.mamba_ssm_cache_dtype",
                  fmt::format("'{}' (engine.mamba_ssm_cache_dtype auto takes the HF config's "
                              "value): the replay keeps the SSM state in float32 or bfloat16",
                              ssm_dtype)});
  }
  d.mamba.ssm_dtype = ssm_dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  d.mamba_full_intermediate = mheads * d.mamba.head_dim;
  d.mamba_full_groups = mgroups;
  if (d.pattern.find('M') != std::string::npos) {
    d.mamba.heads = shard_evenly(mheads, d.tp, "model.mamba_num_heads", pr);
    // MambaMixer2: groups split when tp divides them; n_groups == 1 is replicated onto every rank
    // (extra_groups_for_head_shards); anything else is asserted against.
    if (mgroups % d.tp == 0) {
      d.mamba.groups = mgroups / d.tp;
    } else if (mgroups == 1) {
      d.mamba.groups = 1;
    } else {
      pr.push_back({"model.n_groups",
                    fmt::format("{} groups neither split over tensor_parallel_size {} nor are 1 "
                                "(vLLM's MambaMixer2 asserts)",
                                mgroups, d.tp)});
    }
  }
  if (d.pattern.find('E') != std::string::npos) {
    d.experts = config_int(r, "n_routed_experts", 0);
    d.top_k = config_int(r, "num_experts_per_tok", 0);
    // Expert parallelism (moe.engine_keys.h): whole experts split over the ranks, each expert's
    // intermediate width kept; else the width split (FusedMoE's TP sharding).
    d.ep = e != nullptr && expert_parallel(*e) ? d.tp : 1;
    if (d.ep > 1 && d.experts % d.ep != 0)
      pr.push_back({"engine.enable_expert_parallel",
                    fmt::format("{} routed experts do not split over {} ranks", d.experts, d.ep)});
    d.moe_inter = d.ep > 1 ? config_int(r, "moe_intermediate_size", 0)
                           : shard_evenly(config_int(r, "moe_intermediate_size", 0), d.tp,
                                          "model.moe_intermediate_size", pr);
    d.shared_inter = shard_evenly(config_int(r, "moe_shared_expert_intermediate_size", 0) *
                                      config_int(r, "n_shared_experts", 1, 0),
                                  d.tp, "model.moe_shared_expert_intermediate_size", pr);
    d.latent = config_int(r, "moe_latent_size", 0);
    d.n_group = config_int(r, "n_group", 1, 1);
    d.topk_group = config_int(r, "topk_group", 1, 1);
    d.routed_scaling = config_double(r, "routed_scaling_factor", 1.0);
    d.norm_topk = config_bool(r, "norm_topk_prob", d.norm_topk);
    if (config_int(r, "moe_intermediate_size", 0) < 1 || d.latent < 0 ||
        config_int(r, "moe_shared_expert_intermediate_size", 0) < 0) {
      pr.push_back({"model.moe_intermediate_size",
                    fmt::format("expert intermediate {} must be positive, moe_latent_size {} and "
                                "moe_shared_expert_intermediate_size {} not negative",
                                config_int(r, "moe_intermediate_size", 0), d.latent,
                                config_int(r, "moe_shared_expert_intermediate_size", 0))});
    }
    if (d.experts < 1 || d.experts > 1024 || d.top_k < 1 || d.top_k > d.experts) {
      pr.push_back({"model.num_experts_per_tok",
                    fmt::format("top-{} of {} experts: the fused-MoE kernels take 1..1024 experts "
                                "and a top-k of 1..n_routed_experts",
                                d.top_k, d.experts)});
    }
  }
  if (d.pattern.find('-') != std::string::npos)
    d.mlp_inter = shard_evenly(c.intermediate_size, d.tp, "model.intermediate_size", pr);
  const std::string act = config_string(r, "mlp_hidden_act", "relu2");
  if (act != "relu2") {
    pr.push_back({"model.mlp_hidden_act",
                  fmt::format("'{}': the replay has NemotronH's relu2 MLP / MoE only", act)});
  }
  return d;
}

struct Weights {
  at::Tensor norm;
  at::Tensor in_proj, gate_norm, out_proj;                      // M
  at::Tensor qkv, o_proj;                                       // *
  at::Tensor router, bias, fc1_latent, fc2_latent, w13, w2;     // E (router f32)
  at::Tensor shared_up, shared_down;                            // E shared expert
  at::Tensor up, down;                                          // -
};

class NemotronHModel final : public Model {
 public:
  NemotronHModel(const ModelConfig& c, const MixerContext& ctx)
      : c_(c), d_(nemotron_dims(c, ctx.engine)), ctx_(ctx), device_(ctx.device) {
    for (size_t l = 0; l < d_.pattern.size(); ++l)
      if (d_.pattern[l] == 'M' || d_.pattern[l] == '*') mixer_layers_.push_back(static_cast<int>(l));
  }

  std::string name() const override { return c_.architecture; }

  // NemotronHMoE's routed experts: bf16, sigmoid grouped top-k with the correction bias, relu2,
  // on the latent width when the model has latent projections. The routed scaling factor applies
  // to the output (moe_layer_forward), not inside the router.
  std::vector<MoeSpec> moe_specs() const override {
    if (d_.experts <= 0) return {};
    MoeSpec s;
    s.num_experts = d_.experts / d_.ep;  // this rank's
    s.expert_map = d_.ep > 1;
    s.intermediate = d_.moe_inter;
    s.hidden = d_.moe_hidden(c_.hidden_size);
    if (d_.latent > 0) s.hidden_key = "model.moe_latent_size";
    s.top_k = static_cast<int>(d_.top_k);
    s.renormalize = d_.norm_topk;
    s.routing = MoeRouting::kSigmoidGroupedTopk;
    s.n_group = d_.n_group;
    s.topk_group = d_.topk_group;
    s.activation = MoeActivation::kRelu2;
    return {s};
  }

  std::vector<MixerSpec> layer_plan() const override {
    std::vector<MixerSpec> plan;
    const int64_t D = d_.head_dim, Hq = d_.attn.q_heads, Hk = d_.attn.kv_heads;
    for (int l : mixer_layers_) {
      MixerSpec s;
      s.layer = l;
      if (d_.pattern[l] == '*') {
        // q, k, v: column slices of qkv_proj's output [N, (Hq + 2 Hk) * D] (no RoPE).
        const int64_t w = (Hq + 2 * Hk) * D;
        s = MixerSpec::attention(l, Hq, Hk, D, {w, w, w});
      } else {
        // xBC and dt: column slices of in_proj's output [N, I + conv_dim + heads].
        const Mamba2Dims& m = d_.mamba;
        s.kind = "mamba2";
        s.num_heads = m.heads;
        s.num_kv_heads = m.groups;
        s.head_dim = m.head_dim;
        s.output_width = m.intermediate();
        s.input_widths = {m.conv_dim(), m.heads};
        s.input_row_strides = {d_.in_proj_width(), d_.in_proj_width()};
        s.params = {{"ssm_state_size", m.state},
                    {"conv_kernel", m.conv_kernel},
                    {"chunk_size", m.chunk_size},
                    {"use_conv_bias", m.conv_bias},
                    {"ssm_dtype", m.ssm_dtype == at::kBFloat16 ? "bfloat16" : "float32"}};
      }
      plan.push_back(std::move(s));
    }
    return plan;
  }

  int64_t load_weights(uint64_t seed) override {
    seed_ = seed;
    WeightMaker m(device_);
    if (!device_.is_meta()) at::manual_seed(seed);
    const int64_t H = c_.hidden_size, V = c_.vocab_size;
    auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
    const double sh = inv_sqrt(H);
    embed_ = m.normal({V, H}, 1.0);
    layers_.clear();
    for (char kind : d_.pattern) {
      Weights w;
      w.norm = m.ones(H);
      if (kind == 'M') {
        const Mamba2Dims& mb = d_.mamba;
        w.in_proj = m.normal({d_.in_proj_width(), H}, sh);
        w.gate_norm = m.ones(mb.intermediate());
        w.out_proj = m.normal({H, mb.intermediate()}, inv_sqrt(mb.intermediate()));
      } else if (kind == '*') {
        const int64_t D = d_.head_dim, Hq = d_.attn.q_heads, Hk = d_.attn.kv_heads;
        w.qkv = m.normal({(Hq + 2 * Hk) * D, H}, sh);
        w.o_proj = m.normal({H, Hq * D}, inv_sqrt(Hq * D));
      } else if (kind == 'E') {
        const int64_t L = d_.moe_hidden(H);
        // GateLinear keeps the router weight and its correction bias in float32.
        w.router = m.normal({d_.experts, H}, sh).to(at::kFloat);
        w.bias = m.normal({d_.experts}, 0.01).to(at::kFloat);
        if (d_.latent > 0) {
          w.fc1_latent = m.normal({L, H}, sh);
          w.fc2_latent = m.normal({H, L}, inv_sqrt(L));
        }
        const int64_t local = d_.experts / d_.ep;
        w.w13 = m.normal({local, d_.moe_inter, L}, inv_sqrt(L));
        w.w2 = m.normal({local, L, d_.moe_inter}, inv_sqrt(d_.moe_inter));
        w.shared_up = m.normal({d_.shared_inter, H}, sh);
        w.shared_down = m.normal({H, d_.shared_inter}, inv_sqrt(d_.shared_inter));
      } else {
        w.up = m.normal({d_.mlp_inter, H}, sh);
        w.down = m.normal({H, d_.mlp_inter}, inv_sqrt(d_.mlp_inter));
      }
      layers_.push_back(std::move(w));
    }
    final_norm_ = m.ones(H);
    lm_head_ = c_.tie_word_embeddings ? embed_ : m.normal({V, H}, sh);
    // vLLM's routing and align / sum ops are ahead-of-time CUDA ops: their stand-ins compile
    // while the weights load, never on the hot path.
    if (d_.experts > 0) {
      moe_ = make_moe_experts(moe_specs().front(), ctx_);
      moe_->precompile();
      if (d_.ep > 1 && moe_routing_simulation(*ctx_.engine) == "none") {
        // The router's top-k runs over every expert, on every rank.
        MoeSpec global = moe_specs().front();
        global.num_experts = d_.experts;
        global.expert_map = false;
        moe_router_ = make_moe_experts(global, ctx_);
        moe_router_->precompile();
      }
      moe_calls_.assign(d_.pattern.size(), 0);
    }
    return m.bytes();
  }

  at::Tensor compute_logits(const at::Tensor& hidden) override {
    return at::linear(hidden, lm_head_).to(at::kFloat);
  }

  nlohmann::json report() const override {
    nlohmann::json r = {{"tensor_parallel_size", d_.tp}, {"hybrid_override_pattern", d_.pattern}};
    nlohmann::json rank = nlohmann::json::object();
    if (d_.pattern.find('*') != std::string::npos)
      rank["attention"] = {{"q_heads", d_.attn.q_heads}, {"kv_heads", d_.attn.kv_heads},
                           {"head_dim", d_.head_dim}};
    if (d_.pattern.find('M') != std::string::npos)
      rank["mamba2"] = {{"heads", d_.mamba.heads},         {"head_dim", d_.mamba.head_dim},
                        {"groups", d_.mamba.groups},       {"ssm_state_size", d_.mamba.state},
                        {"conv_dim", d_.mamba.conv_dim()}, {"chunk_size", d_.mamba.chunk_size},
                        {"ssm_dtype", c10::toString(d_.mamba.ssm_dtype)}};
    if (d_.pattern.find('E') != std::string::npos)
      rank["moe"] = {{"experts", d_.experts},           {"top_k", d_.top_k},
                     {"intermediate", d_.moe_inter},    {"expert_hidden", d_.moe_hidden(c_.hidden_size)},
                     {"shared_intermediate", d_.shared_inter}, {"latent", d_.latent}};
    if (d_.pattern.find('-') != std::string::npos) rank["mlp"] = {{"intermediate", d_.mlp_inter}};
    r["rank_shapes"] = rank;
    const nlohmann::json moe = moe_ ? moe_->report() : nlohmann::json();
    if (!moe.is_null()) r.update(moe);
    return r;
  }

  void piece(int i, ForwardState& st, const ForwardBatch& batch) override {
    (void)batch;
    const int P = static_cast<int>(mixer_layers_.size());
    int next_layer = 0;  // first decoder layer this piece runs in full
    if (i == 0) {
      st.hidden = embed_.index({batch.input_ids});
      first_layer_ = true;
    } else {
      const int l = mixer_layers_[i - 1];
      st.hidden = after_mixer(l, st);
      tp_all_reduce(ctx_, st.hidden, l, d_.pattern[l] == '*' ? "o_proj" : "out_proj");
      next_layer = l + 1;
    }
    const int stop = i < P ? mixer_layers_[i] : static_cast<int>(d_.pattern.size());
    for (int l = next_layer; l < stop; ++l) {  // E and - layers: no mixer
      const at::Tensor h = pre_norm(l, st);
      st.hidden = d_.pattern[l] == 'E' ? moe(l, layers_[l], h) : mlp(layers_[l], h);
      // Under expert parallelism the combine returns each token's sum: no all-reduce.
      if (d_.pattern[l] != 'E' || d_.ep == 1)
        tp_all_reduce(ctx_, st.hidden, l, d_.pattern[l] == 'E' ? "moe" : "mlp down_proj");
    }
    st.carry.clear();
    if (i == P) {
      st.residual = first_layer_ ? st.hidden : st.hidden + st.residual;
      st.hidden = rms_norm(st.residual, final_norm_, d_.eps);
      return;
    }
    const int l = mixer_layers_[i];
    const at::Tensor h = pre_norm(l, st);
    if (d_.pattern[l] == '*') {
      const int64_t D = d_.head_dim, Hq = d_.attn.q_heads, Hk = d_.attn.kv_heads;
      const at::Tensor qkv = at::linear(h, layers_[l].qkv);
      st.mixer_in = {qkv.narrow(1, 0, Hq * D), qkv.narrow(1, Hq * D, Hk * D),
                     qkv.narrow(1, (Hq + Hk) * D, Hk * D)};
    } else {
      const Mamba2Dims& m = d_.mamba;
      const at::Tensor proj = at::linear(h, layers_[l].in_proj);  // [N, I + conv_dim + heads]
      st.mixer_in = {proj.narrow(1, m.intermediate(), m.conv_dim()),
                     proj.narrow(1, m.intermediate() + m.conv_dim(), m.heads)};
      st.carry = {proj.narrow(1, 0, m.intermediate())};  // the gate
    }
  }

 private:
  /// The layer's RMSNorm with vLLM's fused residual add (the first layer starts the residual).
  at::Tensor pre_norm(int l, ForwardState& st) {
    st.residual = first_layer_ ? st.hidden : st.hidden + st.residual;
    first_layer_ = false;
    return rms_norm(st.residual, layers_[l].norm, d_.eps);
  }

  at::Tensor after_mixer(int l, ForwardState& st) const {
    const Weights& w = layers_[l];
    if (d_.pattern[l] == '*') return at::linear(st.mixer_out, w.o_proj);
    // Mixer2RMSNormGated.forward_native (n_groups != 1, or tp > 1): torch operations.
    const Mamba2Dims& m = d_.mamba;
    const at::Tensor gate = st.carry.at(0);
    const int64_t N = st.mixer_out.size(0);
    at::Tensor x = st.mixer_out.narrow(0, 0, N).to(at::kFloat) * at::silu(gate.to(at::kFloat));
    const int64_t group = d_.mamba_full_intermediate / std::max<int64_t>(d_.mamba_full_groups, 1);
    const int64_t local_groups = std::max<int64_t>(1, m.intermediate() / std::max<int64_t>(group, 1));
    at::Tensor xg = x.view({N, local_groups, m.intermediate() / local_groups});
    xg = xg * at::rsqrt(xg.pow(2).mean({-1}, /*keepdim=*/true) + d_.eps);
    const at::Tensor normed = w.gate_norm * xg.view({N, m.intermediate()}).to(at::kBFloat16);
    return at::linear(normed, w.out_proj);
  }

  // ReLUSquaredActivation (vLLM's NemotronHMLP): torch.square(F.relu(x)). libtorch 1.13 has no
  // meta kernel for relu, and in compile-only mode only the shape matters.
  static at::Tensor relu2(const at::Tensor& x) {
    return x.is_meta() ? x : at::square(at::relu(x));
  }

  at::Tensor mlp(const Weights& w, const at::Tensor& h) const {
    return at::linear(relu2(at::linear(h, w.up)), w.down);
  }

  // NemotronHMoE (vllm/model_executor/models/nemotron_h.py at vllm-project/vllm 00b08dc44519):
  // the float32 router (GateLinear), then the MoE layer: sigmoid + correction-bias grouped top-k,
  // fc1_latent_proj / fc2_latent_proj around the relu2 routed experts, the routed output scaled
  // by routed_scaling_factor, plus the relu2 shared expert.
  std::vector<int64_t> expert_token_classes(int64_t max_tokens) const override {
    if (d_.ep <= 1 || !moe_) return {};
    return moe_->token_classes(max_tokens);
  }

  void run_local_experts(int64_t M) override {
    CS_CHECK(d_.ep > 1 && moe_, "run_local_experts without expert parallelism");
    for (size_t l = 0; l < d_.pattern.size(); ++l) {
      if (d_.pattern[l] != 'E') continue;
      const Weights& w = layers_[l];
      ::coldstart::run_local_experts(*moe_, M, {w.w13, w.w2, {}, {}}, device_);
      return;
    }
  }

  at::Tensor moe(int l, const Weights& w, const at::Tensor& h) {
    const at::Tensor logits = at::linear(h.to(at::kFloat), w.router);  // [M, E] float32
    MoeLayerWeights mw;
    mw.correction_bias = w.bias;
    mw.input_latent = w.fc1_latent;
    mw.output_latent = w.fc2_latent;
    mw.experts = {w.w13, w.w2, {}, {}};
    mw.shared_up = w.shared_up;
    mw.shared_down = w.shared_down;
    mw.shared_activation = MoeActivation::kRelu2;
    at::Tensor out = at::empty_like(h);
    if (d_.ep > 1 && ctx_.ranks != nullptr) {
      MoeExpertParallel ep;
      ep.ranks = ctx_.ranks;
      ep.router = moe_router_.get();
      ep.global_experts = d_.experts;
      ep.simulation = moe_routing_simulation(*ctx_.engine);
      ep.seed = seed_;
      ep.layer = l;
      ep.call = moe_calls_.at(static_cast<size_t>(l))++;
      moe_layer_forward_ep(*moe_, ep, h, logits, mw, d_.routed_scaling, out);
    } else {
      moe_layer_forward(*moe_, h, logits, mw, d_.routed_scaling, out);
    }
    return out;
  }

  ModelConfig c_;
  NemotronDims d_;
  MixerContext ctx_;
  uint64_t seed_ = 0;                       // the run's seed (routing simulation draws)
  std::unique_ptr<MoeExperts> moe_router_;  // EP with the router: top-k over every expert
  std::vector<uint64_t> moe_calls_;         // per layer: MoE forwards so far (EP draws)
  c10::Device device_;
  std::vector<int> mixer_layers_;
  bool first_layer_ = true;
  std::unique_ptr<MoeExperts> moe_;
  at::Tensor embed_, final_norm_, lm_head_;
  std::vector<Weights> layers_;
};

std::vector<ScenarioProblem> check_nemotron(const ModelConfig& c, const EngineConfig& e) {
  NemotronDims d = nemotron_dims(c, &e);
  std::vector<ScenarioProblem> out = std::move(d.problems);
  if (d.ep > 1 && !replays_all_ranks(e))
    out.push_back({"engine.enable_expert_parallel",
                   "expert parallelism is replayed with every rank (engine.ranks: all): one rank "
                   "alone cannot tell which tokens the others send it"});
  if (d.ep > 1 && e.cudagraph_mode != CudaGraphMode::kNone)
    out.push_back({"engine.cudagraph_mode",
                   "expert parallelism's dispatch is replayed eagerly only (each rank's token "
                   "counts reach the host, as DeepEP's high-throughput dispatch returns them); "
                   "set cudagraph_mode: none"});
  return out;
}

ModelFamilyInfo nemotron_h_family() {
  ModelFamilyInfo f;
  f.name = "nemotron-h";
  f.architectures = {"NemotronHForCausalLM"};
  f.description = "NemotronH hybrid (Nemotron-3 Nano / Super): Mamba2, attention, relu2 MoE with "
                  "latent projection and shared expert, per tensor-parallel rank";
  f.make = [](const ModelConfig& c, const MixerContext& ctx) -> std::unique_ptr<Model> {
    return std::make_unique<NemotronHModel>(c, ctx);
  };
  f.check = check_nemotron;
  return f;
}

}  // namespace

CS_REGISTER_MODEL_FAMILY(nemotron_h_family());

}  // namespace coldstart
