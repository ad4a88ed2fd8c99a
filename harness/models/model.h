// The model side of a replay: the model interface, split into the pieces between token mixers so
// the runner can capture them as piecewise CUDA graphs (vLLM V1's piecewise mode) or capture
// everything as one full graph, and the registry of model families.
//
// A model family is one file under harness/models/ that registers itself with
// CS_REGISTER_MODEL_FAMILY: the architectures it serves, a check of the config, and a factory.
// Its layer plan (one MixerSpec per layer) tells the engine which mixers to build (mixer.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/models/mixer.h"
#include "harness/models/moe.h"

namespace coldstart {

/// Activations flowing between pieces of a forward pass. The runner owns them; under graph
/// capture they are the graphs' static tensors.
struct ForwardState {
  at::Tensor hidden;                ///< [N, H] bf16
  at::Tensor residual;              ///< [N, H] bf16
  std::vector<at::Tensor> mixer_in;  ///< the next mixer's inputs (MixerSpec::input_widths)
  at::Tensor mixer_out;             ///< [N, output_width] bf16, written by the mixer
  /// Tensors a model hands from one piece to the next besides the residual stream (Qwen3-Next's
  /// output gates, made before a mixer and applied after it); graph-captured like the others.
  std::vector<at::Tensor> carry;
  /// A draft model's second input (an MTP head's): the target's final hidden states of the
  /// step's rows, [N, H] bf16. Unused by target models.
  at::Tensor target_hidden;
};

/// A decoder-only model over real shapes with random bf16 weights. Pieces: piece 0 = embedding +
/// everything up to the first mixer; piece i = the rest of mixer layer i-1 (output projection,
/// MLP / MoE) + any decoder layers without a token mixer that follow it (NemotronH's MoE / MLP
/// layers) + the next mixer layer up to its mixer; the last piece = the rest + final norm. The
/// mixers run between pieces. Logits are not part of any piece: as vLLM V1's execute_model does, the runner
/// computes them eagerly, outside the graphs, for the sampled rows only (compute_logits).
class Model {
 public:
  virtual ~Model() = default;
  virtual std::string name() const = 0;
  /// One MixerSpec per decoder layer that has a token mixer, in order (MixerSpec::layer is the
  /// decoder layer's index, so layers without a mixer leave gaps). Available right after
  /// construction (no weights needed), so a scenario can be checked before anything runs.
  virtual std::vector<MixerSpec> layer_plan() const = 0;
  /// The routed experts of the model's MoE layers, one MoeSpec per distinct spec; empty without
  /// MoE. Like the plan, available right after construction: check_replayable asks the MoE
  /// registry for each before anything runs, and the model builds its experts with
  /// make_moe_experts while loading weights.
  virtual std::vector<MoeSpec> moe_specs() const { return {}; }
  /// Under expert parallelism (a rank holding some of the experts): the token counts at which
  /// this rank's routed experts reach different compile keys, up to max_tokens
  /// (MoeExperts::token_classes). A rank's grouped-GEMM M is the count the dispatch routes to it,
  /// which no batch shape fixes, so a warmer or the envelope sweep runs these counts directly
  /// (run_local_experts). Empty without expert parallelism (the default).
  virtual std::vector<int64_t> expert_token_classes(int64_t max_tokens) const {
    (void)max_tokens;
    return {};
  }
  /// Runs this rank's routed experts once at M tokens routed to its own experts (moe.h's
  /// run_local_experts with the first MoE layer's weights: every layer shares the spec, so the
  /// keys). Only for a count expert_token_classes listed; throws Error without expert
  /// parallelism.
  virtual void run_local_experts(int64_t M) {
    (void)M;
    throw Error("run_local_experts: this model has no expert-parallel MoE layer");
  }
  /// The model's multi-token-prediction head as the draft model of speculative decoding (vLLM's
  /// "mtp" method), or nullptr when the family has none. Made right after construction, before
  /// any weights; its load_weights must run after the target's (it shares the target's
  /// embedding and LM head and keeps a reference to the target). Its plan numbers its layers
  /// after the target's (MixerSpec::layer >= the target's decoder layer count), its piece 0
  /// reads ForwardState::target_hidden, and it has one mixer layer per MTP layer.
  virtual std::unique_ptr<Model> make_mtp_drafter() { return nullptr; }
  /// What the model hands its MTP drafter as ForwardState::target_hidden, when that is not the
  /// final-normed hidden states: a persistent buffer [max_num_batched_tokens, W] bf16 whose first
  /// rows each forward pass refreshes (a copy inside the last piece, so graphs replay it), as
  /// vLLM's get_mtp_target_hidden_states hands DeepSeek V4's pre-hc_head streams. Undefined (the
  /// default): the drafter reads the final hidden states [N, H].
  virtual at::Tensor mtp_target_hidden() const { return at::Tensor(); }
  /// Mixer layers (the plan's length): the forward pass has num_layers() + 1 pieces.
  int num_layers() const { return static_cast<int>(layer_plan().size()); }
  /// Allocates and fills the weights (normal, seeded); on meta only shapes are made. Returns bytes.
  virtual int64_t load_weights(uint64_t seed) = 0;
  /// Runs piece `i` in [0, num_layers()] on `st`: reads st.mixer_out of plan entry i-1 (i > 0),
  /// sets st.mixer_in for plan entry i (i < num_layers()); the last piece leaves the final-normed
  /// hidden states [N, H] bf16 in st.hidden.
  virtual void piece(int i, ForwardState& st, const ForwardBatch& batch) = 0;
  /// LM head over `hidden` [rows, H] bf16 (the sampled rows): [rows, V] float32.
  virtual at::Tensor compute_logits(const at::Tensor& hidden) = 0;
  /// What the model wants in the result (result.extra["model"]), e.g. which tuned-table config
  /// each token count used; null when it has nothing to say.
  virtual nlohmann::json report() const { return nullptr; }
};

/// A registered model family.
struct ModelFamilyInfo {
  std::string name;                        ///< "qwen3-dense"
  std::vector<std::string> architectures;  ///< HF architectures it serves
  std::string description;                 ///< one line for `coldstart list`
  /// Builds the model (no weights yet). May keep `ctx` (JIT runtime, target) for its own kernels.
  std::function<std::unique_ptr<Model>(const ModelConfig&, const MixerContext&)> make;
  /// Problems with this config that the family cannot replay; may be empty.
  std::function<std::vector<ScenarioProblem>(const ModelConfig&, const EngineConfig&)> check;
};

/// Registers a family (static registration). Throws Error when an architecture is taken.
bool register_model_family(ModelFamilyInfo info);
/// The family serving `architecture`, or nullptr.
const ModelFamilyInfo* find_model_family(const std::string& architecture);
/// Every registered family, sorted by name.
std::vector<ModelFamilyInfo> model_families();

/// Builds the model for `config.architecture`. Throws InputError naming the architecture and the
/// replayable ones when no family serves it.
std::unique_ptr<Model> make_model(const ModelConfig& config, const MixerContext& ctx);

/// Everything that makes `s` impossible to replay, asked of the registries before any strategy
/// runs: the model family, each layer's mixer backend under kv_cache_dtype, the engine settings
/// the replay supports and, when `target` is given, whether every kernel of those backends
/// exists for its arch. Builds the model on the meta device (no weights) for its plan.
std::vector<ScenarioProblem> check_replayable(const Scenario& s, const Target* target = nullptr);

#define CS_REGISTER_MODEL_FAMILY(info) \
  static const bool CS_MIXER_CAT(cs_model_registered_, __COUNTER__) = \
      ::coldstart::register_model_family(info)

}  // namespace coldstart
