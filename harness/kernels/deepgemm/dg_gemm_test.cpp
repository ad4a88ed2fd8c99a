// DeepGEMM-style FP8 GEMMs: the tile heuristics (CPU), compile keys and validation in compile-only
// mode (CPU), and the kernels against a float64 libtorch reference on random FP8 inputs with
// poisoned outputs (GPU, sm_90+), on both MMA paths.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>

#include "harness/jit/compiled_kernel.h"
#include "harness/jit/driver.h"
#include "harness/kernels/deepgemm/deepgemm.h"
#include "harness/kernels/deepgemm/dg_reference.h"
#include "harness/kernels/model_shapes.h"
#include "harness/kernels/test_util.h"

namespace coldstart::deepgemm {
namespace {

using kernels::test::compile_only_options;
using kernels::test::cuda;
using kernels::test::gpu_runtime;

// ---------------------------------------------------------------- heuristics

struct Pick {
  int bm, bn, cm, cn, stages;
};

Pick pick90(int64_t m, int64_t n, int64_t k, GemmType t = GemmType::kNormal, int groups = 1) {
  const GemmConfig c = select_fp8_gemm_config({t, m, n, k, groups}, 90, 132);
  return {c.block_m, c.block_n, c.cluster_m, c.cluster_n, c.num_stages};
}

// Vectors from an independent transcription of heuristics/sm90.hpp at 891d57b (not measured on
// DeepGEMM itself): the two readings must agree.
TEST(DeepGemmHeuristic, Sm90MatchesAnIndependentTranscription) {
  Pick p = pick90(128, 7168, 2048);
  EXPECT_EQ((std::vector<int>{p.bm, p.bn, p.cm, p.cn, p.stages}), (std::vector<int>{64, 112, 1, 1, 9}));
  p = pick90(4096, 7168, 2048);
  EXPECT_EQ((std::vector<int>{p.bm, p.bn, p.cm, p.cn, p.stages}), (std::vector<int>{256, 128, 1, 2, 3}));
  p = pick90(1, 4096, 7168);
  EXPECT_EQ((std::vector<int>{p.bm, p.bn, p.cm, p.cn, p.stages}), (std::vector<int>{16, 32, 1, 1, 16}));
}

TEST(DeepGemmHeuristic, Sm90StagesAndSharedMemoryFormula) {
  // bm = bn = 128, K = 7168: extra = 32768 (D tile) + 256 (barriers) + 224 (B scales) and 33280
  // bytes per stage -> 5 stages, 199648 bytes.
  for (const GemmConfig& c : fp8_gemm_candidates({GemmType::kNormal, 4096, 4096, 7168, 1}, 90, 132)) {
    if (c.block_m == 128 && c.block_n == 128 && c.cluster_size() == 1) {
      EXPECT_EQ(c.num_stages, 5);
      EXPECT_EQ(c.smem_bytes, 199648);
      EXPECT_LE(fp8_gemm_smem_bytes(c), kSmemCapacity);
      return;
    }
  }
  FAIL() << "128x128 is not a candidate";
}

TEST(DeepGemmHeuristic, Sm90CandidateRules) {
  std::set<int> bms_small, bms_large;
  for (const GemmConfig& c : fp8_gemm_candidates({GemmType::kNormal, 16, 4096, 4096, 1}, 90, 132)) {
    bms_small.insert(c.block_m);
    EXPECT_NE(c.block_n, 176);                            // the 1D2D scale split rejects it
    EXPECT_FALSE(c.block_m > 128 && c.block_n > 128);
    EXPECT_LE(c.block_n, 192);
    EXPECT_GE(c.num_stages, 3);
    EXPECT_LE(fp8_gemm_smem_bytes(c), kSmemCapacity);
  }
  for (const GemmConfig& c : fp8_gemm_candidates({GemmType::kNormal, 33, 4096, 4096, 1}, 90, 132)) {
    bms_large.insert(c.block_m);
  }
  EXPECT_EQ(bms_small, (std::set<int>{16, 32, 64, 128, 256}));
  EXPECT_EQ(bms_large, (std::set<int>{64, 128, 256}));
  // Batched GEMMs never multicast; m-grouped ones use the 128-row alignment as block_m.
  for (const GemmConfig& c : fp8_gemm_candidates({GemmType::kBatched, 4096, 1024, 4096, 8}, 90, 132)) {
    EXPECT_EQ(c.cluster_size(), 1);
  }
  for (const GemmConfig& c : fp8_gemm_candidates({GemmType::kMGroupedContiguous, 4096, 4096, 4096, 8}, 90, 132)) {
    EXPECT_EQ(c.block_m, 128);
  }
  // A cluster never wins with a single wave.
  const GemmConfig one_wave = select_fp8_gemm_config({GemmType::kNormal, 64, 1024, 4096, 1}, 90, 132);
  EXPECT_EQ(one_wave.cluster_size(), 1);
}

TEST(DeepGemmHeuristic, Sm100RulesAndComparator) {
  const GemmConfig g = select_fp8_gemm_config({GemmType::kMGroupedContiguous, 4096, 4096, 4096, 8}, 100, 148);
  EXPECT_TRUE(g.swap_ab);
  EXPECT_EQ(g.block_n, 128);
  EXPECT_EQ(g.block_m, 128);
  EXPECT_EQ(g.cluster_n, 2);  // ceil(4096 / 128) = 32 blocks along N is even
  const auto cands = fp8_gemm_candidates({GemmType::kNormal, 300, 1536, 4096, 1}, 100, 148);
  ASSERT_FALSE(cands.empty());
  bool saw_swap = false, saw_plain = false;
  for (const GemmConfig& c : cands) {
    (c.swap_ab ? saw_swap : saw_plain) = true;
    if (c.swap_ab) EXPECT_EQ(c.block_n, 128);
    if (!c.swap_ab) EXPECT_EQ(c.block_m, 128);  // m = 300 > 64
  }
  EXPECT_TRUE(saw_swap && saw_plain);
  const GemmConfig best = select_fp8_gemm_config({GemmType::kNormal, 300, 1536, 4096, 1}, 100, 148);
  for (const GemmConfig& c : cands) {
    // Nothing beats the pick on the first rule: it is in a single wave if any candidate is.
    if (c.num_waves == 1) EXPECT_EQ(best.num_waves, 1) << c.name();
  }
}

TEST(DeepGemmHeuristic, RefusesWhatDeepGemmRefuses) {
  EXPECT_THROW(select_fp8_gemm_config({GemmType::kNormal, 8, 1536, 4096, 1}, 86, 48), jit::UnsupportedArchError);
  EXPECT_THROW(select_fp8_gemm_config({GemmType::kNormal, 8, 1536, 4096, 1}, 90, 131), InputError);
  EXPECT_THROW(select_fp8_gemm_config({GemmType::kNormal, 8, 1536, 4000, 1}, 90, 132), InputError);
  EXPECT_THROW(select_fp8_gemm_config({GemmType::kNormal, 0, 1536, 4096, 1}, 90, 132), InputError);
}

TEST(DeepGemmCoverage, SeedSamplingIsDenseTo2048ThenEvery16th) {
  const std::vector<int64_t> v = dense_warmup_m_values(8192);
  ASSERT_EQ(v.size(), 2048u + (8192 - 2048) / 16);
  EXPECT_EQ(v[2047], 2048);
  EXPECT_EQ(v[2048], 2064);
  EXPECT_EQ(v.back(), 8192);
  EXPECT_EQ(dense_warmup_m_values(100).size(), 100u);
  EXPECT_EQ(dense_warmup_m_values(2050).back(), 2050);  // the maximum is always added
}

// The seed's claim that dense sampling "provably covers every reachable config", checked against
// the heuristic for DeepSeek V4-Flash's FP8 linears on the H200 and the B200. Every gap found is
// verified independently: its first M selects it and is not sampled; the M before it selects
// something else.
TEST(DeepGemmCoverage, GapsOfTheSeedSamplingAreRealAndListed) {
  const int64_t max_tokens = 8192;
  const std::vector<int64_t> sampled = dense_warmup_m_values(max_tokens);
  // The served linears (model_shapes.h), then other V4 shapes the replay reaches.
  std::vector<GemmShape> shapes;
  for (const kernels::shapes::LinearShape& l : kernels::shapes::kDeepSeekV4FlashLinears) {
    shapes.push_back({GemmType::kNormal, 0, l.n, l.k, 1});
  }
  shapes.push_back({GemmType::kNormal, 0, 8192, 1024, 1});
  shapes.push_back({GemmType::kNormal, 0, 4096, 2048, 1});
  shapes.push_back({GemmType::kBatched, 0, 1024, 4096, 8});
  size_t total = 0;
  for (const auto& [sm, sms] : {std::pair<int, int>{90, 132}, {100, 148}}) {
    for (const GemmShape& shape : shapes) {
      const auto gaps = warmup_coverage_gaps(shape, sm, sms, max_tokens, sampled);
      for (const CoverageGap& g : gaps) {
        ++total;
        std::printf("sm_%d %s N=%lld K=%lld: %s first at M=%lld (%lld M values) not warmed\n", sm,
                    gemm_type_name(shape.type), static_cast<long long>(shape.n), static_cast<long long>(shape.k),
                    g.config.name().c_str(), static_cast<long long>(g.first_m), static_cast<long long>(g.num_m));
        EXPECT_FALSE(std::binary_search(sampled.begin(), sampled.end(), g.first_m));
        EXPECT_GT(g.first_m, 2048) << "below 2048 every M is sampled";
        GemmShape s = shape;
        s.m = g.first_m;
        EXPECT_EQ(select_fp8_gemm_config(s, sm, sms).name(), g.config.name());
      }
    }
  }
  std::printf("%zu reachable configs the seed's sampling does not compile\n", total);
  // A decode-only warmup (the capture sizes 1, 2, 4, 8..512 step 8) leaves prefill tiles out:
  // the detector must see them, and M = 300 (TokenSpeed PR #398's first prompt) must be among
  // the M that reach an unwarmed config for the fused wq_a+wkv shape.
  std::vector<int64_t> decode = {1, 2, 4};
  for (int64_t m = 8; m <= 512; m += 8) decode.push_back(m);
  for (const auto& [sm, sms] : {std::pair<int, int>{90, 132}, {100, 148}}) {
    const auto gaps = warmup_coverage_gaps(shapes[0], sm, sms, max_tokens, decode);
    EXPECT_FALSE(gaps.empty());
    GemmShape s = shapes[0];
    s.m = 300;
    const std::string at300 = select_fp8_gemm_config(s, sm, sms).name();
    const bool listed = std::any_of(gaps.begin(), gaps.end(), [&](const CoverageGap& g) { return g.config.name() == at300; });
    bool warmed = false;
    for (int64_t m : decode) {
      s.m = m;
      warmed |= select_fp8_gemm_config(s, sm, sms).name() == at300;
    }
    EXPECT_EQ(listed, !warmed) << "sm_" << sm << " M=300 picks " << at300;
    std::printf("sm_%d decode-only sampling: %zu configs of N=1536 K=4096 left out; M=300 picks %s (%s)\n", sm,
                gaps.size(), at300.c_str(), warmed ? "warmed" : "not warmed");
  }
  // Sampling every M leaves nothing out, by construction.
  std::vector<int64_t> every(max_tokens);
  for (int64_t m = 1; m <= max_tokens; ++m) every[m - 1] = m;
  EXPECT_TRUE(warmup_coverage_gaps(shapes[0], 90, 132, max_tokens, every).empty());
}

// ---------------------------------------------------------------- weights

// random_fp8_weight draws bytes in place and converts them slab by slab (64 MiB): the bytes must
// be e4m3 of exponent field 4..7 with both signs, every magnitude reached, across a slab border.
TEST(DeepGemmWeights, RandomFp8WeightIsE4m3OfMagnitudeEighthToTwoOnBothSides) {
  at::manual_seed(7);
  const int64_t row = (int64_t{32} << 20) + 257;  // two rows span the 64 MiB slab border
  const at::Tensor w = random_fp8_weight({2, row}, at::TensorOptions().device(at::kCPU));
  ASSERT_EQ(w.scalar_type(), at::kByte);
  ASSERT_EQ(w.sizes().vec(), (std::vector<int64_t>{2, row}));
  const at::Tensor mag = w.bitwise_and(0x7f);
  EXPECT_GE(mag.min().item<int>(), 0x20);
  EXPECT_LT(mag.max().item<int>(), 0x40);
  // Every one of the 32 magnitudes and both signs appear, in the last slab too.
  const at::Tensor tail = w.view({-1}).narrow(0, 2 * row - 4096, 4096).to(at::kInt);
  EXPECT_EQ(std::get<0>(at::_unique(tail.bitwise_and(0x7f))).numel(), 32);
  EXPECT_EQ(std::get<0>(at::_unique(tail.bitwise_and(0x80))).numel(), 2);
  const double negative =
      tail.bitwise_and(0x80).gt(0).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(negative, 0.5, 0.05);
  const at::Tensor m = random_fp8_weight({3, 5}, at::TensorOptions().device(at::kMeta));
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.sizes().vec(), (std::vector<int64_t>{3, 5}));
}

// ---------------------------------------------------------------- compile-only

at::TensorOptions meta(at::ScalarType t) { return at::TensorOptions().dtype(t).device(at::kMeta); }

TEST(DeepGemmCompileOnly, KeyHoldsNAndKButNotM) {
  CS_REQUIRE_NVRTC_TARGET("sm_90a");
  jit::JitRuntime rt([] {
    jit::JitOptions o = compile_only_options();
    o.arch = "sm_90a";
    return o;
  }());
  const int64_t n = 1536, k = 4096;
  auto run = [&](int64_t m) {
    const at::Tensor a = at::empty({m, k}, meta(at::kByte)), b = at::empty({n, k}, meta(at::kByte));
    const at::Tensor sfa = at::empty({k / 128, (m + 3) / 4 * 4}, meta(at::kFloat));
    const at::Tensor sfb = at::empty({n / 128, k / 128}, meta(at::kFloat));
    const at::Tensor d = at::empty({m, n}, meta(at::kBFloat16));
    return fp8_gemm_nt(rt, {90, 132}, a, sfa, b, sfb, d);
  };
  const jit::Selection s300 = run(300), s301 = run(301);
  EXPECT_EQ(s300.selector, "heuristic");
  EXPECT_EQ(s300.config.name, s301.config.name);
  EXPECT_EQ(rt.cached_kernels(), 1u) << "M = 300 and 301 pick the same tile: one kernel";
  run(1);  // a decode batch picks a 16-row tile: a new kernel
  EXPECT_EQ(rt.cached_kernels(), 2u);
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].kernel, "fp8_gemm_nt");
  EXPECT_EQ(recs[0].selector, "heuristic");
  EXPECT_NE(recs[0].key.find("SHAPE_N=1536,SHAPE_K=4096"), std::string::npos) << recs[0].key;
  EXPECT_EQ(recs[0].key.find("300"), std::string::npos) << "M is compiled in: " << recs[0].key;
  EXPECT_NE(recs[0].key.find("tmap,tmap,tmap"), std::string::npos) << recs[0].key;
  EXPECT_NE(recs[0].tuning_key.find("M=300"), std::string::npos) << recs[0].tuning_key;
  EXPECT_GT(recs[0].num_candidates, 10);
}

