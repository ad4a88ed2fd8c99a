#include "harness/kernels/turboquant/turboquant.h"

#include <ATen/ATen.h>

#include <limits>
#include <string>

#include <fmt/format.h>

#include "harness/runtime/tensor_args.h"

#ifdef COLDSTART_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace coldstart::tq {
namespace {

using jit::KernelArg;

[[noreturn]] void fail(const char* fn, const char* arg, const std::string& what) {
  throw Error(fmt::format("turboquant::{}: argument '{}' {}", fn, arg, what));
}

std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += fmt::format("{}{}", i ? ", " : "", t.size(i));
  return s + "]";
}

// Checks dtype, rank, device kind (CUDA, or meta in compile-only mode) and optionally full
// contiguity or a contiguous innermost dimension.
enum class Layout { kAny, kInnerContiguous, kContiguous };
void check(const char* fn, const char* arg, const at::Tensor& t, at::ScalarType dtype, int64_t dim,
           Layout layout) {
  if (!t.defined()) fail(fn, arg, "is an undefined tensor");
  if (t.scalar_type() != dtype) {
    fail(fn, arg,
         fmt::format("must have dtype {}, got {}", c10::toString(dtype),
                     c10::toString(t.scalar_type())));
  }
  if (t.dim() != dim) {
    fail(fn, arg, fmt::format("must have {} dimensions, got shape {}", dim, shape_str(t)));
  }
  if (!t.is_cuda() && !t.is_meta()) {
    fail(fn, arg,
         fmt::format("must be on a CUDA device (or the meta device in compile-only mode), got {}",
                     t.device().str()));
  }
  if (layout == Layout::kContiguous && !t.is_contiguous()) fail(fn, arg, "must be contiguous");
  if (layout == Layout::kInnerContiguous && t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1) {
    fail(fn, arg, "must have a contiguous innermost dimension");
  }
}

void check_size(const char* fn, const char* arg, const at::Tensor& t, int64_t d, int64_t want) {
  if (t.size(d) != want) {
    fail(fn, arg,
         fmt::format("has shape {}; dimension {} must be {}", shape_str(t), d, want));
  }
}

void check_same_device(const char* fn, const at::Tensor& ref, const char* arg,
                       const at::Tensor& t) {
  if (t.device() != ref.device()) {
    fail(fn, arg,
         fmt::format("is on {}, the other arguments on {}", t.device().str(), ref.device().str()));
  }
}

void check_cache(const char* fn, const TqLayout& l, const at::Tensor& cache) {
  check(fn, "cache", cache, at::kByte, 4, Layout::kContiguous);
  check_size(fn, "cache", cache, 1, l.block_size);
  check_size(fn, "cache", cache, 2, l.num_kv_heads);
  check_size(fn, "cache", cache, 3, l.slot_bytes);
}

int32_t to_i32(const char* fn, const char* arg, int64_t v) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    fail(fn, arg, fmt::format("value {} does not fit the kernel's int32", v));
  }
  return static_cast<int32_t>(v);
}

unsigned grid_dim(const char* fn, const char* what, int64_t v, int64_t max) {
  if (v <= 0 || v > max) throw Error(fmt::format("turboquant::{}: grid {} = {} out of range", fn, what, v));
  return static_cast<unsigned>(v);
}

// torch's current stream on the tensor's device; nullptr on the meta device (no launch happens).
void* stream_for(const at::Tensor& t) {
#ifdef COLDSTART_WITH_CUDA
  if (t.is_cuda()) {
    return static_cast<void*>(c10::cuda::getCurrentCUDAStream(t.device().index()).stream());
  }
#endif
  (void)t;
  return nullptr;
}

jit::LaunchDims dims(unsigned gx, unsigned gy, unsigned gz, unsigned threads) {
  jit::LaunchDims d;
  d.grid[0] = gx;
  d.grid[1] = gy;
  d.grid[2] = gz;
  d.block[0] = threads;
  return d;
}

}  // namespace

