// DeepGEMM-style hyper-connection and sparse-indexer kernels: sources, compile keys, launch
// geometry, shape rules and compile cases. See dg_indexer_kernels.h. Constants transcribe
// deepseek-ai/DeepGEMM at 891d57b: csrc/jit_kernels/impls/sm90_tf32_hc_prenorm_gemm.hpp and
// sm100_tf32_hc_prenorm_gemm.hpp (tile, stage formula, N limits), smxx_fp8_fp4_mqa_logits.hpp
// (block_q = 128 / H, block_kv 256, 3 + 3 stages), smxx_clean_logits.hpp (8192, 8 warps),
// smxx_fp8_fp4_paged_mqa_logits.hpp (metadata key, split_kv 256, kv stages 3 / 4).
#include "harness/kernels/deepgemm/dg_indexer_kernels.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/kernels/deepgemm/dg_kernels.h"
#include "harness/kernels/source_util.h"

// Embedded by cs_add_kernel_family (harness/kernels/CMakeLists.txt).
extern const char* const kSource_dg_common;
extern const char* const kSource_dg_hc_prenorm;
extern const char* const kSource_dg_mqa_logits;
extern const char* const kSource_dg_paged_mqa_metadata;
extern const char* const kSource_dg_paged_mqa_logits;

namespace coldstart::deepgemm {

namespace {



void check_sm(int sm, const char* what) {
  if (sm != 90 && sm != 100) {
    throw jit::UnsupportedArchError(
        fmt::format("deepgemm: {} exists for sm_90 and sm_100 (DeepGEMM's SM90 / SM100 kernels), not sm_{}", what, sm));
  }
}

/// A family kernel: `file` is the .cu stem (NVRTC messages point into it), `name` what records
/// show, `entry` the extern "C" symbol. Every argument that is not a tensor map is left out of
/// specialization: DeepGEMM keys none of them (not even pointer alignment).
jit::KernelSource indexer_source(const char* file, const char* text, const char* name, const char* entry,
                                 std::string& storage) {
  jit::KernelSource k = kernels::make_kernel_source(kSource_dg_common, file, text, storage, entry);
  k.name = name;
  for (const std::string& a : k.arg_names) {
    if (a.rfind("tmap_", 0) != 0) k.do_not_specialize.push_back(a);
  }
  k.min_sm = 90;
  k.arch_specific = true;  // TMA + mbarrier pipelines: sm_90a / sm_100a, as the rest of the family
  return k;
}

}  // namespace

// ---------------------------------------------------------------- tf32_hc_prenorm_gemm

int hc_num_splits(int64_t m, int64_t k, int num_sms) {
  if (m < 1 || k < 1 || num_sms < 1) {
    throw InputError(fmt::format("deepgemm: hc_num_splits needs m, k, num_sms >= 1, got {}, {}, {}", m, k, num_sms));
  }
  const int64_t grid = ceil_div(m, kHcBlockM);
  int64_t split = num_sms / grid;
  split = std::min<int64_t>(split, ceil_div(k, kHcBlockK) / 4);
  return static_cast<int>(std::max<int64_t>(split, 1));
}

int hc_block_n(int64_t n) { return static_cast<int>(align_up(n, 16)); }

int hc_num_stages(int sm, int64_t n) {
  check_sm(sm, "tf32_hc_prenorm_gemm");
  const int64_t bn = hc_block_n(n);
  // get_swizzle_mode(block_n, sizeof(float)): the first of 128, 64, 32 bytes dividing the row.
  int64_t swizzle_cd = 16;
  for (int mode : {128, 64, 32}) {
    if ((bn * 4) % mode == 0) {
      swizzle_cd = mode;
      break;
    }
  }
  for (int64_t s = 12; s > 0; --s) {
    const int64_t stages = (int64_t{kHcBlockM} * kHcBlockK * 2 + bn * kHcBlockK * 4) * s + kHcBlockM * swizzle_cd;
    const int64_t barriers = sm == 90 ? s * 2 * 8 : (s * 4 + 1) * 8 + 4;
    if (stages + barriers <= kSmemCapacity) return static_cast<int>(s);
  }
  throw InputError(fmt::format("deepgemm: tf32_hc_prenorm_gemm N={} leaves no pipeline stage in shared memory", n));
}

void check_hc_prenorm_shape(int sm, int64_t n, int64_t k, int64_t num_splits) {
  check_sm(sm, "tf32_hc_prenorm_gemm");
  const int64_t max_n = sm == 90 ? 32 : 128;
  if (n <= 0 || n % 8 != 0 || n > max_n) {
    throw InputError(fmt::format("deepgemm: tf32_hc_prenorm_gemm N = {} must be a positive multiple of 8, at most {} on sm_{}",
                                 n, max_n, sm));
  }
  if (k <= 0 || k % kHcBlockK != 0) {
    throw InputError(fmt::format("deepgemm: tf32_hc_prenorm_gemm K = {} must be a positive multiple of {}", k, kHcBlockK));
  }
  if (num_splits < 1) {
    throw InputError(fmt::format("deepgemm: tf32_hc_prenorm_gemm num_splits = {} must be at least 1", num_splits));
  }
}

std::vector<jit::Constexpr> hc_prenorm_constexprs(int sm, int64_t n, int64_t k, int num_splits) {
  // DeepGEMM's template also carries the output swizzle (a function of BLOCK_N) and the thread
  // counts (constant): left out, they never change the key on their own.
  return {{"SHAPE_N", n},
          {"SHAPE_K", k},
          {"BLOCK_M", kHcBlockM},
          {"BLOCK_N", hc_block_n(n)},
          {"BLOCK_K", kHcBlockK},
          {"NUM_SPLITS", num_splits},
          {"NUM_STAGES", hc_num_stages(sm, n)}};
}

int hc_prenorm_threads() { return 4 * 32 + 32; }

int hc_prenorm_smem_bytes(int block_n, int num_stages) {
  return num_stages * (kHcBlockM * kHcBlockK * 2 + block_n * kHcBlockK * 4) + 2 * num_stages * 8 + 1024;
}

const jit::KernelSource& tf32_hc_prenorm_gemm_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      indexer_source(
          "dg_hc_prenorm", kSource_dg_hc_prenorm, "tf32_hc_prenorm_gemm", "dg_hc_prenorm", storage);
  return k;
}

