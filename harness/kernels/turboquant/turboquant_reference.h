// Host (CPU, libtorch) reference of the TurboQuant 4-bit KV cache math, for tests. Float64
// rotation and attention; the value path mirrors the kernels' float32 arithmetic so value bytes
// match exactly. Inputs may be on any device and of any floating dtype; outputs are CPU tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "harness/kernels/turboquant/turboquant_kernels.h"
#include "harness/kernels/reference_util.h"

namespace coldstart::tq::ref {

/// Normalized Sylvester-Hadamard matrix, float64 [D, D]: H[i][j] = (-1)^popcount(i & j) / sqrt(D).
at::Tensor hadamard(int64_t head_dim);

/// The 16 standard-normal Lloyd-Max centroids, ascending, float64 [16] (not divided by sqrt(D)).
at::Tensor centroids();

/// Quantized keys: indices uint8 [..., D] in 0..15 and the fp16 norm, float16 [...].
struct QuantizedKeys {
  at::Tensor indices;
  at::Tensor norm;
};

/// Quantized values: indices uint8 [..., D] in 0..15, scale and zero float16 [...].
struct QuantizedValues {
  at::Tensor indices;
  at::Tensor scale;
  at::Tensor zero;
};

/// key: float [..., D] (D a power of two). Rotation and normalization in float64; a coordinate's
/// index is the number of (float32) decision boundaries strictly below it.
QuantizedKeys quantize_keys(const at::Tensor& key);
/// float64 [..., D]: H (norm * c / |c|) with c the centroid vector.
at::Tensor dequantize_keys(const QuantizedKeys& q);

/// value: float [..., D]. float32 arithmetic, as the kernel does.
QuantizedValues quantize_values(const at::Tensor& value);
/// float64 [..., D]: zero + scale * index.
at::Tensor dequantize_values(const QuantizedValues& q);

/// What the cache decodes to for these inputs (quantize then dequantize), float64 [..., D].
at::Tensor roundtrip_keys(const at::Tensor& key);
at::Tensor roundtrip_values(const at::Tensor& value);

/// Packs into cache slots: uint8 [..., slot_bytes] (byte map in tq_common.cuh).
at::Tensor pack_slots(const TqLayout& layout, const QuantizedKeys& k, const QuantizedValues& v);
/// Inverse of pack_slots; slots: uint8 [..., slot_bytes].
std::pair<QuantizedKeys, QuantizedValues> unpack_slots(const TqLayout& layout,
                                                       const at::Tensor& slots);

/// Raw slot bytes of one sequence: uint8 [num_tokens, Hk, slot_bytes], gathered from `cache`
/// (uint8 [num_blocks, block_size, Hk, slot_bytes]) through `block_table_row` (int32).
at::Tensor gather_slots(const TqLayout& layout, const at::Tensor& cache,
                        const at::Tensor& block_table_row, int64_t num_tokens);

/// What tq_dequant_kv computes, from the cache bytes: K and V float64 [num_tokens, Hk, D].
std::pair<at::Tensor, at::Tensor> dequant_sequence(const TqLayout& layout, const at::Tensor& cache,
                                                   const at::Tensor& block_table_row,
                                                   int64_t num_tokens);

/// Decode attention result: out float64 [B, Hq, D], lse float64 [B, Hq] (reference_util.h).
using Attention = kernels::ref::Attention;

/// Float64 decode attention (kernels::ref::decode_attention; errors say "turboquant reference").
Attention decode_attention(const at::Tensor& q, const std::vector<at::Tensor>& keys,
                           const std::vector<at::Tensor>& values, double sm_scale);

}  // namespace coldstart::tq::ref
