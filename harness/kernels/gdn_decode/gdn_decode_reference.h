// Host (CPU, libtorch) float64 reference of the GDN decode kernels, for tests: the gated delta
// rule token by token. Inputs may be on any device (views are copied); outputs are CPU float64.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "harness/kernels/gdn_decode/gdn_decode_kernels.h"

namespace coldstart::gdn_decode::ref {

/// What a decode call computes.
struct Result {
  at::Tensor out;      ///< float64 [T, Hv, V]; NaN in the rows the kernel does not write
  at::Tensor state;    ///< float64 copy of the input state with the stored slots replaced
  at::Tensor written;  ///< bool [num_slots]: slots the call stores to
};

/// fused_sigmoid_gating_delta_rule_update, same arguments and slot rules as the wrapper
/// (gdn_decode.h): per sequence n, the state of slot state_indices[n, i0] (i0 =
/// num_accepted_tokens[n] - 1, or 0; negative: the sequence is skipped) is carried through its
/// tokens; per token g = -exp(A_log) * softplus(a + dt_bias) (softplus threshold 20),
/// beta = sigmoid(b), q and k scaled by 1 / sqrt(sum + 1e-6) when `l2norm`, q *= scale,
/// S = exp(g) S, S += beta (v - S k) k^T, o = S q; the state after token t replaces slot
/// state_indices[n, t] when that slot is >= 0. Plain decode (cu_seqlens undefined): one token per
/// sequence. Throws Error if the state would be read from a slot an earlier sequence of the call
/// wrote (the kernel's programs run concurrently; tests use distinct slots).
Result decode_update(const GdnDims& d, const at::Tensor& A_log, const at::Tensor& a,
                     const at::Tensor& b, const at::Tensor& dt_bias, const at::Tensor& q,
                     const at::Tensor& k, const at::Tensor& v, const at::Tensor& state,
                     const at::Tensor& state_indices, const at::Tensor& cu_seqlens,
                     const at::Tensor& num_accepted_tokens, double scale, bool l2norm);

/// fused_gdn_decode_post_conv_mtp, same arguments and slot rules as the wrapper: q, k, v split
/// from mixed_qkv rows; the source slot state_indices[r, num_accepted_tokens[r] - 1] (accepted
/// outside 1..W, a slot <= 0 or more than 8 tokens: zero outputs, nothing stored); the
/// recurrence as above with softplus threshold 20 and in-kernel L2 norm; every token's state
/// stored at column t when that slot is > 0; out = o / sqrt(mean(o^2) + eps) * norm_weight *
/// gate(output_gate), gate = sigmoid or silu ("sigmoid" / "silu").
Result mtp(const GdnDims& d, const at::Tensor& mixed_qkv, const at::Tensor& a,
           const at::Tensor& b, const at::Tensor& A_log, const at::Tensor& dt_bias,
           const at::Tensor& state_indices, const at::Tensor& cu_seqlens,
           const at::Tensor& num_accepted_tokens, const at::Tensor& state,
           const at::Tensor& output_gate, const at::Tensor& norm_weight, double scale,
           double norm_eps, const std::string& activation);

}  // namespace coldstart::gdn_decode::ref
