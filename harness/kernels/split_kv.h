// Host side of the split-KV decode the paged and turboquant families share (device side:
// split_kv_decode.cuh): the device helpers' source, the scratch sizes, and stage 2's constexprs
// (its argument names come from each family's stage-2 .cu, as every kernel's do).
// Torch-free (cs_kernel_sources); the torch views of the scratch are launch_util.h's
// split_kv_views.
//
// Stage 1 writes, per query token b and query head h, the S = num_kv_splits partial results
//   mid_o float32 [B, Hq, S, D + 1], contiguous (D outputs then the natural-log LSE per split),
// and stage 2 reduces them into the bf16 output [B, Hq, D] and lse float32 [B, Hq].
#pragma once

#include <cstdint>
#include <vector>

#include "harness/jit/jit.h"

namespace coldstart::kernels {

/// The text of split_kv_decode.cuh (cs_kv_split, cs_online_softmax_step, cs_merge_softmax_parts,
/// cs_split_kv_reduce). A family prepends it to its common header for every kernel program that
/// uses it; it needs only device_common.cuh before it.
const char* split_kv_decode_source();

/// Rounds up to a multiple of 256 bytes (the decode workspace's sub-allocation granule).
constexpr int64_t round_up_256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

/// Bytes of mid_o float32 [batch, num_q_heads, num_kv_splits, head_dim + 1] (not rounded).
constexpr int64_t split_kv_mid_o_bytes(int64_t batch, int64_t num_q_heads, int64_t head_dim,
                                       int64_t num_kv_splits) {
  return batch * num_q_heads * num_kv_splits * (head_dim + 1) * 4;
}

/// Bytes of lse float32 [batch, num_q_heads] (not rounded).
constexpr int64_t split_kv_lse_bytes(int64_t batch, int64_t num_q_heads) {
  return batch * num_q_heads * 4;
}

/// Query heads one stage-1 block serves, the kernels' cs_decode_heads_per_block: the largest of
/// 4, 3, 2, 1 dividing `kv_group` (Hq / Hk) with heads x coords_per_lane <= 32. The stage-1 grid's
/// y is Hq divided by it.
constexpr int split_kv_heads_per_block(int kv_group, int coords_per_lane) {
  const int cap = 32 / coords_per_lane;
  for (int h = 4; h > 1; --h)
    if (h <= cap && kv_group % h == 0) return h;
  return 1;
}

/// Constexprs of a stage-2 kernel, in compile-key order: HEAD_DIM, NUM_KV_SPLITS.
std::vector<jit::Constexpr> split_kv_stage2_constexprs(int head_dim, int num_kv_splits);

}  // namespace coldstart::kernels