std::vector<int64_t> cache_shape(const TqLayout& layout, int64_t num_blocks) {
  return {num_blocks, layout.block_size, layout.num_kv_heads, layout.slot_bytes};
}

void store(jit::JitRuntime& rt, const TqLayout& l, const at::Tensor& key, const at::Tensor& value,
           const at::Tensor& slot_mapping, const at::Tensor& cache) {
  const char* fn = "store";
  check(fn, "key", key, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "value", value, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "slot_mapping", slot_mapping, at::kLong, 1, Layout::kContiguous);
  check_cache(fn, l, cache);
  const int64_t n = key.size(0);
  check_size(fn, "key", key, 1, l.num_kv_heads);
  check_size(fn, "key", key, 2, l.head_dim);
  if (value.sizes() != key.sizes()) {
    fail(fn, "value", fmt::format("has shape {}, key has {}", shape_str(value), shape_str(key)));
  }
  check_size(fn, "slot_mapping", slot_mapping, 0, n);
  check_same_device(fn, cache, "key", key);
  check_same_device(fn, cache, "value", value);
  check_same_device(fn, cache, "slot_mapping", slot_mapping);
  if (n == 0) return;
  rt.launch(cache_store_kernel(), cache_store_constexprs(l),
            {tensor_arg(key), tensor_arg(value), tensor_arg(slot_mapping), tensor_arg(cache),
             KernelArg::i64(key.stride(0)), KernelArg::i64(key.stride(1)),
             KernelArg::i64(value.stride(0)), KernelArg::i64(value.stride(1))},
            dims(grid_dim(fn, "x (tokens)", n, 0x7fffffff),
                 grid_dim(fn, "y (kv heads)", l.num_kv_heads, 65535), 1, kStoreThreads),
            stream_for(cache));
}

void decode_stage1(jit::JitRuntime& rt, const TqLayout& l, const at::Tensor& q,
                   const at::Tensor& cache, const at::Tensor& block_table,
                   const at::Tensor& seq_lens, float sm_scale, const at::Tensor& mid_o) {
  const char* fn = "decode_stage1";
  check(fn, "q", q, at::kBFloat16, 3, Layout::kInnerContiguous);
  check_cache(fn, l, cache);
  check(fn, "block_table", block_table, at::kInt, 2, Layout::kInnerContiguous);
  check(fn, "seq_lens", seq_lens, at::kInt, 1, Layout::kContiguous);
  check(fn, "mid_o", mid_o, at::kFloat, 4, Layout::kContiguous);
  const int64_t b = q.size(0);
  const int64_t hq = q.size(1);
  check_size(fn, "q", q, 2, l.head_dim);
  if (hq <= 0 || hq % l.num_kv_heads != 0) {
    fail(fn, "q", fmt::format("has {} heads, not a positive multiple of {} KV heads", hq,
                              l.num_kv_heads));
  }
  if (block_table.size(0) < b) {
    fail(fn, "block_table", fmt::format("has {} rows for a batch of {}", block_table.size(0), b));
  }
  if (seq_lens.size(0) < b) {
    fail(fn, "seq_lens", fmt::format("has {} entries for a batch of {}", seq_lens.size(0), b));
  }
  check_size(fn, "mid_o", mid_o, 0, b);
  check_size(fn, "mid_o", mid_o, 1, hq);
  check_size(fn, "mid_o", mid_o, 3, l.head_dim + 1);
  const int64_t splits = mid_o.size(2);
  if (splits <= 0 || splits > 1024) {
    fail(fn, "mid_o", fmt::format("has {} KV splits (dimension 2); expected 1..1024", splits));
  }
  check_same_device(fn, cache, "q", q);
  check_same_device(fn, cache, "block_table", block_table);
  check_same_device(fn, cache, "seq_lens", seq_lens);
  check_same_device(fn, cache, "mid_o", mid_o);
  if (b == 0) return;
  const int32_t bt_stride = to_i32(fn, "block_table", block_table.stride(0));
  rt.launch(decode_stage1_kernel(),
            decode_stage1_constexprs(l, static_cast<int>(hq), static_cast<int>(splits)),
            {tensor_arg(q), tensor_arg(cache), tensor_arg(block_table), tensor_arg(seq_lens),
             tensor_arg(mid_o), KernelArg::i64(q.stride(0)), KernelArg::i64(q.stride(1)),
             KernelArg::i32(bt_stride), KernelArg::f32(sm_scale)},
            dims(grid_dim(fn, "x (batch)", b, 0x7fffffff), grid_dim(fn, "y (q heads)", hq, 65535),
                 static_cast<unsigned>(splits), kStage1Threads),
            stream_for(cache));
}

