#include "harness/kernels/launch_util.h"

#include <ATen/ATen.h>

#include <limits>
#include <string>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/kernels/split_kv.h"
#include "harness/runtime/tensor_args.h"

#ifdef COLDSTART_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace coldstart::kernels {

void fail(const CallSite& fn, const char* arg, const std::string& what) {
  throw Error(fmt::format("{}::{}: argument '{}' {}", fn.family, fn.name, arg, what));
}

std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += fmt::format("{}{}", i ? ", " : "", t.size(i));
  return s + "]";
}

void check_on_device(const CallSite& fn, const char* arg, const at::Tensor& t) {
  if (!t.defined()) fail(fn, arg, "is an undefined tensor");
  if (!t.is_cuda() && !t.is_meta()) {
    fail(fn, arg,
         fmt::format("must be on a CUDA device (or the meta device in compile-only mode), got {}",
                     t.device().str()));
  }
}

void check(const CallSite& fn, const char* arg, const at::Tensor& t, at::ScalarType dtype,
           int64_t dim, Layout layout) {
  if (!t.defined()) fail(fn, arg, "is an undefined tensor");
  if (t.scalar_type() != dtype) {
    fail(fn, arg,
         fmt::format("must have dtype {}, got {}", c10::toString(dtype),
                     c10::toString(t.scalar_type())));
  }
  if (t.dim() != dim) {
    fail(fn, arg, fmt::format("must have {} dimensions, got shape {}", dim, shape_str(t)));
  }
  check_on_device(fn, arg, t);
  if (layout == Layout::kContiguous && !t.is_contiguous()) fail(fn, arg, "must be contiguous");
  if (layout == Layout::kInnerContiguous && t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1) {
    fail(fn, arg, "must have a contiguous innermost dimension");
  }
}

void check_size(const CallSite& fn, const char* arg, const at::Tensor& t, int64_t d,
                int64_t want) {
  if (t.size(d) != want) {
    fail(fn, arg, fmt::format("has shape {}; dimension {} must be {}", shape_str(t), d, want));
  }
}

void check_shape(const CallSite& fn, const char* arg, const at::Tensor& t,
                 std::initializer_list<int64_t> shape) {
  if (t.dim() != static_cast<int64_t>(shape.size())) {
    fail(fn, arg, fmt::format("must have {} dimensions, got shape {}", shape.size(), shape_str(t)));
  }
  int64_t d = 0;
  for (int64_t want : shape) check_size(fn, arg, t, d++, want);
}

void check_aligned(const CallSite& fn, const char* arg, const at::Tensor& t, uint64_t bytes) {
  if (tensor_arg(t).address % bytes != 0) {
    fail(fn, arg, fmt::format("must start at a {}-byte aligned address", bytes));
  }
}

void check_same_device(const CallSite& fn, const at::Tensor& ref, const char* arg,
                       const at::Tensor& t) {
  if (t.device() != ref.device()) {
    fail(fn, arg,
         fmt::format("is on {}, the other arguments on {}", t.device().str(), ref.device().str()));
  }
}

SplitKvViews split_kv_views(const CallSite& fn, const at::Tensor& buffer, int64_t batch,
                            int64_t num_q_heads, int64_t head_dim, int64_t num_kv_splits,
                            int64_t need, int64_t lse_offset) {
  check(fn, "buffer", buffer, at::kByte, 1, Layout::kContiguous);
  if (batch < 0 || num_q_heads < 0 || head_dim <= 0 || num_kv_splits <= 0) {
    throw Error(fmt::format("{}::{}: bad geometry batch={} num_q_heads={} head_dim={} "
                            "num_kv_splits={}",
                            fn.family, fn.name, batch, num_q_heads, head_dim, num_kv_splits));
  }
  if (buffer.size(0) < need) {
    fail(fn, "buffer", fmt::format("has {} bytes, decode needs {}", buffer.size(0), need));
  }
  const int64_t mid_bytes = split_kv_mid_o_bytes(batch, num_q_heads, head_dim, num_kv_splits);
  SplitKvViews v;
  v.mid_o = buffer.narrow(0, 0, mid_bytes)
                .view(at::kFloat)
                .view({batch, num_q_heads, num_kv_splits, head_dim + 1});
  v.lse = buffer.narrow(0, lse_offset, split_kv_lse_bytes(batch, num_q_heads))
              .view(at::kFloat)
              .view({batch, num_q_heads});
  return v;
}

