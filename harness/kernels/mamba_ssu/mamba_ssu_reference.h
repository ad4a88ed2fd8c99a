// Host (CPU, libtorch) float64 reference of one Mamba2 selective state update step, for tests.
// Inputs may be on any device and have any strides (they are copied); outputs are CPU float64.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace coldstart::mamba_ssu::ref {

/// What a selective_state_update call computes.
struct Result {
  at::Tensor out;      ///< float64 [B, H, P]
  at::Tensor state;    ///< float64 copy of the state [slots, H, P, N] with the stored slots replaced
  at::Tensor written;  ///< bool [slots]: slots the call stores to
};

/// The math of mamba_ssu::selective_state_update (same arguments and slot rules, mamba_ssu.h),
/// in float64 from the inputs' values: per row b and head h (group g = h / (H / G)),
///   dt' = softplus(dt[b, h] + dt_bias[h]) (log1p(exp(.)) up to 20, identity above; only when
///   dt_softplus), s = state[src] * exp(dt' * A[h]) + (dt' * B[b, g]) (outer) x[b, h],
///   out[b, h] = s . C[b, g] + D[h] * x[b, h], state[dst] = s,
/// with src / dst from column 0 of the index tensors (row b when undefined); with index tensors,
/// src == null_block_id starts from zeros and stores nothing. Every row reads the input state (the kernel's programs
/// run concurrently): throws Error when a row reads a slot another row of the call stores to.
Result selective_state_update(const at::Tensor& state, const at::Tensor& x, const at::Tensor& dt,
                              const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
                              const at::Tensor& D, const at::Tensor& dt_bias, bool dt_softplus,
                              const at::Tensor& state_batch_indices,
                              const at::Tensor& dst_state_batch_indices, int64_t null_block_id);

}  // namespace coldstart::mamba_ssu::ref
