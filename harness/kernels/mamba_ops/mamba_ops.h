// Mamba ops (causal conv1d prefill / decode, gated RMSNorm, state gather / scatter): torch-side
// launch wrappers of the runtime-compiled kernels (mamba_ops_kernels.h: sources, constexprs,
// the vLLM files and commits they mirror).
//
// Every wrapper validates dtypes, ranks, shapes, layouts and devices (throwing coldstart::Error
// "mamba_ops::<function>: argument '<arg>' ...") and launches with JitRuntime::launch on torch's
// current CUDA stream. In compile-only mode the tensors live on the meta device and the runtime
// does not launch: the wrappers never read tensor data, call .item() or synchronize, so the
// compile keys equal a GPU run's. As in Triton, every integer and pointer argument is specialized
// (== 1, % 16, 16-byte alignment) and every vLLM constexpr (strides, dims, slot count) is part of
// the compile key. Empty batches launch (and compile) nothing.
//
// Conv state layout (vLLM's default "SD", mamba_utils.get_conv_state_layout):
//   conv_states [num_slots, state_rows, dim], bf16, innermost dimension contiguous
//   (stride(2) == 1); row 0 is the oldest token, state_rows >= width - 1 (width - 1 +
//   num_speculative_tokens under spec decode; the kernels here use rows 0 .. width - 2, except
//   causal_conv1d_update_varlen_spec). stride(0) is the slot page stride: a conv
//   state is a view into a bigger per-request page (conv + SSM state), so it is usually not
//   state_rows * dim; stride(1) is the row stride (usually dim). The kernels get vLLM's
//   transposed view (slot, dim, token): strides (stride(0), stride(2), stride(1)).
// A cache index equal to kPadSlotId (-1) skips its sequence; other negative indices, and indices
// >= num_slots, are out of contract (vLLM does not check them either).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "harness/jit/jit.h"
#include "harness/kernels/mamba_ops/mamba_ops_kernels.h"