int64_t check_kv_splits(const CallSite& fn, const at::Tensor& mid_o) {
  const int64_t splits = mid_o.size(2);
  if (splits <= 0 || splits > 1024) {
    fail(fn, "mid_o", fmt::format("has {} KV splits (dimension 2); expected 1..1024", splits));
  }
  return splits;
}

int32_t to_i32(const CallSite& fn, const char* arg, int64_t v) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    fail(fn, arg, fmt::format("value {} does not fit the kernel's int32", v));
  }
  return static_cast<int32_t>(v);
}

unsigned grid_dim(const CallSite& fn, const char* what, int64_t v, int64_t max) {
  if (v <= 0 || v > max) {
    throw Error(fmt::format("{}::{}: grid {} = {} out of range", fn.family, fn.name, what, v));
  }
  return static_cast<unsigned>(v);
}

jit::KernelArg tensor_map_arg(const CallSite& fn, const char* arg, const at::Tensor& t, jit::DType dtype,
                              std::initializer_list<int64_t> dims, std::initializer_list<int64_t> byte_strides,
                              std::initializer_list<uint32_t> box, uint32_t swizzle) {
  jit::TensorMapSpec m;
  m.dtype = dtype;
  m.address = tensor_address(t);
  m.rank = static_cast<uint32_t>(dims.size());
  size_t i = 0;
  for (int64_t d : dims) m.dims[i++] = static_cast<uint64_t>(d);
  i = 0;
  for (int64_t s : byte_strides) m.strides[i++] = static_cast<uint64_t>(s);
  i = 0;
  for (uint32_t b : box) m.box[i++] = b;
  m.swizzle = swizzle;
  try {
    return jit::KernelArg::tmap(m, fmt::format("{}::{}: argument '{}'", fn.family, fn.name, arg));
  } catch (const InputError& e) {
    throw Error(e.what());
  }
}

void* stream_for(const at::Tensor& t) {
#ifdef COLDSTART_WITH_CUDA
  if (t.is_cuda()) {
    return static_cast<void*>(c10::cuda::getCurrentCUDAStream(t.device().index()).stream());
  }
#endif
  (void)t;
  return nullptr;
}

jit::LaunchDims dims(unsigned gx, unsigned gy, unsigned gz, unsigned threads,
                     unsigned shared_bytes) {
  jit::LaunchDims d;
  d.grid[0] = gx;
  d.grid[1] = gy;
  d.grid[2] = gz;
  d.block[0] = threads;
  d.shared_bytes = shared_bytes;
  return d;
}

void tuned_launch(jit::JitRuntime& rt, const jit::KernelSource& kernel, const std::string& key,
                  const std::vector<jit::KernelConfig>& candidates, void* stream,
                  const std::function<void(const jit::KernelConfig&)>& launch) {
  const jit::Selection sel = jit::autotune(rt, kernel, key, candidates, launch, stream);
  jit::SelectionScope scope(rt, sel);
  launch(sel.config);
}

void check_store_inputs(const CallSite& fn, const at::Tensor& key, const at::Tensor& value,
                        const at::Tensor& slot_mapping) {
  check(fn, "key", key, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "value", value, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "slot_mapping", slot_mapping, at::kLong, 1, Layout::kContiguous);
}

int64_t check_store_shapes(const CallSite& fn, int64_t num_kv_heads, int64_t head_dim,
                           const at::Tensor& cache, const at::Tensor& key,
                           const at::Tensor& value, const at::Tensor& slot_mapping) {
  const int64_t n = key.size(0);
  check_size(fn, "key", key, 1, num_kv_heads);
  check_size(fn, "key", key, 2, head_dim);
  if (value.sizes() != key.sizes()) {
    fail(fn, "value", fmt::format("has shape {}, key has {}", shape_str(value), shape_str(key)));
  }
  check_size(fn, "slot_mapping", slot_mapping, 0, n);
  check_same_device(fn, cache, "key", key);
  check_same_device(fn, cache, "value", value);
  check_same_device(fn, cache, "slot_mapping", slot_mapping);
  return n;
}

