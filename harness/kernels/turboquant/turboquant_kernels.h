// TurboQuant 4-bit KV cache ("turboquant_4bit_nc"): cache layout, the runtime-compiled kernels'
// sources and launch geometry, and the workspace sizes. Torch-free (the torch-side launch
// wrappers are in turboquant.h; the libtorch reference in turboquant_reference.h).
//
// The format, per token and KV head, head_dim D (a power of two):
// - Key: rotated by the normalized Sylvester-Hadamard matrix H (H[i][j] = (-1)^popcount(i&j) /
//   sqrt(D); symmetric, its own inverse), then divided by its L2 norm. Each coordinate of the unit
//   vector, times sqrt(D), is replaced by the index of the nearest of the 16 Lloyd-Max centroids of
//   a standard normal (+-0.1284, +-0.3881, +-0.6568, +-0.9424, +-1.2562, +-1.6181, +-2.0690,
//   +-2.7326; index 0 is the most negative). Stored: D 4-bit indices (two per byte, the even
//   coordinate in the low nibble) and the norm as fp16.
// - Key dequantization with norm correction: c = centroid vector; k' = H (norm * c / |c|), so the
//   reconstructed key has exactly the stored norm.
// - Value: 4-bit uniform asymmetric: scale = fp16((max - min) / 15), zero = fp16(min),
//   index = clamp(round_half_even((v - zero) / scale), 0, 15) (0 when scale is 0); v' = zero +
//   scale * index. Stored: D 4-bit indices, then scale and zero.
// - Slot = key bytes (D/2 + 2) followed by value bytes (D/2 + 4), rounded up to even: 134 bytes for
//   D = 128. The byte map is documented in tq_common.cuh.
// - Cache tensor of a layer: uint8 [num_blocks, block_size, num_kv_heads, slot_bytes],
//   contiguous; token slot s is block s / block_size, row s % block_size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/kernel_registry.h"
#include "harness/kernels/split_kv.h"

namespace coldstart::tq {

/// Byte geometry of a TurboQuant cache for one attention layer.
struct TqLayout {
  int head_dim = 0;      ///< D, a power of two in [16, 256]
  int block_size = 0;    ///< tokens per cache block (> 0)
  int num_kv_heads = 0;  ///< Hk (> 0)
  int key_bytes = 0;     ///< D/2 + 2
  int value_bytes = 0;   ///< D/2 + 4
  int slot_bytes = 0;    ///< key_bytes + value_bytes rounded up to even (= D + 6)

  /// Throws InputError when head_dim is not a power of two in [16, 256] or block_size /
  /// num_kv_heads is not positive.
  static TqLayout make(int head_dim, int block_size, int num_kv_heads);

  /// Bytes of one cache block: block_size * num_kv_heads * slot_bytes.
  int64_t block_bytes() const {
    return static_cast<int64_t>(block_size) * num_kv_heads * slot_bytes;
  }
};

/// Number of KV splits of the decode kernels (vLLM's TurboQuant default).
constexpr int kNumKvSplits = 32;

/// Threads per CTA of each kernel (fixed in the sources).
constexpr int kStoreThreads = 32;
constexpr int kStage1Threads = 128;
constexpr int kStage2Threads = 128;
constexpr int kDequantThreads = 128;

/// Query heads one tq_decode_stage1 block serves (its grid is (B, Hq / this, splits)): the
/// kernel's cs_decode_heads_per_block(KV_GROUP, 8), each lane owning 8 coordinates; 4, 3, 2 or 1
/// for `kv_group` (Hq / Hk) >= 1. Not part of the compile key (it follows from KV_GROUP).
constexpr int decode_stage1_heads_per_block(int kv_group) {
  return kernels::split_kv_heads_per_block(kv_group, 8);
}

/// Tokens one CTA of tq_dequant_kv handles: 128 threads / lanes per head vector, where a lane
/// owns max(4, D/32) coordinates.
constexpr int dequant_tokens_per_cta(int head_dim) {
  const int cpl = head_dim >= 128 ? head_dim / 32 : 4;
  return kDequantThreads / (head_dim / cpl);
}

/// Rounds up to a multiple of 256 bytes (the workspace's sub-allocation granule; split_kv.h).
using kernels::round_up_256;

/// Decode scratch of one step as vLLM sizes it, in bytes: mid_o float32 [B, Hq, S, D+1], then
/// the output bf16 [B, Hq, D], then the LSE float32 [B, Hq], each rounded up to 256 B.
constexpr int64_t decode_workspace_bytes(int64_t batch, int64_t num_q_heads, int64_t head_dim,
                                         int64_t num_kv_splits = kNumKvSplits) {
  return round_up_256(kernels::split_kv_mid_o_bytes(batch, num_q_heads, head_dim, num_kv_splits)) +
         round_up_256(batch * num_q_heads * head_dim * 2) +
         round_up_256(kernels::split_kv_lse_bytes(batch, num_q_heads));
}

/// Continuation-prefill K and V buffers as vLLM sizes them, in bytes: two bf16
/// [Hk, alloc_len, D] buffers, each rounded up to 256 B. alloc_len = cached tokens rounded up to
/// the block size.
constexpr int64_t continuation_workspace_bytes(int64_t num_kv_heads, int64_t alloc_len,
                                               int64_t head_dim) {
  return 2 * round_up_256(num_kv_heads * alloc_len * head_dim * 2);
}

/// alloc_len for a continuation over `cached_tokens` tokens: rounded up to `block_size`.
constexpr int64_t continuation_alloc_len(int64_t cached_tokens, int64_t block_size) {
  return (cached_tokens + block_size - 1) / block_size * block_size;
}

/// The runtime-compiled kernels (sources embedded at build time). Argument order and meaning are
/// documented at the top of each .cu file under harness/kernels/turboquant/.
const jit::KernelSource& cache_store_kernel();    ///< tq_cache_store
const jit::KernelSource& decode_stage1_kernel();  ///< tq_decode_stage1
const jit::KernelSource& decode_stage2_kernel();  ///< tq_decode_stage2
const jit::KernelSource& dequant_kv_kernel();     ///< tq_dequant_kv
std::vector<const jit::KernelSource*> all_kernels();

/// Constexprs of each kernel, in the order they enter the compile key.
std::vector<jit::Constexpr> cache_store_constexprs(const TqLayout& layout);
std::vector<jit::Constexpr> decode_stage1_constexprs(const TqLayout& layout, int num_q_heads,
                                                     int num_kv_splits = kNumKvSplits);
std::vector<jit::Constexpr> decode_stage2_constexprs(const TqLayout& layout,
                                                     int num_kv_splits = kNumKvSplits);
std::vector<jit::Constexpr> dequant_kv_constexprs(const TqLayout& layout);

/// Representative compile cases for the multi-arch compile test: every kernel for head_dim 128
/// and 64, block size 16, Qwen3-8B-like heads, with serving-like argument specialization.
std::vector<KernelCompileCase> compile_cases();

}  // namespace coldstart::tq
