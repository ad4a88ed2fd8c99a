// Paged attention over a plain paged KV cache: bf16 (vLLM kv_cache_dtype "auto" / "bfloat16" for
// a bf16 model) or fp8 e4m3 with a per-tensor scale ("fp8" / "fp8_e4m3"). Cache layout, the
// runtime-compiled kernels' sources and launch geometry, and the workspace sizes. Torch-free (the
// torch-side launch wrappers are in paged.h; the libtorch reference in paged_reference.h).
//
// The cache of one attention layer is vLLM's FlashAttention layout
// (vllm/v1/attention/backends/flash_attn.py, FlashAttentionBackend.get_kv_cache_shape:
// (2, num_blocks, block_size, num_kv_heads, head_size)):
//   kv_cache [2, num_blocks, block_size, Hk, D], contiguous; kv_cache[0] = K, kv_cache[1] = V;
//   token slot s is block s / block_size, row s % block_size.
// Element type: bf16 for kBF16; one byte (torch uint8, or float8_e4m3fn where torch has it) for
// kFP8E4M3, holding e4m3(x / scale) rounded to nearest even and saturated to +-448, with k_scale
// and v_scale float32 scalars per layer (vLLM's fp8 KV cache; the bytes decode as value * scale).
//
// Kernels (one folder, harness/kernels/paged/; argument order documented atop each .cu file):
//   paged_cache_store     N tokens' K and V into the cache by slot_mapping (reshape_and_cache)
//   paged_decode_stage1   split-KV decode, one query token per sequence -> float32 partials
//   paged_decode_stage2   reduces the splits -> bf16 output and LSE
//   paged_prefill         continuation prefill: a chunk's queries attend causally over the
//                         sequence's whole cached context plus the chunk (stored first)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/kernel_registry.h"
#include "harness/kernels/split_kv.h"

namespace coldstart::paged {

/// Element type of the cache. The value is the kernels' CACHE_DTYPE constexpr.
enum class CacheDtype : int {
  kBF16 = 0,      ///< "auto" (bf16 model) / "bfloat16" / "bf16"
  kFP8E4M3 = 1,   ///< "fp8" / "fp8_e4m3"
};

/// Parses vLLM's kv_cache_dtype: "auto", "bfloat16", "bf16" -> kBF16; "fp8", "fp8_e4m3" ->
/// kFP8E4M3. Throws InputError for anything else (fp8_e5m2, fp16, turboquant_*, ...).
CacheDtype parse_cache_dtype(const std::string& kv_cache_dtype);

/// "bf16" or "fp8_e4m3".
const char* cache_dtype_name(CacheDtype dtype);

/// Bytes of one cache element: 2 (bf16) or 1 (fp8).
constexpr int cache_element_bytes(CacheDtype dtype) { return dtype == CacheDtype::kBF16 ? 2 : 1; }

/// Geometry of a paged cache for one attention layer.
struct PagedLayout {
  int head_dim = 0;      ///< D, a multiple of 32 in [32, 256]
  int block_size = 0;    ///< tokens per cache block (> 0)
  int num_kv_heads = 0;  ///< Hk (> 0)
  CacheDtype dtype = CacheDtype::kBF16;

  /// Throws InputError when head_dim is not a multiple of 32 in [32, 256] or block_size /
  /// num_kv_heads is not positive.
  static PagedLayout make(int head_dim, int block_size, int num_kv_heads, CacheDtype dtype);

  int element_bytes() const { return cache_element_bytes(dtype); }

  /// Bytes of K and V of one block, vLLM's AttentionSpec.page_size_bytes:
  /// 2 * block_size * num_kv_heads * head_dim * element_bytes.
  int64_t page_size_bytes() const {
    return 2ll * block_size * num_kv_heads * head_dim * element_bytes();
  }
};

/// Number of KV splits of the decode kernels: vLLM's FlashAttention backend bounds its split
/// count by 16 under CUDA graphs (_DEFAULT_MAX_NUM_SPLITS_FOR_CUDA_GRAPH).
constexpr int kNumKvSplits = 16;

/// Query heads one paged_decode_stage1 block serves (its grid is (B, Hq / this, splits)): the
/// largest of 4, 3, 2, 1 dividing `kv_group` (Hq / Hk) for which the heads' per-lane state fits,
/// as the kernel's cs_decode_heads_per_block decides from HEAD_DIM and KV_GROUP. `head_dim` a multiple
/// of 32 in [32, 256], kv_group >= 1. Not part of the compile key (it follows from the key).
int decode_stage1_heads_per_block(int head_dim, int kv_group);

/// Threads per CTA of each kernel (fixed in the sources).
constexpr int kStoreThreads = 128;
constexpr int kStage1Threads = 128;
constexpr int kStage2Threads = 128;
constexpr int kPrefillThreads = 128;

/// Rounds up to a multiple of 256 bytes (the workspace's sub-allocation granule; split_kv.h).
using kernels::round_up_256;

/// Decode scratch of one step, in bytes: the split partials mid_o float32 [B, Hq, S, D + 1], then
/// the LSE float32 [B, Hq], each rounded up to 256 B. The bf16 output [B, Hq, D] is the caller's
/// (the layer's output buffer), not workspace.
constexpr int64_t decode_workspace_bytes(int64_t batch, int64_t num_q_heads, int64_t head_dim,
                                         int64_t num_kv_splits = kNumKvSplits) {
  return round_up_256(kernels::split_kv_mid_o_bytes(batch, num_q_heads, head_dim, num_kv_splits)) +
         round_up_256(kernels::split_kv_lse_bytes(batch, num_q_heads));
}

/// The runtime-compiled kernels (sources embedded at build time).
const jit::KernelSource& cache_store_kernel();    ///< paged_cache_store
const jit::KernelSource& decode_stage1_kernel();  ///< paged_decode_stage1
const jit::KernelSource& decode_stage2_kernel();  ///< paged_decode_stage2
const jit::KernelSource& prefill_kernel();        ///< paged_prefill
std::vector<const jit::KernelSource*> all_kernels();

/// Constexprs of each kernel, in the order they enter the compile key. Every kernel that reads
/// or writes the cache carries CACHE_DTYPE, so bf16 and fp8 are distinct compile keys; stage 2
/// does not touch the cache and is shared.
std::vector<jit::Constexpr> cache_store_constexprs(const PagedLayout& layout);
std::vector<jit::Constexpr> decode_stage1_constexprs(const PagedLayout& layout, int num_q_heads,
                                                     int num_kv_splits = kNumKvSplits);
std::vector<jit::Constexpr> decode_stage2_constexprs(const PagedLayout& layout,
                                                     int num_kv_splits = kNumKvSplits);
std::vector<jit::Constexpr> prefill_constexprs(const PagedLayout& layout, int num_q_heads);

/// Representative compile cases for the multi-arch compile test: every kernel for both cache
/// dtypes, head_dim 128 and 256, block size 16, Qwen3-8B-like heads (32 / 8), with serving-like
/// argument specialization.
std::vector<KernelCompileCase> compile_cases();

}  // namespace coldstart::paged
