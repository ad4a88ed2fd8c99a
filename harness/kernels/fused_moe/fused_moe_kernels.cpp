#include "harness/kernels/fused_moe/fused_moe_kernels.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/kernels/source_util.h"

// Embedded by cs_add_kernel_family (harness/kernels/CMakeLists.txt).
extern const char* const kSource_fused_moe_common;
extern const char* const kSource_moe_topk_softmax;
extern const char* const kSource_moe_grouped_topk;
extern const char* const kSource_moe_align_block_size;
extern const char* const kSource_moe_silu_and_mul;
extern const char* const kSource_moe_sum;
extern const char* const kSource_fused_moe_gemm;

namespace coldstart::fused_moe {
namespace {

// An AOT kernel: vLLM builds these ops ahead of time, so no argument value may make a new binary;
// every argument is left out of specialization and the constexprs alone are the shape family.
jit::KernelSource make_aot(const char* name, const char* text, std::string& storage) {
  jit::KernelSource k = kernels::make_kernel_source(kSource_fused_moe_common, name, text, storage);
  k.do_not_specialize = k.arg_names;
  return k;
}

int64_t find_value(const jit::KernelConfig& cfg, const char* name, bool required) {
  for (const jit::Constexpr& c : cfg.constexprs) {
    if (c.name == name) return c.value;
  }
  if (required) {
    throw InputError(fmt::format("fused_moe: config '{}' has no {}", cfg.name, name));
  }
  return -1;
}

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

const jit::KernelSource& topk_softmax_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_aot("moe_topk_softmax", kSource_moe_topk_softmax, storage);
  return k;
}

const jit::KernelSource& grouped_topk_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_aot("moe_grouped_topk", kSource_moe_grouped_topk, storage);
  return k;
}

const jit::KernelSource& align_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_aot(
      "moe_align_block_size", kSource_moe_align_block_size, storage);
  return k;
}

const jit::KernelSource& silu_and_mul_kernel() {
  static std::string storage;
  static const jit::KernelSource k =
      make_aot("moe_silu_and_mul", kSource_moe_silu_and_mul, storage);
  return k;
}

const jit::KernelSource& sum_kernel() {
  static std::string storage;
  static const jit::KernelSource k = make_aot("moe_sum", kSource_moe_sum, storage);
  return k;
}

// vLLM's fused_moe_kernel is a plain @triton.jit (no do_not_specialize) at 13cb3e44373b: every
// integer and pointer argument is specialized (==1 / %16), so the GEMM's list stays empty.
const jit::KernelSource& gemm_kernel() {
  static std::string storage;
  static const jit::KernelSource k = kernels::make_kernel_source(
      kSource_fused_moe_common, "fused_moe_gemm", kSource_fused_moe_gemm, storage);
  return k;
}

std::vector<const jit::KernelSource*> all_kernels() {
  return {&topk_softmax_kernel(), &grouped_topk_kernel(), &align_kernel(), &silu_and_mul_kernel(), &sum_kernel(),
          &gemm_kernel()};
}

std::vector<jit::Constexpr> topk_softmax_constexprs(int64_t num_experts, int top_k,
                                                    bool renormalize, bool input_bf16) {
  return {{"NUM_EXPERTS", num_experts},
          {"TOP_K", top_k},
          {"RENORMALIZE", renormalize ? 1 : 0},
          {"INPUT_DTYPE", input_bf16 ? 1 : 0}};
}

std::vector<jit::Constexpr> grouped_topk_constexprs(int64_t num_experts, int top_k,
                                                    int64_t n_group, int64_t topk_group,
                                                    bool renormalize) {
  return {{"NUM_EXPERTS", num_experts},
          {"TOP_K", top_k},
          {"N_GROUP", n_group},
          {"TOPK_GROUP", topk_group},
          {"RENORMALIZE", renormalize ? 1 : 0}};
}

std::vector<jit::Constexpr> align_constexprs(int64_t num_experts) {
  return {{"NUM_EXPERTS", num_experts}};
}

std::vector<jit::Constexpr> silu_and_mul_constexprs() { return {}; }

std::vector<jit::Constexpr> sum_constexprs(int top_k) { return {{"TOP_K", top_k}}; }

