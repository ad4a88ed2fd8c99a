// libtorch reference of the DeepGEMM-style kernels' math in float64, for tests (cs_kernels_reference).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace coldstart::deepgemm::reference {

/// OCP FP8 e4m3 bytes (uint8, any shape, any device) -> float64 values (NaN for 0x7f / 0xff).
at::Tensor e4m3_to_double(const at::Tensor& bytes);

/// Random e4m3 bytes of `shape` (uint8, on the CPU, from `seed`), every finite code equally
/// likely, never NaN; `max_exponent` (0..15) caps the biased exponent so sums stay moderate.
at::Tensor random_e4m3(std::vector<int64_t> shape, uint64_t seed, int max_exponent = 10);

/// D = (A * sfa) x (B * sfb)^T in float64: a uint8 [M, K], sfa float [M, K/128] (row-major, per
/// token and 128-column group), b uint8 [N, K], sfb float [ceil(N/128), K/128] -> [M, N].
at::Tensor fp8_gemm(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb);

/// tf32_hc_prenorm_gemm in float64 with DeepGEMM's K split (64-column blocks dealt to
/// `num_splits` splits, the first nkb % S splits one block longer): x [M, K] (any float dtype),
/// fn [N, K]. out_mul [S, M, N] and sqrsum [S, M] are the per-split sums; out_mul_l2 [S, M, N] is
/// sqrt(sum over the split of (x * fn)^2), the scale an fp32 summation error is relative to.
struct HcPrenorm {
  at::Tensor out_mul, sqrsum, out_mul_l2;
};
HcPrenorm hc_prenorm_gemm(const at::Tensor& x, const at::Tensor& fn, int num_splits);

/// Indexer logits in float64 and their magnitude (both [rows, columns]):
/// logits = sf[s] * sum_h w[h] * relu(q[h] . k[s]); magnitude = sf[s] * sum_h |w[h]| * (|q[h]| . |k[s]|),
/// what an fp32 / FP8-tensor-core rounding error of logits is relative to.
struct IndexerLogits {
  at::Tensor logits, magnitude;
};

/// fp8_mqa_logits for every (token, KV position) pair, ranges not applied: q uint8 (e4m3)
/// [T, H, D], kv uint8 [Skv, D], kv_sf float [Skv], weights float [T, H] -> [T, Skv]. Computed on
/// the inputs' device, 64 tokens at a time.
IndexerLogits mqa_logits(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& kv_sf, const at::Tensor& weights);

/// fp8_paged_mqa_logits: q uint8 [B, next_n, H, D], kv_cache uint8 [num_blocks, block_kv * (D + 4)]
/// (per block: block_kv * D e4m3 values, token-major, then block_kv float scales), weights float
/// [B * next_n, H], context_lens int32 [B, next_n], block_table int32 [B, max_blocks] (any devices)
/// -> [B * next_n, L] with L the largest context_lens[b, next_n - 1]; row b * next_n + i holds the
/// logits of positions s < context_lens[b, next_n - 1] and NaN past them.
IndexerLogits paged_mqa_logits(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& weights,
                               const at::Tensor& context_lens, const at::Tensor& block_table, int block_kv);

}  // namespace coldstart::deepgemm::reference
