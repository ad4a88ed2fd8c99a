// Routed experts (MoE): the seam between a model's MoE layer and the kernels that run its experts,
// as vLLM's FusedMoE layer hands its experts to a kernel chosen by the layer's quantization
// (unquantized weights: the Triton fused_experts path of UnquantizedFusedMoEMethod; FP8
// block-quantized weights: the backend select_fp8_moe_backend picks in
// vllm/model_executor/layers/fused_moe/oracle/fp8.py, DEEPGEMM among its Fp8MoeBackend values).
//
// A model describes its experts with a MoeSpec (Model::moe_specs) and builds them with
// make_moe_experts; the backend is the one registered for the spec's weight format. A model never
// calls a kernel family's MoE functions itself. A new backend is one file under harness/models/
// that registers itself with CS_REGISTER_MOE_BACKEND.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/models/mixer.h"

namespace coldstart {

/// How a token's experts are chosen.
enum class MoeRouting {
  kSoftmaxTopk,         ///< softmax over the router logits, the top_k largest (Qwen3-Next)
  kSigmoidGroupedTopk,  ///< sigmoid scores + correction bias, top_k within the best groups
                        ///< (NemotronH's grouped_topk)
  kByModel,             ///< the model computes the top-k itself (DeepSeek V4's sqrt-softplus
                        ///< scores and hash routing); MoeExperts::route is not called
};

/// The activation between the two expert GEMMs.
enum class MoeActivation {
  kSiluGated,     ///< w13 = [gate; up], silu(gate) * up
  kRelu2,         ///< non-gated, relu(x)^2 (NemotronH's relu2_no_mul)
  kClampedSwiglu  ///< gated, gate clamped to <= limit and up to [-limit, limit] (DeepSeek V4)
};

/// What one MoE layer's routed experts compute, on one rank. Widths in elements.
struct MoeSpec {
  int64_t num_experts = 0;   ///< E experts on this rank
  int64_t intermediate = 0;  ///< N: one expert's intermediate width on this rank
  int64_t hidden = 0;        ///< the experts' input and output width (the latent size for a
                             ///< latent MoE)
  /// The HF config key `hidden` comes from, for messages that refuse a size ("model.hidden_size",
  /// or "model.moe_latent_size" for a latent MoE).
  std::string hidden_key = "model.hidden_size";
  int top_k = 0;             ///< experts per token
  bool renormalize = true;   ///< divide the top-k weights by their sum (norm_topk_prob)
  MoeRouting routing = MoeRouting::kSoftmaxTopk;
  int64_t n_group = 1;       ///< kSigmoidGroupedTopk: expert groups
  int64_t topk_group = 1;    ///< kSigmoidGroupedTopk: groups kept per token
  MoeActivation activation = MoeActivation::kSiluGated;
  double swiglu_limit = 0;   ///< kClampedSwiglu: the clamp (0 = no clamp)
  /// The experts' weight format, which picks the backend: "bf16" | "fp8_block128" (FP8 e4m3 with
  /// one float32 scale per 128x128 block).
  std::string weight_format = "bf16";
  /// Expert parallelism: this rank holds num_experts of more, and ids of other ranks' experts
  /// arrive as -1 (vLLM's expert_map).
  bool expert_map = false;