GemmBlock gemm_block(const jit::KernelConfig& cfg) {
  GemmBlock blk;
  blk.block_m = static_cast<int>(find_value(cfg, "BLOCK_SIZE_M", true));
  blk.block_n = static_cast<int>(find_value(cfg, "BLOCK_SIZE_N", true));
  blk.block_k = static_cast<int>(find_value(cfg, "BLOCK_SIZE_K", true));
  blk.group_m = static_cast<int>(find_value(cfg, "GROUP_SIZE_M", true));
  blk.num_warps = cfg.num_warps;
  blk.num_stages = cfg.num_stages;
  const int64_t split_k = find_value(cfg, "SPLIT_K", false);
  auto bad = [&](const std::string& what) {
    throw InputError(fmt::format("fused_moe: config '{}' is not supported: {}", cfg.name, what));
  };
  if (blk.block_m < 16 || blk.block_m > 256 || blk.block_m % 16 != 0) {
    bad("BLOCK_SIZE_M must be a multiple of 16 in [16, 256]");
  }
  if (blk.block_n < 8 || blk.block_n > 256 || blk.block_n % 8 != 0) {
    bad("BLOCK_SIZE_N must be a multiple of 8 in [8, 256]");
  }
  if (blk.block_k < 16 || blk.block_k > 256 || blk.block_k % 16 != 0) {
    bad("BLOCK_SIZE_K must be a multiple of 16 in [16, 256]");
  }
  if (blk.group_m < 1) bad("GROUP_SIZE_M must be >= 1");
  if (!is_pow2(blk.num_warps) || blk.num_warps > 16) bad("num_warps must be 1, 2, 4, 8 or 16");
  if (blk.num_stages < 1) bad("num_stages must be >= 1");
  if (split_k != -1 && split_k != 1) bad("SPLIT_K must be 1 (vLLM sets SPLIT_K=1 for this kernel)");
  return blk;
}

std::vector<jit::Constexpr> gemm_constexprs(const jit::KernelConfig& cfg, bool mul_routed_weight,
                                            int top_k, bool naive_block_assignment) {
  gemm_block(cfg);
  std::vector<jit::Constexpr> cs = cfg.constexprs;
  cs.push_back({"MUL_ROUTED_WEIGHT", mul_routed_weight ? 1 : 0});
  cs.push_back({"TOP_K", top_k});
  cs.push_back({"COMPUTE_TYPE", 1});
  cs.push_back({"NAIVE_BLOCK_ASSIGNMENT", naive_block_assignment ? 1 : 0});
  cs.push_back({"NUM_WARPS", cfg.num_warps});
  cs.push_back({"NUM_STAGES", cfg.num_stages});
  return cs;
}

int gemm_smem_limit(int sm) {
  if (sm == 80 || sm == 87) return 166912;
  if (sm == 90 || sm == 100 || sm == 103) return 232448;
  return 101376;
}

int gemm_pipeline_stages(const GemmBlock& blk, int sm) {
  const int stage = (blk.block_m + blk.block_n) * (blk.block_k + 8) * 2;
  const int fit = (gemm_smem_limit(sm) - blk.block_m * 16) / stage;
  return std::min(std::max(blk.num_stages, 1), fit);
}

int gemm_smem_bytes(const GemmBlock& blk, int sm) {
  const int stage = (blk.block_m + blk.block_n) * (blk.block_k + 8) * 2;
  return gemm_pipeline_stages(blk, sm) * stage + blk.block_m * 16;
}

bool uses_naive_block_assignment(int64_t num_tokens, int top_k, int64_t num_experts) {
  return num_tokens * top_k * 4 <= num_experts;
}

int64_t max_num_tokens_padded(int64_t numel, int64_t num_experts, int64_t block_m) {
  int64_t n = numel + num_experts * (block_m - 1);
  if (numel < num_experts) n = std::min(numel * block_m, n);
  return n;
}

int64_t gemm_em(bool naive, int64_t num_pairs, int64_t sorted_len, int64_t a_rows, int top_k,
                int64_t block_m) {
  if (naive) return num_pairs * block_m;
  if (a_rows < block_m) return std::min(sorted_len, a_rows * top_k * block_m);
  return sorted_len;
}