// ---------------------------------------------------------------- fp8_mqa_logits

void check_mqa_heads(int64_t num_heads, int64_t head_dim) {
  if (num_heads != 32 && num_heads != 64) {
    throw InputError(fmt::format("deepgemm: the indexer takes 32 or 64 heads, got {}", num_heads));
  }
  if (head_dim != 32 && head_dim != 64 && head_dim != 128) {
    throw InputError(fmt::format("deepgemm: the indexer takes head_dim 32, 64 or 128, got {}", head_dim));
  }
}

std::vector<jit::Constexpr> mqa_logits_constexprs(int num_heads, int head_dim, int num_sms) {
  // DeepGEMM's template also carries the thread counts (constant per arch) and the logits dtype
  // (float here).
  return {{"NUM_HEADS", num_heads},
          {"HEAD_DIM", head_dim},
          {"IS_COMPRESSED_LOGITS", 0},
          {"BLOCK_Q", 128 / num_heads},
          {"BLOCK_KV", kMqaBlockKv},
          {"NUM_Q_STAGES", kMqaNumQStages},
          {"NUM_KV_STAGES", kMqaNumKvStages},
          {"NUM_SMS", num_sms}};
}

int mqa_logits_threads() { return (kMqaBlockKv / 32) * 32 + 32; }

int mqa_logits_smem_bytes(int num_heads, int head_dim) {
  (void)num_heads;  // always 128 query-head rows a block
  return kMqaNumQStages * 128 * head_dim + kMqaNumKvStages * kMqaBlockKv * head_dim +
         2 * (kMqaNumQStages + kMqaNumKvStages) * 8 + 1024;
}

std::vector<jit::Constexpr> clean_logits_constexprs(int next_n) {
  return {{"NEXT_N", next_n}, {"BLOCK_KV", kCleanBlockKv}, {"NUM_WARPS", kCleanNumWarps}};
}

const jit::KernelSource& fp8_mqa_logits_kernel() {
  static std::string storage;
  static const jit::KernelSource k = indexer_source(
      "dg_mqa_logits", kSource_dg_mqa_logits, "fp8_mqa_logits", "dg_mqa_logits", storage);
  return k;
}

