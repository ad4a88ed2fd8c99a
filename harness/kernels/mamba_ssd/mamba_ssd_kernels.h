// Mamba2 SSD (state-space duality) chunked-scan prefill, the chain vLLM's MambaMixer2 runs for
// the prefill part of a batch (mamba_chunk_scan_combined_varlen). Torch-free: the runtime-compiled
// kernels' sources, their constexprs and autotune candidate lists as vLLM declares them, the
// autotune keys, launch geometry and the host-side chunk metadata. The torch launch wrappers are
// in mamba_ssd.h, the float64 reference in mamba_ssd_reference.h.
//
// Kernels (harness/kernels/mamba_ssd/, argument order atop each .cu file), each autotuned:
//   mamba_ssd_cumsum         _chunk_cumsum_fwd_kernel: dt (softplus, bias, clamp), cumsum dt*A  6
//   mamba_ssd_chunk_state    _chunk_state_fwd_kernel: per-chunk state x^T (B dt decay)        14
//   mamba_ssd_state_passing  _state_passing_fwd_kernel: state recurrence across chunks          6
//   mamba_ssd_bmm            _bmm_chunk_fwd_kernel: CB = C B^T per chunk and group             9
//   mamba_ssd_chunk_scan     _chunk_scan_fwd_kernel: y = C h_prev decay + causal(CB) x + D x   23
// then torch's index_select gathers each sequence's last chunk state (vLLM:
// states[last_chunk_indices], a torch gather, nothing compiled).
// The CUDA kernels compute on the tensor cores (mma.sync m16n8k16, bf16 in, f32 accumulate) in
// tiles of the candidate's BLOCK_SIZE_M / N / K with its NUM_WARPS, and stage 16 bytes per load
// where the compile key's divisibility specialization allows it (as Triton vectorizes on the same
// facts), else 4 bytes. NUM_STAGES is in every compile key (Triton compiles it in), but these
// kernels do not software-pipeline their loads.
//
// vLLM sources mirrored (facts, not code; vllm-project/vllm):
//   vllm/model_executor/layers/mamba/mamba2/mamba_mixer2.py @ 2e0714af: conv_ssm_forward calls
//     mamba_chunk_scan_combined_varlen(x [T,H,P] view of the conv output, dt column slice of
//     in_proj, A f32, B/C [T,G,N] views, chunk_size, D, z=None, dt_bias, seq_idx_p, cu_seqlens =
//     query_start_loc_p, cu_chunk_seqlen_p, last_chunk_indices_p, initial_states (None unless a
//     prefill continues, prep_initial_states), return_intermediate_states (prefix caching only),
//     dt_softplus=True, dt_limit=(0, inf), out, state_dtype = ssm_state.dtype);
//     _warmup_ssd_kernels warms both HAS_INITSTATES variants with the cache's state dtype because
//     "Triton's autotuner includes tensor dtypes in its cache key" (vLLM PR #39822).
//   ssd_combined.py / ssd_chunk_state.py / ssd_state_passing.py / ssd_bmm.py / ssd_chunk_scan.py
//     after vLLM PR #35397 (merged 2026-03, "Optimize Mamba2 SSD prefill Triton kernels": fast_exp
//     = exp2(x log2 e), extended candidate lists for chunk_state (14) and chunk_scan (23), and the
//     batch-parallel state passing over last_chunk_indices). The stored vllm-project/vllm copies
//     of these files predate that PR (ssd_chunk_state.py @ 6dadfa86: chunk_state 9 candidates,
//     ssd_chunk_scan.py @ d3856111: 11, ssd_bmm.py @ a204e405, ssd_state_passing.py @ 5644fd86,
//     seq_idx-serial); the post-PR lists and signatures here are the ones of the post-PR file
//     copies in the index (vendored vLLM copies, read in full), whose lists PR #35397's
//     description matches. The newest state-passing copy seen (launch_autotuned,
//     INITSTATES_INDEXED / HAS_FINAL_STATES, do_not_specialize_on_alignment=
//     ["final_state_indices_ptr"]) adds only inputs MambaMixer2 @ 2e0714af never passes (None ->
//     both flags 0); it is not modelled.
//   mamba/ops/triton_helpers.py (launch_autotuned): the autotune cache key is the kernel's key
//     arguments plus "the dtype (or absence) of every tensor argument" - the same tuple Triton's
//     Autotuner.run builds (key values, then str(arg.dtype) of each tensor argument). Tuning keys
//     here carry both (see tuning_key()).
//   v1/attention/backends/mamba2_attn.py @ 5d1ee758 (Mamba2AttentionMetadataBuilder.build): the
//     chunk metadata (compute_chunk_metadata below).
// No per-platform branch selects these lists in vLLM's CUDA path (SM86, SM90 and SM100 all get
// the same candidates); the FlashInfer SSD prefill (ssd_prefill_dispatch.py) is an explicit
// opt-in on SM100/103/110 only and is not modelled. No SSD kernel has a do_not_specialize list:
// every pointer and every tl.int64 stride is specialized (==1, %16) like any int; token counts
// and chunk counts are never plain int arguments after PR #35397, so T reaches the compile keys
// only through pointer alignment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/jit/select.h"
#include "harness/kernels/kernel_registry.h"
#include "harness/kernels/model_shapes.h"