std::vector<KernelCompileCase> compile_cases() {
  using jit::DType;
  using jit::KernelArg;
  std::vector<KernelCompileCase> cases;
  const uint64_t base = 1u << 20;  // 256-byte aligned, as a real allocation
  auto ptr = [&](DType t) { return KernelArg::pointer(base, t); };
  auto add = [&](const jit::KernelSource& k, std::vector<jit::Constexpr> cs,
                 std::vector<KernelArg> args) {
    cases.push_back(kernels::make_compile_case("fused_moe", k, std::move(cs), std::move(args)));
  };
  const kernels::shapes::MoeExperts qwen = kernels::shapes::kQwen3NextMoe;
  const int64_t E = qwen.num_experts;
  const int top_k = qwen.top_k;
  const int64_t N = qwen.intermediate;
  const int64_t H = qwen.hidden;
  add(topk_softmax_kernel(), topk_softmax_constexprs(E, top_k, true, true),
      {ptr(DType::kBF16), ptr(DType::kF32), ptr(DType::kI32), KernelArg::i32(64),
       KernelArg::i64(E)});
  add(align_kernel(), align_constexprs(E),
      {ptr(DType::kI32), ptr(DType::kI32), ptr(DType::kI32), ptr(DType::kI32),
       KernelArg::i32(640), KernelArg::i32(16), KernelArg::i32(8320)});
  add(silu_and_mul_kernel(), silu_and_mul_constexprs(),
      {ptr(DType::kBF16), ptr(DType::kBF16), KernelArg::i32(static_cast<int32_t>(N)),
       KernelArg::i64(N), KernelArg::i64(2 * N)});
  add(sum_kernel(), sum_constexprs(top_k),
      {ptr(DType::kBF16), ptr(DType::kBF16), KernelArg::i32(static_cast<int32_t>(H)),
       KernelArg::i64(H)});

  // GEMM arguments: w13 (A = hidden [M, H], B = w13 [E, 2N, H], C [M, top_k, 2N]).
  auto gemm_args = [&](bool w2, int64_t em, int64_t valid) {
    const int64_t n_out = w2 ? H : 2 * N;
    const int64_t k_in = w2 ? N : H;
    return std::vector<KernelArg>{
        ptr(DType::kBF16), ptr(DType::kBF16), ptr(DType::kBF16), ptr(DType::kF32),
        ptr(DType::kI32), ptr(DType::kI32), ptr(DType::kI32),
        KernelArg::i32(static_cast<int32_t>(n_out)), KernelArg::i32(static_cast<int32_t>(k_in)),
        KernelArg::i32(static_cast<int32_t>(em)), KernelArg::i32(static_cast<int32_t>(valid)),
        KernelArg::i32(static_cast<int32_t>(k_in)), KernelArg::i32(1),
        KernelArg::i32(static_cast<int32_t>(n_out * k_in)), KernelArg::i32(1),
        KernelArg::i32(static_cast<int32_t>(k_in)), KernelArg::i32(static_cast<int32_t>(n_out)),
        KernelArg::i32(1)};
  };
  // The distinct configs of fixtures/tuned-configs/fused_moe/E=512,N=512,device_name=NVIDIA_H200.json
  // (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages).
  const int table[][6] = {{16, 32, 64, 1, 4, 4},    {16, 128, 64, 1, 4, 4},
                          {16, 128, 64, 1, 4, 3},   {16, 128, 128, 1, 8, 3},
                          {16, 128, 128, 64, 8, 3}, {16, 128, 128, 64, 4, 3},
                          {16, 64, 128, 1, 4, 3},   {16, 256, 128, 1, 8, 2},
                          {32, 128, 64, 1, 4, 3},   {64, 128, 64, 1, 4, 3},
                          {128, 256, 64, 1, 8, 4}};
  for (const auto& t : table) {
    const jit::KernelConfig cfg = jit::make_config({{"BLOCK_SIZE_M", t[0]},
                                                    {"BLOCK_SIZE_N", t[1]},
                                                    {"BLOCK_SIZE_K", t[2]},
                                                    {"GROUP_SIZE_M", t[3]}},
                                                   t[4], t[5]);
    const int64_t M = 64;
    const int64_t sorted = max_num_tokens_padded(M * top_k, E, t[0]);
    add(gemm_kernel(), gemm_constexprs(cfg, false, top_k, false),
        gemm_args(false, gemm_em(false, M * top_k, sorted, M, top_k, t[0]), M * top_k));
  }
  // NemotronH routing (vLLM's grouped_topk, sigmoid): Nano (E 128, top 6, one group), Super
  // (E 512, top 22, one group) and a DeepSeek-V3-like grouped case (E 256, 8 groups, 4 kept).
  const kernels::shapes::MoeExperts nano = kernels::shapes::kNemotronNanoMoe;
  const kernels::shapes::MoeExperts super = kernels::shapes::kNemotronSuperMoeTp8;
  const int64_t routing[][4] = {
      {nano.num_experts, nano.top_k, 1, 1}, {super.num_experts, super.top_k, 1, 1}, {256, 8, 8, 4}};
  for (const auto& r : routing) {
    add(grouped_topk_kernel(),
        grouped_topk_constexprs(r[0], static_cast<int>(r[1]), r[2], r[3], true),
        {ptr(DType::kF32), ptr(DType::kF32), ptr(DType::kF32), ptr(DType::kI32),
         KernelArg::i32(64), KernelArg::i64(r[0]), KernelArg::f32(1.0f)});
  }
  // Nemotron-3 Nano's relu2 experts (E 128, top 6, N 1856, hidden 2688): the non-gated w13 GEMM
  // (N_out = N) for every distinct config of
  // fixtures/tuned-configs/fused_moe/E=128,N=1856,device_name=NVIDIA_H100_80GB_HBM3.json.
  const int nano_table[][6] = {{16, 32, 64, 1, 4, 3},    {16, 32, 64, 1, 4, 4},
                               {16, 32, 256, 1, 4, 5},   {16, 32, 256, 64, 4, 3},
                               {16, 64, 128, 1, 8, 4},   {16, 64, 128, 64, 4, 5},
                               {16, 64, 256, 1, 4, 5},   {16, 128, 128, 1, 8, 5},
                               {32, 32, 128, 1, 4, 5},   {64, 128, 128, 1, 8, 4},
                               {128, 128, 64, 1, 4, 3},  {128, 128, 64, 1, 8, 5},
                               {128, 256, 64, 1, 8, 4}};
  const int64_t nano_e = nano.num_experts;
  const int nano_k = nano.top_k;
  const int64_t nano_n = nano.intermediate;
  const int64_t nano_h = nano.hidden;
  for (const auto& t : nano_table) {
    const jit::KernelConfig cfg = jit::make_config({{"BLOCK_SIZE_M", t[0]},
                                                    {"BLOCK_SIZE_N", t[1]},
                                                    {"BLOCK_SIZE_K", t[2]},
                                                    {"GROUP_SIZE_M", t[3]}},
                                                   t[4], t[5]);
    const int64_t M = 64;
    const int64_t sorted = max_num_tokens_padded(M * nano_k, nano_e, t[0]);
    const int64_t em = gemm_em(false, M * nano_k, sorted, M, nano_k, t[0]);
    add(gemm_kernel(), gemm_constexprs(cfg, false, nano_k, false),
        {ptr(DType::kBF16), ptr(DType::kBF16), ptr(DType::kBF16), ptr(DType::kF32),
         ptr(DType::kI32), ptr(DType::kI32), ptr(DType::kI32),
         KernelArg::i32(static_cast<int32_t>(nano_n)), KernelArg::i32(static_cast<int32_t>(nano_h)),
         KernelArg::i32(static_cast<int32_t>(em)), KernelArg::i32(static_cast<int32_t>(M * nano_k)),
         KernelArg::i32(static_cast<int32_t>(nano_h)), KernelArg::i32(1),
         KernelArg::i32(static_cast<int32_t>(nano_n * nano_h)), KernelArg::i32(1),
         KernelArg::i32(static_cast<int32_t>(nano_h)), KernelArg::i32(static_cast<int32_t>(nano_n)),
         KernelArg::i32(1)});
  }

  const jit::KernelConfig small = default_config(1, E);
  add(gemm_kernel(), gemm_constexprs(small, false, top_k, true),
      gemm_args(false, gemm_em(true, top_k, 0, 1, top_k, 16), top_k));
  const jit::KernelConfig large = default_config(4096, E);
  const int64_t sorted = max_num_tokens_padded(4096 * top_k, E, 64);
  add(gemm_kernel(), gemm_constexprs(large, true, 1, false),
      gemm_args(true, gemm_em(false, 4096 * top_k, sorted, 4096 * top_k, 1, 64),
                4096 * top_k));
  return cases;
}