TEST(DeepGemmCompileOnly, ValidationNamesTheArgument) {
  jit::JitRuntime rt(compile_only_options());
  const at::Tensor a = at::empty({64, 4096}, meta(at::kByte)), b = at::empty({1536, 4096}, meta(at::kByte));
  const at::Tensor sfa = at::empty({32, 64}, meta(at::kFloat)), sfb = at::empty({12, 32}, meta(at::kFloat));
  const at::Tensor d = at::empty({64, 1536}, meta(at::kBFloat16));
  EXPECT_MENTIONS(fp8_gemm_nt(rt, {90, 132}, a, sfa.narrow(1, 0, 62), b, sfb, d), "argument 'sfa'");
  EXPECT_MENTIONS(fp8_gemm_nt(rt, {90, 132}, a, sfa, b, sfb.narrow(0, 0, 11), d), "argument 'sfb'");
  EXPECT_MENTIONS(fp8_gemm_nt(rt, {90, 132}, a.narrow(1, 0, 4000), sfa, b, sfb, d), "multiple of 128");
  EXPECT_MENTIONS(fp8_gemm_nt(rt, {90, 132}, a, sfa, b, sfb, d.to(at::kFloat)), "argument 'd'");
  // A row stride that is not a multiple of 16 bytes cannot be a TMA tensor map.
  const at::Tensor a_odd = at::empty({64, 4104}, meta(at::kByte)).narrow(1, 0, 4096);
  EXPECT_MENTIONS(fp8_gemm_nt(rt, {90, 132}, a_odd, sfa, b, sfb, d), "stride of dim 1");
}

