// DeepGEMM-style FP8 GEMMs, torch side: validation, TMA descriptors, the heuristic's config under a
// jit::SelectionScope (selector "heuristic"), and JitRuntime::launch on torch's current stream.
// dg_kernels.h has the torch-free part (compile keys, heuristics, what differs from DeepGEMM).
//
// FP8 data is e4m3 in uint8 tensors (libtorch 1.13 has no FP8 dtype). Scales are float32:
// A per token and 128-column group, B per 128x128 block, the "1d2d" recipe (1, 128, 128) of
// DeepGEMM's SM90 fp8_gemm_nt. A's scales are MN-major and TMA-aligned as DeepGEMM requires
// (get_mn_major_tma_aligned_tensor): [K/128, align(M, 4)] with M contiguous (mn_major_scales()
// makes that layout from the usual [M, K/128]). In compile-only mode the tensors are on the meta
// device, nothing is read or launched, and the compile keys equal a GPU run's.
#pragma once

#include <ATen/core/Tensor.h>

#include "harness/common/target.h"
#include "harness/jit/jit.h"
#include "harness/jit/select.h"
#include "harness/kernels/deepgemm/dg_kernels.h"

namespace coldstart::deepgemm {

/// The GPU the heuristic plans for: compute capability (90, 100) and SM count (the persistent
/// grid; DeepGEMM's device_runtime num_sms).
struct GemmTarget {
  int sm = 90;
  int num_sms = 132;
};

/// The GemmTarget of a replay target: SM100 kernels from compute capability 10.x on, SM90 below
/// (the kernels exist for those two); the defaults (H200) when `t` is null.
inline GemmTarget gemm_target(const Target* t) {
  if (t == nullptr) return {};
  return {t->sm >= 100 ? 100 : 90, t->sm_count};
}

/// Options of one call; `mma_sync` takes the warp-level MMA path on sm_90a (the path sm_100a
/// compiles) so tests can run it on an H100/H200.
struct GemmOptions {
  bool mma_sync = false;
};

/// An activation quantized for the FP8 GEMMs: e4m3 bytes and their per-token, per-128-column
/// scales in DeepGEMM's MN-major layout.
struct Fp8Activation {
  at::Tensor data;  ///< uint8 [M, K] (or [M, G, K] for quantize_fp8_groups)
  at::Tensor sf;    ///< float32 [K/128, align(M, 4)] (or [G, K/128, align(M, 4)])
};

/// Dynamic per-token-group FP8 quantization (what vLLM's per_token_group_quant_fp8 computes with
/// column-major scales for DeepGEMM; here torch operations, not a replayed kernel): for each row and
/// each 128 columns, scale = max|x| / 448 (floored at 1e-10), data = e4m3(x / scale).
/// x: bf16 / float [M, K], K % 128 == 0. On the meta device only shapes are made. Throws Error on a
/// GPU tensor when this libtorch has no FP8 dtype (< 2.1).
Fp8Activation quantize_fp8(const at::Tensor& x);
/// The same for x [M, G, K] (einsum "bhr" activations): data [M, G, K], sf [G, K/128, align(M, 4)].
Fp8Activation quantize_fp8_groups(const at::Tensor& x);

/// Random FP8 weights: e4m3 bytes of magnitude 0.125 .. 1.875 with random signs (uint8, on
/// `device`; on meta only the shape).
at::Tensor random_fp8_weight(std::vector<int64_t> shape, const at::TensorOptions& device);

/// [M, K/128] float32 scales -> DeepGEMM's MN-major TMA-aligned layout, returned as a
/// [K/128, align(M, 4)] float32 tensor (columns past M are zero). A torch copy; works on meta.
at::Tensor mn_major_scales(const at::Tensor& sf);

/// D[M, N] (bf16) = A[M, K] x B[N, K]^T with A's per-token-group and B's block scales
/// (DeepGEMM fp8_gemm_nt, GemmType::Normal).
/// - a: uint8 (e4m3) [M, K], K contiguous, row stride a multiple of 16 bytes; K % 128 == 0
/// - sfa: float32 [K/128, >= align(M, 4)], contiguous rows (mn_major_scales)
/// - b: uint8 (e4m3) [N, K], contiguous; N % 8 == 0
/// - sfb: float32 [ceil(N/128), K/128], contiguous
/// - d: bf16 [M, N], N contiguous, row stride even
/// M == 0 launches nothing. Returns the Selection (config, tuning key, candidate count).
/// Throws coldstart::Error naming the argument on any violation, UnsupportedArchError below sm_90.
jit::Selection fp8_gemm_nt(jit::JitRuntime& rt, const GemmTarget& target, const at::Tensor& a,
                           const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb,
                           const at::Tensor& d, const GemmOptions& options = {});

/// Rows of the m-grouped contiguous MoE layout for `num_tokens` tokens: vLLM's static upper bound
/// (compute_aligned_M in vllm/model_executor/layers/fused_moe/deep_gemm_utils.py), which keeps
/// shapes fixed under graph capture with every expert's run padded to
/// kMkAlignmentForContiguousLayout rows: align(num_tokens * top_k + experts * 127, 128).
int64_t m_grouped_contiguous_rows(int64_t num_tokens, int64_t top_k, int64_t experts);

/// MoE experts over rows grouped by expert (DeepGEMM m_grouped_fp8_gemm_nt_contiguous):
/// D[r] = A[r] x B[m_indices[r]]^T for every row r whose m_indices[r] >= 0; rows of -1 are
/// padding and are left untouched. Each expert's rows are a run padded to 128
/// (kMkAlignmentForContiguousLayout), so M % 128 == 0.
/// - a: uint8 [M, K]; sfa: float32 [K/128, >= align(M, 4)]
/// - b: uint8 [G, N, K] contiguous; sfb: float32 [G, ceil(N/128), K/128] contiguous
/// - d: bf16 [M, N]; m_indices: int32 [M] contiguous, values in [-1, G)
jit::Selection m_grouped_fp8_gemm_nt_contiguous(jit::JitRuntime& rt, const GemmTarget& target,
                                                const at::Tensor& a, const at::Tensor& sfa,
                                                const at::Tensor& b, const at::Tensor& sfb,
                                                const at::Tensor& d, const at::Tensor& m_indices,
                                                const GemmOptions& options = {});

/// z[b, h, :] = x[b, h, :] . y[h, :, :]^T per group h (DeepGEMM fp8_einsum "bhr,hdr->bhd", a
/// batched GEMM with batch = H, M = B, N = D, K = R; DeepSeek V4's grouped wo_a).
/// - x: uint8 [B, H, R], R contiguous, any row strides that are multiples of 16 bytes
/// - sfx: float32 [H, R/128, >= align(B, 4)] contiguous (per group, MN-major)
/// - y: uint8 [H, D, R] contiguous; sfy: float32 [H, ceil(D/128), R/128] contiguous
/// - z: bf16 [B, H, D], D contiguous
jit::Selection fp8_einsum_bhr_hdr_bhd(jit::JitRuntime& rt, const GemmTarget& target,
                                      const at::Tensor& x, const at::Tensor& sfx,
                                      const at::Tensor& y, const at::Tensor& sfy,
                                      const at::Tensor& z, const GemmOptions& options = {});

}  // namespace coldstart::deepgemm