  /// "moe(E=512,N=512,H=2048,top_k=10,bf16)"-style summary for messages.
  std::string summary() const;
};

/// One layer's expert weights in the backend's format. bf16: w13 [E, 2N, H] (gated) or [E, N, H],
/// w2 [E, H, N]. fp8_block128: the same shapes in float8_e4m3fn plus float32 block scales
/// w13_scale [E, ceil(rows / 128), ceil(H / 128)] and w2_scale alike.
struct MoeWeights {
  at::Tensor w13, w2;
  at::Tensor w13_scale, w2_scale;  ///< fp8_block128 only
};

/// The routed experts of a model's MoE layers (one object serves every layer with this spec).
class MoeExperts {
 public:
  MoeExperts(MoeSpec spec, const MixerContext& ctx) : spec_(std::move(spec)), ctx_(ctx) {}
  virtual ~MoeExperts() = default;
  const MoeSpec& spec() const { return spec_; }
  /// The registered backend name ("fused_moe_triton", ...).
  virtual std::string backend() const = 0;
  /// Compiles the kernels the engine builds ahead of time (router, alignment, sum ops); the model
  /// calls it while its weights load, never on the hot path. Launches nothing.
  virtual void precompile() {}
  /// router_logits [M, E] (bf16 or float32; float32 for kSigmoidGroupedTopk), correction_bias
  /// float32 [E] (kSigmoidGroupedTopk; undefined otherwise) -> topk_weights float32 [M, top_k],
  /// topk_ids int32 [M, top_k] (both contiguous). Throws Error for MoeRouting::kByModel.
  virtual void route(const at::Tensor& router_logits, const at::Tensor& correction_bias,
                     const at::Tensor& topk_weights, const at::Tensor& topk_ids) = 0;
  /// Returns [M, hidden] = sum over k of topk_weights[:, k] * expert_{topk_ids[:, k]}(hidden):
  /// bf16, or float32 where the backend accumulates in float32 (fp8_block128). hidden bf16
  /// [M, hidden] contiguous; topk_ids int32 or int64. The backend allocates the output where the
  /// engine's code does (so a profile run's memory peak is the engine's). May JIT-compile and
  /// select tuned configs; throws InputError naming the argument on a bad shape.
  virtual at::Tensor forward(const at::Tensor& hidden, const at::Tensor& topk_weights,
                             const at::Tensor& topk_ids, const MoeWeights& w) = 0;
  /// What the backend records for the result (e.g. which tuned config each token count used);
  /// null when nothing.
  virtual nlohmann::json report() const { return nullptr; }
  /// The token counts M in [1, max_tokens] whose forward() calls reach different compile keys,
  /// each class by its smallest M, ascending (issue 29's envelope classes for a backend). The
  /// default, for a backend that has not derived its classes, is every count.
  virtual std::vector<int64_t> token_classes(int64_t max_tokens) const;

