// Fused MoE (vLLM's unquantized Triton fused_experts path, bf16): the torch-side API the models
// call. See fused_moe_kernels.h for the steps vLLM runs and the sources each one mirrors.
//
// Every function validates its arguments (throwing coldstart::Error "fused_moe::<function>:
// argument '<name>' ..."), builds the launch arguments and calls JitRuntime::launch on torch's
// current CUDA stream. In compile-only mode the tensors live on torch's meta device and nothing
// is launched: no function reads tensor data, calls .item() or synchronizes, so the compile keys
// are the ones a GPU run produces. Intermediate buffers are at::empty on the input's device
// (vLLM takes them from torch's caching allocator, not from the workspace).
//
// Units: token counts in tokens, strides in elements. M = tokens, E = experts, H = hidden size,
// N = expert intermediate size (w2.shape[2]), top_k = experts per token.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "harness/jit/jit.h"
#include "harness/jit/select.h"
#include "harness/kernels/fused_moe/fused_moe_kernels.h"

namespace coldstart::fused_moe {

/// The activation between the two expert GEMMs (vLLM's MoEActivation).
enum class Activation {
  kSilu,        ///< "silu", gated: w13 is [E, 2N, H], silu(gate) * up (silu_and_mul kernel)
  kRelu2NoMul,  ///< "relu2_no_mul", non-gated (NemotronH): w13 is [E, N, H], relu(x)^2 (torch ops)
};

/// Shape of one MoE layer. The fields after `renormalize` default to Qwen3-Next's behaviour
/// (gated silu experts, topk_softmax router), so `MoeShape{E, N, H, top_k, renormalize}` keeps
/// meaning what it did.
struct MoeShape {
  int64_t num_experts;   ///< E (1..1024)
  int64_t intermediate;  ///< N = w2.shape[2] (w13 is [E, 2N, H] gated, [E, N, H] non-gated)
  int64_t hidden;        ///< H (the expert input width: the latent size for latent MoE)
  int top_k;             ///< experts per token (1..E; 1..32 with use_grouped_topk)
  bool renormalize;      ///< divide the top-k weights by their sum (norm_topk_prob)
  Activation activation = Activation::kSilu;
  /// Router op: false = topk_softmax (softmax scores); true = grouped_topk (sigmoid scores plus
  /// e_score_correction_bias, vLLM's use_grouped_topk with scoring_func "sigmoid").
  bool use_grouped_topk = false;
  int64_t n_group = 1;     ///< num_expert_group (grouped_topk; 1..32, divides E)
  int64_t topk_group = 1;  ///< groups kept per token (grouped_topk; 1..n_group)
  /// The factor grouped_topk multiplies the weights by (vLLM's router routed_scaling_factor).
  /// NemotronH passes 1.0 here and scales the routed output instead (nemotron_moe).
  float routed_scaling_factor = 1.0f;
  /// The layer has an expert map (expert parallelism: global ids outside this rank's experts map
  /// to -1). vLLM takes the naive block assignment only when expert_map is None
  /// (_prepare_expert_assignment in fused_moe.py), so it is off here.
  bool has_expert_map = false;
};

/// A served model's routed experts (kernels/model_shapes.h) as a MoeShape: renormalized top-k;
/// a NemotronH layer routes by sigmoid grouped top-k (one group) into ReLU^2 experts.
inline MoeShape moe_shape(const kernels::shapes::MoeExperts& m) {
  MoeShape s{m.num_experts, m.intermediate, m.hidden, m.top_k, true};
  if (m.nemotron) {
    s.activation = Activation::kRelu2NoMul;
    s.use_grouped_topk = true;
  }
  return s;
}

/// Why the kernels cannot run shape `s` (experts, top-k, and for grouped_topk the groups), or ""
/// when they can. Every wrapper throws InputError with this text; the MoE backend's check asks
/// it at validation, so a scenario with such a shape is refused before anything runs.
std::string unsupported_shape(const MoeShape& s);

/// Why one fused_experts call of M tokens under GEMM config `cfg` cannot launch, or "" when it
/// can: the kernels take N, K, strides, the padded row count EM and the (token, expert) pair
/// count as 32-bit ints, and a GEMM's grid (cdiv(EM, BLOCK_SIZE_M) * cdiv(N_out, BLOCK_SIZE_N)
/// blocks in x) must stay within CUDA's 2^31 - 1. Both GEMMs (w13: N_out = 2N or N, K = H;
/// w2: N_out = H, K = N) are checked. M >= 0; throws InputError for a bad cfg (as gemm_block).
std::string unsupported_launch(const MoeShape& s, const jit::KernelConfig& cfg, int64_t M);

/// Compiles the AOT kernels for this shape: the router (topk_softmax for bf16 and float32 logits,
/// or grouped_topk for float32 logits when use_grouped_topk), align, silu_and_mul (gated
/// activation only) and sum. The model calls it while loading weights, as vLLM's are built ahead
/// of time. Launches nothing. Throws InputError for a shape out of range (see MoeShape),
/// CudaError on an NVRTC failure.
void precompile_aot_kernels(jit::JitRuntime& rt, const MoeShape& s);

/// gating_logits bf16/f32 [M, E] (innermost contiguous) -> topk_weights f32 [M, top_k],
/// topk_ids int32 [M, top_k] (both contiguous): softmax over E in float32, the top_k largest
/// (ties: lower expert index), renormalized when s.renormalize. M == 0 launches nothing.
void topk_softmax(jit::JitRuntime& rt, const MoeShape& s, const at::Tensor& gating_logits,
                  const at::Tensor& topk_weights, const at::Tensor& topk_ids);

/// vLLM's grouped_topk op with sigmoid scoring (moe_grouped_topk.cu):
/// gating_logits float32 [M, E] (innermost contiguous), e_score_correction_bias float32 [E]
/// (contiguous) -> topk_weights f32 [M, top_k], topk_ids int32 [M, top_k] (both contiguous).
/// Experts are ranked by sigmoid(logit) + bias within the s.topk_group best of s.n_group groups
/// (ties: lower index); the weights are the unbiased sigmoid scores, renormalized (sum + 1e-20)
/// when s.renormalize, times s.routed_scaling_factor. Needs top_k <= 32, n_group <= 32 dividing
/// E, 1 <= topk_group <= n_group, top_k <= topk_group * E / n_group (InputError otherwise).
/// M == 0 launches nothing.
void grouped_topk(jit::JitRuntime& rt, const MoeShape& s, const at::Tensor& gating_logits,
                  const at::Tensor& e_score_correction_bias, const at::Tensor& topk_weights,
                  const at::Tensor& topk_ids);

/// Where configs come from: a directory of vLLM tables and the device name vLLM would use
/// (torch.cuda.get_device_name(), e.g. "NVIDIA H200"; jit::vllm_device_name maps it).
struct ConfigSource {
  std::string table_dir;
  std::string device_name;
};

/// vLLM's config for M tokens: the entry of <table_dir>/E=<E>,N=<N>,device_name=<dev>.json
/// nearest to M (selector "table", tuning_key "M=<M> -> <key>"), or get_default_config(M, E)
/// when there is no such file (selector "default"). Throws InputError for a bad table file.
jit::Selection select_config(const ConfigSource& src, const MoeShape& s, int64_t M);

/// The token counts M in [1, max_tokens] whose fused_experts calls reach different GEMM compile
/// keys, each class given by its smallest M, ascending (issue 29's envelope classes for this
/// family). Two counts are in one class when they select the same config (the table entry
/// nearest M, or get_default_config(M)), the same naive / aligned block assignment, and the same
/// Triton specialization (== 1, % 16, neither) of each M-dependent int argument of the two GEMMs:
/// num_valid_tokens (M * top_k) and each GEMM's EM. The AOT kernels' keys do not depend on M.
/// Proved against every M by a key-only test. Throws InputError for a bad shape or table.
std::vector<int64_t> envelope_token_classes(const ConfigSource& src, const MoeShape& s,
                                            int64_t max_tokens);

/// out bf16 [M, H] = sum_k w_k * W2_e(act(W13_e x)) over the top-k experts, act = silu(g) * u
/// (gated, w13 = [g; u]) or relu(x)^2 (s.activation == kRelu2NoMul).
/// hidden bf16 [M, H] contiguous; w13 bf16 [E, 2N, H] (gated) or [E, N, H] (non-gated); w2 bf16
/// [E, H, N] (both with a contiguous innermost dimension); topk_weights f32 [M, top_k] and
/// topk_ids int32 [M, top_k], contiguous; out bf16 [M, H], innermost contiguous. Runs the GEMMs
/// under a jit::SelectionScope of select_config(src, s, M) and returns that Selection (so the caller can record which config
/// each M used). M == 0 launches nothing. topk_ids outside [0, E) are skipped by the aligned path
/// and undefined behaviour on the naive path (as in vLLM).
jit::Selection fused_experts(jit::JitRuntime& rt, const MoeShape& s, const ConfigSource& src,
                             const at::Tensor& hidden, const at::Tensor& w13, const at::Tensor& w2,
                             const at::Tensor& topk_weights, const at::Tensor& topk_ids,
                             const at::Tensor& out);

/// fused_experts with a given selection (sel.config is the GEMM config; the compiles record
/// sel's provenance): for tests and benchmarks that force a config.
void fused_experts_with(jit::JitRuntime& rt, const MoeShape& s, const jit::Selection& sel,
                        const at::Tensor& hidden, const at::Tensor& w13, const at::Tensor& w2,
                        const at::Tensor& topk_weights, const at::Tensor& topk_ids,
                        const at::Tensor& out);

// ---- the steps, one kernel each (fused_experts calls them) ------------------------------------

/// moe_align_block_size: topk_ids int32 [M, top_k] contiguous -> sorted_token_ids int32
/// [max_num_tokens_padded(M * top_k, E, block_m)], expert_ids int32 [cdiv(that, block_m)],
/// num_tokens_post_padded int32 [1] (at::empty on topk_ids' device; see fused_moe_kernels.h).
struct Alignment {
  at::Tensor sorted_token_ids;  ///< undefined on the naive path
  at::Tensor expert_ids;
  at::Tensor num_tokens_post_padded;
};
Alignment align_block_size(jit::JitRuntime& rt, const MoeShape& s, const at::Tensor& topk_ids,
                           int64_t block_m);

/// vLLM's _prepare_expert_assignment: the naive assignment (no kernel: expert_ids =
/// topk_ids.view(-1), num_tokens_post_padded = at::full({1}, M * top_k * block_m)) when
/// uses_naive_block_assignment(M, top_k, E), else align_block_size.
Alignment prepare_expert_assignment(jit::JitRuntime& rt, const MoeShape& s,
                                    const at::Tensor& topk_ids, int64_t block_m);

/// One grouped GEMM (fused_moe_gemm): c[t, :] = a[t / top_k, :] x b[e]^T (* topk_weights.flat[t]
/// when mul_routed_weight) for the pairs t of `asg`, with config `cfg`.
/// - a: bf16 [rows, K], innermost contiguous; b: bf16 [E, Nout, K], innermost contiguous
/// - c: bf16 [num_pairs / top_k, top_k, Nout] or [num_pairs, Nout] (c.stride(-2) rows apart)
///   with a contiguous innermost dimension; num_pairs = rows * top_k
/// - topk_weights: float32 contiguous with num_pairs elements (read when mul_routed_weight)
void gemm(jit::JitRuntime& rt, const jit::KernelConfig& cfg, const at::Tensor& a,
          const at::Tensor& b, const at::Tensor& c, const at::Tensor& topk_weights,
          const Alignment& asg, bool mul_routed_weight, int top_k);

/// out bf16 [T, d] = silu(input[:, :d]) * input[:, d:], input bf16 [T, 2d]; both innermost
/// contiguous.
void silu_and_mul(jit::JitRuntime& rt, const at::Tensor& out, const at::Tensor& input);

/// vLLM's relu2_no_mul activation, as its two torch ops: input.relu_() (input is MODIFIED in
/// place), then out = input^2 (at::square_out), both in bf16. out and input bf16 [T, d], innermost
/// contiguous. No kernel is compiled (vLLM runs torch's own kernels here).
void relu2_no_mul(const at::Tensor& out, const at::Tensor& input);

/// out bf16 [M, H] (innermost contiguous) = sum over dimension 1 of input bf16 [M, top_k, H]
/// (contiguous).
void moe_sum(jit::JitRuntime& rt, const at::Tensor& input, const at::Tensor& out);

}  // namespace coldstart::fused_moe
