// Gated delta net (GDN) decode of Qwen3-Next-style linear-attention layers: the runtime-compiled
// kernels' sources, their constexprs and compile keys, the MTP kernel's value-tile rule, and the
// representative compile cases. Torch-free (the torch-side launch wrappers are in gdn_decode.h;
// the libtorch reference in gdn_decode_reference.h).
//
// Kernels (harness/kernels/gdn_decode/; argument order documented atop each .cu file):
//   gdn_decode_update  vLLM's fused_sigmoid_gating_delta_rule_update_kernel (Triton, FLA):
//                      one decode step (or a spec-decode request's tokens) per (sequence, value
//                      head, BV rows of the state), state updated in place in the state cache
//   gdn_decode_mtp     vLLM's fused GDN decode with post-conv split and gated RMSNorm for
//                      speculative decoding (CUDA op fused_gdn_decode_post_conv_mtp; ROCm Triton
//                      port fused_gdn_decode_post_conv_mtp_triton), value tile BV by request count
//
// Recurrence per value head hv (key head hv / (Hv / Hk)), state S [V, K]:
//   g = -exp(A_log) * softplus(a + dt_bias); beta = sigmoid(b); q, k L2-normalized in-kernel;
//   S = exp(g) * S; u = beta * (v - S k); S = S + u k^T; o = S (q * scale).
#pragma once

#include <cstdint>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/kernel_registry.h"
#include "harness/kernels/model_shapes.h"

