// Mamba ops, the state-space layers' shared kernels (vLLM "mamba ops", used by the Qwen3-Next GDN
// layer and by Mamba2 layers): causal conv1d prefill and decode over a slot cache of conv states,
// gated RMSNorm, and gather / scatter of dense state rows. Torch-free: the runtime-compiled
// kernels' sources, their constexprs as vLLM sets them, launch heuristics and the compile cases
// (the torch-side launch wrappers are in mamba_ops.h, the libtorch reference in
// mamba_ops_reference.h).
//
// vLLM sources mirrored (read with the stored copies of vllm-project/vllm; facts, not code):
//   causal conv1d  vllm/model_executor/layers/mamba/ops/causal_conv1d.py @ 03c6dad8
//                  (_causal_conv1d_fwd_kernel + causal_conv1d_fn: BLOCK_M = 8, BLOCK_N = 256,
//                  num_stages = 2, every stride a tl.constexpr, cu_seqlen a specialized int;
//                  _causal_conv1d_update_kernel + causal_conv1d_update: BLOCK_N = 256,
//                  batch a specialized int; IS_VARLEN = query_start_loc given (x flat
//                  [num_tokens, dim], stride_x_seq = stride_o_seq = 0, seqlen = max_query_len),
//                  IS_SPEC_DECODING = num_accepted_tokens given (state_len = width - 1 +
//                  (seqlen - 1), else width - 1); NP2_STATELEN / NP2_SEQLEN = next_power_of_2 of
//                  state_len / seqlen. Qwen3-Next's GDN layer calls it with both flags for
//                  speculative-decoding verify steps, max_query_len = num_speculative_tokens + 1)
//   conv state     vllm/model_executor/layers/mamba/mamba_utils.py @ 02d71083:
//                  get_conv_state_layout() defaults to "SD" (is_conv_state_dim_first() is False
//                  unless VLLM_SSM_CONV_STATE_LAYOUT=DS): a slot holds (state_len, dim), dim
//                  innermost; the kernels get the transposed view (dim, state_len) with
//                  stride_dim == 1 (causal_conv1d_fn asserts stride_istate_dim == 1)
//   gated RMSNorm  vllm/model_executor/layers/fla/ops/layernorm_guard.py @ 029329a8 (same kernel
//                  at vllm/third_party/flash_linear_attention/ops/layernorm_guard.py @ 6036290d):
//                  layer_norm_fwd_kernel, calc_rows_per_block, layer_norm_fwd (BLOCK_N, num_warps);
//                  vllm/model_executor/layers/layernorm.py @ 30f84e84: RMSNormGated.forward_cuda
//                  calls that file's rmsnorm_fn with no activation argument, i.e. "swish"
//   gather/scatter vllm/model_executor/layers/mamba/ops/gather_initial_states.py @ 15a3fd47,
//                  scatter_states.py @ c3a66755 (row_size / BLOCK_SIZE / launch_pdl constexprs,
//                  num_warps 8, no do_not_specialize)
//   PDL            vllm/platforms/cuda.py CudaPlatformBase.is_arch_support_pdl: capability major
//                  >= 9 (quoted verbatim by several downstream patch scripts; the stored copy of
//                  cuda.py, 002db495, predates the method), so SM90 launches with launch_pdl.
// None of these kernels is autotuned; none has a do_not_specialize list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/kernel_registry.h"

