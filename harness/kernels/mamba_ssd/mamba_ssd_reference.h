// Host (CPU, libtorch) reference of the Mamba2 SSD chunked scan, for tests: the token-by-token
// state-space recurrence the chunked chain computes, in float64. Inputs may be on any device;
// outputs are CPU float64 tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace coldstart::mamba_ssd::ref {

/// Output and final state of the recurrence.
struct Recurrent {
  at::Tensor out;          ///< [T, H, P]
  at::Tensor final_state;  ///< [S, H, P, N], one per sequence
};

/// Per sequence s (tokens in packing order, lengths seq_lens) and head h, group g = h / (H / G),
/// state S [P, N] = initial_states[s, h] (zeros when undefined), for each token t:
///   d = dt[t, h] + dt_bias[h] (no bias when undefined); d = softplus(d) = log(1 + exp(d)) when
///   dt_softplus and d <= 20; d = min(max(d, dt_lo), dt_hi);
///   S = exp(d A[h]) S + d x[t, h, :]^T B[t, g, :];
///   out[t, h, p] = sum_n S[p, n] C[t, g, n] + D x[t, h, p]  (D [H] or [H, P]; 0 when undefined).
/// x [T, H, P], dt [T, H], A [H], B and C [T, G, N]. Throws coldstart::Error when the lengths do
/// not sum to T.
Recurrent ssd_recurrence(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                         const at::Tensor& B, const at::Tensor& C, const at::Tensor& D,
                         const at::Tensor& dt_bias, const std::vector<int64_t>& seq_lens,
                         const at::Tensor& initial_states, bool dt_softplus, double dt_lo,
                         double dt_hi);

}  // namespace coldstart::mamba_ssd::ref
