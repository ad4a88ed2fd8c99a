// MoE backend "fused_moe_triton": bf16 experts through the fused-MoE kernels
// (harness/kernels/fused_moe), vLLM's unquantized Triton fused_experts path: the router op
// (topk_softmax, or grouped_topk with sigmoid scores), the grouped GEMMs under the config vLLM's
// tuned table (<tuned_config_dir>/fused_moe/E=..,N=..,device_name=...json) gives for the token
// count, and the activation between them. It owns the engine key the tables need
// (tuned_config_dir) and records which config each token count used.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "harness/common/paths.h"
#include "harness/jit/tuned_tables.engine_keys.h"
#include "harness/models/fused_moe_experts.engine_keys.h"
#include "harness/kernels/fused_moe/fused_moe.h"
#include "harness/models/moe.h"

namespace coldstart {
namespace {

/// Which config each token count M used: the first selection of each M with the phase it
/// happened in, and the tuned table looked for (found or not).
class ConfigLog {
 public:
  void note(int64_t M, const jit::Selection& sel, const std::string& phase) {
    if (used_.count(M)) return;
    used_[M] = {sel.selector, sel.tuning_key, sel.config.name, phase};
    if (table_.empty()) {
      table_ = sel.table_file;
      table_found_ = sel.selector == "table";
    }
  }
  /// {"fused_moe_configs": [{M, selector, tuning_key, config, first_phase}...],
  ///  "fused_moe_table" | "fused_moe_table_not_found": path}; null when nothing was recorded.
  nlohmann::json report() const {
    if (used_.empty()) return nullptr;
    nlohmann::json used = nlohmann::json::array();
    for (const auto& [m, u] : used_) {
      used.push_back({{"M", m}, {"selector", u.selector}, {"tuning_key", u.tuning_key},
                      {"config", u.config}, {"first_phase", u.first_phase}});
    }
    // "default" selections name the file looked for and not found.
    return {{"fused_moe_configs", used},
            {table_found_ ? "fused_moe_table" : "fused_moe_table_not_found", table_}};
  }

 private:
  struct Use {
    std::string selector, tuning_key, config, first_phase;
  };
  std::map<int64_t, Use> used_;
  std::string table_;
  bool table_found_ = false;
};

fused_moe::MoeShape shape_of(const MoeSpec& s) {
  fused_moe::MoeShape m{s.num_experts, s.intermediate, s.hidden, s.top_k, s.renormalize};
  m.activation = s.activation == MoeActivation::kRelu2 ? fused_moe::Activation::kRelu2NoMul
                                                       : fused_moe::Activation::kSilu;
  m.use_grouped_topk = s.routing == MoeRouting::kSigmoidGroupedTopk;
  m.has_expert_map = s.expert_map;
  m.n_group = s.n_group;
  m.topk_group = s.topk_group;
  m.routed_scaling_factor = 1.0f;  // a routed scale applies to the output (moe_layer_forward)
  return m;
}

class FusedMoeExperts final : public MoeExperts {
 public:
  FusedMoeExperts(const MoeSpec& spec, const MixerContext& ctx)
      : MoeExperts(spec, ctx), shape_(shape_of(spec)) {
    // vLLM keeps fused-MoE tables in a fused_moe/ folder of its config directory.
    if (ctx.engine && !tuned_config_dir(*ctx.engine).empty())
      src_.table_dir = paths::join(tuned_config_dir(*ctx.engine), "fused_moe");
    src_.device_name = ctx.target ? ctx.target->device_name : std::string();
    if (ctx.engine) chunk_ = fused_moe_chunk_size(*ctx.engine);
  }

  std::string backend() const override { return "fused_moe_triton"; }

  // vLLM's topk_softmax / grouped_topk / moe_align_block_size / silu_and_mul / moe_sum are
  // ahead-of-time CUDA ops: their stand-ins compile while the weights load.
  void precompile() override {
    if (ctx_.jit) fused_moe::precompile_aot_kernels(*ctx_.jit, shape_);
  }

  void route(const at::Tensor& router_logits, const at::Tensor& correction_bias,
             const at::Tensor& topk_weights, const at::Tensor& topk_ids) override {
    if (spec_.routing == MoeRouting::kSigmoidGroupedTopk) {
      fused_moe::grouped_topk(*ctx_.jit, shape_, router_logits, correction_bias, topk_weights, topk_ids);
    } else if (spec_.routing == MoeRouting::kSoftmaxTopk) {
      fused_moe::topk_softmax(*ctx_.jit, shape_, router_logits, topk_weights, topk_ids);
    } else {
      throw Error("fused_moe_triton: route() called for experts the model routes itself");
    }
  }

  // fused_experts_impl runs at most VLLM_FUSED_MOE_CHUNK_SIZE tokens at a time, each chunk with
  // the config for its own token count (vllm/model_executor/layers/fused_moe/fused_moe.py).
  at::Tensor forward(const at::Tensor& hidden, const at::Tensor& topk_weights,
                     const at::Tensor& topk_ids, const MoeWeights& w) override {
    // vLLM's callers hand fused_experts an output of the input's shape (torch.empty_like).
    const at::Tensor out = at::empty({hidden.size(0), spec_.hidden}, hidden.options());
    const int64_t M = hidden.size(0);
    int64_t begin = 0;
    do {  // at least once: M == 0 still looks its config up, as an unchunked call does
      const int64_t n = std::min(chunk_, M - begin);
      const jit::Selection sel = fused_moe::fused_experts(
          *ctx_.jit, shape_, src_, hidden.narrow(0, begin, n), w.w13, w.w2,
          topk_weights.narrow(0, begin, n), topk_ids.narrow(0, begin, n), out.narrow(0, begin, n));
      log_.note(n, sel, ctx_.jit ? ctx_.jit->monitor().phase() : "");
      begin += n;
    } while (begin < M);
    return out;
  }