namespace coldstart::mamba_ssd {

/// Head geometry of one Mamba2 layer on one rank: H heads of head_dim P features, G groups of
/// B / C (each N wide), chunk_size tokens per chunk. Nemotron-3-Nano TP1: {64, 64, 8, 128, 128}.
struct SsdDims {
  int nheads = 0;      ///< H
  int head_dim = 0;    ///< P (vLLM hdim)
  int ngroups = 0;     ///< G, divides H
  int dstate = 0;      ///< N
  int chunk_size = 0;  ///< power of two (vLLM asserts is_int_pow_2)
  /// Throws InputError "mamba_ssd: ..." unless H in 1..65535, G > 0 divides H, P and N are powers
  /// of two in 16..256 and chunk_size a power of two in 16..256 (the tile shapes of these kernels).
  void validate() const;
};

/// A served model's Mamba2 heads (kernels/model_shapes.h) as this family's dims.
inline SsdDims ssd_dims(const kernels::shapes::Mamba2Heads& m) {
  return {m.nheads, m.head_dim, m.ngroups, m.dstate, m.chunk_size};
}

/// Host-side chunk metadata of a prefill batch (vLLM Mamba2AttentionMetadata's
/// cu_chunk_seqlen_p, last_chunk_indices_p, seq_idx_p).
struct ChunkMetadata {
  std::vector<int32_t> cu_chunk_seqlens;    ///< [nchunks + 1] token offsets of the chunks
  std::vector<int32_t> last_chunk_indices;  ///< [B] last chunk of each sequence
  std::vector<int32_t> seq_idx;             ///< [nchunks] sequence of each chunk
};

/// Mamba2AttentionMetadataBuilder.build's chunking (mamba2_attn.py @ 5d1ee758): per sequence b
/// with n = query_start_loc[b+1] - query_start_loc[b] new tokens and c = num_computed_tokens[b]
/// already in the state: when c % chunk_size != 0 the first chunk is shortened to
/// min(ceil(c / chunk_size) * chunk_size - c, n) tokens so later chunks start on the sequence's
/// absolute chunk boundaries; the rest is cut in chunk_size pieces (the last one shorter).
/// Chunks never cross sequences. last_chunk_indices[b] = index of b's last chunk; as in vLLM, a
/// sequence with no new token and c aligned adds no chunk and gets the previous chunk's index
/// (-1 for the first). Throws InputError when query_start_loc is empty, does not start at 0 or
/// decreases, num_computed_tokens has a size other than B or a negative entry, or chunk_size <= 0.
ChunkMetadata compute_chunk_metadata(const std::vector<int32_t>& query_start_loc,
                                     const std::vector<int32_t>& num_computed_tokens,
                                     int64_t chunk_size);

/// Element-type codes the kernels read as constexprs (Triton reads them from the pointer type;
/// they follow the pointer dtypes one to one, so they add no compile-key distinction).
/// 0 = float32, 1 = float16, 2 = bfloat16. Throws InputError for other dtypes.
int dtype_code(jit::DType dtype);

/// The runtime-compiled kernels (sources embedded at build time).
const jit::KernelSource& cumsum_kernel();
const jit::KernelSource& chunk_state_kernel();
const jit::KernelSource& state_passing_kernel();
const jit::KernelSource& bmm_kernel();
const jit::KernelSource& chunk_scan_kernel();
std::vector<const jit::KernelSource*> all_kernels();

// ---- autotune candidates, in vLLM's order (make_config names, e.g.
// "BLOCK_SIZE_M=64,BLOCK_SIZE_N=64,BLOCK_SIZE_K=32,warps=2,stages=4"). Configs without
// num_warps / num_stages get Triton's Config defaults, 4 and 3. --------------------------------

/// _chunk_cumsum_fwd_kernel: BLOCK_SIZE_H in [2, 4, 8, 16, 32, 64]. Key ["chunk_size", "nheads"].
std::vector<jit::KernelConfig> cumsum_candidates();
/// _chunk_state_fwd_kernel: 14 (BLOCK_SIZE_M, N, K, warps, stages). Key ["hdim", "dstate",
/// "chunk_size"].
std::vector<jit::KernelConfig> chunk_state_candidates();
/// _state_passing_fwd_kernel: BLOCK_SIZE in [64 .. 2048]. Key ["dim"].
std::vector<jit::KernelConfig> state_passing_candidates();
/// _bmm_chunk_fwd_kernel: 9. Key ["chunk_size", "K", "IS_CAUSAL"].
std::vector<jit::KernelConfig> bmm_candidates();
/// _chunk_scan_fwd_kernel: 23. Key ["chunk_size", "hdim", "dstate", "IS_CAUSAL"].
std::vector<jit::KernelConfig> chunk_scan_candidates();

// ---- tuning keys ------------------------------------------------------------------------------

/// A tensor argument as the autotune key sees it: its name and dtype, or nullopt for None.
struct TensorTag {
  std::string name;
  std::optional<jit::DType> dtype;
};

/// "<k1>=<v1>,...|<t1>:<dtype or None>,...": the autotune key values in vLLM's key order, then
/// the dtype (or None) of every tensor argument in signature order, e.g.
/// "dim=8192|states:fp32,out:fp32,dA_cs:fp32,initstates:None,last_chunk_indices:i32".
std::string tuning_key(const std::vector<std::pair<std::string, int64_t>>& key_values,
                       const std::vector<TensorTag>& tensors);

/// The five kernels' tuning keys. Tensor tags in vLLM's argument order.
std::string cumsum_tuning_key(const SsdDims& d, jit::DType dt, std::optional<jit::DType> dt_bias);
std::string chunk_state_tuning_key(const SsdDims& d, jit::DType x);
std::string state_passing_tuning_key(const SsdDims& d, jit::DType state,
                                     std::optional<jit::DType> initial_states);
std::string bmm_tuning_key(const SsdDims& d, jit::DType c);
std::string chunk_scan_tuning_key(const SsdDims& d, jit::DType x, jit::DType state,
                                  std::optional<jit::DType> D,
                                  std::optional<jit::DType> initial_states);

// ---- constexprs: the fixed part in vLLM's signature order (constexpr strides included, with
// the values the wrapper passes), then the candidate's, then NUM_WARPS / NUM_STAGES, then the
// element-type codes (the last group exists only for NVRTC, see dtype_code). ----------------

/// Float dt_min / dt_max constexprs are passed as the bits of their float32 value (Triton keys
/// on the Python float; 0.0 -> 0, inf -> 2139095040).
int64_t float_bits(double v);

struct CumsumFlags {
  bool dt_softplus = true;
  bool has_dt_bias = true;
  double dt_min = 0.0;
  double dt_max = 0.0;  ///< +inf in vLLM's Mamba2 call
  int64_t stride_dt_head = 1;
  int64_t stride_dt_bias_head = 1;
  jit::DType dt_bias_dtype = jit::DType::kBF16;
};
std::vector<jit::Constexpr> cumsum_constexprs(const SsdDims& d, const CumsumFlags& f,
                                              const jit::KernelConfig& c);
std::vector<jit::Constexpr> chunk_state_constexprs(const SsdDims& d, const jit::KernelConfig& c);
std::vector<jit::Constexpr> state_passing_constexprs(const SsdDims& d, bool has_initstates,
                                                     jit::DType out_dtype, jit::DType init_dtype,
                                                     const jit::KernelConfig& c);
/// dot_dtype: vLLM passes tl.bfloat16 for bf16 inputs; coded as dtype_code (2).
std::vector<jit::Constexpr> bmm_constexprs(const SsdDims& d, const jit::KernelConfig& c);

struct ScanFlags {
  bool has_d = true;
  bool d_has_hdim = false;  ///< D [H, P]; vLLM sets True when D is None
  int64_t stride_D_head = 1;
  bool has_initstates = false;
  jit::DType states_dtype = jit::DType::kF32;
  jit::DType init_dtype = jit::DType::kF32;
  jit::DType d_dtype = jit::DType::kBF16;
};
std::vector<jit::Constexpr> chunk_scan_constexprs(const SsdDims& d, const ScanFlags& f,
                                                  const jit::KernelConfig& c);

/// A candidate's integer constexpr `name`, or `fallback` when it has none.
int64_t config_value(const jit::KernelConfig& c, const char* name, int64_t fallback);

/// ceil(a / b) for positive b.
int64_t cdiv(int64_t a, int64_t b);

/// Triton's next_power_of_2.
int64_t next_power_of_2(int64_t n);

/// Dynamic shared memory (bytes) of the tiled kernels for a candidate.
unsigned chunk_state_smem_bytes(const SsdDims& d, const jit::KernelConfig& c);
unsigned bmm_smem_bytes(const SsdDims& d, const jit::KernelConfig& c);
unsigned chunk_scan_smem_bytes(const SsdDims& d, const jit::KernelConfig& c);

/// One compile case per kernel at Nemotron-3-Nano TP1 dims (first candidate of each list), with
/// serving-like argument specialization, for the multi-arch compile test.
std::vector<KernelCompileCase> compile_cases();

}  // namespace coldstart::mamba_ssd
