// Host (CPU, libtorch) reference of the mamba ops, for tests: float64 math, inputs on any device,
// CPU outputs. State copies (conv states, gathered / scattered rows) keep the state's dtype: the
// kernels move those values without arithmetic, so they compare bit for bit.
#pragma once

#include <ATen/core/Tensor.h>

#include "harness/kernels/mamba_ops/mamba_ops_kernels.h"

namespace coldstart::mamba_ops::ref {

/// Result of a conv reference: out float64 [T or B, dim] (NaN where the kernel writes nothing:
/// rows of skipped sequences), conv_states a CPU copy of the conv states (same dtype and shape)
/// after the update.
struct Conv {
  at::Tensor out;
  at::Tensor conv_states;
};

/// Prefill conv of causal_conv1d_fwd (mamba_ops.h): per sequence, h = (has_initial_state ? state
/// rows 0..width-2 : zeros) ++ x rows; out[t] = act(bias + sum_j w[:, j] * h[t + j]); the state's
/// rows 0..width-2 become the last width - 1 rows of h. cache index kPadSlotId skips.
Conv causal_conv1d_fwd(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& conv_states, const at::Tensor& query_start_loc,
                       const at::Tensor& cache_indices, const at::Tensor& has_initial_state,
                       bool silu);

/// Decode conv of causal_conv1d_update: one token per request against state rows 0..width-2,
/// which shift left by one with the token appended.
Conv causal_conv1d_update(const at::Tensor& x, const at::Tensor& conv_states,
                          const at::Tensor& weight, const at::Tensor& bias, bool silu,
                          const at::Tensor& conv_state_indices);

/// Speculative-decoding verify conv of causal_conv1d_update_varlen_spec: for each request b whose
/// slot is not kPadSlotId and whose token rows [qsl[b], qsl[b + 1]) are not empty, h = the slot's
/// state rows a .. a + width - 2 (a = num_accepted_tokens[b] - 1) followed by those x rows;
/// out[qsl[b] + t] = act(bias + sum_j w[:, j] * h[t + j]); then the slot's first
/// width - 2 + len rows become h without its first row. out is NaN on every row no request
/// writes (skipped requests, rows past qsl[B]).
Conv causal_conv1d_update_varlen_spec(const at::Tensor& x, const at::Tensor& conv_states,
                                      const at::Tensor& weight, const at::Tensor& bias, bool silu,
                                      const at::Tensor& conv_state_indices,
                                      const at::Tensor& num_accepted_tokens,
                                      const at::Tensor& query_start_loc);

/// Gated RMSNorm of gated_rms_norm, float64 [M, N].
at::Tensor gated_rms_norm(const at::Tensor& x, const at::Tensor& z, const at::Tensor& weight,
                          double eps, bool norm_before_gate, Activation act, int64_t group_size);

/// gather_initial_states: [n, state.shape[1:]...] of state's dtype.
at::Tensor gather_initial_states(const at::Tensor& state, const at::Tensor& indices,
                                 const at::Tensor& has_initial_state);

/// scatter_states: a CPU copy of state with rows indices[i] = src[i] cast to state's dtype.
at::Tensor scatter_states(const at::Tensor& state, const at::Tensor& src,
                          const at::Tensor& indices);

}  // namespace coldstart::mamba_ops::ref
