// Qwen3-Next gated-delta-net (GDN) chunked prefill, the FLA chain vLLM runs on the Triton
// backend (vllm/model_executor/layers/fla/ops/chunk.py, chunk_gated_delta_rule_fwd) and the fused
// post-conv preparation before it. Torch-free: the runtime-compiled kernels' sources, their
// constexprs and autotune candidate lists (vLLM's, per target arch), launch geometry and the
// scratch layout. The torch launch wrappers are in gdn_chunk.h, the reference in
// gdn_chunk_reference.h.
//
// Kernels (harness/kernels/gdn_chunk/, argument order atop each .cu file):
//   gdn_post_conv   fused_post_conv_prep: conv output -> q, k (L2-normalized), v, g, beta
//   gdn_chunk_cumsum      chunk_local_cumsum of g (64-token chunks)           autotuned,  4 candidates
//   gdn_chunk_kkt         chunk_scaled_dot_kkt_fwd: A = beta k k^T exp(dg)    autotuned, 27
//   gdn_chunk_solve_tril  solve_tril: (I + A)^-1, bf16                       autotuned, 12
//   gdn_chunk_wy          recompute_w_u_fwd: w, u                            autotuned,  9
//   gdn_chunk_h           chunk_gated_delta_rule_fwd_h: states, v_new, final autotuned, 12
//   gdn_chunk_o           chunk_fwd_o: output                                autotuned, 24 (sm_90+) / 36
//
// vLLM sources mirrored (vllm-project/vllm, file @ commit):
//   fla/ops/chunk.py @ 044990c17768, cumsum.py @ e1a88aad0d8b, chunk_scaled_dot_kkt.py @
//   00bb9c07e50b, solve_tril.py @ 15ec37e48225, wy_fast.py @ 3b12500c9761, chunk_delta_h.py @
//   05f989dca718, chunk_o.py @ 00bb9c07e50b, utils.py @ 06e821345da4, index.py @ 43479b60a806,
//   fused_gdn_prefill_post_conv.py @ 41c5903d049b, mamba/gdn/chunk_workspace.py @ 569ff4c6d7d4,
//   mamba/gdn/qwen_gdn_linear_attn.py @ 00545a8acc22 (A_log float32, dt_bias model dtype).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/jit/select.h"
#include "harness/kernels/kernel_registry.h"
#include "harness/kernels/model_shapes.h"

