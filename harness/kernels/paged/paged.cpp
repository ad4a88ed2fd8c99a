#include "harness/kernels/paged/paged.h"

#include <ATen/ATen.h>

#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "harness/kernels/launch_util.h"
#include "harness/runtime/tensor_args.h"

namespace coldstart::paged {
namespace {

using jit::KernelArg;
using namespace kernels;  // launch_util.h: the argument checks and launch helpers

constexpr const char* kFamily = "paged";

// torch 2.1+ has float8_e4m3fn; compared by name so older libtorch (no such enum) still builds.
bool is_float8_e4m3fn(const at::Tensor& t) {
  return std::strcmp(c10::toString(t.scalar_type()), "Float8_e4m3fn") == 0;
}

// The K and V halves of a validated cache, as kernel pointer arguments, and the element
// distance between two blocks.
struct CacheArgs {
  KernelArg key;
  KernelArg value;
  int64_t block_stride = 0;
};

CacheArgs check_cache(const CallSite& fn, const PagedLayout& l, const at::Tensor& kv_cache_in) {
  at::Tensor kv = kv_cache_in;
  if (kv.defined() && l.dtype == CacheDtype::kFP8E4M3 && is_float8_e4m3fn(kv)) {
    kv = kv.view(at::kByte);
  }
  if (!kv.defined()) fail(fn, "kv_cache", "is an undefined tensor");
  const at::ScalarType want = cache_scalar_type(l);
  if (kv.scalar_type() != want) {
    fail(fn, "kv_cache",
         fmt::format("must have dtype {} for a {} cache, got {}", c10::toString(want),
                     cache_dtype_name(l.dtype), c10::toString(kv_cache_in.scalar_type())));
  }
  check(fn, "kv_cache", kv, want, 5, Layout::kAny);
  check_size(fn, "kv_cache", kv, 0, 2);
  check_size(fn, "kv_cache", kv, 2, l.block_size);
  check_size(fn, "kv_cache", kv, 3, l.num_kv_heads);
  check_size(fn, "kv_cache", kv, 4, l.head_dim);
  // Each block [block_size, Hk, D] dense; blocks may sit a page apart (the block-major layout).
  const int64_t block_elems = static_cast<int64_t>(l.block_size) * l.num_kv_heads * l.head_dim;
  const bool block_dense = kv.stride(4) == 1 && kv.stride(3) == l.head_dim &&
                           kv.stride(2) == static_cast<int64_t>(l.num_kv_heads) * l.head_dim;
  if (!block_dense || kv.stride(1) < block_elems || kv.stride(0) < block_elems) {
    fail(fn, "kv_cache",
         fmt::format("has strides [{}, {}, {}, {}, {}]: each block must be a dense "
                     "[block_size, Hk, D] and blocks must not overlap",
                     kv.stride(0), kv.stride(1), kv.stride(2), kv.stride(3), kv.stride(4)));
  }
  return {tensor_arg(kv.select(0, 0)), tensor_arg(kv.select(0, 1)), kv.stride(1)};
}

// A per-tensor scale: float32 with one element on the cache's device. Required for fp8; for bf16
// it is not read, and an undefined tensor passes a null pointer.
KernelArg scale_arg(const CallSite& fn, const char* arg, const PagedLayout& l,
                    const at::Tensor& s, const at::Tensor& kv_cache) {
  if (!s.defined()) {
    if (l.dtype == CacheDtype::kFP8E4M3) fail(fn, arg, "is required for an fp8 cache");
    return KernelArg::pointer(0, jit::DType::kF32);
  }
  if (s.scalar_type() != at::kFloat) {
    fail(fn, arg, fmt::format("must have dtype float, got {}", c10::toString(s.scalar_type())));
  }
  if (s.numel() != 1 || s.dim() > 1) {
    fail(fn, arg, fmt::format("must be a scalar (one element), got shape {}", shape_str(s)));
  }
  check_on_device(fn, arg, s);
  check_same_device(fn, kv_cache, arg, s);
  return tensor_arg(s);
}

// Hq of a query tensor: a positive multiple of the layout's KV heads.
void check_q_heads(const CallSite& fn, const char* arg, const PagedLayout& l, int64_t hq) {
  if (hq <= 0 || hq % l.num_kv_heads != 0 || hq > 65535) {
    fail(fn, arg,
         fmt::format("has {} heads, not a positive multiple of {} KV heads (at most 65535)", hq,
                     l.num_kv_heads));
  }
}

}  // namespace

std::vector<int64_t> cache_shape(const PagedLayout& layout, int64_t num_blocks) {
  return {2, num_blocks, layout.block_size, layout.num_kv_heads, layout.head_dim};
}

at::ScalarType cache_scalar_type(const PagedLayout& layout) {
  return layout.dtype == CacheDtype::kBF16 ? at::kBFloat16 : at::kByte;
}

at::Tensor block_major_view(const PagedLayout& l, const at::Tensor& bytes, int64_t num_blocks,
                            int64_t page_bytes) {
  const int eb = l.element_bytes();
  if (!bytes.defined() || bytes.scalar_type() != at::kByte || bytes.dim() != 1 ||
      page_bytes < l.page_size_bytes() || page_bytes % eb != 0 ||
      bytes.size(0) < num_blocks * page_bytes) {
    throw Error(fmt::format(
        "paged::block_major_view: {} bytes cannot hold {} pages of {} bytes (a K+V block "
        "needs {})",
        bytes.defined() ? bytes.numel() : 0, num_blocks, page_bytes, l.page_size_bytes()));
  }
  const int64_t page = page_bytes / eb;
  const int64_t block = static_cast<int64_t>(l.block_size) * l.num_kv_heads * l.head_dim;
  const at::Tensor typed = bytes.narrow(0, 0, num_blocks * page_bytes).view(cache_scalar_type(l));
  return typed.as_strided({2, num_blocks, l.block_size, l.num_kv_heads, l.head_dim},
                          {block, page, static_cast<int64_t>(l.num_kv_heads) * l.head_dim,
                           l.head_dim, 1});
}

void store(jit::JitRuntime& rt, const PagedLayout& l, const at::Tensor& key,
           const at::Tensor& value, const at::Tensor& slot_mapping, const at::Tensor& kv_cache,
           const at::Tensor& k_scale, const at::Tensor& v_scale) {
  const CallSite fn{kFamily, "store"};
  check_store_inputs(fn, key, value, slot_mapping);
  const CacheArgs cache = check_cache(fn, l, kv_cache);
  const KernelArg ks = scale_arg(fn, "k_scale", l, k_scale, kv_cache);
  const KernelArg vs = scale_arg(fn, "v_scale", l, v_scale, kv_cache);
  const int64_t n =
      check_store_shapes(fn, l.num_kv_heads, l.head_dim, kv_cache, key, value, slot_mapping);
  if (n == 0) return;
  rt.launch(cache_store_kernel(), cache_store_constexprs(l),
            {tensor_arg(key), tensor_arg(value), tensor_arg(slot_mapping), cache.key, cache.value,
             ks, vs, KernelArg::i64(key.stride(0)), KernelArg::i64(key.stride(1)),
             KernelArg::i64(value.stride(0)), KernelArg::i64(value.stride(1)),
             KernelArg::i32(l.block_size), KernelArg::i64(cache.block_stride)},
            store_grid(fn, n, l.num_kv_heads, kStoreThreads),
            stream_for(kv_cache));
}

void decode_stage1(jit::JitRuntime& rt, const PagedLayout& l, const at::Tensor& q,
                   const at::Tensor& kv_cache, const at::Tensor& k_scale,
                   const at::Tensor& v_scale, const at::Tensor& block_table,
                   const at::Tensor& seq_lens, float sm_scale, const at::Tensor& mid_o) {
  const CallSite fn{kFamily, "decode_stage1"};
  check(fn, "q", q, at::kBFloat16, 3, Layout::kInnerContiguous);
  const CacheArgs cache = check_cache(fn, l, kv_cache);
  const KernelArg ks = scale_arg(fn, "k_scale", l, k_scale, kv_cache);
  const KernelArg vs = scale_arg(fn, "v_scale", l, v_scale, kv_cache);
  check_decode_tables(fn, block_table, seq_lens, mid_o);
  const int64_t b = q.size(0);
  const int64_t hq = q.size(1);
  check_size(fn, "q", q, 2, l.head_dim);
  check_q_heads(fn, "q", l, hq);
  const int64_t splits =
      check_decode_batch(fn, l.head_dim, kv_cache, q, block_table, seq_lens, mid_o);
  if (b == 0) return;
  const int32_t bt_stride = to_i32(fn, "block_table", block_table.stride(0));
  rt.launch(decode_stage1_kernel(),
            decode_stage1_constexprs(l, static_cast<int>(hq), static_cast<int>(splits)),
            {tensor_arg(q), cache.key, cache.value, ks, vs, tensor_arg(block_table),
             tensor_arg(seq_lens), tensor_arg(mid_o), KernelArg::i64(q.stride(0)),
             KernelArg::i64(q.stride(1)), KernelArg::i32(bt_stride), KernelArg::f32(sm_scale),
             KernelArg::i64(cache.block_stride)},
            decode_grid(fn, b,
                        hq / decode_stage1_heads_per_block(
                                 l.head_dim, static_cast<int>(hq / l.num_kv_heads)),
                        splits, kStage1Threads),
            stream_for(kv_cache));
}

void decode_stage2(jit::JitRuntime& rt, const PagedLayout& l, const at::Tensor& mid_o,
                   const at::Tensor& out, const at::Tensor& lse) {
  launch_decode_stage2(
      rt, CallSite{kFamily, "decode_stage2"}, decode_stage2_kernel(),
      [&](int splits) { return decode_stage2_constexprs(l, splits); }, l.head_dim,
      kStage2Threads, mid_o, out, lse);
}

DecodeWorkspace decode_workspace_views(const at::Tensor& buffer, int64_t batch,
                                       int64_t num_q_heads, int64_t head_dim,
                                       int64_t num_kv_splits) {
  // mid_o, then lse (decode_workspace_bytes).
  SplitKvViews v = split_kv_views(
      CallSite{kFamily, "decode_workspace_views"}, buffer, batch, num_q_heads, head_dim,
      num_kv_splits, decode_workspace_bytes(batch, num_q_heads, head_dim, num_kv_splits),
      round_up_256(split_kv_mid_o_bytes(batch, num_q_heads, head_dim, num_kv_splits)));
  DecodeWorkspace ws;
  ws.mid_o = std::move(v.mid_o);
  ws.lse = std::move(v.lse);
  return ws;
}

void decode(jit::JitRuntime& rt, const PagedLayout& layout, const at::Tensor& q,
            const at::Tensor& kv_cache, const at::Tensor& k_scale, const at::Tensor& v_scale,
            const at::Tensor& block_table, const at::Tensor& seq_lens, float sm_scale,
            const DecodeWorkspace& ws, const at::Tensor& out) {
  decode_stage1(rt, layout, q, kv_cache, k_scale, v_scale, block_table, seq_lens, sm_scale,
                ws.mid_o);
  decode_stage2(rt, layout, ws.mid_o, out, ws.lse);
}

void prefill(jit::JitRuntime& rt, const PagedLayout& l, const at::Tensor& q,
             const at::Tensor& kv_cache, const at::Tensor& k_scale, const at::Tensor& v_scale,
             const at::Tensor& block_table, const at::Tensor& query_start_loc,
             const at::Tensor& seq_lens, float sm_scale, const at::Tensor& out) {
  const CallSite fn{kFamily, "prefill"};
  check(fn, "q", q, at::kBFloat16, 3, Layout::kInnerContiguous);
  const CacheArgs cache = check_cache(fn, l, kv_cache);
  const KernelArg ks = scale_arg(fn, "k_scale", l, k_scale, kv_cache);
  const KernelArg vs = scale_arg(fn, "v_scale", l, v_scale, kv_cache);
  check(fn, "block_table", block_table, at::kInt, 2, Layout::kInnerContiguous);
  check(fn, "query_start_loc", query_start_loc, at::kInt, 1, Layout::kContiguous);
  check(fn, "seq_lens", seq_lens, at::kInt, 1, Layout::kContiguous);
  check(fn, "out", out, at::kBFloat16, 3, Layout::kInnerContiguous);
  const int64_t t = q.size(0);
  const int64_t hq = q.size(1);
  check_size(fn, "q", q, 2, l.head_dim);
  check_q_heads(fn, "q", l, hq);
  const int64_t num_seqs = query_start_loc.size(0) - 1;
  if (num_seqs < 1) {
    fail(fn, "query_start_loc",
         fmt::format("has shape {}; it needs num_seqs + 1 >= 2 entries", shape_str(query_start_loc)));
  }
  if (block_table.size(0) < num_seqs) {
    fail(fn, "block_table",
         fmt::format("has {} rows for {} sequences", block_table.size(0), num_seqs));
  }
  if (seq_lens.size(0) < num_seqs) {
    fail(fn, "seq_lens", fmt::format("has {} entries for {} sequences", seq_lens.size(0), num_seqs));
  }
  if (out.sizes() != q.sizes()) {
    fail(fn, "out", fmt::format("has shape {}, q has {}", shape_str(out), shape_str(q)));
  }
  check_same_device(fn, kv_cache, "q", q);
  check_same_device(fn, kv_cache, "block_table", block_table);
  check_same_device(fn, kv_cache, "query_start_loc", query_start_loc);
  check_same_device(fn, kv_cache, "seq_lens", seq_lens);
  check_same_device(fn, kv_cache, "out", out);
  if (t == 0) return;
  const int32_t bt_stride = to_i32(fn, "block_table", block_table.stride(0));
  rt.launch(prefill_kernel(), prefill_constexprs(l, static_cast<int>(hq)),
            {tensor_arg(q), cache.key, cache.value, ks, vs, tensor_arg(block_table),
             tensor_arg(query_start_loc), tensor_arg(seq_lens), tensor_arg(out),
             KernelArg::i64(q.stride(0)), KernelArg::i64(q.stride(1)),
             KernelArg::i64(out.stride(0)), KernelArg::i64(out.stride(1)),
             KernelArg::i32(bt_stride), KernelArg::i32(to_i32(fn, "query_start_loc", num_seqs)),
             KernelArg::f32(sm_scale), KernelArg::i64(cache.block_stride)},
            dims(grid_dim(fn, "x (tokens)", t, 0x7fffffff), grid_dim(fn, "y (q heads)", hq, 65535),
                 1, kPrefillThreads),
            stream_for(kv_cache));
}

}  // namespace coldstart::paged