namespace coldstart::gdn_decode {

/// Head geometry of one GDN layer (per tensor-parallel rank). Qwen3-Next-80B-A3B at TP1:
/// {16, 32, 128, 128}.
struct GdnDims {
  int num_k_heads;  ///< Hk: query / key heads
  int num_v_heads;  ///< Hv: value heads, a multiple of Hk
  int head_k_dim;   ///< K
  int head_v_dim;   ///< V
};

/// A served model's GDN heads (kernels/model_shapes.h) as this family's dims.
inline GdnDims gdn_dims(const kernels::shapes::GdnHeads& h) {
  return {h.num_k_heads, h.num_v_heads, h.head_k_dim, h.head_v_dim};
}

/// Throws InputError (naming `who`) unless: all positive; Hv a multiple of Hk; K and V in
/// {32, 64, 128, 256} (the update kernel's limits).
void check_dims(const char* who, const GdnDims& d);

/// Element type of the SSM state cache. vLLM's MambaStateDtypeCalculator
/// (vllm/model_executor/layers/mamba/mamba_utils.py, gated_delta_net_state_dtype) gives the model
/// dtype (bf16) unless --mamba-ssm-cache-dtype says otherwise (float32 is the common override).
/// The value is the kernels' STATE_DTYPE constexpr.
enum class StateDtype : int { kBF16 = 0, kF32 = 1 };

/// Element type of a small parameter tensor (dt_bias, norm_weight): the value is the kernels'
/// DT_BIAS_DTYPE / NORM_WEIGHT_DTYPE constexpr.
enum class ParamDtype : int { kF32 = 0, kBF16 = 1 };

/// vLLM's BV of the update kernel: min(next_power_of_2(V), 32) (fused_sigmoid_gating.py).
int update_value_tile(const GdnDims& d);

/// Threads per CTA: update 128 (vLLM num_warps = 4), MTP 256 (the CUDA kernel's kThreads).
constexpr int kUpdateThreads = 128;
constexpr int kMtpThreads = 256;

/// Most tokens per request the MTP kernel runs (the CUDA kernel's kMaxMtpTokens; vLLM's
/// MAX_FUSED_GDN_MTP_TOKENS); state_indices has at most this many columns.
constexpr int kMtpMaxTokens = 8;

/// Arrival counters of the MTP kernel's split-V normalization (BV < V): num_reqs * Hv must not
/// exceed this (gdn_decode_mtp.cu).
constexpr int64_t kMtpArrivalSlots = 65536;

/// The value tile the MTP kernel picks for `num_reqs` requests on `num_sms` SMs. [inference from
/// the seed qwen_triton_warmup.py, whose smallest request counts selecting BV = 32, 64 and V are
/// 1, ceil(num_sms / Hv) and 4 * num_sms / Hv + 1:] BV = 32 while num_reqs * Hv < num_sms,
/// 64 while num_reqs * Hv <= 4 * num_sms, else V; never more than V. On 132 SMs with Hv = 32:
/// 1..4 requests -> 32, 5..16 -> 64, 17+ -> 128. Throws InputError for num_reqs < 1,
/// num_sms < 1 or bad dims.
int mtp_value_tile(int num_reqs, int num_sms, const GdnDims& d);

/// The request counts at which mtp_value_tile first selects each tile (the seed's warmup list,
/// sorted and deduplicated): {1, ceil(num_sms / Hv), 4 * num_sms / Hv + 1}.
std::vector<int> mtp_warmup_request_counts(int num_sms, const GdnDims& d);

/// The runtime-compiled kernels (sources embedded at build time).
const jit::KernelSource& update_kernel();  ///< gdn_decode_update, do_not_specialize {N, T}
const jit::KernelSource& mtp_kernel();     ///< gdn_decode_mtp
std::vector<const jit::KernelSource*> all_kernels();

/// What of a decode-update call enters its constexprs (vLLM's heuristics and strides).
struct UpdateConfig {
  int64_t batch_constexpr = 1;      ///< B: q.shape[0] of vLLM's [B, T, H, K] (1 under cu_seqlens)
  int64_t state_stride = 0;         ///< state.stride(0), elements (both state-stride constexprs)
  int64_t indices_stride_seq = 1;   ///< ssm_state_indices.stride(0)
  int64_t indices_stride_tok = 1;   ///< stride(1) for 2-D indices, else 1
  bool use_qk_l2norm = true;
  bool is_varlen = true;            ///< cu_seqlens given
  bool is_spec_decoding = false;    ///< num_accepted_tokens given
  StateDtype state_dtype = StateDtype::kBF16;
  ParamDtype dt_bias_dtype = ParamDtype::kF32;
};

/// Constexprs of gdn_decode_update in vLLM's order (B, H, HV, K, V, BK, BV, the four strides,
/// USE_INITIAL_STATE=1, INPLACE_FINAL_STATE=1, USE_QK_L2NORM_IN_KERNEL, IS_VARLEN,
/// IS_CONTINUOUS_BATCHING=1, IS_SPEC_DECODING, IS_KDA=0), then STATE_DTYPE and DT_BIAS_DTYPE.
std::vector<jit::Constexpr> update_constexprs(const GdnDims& d, const UpdateConfig& c);

/// What of an MTP call enters its constexprs.
struct MtpConfig {
  int value_tile = 128;  ///< BV (mtp_value_tile)
  StateDtype state_dtype = StateDtype::kF32;
  bool sigmoid_gate = false;  ///< output_gate_activation "sigmoid" (else "silu")
  ParamDtype dt_bias_dtype = ParamDtype::kF32;
  ParamDtype norm_weight_dtype = ParamDtype::kF32;
};

/// Constexprs of gdn_decode_mtp: H, HV, K, V, BV, STATE_DTYPE, SIGMOID_GATE, DT_BIAS_DTYPE,
/// NORM_WEIGHT_DTYPE. Throws InputError unless K = V = 128, Hv / Hk in {1, 2, 3, 4, 8}
/// (the CUDA op's checks) and BV in {32, 64, V}.
std::vector<jit::Constexpr> mtp_constexprs(const GdnDims& d, const MtpConfig& c);

/// Representative compile cases: the update kernel for Qwen3-Next TP1 (bf16 and float32 state,
/// plain decode with 1-D indices and spec decode with 2-D indices, a padded state-slot stride)
/// and the MTP kernel at each value tile, with serving-like argument specialization.
std::vector<KernelCompileCase> compile_cases();

}  // namespace coldstart::gdn_decode