// ---------------------------------------------------------------- GPU

struct GemmInputs {
  at::Tensor a, sfa_rows, b, sfb;  // CPU
};

GemmInputs random_inputs(int64_t m, int64_t n, int64_t k, uint64_t seed, int64_t groups = 1) {
  GemmInputs in;
  in.a = reference::random_e4m3({m, k}, seed);
  in.b = reference::random_e4m3({groups * n, k}, seed + 1);
  at::manual_seed(seed);
  in.sfa_rows = at::rand({m, k / 128}, at::kFloat) * 1.5 + 0.25;
  in.sfb = at::rand({groups, (n + 127) / 128, k / 128}, at::kFloat) * 1.5 + 0.25;
  return in;
}

/// Fails with the worst element unless |got - want| <= 1e-2 |want| + 1e-3 max|want| everywhere.
void expect_close(const at::Tensor& got_bf16, const at::Tensor& want, const std::string& what) {
  const at::Tensor got = got_bf16.to(at::kDouble).cpu();
  const at::Tensor ref = want.cpu();
  ASSERT_FALSE(at::isnan(got).any().item<bool>()) << what << ": NaN (an unwritten poisoned element?)";
  const double scale = ref.abs().max().item<double>();
  const at::Tensor err = (got - ref).abs() - (ref.abs() * 1e-2 + 1e-3 * scale);
  const double worst = err.max().item<double>();
  if (worst > 0) {
    const int64_t idx = err.argmax().item<int64_t>();
    FAIL() << what << ": element " << idx << " got " << got.reshape(-1)[idx].item<double>() << " want "
           << ref.reshape(-1)[idx].item<double>();
  }
}

