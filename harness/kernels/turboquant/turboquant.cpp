#include "harness/kernels/turboquant/turboquant.h"

#include <ATen/ATen.h>

#include <utility>

#include <fmt/format.h>

#include "harness/kernels/launch_util.h"
#include "harness/runtime/tensor_args.h"

namespace coldstart::tq {
namespace {

using jit::KernelArg;
using namespace kernels;  // launch_util.h: the argument checks and launch helpers

constexpr const char* kFamily = "turboquant";

void check_cache(const CallSite& fn, const TqLayout& l, const at::Tensor& cache) {
  check(fn, "cache", cache, at::kByte, 4, Layout::kContiguous);
  check_size(fn, "cache", cache, 1, l.block_size);
  check_size(fn, "cache", cache, 2, l.num_kv_heads);
  check_size(fn, "cache", cache, 3, l.slot_bytes);
}

}  // namespace

std::vector<int64_t> cache_shape(const TqLayout& layout, int64_t num_blocks) {
  return {num_blocks, layout.block_size, layout.num_kv_heads, layout.slot_bytes};
}

void store(jit::JitRuntime& rt, const TqLayout& l, const at::Tensor& key, const at::Tensor& value,
           const at::Tensor& slot_mapping, const at::Tensor& cache) {
  const CallSite fn{kFamily, "store"};
  check_store_inputs(fn, key, value, slot_mapping);
  check_cache(fn, l, cache);
  const int64_t n =
      check_store_shapes(fn, l.num_kv_heads, l.head_dim, cache, key, value, slot_mapping);
  if (n == 0) return;
  rt.launch(cache_store_kernel(), cache_store_constexprs(l),
            {tensor_arg(key), tensor_arg(value), tensor_arg(slot_mapping), tensor_arg(cache),
             KernelArg::i64(key.stride(0)), KernelArg::i64(key.stride(1)),
             KernelArg::i64(value.stride(0)), KernelArg::i64(value.stride(1))},
            store_grid(fn, n, l.num_kv_heads, kStoreThreads),
            stream_for(cache));
}

void decode_stage1(jit::JitRuntime& rt, const TqLayout& l, const at::Tensor& q,
                   const at::Tensor& cache, const at::Tensor& block_table,
                   const at::Tensor& seq_lens, float sm_scale, const at::Tensor& mid_o) {
  const CallSite fn{kFamily, "decode_stage1"};
  check(fn, "q", q, at::kBFloat16, 3, Layout::kInnerContiguous);
  check_cache(fn, l, cache);
  check_decode_tables(fn, block_table, seq_lens, mid_o);
  const int64_t b = q.size(0);
  const int64_t hq = q.size(1);
  check_size(fn, "q", q, 2, l.head_dim);
  if (hq <= 0 || hq % l.num_kv_heads != 0) {
    fail(fn, "q", fmt::format("has {} heads, not a positive multiple of {} KV heads", hq,
                              l.num_kv_heads));
  }
  const int64_t splits =
      check_decode_batch(fn, l.head_dim, cache, q, block_table, seq_lens, mid_o);
  if (b == 0) return;
  const int32_t bt_stride = to_i32(fn, "block_table", block_table.stride(0));
  rt.launch(decode_stage1_kernel(),
            decode_stage1_constexprs(l, static_cast<int>(hq), static_cast<int>(splits)),
            {tensor_arg(q), tensor_arg(cache), tensor_arg(block_table), tensor_arg(seq_lens),
             tensor_arg(mid_o), KernelArg::i64(q.stride(0)), KernelArg::i64(q.stride(1)),
             KernelArg::i32(bt_stride), KernelArg::f32(sm_scale)},
            decode_grid(fn, b,
                        hq / decode_stage1_heads_per_block(static_cast<int>(hq / l.num_kv_heads)),
                        splits, kStage1Threads),
            stream_for(cache));
}

void decode_stage2(jit::JitRuntime& rt, const TqLayout& l, const at::Tensor& mid_o,
                   const at::Tensor& out, const at::Tensor& lse) {
  launch_decode_stage2(
      rt, CallSite{kFamily, "decode_stage2"}, decode_stage2_kernel(),
      [&](int splits) { return decode_stage2_constexprs(l, splits); }, l.head_dim,
      kStage2Threads, mid_o, out, lse);
}

DecodeWorkspace decode_workspace_views(const at::Tensor& buffer, int64_t batch,
                                       int64_t num_q_heads, int64_t head_dim,
                                       int64_t num_kv_splits) {
  // mid_o, then the bf16 output, then lse (decode_workspace_bytes).
  const int64_t out_bytes = batch * num_q_heads * head_dim * 2;
  const int64_t out_off =
      round_up_256(split_kv_mid_o_bytes(batch, num_q_heads, head_dim, num_kv_splits));
  SplitKvViews v = split_kv_views(
      CallSite{kFamily, "decode_workspace_views"}, buffer, batch, num_q_heads, head_dim,
      num_kv_splits, decode_workspace_bytes(batch, num_q_heads, head_dim, num_kv_splits),
      out_off + round_up_256(out_bytes));
  DecodeWorkspace ws;
  ws.mid_o = std::move(v.mid_o);
  ws.out = buffer.narrow(0, out_off, out_bytes)
               .view(at::kBFloat16)
               .view({batch, num_q_heads, head_dim});
  ws.lse = std::move(v.lse);
  return ws;
}

void decode(jit::JitRuntime& rt, const TqLayout& layout, const at::Tensor& q,
            const at::Tensor& cache, const at::Tensor& block_table, const at::Tensor& seq_lens,
            float sm_scale, const DecodeWorkspace& ws) {
  decode_stage1(rt, layout, q, cache, block_table, seq_lens, sm_scale, ws.mid_o);
  decode_stage2(rt, layout, ws.mid_o, ws.out, ws.lse);
}

ContinuationBuffers continuation_views(const at::Tensor& buffer, int64_t num_kv_heads,
                                       int64_t alloc_len, int64_t head_dim) {
  const CallSite fn{kFamily, "continuation_views"};
  check(fn, "buffer", buffer, at::kByte, 1, Layout::kContiguous);
  const int64_t need = continuation_workspace_bytes(num_kv_heads, alloc_len, head_dim);
  if (buffer.size(0) < need) {
    fail(fn, "buffer",
         fmt::format("has {} bytes, the continuation buffers need {}", buffer.size(0), need));
  }
  const int64_t one = num_kv_heads * alloc_len * head_dim * 2;
  ContinuationBuffers c;
  c.k = buffer.narrow(0, 0, one).view(at::kBFloat16).view({num_kv_heads, alloc_len, head_dim});
  c.v = buffer.narrow(0, round_up_256(one), one)
            .view(at::kBFloat16)
            .view({num_kv_heads, alloc_len, head_dim});
  return c;
}

void dequant_kv(jit::JitRuntime& rt, const TqLayout& l, const at::Tensor& cache,
                const at::Tensor& block_table_row, int64_t num_tokens, const at::Tensor& k_out,
                const at::Tensor& v_out) {
  const CallSite fn{kFamily, "dequant_kv"};
  check_cache(fn, l, cache);
  check(fn, "block_table_row", block_table_row, at::kInt, 1, Layout::kContiguous);
  check(fn, "k_out", k_out, at::kBFloat16, 3, Layout::kContiguous);
  check(fn, "v_out", v_out, at::kBFloat16, 3, Layout::kContiguous);
  if (num_tokens < 0) fail(fn, "num_tokens", fmt::format("is negative ({})", num_tokens));
  check_size(fn, "k_out", k_out, 0, l.num_kv_heads);
  check_size(fn, "k_out", k_out, 2, l.head_dim);
  const int64_t alloc_len = k_out.size(1);
  if (alloc_len < num_tokens) {
    fail(fn, "k_out", fmt::format("has {} rows for {} tokens", alloc_len, num_tokens));
  }
  if (v_out.sizes() != k_out.sizes()) {
    fail(fn, "v_out", fmt::format("has shape {}, k_out has {}", shape_str(v_out),
                                  shape_str(k_out)));
  }
  // The kernel writes pairs of bf16 as 32-bit words.
  if (k_out.storage_offset() % 2 != 0) fail(fn, "k_out", "must start 4-byte aligned");
  if (v_out.storage_offset() % 2 != 0) fail(fn, "v_out", "must start 4-byte aligned");
  const int64_t blocks_needed = (num_tokens + l.block_size - 1) / l.block_size;
  if (block_table_row.size(0) < blocks_needed) {
    fail(fn, "block_table_row",
         fmt::format("has {} entries; {} tokens need {} blocks", block_table_row.size(0),
                     num_tokens, blocks_needed));
  }
  check_same_device(fn, cache, "block_table_row", block_table_row);
  check_same_device(fn, cache, "k_out", k_out);
  check_same_device(fn, cache, "v_out", v_out);
  if (num_tokens == 0) return;
  const int64_t per_cta = dequant_tokens_per_cta(l.head_dim);
  rt.launch(dequant_kv_kernel(), dequant_kv_constexprs(l),
            {tensor_arg(cache), tensor_arg(block_table_row), tensor_arg(k_out), tensor_arg(v_out),
             KernelArg::i32(to_i32(fn, "num_tokens", num_tokens)),
             KernelArg::i32(to_i32(fn, "k_out", alloc_len))},
            dims(grid_dim(fn, "x (token tiles)", (num_tokens + per_cta - 1) / per_cta, 0x7fffffff),
                 grid_dim(fn, "y (kv heads)", l.num_kv_heads, 65535), 1, kDequantThreads),
            stream_for(cache));
}

}  // namespace coldstart::tq
