// Qwen3-Next gated-delta-net chunked prefill: torch launch wrappers of the gdn_chunk kernels
// (gdn_chunk_kernels.h has the kernels, candidate lists and scratch layout; GdnDims,
// chunk_scratch_bytes and chunk_scratch_layout are declared there, in this namespace).
//
// Every wrapper validates its arguments (coldstart::Error "gdn_chunk::<fn>: argument '<name>'
// ..."), never reads tensor data or synchronizes, and launches on torch's current stream of the
// output's device; in compile-only mode (tensors on the meta device) kernels are compiled, never
// launched, with the compile keys a GPU run would have.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/gdn_chunk/gdn_chunk_kernels.h"

namespace coldstart::gdn_chunk {

/// Outputs of fused_post_conv (caller-allocated, contiguous):
/// q, k bf16 [T, Hk, K]; v bf16 [T, Hv, V]; g, beta float32 [T, Hv] (the dtypes vLLM's
/// fused_post_conv_prep returns).
struct PostConvOut {
  at::Tensor q, k, v, g, beta;
};

/// vLLM's fused_post_conv_prep (apply_l2norm=True, output_g_exp=False), one kernel, not tuned:
/// - conv_out bf16 [T, >= conv_dim()] with a contiguous inner dimension (any row stride; the
///   first conv_dim() columns are [q heads | k heads | v heads]);
/// - a, b bf16 [T, Hv], inner dimension contiguous, any row stride (e.g. columns of a fused
///   projection output);
/// - A_log float32 [Hv]; dt_bias bf16 [Hv] (vLLM creates it in the model dtype);
/// - out: see PostConvOut; each tensor contiguous.
/// Writes q = l2norm(q_raw) and k = l2norm(k_raw) per head (eps 1e-6 under the square root),
/// v = v_raw, g = -exp(A_log) * softplus(a + dt_bias) (softplus threshold 20), beta = sigmoid(b).
/// T == 0 launches nothing. Throws coldstart::Error naming the argument on a wrong dtype, rank,
/// shape, layout or device; InputError from GdnDims::validate().
void fused_post_conv(jit::JitRuntime& rt, const GdnDims& d, const at::Tensor& conv_out,
                     const at::Tensor& a, const at::Tensor& b, const at::Tensor& A_log,
                     const at::Tensor& dt_bias, const PostConvOut& out);

/// The whole FLA prefill chain (vLLM chunk_gated_delta_rule_fwd, chunk 64, varlen):
/// chunk_local_cumsum -> chunk_scaled_dot_kkt_fwd -> solve_tril -> recompute_w_u_fwd ->
/// chunk_gated_delta_rule_fwd_h -> chunk_fwd_o. Per value head h (key head h / (Hv / Hk)), state
/// S [V, K] float32, for each token t in order:
///   S = exp(g_t) S;  u = beta_t (v_t - S k_t);  S = S + u k_t^T;  o_t = S (q_t * scale).
/// Arguments:
/// - q, k bf16 [T, Hk, K], v bf16 [T, Hv, V], contiguous (q and k L2-normalized by the caller,
///   as fused_post_conv does);
/// - g, beta float32 [T, Hv], contiguous; g is the per-token log decay (<= 0);
/// - scale: multiplies q (vLLM: K^-0.5);
/// - cu_seqlens int32 [S+1] on the device (0, then running sums of the lengths);
/// - seq_lens_host: the S lengths on the host (must sum to T; not checked against cu_seqlens,
///   which would need a device read); used for the chunk tables;
/// - initial_state float32 [S, Hv, V, K], contiguous (rows may be zero);
/// - out bf16 [T, Hv, V]: [Hv, V] contiguous inside a row, any row stride >= Hv * V;
/// - final_state float32 [S, Hv, V, K], contiguous;
/// - scratch uint8 1-D contiguous, >= chunk_scratch_bytes(d, T, seq_lens_host) bytes, 256-byte
///   aligned (its contents on entry do not matter).
/// Each of the six kernels is autotuned (jit::autotune) on the first call of its tuning key with
/// vLLM's candidate list for rt.arch(); later calls launch the remembered pick. On a GPU the
/// chunk tables are copied host -> device asynchronously on the current stream (from pinned
/// memory). T == 0 writes final_state = initial_state only through the kernels (S > 0) or
/// nothing (S == 0). Throws coldstart::Error naming the argument on a bad input, InputError on
/// bad dims or lengths.
void chunk_gated_delta_rule(jit::JitRuntime& rt, const GdnDims& d, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                            const at::Tensor& beta, float scale, const at::Tensor& cu_seqlens,
                            const std::vector<int>& seq_lens_host,
                            const at::Tensor& initial_state, const at::Tensor& out,
                            const at::Tensor& final_state, const at::Tensor& scratch);

}  // namespace coldstart::gdn_chunk
