// DeepGEMM-style hyper-connection and sparse-indexer kernels, torch side: validation, TMA
// descriptors and JitRuntime::launch on torch's current stream of the output's device.
// dg_indexer_kernels.h has the torch-free part (compile keys, shape rules, what differs from
// DeepGEMM).
//
// FP8 data is e4m3 in uint8 tensors (libtorch 1.13 has no FP8 dtype). Every wrapper takes its
// outputs preallocated (DeepGEMM's Python API allocates some of them) and checks every argument,
// throwing coldstart::Error "deepgemm::<wrapper>: argument '<name>' ..." on a dtype, rank, layout,
// shape or device violation, and UnsupportedArchError for a target other than sm_90 / sm_100. In
// compile-only mode the tensors are on the meta device, nothing is read or launched, and the
// compile keys equal a GPU run's. The returned Selection has an empty selector (DeepGEMM's
// configs here are fixed, not chosen among candidates); its config names and holds the constexprs.
#pragma once

#include <ATen/core/Tensor.h>

#include "harness/jit/jit.h"
#include "harness/jit/select.h"
#include "harness/kernels/deepgemm/deepgemm.h"
#include "harness/kernels/deepgemm/dg_indexer_kernels.h"

namespace coldstart::deepgemm {

/// DeepGEMM tf32_hc_prenorm_gemm(a, b, d, sqr_sum, num_splits): the hyper-connection pre-norm
/// GEMM, K split num_splits = out_mul.size(0) ways (hc_num_splits is the serving code's choice):
///   out_mul[s, m, n] = sum_{k in split s} x[m, k] * fn[n, k]   (fp32; see dg_hc_prenorm.cu)
///   sqrsum[s, m]     = sum_{k in split s} x[m, k]^2
/// The K blocks of 64 are dealt as in DeepGEMM: nkb = K / 64, split s starts at block
/// s * (nkb / S) + min(s, nkb % S) and has nkb / S + (s < nkb % S) blocks (a split without
/// blocks writes zeros). The caller sums over s.
/// - x: bf16 [M, K], K contiguous, row stride a multiple of 8 elements; K % 64 == 0
/// - fn: float32 [N, K] contiguous; N % 8 == 0, N <= 32 on sm_90 (<= 128 on sm_100)
/// - out_mul: float32 [S, M, N], N contiguous (any M / S strides); S >= 1
/// - sqrsum: float32 [S, M] contiguous
/// M == 0 launches nothing. Compile key: N, K, the tile, S and the stage count, not M.
jit::Selection tf32_hc_prenorm_gemm(jit::JitRuntime& rt, const GemmTarget& target, const at::Tensor& x,
                                    const at::Tensor& fn, const at::Tensor& out_mul, const at::Tensor& sqrsum);

/// DeepGEMM fp8_mqa_logits(q, (kv, kv_sf), weights, ks, ke, clean_logits): the prefill indexer's
/// logits over a ragged KV range per token,
///   logits[t, s] = kv_sf[s] * sum_h weights[t, h] * relu(sum_d q[t, h, d] * kv[s, d])
/// for s in [ks[t], ke[t]) (each clamped to [0, Skv]). Columns s < Skv outside that range are
/// -inf with `clean_logits` (a second kernel, DeepGEMM's clean_logits), and otherwise
/// unspecified (they hold dot products of the token's query block); columns >= Skv are never
/// written.
/// - q: uint8 (e4m3) [T, H, D] contiguous; H in {32, 64}, D in {32, 64, 128}
/// - kv: uint8 (e4m3) [Skv, D] contiguous; kv_sf: float32 [Skv] contiguous
/// - weights: float32 [T, H], H contiguous
/// - ks, ke: int32 [T] contiguous (KV positions, ks <= ke)
/// - logits: float32 [T, W], W >= Skv, W contiguous (row stride >= W)
/// T == 0 or Skv == 0 launches nothing. Compile key: H, D, the fixed blocks and stages, and the
/// SM count (target.num_sms: the persistent grid); never T or Skv.
jit::Selection fp8_mqa_logits(jit::JitRuntime& rt, const GemmTarget& target, const at::Tensor& q,
                              const at::Tensor& kv, const at::Tensor& kv_sf, const at::Tensor& weights,
                              const at::Tensor& ks, const at::Tensor& ke, const at::Tensor& logits,
                              bool clean_logits = true);

/// DeepGEMM get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms): the schedule of
/// fp8_paged_mqa_logits over target.num_sms blocks, written to `schedule_meta` (the algorithm is
/// in dg_paged_mqa_metadata.cu; entry i is (first batch row, first 256-token split) of block i,
/// entry num_sms the end (B, 0) for next_n <= 2).
/// - context_lens: int32 [B, next_n] contiguous, 1 <= B <= kPagedMaxBatch; entry [b, next_n - 1]
///   (the row's last token) sets the row's work
/// - block_kv: the cache's block size; a divisor of 256, and 64 on sm_90 (DeepGEMM's asserts)
/// - schedule_meta: int32 [target.num_sms + 1, 2] contiguous
/// Compile key: align(B, 32), 256, target.num_sms, varlen 0: batch sizes 1..32 share a kernel,
/// 33 needs another.
void get_paged_mqa_logits_metadata(jit::JitRuntime& rt, const GemmTarget& target, const at::Tensor& context_lens,
                                   int block_kv, const at::Tensor& schedule_meta);

/// DeepGEMM fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
/// max_context_len, clean_logits=False): the decode indexer's logits over a paged cache,
///   logits[b * next_n + i, s] = sf[s] * sum_h weights[b * next_n + i, h] * relu(q[b, i, h] . k[s])
/// for s < min(context_lens[b, next_n - 1], W), where k[s] / sf[s] are token s % block_kv of
/// cache block block_table[b, s / block_kv]. Positions at or past context_lens[b, i] of an
/// earlier token i are computed all the same (mask them, as DeepGEMM's callers do); columns at or
/// past the row's last context length are not written.
/// - q: uint8 (e4m3) [B, next_n, H, D] contiguous; next_n in {1, 2}; H in {32, 64}; D in {32, 64, 128}
/// - kv_cache: uint8 [num_blocks, block_kv * (D + 4)], each row (one cache block) block_kv * D
///   e4m3 values (token-major) then block_kv float32 scales; inner dimension contiguous, row
///   stride a multiple of 16 bytes; block_kv must be 64
/// - weights: float32 [B * next_n, H] contiguous
/// - context_lens: int32 [B, next_n] contiguous (each <= block_table.size(1) * block_kv)
/// - block_table: int32 [B, max_blocks], inner dimension contiguous
/// - schedule_meta: int32 [target.num_sms + 1, 2] contiguous, from get_paged_mqa_logits_metadata
///   with the same context_lens and target
/// - logits: float32 [B * next_n, W], W contiguous
/// B == 0 launches nothing. The grid is target.num_sms blocks. Compile key: next_n, H, D,
/// block_kv, the flags, the stages and the split; not the batch size, not the SM count.
jit::Selection fp8_paged_mqa_logits(jit::JitRuntime& rt, const GemmTarget& target, const at::Tensor& q,
                                    const at::Tensor& kv_cache, const at::Tensor& weights,
                                    const at::Tensor& context_lens, const at::Tensor& block_table,
                                    const at::Tensor& schedule_meta, const at::Tensor& logits);

}  // namespace coldstart::deepgemm
