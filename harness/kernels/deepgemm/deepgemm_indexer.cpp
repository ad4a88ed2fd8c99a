// DeepGEMM-style hyper-connection and sparse-indexer launch wrappers. See deepgemm_indexer.h.
#include "harness/kernels/deepgemm/deepgemm_indexer.h"

#include <ATen/ATen.h>

#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/kernels/launch_util.h"
#include "harness/runtime/tensor_args.h"

namespace coldstart::deepgemm {
namespace {

using kernels::CallSite;
using kernels::check;
using kernels::check_size;
using kernels::fail;
using kernels::Layout;


/// target.sm must be 90 or 100 (UnsupportedArchError otherwise, as the GEMMs), num_sms positive.
void check_target(const CallSite& fn, const GemmTarget& target) {
  if (target.sm != 90 && target.sm != 100) {
    throw jit::UnsupportedArchError(fmt::format(
        "{}::{}: exists for sm_90 and sm_100 (DeepGEMM's SM90 / SM100 kernels), not sm_{}", fn.family, fn.name, target.sm));
  }
  if (target.num_sms <= 0) {
    throw Error(fmt::format("{}::{}: target num_sms {} must be positive", fn.family, fn.name, target.num_sms));
  }
}

void check_devices(const CallSite& fn, const at::Tensor& ref,
                   std::initializer_list<std::pair<const char*, const at::Tensor*>> others) {
  for (const auto& [name, t] : others) kernels::check_same_device(fn, ref, name, *t);
}

void check_heads(const CallSite& fn, const char* arg, int64_t heads, int64_t dim) {
  try {
    check_mqa_heads(heads, dim);
  } catch (const InputError& e) {
    fail(fn, arg, fmt::format("has shape with {} heads of dim {}: {}", heads, dim, e.what()));
  }
}

jit::Selection fixed_selection(std::string name, std::vector<jit::Constexpr> constexprs, int threads, int stages) {
  jit::Selection sel;
  sel.config.name = std::move(name);
  sel.config.constexprs = std::move(constexprs);
  sel.config.num_warps = threads / 32;
  sel.config.num_stages = stages;
  return sel;
}

jit::LaunchDims launch_dims(unsigned grid, int threads, int smem) {
  return kernels::dims(grid, 1, 1, static_cast<unsigned>(threads), static_cast<unsigned>(smem));
}

}  // namespace

jit::Selection tf32_hc_prenorm_gemm(jit::JitRuntime& rt, const GemmTarget& target, const at::Tensor& x,
                                    const at::Tensor& fn_w, const at::Tensor& out_mul, const at::Tensor& sqrsum) {
  const CallSite fn{kFamily, "tf32_hc_prenorm_gemm"};
  check(fn, "x", x, at::kBFloat16, 2, Layout::kInnerContiguous);
  check(fn, "fn", fn_w, at::kFloat, 2, Layout::kContiguous);
  check(fn, "out_mul", out_mul, at::kFloat, 3, Layout::kInnerContiguous);
  check(fn, "sqrsum", sqrsum, at::kFloat, 2, Layout::kContiguous);
  check_target(fn, target);
  const int64_t m = x.size(0), k = x.size(1), n = fn_w.size(0), splits = out_mul.size(0);
  if (k <= 0 || k % kHcBlockK != 0) fail(fn, "x", fmt::format("has K = {}; it must be a positive multiple of {}", k, kHcBlockK));
  check_size(fn, "fn", fn_w, 1, k);
  const int64_t max_n = target.sm == 90 ? 32 : 128;
  if (n <= 0 || n % 8 != 0 || n > max_n) {
    fail(fn, "fn", fmt::format("has N = {} rows; N must be a positive multiple of 8, at most {} on sm_{}", n, max_n, target.sm));
  }
  if (splits < 1) fail(fn, "out_mul", "needs at least one split (dimension 0)");
  check_size(fn, "out_mul", out_mul, 1, m);
  check_size(fn, "out_mul", out_mul, 2, n);
  check_size(fn, "sqrsum", sqrsum, 0, splits);
  check_size(fn, "sqrsum", sqrsum, 1, m);
  check_devices(fn, x, {{"fn", &fn_w}, {"out_mul", &out_mul}, {"sqrsum", &sqrsum}});
  check_hc_prenorm_shape(target.sm, n, k, splits);
  if (m == 0) return {};
  const int nsplits = static_cast<int>(kernels::to_i32(fn, "out_mul", splits));
  const int block_n = hc_block_n(n);
  const std::vector<jit::Constexpr> cs = hc_prenorm_constexprs(target.sm, n, k, nsplits);
  const int stages = hc_num_stages(target.sm, n);
  const std::vector<jit::KernelArg> args = {
      kernels::tensor_map_arg(fn, "x", x, jit::DType::kBF16, {k, m}, {x.stride(0) * 2}, {kHcBlockK, kHcBlockM}, 128),
      kernels::tensor_map_arg(fn, "fn", fn_w, jit::DType::kF32, {k, n}, {k * 4}, {32, static_cast<uint32_t>(block_n)}, 128),
      tensor_arg(out_mul),
      tensor_arg(sqrsum),
      jit::KernelArg::i32(kernels::to_i32(fn, "x", m)),
      jit::KernelArg::i64(out_mul.stride(1)),
      jit::KernelArg::i64(out_mul.stride(0))};
  const int64_t blocks = splits * ((m + kHcBlockM - 1) / kHcBlockM);
  const unsigned grid = kernels::grid_dim(fn, "x (splits * row blocks)", blocks, std::numeric_limits<int32_t>::max());
  rt.launch(tf32_hc_prenorm_gemm_kernel(), cs, args,
            launch_dims(grid, hc_prenorm_threads(), hc_prenorm_smem_bytes(block_n, stages)),
            kernels::stream_for(out_mul));
  return fixed_selection(fmt::format("{}x{}x{} s{} split{}", kHcBlockM, block_n, kHcBlockK, stages, nsplits), cs,
                         hc_prenorm_threads(), stages);
}

jit::Selection fp8_mqa_logits(jit::JitRuntime& rt, const GemmTarget& target, const at::Tensor& q,
                              const at::Tensor& kv, const at::Tensor& kv_sf, const at::Tensor& weights,
                              const at::Tensor& ks, const at::Tensor& ke, const at::Tensor& logits,
                              bool clean_logits) {
  const CallSite fn{kFamily, "fp8_mqa_logits"};
  check(fn, "q", q, at::kByte, 3, Layout::kContiguous);
  check(fn, "kv", kv, at::kByte, 2, Layout::kContiguous);
  check(fn, "kv_sf", kv_sf, at::kFloat, 1, Layout::kContiguous);
  check(fn, "weights", weights, at::kFloat, 2, Layout::kInnerContiguous);
  check(fn, "ks", ks, at::kInt, 1, Layout::kContiguous);
  check(fn, "ke", ke, at::kInt, 1, Layout::kContiguous);
  check(fn, "logits", logits, at::kFloat, 2, Layout::kInnerContiguous);
  check_target(fn, target);
  const int64_t tokens = q.size(0), heads = q.size(1), dim = q.size(2), kv_len = kv.size(0);
  check_heads(fn, "q", heads, dim);
  check_size(fn, "kv", kv, 1, dim);
  check_size(fn, "kv_sf", kv_sf, 0, kv_len);
  check_size(fn, "weights", weights, 0, tokens);
  check_size(fn, "weights", weights, 1, heads);
  check_size(fn, "ks", ks, 0, tokens);
  check_size(fn, "ke", ke, 0, tokens);
  check_size(fn, "logits", logits, 0, tokens);
  if (logits.size(1) < kv_len) {
    fail(fn, "logits", fmt::format("has shape {}; it needs at least Skv = {} columns", kernels::shape_str(logits), kv_len));
  }
  if (tokens > 1 && logits.stride(0) < logits.size(1)) fail(fn, "logits", "has overlapping rows");
  check_devices(fn, q, {{"kv", &kv}, {"kv_sf", &kv_sf}, {"weights", &weights}, {"ks", &ks}, {"ke", &ke}, {"logits", &logits}});
  if (tokens == 0 || kv_len == 0) return {};
  const int h = static_cast<int>(heads), d = static_cast<int>(dim);
  const std::vector<jit::Constexpr> cs = mqa_logits_constexprs(h, d, target.num_sms);
  const std::vector<jit::KernelArg> args = {
      kernels::tensor_map_arg(fn, "q", q, jit::DType::kF8E4M3, {dim, tokens * heads}, {dim}, {static_cast<uint32_t>(dim), 128},
                 static_cast<uint32_t>(dim)),
      kernels::tensor_map_arg(fn, "kv", kv, jit::DType::kF8E4M3, {dim, kv_len}, {dim},
                 {static_cast<uint32_t>(dim), static_cast<uint32_t>(kMqaBlockKv)}, static_cast<uint32_t>(dim)),
      tensor_arg(kv_sf),
      tensor_arg(weights),
      tensor_arg(ks),
      tensor_arg(ke),
      tensor_arg(logits),
      jit::KernelArg::i32(kernels::to_i32(fn, "q", tokens)),
      jit::KernelArg::i32(kernels::to_i32(fn, "kv", kv_len)),
      jit::KernelArg::i64(weights.stride(0)),
      jit::KernelArg::i64(logits.stride(0))};
  void* stream = kernels::stream_for(logits);
  const unsigned grid = static_cast<unsigned>(target.num_sms);
  rt.launch(fp8_mqa_logits_kernel(), cs, args, launch_dims(grid, mqa_logits_threads(), mqa_logits_smem_bytes(h, d)),
            stream);
  if (clean_logits) {
    const std::vector<jit::KernelArg> clean_args = {
        jit::KernelArg::i32(kernels::to_i32(fn, "q", tokens)), jit::KernelArg::i32(kernels::to_i32(fn, "kv", kv_len)),
        jit::KernelArg::i64(logits.stride(0)), tensor_arg(ks), tensor_arg(ke), tensor_arg(logits)};
    rt.launch(clean_logits_kernel(), clean_logits_constexprs(1), clean_args,
              launch_dims(grid, kCleanNumWarps * 32, 0), stream);
  }
  return fixed_selection(fmt::format("q{} kv{} s{}+{}", 128 / h, kMqaBlockKv, kMqaNumQStages, kMqaNumKvStages), cs,
                         mqa_logits_threads(), kMqaNumKvStages);
}

void get_paged_mqa_logits_metadata(jit::JitRuntime& rt, const GemmTarget& target, const at::Tensor& context_lens,
                                   int block_kv, const at::Tensor& schedule_meta) {
  const CallSite fn{kFamily, "get_paged_mqa_logits_metadata"};
  check(fn, "context_lens", context_lens, at::kInt, 2, Layout::kContiguous);
  check(fn, "schedule_meta", schedule_meta, at::kInt, 2, Layout::kContiguous);
  check_target(fn, target);
  const int64_t batch = context_lens.size(0), next_n = context_lens.size(1);
  if (batch < 1 || batch > kPagedMaxBatch) {
    fail(fn, "context_lens", fmt::format("has {} rows; the batch must be 1..{}", batch, kPagedMaxBatch));
  }
  if (next_n < 1) fail(fn, "context_lens", "needs at least one column (next_n)");
  if (block_kv <= 0 || kPagedSplitKv % block_kv != 0 || (target.sm == 90 && block_kv != kPagedBlockKv)) {
    fail(fn, "block_kv", fmt::format("is {}; it must divide {} (and be {} on sm_90)", block_kv, kPagedSplitKv, kPagedBlockKv));
  }
  check_size(fn, "schedule_meta", schedule_meta, 0, int64_t{target.num_sms} + 1);
  check_size(fn, "schedule_meta", schedule_meta, 1, 2);
  kernels::check_same_device(fn, context_lens, "schedule_meta", schedule_meta);
  const std::vector<jit::KernelArg> args = {jit::KernelArg::i32(static_cast<int32_t>(batch)),
                                            jit::KernelArg::i32(kernels::to_i32(fn, "context_lens", next_n)),
                                            tensor_arg(context_lens), tensor_arg(schedule_meta)};
  rt.launch(paged_mqa_metadata_kernel(), paged_mqa_metadata_constexprs(batch, target.num_sms), args,
            launch_dims(1, 32, 0), kernels::stream_for(schedule_meta));
}

jit::Selection fp8_paged_mqa_logits(jit::JitRuntime& rt, const GemmTarget& target, const at::Tensor& q,
                                    const at::Tensor& kv_cache, const at::Tensor& weights,
                                    const at::Tensor& context_lens, const at::Tensor& block_table,
                                    const at::Tensor& schedule_meta, const at::Tensor& logits) {
  const CallSite fn{kFamily, "fp8_paged_mqa_logits"};
  check(fn, "q", q, at::kByte, 4, Layout::kContiguous);
  check(fn, "kv_cache", kv_cache, at::kByte, 2, Layout::kInnerContiguous);
  check(fn, "weights", weights, at::kFloat, 2, Layout::kContiguous);
  check(fn, "context_lens", context_lens, at::kInt, 2, Layout::kContiguous);
  check(fn, "block_table", block_table, at::kInt, 2, Layout::kInnerContiguous);
  check(fn, "schedule_meta", schedule_meta, at::kInt, 2, Layout::kContiguous);
  check(fn, "logits", logits, at::kFloat, 2, Layout::kInnerContiguous);
  check_target(fn, target);
  const int64_t batch = q.size(0), next_n = q.size(1), heads = q.size(2), dim = q.size(3);
  if (next_n != 1 && next_n != 2) fail(fn, "q", fmt::format("has next_n = {} (dimension 1); it must be 1 or 2", next_n));
  check_heads(fn, "q", heads, dim);
  if (kv_cache.size(1) % (dim + 4) != 0 || kv_cache.size(1) / (dim + 4) != kPagedBlockKv) {
    fail(fn, "kv_cache",
         fmt::format("has shape {}; a row must be one cache block of {} tokens x (D + 4 = {}) bytes",
                     kernels::shape_str(kv_cache), kPagedBlockKv, dim + 4));
  }
  const int64_t num_blocks = kv_cache.size(0);
  if (num_blocks < 1) fail(fn, "kv_cache", "has no block");
  check_size(fn, "weights", weights, 0, batch * next_n);
  check_size(fn, "weights", weights, 1, heads);
  check_size(fn, "context_lens", context_lens, 0, batch);
  check_size(fn, "context_lens", context_lens, 1, next_n);
  check_size(fn, "block_table", block_table, 0, batch);
  if (block_table.size(1) < 1) fail(fn, "block_table", "needs at least one column");
  check_size(fn, "schedule_meta", schedule_meta, 0, int64_t{target.num_sms} + 1);
  check_size(fn, "schedule_meta", schedule_meta, 1, 2);
  check_size(fn, "logits", logits, 0, batch * next_n);
  if (logits.size(1) < 1) fail(fn, "logits", "needs at least one column");
  check_devices(fn, q, {{"kv_cache", &kv_cache}, {"weights", &weights}, {"context_lens", &context_lens},
                        {"block_table", &block_table}, {"schedule_meta", &schedule_meta}, {"logits", &logits}});
  if (batch == 0) return {};
  const std::vector<jit::Constexpr> cs = paged_mqa_logits_constexprs(
      target.sm, static_cast<int>(next_n), static_cast<int>(heads), static_cast<int>(dim), kPagedBlockKv);
  const uint32_t udim = static_cast<uint32_t>(dim);
  const std::vector<jit::KernelArg> args = {
      kernels::tensor_map_arg(fn, "q", q, jit::DType::kF8E4M3, {dim, batch * next_n * heads}, {dim},
                 {udim, static_cast<uint32_t>(next_n * heads)}, udim),
      kernels::tensor_map_arg(fn, "kv_cache", kv_cache, jit::DType::kF8E4M3, {dim, kPagedBlockKv, num_blocks}, {dim, kv_cache.stride(0)},
                 {udim, static_cast<uint32_t>(kPagedBlockKv), 1}, udim),
      tensor_arg(kv_cache),
      tensor_arg(weights),
      tensor_arg(context_lens),
      tensor_arg(block_table),
      tensor_arg(schedule_meta),
      tensor_arg(logits),
      jit::KernelArg::i32(kernels::to_i32(fn, "q", batch)),
      jit::KernelArg::i64(block_table.stride(0)),
      jit::KernelArg::i64(logits.stride(0)),
      jit::KernelArg::i32(kernels::to_i32(fn, "logits", logits.size(1))),
      jit::KernelArg::i64(kv_cache.stride(0))};
  const int kv_stages = target.sm == 100 ? 4 : 3;
  rt.launch(fp8_paged_mqa_logits_kernel(), cs, args,
            launch_dims(static_cast<unsigned>(target.num_sms), paged_mqa_logits_threads(),
                        paged_mqa_logits_smem_bytes(target.sm, static_cast<int>(next_n), static_cast<int>(heads),
                                                    static_cast<int>(dim))),
            kernels::stream_for(logits));
  return fixed_selection(fmt::format("next_n{} kv{} split{} s3+{}", next_n, kPagedBlockKv, kPagedSplitKv, kv_stages), cs,
                         paged_mqa_logits_threads(), kv_stages);
}

}  // namespace coldstart::deepgemm
