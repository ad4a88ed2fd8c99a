// Gated delta net (GDN) decode of Qwen3-Next-style layers: torch-side launch wrappers of the
// runtime-compiled kernels (gdn_decode_kernels.h has the torch-free part: GdnDims, the tile rules,
// the constexprs).
//
// Every wrapper validates shapes, dtypes, layouts and devices (throwing coldstart::Error
// "gdn_decode::<function>: argument '<name>' ..."), builds the launch arguments and calls
// JitRuntime::launch on torch's current CUDA stream. In compile-only mode the tensors live on
// torch's meta device: the wrappers never read tensor data, call .item() or synchronize, so the
// compile keys are the ones a GPU run would produce.
//
// The state cache of a layer: state [num_slots, Hv, V, K] (vLLM's ssm_state = kv_cache[1]), bf16
// or float32 (StateDtype), the slot stride free (vLLM pads the slot to the hybrid page, so
// stride(0) >= Hv * V * K) and the rest contiguous; 16-byte aligned, stride(0) a multiple of 4.
// Units: token counts in tokens, strides in elements.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "harness/jit/jit.h"
#include "harness/kernels/gdn_decode/gdn_decode_kernels.h"

namespace coldstart::gdn_decode {

/// One decode step of a batch of sequences (kernel gdn_decode_update; vLLM's
/// fused_sigmoid_gating_delta_rule_update with initial_state = state, inplace_final_state = True).
/// T tokens in all; N sequences: N = cu_seqlens.size(0) - 1 when cu_seqlens is given (varlen,
/// vLLM's serving call), else N = T (one token per sequence).
/// - A_log: float32 [Hv], contiguous; dt_bias: float32 or bf16 [Hv], contiguous
/// - a, b: bf16 [T, Hv], innermost contiguous, any row stride (views of the ba projection)
/// - q, k: bf16 [T, Hk, K]; v: bf16 [T, Hv, V]; strides (any, K or V, 1): views of the conv
///   output [T, 2 * Hk * K + Hv * V] (row stride = conv dim); 8-byte aligned, row stride a
///   multiple of 4
/// - state: the state cache (see above); read at, and written back to, the slots below
/// - state_indices: int32, innermost contiguous: [>= N] (plain decode) or [>= N, W] (spec
///   decode: column t is where the state after token t is stored; the initial state is read
///   from column num_accepted_tokens[n] - 1, else column 0); a negative slot (PAD_SLOT_ID) skips:
///   a negative initial slot skips the whole sequence (its out rows are not written), a negative
///   column-t slot skips that store. Its strides enter the compile key (vLLM's constexprs).
/// - cu_seqlens: int32 [N + 1], contiguous, or undefined. vLLM always passes it
///   (qwen_gdn_linear_attn.py: non_spec_query_start_loc / spec_query_start_loc); without it this
///   is vLLM's non-varlen variant, whose B constexpr is the batch size, so every batch size is a
///   new compile key (as Triton would make it)
/// - num_accepted_tokens: int32 [N], contiguous, or undefined (requires cu_seqlens and 2-D
///   state_indices); values in 1..W
/// - out: bf16 [T, Hv, V], contiguous
/// - scale: > 0, usually K^-0.5; use_qk_l2norm_in_kernel: L2-normalize q and k (Qwen3-Next: true)
/// Compile key: B (1 under cu_seqlens, else N), the heads and dims, the state slot stride, the
/// state_indices strides, the flags and the dtypes; N and T are not specialized (vLLM's
/// do_not_specialize), the row strides and pointers are (Triton-style). T == 0 launches nothing.
/// Throws coldstart::Error naming the argument on any violation, InputError for bad dims.
void fused_sigmoid_gating_delta_rule_update(jit::JitRuntime& rt, const GdnDims& d,
                                            const at::Tensor& A_log, const at::Tensor& a,
                                            const at::Tensor& b, const at::Tensor& dt_bias,
                                            const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, const at::Tensor& state,
                                            const at::Tensor& state_indices,
                                            const at::Tensor& cu_seqlens,
                                            const at::Tensor& num_accepted_tokens,
                                            const at::Tensor& out, float scale,
                                            bool use_qk_l2norm_in_kernel);

/// The fused MTP decode (kernel gdn_decode_mtp; vLLM's fused_gdn_decode_post_conv_mtp, arguments
/// as the seed's fused_gdn_decode_post_conv_mtp_triton call). N requests of W tokens at most
/// (L tokens in all); K = V = 128, Hv / Hk in {1, 2, 3, 4, 8}.
/// - mixed_qkv: bf16 [L, 2 * Hk * K + Hv * V], innermost contiguous, any row stride (a view of
///   the packed QKVZ projection); 8-byte aligned, row stride a multiple of 4
/// - a, b: bf16 [L, Hv], innermost contiguous (views of the BA projection)
/// - A_log: float32 [Hv]; dt_bias: float32 or bf16 [Hv]; both contiguous
/// - state_indices: int32 [N, W], contiguous, 1 <= W <= 8; the initial state is read at column
///   num_accepted_tokens[r] - 1 (slot <= 0, or accepted outside 1..W: the request's outputs are
///   zero and nothing is read or written); the state after token t is stored at column t when
///   that slot is > 0 (slot 0 is vLLM's null block)
/// - cu_seqlens: int32 [N + 1]; num_accepted_tokens: int32 [N]; both contiguous. A request of
///   more than 8 tokens gets zero outputs.
/// - state: the state cache (see above), [slots, Hv, 128, 128]
/// - output_gate: bf16 [L, Hv, V], strides (any, V, 1) (the z projection)
/// - norm_weight: float32 or bf16 [V], contiguous
/// - out: bf16 [L, Hv, V], contiguous
/// - scale (K^-0.5), norm_eps (>= 0), activation "silu" or "sigmoid" (the output gate's)
/// - num_sms: SMs of the target; with N it picks BV (mtp_value_tile), a constexpr
/// Throws coldstart::Error naming the argument on any violation, InputError for bad dims.
void fused_gdn_decode_post_conv_mtp(jit::JitRuntime& rt, const GdnDims& d,
                                    const at::Tensor& mixed_qkv, const at::Tensor& a,
                                    const at::Tensor& b, const at::Tensor& A_log,
                                    const at::Tensor& dt_bias, const at::Tensor& state_indices,
                                    const at::Tensor& cu_seqlens,
                                    const at::Tensor& num_accepted_tokens,
                                    const at::Tensor& state, const at::Tensor& output_gate,
                                    const at::Tensor& norm_weight, const at::Tensor& out,
                                    float scale, float norm_eps, const std::string& activation,
                                    int num_sms);

}  // namespace coldstart::gdn_decode
