// DeepGEMM-style kernels of DeepSeek V4's hyper-connections and sparse (lightning) indexer,
// torch-free part: kernel sources, compile-time constants (the compile key), launch geometry,
// shape rules and the compile cases. The torch-side launch wrappers are deepgemm_indexer.h.
//
// What DeepGEMM does (deepseek-ai/DeepGEMM at 891d57b; paths under csrc/ unless they start with
// deep_gemm/):
// - tf32_hc_prenorm_gemm (apis/hyperconnection.hpp, jit_kernels/impls/sm90_tf32_hc_prenorm_gemm.hpp,
//   sm100_tf32_hc_prenorm_gemm.hpp): bf16 x times fp32 fn^T with TF32 WGMMA / UMMA, split over K
//   into num_splits partial products plus the partial sums of x^2 (the RMS of the pre-norm). The
//   template holds N, K, the 64 x align(N, 16) x 64 tile, num_splits, the output swizzle (a
//   function of the tile), the stage count (a per-arch formula) and the thread counts: N, K and
//   num_splits are compiled in, M is not. num_splits is the caller's choice; DeepGEMM has no
//   heuristic for it (the serving code's is hc_num_splits below).
// - fp8_mqa_logits (apis/attention.hpp, jit_kernels/impls/smxx_fp8_fp4_mqa_logits.hpp,
//   deep_gemm/include/deep_gemm/impls/sm90_fp8_mqa_logits.cuh): the prefill indexer over a ragged
//   KV range per query token; a fixed config (128 / H query tokens per block, 256 KV rows per
//   step, 3 + 3 pipeline stages, a persistent grid of num_sms blocks) whose template holds H, D,
//   the compressed-logits flag, the block sizes, the stages and num_sms, never a sequence length.
//   With clean_logits a second kernel, smxx_clean_logits (impls/smxx_clean_logits.hpp), writes
//   -inf outside each row's range; its template is <next_n, 8192, 8 warps, logits dtype>.
// - get_paged_mqa_logits_metadata (impls/smxx_fp8_fp4_paged_mqa_logits.hpp,
//   deep_gemm/include/deep_gemm/scheduler/paged_mqa_logits.cuh): one warp splits the decode
//   batch's (query, 256-token KV split) tasks evenly over num_sms blocks; its template is
//   <align(batch, 32), 256, num_sms, is_varlen>, so a batch size crossing a multiple of 32 or
//   another SM count is a new kernel.
// - fp8_paged_mqa_logits (same .hpp, impls/sm90_fp8_paged_mqa_logits.cuh): the decode indexer
//   over a paged FP8 cache, consuming that schedule; its template holds next_n, H, D, the cache
//   block size, the 2-D context_lens and varlen flags, the stages and the 256-token split, and
//   neither the batch size nor num_sms (the grid is num_sms blocks at launch).
//
// Our kernels compute the same values with the same compile keys (the constexprs below carry
// exactly the fields of DeepGEMM's templates that vary within one arch) but are written
// differently: warp-level mma.sync instead of WGMMA / UMMA (TF32 m16n8k8 for the hc GEMM, with
// fn split into two TF32 halves so the products are fp32-exact; FP8 m16n8k32 for the logits),
// TMA + mbarrier pipelines fed by one producer thread, results stored from registers. Each
// kernel's file says more.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/kernel_registry.h"

