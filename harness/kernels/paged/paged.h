// Paged attention over a plain paged KV cache (bf16 or fp8 e4m3 + per-tensor scale): torch-side
// launch wrappers of the runtime-compiled kernels.
//
// Every wrapper validates shapes, dtypes, layouts and devices (throwing coldstart::Error that
// names the function and the argument), builds the launch arguments, and calls
// JitRuntime::launch on torch's current CUDA stream. In compile-only mode the tensors live on
// torch's meta device and the runtime was made with `launch = false`: the wrappers then only
// validate and compile (they never read tensor data, call .item() or synchronize), so the compile
// keys are the ones a GPU run would produce (pointer alignment comes from storage offsets, see
// harness/runtime/tensor_args.h).
//
// The cache of a layer is kv_cache = [2, num_blocks, block_size, Hk, D] of
// cache_scalar_type(layout): bf16, or for fp8 uint8 (a float8_e4m3fn tensor is accepted too,
// where torch has that dtype). Each block [block_size, Hk, D] is dense; the distance between two
// blocks (stride 1) is passed to the kernels, so both vLLM layouts work: the plain one
// (cache_shape, contiguous: all K blocks, then all V blocks) and the block-major one of hybrid
// models (block_major_view: a block's K then its V, one page per block). k_scale / v_scale are
// float32 tensors of one element on the cache's device (vLLM's layer._k_scale / _v_scale):
// required for fp8; for bf16 they are not read and may be undefined tensors.
//
// Units: token counts in tokens, strides in elements, workspace sizes in bytes. "Hq"/"Hk" are the
// query / KV head counts of the layer, "D" the head dimension, "S" the number of KV splits.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/paged/paged_kernels.h"

