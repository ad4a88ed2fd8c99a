#include "harness/kernels/turboquant/turboquant_kernels.h"

#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "harness/kernels/model_shapes.h"
#include "harness/kernels/source_util.h"
#include "harness/kernels/split_kv.h"

// Embedded by cs_embed_sources (harness/kernels/CMakeLists.txt).
extern const char* const kSource_tq_common;
extern const char* const kSource_tq_cache_store;
extern const char* const kSource_tq_decode_stage1;
extern const char* const kSource_tq_decode_stage2;
extern const char* const kSource_tq_dequant_kv;

namespace coldstart::tq {
namespace {

bool is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

// Every TurboQuant program: the shared split-KV helpers, then the family header.
jit::KernelSource make_source(const char* name, const char* text, std::string& storage) {
  static const std::string common =
      std::string(kernels::split_kv_decode_source()) + "\n" + kSource_tq_common;
  return kernels::make_kernel_source(common.c_str(), name, text, storage);
}

}  // namespace

TqLayout TqLayout::make(int head_dim, int block_size, int num_kv_heads) {
  if (!is_pow2(head_dim) || head_dim < 16 || head_dim > 256) {
    throw InputError(fmt::format(
        "turboquant: head_dim {} is not supported (must be a power of two in [16, 256])",
        head_dim));
  }
  kernels::require_positive("turboquant", "block_size", block_size);
  kernels::require_positive("turboquant", "num_kv_heads", num_kv_heads);
  TqLayout l;
  l.head_dim = head_dim;
  l.block_size = block_size;
  l.num_kv_heads = num_kv_heads;
  l.key_bytes = head_dim / 2 + 2;
  l.value_bytes = head_dim / 2 + 4;
  l.slot_bytes = (l.key_bytes + l.value_bytes + 1) / 2 * 2;
  return l;
}

const jit::KernelSource& cache_store_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source("tq_cache_store", kSource_tq_cache_store, storage);
  return k;
}

const jit::KernelSource& decode_stage1_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source(
      "tq_decode_stage1", kSource_tq_decode_stage1, storage);
  return k;
}

const jit::KernelSource& decode_stage2_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_source("tq_decode_stage2", kSource_tq_decode_stage2, storage);
  return k;
}

const jit::KernelSource& dequant_kv_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_source("tq_dequant_kv", kSource_tq_dequant_kv, storage);
  return k;
}

std::vector<const jit::KernelSource*> all_kernels() {
  return {&cache_store_kernel(), &decode_stage1_kernel(), &decode_stage2_kernel(),
          &dequant_kv_kernel()};
}

std::vector<jit::Constexpr> cache_store_constexprs(const TqLayout& layout) {
  return {{"HEAD_DIM", layout.head_dim}};
}

std::vector<jit::Constexpr> decode_stage1_constexprs(const TqLayout& layout, int num_q_heads,
                                                     int num_kv_splits) {
  return {{"HEAD_DIM", layout.head_dim},
          {"BLOCK_SIZE", layout.block_size},
          {"NUM_KV_SPLITS", num_kv_splits},
          {"KV_GROUP", kernels::kv_group("turboquant", num_q_heads, layout.num_kv_heads)}};
}

std::vector<jit::Constexpr> decode_stage2_constexprs(const TqLayout& layout, int num_kv_splits) {
  return kernels::split_kv_stage2_constexprs(layout.head_dim, num_kv_splits);
}

std::vector<jit::Constexpr> dequant_kv_constexprs(const TqLayout& layout) {
  return {{"HEAD_DIM", layout.head_dim}, {"BLOCK_SIZE", layout.block_size}};
}

std::vector<KernelCompileCase> compile_cases() {
  using jit::DType;
  using jit::KernelArg;
  std::vector<KernelCompileCase> cases;
  const kernels::shapes::AttentionHeads qwen = kernels::shapes::kQwen3_8B;
  const int hq = qwen.num_q_heads;
  const int hk = qwen.num_kv_heads;
  const int max_model_len = 32768;
  for (int d : {qwen.head_dim, 64}) {
    const TqLayout l = TqLayout::make(d, 16, hk);
    const int64_t qkv_stride = static_cast<int64_t>(hq + 2 * hk) * d;  // q/k/v views of qkv
    const uint64_t base = 1u << 20;                                     // 256-byte aligned
    auto add = [&](const jit::KernelSource& k, std::vector<jit::Constexpr> cs,
                   std::vector<KernelArg> args) {
      cases.push_back(kernels::make_compile_case("turboquant", k, std::move(cs), std::move(args)));
    };
    add(cache_store_kernel(), cache_store_constexprs(l),
        {KernelArg::pointer(base + 2ull * hq * d, DType::kBF16),
         KernelArg::pointer(base + 2ull * (hq + hk) * d, DType::kBF16),
         KernelArg::pointer(base, DType::kI64), KernelArg::pointer(base, DType::kU8),
         KernelArg::i64(qkv_stride), KernelArg::i64(d), KernelArg::i64(qkv_stride),
         KernelArg::i64(d)});
    add(decode_stage1_kernel(), decode_stage1_constexprs(l, hq),
        {KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kU8),
         KernelArg::pointer(base, DType::kI32), KernelArg::pointer(base, DType::kI32),
         KernelArg::pointer(base, DType::kF32), KernelArg::i64(qkv_stride), KernelArg::i64(d),
         KernelArg::i32(max_model_len / l.block_size),
         KernelArg::f32(1.0f / std::sqrt(static_cast<float>(d)))});
    add(decode_stage2_kernel(), decode_stage2_constexprs(l),
        {KernelArg::pointer(base, DType::kF32), KernelArg::pointer(base, DType::kBF16),
         KernelArg::pointer(base, DType::kF32), KernelArg::i64(static_cast<int64_t>(hq) * d),
         KernelArg::i64(d)});
    add(dequant_kv_kernel(), dequant_kv_constexprs(l),
        {KernelArg::pointer(base, DType::kU8), KernelArg::pointer(base, DType::kI32),
         KernelArg::pointer(base, DType::kBF16), KernelArg::pointer(base, DType::kBF16),
         KernelArg::i32(2048), KernelArg::i32(2048)});
  }
  return cases;
}

}  // namespace coldstart::tq
