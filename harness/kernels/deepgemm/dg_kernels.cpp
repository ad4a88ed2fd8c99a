// DeepGEMM-style kernels: sources, compile keys, the SM90 / SM100 tile heuristics and the compile
// cases. See dg_kernels.h. The heuristics transcribe deepseek-ai/DeepGEMM at 891d57b:
// csrc/jit_kernels/heuristics/common.hpp (get_best_config: the first candidate no later one
// beats), sm90.hpp (candidates, rejections, stages, get_layout_info cost model, compare) and
// sm100.hpp (candidates, filters, stages, compare).
#include "harness/kernels/deepgemm/dg_kernels.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/kernels/deepgemm/dg_indexer_kernels.h"
#include "harness/kernels/model_shapes.h"
#include "harness/kernels/source_util.h"

// Embedded by cs_add_kernel_family (harness/kernels/CMakeLists.txt).
extern const char* const kSource_dg_common;
extern const char* const kSource_dg_wgmma;
extern const char* const kSource_dg_fp8_gemm;

namespace coldstart::deepgemm {

namespace {



/// get_swizzle_mode (heuristics/utils.hpp): the first of 128, 64, 32, 16 bytes dividing the row.
int swizzle_mode(int64_t elems, int64_t elem_bytes) {
  for (int mode : {128, 64, 32, 16}) {
    if ((elems * elem_bytes) % mode == 0) return mode;
  }
  return 16;
}

void check_shape(const GemmShape& s, int sm, int num_sms) {
  if (sm != 90 && sm != 100) {
    throw jit::UnsupportedArchError(fmt::format(
        "deepgemm: FP8 GEMMs exist for sm_90 and sm_100 (DeepGEMM's SM90 / SM100 kernels), not sm_{}", sm));
  }
  if (num_sms <= 0 || num_sms % 2 != 0) {
    throw InputError(fmt::format("deepgemm: num_sms {} must be positive and even (DeepGEMM asserts it)", num_sms));
  }
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.num_groups <= 0) {
    throw InputError(fmt::format("deepgemm: GEMM M={} N={} K={} groups={} must all be positive", s.m, s.n,
                                 s.k, s.num_groups));
  }
  if (s.k % kFp8BlockK != 0) {
    throw InputError(fmt::format("deepgemm: K={} is not a multiple of {} (the FP8 scale block)", s.k, kFp8BlockK));
  }
  if (s.n % 8 != 0) throw InputError(fmt::format("deepgemm: N={} is not a multiple of 8", s.n));
}

/// num_waves / last_wave_util of heuristics/sm90.hpp and sm100.hpp get_layout_info.
void fill_waves(GemmConfig& c, int64_t num_blocks, int num_sms) {
  c.num_waves = static_cast<int>(ceil_div(num_blocks, num_sms));
  const int64_t rem = num_blocks % num_sms;
  c.last_wave_util = static_cast<int>(rem == 0 ? num_sms : rem);
}

// ---------------------------------------------------------------- SM90

std::vector<GemmConfig> sm90_candidates(const GemmShape& s, int num_sms) {
  std::vector<int> block_ms;
  if (s.type == GemmType::kMGroupedContiguous) {
    block_ms = {kMkAlignmentForContiguousLayout};
  } else {
    block_ms = {64, 128};
    if (s.m <= 16) block_ms.push_back(16);
    if (s.m <= 32) block_ms.push_back(32);
    block_ms.push_back(256);  // the output is bf16, not fp32
  }
  // Kernel1D2D: block_n 16..192 (the end that avoids register spills).
  std::vector<int> block_ns;
  for (int bn = 16; bn <= 192; bn += 16) block_ns.push_back(bn);
  std::vector<std::pair<int, int>> clusters = {{1, 1}};
  if (s.type != GemmType::kBatched) {
    for (int cm = 1; cm <= 2; ++cm) {
      for (int cn = 1; cn <= 2; ++cn) {
        if (cm * cn == 1 || cm * cn > 2 || num_sms % (cm * cn) != 0) continue;
        clusters.emplace_back(cm, cn);  // (1, 2) before (2, 1)
      }
    }
  }
  const int64_t groups = s.type == GemmType::kBatched ? s.num_groups : 1;
  std::vector<GemmConfig> out;
  for (const auto& [cm, cn] : clusters) {
    for (int bm : block_ms) {
      for (int bn : block_ns) {
        const int bk = kFp8BlockK;
        if (bn > bk && bn % (bn - bk) != 0 && bk % (bn - bk) != 0) continue;  // 1D2D scale split
        if (bm > 128 && bn > 128) continue;
        const int64_t smem_cd = align_up(int64_t{bm} * bn * 2, 1024);
        const int64_t smem_barriers = 16 * 8 * 2;
        const int64_t sfb_units = (bk % bn == 0) ? 1 : 2;
        const int64_t extra_sfb = align_up(ceil_div(s.k, bk) * 4 * sfb_units, 8);
        const int64_t extra = smem_cd + smem_barriers + extra_sfb;
        const int64_t per_stage = int64_t{bm} * bk + int64_t{bn} * bk + align_up(int64_t{bm} * 4, 128);
        const int64_t stages = std::min<int64_t>((kSmemCapacity - extra) / per_stage, 16);
        if (stages < 3 || (bm * bn < 128 * 192 && stages < 4)) continue;
        GemmConfig c;
        c.block_m = bm;
        c.block_n = bn;
        c.num_stages = static_cast<int>(stages);
        c.cluster_m = cm;
        c.cluster_n = cn;
        c.num_sms = num_sms;
        c.smem_bytes = static_cast<int>(extra + stages * per_stage);
        c.num_math_threads = bm <= 64 ? 128 : 256;
        c.num_threads = 128 + c.num_math_threads;
        // get_layout_info: modelled cycles of L1 / L2 traffic over the wave efficiency.
        const int64_t num_blocks = ceil_div(s.m, bm) * ceil_div(s.n, bn) * groups;
        fill_waves(c, num_blocks, num_sms);
        const int64_t l2_bw = static_cast<int64_t>(std::min(64.0 * num_sms, 8e6 / 1.3e3));
        const int64_t l1_bw = int64_t{128} * num_sms;
        const int64_t l2_ab = s.k * (bm / cn + bn / cm);
        const int64_t l1_ab = s.k * (bm + bn);
        const int64_t l1_tc = s.k * (std::max(64, bm) + bn) + int64_t{bm} * bn * 2;
        const int64_t cd = int64_t{bm} * bn * 2;
        const int64_t l2_cycles = (l2_ab + cd) * num_blocks / l2_bw;
        const int64_t l1_cycles = (l1_ab + l1_tc + cd) * num_blocks / l1_bw;
        const float wave_eff = static_cast<float>(num_blocks) / static_cast<float>(int64_t{c.num_waves} * num_sms);
        c.num_cycles =
            static_cast<int64_t>(static_cast<float>(std::max(l1_cycles, l2_cycles)) / wave_eff);
        if (cm * cn > 1 && c.num_waves <= 1) c.num_cycles = INT64_MAX;
        out.push_back(c);
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------- SM100

GemmConfig sm100_fill(const GemmShape& s, int num_sms, int bm, int bn, int cm, int cn, bool swap) {
  GemmConfig c;
  c.block_m = bm;
  c.block_n = bn;
  c.cluster_m = cm;
  c.cluster_n = cn;
  c.swap_ab = swap;
  c.num_sms = num_sms;
  const int64_t load_bm = bm / cn;
  const int64_t load_bn = bn / cm;
  const int64_t store_bm = swap ? 16 : std::min(128, bm);
  const int64_t store_bn = bn;
  const int64_t swizzle_cd = swizzle_mode(store_bn, 2);
  const int64_t smem_cd = swap ? store_bm * store_bn * 2 * 2 : store_bm * swizzle_cd * 2;
  const int64_t extra = smem_cd + 808 + 4;  // barriers 32*8*3 + 2*8*2 + 8, tensor-memory pointer
  // sm100_fp8_fp4_gemm_1d1d: the scale factors of both operands travel per stage.
  const int64_t per_stage = load_bm * kFp8BlockK + load_bn * kFp8BlockK + align_up(bm, 128) * 4 +
                            align_up(bn, 128) * 4;
  const int64_t stages = std::min<int64_t>((kSmemCapacity - extra) / per_stage, 32);
  c.num_stages = static_cast<int>(stages);
  c.smem_bytes = static_cast<int>(extra + stages * per_stage);
  c.num_math_threads = 128;
  c.num_threads = 256;
  const int64_t groups = s.type == GemmType::kBatched ? s.num_groups : 1;
  fill_waves(c, ceil_div(s.m, bm) * ceil_div(s.n, bn) * groups, num_sms);
  return c;
}

std::vector<GemmConfig> sm100_candidates(const GemmShape& s, int num_sms) {
  std::vector<GemmConfig> out;
  if (s.type == GemmType::kMGroupedContiguous) {
    const int cn = (ceil_div(s.n, 128) % 2 == 0 && num_sms % 2 == 0) ? 2 : 1;
    out.push_back(sm100_fill(s, num_sms, kMkAlignmentForContiguousLayout, 128, 1, cn, true));
    return out;
  }
  for (int swap = 0; swap <= 1; ++swap) {
    std::vector<int> block_ms, block_ns;
    if (swap) {
      for (int bm = 16; bm <= 256; bm += 16) block_ms.push_back(bm);
      block_ns = {128};
    } else {
      block_ms = {s.m <= 32 ? 32 : (s.m <= 64 ? 64 : 128)};
      block_ns = {16};
      const int end = s.k <= 256 ? 128 : 256;
      for (int bn = 32; bn <= end; bn += 32) block_ns.push_back(bn);
    }
    for (int cm = 1; cm <= 2; ++cm) {
      for (int cn = 1; cn <= 2; ++cn) {
        if (cm * cn > 2 || num_sms % (cm * cn) != 0) continue;
        if (swap ? cm != 1 : cn != 1) continue;  // swap: only cluster_n; no swap: only cluster_m
        for (int bm : block_ms) {
          for (int bn : block_ns) {
            if ((bm / cn) % 8 != 0 || (bn / cm) % 8 != 0) continue;  // K-major TMA rows
            if (ceil_div(s.m, bm) % cm != 0 || ceil_div(s.n, bn) % cn != 0) continue;
            if (swap && bn != 128) continue;
            const int umma_n = swap ? bm : bn;
            const int sf_cols = static_cast<int>(align_up(bm, 128) / 32 + align_up(bn, 128) / 32);
            if (2 * umma_n + sf_cols > 512) continue;  // tensor memory columns
            out.push_back(sm100_fill(s, num_sms, bm, bn, cm, cn, swap != 0));
          }
        }
      }
    }
  }
  return out;
}

/// heuristics/sm100.hpp compare: true when `a` is strictly better than `b`.
bool sm100_better(const GemmConfig& a, const GemmConfig& b) {
  const bool a1 = a.num_waves == 1, b1 = b.num_waves == 1;
  if (a1 != b1) return a1;
  if (a.cluster_size() != b.cluster_size()) return a.cluster_size() > b.cluster_size();
  if (a.num_waves != b.num_waves) return a.num_waves < b.num_waves;
  if (a.last_wave_util != b.last_wave_util) return a.last_wave_util > b.last_wave_util;
  if (a.block_m + a.block_n != b.block_m + b.block_n) return a.block_m + a.block_n < b.block_m + b.block_n;
  return a.block_m * a.block_n < b.block_m * b.block_n;
}

const jit::KernelSource& gemm_source(const char* name) {
  // One program text for the three API names (the entry is the same symbol).
  static const std::string text = std::string(kernels::device_common_source()) + "\n" +
                                  kSource_dg_common + "\n" + kSource_dg_wgmma +
                                  "\n#line 1 \"dg_fp8_gemm.cu\"\n" + kSource_dg_fp8_gemm;
  auto* k = new jit::KernelSource;  // one per name, alive for the process (function-local statics)
  k->name = name;
  k->entry = "dg_fp8_gemm";
  k->source = text.c_str();
  k->arg_names = kernels::kernel_param_names(kSource_dg_fp8_gemm, "dg_fp8_gemm");
  k->arg_types = kernels::kernel_param_types(kSource_dg_fp8_gemm, "dg_fp8_gemm");
  // M is not compiled in (DeepGEMM's compiled dims "nk"); output strides are runtime values.
  k->do_not_specialize = {"m", "ldo", "gso"};
  k->min_sm = 90;
  k->arch_specific = true;  // wgmma / TMA: sm_90a, sm_100a
  return *k;
}

}  // namespace

const char* gemm_type_name(GemmType t) {
  switch (t) {
    case GemmType::kNormal: return "normal";
    case GemmType::kMGroupedContiguous: return "m_grouped_contiguous";
    case GemmType::kBatched: return "batched";
  }
  return "?";
}

std::string GemmConfig::name() const {
  std::string s = fmt::format("{}x{}x{} s{}", block_m, block_n, block_k, num_stages);
  if (cluster_size() > 1) s += fmt::format(" c{}({})", cluster_size(), multicast_on_a() ? "A" : "B");
  if (swap_ab) s += " swap";
  return s;
}

std::vector<GemmConfig> fp8_gemm_candidates(const GemmShape& shape, int sm, int num_sms) {
  check_shape(shape, sm, num_sms);
  return sm == 90 ? sm90_candidates(shape, num_sms) : sm100_candidates(shape, num_sms);
}

GemmConfig select_fp8_gemm_config(const GemmShape& shape, int sm, int num_sms) {
  const std::vector<GemmConfig> cands = fp8_gemm_candidates(shape, sm, num_sms);
  return cands[best_fp8_gemm_candidate(cands, shape, sm)];
}

size_t best_fp8_gemm_candidate(const std::vector<GemmConfig>& cands, const GemmShape& shape, int sm) {
  if (cands.empty()) {
    throw InputError(fmt::format("deepgemm: no {} FP8 GEMM config fits M={} N={} K={} on sm_{}",
                                 gemm_type_name(shape.type), shape.m, shape.n, shape.k, sm));
  }
  size_t best = 0;
  for (size_t i = 1; i < cands.size(); ++i) {
    const bool better = sm == 90 ? cands[i].num_cycles < cands[best].num_cycles
                                 : sm100_better(cands[i], cands[best]);
    if (better) best = i;
  }
  return best;
}

std::vector<int64_t> dense_warmup_m_values(int64_t max_tokens) {
  std::vector<int64_t> out;
  if (max_tokens < 1) return out;
  const int64_t dense = std::min<int64_t>(max_tokens, 2048);
  for (int64_t m = 1; m <= dense; ++m) out.push_back(m);
  for (int64_t m = dense + 16; m <= max_tokens; m += 16) out.push_back(m);  // range(dense, max+1, 16)
  if (out.back() != max_tokens) out.push_back(max_tokens);
  return out;
}

std::vector<CoverageGap> warmup_coverage_gaps(const GemmShape& shape, int sm, int num_sms, int64_t max_tokens,
                                              const std::vector<int64_t>& sampled) {
  auto identity = [](const GemmConfig& c) {
    return fmt::format("{}x{} s{} c{}x{} swap{}", c.block_m, c.block_n, c.num_stages, c.cluster_m, c.cluster_n,
                       c.swap_ab ? 1 : 0);
  };
  GemmShape s = shape;
  std::vector<std::string> warmed;
  for (int64_t m : sampled) {
    if (m < 1 || m > max_tokens) continue;
    s.m = m;
    warmed.push_back(identity(select_fp8_gemm_config(s, sm, num_sms)));
  }
  std::sort(warmed.begin(), warmed.end());
  std::vector<CoverageGap> gaps;
  std::vector<std::string> gap_ids;
  for (int64_t m = 1; m <= max_tokens; ++m) {
    s.m = m;
    const GemmConfig c = select_fp8_gemm_config(s, sm, num_sms);
    const std::string id = identity(c);
    if (std::binary_search(warmed.begin(), warmed.end(), id)) continue;
    const auto it = std::find(gap_ids.begin(), gap_ids.end(), id);
    if (it == gap_ids.end()) {
      gap_ids.push_back(id);
      gaps.push_back({c, m, 1});
    } else {
      ++gaps[static_cast<size_t>(it - gap_ids.begin())].num_m;
    }
  }
  return gaps;
}

std::string gemm_tuning_key(const GemmShape& shape, const GemmConfig& config) {
  return fmt::format("M={} N={} K={} G={} -> {}x{}{}", shape.m, shape.n, shape.k, shape.num_groups,
                     config.block_m, config.block_n, config.cluster_size() > 1 ? " c2" : "");
}

const jit::KernelSource& fp8_gemm_nt_kernel() {
  static const jit::KernelSource& k = gemm_source("fp8_gemm_nt");
  return k;
}
const jit::KernelSource& m_grouped_fp8_gemm_contiguous_kernel() {
  static const jit::KernelSource& k = gemm_source("m_grouped_fp8_gemm_nt_contiguous");
  return k;
}
const jit::KernelSource& fp8_einsum_kernel() {
  static const jit::KernelSource& k = gemm_source("fp8_einsum_bhr_hdr_bhd");
  return k;
}
const jit::KernelSource& fp8_gemm_kernel(GemmType t) {
  switch (t) {
    case GemmType::kMGroupedContiguous: return m_grouped_fp8_gemm_contiguous_kernel();
    case GemmType::kBatched: return fp8_einsum_kernel();
    case GemmType::kNormal: break;
  }
  return fp8_gemm_nt_kernel();
}

std::vector<jit::Constexpr> fp8_gemm_constexprs(const GemmShape& shape, const GemmConfig& c, bool mma_sync) {
  return {{"SHAPE_N", shape.n},
          {"SHAPE_K", shape.k},
          {"NUM_GROUPS", shape.num_groups},
          {"BLOCK_M", c.block_m},
          {"BLOCK_N", c.block_n},
          {"BLOCK_K", c.block_k},
          {"NUM_STAGES", c.num_stages},
          {"NUM_MULTICAST", c.cluster_size()},
          {"IS_MULTICAST_ON_A", c.multicast_on_a() ? 1 : 0},
          {"NUM_SMS", c.num_sms},
          {"GEMM_TYPE", static_cast<int>(shape.type)},
          {"SWAP_AB", c.swap_ab ? 1 : 0},
          {"MMA_SYNC", mma_sync ? 1 : 0}};
}

int fp8_gemm_threads(const GemmConfig& c) { return 128 * ((c.block_m <= 64 ? 1 : 2) + 1); }

int fp8_gemm_smem_bytes(const GemmConfig& c) {
  const int64_t per_stage = int64_t{c.block_m} * 128 + int64_t{c.block_n} * 128 + align_up(int64_t{c.block_m} * 4, 128);
  return static_cast<int>(c.num_stages * per_stage + 2 * c.num_stages * 8 + 1024);
}

std::vector<const jit::KernelSource*> all_kernels() {
  std::vector<const jit::KernelSource*> out = {&fp8_gemm_nt_kernel(), &m_grouped_fp8_gemm_contiguous_kernel(),
                                               &fp8_einsum_kernel()};
  for (const jit::KernelSource* k : indexer_kernels()) out.push_back(k);  // dg_indexer_kernels.h
  return out;
}

std::vector<KernelCompileCase> compile_cases() {
  using jit::DType;
  using jit::KernelArg;
  std::vector<KernelCompileCase> cases;
  const uint64_t base = 1u << 20;
  auto tmap = [&](DType t, uint32_t rank, std::vector<uint64_t> dims, std::vector<uint32_t> box, uint32_t swz) {
    jit::TensorMapSpec m;
    m.dtype = t;
    m.address = base;
    m.rank = rank;
    uint64_t stride = dims[0] * jit::dtype_bytes(t);
    for (uint32_t i = 0; i < rank; ++i) {
      m.dims[i] = dims[i];
      m.box[i] = box[i];
      if (i + 1 < rank) {
        m.strides[i] = align_up(stride, 16);
        stride = m.strides[i] * dims[i + 1];
      }
    }
    m.swizzle = swz;
    return KernelArg::tmap(m, "compile case");
  };
  // DeepSeek V4-Flash shapes (hf-configs/deepseek-v4-flash.json): fused wq_a+wkv (1536, 4096) at
  // decode and prefill M, wo_a's batched einsum (8 groups of (1024, 4096)), the experts' w13
  // (4096, 4096) grouped; each with what the H200 (132 SMs) heuristic picks.
  const kernels::shapes::LinearShape wqa_wkv = kernels::shapes::kDeepSeekV4FlashLinears[0];
  const kernels::shapes::LinearShape wo_b = kernels::shapes::kDeepSeekV4FlashLinears[2];
  const GemmShape shapes[] = {{GemmType::kNormal, 1, wqa_wkv.n, wqa_wkv.k, 1},
                              {GemmType::kNormal, 300, wqa_wkv.n, wqa_wkv.k, 1},
                              {GemmType::kNormal, 4096, wo_b.n, wo_b.k, 1},
                              {GemmType::kBatched, 300, 1024, 4096, 8},
                              {GemmType::kMGroupedContiguous, 2048, 4096, 4096, 16}};
  for (const GemmShape& s : shapes) {
    const GemmConfig c = select_fp8_gemm_config(s, 90, 132);
    const uint32_t groups = s.type == GemmType::kBatched ? s.num_groups : 1;
    std::vector<KernelArg> args = {
        s.type == GemmType::kBatched ? tmap(DType::kF8E4M3, 3, {uint64_t(s.k), uint64_t(s.m), groups},
                                            {128, uint32_t(c.block_m), 1}, 128)
                                     : tmap(DType::kF8E4M3, 2, {uint64_t(s.k), uint64_t(s.m)}, {128, uint32_t(c.block_m)}, 128),
        tmap(DType::kF8E4M3, 2, {uint64_t(s.k), uint64_t(s.n) * s.num_groups}, {128, uint32_t(c.block_n)}, 128),
        s.type == GemmType::kBatched
            ? tmap(DType::kF32, 3, {uint64_t(align_up(s.m, 4)), uint64_t(s.k / 128), groups}, {uint32_t(c.block_m), 1, 1}, 0)
            : tmap(DType::kF32, 2, {uint64_t(align_up(s.m, 4)), uint64_t(s.k / 128)}, {uint32_t(c.block_m), 1}, 0),
        KernelArg::pointer(base, DType::kF32),
        KernelArg::pointer(base, DType::kI32),
        KernelArg::pointer(base, DType::kBF16),
        KernelArg::i32(static_cast<int32_t>(s.m)),
        KernelArg::i64(s.n * groups),
        KernelArg::i64(s.n)};
    cases.push_back(kernels::make_compile_case(kFamily, fp8_gemm_kernel(s.type), fp8_gemm_constexprs(s, c), args));
  }
  for (KernelCompileCase& c : indexer_compile_cases()) cases.push_back(std::move(c));  // dg_indexer_kernels.h
  return cases;
}

}  // namespace coldstart::deepgemm
