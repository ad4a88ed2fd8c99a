// Host (CPU, libtorch) reference pieces the kernel families share, for tests
// (cs_kernels_reference): paged-cache slot arithmetic and float64 split-KV decode attention.
// Inputs may be on any device; outputs are CPU tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace coldstart::kernels::ref {

/// Cache slots of tokens [first, first + num_tokens) of one sequence, int64 CPU [num_tokens]:
/// block_table_row[t / block_size] * block_size + t % block_size.
at::Tensor token_slots(const at::Tensor& block_table_row, int64_t block_size, int64_t first,
                       int64_t num_tokens);

/// Decode attention result: out float64 [B, Hq, D], lse float64 [B, Hq] (natural log of the sum
/// of exp(sm_scale * q.k); -inf and a zero output for an empty sequence).
struct Attention {
  at::Tensor out;
  at::Tensor lse;
};

/// Float64 decode attention of q [B, Hq, D] over per-sequence keys[b] / values[b]
/// [L_b, Hk, D]; query head h reads KV head h / (Hq / Hk). Throws Error "<family> reference:
/// decode_attention needs one key and value tensor per sequence" unless there are B of each.
Attention decode_attention(const char* family, const at::Tensor& q,
                           const std::vector<at::Tensor>& keys,
                           const std::vector<at::Tensor>& values, double sm_scale);

}  // namespace coldstart::kernels::ref
