// TurboQuant 4-bit KV cache: torch-side launch wrappers of the runtime-compiled kernels.
//
// Every wrapper validates shapes, dtypes, layouts and devices (throwing coldstart::Error that
// names the function and the argument), builds the launch arguments, and calls
// JitRuntime::launch on torch's current CUDA stream. In compile-only mode the tensors live on
// torch's meta device and the runtime was made with `launch = false`: the wrappers then only
// validate and compile (they never read tensor data, call .item() or synchronize), so the compile
// keys are the ones a GPU run would produce (pointer alignment comes from storage offsets, see
// harness/runtime/tensor_args.h).
//
// Units: token counts in tokens, strides in elements, workspace sizes in bytes. "Hq"/"Hk" are the
// query / KV head counts of the layer, "D" the head dimension, "S" the number of KV splits.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/turboquant/turboquant_kernels.h"

namespace coldstart::tq {

/// Shape of one layer's cache: {num_blocks, block_size, num_kv_heads, slot_bytes} (uint8).
std::vector<int64_t> cache_shape(const TqLayout& layout, int64_t num_blocks);

/// Quantizes and writes N tokens into the cache (kernel tq_cache_store).
/// - key, value: bf16 [N, Hk, D], innermost dimension contiguous (any token/head strides, e.g.
///   views of a fused qkv projection)
/// - slot_mapping: int64 [N], contiguous; the cache slot of each token, negative = skip
/// - cache: uint8 cache_shape(layout, num_blocks), contiguous
/// N == 0 launches (and compiles) nothing.
void store(jit::JitRuntime& rt, const TqLayout& layout, const at::Tensor& key,
           const at::Tensor& value, const at::Tensor& slot_mapping, const at::Tensor& cache);

/// Split-KV decode stage 1 (kernel tq_decode_stage1) for one query token per sequence.
/// - q: bf16 [B, Hq, D], innermost dimension contiguous; Hq a multiple of layout.num_kv_heads
/// - cache: uint8 cache_shape(layout, num_blocks), contiguous
/// - block_table: int32 [>= B, W], innermost contiguous; its row stride is passed to the kernel as
///   `block_table_stride` and specialized like Triton (1 / divisible by 16), so a warmup must use
///   a table with the serving row stride to hit the same compile key
/// - seq_lens: int32 [>= B], contiguous; tokens cached per sequence (the query token included)
/// - sm_scale: softmax scale (usually 1/sqrt(D))
/// - mid_o: float32 [B, Hq, S, D + 1], contiguous; S = number of KV splits (kNumKvSplits in vLLM)
/// B == 0 launches nothing.
void decode_stage1(jit::JitRuntime& rt, const TqLayout& layout, const at::Tensor& q,
                   const at::Tensor& cache, const at::Tensor& block_table,
                   const at::Tensor& seq_lens, float sm_scale, const at::Tensor& mid_o);

/// Split-KV decode stage 2 (kernel tq_decode_stage2): combines the splits.
/// - mid_o: float32 [B, Hq, S, D + 1], contiguous (stage 1's output)
/// - out: bf16 [B, Hq, D], innermost contiguous
/// - lse: float32 [B, Hq], contiguous; natural-log LSE of the scaled scores
void decode_stage2(jit::JitRuntime& rt, const TqLayout& layout, const at::Tensor& mid_o,
                   const at::Tensor& out, const at::Tensor& lse);

/// The decode scratch of one step, carved from the workspace the way vLLM lays it out.
struct DecodeWorkspace {
  at::Tensor mid_o;  ///< float32 [B, Hq, S, D + 1] at byte offset 0
  at::Tensor out;    ///< bf16 [B, Hq, D] at byte offset round_up_256(mid_o bytes)
  at::Tensor lse;    ///< float32 [B, Hq] after that, also 256-byte aligned
};

/// Views of `buffer` (uint8, 1-D, contiguous, at least decode_workspace_bytes(B, Hq, D, S) bytes,
/// starting 256-byte aligned) as the decode scratch. Works on the meta device.
DecodeWorkspace decode_workspace_views(const at::Tensor& buffer, int64_t batch,
                                       int64_t num_q_heads, int64_t head_dim,
                                       int64_t num_kv_splits = kNumKvSplits);

/// decode_stage1 then decode_stage2 into `ws` (see decode_workspace_views); the attention output
/// is ws.out, bf16 [B, Hq, D].
void decode(jit::JitRuntime& rt, const TqLayout& layout, const at::Tensor& q,
            const at::Tensor& cache, const at::Tensor& block_table, const at::Tensor& seq_lens,
            float sm_scale, const DecodeWorkspace& ws);

/// The continuation-prefill K and V buffers.
struct ContinuationBuffers {
  at::Tensor k;  ///< bf16 [Hk, alloc_len, D] at byte offset 0
  at::Tensor v;  ///< bf16 [Hk, alloc_len, D] at byte offset round_up_256(k bytes)
};

/// Views of `buffer` (uint8, 1-D, contiguous, at least continuation_workspace_bytes(Hk,
/// alloc_len, D) bytes) as the continuation K/V buffers. Works on the meta device.
ContinuationBuffers continuation_views(const at::Tensor& buffer, int64_t num_kv_heads,
                                       int64_t alloc_len, int64_t head_dim);

/// Dequantizes the first `num_tokens` cached tokens of one sequence (kernel tq_dequant_kv).
/// - cache: uint8 cache_shape(layout, num_blocks), contiguous
/// - block_table_row: int32 [>= ceil(num_tokens / block_size)], contiguous (one row of the
///   block table; its storage offset decides the pointer's alignment specialization)
/// - num_tokens: >= 0 (0 launches nothing)
/// - k_out, v_out: bf16 [Hk, alloc_len, D], contiguous, alloc_len >= num_tokens; rows
///   >= num_tokens are left untouched
void dequant_kv(jit::JitRuntime& rt, const TqLayout& layout, const at::Tensor& cache,
                const at::Tensor& block_table_row, int64_t num_tokens, const at::Tensor& k_out,
                const at::Tensor& v_out);

}  // namespace coldstart::tq
