#include "harness/kernels/paged/paged_kernels.h"

#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "harness/kernels/model_shapes.h"
#include "harness/kernels/source_util.h"
#include "harness/kernels/split_kv.h"

// Embedded by cs_add_kernel_family (harness/kernels/CMakeLists.txt).
extern const char* const kSource_paged_common;
extern const char* const kSource_paged_cache_store;
extern const char* const kSource_paged_decode_stage1;
extern const char* const kSource_paged_decode_stage2;
extern const char* const kSource_paged_prefill;

namespace coldstart::paged {
namespace {

// Every paged program: the shared split-KV helpers (pa_attend merges through them), then the
// family header.
jit::KernelSource make_source(const char* name, const char* text, std::string& storage) {
  static const std::string common =
      std::string(kernels::split_kv_decode_source()) + "\n" + kSource_paged_common;
  return kernels::make_kernel_source(common.c_str(), name, text, storage);
}

jit::Constexpr dtype_constexpr(const PagedLayout& l) {
  return {"CACHE_DTYPE", static_cast<int64_t>(l.dtype)};
}

}  // namespace

CacheDtype parse_cache_dtype(const std::string& s) {
  if (s == "auto" || s == "bfloat16" || s == "bf16") return CacheDtype::kBF16;
  if (s == "fp8" || s == "fp8_e4m3") return CacheDtype::kFP8E4M3;
  throw InputError(fmt::format(
      "paged: kv_cache_dtype '{}' is not supported (expected auto, bfloat16, fp8 or fp8_e4m3)",
      s));
}

const char* cache_dtype_name(CacheDtype dtype) {
  return dtype == CacheDtype::kBF16 ? "bf16" : "fp8_e4m3";
}

PagedLayout PagedLayout::make(int head_dim, int block_size, int num_kv_heads, CacheDtype dtype) {
  if (head_dim < 32 || head_dim > 256 || head_dim % 32 != 0) {
    throw InputError(fmt::format(
        "paged: head_dim {} is not supported (must be a multiple of 32 in [32, 256])", head_dim));
  }
  kernels::require_positive("paged", "block_size", block_size);
  kernels::require_positive("paged", "num_kv_heads", num_kv_heads);
  if (dtype != CacheDtype::kBF16 && dtype != CacheDtype::kFP8E4M3) {
    throw InputError(fmt::format("paged: cache dtype code {} is not supported",
                                 static_cast<int>(dtype)));
  }
  PagedLayout l;
  l.head_dim = head_dim;
  l.block_size = block_size;
  l.num_kv_heads = num_kv_heads;
  l.dtype = dtype;
  return l;
}

const jit::KernelSource& cache_store_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source(
      "paged_cache_store", kSource_paged_cache_store, storage);
  return k;
}

const jit::KernelSource& decode_stage1_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source(
      "paged_decode_stage1", kSource_paged_decode_stage1, storage);
  return k;
}

const jit::KernelSource& decode_stage2_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_source("paged_decode_stage2", kSource_paged_decode_stage2, storage);
  return k;
}

const jit::KernelSource& prefill_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source("paged_prefill", kSource_paged_prefill, storage);
  return k;
}

std::vector<const jit::KernelSource*> all_kernels() {
  return {&cache_store_kernel(), &decode_stage1_kernel(), &decode_stage2_kernel(),
          &prefill_kernel()};
}

std::vector<jit::Constexpr> cache_store_constexprs(const PagedLayout& layout) {
  return {{"HEAD_DIM", layout.head_dim}, dtype_constexpr(layout)};
}

namespace {
int kv_group(const PagedLayout& layout, int num_q_heads) {
  return kernels::kv_group("paged", num_q_heads, layout.num_kv_heads);
}
}  // namespace

std::vector<jit::Constexpr> decode_stage1_constexprs(const PagedLayout& layout, int num_q_heads,
                                                     int num_kv_splits) {
  return {{"HEAD_DIM", layout.head_dim},
          {"BLOCK_SIZE", layout.block_size},
          {"NUM_KV_SPLITS", num_kv_splits},
          {"KV_GROUP", kv_group(layout, num_q_heads)},
          dtype_constexpr(layout)};
}

int decode_stage1_heads_per_block(int head_dim, int kv_group) {
  // paged_decode_stage1.cu: kLpt lanes per token (the largest power of two <= 32 dividing
  // D / 8), D / kLpt coordinates per lane.
  int lanes = 1;
  while (lanes < 32 && (head_dim / 8) % (2 * lanes) == 0) lanes *= 2;
  return kernels::split_kv_heads_per_block(kv_group, head_dim / lanes);
}

std::vector<jit::Constexpr> decode_stage2_constexprs(const PagedLayout& layout, int num_kv_splits) {
  return kernels::split_kv_stage2_constexprs(layout.head_dim, num_kv_splits);
}

