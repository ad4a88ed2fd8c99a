// Pieces every attention mixer shares: the prefill attention stand-in (libtorch SDPA) and the
// unpacking of an attention mixer's inputs.
#pragma once

#include <ATen/core/Tensor.h>

#include "harness/models/mixer.h"

namespace coldstart {

/// Causal attention of a prefill chunk: q [L, Hq, D] over k/v [C + L, Hk, D] (bf16), where the
/// chunk's tokens sit after C = `context` earlier tokens. Libtorch's scaled-dot-product attention
/// (an ahead-of-time kernel in an engine, never a JIT compile), timed by `spans` when given.
/// Returns [L, Hq * D] bf16. On the meta device (compile-only mode) only the shape is made: SDPA
/// has no C++ meta kernel for its masked path in libtorch 2.x, and libtorch 1.x has no SDPA.
at::Tensor chunk_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           int64_t context, GpuSpans* spans);

/// The softmax scale of a head of width `head_dim`: 1 / sqrt(head_dim).
float attention_scale(int64_t head_dim);

}  // namespace coldstart