namespace coldstart::deepgemm {

// ---------------------------------------------------------------- tf32_hc_prenorm_gemm

/// DeepGEMM's fixed tile of the hc pre-norm GEMM: 64 rows of x, 64-deep K blocks.
constexpr int kHcBlockM = 64;
constexpr int kHcBlockK = 64;

/// The serving code's split count (the seed's _compute_num_split, deepseek-v4-deep-gemm-warmup):
/// grid = ceil(m / 64); split = num_sms / grid, at most ceil(k / 64) / 4 (integer division), at
/// least 1. E.g. m = 1, k = 16384, 132 SMs -> 64; m = 8192 -> 1. Throws InputError unless m >= 1,
/// k >= 1 and num_sms >= 1.
int hc_num_splits(int64_t m, int64_t k, int num_sms);

/// BLOCK_N of the hc GEMM: N rounded up to a multiple of 16.
int hc_block_n(int64_t n);

/// DeepGEMM's stage count for N on compute capability `sm` (90 or 100): the largest s <= 12 whose
/// shared memory fits 232448 bytes, with s stages of a bf16 64x64 x tile and an fp32 BLOCK_N x 64
/// fn tile, a 64-row output tile of the fp32 swizzle width, and the barriers (SM90 16 s bytes;
/// SM100 (4 s + 1) 8 bytes + 4). 12 for every N <= 32 on both; 5 for N = 128 on SM100.
int hc_num_stages(int sm, int64_t n);

/// Checks the hc GEMM's shape rules (impls/sm90_tf32_hc_prenorm_gemm.hpp, sm100_...): sm 90 or
/// 100 (else UnsupportedArchError); N > 0, N % 8 == 0 and N <= 32 (SM90) / 128 (SM100); K > 0
/// and K % 64 == 0; num_splits >= 1. Throws InputError naming the violated rule.
void check_hc_prenorm_shape(int sm, int64_t n, int64_t k, int64_t num_splits);

/// Compile-time constants: SHAPE_N, SHAPE_K, BLOCK_M (64), BLOCK_N, BLOCK_K (64), NUM_SPLITS,
/// NUM_STAGES. M is a runtime argument, not specialized.
std::vector<jit::Constexpr> hc_prenorm_constexprs(int sm, int64_t n, int64_t k, int num_splits);

/// Threads of our kernel (four math warps and one producer warp) and its dynamic shared memory
/// for `num_stages` stages of BLOCK_N (never more than DeepGEMM's budget).
int hc_prenorm_threads();
int hc_prenorm_smem_bytes(int block_n, int num_stages);

const jit::KernelSource& tf32_hc_prenorm_gemm_kernel();

// ---------------------------------------------------------------- fp8_mqa_logits (prefill)

/// KV rows a logits block processes per step (both logits kernels) and the pipeline depths.
constexpr int kMqaBlockKv = 256;
constexpr int kMqaNumQStages = 3;
constexpr int kMqaNumKvStages = 3;
/// DeepGEMM's clean_logits config: columns per chunk, warps per block.
constexpr int kCleanBlockKv = 8192;
constexpr int kCleanNumWarps = 8;

/// Query heads and head dims the indexer kernels take: H in {32, 64}, D in {32, 64, 128}
/// (apis/attention.hpp). Throws InputError naming `what` otherwise.
void check_mqa_heads(int64_t num_heads, int64_t head_dim);

/// Compile-time constants of fp8_mqa_logits: NUM_HEADS, HEAD_DIM, IS_COMPRESSED_LOGITS (0),
/// BLOCK_Q (128 / H query tokens per block), BLOCK_KV (256), NUM_Q_STAGES (3), NUM_KV_STAGES (3),
/// NUM_SMS (the persistent grid). Sequence lengths are runtime values.
std::vector<jit::Constexpr> mqa_logits_constexprs(int num_heads, int head_dim, int num_sms);
int mqa_logits_threads();
int mqa_logits_smem_bytes(int num_heads, int head_dim);

/// clean_logits: NEXT_N (1 for the prefill indexer), BLOCK_KV (8192), NUM_WARPS (8).
std::vector<jit::Constexpr> clean_logits_constexprs(int next_n = 1);

const jit::KernelSource& fp8_mqa_logits_kernel();
const jit::KernelSource& clean_logits_kernel();

// ---------------------------------------------------------------- paged (decode) indexer

/// KV tokens of one scheduled task of the paged logits kernel (DeepGEMM's SPLIT_KV).
constexpr int kPagedSplitKv = 256;
/// The cache block size our paged kernel takes (DeepGEMM's SM90 requires 64; SM100 also 32).
constexpr int kPagedBlockKv = 64;
/// The largest batch the metadata kernel takes (its prefix sums live in 48 KiB of static shared
/// memory).
constexpr int64_t kPagedMaxBatch = 12288;

/// Compile-time constants of get_paged_mqa_logits_metadata: ALIGNED_BATCH (align(B, 32)),
/// SPLIT_KV (256), NUM_SMS, IS_VARLEN (0). B and next_n are runtime arguments.
std::vector<jit::Constexpr> paged_mqa_metadata_constexprs(int64_t batch, int num_sms);

/// Compile-time constants of fp8_paged_mqa_logits on `sm` (90 or 100): NEXT_N, NUM_HEADS,
/// HEAD_DIM, BLOCK_KV, IS_CONTEXT_LENS_2D (1), IS_VARLEN (0), NUM_Q_STAGES (3), NUM_KV_STAGES
/// (3 on SM90, 4 on SM100), SPLIT_KV (256). No batch size, no SM count.
std::vector<jit::Constexpr> paged_mqa_logits_constexprs(int sm, int next_n, int num_heads, int head_dim,
                                                        int block_kv);
int paged_mqa_logits_threads();
int paged_mqa_logits_smem_bytes(int sm, int next_n, int num_heads, int head_dim);

const jit::KernelSource& paged_mqa_metadata_kernel();
const jit::KernelSource& fp8_paged_mqa_logits_kernel();

// ---------------------------------------------------------------- registry

/// The kernels above, for dg_kernels.cpp's all_kernels().
std::vector<const jit::KernelSource*> indexer_kernels();

/// Compile cases at DeepSeek V4-Flash shapes (index_n_heads 64, index_head_dim 128, hc_mult 4:
/// the hc GEMM's N = 24, K = 16384; cache blocks of 64 tokens; an H200's 132 SMs), for
/// dg_kernels.cpp's compile_cases().
std::vector<KernelCompileCase> indexer_compile_cases();

}  // namespace coldstart::deepgemm
