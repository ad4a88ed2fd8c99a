// Fused MoE: libtorch CPU reference of the kernels' math, for tests. Inputs may be on any device;
// outputs are CPU tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace coldstart::fused_moe::ref {

/// Router top-k: softmax of gating [M, E] in float64, the top_k largest per row (ties: lower
/// expert index), weights divided by their sum when `renormalize`.
struct TopK {
  at::Tensor weights;  ///< float64 [M, top_k]
  at::Tensor ids;      ///< int64 [M, top_k]
};
TopK topk_softmax(const at::Tensor& gating, int top_k, bool renormalize);

/// grouped_topk's selection scores in float64: sigmoid(logits) + bias [M, E], with -inf for the
/// experts outside the topk_group best of n_group groups (a group's score: the sum of its two
/// largest entries; equal group scores: lower group first). logits [M, E], bias [E].
at::Tensor grouped_topk_scores(const at::Tensor& logits, const at::Tensor& bias, int64_t n_group,
                               int64_t topk_group);

/// grouped_topk in float64: the top_k largest grouped_topk_scores per row (ties: lower expert
/// index), weights = routing_weights(logits, ids, renormalize, routed_scaling_factor).
TopK grouped_topk(const at::Tensor& logits, const at::Tensor& bias, int top_k, int64_t n_group,
                  int64_t topk_group, bool renormalize, double routed_scaling_factor);

/// The weights grouped_topk gives experts `ids` [M, top_k], float64: the unbiased sigmoid scores
/// sigmoid(logits[m, ids[m, k]]), divided by (their row sum + 1e-20) when `renormalize`, times
/// routed_scaling_factor.
at::Tensor routing_weights(const at::Tensor& logits, const at::Tensor& ids, bool renormalize,
                           double routed_scaling_factor);

/// moe_align_block_size on the CPU: pairs of topk_ids [M, top_k] (flat index i) grouped by expert
/// in ascending order (pairs ascending inside an expert), each expert's group padded with `numel`
/// to a multiple of block_m. Ids outside [0, E) are skipped.
struct Align {
  at::Tensor sorted_token_ids;  ///< int64 [total]
  at::Tensor expert_ids;        ///< int64 [total / block_m]
  int64_t total = 0;            ///< num_tokens_post_padded
};
Align align_block_size(const at::Tensor& topk_ids, int64_t num_experts, int64_t block_m);

/// out float32 [M, H] = sum_k w[m, k] * w2[e] act(w13[e] x[m]), e = ids[m, k], in float32
/// throughout (no intermediate rounding): act = silu(g) * u with [g; u] = w13[e] x (gated, w13
/// [E, 2N, H]) or relu(y)^2 with y = w13[e] x (not gated, w13 [E, N, H]); hidden [M, H], w2
/// [E, H, N], topk_weights [M, top_k], topk_ids [M, top_k]. Loops over the experts in use (one
/// matmul per expert and weight), so only those experts' weights are copied to the CPU.
at::Tensor fused_experts(const at::Tensor& hidden, const at::Tensor& w13, const at::Tensor& w2,
                         const at::Tensor& topk_weights, const at::Tensor& topk_ids,
                         bool gated = true);

/// NemotronH's MoE block in float32 on the CPU, given the routing: shared expert
/// shared_down(relu(shared_up h)^2) on hidden, plus fc2_latent(routed_scaling_factor *
/// fused_experts(fc1_latent h)) with the relu2 experts (fc1/fc2 and the shared expert optional,
/// as in fused_moe::NemotronMoeWeights). hidden [M, H]; topk_weights / topk_ids [M, top_k];
/// weights any float dtype and device. Returns float32 [M, H].
at::Tensor nemotron_moe(const at::Tensor& hidden, const at::Tensor& topk_weights,
                        const at::Tensor& topk_ids, const at::Tensor& fc1_latent,
                        const at::Tensor& fc2_latent, const at::Tensor& w13, const at::Tensor& w2,
                        const at::Tensor& shared_up, const at::Tensor& shared_down,
                        double routed_scaling_factor);

}  // namespace coldstart::fused_moe::ref
