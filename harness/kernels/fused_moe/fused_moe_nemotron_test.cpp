// Fused MoE for NemotronH (Nemotron-3 Nano / Super): the grouped_topk router (sigmoid + score
// correction bias) and the non-gated relu2 experts (the MoE block around them, with latent
// projections and a shared expert, is tested in harness/models/moe_test.cpp). CPU tests of the reference, of vLLM's table rule for this shape (tuned-table N,
// the dtype suffix) and of the compile-only path; GPU tests against float64 / float32 references
// with poisoned outputs (they skip without a CUDA GPU and a CUDA libtorch).
#include <gtest/gtest.h>

#include <limits>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/jit/select.h"
#include "harness/kernels/fused_moe/fused_moe.h"
#include "harness/kernels/fused_moe/fused_moe_reference.h"
#include "harness/kernels/test_util.h"

namespace coldstart::fused_moe {
namespace {

using namespace kernels::test;  // test_util.h

// The served models' experts (kernels/model_shapes.h). Other shapes below list E, N, H (expert
// input width), top_k, renormalize, activation, grouped, n_group, topk_group.
const MoeShape kNano = moe_shape(kernels::shapes::kNemotronNanoMoe);
const MoeShape kSuperTp8 = moe_shape(kernels::shapes::kNemotronSuperMoeTp8);

std::string table_dir() {
  const char* dir = std::getenv("COLDSTART_SOURCE_DIR");
  return std::string(dir != nullptr ? dir : ".") + "/fixtures/tuned-configs/fused_moe";
}
const ConfigSource kH100{table_dir(), "NVIDIA H100 80GB HBM3"};
const ConfigSource kH200{table_dir(), "NVIDIA H200"};

at::TensorOptions meta(at::ScalarType t) { return at::TensorOptions().device(at::kMeta).dtype(t); }

// ---------------------------------------------------------------------------------------------
// CPU: reference and vLLM's host rules

TEST(FusedMoeNemotronReference, GroupedScoresTiesAndWeights) {
  // 8 experts in 4 groups of 2; group scores (top-2 sums): g0 = s0 + s1, ... Zero bias.
  const at::Tensor logits =
      at::tensor({1.0f, 1.0f, 3.0f, -3.0f, 0.0f, 2.0f, 2.0f, 0.0f}, at::kFloat).view({1, 8});
  const at::Tensor bias = at::zeros({8}, at::kFloat);
  // g0 = 2 s(1) = 1.46, g1 = s(3) + s(-3) = 1, g2 = s(0) + s(2) = 1.38, g3 = s(2) + s(0): a
  // tie with g2, which wins as the lower group; topk_group 2 keeps g0 and g2.
  const at::Tensor s = ref::grouped_topk_scores(logits, bias, 4, 2);
  EXPECT_TRUE(std::isinf(s[0][2].item<double>()) && std::isinf(s[0][3].item<double>()));
  EXPECT_TRUE(std::isinf(s[0][6].item<double>()) && std::isinf(s[0][7].item<double>()));
  const ref::TopK t = ref::grouped_topk(logits, bias, 3, 4, 2, true, 2.5);
  EXPECT_EQ(t.ids[0][0].item<int64_t>(), 5);  // sigmoid(2)
  EXPECT_EQ(t.ids[0][1].item<int64_t>(), 0);  // sigmoid(1) twice: lower index first
  EXPECT_EQ(t.ids[0][2].item<int64_t>(), 1);
  const double s1 = 1 / (1 + std::exp(-1.0));
  const double s2 = 1 / (1 + std::exp(-2.0));
  EXPECT_NEAR(t.weights[0][1].item<double>(), 2.5 * s1 / (s2 + 2 * s1 + 1e-20), 1e-12);
  // The bias changes the ranking but not the weights.
  const at::Tensor b2 = at::tensor({0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 5.f}, at::kFloat);
  const ref::TopK u = ref::grouped_topk(logits, b2, 1, 1, 1, false, 1.0);
  EXPECT_EQ(u.ids[0][0].item<int64_t>(), 7);
  EXPECT_NEAR(u.weights[0][0].item<double>(), 0.5, 1e-12);
}

TEST(FusedMoeNemotronReference, Relu2ExpertLoop) {
  const at::Tensor eye = at::eye(4, at::kFloat);
  const at::Tensor x = at::tensor({1.0f, -1.0f, 2.0f, 0.5f}, at::kFloat).view({1, 4});
  const at::Tensor out = ref::fused_experts(x, eye.unsqueeze(0), eye.unsqueeze(0),
                                            at::full({1, 1}, 0.5f), at::zeros({1, 1}, at::kInt),
                                            /*gated=*/false);
  EXPECT_TRUE(at::allclose(out, 0.5 * at::square(at::relu(x))));
}

TEST(FusedMoeNemotronRules, NanoTableOnH100DefaultOnH200) {
  // vLLM: N in the file name is w2.shape[2] (the expert intermediate, 1856 for Nano at TP1)
  // for gated and non-gated experts alike; bf16 has no dtype suffix, so the fp8_w8a8 H200 file
  // (present in the fixtures) is never read for bf16 and H200 takes the default config.
  const jit::Selection h100 = select_config(kH100, kNano, 64);
  EXPECT_EQ(h100.selector, "table");
  EXPECT_EQ(h100.tuning_key, "M=64 -> 64");
  EXPECT_NE(h100.table_file.find("E=128,N=1856,device_name=NVIDIA_H100_80GB_HBM3.json"),
            std::string::npos);
  EXPECT_EQ(h100.config.name,
            "BLOCK_SIZE_M=16,BLOCK_SIZE_N=32,BLOCK_SIZE_K=256,GROUP_SIZE_M=1,warps=4,stages=5");
  EXPECT_EQ(h100.candidates.size(), 18u);
  EXPECT_EQ(select_config(kH100, kNano, 2000).tuning_key, "M=2000 -> 2048");
  ASSERT_TRUE(jit::find_tuned_file(table_dir(), table_stem_fields(128, 1856, "NVIDIA H200",
                                                                           "fp8_w8a8")));
  for (const char* dev : {"NVIDIA H200", "NVIDIA H200 NVL"}) {
    const jit::Selection h200 = select_config(ConfigSource{table_dir(), dev}, kNano, 64);
    EXPECT_EQ(h200.selector, "default") << dev;
    EXPECT_EQ(h200.config.name, default_config(64, 128).name);
    EXPECT_NE(h200.table_file.find("E=128,N=1856,device_name=NVIDIA_H200.json"), std::string::npos)
        << h200.table_file;
  }
  EXPECT_EQ(select_config(kH200, kNano, 300).config.name, default_config(300, 128).name);
  // Every config of the H100 file is supported and fits every arch's shared memory.
  const jit::TunedTable t = jit::load_tuned_table(h100.table_file);
  EXPECT_EQ(t.triton_version, "3.5.0");
  for (const jit::TunedEntry& e : t.entries) {
    const GemmBlock blk = gemm_block(e.config());
    for (int sm : {80, 86, 89, 90, 100, 120}) EXPECT_GE(gemm_pipeline_stages(blk, sm), 1);
  }
}

// ---------------------------------------------------------------------------------------------
// CPU: compile-only (meta tensors)

TEST(FusedMoeNemotronCompileOnly, AotKernelsForGroupedRelu2Shape) {
  jit::JitRuntime rt(compile_only_options());
  precompile_aot_kernels(rt, kNano);
  EXPECT_EQ(rt.cached_kernels(), 3u);  // grouped_topk, align, sum: no softmax, no silu_and_mul
  std::vector<std::string> names;
  for (const auto& r : rt.monitor().records()) names.push_back(r.kernel);
  EXPECT_EQ(names, (std::vector<std::string>{"moe_grouped_topk", "moe_align_block_size", "moe_sum"}));
  EXPECT_EQ(grouped_topk_kernel().do_not_specialize, grouped_topk_kernel().arg_names);
  EXPECT_NE(rt.monitor().records()[0].key.find("NUM_EXPERTS=128,TOP_K=6,N_GROUP=1,TOPK_GROUP=1,"
                                               "RENORMALIZE=1"),
            std::string::npos)
      << rt.monitor().records()[0].key;
  // Routing any M hits the precompiled binary (the scaling factor is a runtime float).
  MoeShape scaled = kNano;
  scaled.routed_scaling_factor = 2.5f;
  for (int64_t m : {1, 77, 4096}) {
    grouped_topk(rt, scaled, at::empty({m, 128}, meta(at::kFloat)), at::empty({128}, meta(at::kFloat)),
                 at::empty({m, 6}, meta(at::kFloat)), at::empty({m, 6}, meta(at::kInt)));
  }
  EXPECT_EQ(rt.cached_kernels(), 3u);
  // Another grouping is another shape family.
  MoeShape grouped{256, 256, 1024, 8, true, Activation::kRelu2NoMul, true, 8, 4};
  precompile_aot_kernels(rt, grouped);
  EXPECT_EQ(rt.cached_kernels(), 6u);
}

TEST(FusedMoeNemotronCompileOnly, Relu2ExpertsOnMeta) {
  jit::JitRuntime rt(compile_only_options());
  precompile_aot_kernels(rt, kNano);
  const int64_t E = kNano.num_experts, N = kNano.intermediate, H = kNano.hidden;
  for (int64_t m : {1, 5, 6, 64, 800}) {
    const size_t before = rt.monitor().records().size();
    const jit::Selection sel = fused_experts(
        rt, kNano, kH100, at::empty({m, H}, meta(at::kBFloat16)),
        at::empty({E, N, H}, meta(at::kBFloat16)), at::empty({E, H, N}, meta(at::kBFloat16)),
        at::empty({m, 6}, meta(at::kFloat)), at::empty({m, 6}, meta(at::kInt)),
        at::empty({m, H}, meta(at::kBFloat16)));
    EXPECT_EQ(sel.selector, "table");
    size_t gemms = 0;
    for (size_t i = before; i < rt.monitor().records().size(); ++i) {
      const auto& r = rt.monitor().records()[i];
      EXPECT_EQ(r.kernel, "fused_moe_gemm") << m;  // relu2 is torch ops: no activation kernel
      EXPECT_EQ(r.selector, "table");
      const bool naive = r.key.find("NAIVE_BLOCK_ASSIGNMENT=1") != std::string::npos;
      EXPECT_EQ(naive, m <= 5) << m;  // m * 6 * 4 <= 128
      ++gemms;
    }
    EXPECT_LE(gemms, 2u);
  }
}

TEST(FusedMoeNemotronCompileOnly, ValidationNamesFunctionAndArgument) {
  jit::JitRuntime rt(compile_only_options());
  const auto f = meta(at::kFloat);
  const at::Tensor w6 = at::empty({4, 6}, f);
  const at::Tensor i6 = at::empty({4, 6}, meta(at::kInt));
  EXPECT_MENTIONS(grouped_topk(rt, kNano, at::empty({4, 128}, meta(at::kBFloat16)),
                               at::empty({128}, f), w6, i6),
                  "fused_moe::grouped_topk: argument 'gating_logits'");
  EXPECT_MENTIONS(grouped_topk(rt, kNano, at::empty({4, 128}, f), at::empty({127}, f), w6, i6),
                  "argument 'e_score_correction_bias'");
  MoeShape bad = kNano;
  bad.n_group = 3;  // does not divide 128
  EXPECT_MENTIONS(grouped_topk(rt, bad, at::empty({4, 128}, f), at::empty({128}, f), w6, i6),
                  "n_group=3");
  bad = kNano;
  bad.top_k = 33;
  EXPECT_THROW(precompile_aot_kernels(rt, bad), InputError);
  // Non-gated w13 is [E, N, H]; a gated [E, 2N, H] is refused, and the other way round.
  const auto b = meta(at::kBFloat16);
  const MoeShape small{8, 64, 128, 2, true, Activation::kRelu2NoMul, true};
  auto run = [&](const MoeShape& sh, int64_t w13_rows) {
    fused_experts(rt, sh, kH200, at::empty({3, 128}, b), at::empty({8, w13_rows, 128}, b),
                  at::empty({8, 128, 64}, b), at::empty({3, 2}, f), at::empty({3, 2}, meta(at::kInt)),
                  at::empty({3, 128}, b));
  };
  EXPECT_MENTIONS(run(small, 128), "fused_moe::fused_experts: argument 'w13'");
  run(small, 64);
  MoeShape silu = small;
  silu.activation = Activation::kSilu;
  EXPECT_MENTIONS(run(silu, 64), "argument 'w13'");
  run(silu, 128);
}

// ---------------------------------------------------------------------------------------------
// GPU

// Max |got - want| must stay under atol + rtol * |want| everywhere; no NaN left.
void expect_close(const at::Tensor& got, const at::Tensor& want, double atol, double rtol,
                  const std::string& what) {
  const at::Tensor g = got.to(at::kCPU).to(at::kDouble);
  const at::Tensor w = want.to(at::kCPU).to(at::kDouble);
  ASSERT_EQ(g.sizes(), w.sizes()) << what;
  EXPECT_FALSE(at::isnan(g).any().item<bool>()) << what << ": unwritten (NaN) outputs";
  const at::Tensor excess = (g - w).abs() - (atol + rtol * w.abs());
  EXPECT_LE(excess.max().item<double>(), 0.0)
      << what << ": max error " << (g - w).abs().max().item<double>() << ", max |ref| "
      << w.abs().max().item<double>();
}

struct Routed {
  at::Tensor weights, ids;
};

// Runs grouped_topk on poisoned outputs.
Routed route(const MoeShape& s, const at::Tensor& logits, const at::Tensor& bias) {
  const int64_t m = logits.size(0);
  Routed r{at::full({m, s.top_k}, NAN, cuda(at::kFloat)), at::full({m, s.top_k}, -7, cuda(at::kInt))};
  grouped_topk(gpu_runtime(), s, logits, bias, r.weights, r.ids);
  return r;
}

// The kernel's ids must be a top-k of the float64 scores up to float32 rounding (the kernel ranks
// float32 sums): ids distinct and eligible, in descending order, each no worse than the best
// expert left out; where the float64 order leaves no near-tie, exactly the reference ids.
// Weights: the float64 weights of the kernel's ids.
// Returns the number of rows compared exactly.
int check_routing(const MoeShape& s, const at::Tensor& logits, const at::Tensor& bias,
                  const Routed& got, const std::string& what) {
  const at::Tensor sc = ref::grouped_topk_scores(logits, bias, s.n_group, s.topk_group);
  const ref::TopK want = ref::grouped_topk(logits, bias, s.top_k, s.n_group, s.topk_group,
                                           s.renormalize, s.routed_scaling_factor);
  const at::Tensor ids = got.ids.to(at::kCPU).to(at::kLong);
  if (!((ids >= 0).all().item<bool>() && (ids < s.num_experts).all().item<bool>())) {
    ADD_FAILURE() << what << ": ids out of range";
    return 0;
  }
  const double tol = 1e-6;
  int exact_rows = 0;
  for (int64_t r = 0; r < ids.size(0); ++r) {
    const at::Tensor row = sc[r];
    const at::Tensor picked = row.index_select(0, ids[r]);
    EXPECT_FALSE(std::isinf(picked.min().item<double>())) << what << " row " << r << ": ineligible";
    EXPECT_EQ(std::get<0>(at::_unique(ids[r])).numel(), s.top_k) << what << " row " << r;
    EXPECT_TRUE((picked.narrow(0, 0, s.top_k - 1) >= picked.narrow(0, 1, s.top_k - 1) - tol)
                    .all().item<bool>()) << what << " row " << r << ": not descending";
    at::Tensor rest = row.clone();
    rest.index_fill_(0, ids[r], -INFINITY);
    EXPECT_GE(picked.min().item<double>(), rest.max().item<double>() - tol) << what << " row " << r;
    const at::Tensor sorted = std::get<0>(row.sort(0, true)).narrow(0, 0, s.top_k + 1);
    const double gap = (sorted.narrow(0, 0, s.top_k) - sorted.narrow(0, 1, s.top_k)).min().item<double>();
    if (gap > 1e-5) {
      EXPECT_TRUE(at::equal(ids[r], want.ids[r])) << what << " row " << r;
      ++exact_rows;
    }
  }
  expect_close(got.weights, ref::routing_weights(logits, got.ids, s.renormalize,
                                                 s.routed_scaling_factor),
               1e-6, 2e-6, what + " weights");
  return exact_rows;
}

TEST(FusedMoeNemotronGpu, GroupedTopkMatchesFloat64) {
  CS_REQUIRE_GPU();
  // Nano, Super, a DeepSeek-V3-like grouping, and an expert count that is no multiple of 32.
  const std::vector<MoeShape> shapes = {
      kNano, kSuperTp8, MoeShape{256, 8, 8, 8, true, Activation::kRelu2NoMul, true, 8, 4},
      MoeShape{40, 8, 8, 3, true, Activation::kRelu2NoMul, true, 4, 2}};
  uint64_t seed = 1;
  int rows = 0;
  int exact = 0;
  for (MoeShape s : shapes) {
    for (bool renorm : {true, false}) {
      for (float scale : {1.0f, 2.5f}) {
        s.renormalize = renorm;
        s.routed_scaling_factor = scale;
        at::manual_seed(seed++);
        for (int64_t m : {1, 37}) {
          // Strided logits (row stride E + 8), as the router's output may be a view.
          const at::Tensor logits =
              (at::randn({m, s.num_experts + 8}, cuda(at::kFloat)) * 2).narrow(1, 0, s.num_experts);
          const at::Tensor bias = at::randn({s.num_experts}, cuda(at::kFloat)) * 0.3;
          rows += static_cast<int>(m);
          exact += check_routing(s, logits, bias, route(s, logits, bias),
                        "E=" + std::to_string(s.num_experts) + " k=" + std::to_string(s.top_k) +
                            " groups=" + std::to_string(s.n_group) + " renorm=" +
                            std::to_string(renorm) + " scale=" + std::to_string(scale) +
                            " M=" + std::to_string(m));
        }
      }
    }
  }
  EXPECT_GE(exact, rows / 2) << "rows without a near-tie, compared id by id";
}

TEST(FusedMoeNemotronGpu, GroupedTopkTiesGoToTheLowerIndex) {
  CS_REQUIRE_GPU();
  // Few distinct values: many exact ties of biased scores (and of group scores in the grouped
  // case); the kernel and the reference must agree exactly, lower index (group) first.
  at::manual_seed(5);
  const MoeShape one{128, 8, 8, 6, true, Activation::kRelu2NoMul, true, 1, 1};
  const at::Tensor l1 = (at::randint(-2, 3, {64, 128}, cuda(at::kFloat)) * 0.5).contiguous();
  const at::Tensor b1 = at::randint(0, 3, {128}, cuda(at::kFloat)) * 0.125;
  const MoeShape grp{64, 8, 8, 4, false, Activation::kRelu2NoMul, true, 8, 3};
  const at::Tensor l2 = at::randint(0, 4, {64, 64}, cuda(at::kFloat));
  const at::Tensor b2 = at::zeros({64}, cuda(at::kFloat));
  for (const auto& [s, l, b] : {std::tuple<MoeShape, at::Tensor, at::Tensor>{one, l1, b1},
                                {grp, l2, b2}}) {
    const Routed got = route(s, l, b);
    const ref::TopK want = ref::grouped_topk(l, b, s.top_k, s.n_group, s.topk_group,
                                             s.renormalize, s.routed_scaling_factor);
    EXPECT_TRUE(at::equal(got.ids.to(at::kCPU).to(at::kLong), want.ids)) << "groups " << s.n_group;
    expect_close(got.weights, want.weights, 1e-6, 2e-6, "tie weights");
  }
}

TEST(FusedMoeNemotronGpu, GroupedTopkNanScoresStillSelectRealExperts) {
  CS_REQUIRE_GPU();
  // NaN logits rank above every number (torch.topk's order): rows of NaN pick the lowest ids,
  // a single NaN is picked first, and no id ever falls outside [0, E).
  at::manual_seed(9);
  for (const MoeShape& s : {MoeShape{128, 8, 8, 6, true, Activation::kRelu2NoMul, true, 1, 1},
                            MoeShape{64, 8, 8, 4, false, Activation::kRelu2NoMul, true, 8, 3}}) {
    at::Tensor l = at::randn({16, s.num_experts}, cuda(at::kFloat));
    l[0].fill_(std::numeric_limits<float>::quiet_NaN());
    l[1][37] = std::numeric_limits<float>::quiet_NaN();
    const Routed got = route(s, l, at::zeros({s.num_experts}, cuda(at::kFloat)));
    const at::Tensor ids = got.ids.to(at::kCPU).to(at::kLong);
    EXPECT_GE(ids.min().item<int64_t>(), 0) << "groups " << s.n_group;
    EXPECT_LT(ids.max().item<int64_t>(), s.num_experts) << "groups " << s.n_group;
    if (s.n_group == 1) {
      EXPECT_TRUE(at::equal(ids[0], at::arange(s.top_k, at::kLong)));
      EXPECT_EQ(ids[1][0].item<int64_t>(), 37);
    }
  }
}

struct Experts {
  at::Tensor w13, w2;
};

Experts random_experts(const MoeShape& s, uint64_t seed) {
  at::manual_seed(seed);
  const auto f = cuda(at::kFloat);
  return {(at::randn({s.num_experts, s.intermediate, s.hidden}, f) /
           std::sqrt(static_cast<double>(s.hidden))).to(at::kBFloat16),
          (at::randn({s.num_experts, s.hidden, s.intermediate}, f) /
           std::sqrt(static_cast<double>(s.intermediate))).to(at::kBFloat16)};
}

Routed random_routing(const MoeShape& s, int64_t m, uint64_t seed) {
  at::manual_seed(seed);
  const at::Tensor logits = at::randn({m, s.num_experts}, cuda(at::kFloat)) * 2;
  return route(s, logits, at::randn({s.num_experts}, cuda(at::kFloat)) * 0.3);
}

// Nano's relu2 experts at M = 1, 5 (naive assignment), 64 and 800 (> E * top_k = 768) against
// the per-expert loop, with the configs vLLM's H100 table gives (forced == nullptr) or with the
// forced configs [begin, end) of: every distinct config of the H100 file, then vLLM's two
// defaults (what an H200 runs), cycling through the Ms.
void check_nano_relu2(size_t begin, size_t end) {
  jit::JitRuntime& rt = gpu_runtime();
  const Experts ex = random_experts(kNano, 3);
  const std::vector<int64_t> ms = {1, 5, 64, 800};
  std::vector<at::Tensor> hidden, refs;
  std::vector<Routed> routes;
  for (size_t i = 0; i < ms.size(); ++i) {
    hidden.push_back(random_bf16({ms[i], kNano.hidden}, 40 + i, 1.0, 0.0));
    routes.push_back(random_routing(kNano, ms[i], 50 + i));
    refs.push_back(ref::fused_experts(hidden[i], ex.w13, ex.w2, routes[i].weights, routes[i].ids,
                                      /*gated=*/false));
  }
  auto check = [&](size_t i, const jit::Selection* forced, const std::string& what) {
    at::Tensor out = at::full({ms[i], kNano.hidden}, NAN, cuda(at::kBFloat16));
    if (forced != nullptr) {
      fused_experts_with(rt, kNano, *forced, hidden[i], ex.w13, ex.w2, routes[i].weights,
                         routes[i].ids, out);
    } else {
      EXPECT_EQ(fused_experts(rt, kNano, kH100, hidden[i], ex.w13, ex.w2, routes[i].weights,
                              routes[i].ids, out).selector, "table");
    }
    const double scale = refs[i].abs().max().item<double>();
    expect_close(out, refs[i], 0.03 * scale, 0.03, what);
  };
  const jit::TunedTable t = jit::load_tuned_table(select_config(kH100, kNano, 1).table_file);
  std::vector<jit::Selection> forced;
  std::vector<std::string> seen;
  for (const jit::TunedEntry& e : t.entries) {
    if (std::find(seen.begin(), seen.end(), e.config().name) != seen.end()) continue;
    seen.push_back(e.config().name);
    forced.push_back(jit::select_from_table(t, e.batch));
  }
  EXPECT_EQ(forced.size(), 13u);
  forced.push_back(select_config(kH200, kNano, 1));
  forced.push_back(select_config(kH200, kNano, 800));
  if (begin == end) {
    for (size_t i = 0; i < ms.size(); ++i) check(i, nullptr, "H100 table M=" + std::to_string(ms[i]));
  }
  for (size_t j = begin; j < std::min(end, forced.size()); ++j) {
    check(j % ms.size(), &forced[j],
          forced[j].config.name + " at M=" + std::to_string(ms[j % ms.size()]));
  }
}

TEST(FusedMoeNemotronGpu, Relu2ExpertsNanoH100Table) {
  CS_REQUIRE_GPU();
  check_nano_relu2(0, 0);
}

TEST(FusedMoeNemotronGpu, Relu2ExpertsEveryConfigFirstHalf) {
  CS_REQUIRE_GPU();
  check_nano_relu2(0, 7);
}

TEST(FusedMoeNemotronGpu, Relu2ExpertsEveryConfigSecondHalfAndDefaults) {
  CS_REQUIRE_GPU();
  check_nano_relu2(7, 15);
}

}  // namespace
}  // namespace coldstart::fused_moe