const jit::KernelSource& clean_logits_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      indexer_source(
          "dg_mqa_logits", kSource_dg_mqa_logits, "clean_logits", "dg_clean_logits", storage);
  return k;
}

// ---------------------------------------------------------------- paged indexer

std::vector<jit::Constexpr> paged_mqa_metadata_constexprs(int64_t batch, int num_sms) {
  return {{"ALIGNED_BATCH", align_up(batch, 32)}, {"SPLIT_KV", kPagedSplitKv}, {"NUM_SMS", num_sms}, {"IS_VARLEN", 0}};
}

std::vector<jit::Constexpr> paged_mqa_logits_constexprs(int sm, int next_n, int num_heads, int head_dim,
                                                        int block_kv) {
  check_sm(sm, "fp8_paged_mqa_logits");
  // DeepGEMM's template also carries the thread counts (constant per arch) and the logits dtype.
  return {{"NEXT_N", next_n},
          {"NUM_HEADS", num_heads},
          {"HEAD_DIM", head_dim},
          {"BLOCK_KV", block_kv},
          {"IS_CONTEXT_LENS_2D", 1},
          {"IS_VARLEN", 0},
          {"NUM_Q_STAGES", 3},
          {"NUM_KV_STAGES", sm == 100 ? 4 : 3},
          {"SPLIT_KV", kPagedSplitKv}};
}

int paged_mqa_logits_threads() { return (kPagedSplitKv / 32) * 32 + 32; }

int paged_mqa_logits_smem_bytes(int sm, int next_n, int num_heads, int head_dim) {
  const int kv_stages = sm == 100 ? 4 : 3;
  const int rings = kPagedSplitKv / kPagedBlockKv;
  return 3 * next_n * num_heads * head_dim + rings * kv_stages * kPagedBlockKv * head_dim +
         2 * (3 + rings * kv_stages) * 8 + 1024;
}

const jit::KernelSource& paged_mqa_metadata_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      indexer_source(
          "dg_paged_mqa_metadata", kSource_dg_paged_mqa_metadata, "get_paged_mqa_logits_metadata",
          "dg_paged_mqa_metadata", storage);
  return k;
}

const jit::KernelSource& fp8_paged_mqa_logits_kernel() {
  static std::string storage;
  static const jit::KernelSource k = indexer_source(
      "dg_paged_mqa_logits", kSource_dg_paged_mqa_logits, "fp8_paged_mqa_logits",
      "dg_paged_mqa_logits", storage);
  return k;
}

// ---------------------------------------------------------------- registry

std::vector<const jit::KernelSource*> indexer_kernels() {
  return {&tf32_hc_prenorm_gemm_kernel(), &fp8_mqa_logits_kernel(), &clean_logits_kernel(),
          &paged_mqa_metadata_kernel(), &fp8_paged_mqa_logits_kernel()};
}