namespace coldstart::paged {

/// Shape of one layer's cache: {2, num_blocks, block_size, num_kv_heads, head_dim}.
std::vector<int64_t> cache_shape(const PagedLayout& layout, int64_t num_blocks);

/// Torch dtype of the cache tensor: kBFloat16 (bf16) or kByte (fp8 e4m3 bytes).
at::ScalarType cache_scalar_type(const PagedLayout& layout);

/// The block-major view vLLM gives an attention layer of a hybrid model, whose pages are shared
/// with recurrent-state layers (vllm/v1/worker/gpu_model_runner.py,
/// _update_hybrid_attention_mamba_layout: the cache is re-strided so that page p holds block p's
/// K followed by its V): `bytes` uint8 1-D of num_blocks * page_bytes, page_bytes >=
/// layout.page_size_bytes(); returns [2, num_blocks, block_size, Hk, D] with stride(1) =
/// page_bytes / element size. Works on the meta device. Throws Error when the sizes disagree.
at::Tensor block_major_view(const PagedLayout& layout, const at::Tensor& bytes, int64_t num_blocks,
                            int64_t page_bytes);

/// Writes N tokens' K and V into the cache (kernel paged_cache_store; vLLM's
/// reshape_and_cache_flash). fp8: stores e4m3(x / scale), rounded to nearest even, saturating.
/// - key, value: bf16 [N, Hk, D], innermost dimension contiguous (any token/head strides, e.g.
///   views of a fused qkv projection)
/// - slot_mapping: int64 [N], contiguous; the cache slot of each token, negative = skip
/// - kv_cache: [2, num_blocks, block_size, Hk, D], blocks dense (see above)
/// - k_scale, v_scale: float32 [1] (see above)
/// N == 0 launches (and compiles) nothing.
void store(jit::JitRuntime& rt, const PagedLayout& layout, const at::Tensor& key,
           const at::Tensor& value, const at::Tensor& slot_mapping, const at::Tensor& kv_cache,
           const at::Tensor& k_scale, const at::Tensor& v_scale);

/// Split-KV decode stage 1 (kernel paged_decode_stage1), one query token per sequence.
/// - q: bf16 [B, Hq, D], innermost dimension contiguous; Hq a multiple of layout.num_kv_heads
/// - kv_cache, k_scale, v_scale: as for store
/// - block_table: int32 [>= B, W], innermost contiguous; its row stride is passed to the kernel
///   as `block_table_stride` and specialized like Triton (1 / divisible by 16), so a warmup must
///   use a table with the serving row stride to hit the same compile key
/// - seq_lens: int32 [>= B], contiguous; tokens cached per sequence (the query token included)
/// - sm_scale: softmax scale (usually 1/sqrt(D))
/// - mid_o: float32 [B, Hq, S, D + 1], contiguous; S (1..1024) = number of KV splits
/// B == 0 launches nothing.
void decode_stage1(jit::JitRuntime& rt, const PagedLayout& layout, const at::Tensor& q,
                   const at::Tensor& kv_cache, const at::Tensor& k_scale,
                   const at::Tensor& v_scale, const at::Tensor& block_table,
                   const at::Tensor& seq_lens, float sm_scale, const at::Tensor& mid_o);

/// Split-KV decode stage 2 (kernel paged_decode_stage2): combines the splits.
/// - mid_o: float32 [B, Hq, S, D + 1], contiguous (stage 1's output)
/// - out: bf16 [B, Hq, D], innermost contiguous
/// - lse: float32 [B, Hq], contiguous; natural-log LSE of the scaled scores
void decode_stage2(jit::JitRuntime& rt, const PagedLayout& layout, const at::Tensor& mid_o,
                   const at::Tensor& out, const at::Tensor& lse);

/// The decode scratch of one step, carved from the workspace.
struct DecodeWorkspace {
  at::Tensor mid_o;  ///< float32 [B, Hq, S, D + 1] at byte offset 0
  at::Tensor lse;    ///< float32 [B, Hq] at byte offset round_up_256(mid_o bytes)
};

/// Views of `buffer` (uint8, 1-D, contiguous, at least decode_workspace_bytes(B, Hq, D, S) bytes,
/// starting 256-byte aligned) as the decode scratch. Works on the meta device.
DecodeWorkspace decode_workspace_views(const at::Tensor& buffer, int64_t batch,
                                       int64_t num_q_heads, int64_t head_dim,
                                       int64_t num_kv_splits = kNumKvSplits);

/// decode_stage1 into ws.mid_o, then decode_stage2 into `out` (bf16 [B, Hq, D], innermost
/// contiguous) and ws.lse.
void decode(jit::JitRuntime& rt, const PagedLayout& layout, const at::Tensor& q,
            const at::Tensor& kv_cache, const at::Tensor& k_scale, const at::Tensor& v_scale,
            const at::Tensor& block_table, const at::Tensor& seq_lens, float sm_scale,
            const DecodeWorkspace& ws, const at::Tensor& out);

/// Continuation (chunked) prefill attention (kernel paged_prefill). The chunk's K/V must already
/// be in the cache (store first): query i of sequence b sits at position
/// seq_lens[b] - query_len_b + i and attends causally to cached tokens [0, position].
/// - q: bf16 [T, Hq, D], innermost contiguous; the chunks of all sequences packed (varlen)
/// - kv_cache, k_scale, v_scale: as for store
/// - block_table: int32 [>= num_seqs, W], innermost contiguous (row stride specialized)
/// - query_start_loc: int32 [num_seqs + 1], contiguous, num_seqs >= 1 (vLLM's
///   query_start_loc / cu_seqlens_q); tokens at or past query_start_loc[num_seqs] are padding
///   and their output rows are not written
/// - seq_lens: int32 [>= num_seqs], contiguous; context + query_len of each sequence
/// - out: bf16 [T, Hq, D], innermost contiguous
/// T == 0 launches nothing. No workspace.
void prefill(jit::JitRuntime& rt, const PagedLayout& layout, const at::Tensor& q,
             const at::Tensor& kv_cache, const at::Tensor& k_scale, const at::Tensor& v_scale,
             const at::Tensor& block_table, const at::Tensor& query_start_loc,
             const at::Tensor& seq_lens, float sm_scale, const at::Tensor& out);

}  // namespace coldstart::paged
