// Host (CPU, libtorch) reference of the paged KV cache and its attention, for tests. The fp8
// encoder is a nearest-value search over the E4M3 code table (independent of the kernels' bit
// manipulation); attention is float64. Inputs may be on any device; outputs are CPU tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "harness/kernels/paged/paged_kernels.h"
#include "harness/kernels/reference_util.h"

namespace coldstart::paged::ref {

/// Value of an E4M3 byte (OCP E4M3: bias 7, subnormals m * 2^-9, 0x7f / 0xff NaN, max 448).
double e4m3_value(uint8_t byte);

/// E4M3 byte nearest to x (ties to the even code), saturating to +-448; NaN -> 0x7f | sign.
/// Keeps the sign of zero (-0.0 and tiny negatives -> 0x80).
uint8_t e4m3_from_float(float x);

/// What paged_cache_store writes for `x` (bf16 [..., D], any device): for bf16 the same bf16
/// values; for fp8 uint8 e4m3(float(x) / scale) with the division in float32, as the kernel.
/// CPU tensor of cache_scalar_type(layout).
at::Tensor cache_elements(const PagedLayout& layout, const at::Tensor& x, float scale);

/// Float64 values of cache elements (bf16, or fp8 bytes times `scale`).
at::Tensor element_values(const PagedLayout& layout, const at::Tensor& elements, double scale);

/// Cached K and V of one sequence, float64 [num_tokens, Hk, D], read from `kv_cache`
/// ([2, num_blocks, block_size, Hk, D]) through `block_table_row` (int32).
std::pair<at::Tensor, at::Tensor> gather_sequence(const PagedLayout& layout,
                                                  const at::Tensor& kv_cache,
                                                  const at::Tensor& block_table_row,
                                                  int64_t num_tokens, double k_scale,
                                                  double v_scale);

/// Decode attention result: out float64 [B, Hq, D], lse float64 [B, Hq] (reference_util.h).
using Attention = kernels::ref::Attention;

/// Float64 decode attention (kernels::ref::decode_attention; errors say "paged reference").
Attention decode_attention(const at::Tensor& q, const std::vector<at::Tensor>& keys,
                           const std::vector<at::Tensor>& values, double sm_scale);

/// Float64 causal attention of one sequence's chunk: q [L, Hq, D] over keys / values [S, Hk, D]
/// (S >= L, the chunk being the last L tokens); query i sits at position S - L + i and sees
/// tokens [0, S - L + i]. Returns float64 [L, Hq, D].
at::Tensor prefill_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                             double sm_scale);

}  // namespace coldstart::paged::ref