 protected:
  MoeSpec spec_;
  MixerContext ctx_;
};

/// A registered MoE backend.
struct MoeBackendInfo {
  std::string name;           ///< backend name
  std::string weight_format;  ///< MoeSpec::weight_format it serves (one backend per format)
  std::string description;    ///< one line for `coldstart list`
  std::function<std::unique_ptr<MoeExperts>(const MoeSpec&, const MixerContext&)> make;
  /// The runtime-compiled kernels it launches (their archs are checked against the target).
  std::vector<const jit::KernelSource*> kernels;
  /// What it cannot run of this spec (routing, activation, sizes) with this engine on `target`
  /// (nullptr: the target is not known yet); may be empty.
  std::function<std::vector<ScenarioProblem>(const MoeSpec&, const EngineConfig&, const Target*)>
      check;
};

/// Registers a backend (static registration). Throws Error when its weight format is taken.
bool register_moe_backend(MoeBackendInfo info);
/// The backend serving `weight_format`, or nullptr.
const MoeBackendInfo* find_moe_backend(const std::string& weight_format);
/// Every registered backend, sorted by name.
std::vector<MoeBackendInfo> moe_backends();
/// Builds the experts for `spec`; throws InputError naming the format and the registered ones
/// when no backend serves it.
std::unique_ptr<MoeExperts> make_moe_experts(const MoeSpec& spec, const MixerContext& ctx);

/// The parts of an MoE layer around its routed experts (vLLM's MoERunner with a routed input and
/// output transform and shared experts). Widths: H = the model's hidden size, L = spec.hidden.
struct MoeLayerWeights {
  at::Tensor correction_bias;  ///< float32 [E] (kSigmoidGroupedTopk), or undefined
  at::Tensor input_latent;     ///< bf16 [L, H] (NemotronH's fc1_latent_proj), or undefined
  at::Tensor output_latent;    ///< bf16 [H, L], defined exactly with input_latent
  MoeWeights experts;
  at::Tensor shared_up;        ///< bf16 [S, H] (gated: [2S, H]), or undefined: no shared expert
  at::Tensor shared_down;      ///< bf16 [H, S], defined exactly with shared_up
  MoeActivation shared_activation = MoeActivation::kRelu2;  ///< kRelu2 or kSiluGated
};

/// One MoE layer after its router: the routed experts through `experts` and the shared expert,
///   topk = experts.route(router_logits, correction_bias)
///   routed = experts.forward(input_latent(hidden) or hidden)      [M, L]
///   routed *= routed_scale (in bf16, vLLM's apply_routed_scale_to_output; skipped when 1)
///   out = output_latent(routed) or routed, + shared_down(act(shared_up(hidden)))
/// hidden bf16 [M, H] contiguous; router_logits as MoeExperts::route takes them; out bf16 [M, H]
/// innermost contiguous. Throws InputError "moe_layer_forward: argument '<name>' ..." on a bad
/// shape or a missing pair.
void moe_layer_forward(MoeExperts& experts, const at::Tensor& hidden,
                       const at::Tensor& router_logits, const MoeLayerWeights& w,
                       double routed_scale, const at::Tensor& out);

/// Expert parallelism for moe_layer_forward_ep: the rank's group and how tokens are routed.
struct MoeExpertParallel {
  dist::RankGroup* ranks = nullptr;  ///< required; rank r owns experts [r * E / world, ...)
  MoeExperts* router = nullptr;      ///< routes over every expert (a spec of the global count);
                                     ///< unused under a routing simulation
  int64_t global_experts = 0;        ///< E over all ranks
  /// "none": the router; "uniform_random" / "normal_routing": vLLM's routing simulation
  /// (moe.engine_keys.h), drawn on the host from `seed`, `layer` and `call`.
  std::string simulation = "none";
  uint64_t seed = 0;
  int layer = 0;
  uint64_t call = 0;  ///< this layer's forward count (the draw differs per call, not per rank)
};

/// moe_layer_forward under expert parallelism, as an all-to-all dispatch runs it (DeepEP's
/// high-throughput mode in vLLM's modular kernels: each rank's experts see only the tokens routed
/// to them): every rank routes all M tokens over the global experts, keeps the tokens with at
/// least one expert of its own (M_r rows; its other choices become -1, which the grouped GEMM
/// skips), meets the others in the dispatch, runs `local` (a spec of E / world experts) over
/// its M_r rows, meets them in the combine, and writes its rows' routed output (zeros
/// elsewhere) plus the shared expert into `out`. M_r is this rank's grouped-GEMM M: the config,
/// and so the compile key, each rank selects. The ids must reach the host (a sync on the GPU;
/// DeepEP's dispatch also returns its counts to the host). Throws InputError in compile-only mode without a simulation (the
/// router's scores need the GPU) and as moe_layer_forward for bad shapes.
void moe_layer_forward_ep(MoeExperts& local, const MoeExpertParallel& ep, const at::Tensor& hidden,
                          const at::Tensor& router_logits, const MoeLayerWeights& w,
                          double routed_scale, const at::Tensor& out);

/// `local`'s forward over M rows whose every choice is one of this rank's experts: what the
/// all-to-all dispatch of moe_layer_forward_ep hands a rank that received M tokens (its grouped
/// GEMM at M, the key and config that M selects). Synthetic rows in the experts' input width
/// (random on a GPU; ids (row * top_k + j) mod E, weights 1 / top_k); meta tensors in compile-only
/// mode. No collective: a warmup or envelope step of one rank's experts. Throws InputError for
/// M < 1.
void run_local_experts(MoeExperts& local, int64_t M, const MoeWeights& w, c10::Device device);

/// Registers a MoeBackendInfo built by the expression `info` at static-initialization time.
#define CS_REGISTER_MOE_BACKEND(info) \
  static const bool CS_MIXER_CAT(cs_moe_registered_, __COUNTER__) = \
      ::coldstart::register_moe_backend(info)

}  // namespace coldstart