jit::StemFields table_stem_fields(int64_t E, int64_t N, const std::string& device_name,
                                  const std::string& dtype,
                                  const std::vector<int64_t>& block_shape) {
  jit::StemFields fields = {{"E", std::to_string(E)},
                            {"N", std::to_string(N)},
                            {"device_name", jit::vllm_device_name(device_name)}};
  if (!dtype.empty()) fields.emplace_back("dtype", dtype);
  const bool all_nonzero =
      std::all_of(block_shape.begin(), block_shape.end(), [](int64_t v) { return v != 0; });
  if (!block_shape.empty() && all_nonzero) {
    std::string list = "[";
    for (size_t i = 0; i < block_shape.size(); ++i) {
      list += fmt::format("{}{}", i ? "," : "", block_shape[i]);
    }
    fields.emplace_back("block_shape", list + "]");
  }
  return fields;
}

std::string table_file_name(int64_t E, int64_t N, const std::string& device_name,
                            const std::string& dtype, const std::vector<int64_t>& block_shape) {
  return jit::tuned_file_name(table_stem_fields(E, N, device_name, dtype, block_shape));
}

jit::KernelConfig default_config(int64_t M, int64_t E) {
  if (M <= E) {
    return jit::make_config(
        {{"BLOCK_SIZE_M", 16}, {"BLOCK_SIZE_N", 32}, {"BLOCK_SIZE_K", 64}, {"GROUP_SIZE_M", 1}});
  }
  return jit::make_config(
      {{"BLOCK_SIZE_M", 64}, {"BLOCK_SIZE_N", 64}, {"BLOCK_SIZE_K", 32}, {"GROUP_SIZE_M", 8}});
}

}  // namespace coldstart::fused_moe
