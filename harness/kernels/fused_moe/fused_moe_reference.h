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

/// moe_align_block_size on the CPU: pairs of topk_ids [M, top_k] (flat index i) grouped by expert
/// in ascending order (pairs ascending inside an expert), each expert's group padded with `numel`
/// to a multiple of block_m. Ids outside [0, E) are skipped.
struct Align {
  at::Tensor sorted_token_ids;  ///< int64 [total]
  at::Tensor expert_ids;        ///< int64 [total / block_m]
  int64_t total = 0;            ///< num_tokens_post_padded
};
Align align_block_size(const at::Tensor& topk_ids, int64_t num_experts, int64_t block_m);

/// out float32 [M, H] = sum_k w[m, k] * w2[e] (silu(g) * u), [g; u] = w13[e] x[m], e = ids[m, k],
/// in float32 throughout (no intermediate rounding): hidden [M, H], w13 [E, 2N, H], w2 [E, H, N],
/// topk_weights [M, top_k], topk_ids [M, top_k]. Loops over the experts in use (one matmul per
/// expert and weight), so only those experts' weights are copied to the CPU.
at::Tensor fused_experts(const at::Tensor& hidden, const at::Tensor& w13, const at::Tensor& w2,
                         const at::Tensor& topk_weights, const at::Tensor& topk_ids);

}  // namespace coldstart::fused_moe::ref