void decode_stage2(jit::JitRuntime& rt, const TqLayout& l, const at::Tensor& mid_o,
                   const at::Tensor& out, const at::Tensor& lse) {
  const char* fn = "decode_stage2";
  check(fn, "mid_o", mid_o, at::kFloat, 4, Layout::kContiguous);
  check(fn, "out", out, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "lse", lse, at::kFloat, 2, Layout::kContiguous);
  const int64_t b = mid_o.size(0);
  const int64_t hq = mid_o.size(1);
  const int64_t splits = mid_o.size(2);
  check_size(fn, "mid_o", mid_o, 3, l.head_dim + 1);
  if (splits <= 0 || splits > 1024) {
    fail(fn, "mid_o", fmt::format("has {} KV splits (dimension 2); expected 1..1024", splits));
  }
  check_size(fn, "out", out, 0, b);
  check_size(fn, "out", out, 1, hq);
  check_size(fn, "out", out, 2, l.head_dim);
  check_size(fn, "lse", lse, 0, b);
  check_size(fn, "lse", lse, 1, hq);
  check_same_device(fn, mid_o, "out", out);
  check_same_device(fn, mid_o, "lse", lse);
  if (b == 0 || hq == 0) return;
  rt.launch(decode_stage2_kernel(), decode_stage2_constexprs(l, static_cast<int>(splits)),
            {tensor_arg(mid_o), tensor_arg(out), tensor_arg(lse), KernelArg::i64(out.stride(0)),
             KernelArg::i64(out.stride(1))},
            dims(grid_dim(fn, "x (batch)", b, 0x7fffffff), grid_dim(fn, "y (q heads)", hq, 65535),
                 1, kStage2Threads),
            stream_for(mid_o));
}

DecodeWorkspace decode_workspace_views(const at::Tensor& buffer, int64_t batch,
                                       int64_t num_q_heads, int64_t head_dim,
                                       int64_t num_kv_splits) {
  const char* fn = "decode_workspace_views";
  check(fn, "buffer", buffer, at::kByte, 1, Layout::kContiguous);
  const int64_t need = decode_workspace_bytes(batch, num_q_heads, head_dim, num_kv_splits);
  if (buffer.size(0) < need) {
    fail(fn, "buffer", fmt::format("has {} bytes, decode needs {}", buffer.size(0), need));
  }
  const int64_t mid_bytes = batch * num_q_heads * num_kv_splits * (head_dim + 1) * 4;
  const int64_t out_bytes = batch * num_q_heads * head_dim * 2;
  const int64_t lse_bytes = batch * num_q_heads * 4;
  const int64_t out_off = round_up_256(mid_bytes);
  const int64_t lse_off = out_off + round_up_256(out_bytes);
  DecodeWorkspace ws;
  ws.mid_o = buffer.narrow(0, 0, mid_bytes)
                 .view(at::kFloat)
                 .view({batch, num_q_heads, num_kv_splits, head_dim + 1});
  ws.out = buffer.narrow(0, out_off, out_bytes)
               .view(at::kBFloat16)
               .view({batch, num_q_heads, head_dim});
  ws.lse = buffer.narrow(0, lse_off, lse_bytes).view(at::kFloat).view({batch, num_q_heads});
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
  const char* fn = "continuation_views";
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
  const char* fn = "dequant_kv";
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