std::vector<jit::Constexpr> prefill_constexprs(const PagedLayout& layout, int num_q_heads) {
  return {{"HEAD_DIM", layout.head_dim},
          {"BLOCK_SIZE", layout.block_size},
          {"KV_GROUP", kv_group(layout, num_q_heads)},
          dtype_constexpr(layout)};
}

std::vector<KernelCompileCase> compile_cases() {
  using jit::DType;
  using jit::KernelArg;
  std::vector<KernelCompileCase> cases;
  const int max_model_len = 32768;
  const int64_t num_blocks = 4096;
  const uint64_t base = 1u << 20;  // 256-byte aligned, as a real allocation
  auto add = [&](const jit::KernelSource& k, std::vector<jit::Constexpr> cs,
                 std::vector<KernelArg> args) {
    cases.push_back(kernels::make_compile_case("paged", k, std::move(cs), std::move(args)));
  };
  // The served models' attention heads (model_shapes.h): Qwen3-8B, and the attention layers of
  // the hybrids, Qwen3-Next (head dim 256) and Nemotron-3 Nano (KV group 16).
  for (const kernels::shapes::AttentionHeads& heads :
       {kernels::shapes::kQwen3_8B, kernels::shapes::kQwen3NextAttentionTp1,
        kernels::shapes::kNemotronNanoAttentionTp1}) {
    const int hq = heads.num_q_heads;
    const int hk = heads.num_kv_heads;
    const int d = heads.head_dim;
    const int64_t qkv_stride = static_cast<int64_t>(hq + 2 * hk) * d;  // q/k/v views of qkv
    const float sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (CacheDtype dt : {CacheDtype::kBF16, CacheDtype::kFP8E4M3}) {
      const PagedLayout l = PagedLayout::make(d, 16, hk, dt);
      const DType cache_t = dt == CacheDtype::kBF16 ? DType::kBF16 : DType::kU8;
      const uint64_t value_cache = base + static_cast<uint64_t>(l.page_size_bytes() / 2) * num_blocks;
      const int64_t block_elems = static_cast<int64_t>(l.block_size) * hk * d;
      add(cache_store_kernel(), cache_store_constexprs(l),
          {KernelArg::pointer(base + 2ull * hq * d, DType::kBF16),
           KernelArg::pointer(base + 2ull * (hq + hk) * d, DType::kBF16),
           KernelArg::pointer(base, DType::kI64), KernelArg::pointer(base, cache_t),
           KernelArg::pointer(value_cache, cache_t), KernelArg::pointer(base, DType::kF32),
           KernelArg::pointer(base, DType::kF32), KernelArg::i64(qkv_stride), KernelArg::i64(d),
           KernelArg::i64(qkv_stride), KernelArg::i64(d), KernelArg::i32(l.block_size),
           KernelArg::i64(block_elems)});
      add(decode_stage1_kernel(), decode_stage1_constexprs(l, hq),
          {KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, cache_t),
           KernelArg::pointer(value_cache, cache_t), KernelArg::pointer(base, DType::kF32),
           KernelArg::pointer(base, DType::kF32), KernelArg::pointer(base, DType::kI32),
           KernelArg::pointer(base, DType::kI32), KernelArg::pointer(base, DType::kF32),
           KernelArg::i64(qkv_stride), KernelArg::i64(d),
           KernelArg::i32(max_model_len / l.block_size), KernelArg::f32(sm_scale),
           KernelArg::i64(block_elems)});
      add(prefill_kernel(), prefill_constexprs(l, hq),
          {KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, cache_t),
           KernelArg::pointer(value_cache, cache_t), KernelArg::pointer(base, DType::kF32),
           KernelArg::pointer(base, DType::kF32), KernelArg::pointer(base, DType::kI32),
           KernelArg::pointer(base, DType::kI32), KernelArg::pointer(base, DType::kI32),
           KernelArg::pointer(base, DType::kBF16), KernelArg::i64(qkv_stride), KernelArg::i64(d),
           KernelArg::i64(static_cast<int64_t>(hq) * d), KernelArg::i64(d),
           KernelArg::i32(max_model_len / l.block_size), KernelArg::i32(1),
           KernelArg::f32(sm_scale), KernelArg::i64(block_elems)});
    }
    const PagedLayout l = PagedLayout::make(d, 16, hk, CacheDtype::kBF16);
    add(decode_stage2_kernel(), decode_stage2_constexprs(l),
        {KernelArg::pointer(base, DType::kF32), KernelArg::pointer(base, DType::kBF16),
         KernelArg::pointer(base, DType::kF32), KernelArg::i64(static_cast<int64_t>(hq) * d),
         KernelArg::i64(d)});
  }
  return cases;
}

}  // namespace coldstart::paged