jit::LaunchDims store_grid(const CallSite& fn, int64_t tokens, int64_t kv_heads,
                           unsigned threads) {
  return dims(grid_dim(fn, "x (tokens)", tokens, 0x7fffffff),
              grid_dim(fn, "y (kv heads)", kv_heads, 65535), 1, threads);
}

void check_decode_tables(const CallSite& fn, const at::Tensor& block_table,
                         const at::Tensor& seq_lens, const at::Tensor& mid_o) {
  check(fn, "block_table", block_table, at::kInt, 2, Layout::kInnerContiguous);
  check(fn, "seq_lens", seq_lens, at::kInt, 1, Layout::kContiguous);
  check(fn, "mid_o", mid_o, at::kFloat, 4, Layout::kContiguous);
}

jit::LaunchDims decode_grid(const CallSite& fn, int64_t batch, int64_t head_groups, int64_t splits,
                            unsigned threads) {
  return dims(grid_dim(fn, "x (batch)", batch, 0x7fffffff),
              grid_dim(fn, "y (query head groups)", head_groups, 65535),
              static_cast<unsigned>(splits), threads);
}

int64_t check_decode_batch(const CallSite& fn, int64_t head_dim, const at::Tensor& cache,
                           const at::Tensor& q, const at::Tensor& block_table,
                           const at::Tensor& seq_lens, const at::Tensor& mid_o) {
  const int64_t b = q.size(0);
  const int64_t hq = q.size(1);
  if (block_table.size(0) < b) {
    fail(fn, "block_table", fmt::format("has {} rows for a batch of {}", block_table.size(0), b));
  }
  if (seq_lens.size(0) < b) {
    fail(fn, "seq_lens", fmt::format("has {} entries for a batch of {}", seq_lens.size(0), b));
  }
  check_size(fn, "mid_o", mid_o, 0, b);
  check_size(fn, "mid_o", mid_o, 1, hq);
  check_size(fn, "mid_o", mid_o, 3, head_dim + 1);
  const int64_t splits = check_kv_splits(fn, mid_o);
  check_same_device(fn, cache, "q", q);
  check_same_device(fn, cache, "block_table", block_table);
  check_same_device(fn, cache, "seq_lens", seq_lens);
  check_same_device(fn, cache, "mid_o", mid_o);
  return splits;
}

void launch_decode_stage2(jit::JitRuntime& rt, const CallSite& fn, const jit::KernelSource& kernel,
                          const std::function<std::vector<jit::Constexpr>(int)>& constexprs,
                          int64_t head_dim, unsigned threads, const at::Tensor& mid_o,
                          const at::Tensor& out, const at::Tensor& lse) {
  check(fn, "mid_o", mid_o, at::kFloat, 4, Layout::kContiguous);
  check(fn, "out", out, at::kBFloat16, 3, Layout::kInnerContiguous);
  check(fn, "lse", lse, at::kFloat, 2, Layout::kContiguous);
  const int64_t b = mid_o.size(0);
  const int64_t hq = mid_o.size(1);
  check_size(fn, "mid_o", mid_o, 3, head_dim + 1);
  const int64_t splits = check_kv_splits(fn, mid_o);
  check_size(fn, "out", out, 0, b);
  check_size(fn, "out", out, 1, hq);
  check_size(fn, "out", out, 2, head_dim);
  check_size(fn, "lse", lse, 0, b);
  check_size(fn, "lse", lse, 1, hq);
  check_same_device(fn, mid_o, "out", out);
  check_same_device(fn, mid_o, "lse", lse);
  if (b == 0 || hq == 0) return;
  rt.launch(kernel, constexprs(static_cast<int>(splits)),
            {tensor_arg(mid_o), tensor_arg(out), tensor_arg(lse),
             jit::KernelArg::i64(out.stride(0)), jit::KernelArg::i64(out.stride(1))},
            decode_grid(fn, b, hq, 1, threads),
            stream_for(mid_o));
}

}  // namespace coldstart::kernels
