// DeepGEMM-style kernels (DeepSeek V3 / V4 serving): FP8 GEMMs with fine-grained scales, the
// hyper-connection TF32 pre-norm GEMM and the sparse indexer's MQA logits, as runtime-compiled
// CUDA C++ with DeepGEMM's compile keys and config heuristics. This header is torch-free: kernel
// sources, compile keys, the tile heuristics per arch and the compile cases. The torch-side API
// the models call is deepgemm.h.
//
// What DeepGEMM does (deepseek-ai/DeepGEMM at 891d57b, paths below under csrc/):
// - Every kernel is a C++ template instantiated and compiled on first use (NVCC, or NVRTC with
//   DG_JIT_USE_NVRTC=1); the cache key is the generated code text, which holds the template
//   arguments (jit/compiler.hpp, jit/kernel_runtime.hpp). For the FP8 GEMMs N and K are compiled
//   in and M is not (compiled dims "nk", apis/gemm.hpp), but the tile (block_m, block_n), the
//   pipeline depth and the cluster come from a heuristic over M (jit_kernels/heuristics/sm90.hpp,
//   sm100.hpp), so a new M can mean a new kernel.
// - sm90_fp8_gemm_1d2d (jit_kernels/impls/sm90_fp8_gemm_1d2d.hpp) serves fp8_gemm_nt
//   (GemmType::Normal), fp8_einsum "bhr,hdr->bhd" (GemmType::Batched, apis/einsum.hpp) and, as
//   sm90_m_grouped_fp8_gemm_contiguous_1d2d, m_grouped_fp8_gemm_nt_contiguous (MoE experts).
//
// Our kernels (dg_fp8_gemm.cu) follow the same recipe (A 1x128 per-token-group scales, B 128x128
// block scales, bf16 D), pipeline (a TMA producer warpgroup, NUM_STAGES shared-memory stages,
// persistent over NUM_SMS blocks) and math (SM90: WGMMA m64nNk32 from 128B-swizzled shared memory,
// promotion of each 128-deep partial sum with the scales in registers). Differences: the epilogue
// stores from registers instead of through shared memory + TMA; a cluster is launched with the
// selected shape but each block loads its own tiles (no TMA multicast); the tile order is plain
// m-fastest (DeepGEMM swizzles blocks in groups of 8/16); on sm_100a, where WGMMA does not exist,
// the same kernel uses the warp-level FP8 mma.sync path (DeepGEMM uses tcgen05 UMMA with tensor
// memory there); SWAP_AB is part of that key but both settings compute the same tile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/kernel_registry.h"

namespace coldstart::deepgemm {

/// The family name the DeepGEMM kernels' compile cases and errors carry.
inline constexpr const char* kFamily = "deepgemm";

/// ceil(a / b) for positive b.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
/// `a` rounded up to a multiple of positive `b`.
inline int64_t align_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

/// DeepGEMM's GemmType values (deep_gemm/include/deep_gemm/common/types.cuh).
enum class GemmType : int { kNormal = 0, kMGroupedContiguous = 1, kBatched = 4 };

/// "normal", "m_grouped_contiguous", "batched".
const char* gemm_type_name(GemmType t);

/// Shared memory DeepGEMM's heuristics may use per block on SM90 and SM100 (232448 bytes).
constexpr int kSmemCapacity = 232448;
/// Rows of each expert's segment in the m-grouped contiguous layout
/// (get_mk_alignment_for_contiguous_layout, 128 by default, jit_kernels/heuristics/runtime.hpp).
constexpr int kMkAlignmentForContiguousLayout = 128;
/// K block of the FP8 kernels: 128 bytes of e4m3 (heuristics/sm90.hpp, block_k = 128 / elem).
constexpr int kFp8BlockK = 128;

/// One FP8 GEMM problem: D[M, N] = A[M, K] x B[N, K]^T per group. `num_groups` is the batch of a
/// batched GEMM (fp8_einsum's h) or the number of experts of an m-grouped one (B is
/// [num_groups, N, K]); 1 for a normal GEMM. For an m-grouped GEMM `m` is the total row count
/// (each expert's rows padded to kMkAlignmentForContiguousLayout).
struct GemmShape {
  GemmType type = GemmType::kNormal;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int num_groups = 1;
};

/// A config DeepGEMM's heuristic picks, plus the modelled cost it was ranked by.
struct GemmConfig {
  int block_m = 0;
  int block_n = 0;
  int block_k = kFp8BlockK;
  int num_stages = 0;
  int cluster_m = 1;      ///< 2: two blocks along M share B (TMA multicast of B)
  int cluster_n = 1;      ///< 2: two blocks along N share A (multicast of A)
  bool swap_ab = false;   ///< SM100 only
  int num_sms = 0;        ///< persistent grid
  int smem_bytes = 0;     ///< DeepGEMM's dynamic shared memory for this config
  int num_math_threads = 0;
  int num_threads = 0;    ///< DeepGEMM's block size on this arch
  int64_t num_cycles = 0; ///< SM90 cost model (0 on SM100)
  int num_waves = 0;
  int last_wave_util = 0;