namespace coldstart::mamba_ops {

/// Activation of the conv kernels (kNone or kSilu) and of the gated RMSNorm's gate (kNone = no
/// gate, kSilu = vLLM's "swish" / "silu", kSigmoid = "sigmoid").
enum class Activation { kNone, kSilu, kSigmoid };

/// "none", "silu" or "sigmoid".
const char* activation_name(Activation act);

/// vLLM's PAD_SLOT_ID: a cache index equal to it makes the conv kernels skip the sequence.
constexpr int kPadSlotId = -1;
/// causal_conv1d_fn's BLOCK_M (tokens per program) and both conv kernels' BLOCK_N (channels per
/// program; here also the threads of a CTA).
constexpr int kConvBlockM = 8;
constexpr int kConvBlockN = 256;
/// Gather / scatter: BLOCK_SIZE = min(next_power_of_2(row_size), kStateBlockMax); 8 warps.
constexpr int kStateBlockMax = 1024;
constexpr int kStateThreads = 256;

/// Smallest power of two >= n (1 for n <= 1), as vLLM's next_power_of_2 / triton's.
int64_t next_power_of_2(int64_t n);

/// vLLM's ROWS_PER_BLOCK of the gated RMSNorm for M rows on num_sms SMs (layernorm_guard.py,
/// calc_rows_per_block): min(next_power_of_2(cdiv(M, 2 * num_sms)), 4). M <= 0 gives 1.
/// Throws InputError when num_sms <= 0.
int gated_rms_norm_rows_per_block(int64_t M, int num_sms);

/// The gated RMSNorm's BLOCK_N for a group of `group_size` bf16 columns (layer_norm_fwd:
/// min(65536 / element_size, next_power_of_2(group_size))). Throws InputError when group_size is
/// not positive or exceeds that bound (vLLM: "doesn't support feature dim >= 64KB").
int gated_rms_norm_block_n(int64_t group_size);

/// layer_norm_fwd's num_warps for a BLOCK_N: min(max(BLOCK_N / 256, 1), 8).
int gated_rms_norm_num_warps(int block_n);

/// Gather / scatter BLOCK_SIZE for a dense row of `row_size` elements (row_size > 0).
int64_t state_block_size(int64_t row_size);

/// vLLM's launch_pdl on a target arch ("sm_90", "sm_100a", ...): compute capability >= 9.0.
bool launch_pdl_for_arch(const std::string& arch);

/// Dtype code the kernels take for an element type: 0 float32, 1 float16, 2 bfloat16. Throws
/// InputError for any other dtype.
int dtype_code(jit::DType dtype);

/// The runtime-compiled kernels (sources embedded at build time).
const jit::KernelSource& conv_fwd_kernel();     ///< mamba_causal_conv1d_fwd
const jit::KernelSource& conv_update_kernel();  ///< mamba_causal_conv1d_update
const jit::KernelSource& gated_rms_norm_kernel();  ///< mamba_gated_rms_norm
const jit::KernelSource& gather_kernel();       ///< mamba_gather_initial_states
const jit::KernelSource& scatter_kernel();      ///< mamba_scatter_states
std::vector<const jit::KernelSource*> all_kernels();

/// What enters causal_conv1d_fn's constexprs. Strides in elements, in vLLM's kernel view: x and
/// out as (dim, token), conv states as (slot, dim, token).
struct ConvFwdSpec {
  int64_t dim = 0;
  int64_t num_cache_lines = 0;  ///< conv_states.size(0)
  int64_t stride_x_dim = 1, stride_x_token = 0;
  int64_t stride_w_dim = 0, stride_w_width = 1;
  int64_t stride_istate_seq = 0, stride_istate_dim = 1, stride_istate_token = 0;
  int64_t stride_cache_indices = 1;
  int64_t stride_o_dim = 1, stride_o_token = 0;
  int width = 4;
  bool has_bias = false;
  bool silu = true;
};
/// DIM, NUM_CACHE_LINES, the strides, PAD_SLOT_ID, HAS_BIAS, KERNEL_WIDTH, SILU_ACTIVATION,
/// USE_PAD_SLOT, NP2_STATELEN, BLOCK_M, BLOCK_N. Throws InputError for a width outside 2..4.
std::vector<jit::Constexpr> conv_fwd_constexprs(const ConvFwdSpec& s);

/// What enters causal_conv1d_update's constexprs (x / out as (seq, dim, token); varlen: x / out
/// flat (token, dim) with stride_x_seq = stride_o_seq = 0).
struct ConvUpdateSpec {
  int64_t dim = 0;
  int64_t seqlen = 1;
  int64_t num_cache_lines = 0;
  int64_t stride_x_seq = 0, stride_x_dim = 1, stride_x_token = 1;
  int64_t stride_w_dim = 0, stride_w_width = 1;
  int64_t stride_state_seq = 0, stride_state_dim = 1, stride_state_tok = 0;
  int64_t stride_state_indices = 1;
  int64_t stride_o_seq = 0, stride_o_dim = 1, stride_o_token = 1;
  int width = 4;
  bool has_bias = false;
  bool silu = true;
  bool varlen = false;         ///< IS_VARLEN: query_start_loc given; seqlen = max_query_len
  bool spec_decoding = false;  ///< IS_SPEC_DECODING: num_accepted_tokens given
};
/// DIM, SEQLEN, STATE_LEN (width - 1; width - 1 + (seqlen - 1) when spec_decoding),
/// NUM_CACHE_LINES, the strides, PAD_SLOT_ID, HAS_BIAS, KERNEL_WIDTH, SILU_ACTIVATION, IS_VARLEN,
/// IS_SPEC_DECODING, USE_PAD_SLOT, NP2_STATELEN, NP2_SEQLEN, BLOCK_N (vLLM @ 03c6dad8 also has
/// IS_APC_ENABLED and IS_EAGLE_TREE, always 0 here and left out of the key). Throws InputError
/// for a width outside 2..4 or seqlen < 1.
std::vector<jit::Constexpr> conv_update_constexprs(const ConvUpdateSpec& s);

/// N (= group_size), BLOCK_N, ROWS_PER_BLOCK, HAS_BIAS (0), HAS_Z (1), NORM_BEFORE_GATE,
/// IS_RMS_NORM (1), ACTIVATION (0 none, 1 swish, 2 sigmoid), W_DTYPE (weight dtype code).
std::vector<jit::Constexpr> gated_rms_norm_constexprs(int64_t group_size, int rows_per_block,
                                                      bool norm_before_gate, Activation act,
                                                      jit::DType weight_dtype);

/// ROW_SIZE, BLOCK_SIZE, LAUNCH_PDL, STATE_DTYPE, INDEX_BITS. Index dtype kI32 or kI64.
std::vector<jit::Constexpr> gather_constexprs(int64_t row_size, bool launch_pdl,
                                              jit::DType state_dtype, jit::DType index_dtype);

/// ROW_SIZE, BLOCK_SIZE, LAUNCH_PDL, SRC_DTYPE, STATE_DTYPE, INDEX_BITS.
std::vector<jit::Constexpr> scatter_constexprs(int64_t row_size, bool launch_pdl,
                                               jit::DType src_dtype, jit::DType state_dtype,
                                               jit::DType index_dtype);

/// Representative compile cases (Qwen3-Next-80B GDN shapes at TP 1: conv dim 8192, width 4,
/// head dim 128, 32 value heads, and its speculative-decoding verify update with
/// max_query_len 3; plus width 2 with bias and a sigmoid gate) for the multi-arch compile test.
std::vector<KernelCompileCase> compile_cases();

}  // namespace coldstart::mamba_ops
