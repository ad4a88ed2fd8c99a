// Host (CPU, libtorch) reference of the gdn_chunk kernels, for tests: the post-conv preparation
// and the gated delta rule as the token-by-token recurrence it is defined by, both in float64.
// Inputs may be on any device; outputs are CPU float64 tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "harness/kernels/gdn_chunk/gdn_chunk_kernels.h"

namespace coldstart::gdn_chunk::ref {

/// fused_post_conv's math: q, k [T, Hk, K] L2-normalized per head (x / sqrt(sum x^2 + 1e-6)),
/// v [T, Hv, V], g = -exp(A_log) * softplus(a + dt_bias) (x itself above 20), beta = sigmoid(b),
/// g and beta [T, Hv]. conv_out [T, >= conv_dim] (the first conv_dim columns are read), a, b
/// [T, Hv], A_log, dt_bias [Hv].
struct PostConv {
  at::Tensor q, k, v, g, beta;
};
PostConv post_conv(const GdnDims& d, const at::Tensor& conv_out, const at::Tensor& a,
                   const at::Tensor& b, const at::Tensor& A_log, const at::Tensor& dt_bias);

/// The recurrence per sequence and value head h (key head h / (Hv / Hk)), state S [V, K]:
///   S = exp(g_t) S;  u = beta_t (v_t - S k_t);  S = S + u k_t^T;  o_t = S (scale q_t).
/// q, k [T, Hk, K], v [T, Hv, V], g, beta [T, Hv], initial_state [S, Hv, V, K] (undefined =
/// zeros). Returns out [T, Hv, V] and final_state [S, Hv, V, K]. Throws coldstart::Error when
/// the lengths do not sum to T.
struct Recurrent {
  at::Tensor out, final_state;
};
Recurrent gated_delta_rule(const GdnDims& d, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
                           double scale, const std::vector<int>& seq_lens,
                           const at::Tensor& initial_state);

}  // namespace coldstart::gdn_chunk::ref
