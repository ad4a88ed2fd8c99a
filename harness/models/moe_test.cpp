// The MoE seam (moe.h): the registry picks a backend by weight format and refuses a missing one;
// the MoE layer around the routed experts (latent projections, routed scale, shared expert) on
// the CPU with a fake backend; NemotronH's block through the fused-MoE backend on meta tensors
// (compile-only) and on the GPU against the float32 per-expert reference with poisoned outputs.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/kernels/fused_moe/fused_moe.h"
#include "harness/kernels/fused_moe/fused_moe_reference.h"
#include "harness/kernels/test_util.h"
#include "harness/models/moe.h"

namespace coldstart {
namespace {

using namespace kernels::test;  // test_util.h

std::string tuned_dir() {
  const char* dir = std::getenv("COLDSTART_SOURCE_DIR");
  return std::string(dir != nullptr ? dir : ".") + "/fixtures/tuned-configs";
}

// Nemotron-3 Nano (TP1) and Super at TP8 (latent 1024), as NemotronH's moe_specs gives them.
MoeSpec nemotron_spec(int64_t E, int64_t N, int64_t L, int top_k) {
  MoeSpec s;
  s.num_experts = E;
  s.intermediate = N;
  s.hidden = L;
  s.top_k = top_k;
  s.routing = MoeRouting::kSigmoidGroupedTopk;
  s.activation = MoeActivation::kRelu2;
  return s;
}
const MoeSpec kNano = nemotron_spec(128, 1856, 2688, 6);
const MoeSpec kSuperTp8 = nemotron_spec(512, 336, 1024, 22);
constexpr int64_t kSuperHidden = 4096;

TEST(MoeRegistry, BackendsAreFoundByWeightFormat) {
  const MoeBackendInfo* bf16 = find_moe_backend("bf16");
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->name, "fused_moe_triton");
  EXPECT_FALSE(bf16->kernels.empty());
  const MoeBackendInfo* fp8 = find_moe_backend("fp8_block128");
  ASSERT_NE(fp8, nullptr);
  EXPECT_EQ(fp8->name, "deepgemm_m_grouped");
  EXPECT_EQ(find_moe_backend("int4_awq"), nullptr);
  MoeSpec s = kNano;
  s.weight_format = "int4_awq";
  MixerContext ctx;
  EXPECT_MENTIONS(make_moe_experts(s, ctx), "no MoE backend for int4_awq experts (registered: fp8_block128 "
                                            "(deepgemm_m_grouped), bf16 (fused_moe_triton))");
  MoeBackendInfo dup = *bf16;
  dup.name = "another";
  EXPECT_MENTIONS(register_moe_backend(dup), "both serve weight format bf16");
}

TEST(MoeRegistry, BackendsRefuseWhatTheyCannotRun) {
  EngineConfig e;
  e.set_key("tuned_config_dir", "tables");
  EXPECT_TRUE(find_moe_backend("bf16")->check(kNano, e, nullptr).empty());
  MoeSpec by_model = kNano;
  by_model.routing = MoeRouting::kByModel;
  by_model.activation = MoeActivation::kClampedSwiglu;
  EXPECT_EQ(find_moe_backend("bf16")->check(by_model, e, nullptr).size(), 2u);
  // A call the GEMMs cannot launch: the expert stride 2N x H past 32 bits, blamed on N.
  MoeSpec wide = kNano;
  wide.intermediate = int64_t{1} << 30;
  const auto stride = find_moe_backend("bf16")->check(wide, e, nullptr);
  ASSERT_EQ(stride.size(), 1u);
  EXPECT_EQ(stride[0].key, "model.moe_intermediate_size");
  wide.intermediate = kNano.intermediate;
  wide.hidden = int64_t{1} << 30;
  wide.hidden_key = "model.moe_latent_size";
  const auto latent = find_moe_backend("bf16")->check(wide, e, nullptr);
  ASSERT_EQ(latent.size(), 1u);
  EXPECT_EQ(latent[0].key, "model.moe_latent_size");
  e.set_key("tuned_config_dir", "");
  const auto no_dir = find_moe_backend("bf16")->check(kNano, e, nullptr);
  ASSERT_EQ(no_dir.size(), 1u);
  EXPECT_EQ(no_dir[0].key, "engine.tuned_config_dir");
  // The DeepGEMM experts take the model's routing, gated activations and 128-multiples.
  EXPECT_EQ(find_moe_backend("fp8_block128")->check(kNano, e, nullptr).size(), 3u);
  by_model.hidden = 4096;
  by_model.intermediate = 2048;
  by_model.weight_format = "fp8_block128";
  EXPECT_TRUE(find_moe_backend("fp8_block128")->check(by_model, e, nullptr).empty());
}

// Routes every token to expert 0 with weight 1; its "expert" doubles the input.
class DoublingExperts final : public MoeExperts {
 public:
  using MoeExperts::MoeExperts;
  std::string backend() const override { return "doubling"; }
  void route(const at::Tensor& logits, const at::Tensor&, const at::Tensor& w,
             const at::Tensor& ids) override {
    routed_rows = logits.size(0);
    at::Tensor(w).fill_(1.0);
    at::Tensor(ids).zero_();
  }
  at::Tensor forward(const at::Tensor& hidden, const at::Tensor&, const at::Tensor&,
                     const MoeWeights&) override {
    return hidden * 2;
  }
  int64_t routed_rows = -1;
};

TEST(MoeLayer, LatentScaleAndSharedExpertAroundTheExperts) {
  const int64_t M = 3, H = 8, L = 4, S = 6;
  MoeSpec s = kNano;
  s.hidden = L;
  s.top_k = 1;
  DoublingExperts experts(s, MixerContext());
  at::manual_seed(5);
  const auto bf = at::TensorOptions().dtype(at::kBFloat16);
  const at::Tensor hidden = at::randn({M, H}).to(at::kBFloat16);
  MoeLayerWeights w;
  w.input_latent = (at::randn({L, H}) * 0.3).to(at::kBFloat16);
  w.output_latent = (at::randn({H, L}) * 0.3).to(at::kBFloat16);
  w.shared_up = (at::randn({S, H}) * 0.3).to(at::kBFloat16);
  w.shared_down = (at::randn({H, S}) * 0.3).to(at::kBFloat16);
  at::Tensor out = at::full({M, H}, NAN, bf);
  moe_layer_forward(experts, hidden, at::zeros({M, 128}), w, 2.5, out);
  EXPECT_EQ(experts.routed_rows, M);
  const auto f = [](const at::Tensor& t) { return t.to(at::kDouble); };
  const at::Tensor routed = f(hidden).matmul(f(w.input_latent).t()) * 2 * 2.5;
  const at::Tensor shared = at::square(at::relu(f(hidden).matmul(f(w.shared_up).t())));
  const at::Tensor want = routed.matmul(f(w.output_latent).t()) + shared.matmul(f(w.shared_down).t());
  EXPECT_FALSE(at::isnan(f(out)).any().item<bool>());
  EXPECT_LE((f(out) - want).abs().max().item<double>(), 0.05 * want.abs().max().item<double>());

  // The gated shared expert, and no latent projections (the experts' width is the hidden size).
  s.hidden = H;
  DoublingExperts plain(s, MixerContext());
  MoeLayerWeights g;
  g.shared_up = (at::randn({2 * S, H}) * 0.3).to(at::kBFloat16);
  g.shared_down = (at::randn({H, S}) * 0.3).to(at::kBFloat16);
  g.shared_activation = MoeActivation::kSiluGated;
  out.fill_(NAN);
  moe_layer_forward(plain, hidden, at::zeros({M, 128}), g, 1.0, out);
  const at::Tensor up = f(hidden).matmul(f(g.shared_up).t());
  const at::Tensor act = at::silu(up.narrow(1, 0, S)) * up.narrow(1, S, S);
  const at::Tensor want2 = f(hidden) * 2 + act.matmul(f(g.shared_down).t());
  EXPECT_LE((f(out) - want2).abs().max().item<double>(), 0.05 * want2.abs().max().item<double>());
}

TEST(MoeLayer, BadShapesAndMissingPairsNameTheArgument) {
  MoeSpec s = kNano;
  s.hidden = 4;
  DoublingExperts experts(s, MixerContext());
  const auto bf = at::TensorOptions().dtype(at::kBFloat16);
  const at::Tensor h = at::zeros({2, 8}, bf), out = at::zeros({2, 8}, bf), logits = at::zeros({2, 128});
  MoeLayerWeights w;
  w.input_latent = at::zeros({4, 8}, bf);
  EXPECT_MENTIONS(moe_layer_forward(experts, h, logits, w, 1.0, out),
                  "moe::layer_forward: argument 'w.output_latent' must be defined exactly when");
  w.output_latent = at::zeros({8, 5}, bf);
  EXPECT_MENTIONS(moe_layer_forward(experts, h, logits, w, 1.0, out),
                  "argument 'w.output_latent' has shape [8, 5], expected [8, 4]");
  MoeLayerWeights none;
  EXPECT_MENTIONS(moe_layer_forward(experts, h, logits, none, 1.0, out),
                  "argument 'hidden' has 8 columns; without latent projections");
  none.shared_up = at::zeros({3, 8}, bf);
  EXPECT_MENTIONS(moe_layer_forward(experts, at::zeros({2, 4}, bf), logits, none, 1.0,
                                    at::zeros({2, 4}, bf)),
                  "argument 'w.shared_down' must be defined exactly when w.shared_up is");
  EXPECT_MENTIONS(moe_layer_forward(experts, h, logits, w, 1.0, at::zeros({3, 8}, bf)),
                  "argument 'out' has shape [3, 8], expected [2, 8]");
}

// The fused-MoE backend for NemotronH: a compile-only context on the H200 profile.
struct BackendFixture {
  explicit BackendFixture(jit::JitRuntime& rt, DeviceMode mode) {
    engine.set_key("tuned_config_dir", tuned_dir());
    ctx.mode = mode;
    ctx.device = mode == DeviceMode::kCuda ? c10::Device(c10::kCUDA) : c10::Device(c10::kMeta);
    ctx.jit = &rt;
    ctx.target = &target;
    ctx.engine = &engine;
  }
  EngineConfig engine;
  Target target = target_profile("h200");
  MixerContext ctx;
};

TEST(MoeLayerCompileOnly, NemotronSuperLatentBlockOnMeta) {
  jit::JitRuntime rt(compile_only_options());
  BackendFixture fx(rt, DeviceMode::kCompileOnly);
  std::unique_ptr<MoeExperts> experts = make_moe_experts(kSuperTp8, fx.ctx);
  EXPECT_EQ(experts->backend(), "fused_moe_triton");
  experts->precompile();
  const size_t aot = rt.monitor().records().size();
  EXPECT_GT(aot, 0u);
  const auto meta = [](at::ScalarType t) { return at::TensorOptions().device(at::kMeta).dtype(t); };
  MoeLayerWeights w;
  w.correction_bias = at::empty({512}, meta(at::kFloat));
  w.input_latent = at::empty({1024, kSuperHidden}, meta(at::kBFloat16));
  w.output_latent = at::empty({kSuperHidden, 1024}, meta(at::kBFloat16));
  w.experts = {at::empty({512, 336, 1024}, meta(at::kBFloat16)),
               at::empty({512, 1024, 336}, meta(at::kBFloat16)), {}, {}};
  w.shared_up = at::empty({672, kSuperHidden}, meta(at::kBFloat16));
  w.shared_down = at::empty({kSuperHidden, 672}, meta(at::kBFloat16));
  for (int64_t m : {7, 300}) {
    moe_layer_forward(*experts, at::empty({m, kSuperHidden}, meta(at::kBFloat16)),
                      at::empty({m, 512}, meta(at::kFloat)), w, 5.0,
                      at::empty({m, kSuperHidden}, meta(at::kBFloat16)));
  }
  for (size_t i = aot; i < rt.monitor().records().size(); ++i)
    EXPECT_EQ(rt.monitor().records()[i].kernel, "fused_moe_gemm");
  EXPECT_GT(rt.monitor().records().size(), aot);
  // No E=512,N=336 table for the H200: vLLM's default config, one entry per token count.
  const nlohmann::json report = experts->report();
  ASSERT_EQ(report["fused_moe_configs"].size(), 2u) << report.dump();
  EXPECT_EQ(report["fused_moe_configs"][0]["M"], 7);
  EXPECT_EQ(report["fused_moe_configs"][0]["selector"], "default");
  EXPECT_TRUE(report.contains("fused_moe_table_not_found"));
}

// ---------------------------------------------------------------------------------------------
// GPU: NemotronH's MoE block through the backend against the float32 per-expert loop, with the
// GPU router's ids (the grouped_topk tests check them against float64) fed to the reference.

void check_block(const MoeSpec& s, int64_t H, int64_t S, bool latent, double rsf,
                 const std::vector<int64_t>& ms, uint64_t seed) {
  BackendFixture fx(gpu_runtime(), DeviceMode::kCuda);
  std::unique_ptr<MoeExperts> experts = make_moe_experts(s, fx.ctx);
  const auto f = cuda(at::kFloat);
  at::manual_seed(seed);
  MoeLayerWeights w;
  w.experts.w13 = (at::randn({s.num_experts, s.intermediate, s.hidden}, f) /
                   std::sqrt(static_cast<double>(s.hidden))).to(at::kBFloat16);
  w.experts.w2 = (at::randn({s.num_experts, s.hidden, s.intermediate}, f) /
                  std::sqrt(static_cast<double>(s.intermediate))).to(at::kBFloat16);
  w.correction_bias = at::randn({s.num_experts}, f) * 0.3;
  if (latent) {
    w.input_latent = (at::randn({s.hidden, H}, f) / std::sqrt(static_cast<double>(H))).to(at::kBFloat16);
    w.output_latent = (at::randn({H, s.hidden}, f) / std::sqrt(static_cast<double>(s.hidden))).to(at::kBFloat16);
  }
  w.shared_up = (at::randn({S, H}, f) / std::sqrt(static_cast<double>(H))).to(at::kBFloat16);
  w.shared_down = (at::randn({H, S}, f) / std::sqrt(static_cast<double>(S))).to(at::kBFloat16);
  for (int64_t m : ms) {
    const at::Tensor hidden = random_bf16({m, H}, seed + m, 1.0, 0.0);
    const at::Tensor logits = at::randn({m, s.num_experts}, f) * 2;
    at::Tensor out = at::full({m, H}, NAN, cuda(at::kBFloat16));
    moe_layer_forward(*experts, hidden, logits, w, rsf, out);
    at::Tensor weights = at::full({m, s.top_k}, NAN, f), ids = at::full({m, s.top_k}, -7, cuda(at::kInt));
    experts->route(logits, w.correction_bias, weights, ids);
    const at::Tensor want =
        fused_moe::ref::nemotron_moe(hidden, weights, ids, w.input_latent, w.output_latent, w.experts.w13,
                                     w.experts.w2, w.shared_up, w.shared_down, rsf);
    const at::Tensor g = out.to(at::kCPU).to(at::kDouble), r = want.to(at::kCPU).to(at::kDouble);
    const std::string what = "E=" + std::to_string(s.num_experts) + " M=" + std::to_string(m);
    ASSERT_EQ(g.sizes(), r.sizes()) << what;
    EXPECT_FALSE(at::isnan(g).any().item<bool>()) << what << ": unwritten (NaN) outputs";
    const double scale = r.abs().max().item<double>();
    const at::Tensor excess = (g - r).abs() - (0.03 * scale + 0.03 * r.abs());
    EXPECT_LE(excess.max().item<double>(), 0.0)
        << what << ": max error " << (g - r).abs().max().item<double>() << ", max |ref| " << scale;
  }
}

TEST(MoeLayerGpu, NemotronNanoBlockWithSharedExpert) {
  CS_REQUIRE_GPU();
  check_block(kNano, 2688, 3712, /*latent=*/false, 2.5, {1, 64, 800}, 70);
}

TEST(MoeLayerGpu, NemotronSuperTp8LatentBlock) {
  CS_REQUIRE_GPU();
  // E * top_k = 11264: M = 11300 exceeds it.
  check_block(kSuperTp8, kSuperHidden, 5376 / 8, /*latent=*/true, 5.0, {1, 13, 11300}, 90);
}

}  // namespace
}  // namespace coldstart