namespace coldstart::mamba_ops {

/// Prefill causal conv1d over a varlen batch (kernel mamba_causal_conv1d_fwd; vLLM's
/// causal_conv1d_fn): out[t] = act(bias + sum_j weight[:, j] * h[t + j]) where h is the
/// sequence's history (its conv state when has_initial_state, else zeros) followed by its tokens.
/// - x: bf16 [T, dim], innermost contiguous; the row stride may be wider (a column slice of a
///   projection)
/// - weight: bf16 [dim, width], width 2..4 (any strides)
/// - bias: bf16 [dim], contiguous, or an undefined tensor (no bias)
/// - conv_states: bf16 [num_slots, state_rows >= width - 1, dim], stride(2) == 1 (see above);
///   slot cache_indices[b] is read (when has_initial_state[b]) and then overwritten with the last
///   width - 1 inputs of sequence b (history included when the sequence is shorter)
/// - query_start_loc: int32 [B + 1], contiguous; sequence b is rows [qsl[b], qsl[b + 1])
/// - cache_indices: int32 [B] (any stride); kPadSlotId skips the sequence: its output rows and
///   its state are not written
/// - has_initial_state: bool [B], contiguous
/// - act: kNone or kSilu
/// - out: bf16 [T, dim], innermost contiguous; must not overlap x (a later chunk reads x rows an
///   earlier chunk would have overwritten). Rows past qsl[B] are not written.
/// Throws Error naming the argument on any violation. B == 0 or T == 0 launches nothing.
void causal_conv1d_fwd(jit::JitRuntime& rt, const at::Tensor& x, const at::Tensor& weight,
                       const at::Tensor& bias, const at::Tensor& conv_states,
                       const at::Tensor& query_start_loc, const at::Tensor& cache_indices,
                       const at::Tensor& has_initial_state, Activation act,
                       const at::Tensor& out);

/// Decode causal conv1d, one token per request (kernel mamba_causal_conv1d_update; vLLM's
/// causal_conv1d_update without spec decode): out[b] = act(bias + sum_j w[:, j] * h_b[j]) with
/// h_b = conv state rows 0 .. width - 2 of slot conv_state_indices[b] followed by x[b]; the state
/// rows 0 .. width - 2 are then shifted left by one and x[b] appended (rows past width - 2 kept).
/// - x: bf16 [B, dim], innermost contiguous (any row stride)
/// - conv_states: as for causal_conv1d_fwd
/// - weight, bias: as for causal_conv1d_fwd
/// - act: kNone or kSilu
/// - conv_state_indices: int32 [B] (any stride); kPadSlotId skips the request (out row and state
///   untouched)
/// - out: bf16 [B, dim], innermost contiguous; may be x itself (same view), must not otherwise
///   overlap it
/// B == 0 launches nothing.
void causal_conv1d_update(jit::JitRuntime& rt, const at::Tensor& x, const at::Tensor& conv_states,
                          const at::Tensor& weight, const at::Tensor& bias, Activation act,
                          const at::Tensor& conv_state_indices, const at::Tensor& out);

/// Speculative-decoding verify step of the decode conv (kernel mamba_causal_conv1d_update with
/// IS_VARLEN = IS_SPEC_DECODING = 1; vLLM's causal_conv1d_update with query_start_loc and
/// num_accepted_tokens, as the GDN layer calls it for MTP verify rows). Request b owns token rows
/// [qsl[b], qsl[b + 1]) of x (len_b of them, 0 <= len_b <= max_query_len; len_b == 0 skips the
/// request). With a = num_accepted_tokens[b] - 1 (the previous step's accepted tokens end the
/// history), h_b = conv state rows a .. a + width - 2 of slot conv_state_indices[b] followed by
/// the request's tokens, and out[qsl[b] + t] = act(bias + sum_j w[:, j] * h_b[t + j]) for
/// t < len_b. The state's rows 0 .. width - 3 + len_b then become h_b[1 ..] (rows a + 1 ..
/// a + width - 2, then the tokens; the later rows are kept).
/// - x: bf16 [T, dim], innermost contiguous (any row stride); rows past qsl[B] are not read
/// - conv_states: as for causal_conv1d_fwd, with state_rows >= width - 1 + (max_query_len - 1)
///   (vLLM allocates width - 1 + num_speculative_tokens rows under spec decode)
/// - weight, bias: as for causal_conv1d_fwd
/// - act: kNone or kSilu
/// - conv_state_indices: int32 [B] (any stride); kPadSlotId skips the request (its out rows and
///   its state untouched)
/// - num_accepted_tokens: int32 [B], contiguous, each in 1 .. max_query_len
/// - query_start_loc: int32 [B + 1], contiguous, non-decreasing, qsl[B] <= T
/// - max_query_len: tokens of the longest request, or a bound on them (vLLM passes
///   num_speculative_tokens + 1); a compile-time constant of the kernel (SEQLEN; the state rows
///   the kernel rewrites, STATE_LEN = width - 1 + (max_query_len - 1), follow it), so another
///   value is another compile
/// - out: bf16 [T, dim], innermost contiguous; must not overlap x. Rows of skipped requests and
///   rows past qsl[B] are not written.
/// The per-request values (lengths, accepted counts) live on the device and are not checked.
/// Throws Error naming the argument on any other violation (max_query_len < 1, too few state
/// rows, dtypes, shapes, layouts, devices). B == 0 or T == 0 launches nothing.
void causal_conv1d_update_varlen_spec(jit::JitRuntime& rt, const at::Tensor& x,
                                      const at::Tensor& conv_states, const at::Tensor& weight,
                                      const at::Tensor& bias, Activation act,
                                      const at::Tensor& conv_state_indices,
                                      const at::Tensor& num_accepted_tokens,
                                      const at::Tensor& query_start_loc, int max_query_len,
                                      const at::Tensor& out);

// gated_rms_norm_rows_per_block(M, num_sms) is declared in mamba_ops_kernels.h (torch-free).

/// Gated RMSNorm (kernel mamba_gated_rms_norm; vLLM's rmsnorm_fn behind RMSNormGated):
/// for each row and each group of group_size columns, with g = act(z) (kNone: g = 1),
///   norm_before_gate:  out = x / rms(x) * weight * g
///   otherwise:         out = (x * g) / rms(x * g) * weight,   rms(v) = sqrt(mean(v^2) + eps)
/// - x, z: bf16 [M, N], innermost contiguous, any row stride (each its own)
/// - weight: bf16 or float32 [N], contiguous
/// - group_size: divides N, at most 32768
/// - num_sms: SM count of the target (ROWS_PER_BLOCK = gated_rms_norm_rows_per_block(M, num_sms)
///   is a constexpr: a different M bucket is a different compile)
/// - out: bf16 [M, N], innermost contiguous
/// M == 0 launches nothing.
void gated_rms_norm(jit::JitRuntime& rt, const at::Tensor& x, const at::Tensor& z,
                    const at::Tensor& weight, double eps, bool norm_before_gate, Activation act,
                    int64_t group_size, int num_sms, const at::Tensor& out);

/// out[i] = has_initial_state[i] ? state[indices[i]] : 0 (kernel mamba_gather_initial_states;
/// vLLM's gather_initial_states).
/// - state: float32 / float16 / bf16 [num_slots, ...] (rank >= 2) with state[0] contiguous (the
///   slot stride may be padded)
/// - indices: int32 or int64 [n], any stride; read for every row (also without initial state)
/// - has_initial_state: bool [n], any stride
/// - out: [n, state.shape[1:]...] of state's dtype, contiguous
/// - launch_pdl: vLLM's launch_pdl constexpr; default launch_pdl_for_arch(rt.arch()) (true on
///   SM90+). The harness launches without the programmatic attribute, so the kernel's
///   griddepcontrol wait returns at once; only the compile key changes.
/// n == 0 launches nothing.
void gather_initial_states(jit::JitRuntime& rt, const at::Tensor& state, const at::Tensor& indices,
                           const at::Tensor& has_initial_state, const at::Tensor& out,
                           std::optional<bool> launch_pdl = std::nullopt);

/// state[indices[i]] = src[i] (kernel mamba_scatter_states; vLLM's scatter_states): src may have
/// another dtype than state (float32 into bf16 / fp16 rounds to nearest even).
/// - state: float32 / float16 / bf16 [num_slots, ...] with state[0] contiguous
/// - src: float32 / float16 / bf16 [n, state.shape[1:]...] with src[0] contiguous (any row stride)
/// - indices: int32 or int64 [n], any stride; distinct slots (rows with equal slots race)
/// - launch_pdl: as for gather_initial_states
/// n == 0 launches nothing.
void scatter_states(jit::JitRuntime& rt, const at::Tensor& state, const at::Tensor& src,
                    const at::Tensor& indices, std::optional<bool> launch_pdl = std::nullopt);

}  // namespace coldstart::mamba_ops