std::vector<KernelCompileCase> indexer_compile_cases() {
  using jit::DType;
  using jit::KernelArg;
  const uint64_t base = 1u << 20;
  auto tmap = [&](DType t, std::vector<uint64_t> dims, std::vector<uint64_t> strides, std::vector<uint32_t> box,
                  uint32_t swizzle) {
    jit::TensorMapSpec m;
    m.dtype = t;
    m.address = base;
    m.rank = static_cast<uint32_t>(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      m.dims[i] = dims[i];
      m.box[i] = box[i];
    }
    for (size_t i = 0; i < strides.size(); ++i) m.strides[i] = strides[i];
    m.swizzle = swizzle;
    return KernelArg::tmap(m, "compile case");
  };
  auto ptr = [&](DType t) { return KernelArg::pointer(base, t); };
  std::vector<KernelCompileCase> cases;

  // The hc pre-norm GEMM of DeepSeek V4-Flash (hc_mult 4, hidden 4096): N = (2 + 4) * 4 = 24,
  // K = 4 * 4096; a decode batch (M = 1: 64 splits on 132 SMs) and a long prefill (1 split).
  const int64_t hc_n = 24, hc_k = 16384;
  for (int64_t m : {int64_t{1}, int64_t{8192}}) {
    const int splits = hc_num_splits(m, hc_k, 132);
    cases.push_back(kernels::make_compile_case(
        kFamily, tf32_hc_prenorm_gemm_kernel(), hc_prenorm_constexprs(90, hc_n, hc_k, splits),
        {tmap(DType::kBF16, {uint64_t(hc_k), uint64_t(m)}, {uint64_t(hc_k * 2)}, {64, 64}, 128),
         tmap(DType::kF32, {uint64_t(hc_k), uint64_t(hc_n)}, {uint64_t(hc_k * 4)}, {32, uint32_t(hc_block_n(hc_n))}, 128),
         ptr(DType::kF32), ptr(DType::kF32), KernelArg::i32(static_cast<int32_t>(m)), KernelArg::i64(hc_n),
         KernelArg::i64(m * hc_n)}));
  }

  // The indexer (index_n_heads 64, index_head_dim 128): prefill logits and their cleaning.
  const int heads = 64, dim = 128, sms = 132;
  const int64_t tokens = 300, kv_len = 4096;
  cases.push_back(kernels::make_compile_case(
      kFamily, fp8_mqa_logits_kernel(), mqa_logits_constexprs(heads, dim, sms),
      {tmap(DType::kF8E4M3, {uint64_t(dim), uint64_t(tokens * heads)}, {uint64_t(dim)}, {uint32_t(dim), 128}, dim),
       tmap(DType::kF8E4M3, {uint64_t(dim), uint64_t(kv_len)}, {uint64_t(dim)}, {uint32_t(dim), uint32_t(kMqaBlockKv)}, dim),
       ptr(DType::kF32), ptr(DType::kF32), ptr(DType::kI32), ptr(DType::kI32), ptr(DType::kF32),
       KernelArg::i32(static_cast<int32_t>(tokens)), KernelArg::i32(static_cast<int32_t>(kv_len)), KernelArg::i64(heads),
       KernelArg::i64(kv_len)}));
  cases.push_back(kernels::make_compile_case(
      kFamily, clean_logits_kernel(), clean_logits_constexprs(1),
      {KernelArg::i32(static_cast<int32_t>(tokens)), KernelArg::i32(static_cast<int32_t>(kv_len)), KernelArg::i64(kv_len),
       ptr(DType::kI32), ptr(DType::kI32), ptr(DType::kF32)}));

  // Decode: the schedule at batch buckets 32 and 256, the paged logits at next_n 1 and 2 (MTP).
  for (int64_t batch : {int64_t{32}, int64_t{256}}) {
    cases.push_back(kernels::make_compile_case(
        kFamily, paged_mqa_metadata_kernel(), paged_mqa_metadata_constexprs(batch, sms),
        {KernelArg::i32(static_cast<int32_t>(batch)), KernelArg::i32(1), ptr(DType::kI32), ptr(DType::kI32)}));
  }
  const int64_t batch = 32, num_blocks = 1024, block_bytes = kPagedBlockKv * (dim + 4);
  for (int next_n : {1, 2}) {
    cases.push_back(kernels::make_compile_case(
        kFamily, fp8_paged_mqa_logits_kernel(), paged_mqa_logits_constexprs(90, next_n, heads, dim, kPagedBlockKv),
        {tmap(DType::kF8E4M3, {uint64_t(dim), uint64_t(batch * next_n * heads)}, {uint64_t(dim)},
              {uint32_t(dim), uint32_t(next_n * heads)}, dim),
         tmap(DType::kF8E4M3, {uint64_t(dim), uint64_t(kPagedBlockKv), uint64_t(num_blocks)},
              {uint64_t(dim), uint64_t(block_bytes)}, {uint32_t(dim), uint32_t(kPagedBlockKv), 1}, dim),
         ptr(DType::kU8), ptr(DType::kF32), ptr(DType::kI32), ptr(DType::kI32), ptr(DType::kI32), ptr(DType::kF32),
         KernelArg::i32(static_cast<int32_t>(batch)), KernelArg::i64(64), KernelArg::i64(8192), KernelArg::i32(8192),
         KernelArg::i64(block_bytes)}));
  }
  return cases;
}

}  // namespace coldstart::deepgemm