at::Tensor poisoned_bf16(int64_t rows, int64_t cols) {
  return at::full({rows, cols}, std::nan(""), cuda(at::kBFloat16));
}

struct GemmCase {
  int64_t m, n, k;
  bool mma_sync;
};

std::string gemm_name(const testing::TestParamInfo<GemmCase>& i) {
  return "M" + std::to_string(i.param.m) + "_N" + std::to_string(i.param.n) + "_K" +
         std::to_string(i.param.k) + (i.param.mma_sync ? "_mma_sync" : "_wgmma");
}
void PrintTo(const GemmCase& c, std::ostream* os) { *os << gemm_name({c, 0}); }

/// The GPU's compute capability family (90 / 100) and SM count.
GemmTarget gpu_target() {
  int sms = 0;
  CUdevice dev = 0;
  CS_CU_CHECK(jit::driver().cuDeviceGet(&dev, 0));
  CS_CU_CHECK(jit::driver().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  return {jit::arch_sm(gpu_runtime().arch()) >= 100 ? 100 : 90, sms};
}

class DeepGemmGpu : public testing::TestWithParam<GemmCase> {};

TEST_P(DeepGemmGpu, Fp8GemmNtMatchesReference) {
  CS_REQUIRE_GPU();
  jit::JitRuntime& rt = gpu_runtime();
  if (jit::arch_sm(rt.arch()) < 90) GTEST_SKIP() << "FP8 WGMMA / TMA need sm_90+, this GPU is " << rt.arch();
  const GemmCase& c = GetParam();
  const GemmInputs in = random_inputs(c.m, c.n, c.k, 1000 + c.m + c.n);
  const at::Tensor sfb = in.sfb.squeeze(0).contiguous();
  at::Tensor d = poisoned_bf16(c.m, c.n);
  const at::Tensor sfa = mn_major_scales(in.sfa_rows.to(at::kCUDA));
  const GemmTarget target = gpu_target();
  const jit::Selection sel = fp8_gemm_nt(rt, target, in.a.to(at::kCUDA), sfa, in.b.to(at::kCUDA),
                                         sfb.to(at::kCUDA), d, GemmOptions{c.mma_sync});
  expect_close(d, reference::fp8_gemm(in.a, in.sfa_rows, in.b, sfb),
               "M=" + std::to_string(c.m) + " config " + sel.config.name);
}

// M values that reach distinct tiles of the SM90 heuristic (16-, 32-, 64-, 128- and 256-row
// blocks, clusters), N not a multiple of the tile, and K of one and many blocks.
INSTANTIATE_TEST_SUITE_P(
    Shapes, DeepGemmGpu,
    testing::Values(GemmCase{1, 1536, 4096, false}, GemmCase{16, 1536, 4096, false},
                    GemmCase{33, 1536, 4096, false}, GemmCase{300, 1536, 4096, false},
                    GemmCase{1000, 4096, 1024, false}, GemmCase{2049, 4096, 2048, false},
                    GemmCase{4096, 1024, 512, false}, GemmCase{77, 1000, 128, false},
                    GemmCase{1, 1536, 4096, true}, GemmCase{300, 1536, 4096, true},
                    GemmCase{2049, 4096, 2048, true}, GemmCase{77, 1000, 128, true}),
    gemm_name);

// Every DeepSeek V4 linear the replay runs (model_shapes.h), at a decode-batch M.
std::vector<GemmCase> served_linears() {
  std::vector<GemmCase> out;
  for (const kernels::shapes::LinearShape& l : kernels::shapes::kDeepSeekV4FlashLinears) {
    out.push_back(GemmCase{33, l.n, l.k, false});
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(ServedLinears, DeepGemmGpu, testing::ValuesIn(served_linears()), gemm_name);

TEST(DeepGemmTileCoverage, TheShapesReachDistinctTiles) {
  std::set<std::string> names;
  for (int64_t m : {1, 16, 33, 300}) names.insert(select_fp8_gemm_config({GemmType::kNormal, m, 1536, 4096, 1}, 90, 132).name());
  names.insert(select_fp8_gemm_config({GemmType::kNormal, 1000, 4096, 1024, 1}, 90, 132).name());
  names.insert(select_fp8_gemm_config({GemmType::kNormal, 2049, 4096, 2048, 1}, 90, 132).name());
  names.insert(select_fp8_gemm_config({GemmType::kNormal, 4096, 1024, 512, 1}, 90, 132).name());
  EXPECT_GE(names.size(), 5u);
  bool cluster = false;
  for (const auto& n : names) cluster |= n.find(" c2") != std::string::npos;
  EXPECT_TRUE(cluster) << "no shape reaches a 2-block cluster";
}

// The kernels that move registers between warpgroups (setmaxnreg) rely on the compiler having
// allocated the full 168 per thread of a 384-thread block; a smaller allocation would hang.
TEST(DeepGemmGpuRegisters, SetmaxnregKernelsHoldTheFullAllocation) {
  CS_REQUIRE_GPU();
  jit::JitRuntime& rt = gpu_runtime();
  if (jit::arch_sm(rt.arch()) < 90) GTEST_SKIP() << "needs sm_90+";
  const int64_t m = 4096, n = 4096, k = 1024;
  const GemmConfig c = select_fp8_gemm_config({GemmType::kNormal, m, n, k, 1}, 90, 132);
  ASSERT_EQ(c.block_m, 256) << c.name();  // two sub-tiles per warpgroup: the heavy case
  const at::Tensor a = at::zeros({m, k}, cuda(at::kByte)), b = at::zeros({n, k}, cuda(at::kByte));
  const at::Tensor sfa = at::ones({k / 128, m}, cuda(at::kFloat)), sfb = at::ones({n / 128, k / 128}, cuda(at::kFloat));
  at::Tensor d = poisoned_bf16(m, n);
  const jit::Selection sel = fp8_gemm_nt(rt, {90, 132}, a, sfa, b, sfb, d);
  const size_t records_before = rt.monitor().records().size();
  // Zero inputs give exact zeros everywhere (and prove the kernel did not hang).
  EXPECT_EQ(d.to(at::kFloat).abs().max().item<float>(), 0.f);
  // The same key as the wrapper's launch: tensor maps are never specialized, the pointers are
  // 16-byte aligned, m / ldo / gso are left out of specialization.
  jit::TensorMapSpec spec;
  spec.address = 256;
  spec.dims[0] = 128;
  spec.dims[1] = 8;
  spec.strides[0] = 128;
  spec.box[0] = 128;
  spec.box[1] = 8;
  const jit::KernelArg t = jit::KernelArg::tmap(spec);
  const jit::CompiledKernel& ck = rt.ensure(
      fp8_gemm_nt_kernel(), sel.config.constexprs,
      {t, t, t, jit::KernelArg::pointer(256, jit::DType::kF32), jit::KernelArg::pointer(256, jit::DType::kI32),
       jit::KernelArg::pointer(256, jit::DType::kBF16), jit::KernelArg::i32(7), jit::KernelArg::i64(7),
       jit::KernelArg::i64(7)});
  EXPECT_EQ(rt.monitor().records().size(), records_before) << "a new compile: the key differs from the launch's";
  int regs = 0;
  CS_CU_CHECK(jit::driver().cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, ck.function));
  EXPECT_EQ(regs, 168);
}

TEST(DeepGemmGpuGrouped, ExpertsAndPaddingRows) {
  CS_REQUIRE_GPU();
  jit::JitRuntime& rt = gpu_runtime();
  if (jit::arch_sm(rt.arch()) < 90) GTEST_SKIP() << "needs sm_90+";
  const int64_t groups = 4, n = 384, k = 512, m = 128 * 6;
  // Row blocks: experts 2, 0, padding, 3, 3, padding (every 128-row block one expert or -1), and
  // the last rows of the expert-0 block are padding too.
  const int blocks[6] = {2, 0, -1, 3, 3, -1};
  at::Tensor idx = at::empty({m}, at::kInt);
  for (int64_t r = 0; r < m; ++r) idx[r] = blocks[r / 128];
  for (int64_t r = 128 + 100; r < 256; ++r) idx[r] = -1;
  const GemmInputs in = random_inputs(m, n, k, 77, groups);
  at::Tensor d = poisoned_bf16(m, n);
  for (bool mma_sync : {false, true}) {
    d.fill_(std::nan(""));
    m_grouped_fp8_gemm_nt_contiguous(rt, gpu_target(), in.a.to(at::kCUDA), mn_major_scales(in.sfa_rows.to(at::kCUDA)),
                                     in.b.view({groups, n, k}).to(at::kCUDA), in.sfb.to(at::kCUDA), d,
                                     idx.to(at::kCUDA), GemmOptions{mma_sync});
    const at::Tensor got = d.cpu();
    for (int blk = 0; blk < 6; ++blk) {
      const at::Tensor rows = got.narrow(0, blk * 128, 128);
      if (blocks[blk] < 0) {
        EXPECT_TRUE(at::isnan(rows.to(at::kFloat)).all().item<bool>()) << "padding block " << blk << " was written";
        continue;
      }
      const int64_t e = blocks[blk];
      const at::Tensor want = reference::fp8_gemm(in.a.narrow(0, blk * 128, 128), in.sfa_rows.narrow(0, blk * 128, 128),
                                                  in.b.narrow(0, e * n, n), in.sfb[e]);
      // Rows of -1 inside an expert's block are computed with that expert (DeepGEMM reads the
      // block's first row only); compare the valid ones.
      const int64_t valid = blk == 1 ? 100 : 128;
      expect_close(rows.narrow(0, 0, valid), want.narrow(0, 0, valid),
                   "block " + std::to_string(blk) + (mma_sync ? " mma.sync" : " wgmma"));
    }
  }
}

TEST(DeepGemmGpuBatched, EinsumBhrHdrBhd) {
  CS_REQUIRE_GPU();
  jit::JitRuntime& rt = gpu_runtime();
  if (jit::arch_sm(rt.arch()) < 90) GTEST_SKIP() << "needs sm_90+";
  for (int64_t batch : {5, 300}) {
    const int64_t heads = 8, r = 512, dd = 256;
    const at::Tensor x = reference::random_e4m3({batch, heads, r}, 5 + batch);
    const at::Tensor y = reference::random_e4m3({heads, dd, r}, 6 + batch);
    at::manual_seed(batch);
    const at::Tensor sfx_rows = at::rand({batch, heads, r / 128}) + 0.5;  // (b, h, r/128)
    const at::Tensor sfy = at::rand({heads, dd / 128, r / 128}) + 0.5;
    // Per group MN-major: [h, r/128, align(b, 4)].
    at::Tensor sfx = at::zeros({heads, r / 128, (batch + 3) / 4 * 4});
    sfx.narrow(2, 0, batch).copy_(sfx_rows.permute({1, 2, 0}));
    at::Tensor z = at::full({batch, heads, dd}, std::nan(""), cuda(at::kBFloat16));
    for (bool mma_sync : {false, true}) {
      z.fill_(std::nan(""));
      fp8_einsum_bhr_hdr_bhd(rt, gpu_target(), x.to(at::kCUDA), sfx.to(at::kCUDA), y.to(at::kCUDA), sfy.to(at::kCUDA), z,
                             GemmOptions{mma_sync});
      for (int64_t h = 0; h < heads; ++h) {
        const at::Tensor want = reference::fp8_gemm(x.select(1, h).contiguous(), sfx_rows.select(1, h).contiguous(),
                                                    y[h], sfy[h]);
        expect_close(z.select(1, h), want,
                     "batch " + std::to_string(batch) + " head " + std::to_string(h) + (mma_sync ? " mma.sync" : ""));
      }
    }
  }
}

}  // namespace
}  // namespace coldstart::deepgemm
