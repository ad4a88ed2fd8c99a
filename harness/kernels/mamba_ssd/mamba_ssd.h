// Mamba2 SSD chunked-scan prefill: torch launch wrappers of the mamba_ssd kernels
// (mamba_ssd_kernels.h has the kernels, candidate lists, tuning keys, SsdDims, ChunkMetadata and
// compute_chunk_metadata, all in this namespace).
//
// Every wrapper validates its arguments (coldstart::Error "mamba_ssd::<fn>: argument '<name>'
// ..."), never reads tensor data or synchronizes, allocates its outputs / intermediates with
// torch on the device of its inputs (vLLM's torch.empty), and launches on torch's current stream.
// Each kernel is autotuned (jit::autotune) on the first call of its tuning key (vLLM's key values
// plus the dtype or None of every tensor argument) with vLLM's candidate list; later calls launch
// the remembered pick. In compile-only mode (tensors on the meta device) kernels are compiled,
// never launched, with the compile keys a GPU run would have, and outputs are meta tensors.
//
// Layouts (T packed tokens, H heads, P = head_dim, G groups, N = dstate, cs = chunk_size):
//   x, out bf16 [T, H, P] and B, C bf16 [T, G, N]: innermost dimension contiguous, any even
//     token / head strides (views into the conv output and the output buffer), 4-byte aligned;
//   dt bf16 [T, H]: any strides (a column slice of the in_proj output);
//   dt / dA_cumsum intermediates f32 [H, nchunks, cs]; chunk states [nchunks, H, P, N];
//   CB f32 [nchunks, G, cs, cs]; chunk metadata int32, contiguous, on the device.
#pragma once

#include <ATen/core/Tensor.h>

#include "harness/jit/jit.h"
#include "harness/kernels/mamba_ssd/mamba_ssd_kernels.h"

namespace coldstart::mamba_ssd {

/// Outputs of chunk_cumsum_fwd: float32 [H, nchunks, chunk_size] each.
struct CumsumOut {
  at::Tensor dA_cumsum;  ///< inclusive cumsum of dt * A inside each chunk
  at::Tensor dt;         ///< processed dt (bias, softplus, clamp; 0 past the chunk's end)
};

/// vLLM _chunk_cumsum_fwd. dt bf16 [T, H] (any strides), A float32 [H] contiguous, dt_bias
/// float32 / bf16 [H] or undefined, cu_chunk_seqlens int32 [nchunks + 1]; dt_softplus and the
/// clamp range [dt_limit_lo, dt_limit_hi] (vLLM's Mamba2 call: true, 0, +inf).
CumsumOut chunk_cumsum_fwd(jit::JitRuntime& rt, const SsdDims& d, const at::Tensor& dt,
                           const at::Tensor& A, const at::Tensor& cu_chunk_seqlens,
                           const at::Tensor& dt_bias, bool dt_softplus, double dt_limit_lo,
                           double dt_limit_hi);

/// vLLM _chunk_state_fwd (states_in_fp32=True): float32 [nchunks, H, P, N], each chunk's own
/// contribution to the state. B bf16 [T, G, N], x bf16 [T, H, P], dt / dA_cumsum from
/// chunk_cumsum_fwd.
at::Tensor chunk_state_fwd(jit::JitRuntime& rt, const SsdDims& d, const at::Tensor& B,
                           const at::Tensor& x, const at::Tensor& dt, const at::Tensor& dA_cumsum,
                           const at::Tensor& cu_chunk_seqlens);

/// vLLM _state_passing_fwd: the state at the end of every chunk, [nchunks, H, P, N] in
/// `out_dtype` (the SSM cache dtype). states float32 [nchunks, H, P, N] contiguous (from
/// chunk_state_fwd), last_chunk_indices int32 [B], initial_states [B, H, P, N] (f32 / bf16 / f16,
/// innermost contiguous) or undefined (zero start).
at::Tensor state_passing_fwd(jit::JitRuntime& rt, const SsdDims& d, const at::Tensor& states,
                             const at::Tensor& dA_cumsum, const at::Tensor& last_chunk_indices,
                             const at::Tensor& initial_states, at::ScalarType out_dtype);

/// vLLM _bmm_chunk_fwd(C, B, causal=False, output_dtype=float32): CB float32
/// [nchunks, G, chunk_size, chunk_size].
at::Tensor bmm_chunk_fwd(jit::JitRuntime& rt, const SsdDims& d, const at::Tensor& C,
                         const at::Tensor& B, const at::Tensor& cu_chunk_seqlens);

/// vLLM _chunk_scan_fwd (z=None): writes out bf16 [T, H, P]. states [nchunks, H, P, N] from
/// state_passing_fwd, seq_idx int32 [nchunks], D [H] or [H, P] (f32 / bf16) or undefined,
/// initial_states as for state_passing_fwd.
void chunk_scan_fwd(jit::JitRuntime& rt, const SsdDims& d, const at::Tensor& CB,
                    const at::Tensor& x, const at::Tensor& dt, const at::Tensor& dA_cumsum,
                    const at::Tensor& C, const at::Tensor& states,
                    const at::Tensor& cu_chunk_seqlens, const at::Tensor& out,
                    const at::Tensor& seq_idx, const at::Tensor& D,
                    const at::Tensor& initial_states);

/// vLLM mamba_chunk_scan_combined_varlen (return_intermediate_states=False, z=None) as
/// MambaMixer2.conv_ssm_forward calls it: the five kernels above, then each sequence's final
/// state states[last_chunk_indices] (torch index_select; an uncomputed meta tensor in
/// compile-only mode). Per head h (group g = h / (H / G)) and sequence, with state S [P, N]
/// starting at initial_states[b, h] (zeros when undefined), for each token t in order:
///   dt_t = clamp(softplus(dt[t, h] + dt_bias[h]), lo, hi)   (softplus if dt_softplus, x <= 20)
///   S = exp(dt_t A[h]) S + dt_t x[t, h, :]^T B[t, g, :];
///   out[t, h, :] = S C[t, g, :] + D[h] x[t, h, :]
/// Arguments: x bf16 [T, H, P]; dt bf16 [T, H]; A float32 [H]; B, C bf16 [T, G, N];
/// chunk_size (power of two, 16..256); D float32 / bf16 [H] or [H, P] or undefined; dt_bias
/// float32 / bf16 [H] or undefined; seq_idx, cu_chunk_seqlens, last_chunk_indices: the chunk
/// metadata (compute_chunk_metadata) as int32 device tensors; cu_seqlens int32 [B + 1] (only its
/// length is used, as in vLLM); initial_states [B, H, P, N] or undefined; out bf16 [T, H, P]
/// (written); state_dtype: float32, bfloat16 or float16 (the SSM cache dtype).
/// Returns varlen_states [B, H, P, N] in state_dtype. T == 0 with B == 0 launches nothing.
/// Throws coldstart::Error naming the argument on a wrong dtype, rank, shape, layout, alignment
/// or device, InputError (from SsdDims::validate) on unsupported dims.
at::Tensor chunk_scan_combined_varlen(
    jit::JitRuntime& rt, const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
    const at::Tensor& B, const at::Tensor& C, int64_t chunk_size, const at::Tensor& D,
    const at::Tensor& dt_bias, const at::Tensor& seq_idx, const at::Tensor& cu_seqlens,
    const at::Tensor& cu_chunk_seqlens, const at::Tensor& last_chunk_indices,
    const at::Tensor& initial_states, bool dt_softplus, double dt_limit_lo, double dt_limit_hi,
    const at::Tensor& out, at::ScalarType state_dtype);

}  // namespace coldstart::mamba_ssd