  int cluster_size() const { return cluster_m * cluster_n; }
  bool multicast_on_a() const { return cluster_n > 1; }
  /// "64x112x128 s9 c1" / "... c2(A)" / "... swap": tile, stages, cluster (multicast operand).
  std::string name() const;
};

/// Every candidate DeepGEMM's heuristic enumerates for `shape` on compute capability `sm` (90 or
/// 100) with `num_sms` SMs, in its enumeration order, each with its stages and cost filled in;
/// rejected candidates are left out. Throws InputError for an unsupported arch, an odd num_sms
/// (DeepGEMM asserts it is even), a non-positive dimension or K not a multiple of 128.
std::vector<GemmConfig> fp8_gemm_candidates(const GemmShape& shape, int sm, int num_sms);

/// DeepGEMM's pick (get_best_config): the first candidate no later one beats. SM90: lowest
/// modelled cycle count (heuristics/sm90.hpp get_layout_info / compare). SM100: a single wave
/// first, then the larger cluster, fewer waves, better last-wave utilisation, smaller tiles
/// (heuristics/sm100.hpp compare); m-grouped GEMMs use its fixed layout. Same errors as
/// fp8_gemm_candidates, and InputError when nothing survives.
GemmConfig select_fp8_gemm_config(const GemmShape& shape, int sm, int num_sms);

/// The index of that pick among `candidates` (fp8_gemm_candidates of `shape` on compute
/// capability `sm`), for callers that also need the candidates. Throws InputError when there are
/// none (naming the shape).
size_t best_fp8_gemm_candidate(const std::vector<GemmConfig>& candidates, const GemmShape& shape, int sm);

/// The tuning key a compile record shows for a selection: "M=300 N=1536 K=4096 G=1 -> 64x112".
std::string gemm_tuning_key(const GemmShape& shape, const GemmConfig& config);

/// The M values the reference warmer samples (../shared/seeds/deepseek-v4-deep-gemm-warmup.txt,
/// _warmup_m_values): every M from 1 to min(max_tokens, 2048), then every 16th from there to
/// max_tokens, plus max_tokens; ascending. Empty when max_tokens < 1.
std::vector<int64_t> dense_warmup_m_values(int64_t max_tokens);

/// A config the heuristic reaches for some M in [1, max_tokens] that no sampled M reaches: a
/// kernel a warmup over those samples would leave to the first request that needs it.
struct CoverageGap {
  GemmConfig config;
  int64_t first_m = 0;  ///< the smallest M that selects it
  int64_t num_m = 0;    ///< how many M in [1, max_tokens] select it
};

/// Checks a warmup's M samples against the heuristic (the seed claims dense sampling "provably
/// covers every reachable config"): evaluates select_fp8_gemm_config for every M in
/// [1, max_tokens] with shape.m replaced, and returns the configs (by compile-key identity: tile,
/// stages, cluster, swap) that `sampled` never selects, in order of first_m. Same errors as
/// select_fp8_gemm_config.
std::vector<CoverageGap> warmup_coverage_gaps(const GemmShape& shape, int sm, int num_sms, int64_t max_tokens,
                                              const std::vector<int64_t>& sampled);

/// The kernels. One CUDA source serves all three; their names are DeepGEMM's API names.
const jit::KernelSource& fp8_gemm_nt_kernel();                 ///< GemmType::Normal
const jit::KernelSource& m_grouped_fp8_gemm_contiguous_kernel();  ///< MGroupedContiguous
const jit::KernelSource& fp8_einsum_kernel();                  ///< Batched ("bhr,hdr->bhd")
const jit::KernelSource& fp8_gemm_kernel(GemmType t);
std::vector<const jit::KernelSource*> all_kernels();

/// Compile-time constants of a GEMM launch: SHAPE_N, SHAPE_K, NUM_GROUPS, BLOCK_M, BLOCK_N,
/// BLOCK_K, NUM_STAGES, NUM_MULTICAST, IS_MULTICAST_ON_A, NUM_SMS, GEMM_TYPE, SWAP_AB, MMA_SYNC
/// (`mma_sync`: take the warp-level path on sm_90a too, for tests).
std::vector<jit::Constexpr> fp8_gemm_constexprs(const GemmShape& shape, const GemmConfig& config,
                                                bool mma_sync = false);

/// Threads per block of our kernel: 128 per math warpgroup (1 when block_m <= 64, else 2) + 128.
int fp8_gemm_threads(const GemmConfig& config);
/// Dynamic shared memory of our kernel (stages of A, B and A-scale tiles, barriers, 1024 bytes of
/// alignment slack); never more than the config's smem_bytes + 1024.
int fp8_gemm_smem_bytes(const GemmConfig& config);

/// Representative compile cases (DeepSeek V4-Flash shapes at M that select distinct tiles).
std::vector<KernelCompileCase> compile_cases();

}  // namespace coldstart::deepgemm