  nlohmann::json report() const override { return log_.report(); }

  // The classes fused_moe proves against every count (a chunk's count is one of them: chunks
  // are at most chunk_ tokens).
  std::vector<int64_t> token_classes(int64_t max_tokens) const override {
    return fused_moe::envelope_token_classes(src_, shape_, std::min(max_tokens, chunk_));
  }

 private:
  fused_moe::MoeShape shape_;
  fused_moe::ConfigSource src_;
  int64_t chunk_ = 16 * 1024;  // engine.fused_moe_chunk_size
  ConfigLog log_;
};

std::vector<ScenarioProblem> check_fused_moe(const MoeSpec& s, const EngineConfig& e,
                                             const Target* target) {
  std::vector<ScenarioProblem> out;
  if (s.num_experts > fused_moe::kMaxExperts) {
    out.push_back({"model.num_experts", fmt::format("{} experts: the fused-MoE kernels take 1..{}",
                                                    s.num_experts, fused_moe::kMaxExperts)});
  }
  // The router kernels' own limits (grouped top-k: n_group dividing E, topk_group <= n_group,
  // ...), asked of the kernel family so the two never disagree; the key is the HF config's.
  if (s.routing != MoeRouting::kByModel && s.activation != MoeActivation::kClampedSwiglu &&
      s.num_experts <= fused_moe::kMaxExperts) {
    const std::string why = fused_moe::unsupported_shape(shape_of(s));
    if (!why.empty()) {
      const bool groups = s.routing == MoeRouting::kSigmoidGroupedTopk &&
                          why.compare(0, 7, "grouped") == 0;
      const bool bad_groups = s.n_group < 1 || s.n_group > fused_moe::kMaxExpertGroups ||
                              s.num_experts % s.n_group != 0;
      const bool bad_kept = s.topk_group < 1 || s.topk_group > s.n_group;
      out.push_back({groups && bad_groups ? "model.n_group"
                     : groups && bad_kept ? "model.topk_group"
                                          : "model.num_experts_per_tok",
                     "the fused-MoE kernels cannot route it: " + why});
    }
  }
  if (s.routing == MoeRouting::kByModel) {
    out.push_back({"model", "fused_moe_triton routes with topk_softmax or grouped_topk; this "
                            "model's experts are routed by the model"});
  }
  if (s.activation == MoeActivation::kClampedSwiglu) {
    out.push_back({"model", "fused_moe_triton has no clamped SwiGLU activation"});
  }
  // The largest single call: a step of max_num_batched_tokens tokens, cut into chunks of
  // fused_moe_chunk_size, under the config the replay will pick for it (the target's tuned table,
  // else vLLM's default). Shapes the kernels cannot launch fail here instead of in the profile run.
  if (out.empty()) {
    const int64_t M = std::min<int64_t>(e.max_num_batched_tokens, fused_moe_chunk_size(e));
    fused_moe::ConfigSource src;
    if (!tuned_config_dir(e).empty()) src.table_dir = paths::join(tuned_config_dir(e), "fused_moe");
    if (target) src.device_name = target->device_name;
    const fused_moe::MoeShape shape = shape_of(s);
    const std::string why =
        fused_moe::unsupported_launch(shape, fused_moe::select_config(src, shape, M).config, M);
    if (!why.empty()) {
      const bool stride = why.find("stride") != std::string::npos;
      // The stride is N x H: blame the wider of the two (H is the latent size for a latent MoE).
      const char* key = !stride                        ? "engine.max_num_batched_tokens"
                        : s.intermediate >= s.hidden ? "model.moe_intermediate_size"
                                                     : s.hidden_key.c_str();
      out.push_back({key,
                     fmt::format("the fused-MoE kernels cannot run a call of {} tokens "
                                 "(min(max_num_batched_tokens, fused_moe_chunk_size)): {}",
                                 M, why)});
    }
  }
  if (tuned_config_dir(e).empty()) {
    out.push_back({"engine.tuned_config_dir",
                   "is empty: the fused-MoE kernels need vLLM's tuned-table directory (or a "
                   "directory without a table for the default config)"});
  }
  return out;
}

MoeBackendInfo fused_moe_backend() {
  MoeBackendInfo b;
  b.name = "fused_moe_triton";
  b.weight_format = "bf16";
  b.description = "bf16 experts: topk_softmax / grouped_topk router, grouped GEMMs with vLLM's "
                  "tuned fused_moe tables (engine.tuned_config_dir)";
  b.make = [](const MoeSpec& s, const MixerContext& ctx) -> std::unique_ptr<MoeExperts> {
    return std::make_unique<FusedMoeExperts>(s, ctx);
  };
  b.kernels = fused_moe::all_kernels();
  b.check = check_fused_moe;
  return b;
}

}  // namespace

CS_REGISTER_MOE_BACKEND(fused_moe_backend());

}  // namespace coldstart