namespace coldstart::gdn_chunk {

/// FLA's chunk size (utils.py FLA_CHUNK_SIZE; chunk.py passes chunk_size=64).
constexpr int kChunkSize = 64;

/// Head geometry of one GDN layer on one rank: Hk key heads of K features (q and k), Hv value
/// heads of V features (v, the state [V, K] and the output). Qwen3-Next-80B-A3B at TP1:
/// {16, 32, 128, 128}.
struct GdnDims {
  int num_k_heads = 0;  ///< Hk
  int num_v_heads = 0;  ///< Hv, a multiple of Hk
  int head_k_dim = 0;   ///< K
  int head_v_dim = 0;   ///< V
  /// Width of the causal-conv output row: 2 * Hk * K + Hv * V.
  int64_t conv_dim() const;
  /// Throws InputError "gdn_chunk: ..." unless Hk > 0, Hv a positive multiple of Hk (at most
  /// 65535 / 1024 so grids fit) and K, V are each 64, 128 or 256.
  void validate() const;
};

/// A served model's GDN heads (kernels/model_shapes.h) as this family's dims.
inline GdnDims gdn_dims(const kernels::shapes::GdnHeads& h) {
  return {h.num_k_heads, h.num_v_heads, h.head_k_dim, h.head_v_dim};
}

/// Number of 64-token chunks over the sequences: sum of ceil(len / 64) (index.py
/// prepare_chunk_indices); zero-length sequences have none. Throws InputError on a negative length.
int64_t num_chunks(const std::vector<int>& seq_lens);

/// Byte offsets of the sub-buffers of chunk_gated_delta_rule's scratch, each 256-byte aligned.
/// The first seven are the tensors chunk_gated_delta_rule_fwd allocates (chunk_workspace.py
/// counts h, v_new, w, u, A and A's bf16 copy; the float32 g cumsum it does not count); the last
/// two are the chunk tables (index.py) that vLLM builds on the device from cu_seqlens and that
/// the wrapper copies from the host here.
struct ChunkScratchLayout {
  int64_t g_cumsum = 0;       ///< f32 [T, Hv]
  int64_t A = 0;              ///< f32 [T, Hv, 64]   (chunk_workspace a_bytes)
  int64_t Ai = 0;             ///< bf16 [T, Hv, 64]  (a_cast_bytes)
  int64_t w = 0;              ///< bf16 [T, Hv, K]   (w_bytes)
  int64_t u = 0;              ///< bf16 [T, Hv, V]   (u_bytes)
  int64_t h = 0;              ///< bf16 [NT, Hv, V, K] (h_bytes)
  int64_t v_new = 0;          ///< bf16 [T, Hv, V]   (v_new_bytes)
  int64_t chunk_indices = 0;  ///< int32 [NT, 2]
  int64_t chunk_offsets = 0;  ///< int32 [S + 1]
  int64_t total = 0;          ///< bytes in all
};

/// The scratch layout for T packed tokens in `num_seqs` sequences with `nt` chunks in all.
/// Throws InputError on negative sizes or invalid dims.
ChunkScratchLayout chunk_scratch_layout(const GdnDims& d, int64_t T, int64_t nt, int64_t num_seqs);

/// Bytes of scratch chunk_gated_delta_rule needs for T packed tokens in seq_lens_host.size()
/// sequences: chunk_scratch_layout(d, T, num_chunks(seq_lens_host), S).total. Mirrors
/// estimate_gdn_chunk_workspace (vllm/model_executor/layers/mamba/gdn/chunk_workspace.py):
/// h = NT*Hv*V*K*2, v_new = u = T*Hv*V*2, w = T*Hv*K*2, A = T*Hv*64*4, its bf16 copy A/2, with
/// NT = sum ceil(len/64); the output o it also counts is the caller's buffer here, and the g
/// cumsum and chunk tables are added. Throws InputError when the lengths do not sum to T.
int64_t chunk_scratch_bytes(const GdnDims& d, int64_t T, const std::vector<int>& seq_lens_host);

/// The runtime-compiled kernels (sources embedded at build time).
const jit::KernelSource& post_conv_kernel();
const jit::KernelSource& cumsum_kernel();
const jit::KernelSource& kkt_kernel();
const jit::KernelSource& solve_tril_kernel();
const jit::KernelSource& wy_kernel();
const jit::KernelSource& h_kernel();
const jit::KernelSource& o_kernel();
std::vector<const jit::KernelSource*> all_kernels();

/// Largest dynamic shared memory a block may opt into on compute capability `sm`, the value
/// Triton reports as max_shared_mem: 232448 on sm_90 / sm_100, 166912 on sm_80 / sm_87, 101376
/// on sm_86 / sm_89 / sm_120 (CUDA programming guide tables; an inference for archs not listed:
/// 232448 from sm_90 on, else 101376).
int max_shared_mem(int sm);

/// utils.py check_shared_mem(): max_shared_mem(sm) >= 102400 (Backend.DEFAULT).
bool check_shared_mem(int sm);

/// utils.py is_nvidia_hopper: "NVIDIA H" in the device name or compute capability >= 9; taken as
/// sm >= 90 for the target arch.
bool is_nvidia_hopper(int sm);

// ---- autotune candidates, in vLLM's order (make_config names, e.g. "BK=32,warps=2,stages=2") ----

/// chunk_local_cumsum_scalar_kernel: num_warps in [1, 2, 4, 8] (4); Triton's Config default
/// num_stages 3. Key ["B", "H", "BT", "IS_VARLEN", "REVERSE"].
std::vector<jit::KernelConfig> cumsum_candidates();
/// chunk_scaled_dot_kkt_fwd_kernel: BK in [32, 64, 128] x num_warps [2, 4, 8] x num_stages
/// [2, 3, 4] (27, NVIDIA). Key ["H", "K", "BT", "IS_VARLEN"].
std::vector<jit::KernelConfig> kkt_candidates();
/// merge_16x16_to_64x64_inverse_kernel: num_warps [2, 4, 8] x num_stages [2, 3, 4, 5] (12,
/// NVIDIA). Key ["H", "BT", "IS_VARLEN"].
std::vector<jit::KernelConfig> solve_tril_candidates();
/// recompute_w_u_fwd_kernel: num_warps [2, 4, 8] x num_stages [2, 3, 4] (9). Key ["H", "K", "V",
/// "BT", "BK", "BV", "IS_VARLEN"].
std::vector<jit::KernelConfig> wy_candidates();
/// chunk_gated_delta_rule_fwd_kernel_h_blockdim64: num_warps [2, 4] x num_stages [2, 3, 4] x
/// BV [32, 64] (12, CUDA). Key ["H", "K", "V", "BT"].
std::vector<jit::KernelConfig> h_candidates();
/// chunk_fwd_kernel_o: BK in BKV x BV in BKV x num_warps x num_stages [2, 3, 4] with BKV = [64,
/// 128] when check_shared_mem(sm) else [32, 64], num_warps [2, 4] when is_nvidia_hopper(sm) else
/// [2, 4, 8]: 24 on sm_90 / sm_100, 36 on sm_86. Key ["H", "K", "V", "BT"].
std::vector<jit::KernelConfig> o_candidates(int sm);

// ---- tuning keys: vLLM's autotune key as text -------------------------------------------------

std::string cumsum_tuning_key(const GdnDims& d);      ///< "B=1,H=32,BT=64,IS_VARLEN=1,REVERSE=0"
std::string kkt_tuning_key(const GdnDims& d);         ///< "H=32,K=128,BT=64,IS_VARLEN=1"
std::string solve_tril_tuning_key(const GdnDims& d);  ///< "H=32,BT=64,IS_VARLEN=1"
std::string wy_tuning_key(const GdnDims& d);  ///< "H=32,K=128,V=128,BT=64,BK=64,BV=64,IS_VARLEN=1"
std::string h_tuning_key(const GdnDims& d);   ///< "H=32,K=128,V=128,BT=64"
std::string o_tuning_key(const GdnDims& d);   ///< "H=32,K=128,V=128,BT=64"

// ---- constexprs (fixed part in vLLM's signature order, then the candidate's, then NUM_WARPS and
// NUM_STAGES, which the sources read) ----------------------------------------------------------

std::vector<jit::Constexpr> post_conv_constexprs(const GdnDims& d);
std::vector<jit::Constexpr> cumsum_constexprs(const GdnDims& d, const jit::KernelConfig& c);
std::vector<jit::Constexpr> kkt_constexprs(const GdnDims& d, const jit::KernelConfig& c);
/// USE_TMA = 1 from sm_90 on (utils.py is_tma_supported, assuming a Triton with tensor
/// descriptors); DOT_PRECISION 0 = "ieee" (FLA_TRIL_PRECISION's default).
std::vector<jit::Constexpr> solve_tril_constexprs(const GdnDims& d, const jit::KernelConfig& c,
                                                  int sm);
std::vector<jit::Constexpr> wy_constexprs(const GdnDims& d, const jit::KernelConfig& c);
std::vector<jit::Constexpr> h_constexprs(const GdnDims& d, const jit::KernelConfig& c);
std::vector<jit::Constexpr> o_constexprs(const GdnDims& d, const jit::KernelConfig& c);

/// post-conv launch: vLLM's BLOCK_T = 16 tokens a block, num_warps 4.
constexpr int kPostConvBlockT = 16;
constexpr int kPostConvWarps = 4;

/// A candidate's integer constexpr `name` (BK, BV), or `fallback` when it has none.
int64_t config_value(const jit::KernelConfig& c, const char* name, int64_t fallback);

/// Dynamic shared memory of gdn_chunk_h / gdn_chunk_o for a candidate (bytes).
unsigned h_smem_bytes(const GdnDims& d, const jit::KernelConfig& c);
unsigned o_smem_bytes(const GdnDims& d, const jit::KernelConfig& c);

/// One compile case per kernel at Qwen3-Next-80B-A3B dims (first candidate of each list, sm_90
/// lists), with serving-like argument specialization, for the multi-arch compile test.
std::vector<KernelCompileCase> compile_cases();

}  // namespace coldstart::gdn_chunk
