// The fused_moe_triton MoE backend's own engine key: engine.fused_moe_chunk_size splits the
// experts' tokens as vLLM's VLLM_FUSED_MOE_CHUNK_SIZE does (compile-only, meta tensors).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdlib>
#include <set>
#include <string>

#include "harness/common/error.h"
#include "harness/common/target.h"
#include "harness/kernels/test_util.h"
#include "harness/models/moe.h"

namespace coldstart {
namespace {

// Nemotron-3 Nano's experts in a compile-only context on the H200 profile.
struct Nano {
  explicit Nano(jit::JitRuntime& rt) {
    const char* dir = std::getenv("COLDSTART_SOURCE_DIR");
    engine.set_key("tuned_config_dir", std::string(dir != nullptr ? dir : ".") + "/fixtures/tuned-configs");
    ctx.jit = &rt;
    ctx.target = &target;
    ctx.engine = &engine;
    spec.num_experts = 128;
    spec.intermediate = 1856;
    spec.hidden = 2688;
    spec.top_k = 6;
    spec.routing = MoeRouting::kSigmoidGroupedTopk;
    spec.activation = MoeActivation::kRelu2;
  }
  // Runs the experts over `m` tokens; returns the M of each config lookup the report lists.
  std::vector<int64_t> run(int64_t m) {
    const auto meta = [](at::ScalarType t) { return at::TensorOptions().device(at::kMeta).dtype(t); };
    std::unique_ptr<MoeExperts> experts = make_moe_experts(spec, ctx);
    const MoeWeights w{at::empty({128, 1856, 2688}, meta(at::kBFloat16)),
                       at::empty({128, 2688, 1856}, meta(at::kBFloat16)), {}, {}};
    experts->forward(at::empty({m, 2688}, meta(at::kBFloat16)), at::empty({m, 6}, meta(at::kFloat)),
                     at::empty({m, 6}, meta(at::kInt)), w);
    const nlohmann::json report = experts->report();
    std::vector<int64_t> ms;
    for (const auto& c : report.at("fused_moe_configs")) ms.push_back(c.at("M").get<int64_t>());
    return ms;
  }
  EngineConfig engine;
  Target target = target_profile("h200");
  MixerContext ctx;
  MoeSpec spec;
};

TEST(FusedMoeExpertsCompileOnly, TokensRunInChunksOfTheEngineKey) {
  jit::JitRuntime rt(kernels::test::compile_only_options());
  Nano nano(rt);
  // vLLM's default (16 * 1024) leaves a 10-token batch whole.
  EXPECT_EQ(nano.run(10), (std::vector<int64_t>{10}));
  // Chunks of 4, 4 and 2 tokens: configs looked up for M = 4 and M = 2, never for 10.
  nano.engine.set_key("fused_moe_chunk_size", 4);
  EXPECT_EQ(nano.run(10), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(nano.run(8), (std::vector<int64_t>{4}));
}

// A rank's experts at each of their token-count classes (run_local_experts, as moe-ep-warmup and
// the envelope sweep run them under expert parallelism) reach every GEMM key that some count up
// to the bound reaches, and the classes are fewer than the counts.
TEST(FusedMoeExpertsCompileOnly, TokenClassesReachTheKeysOfEveryCount) {
  jit::JitRuntime rt(kernels::test::compile_only_options());
  Nano nano(rt);
  nano.spec.num_experts = 32;  // a rank's share under EP over 4 ranks
  nano.spec.expert_map = true;
  const auto meta = [](at::ScalarType t) { return at::TensorOptions().device(at::kMeta).dtype(t); };
  const MoeWeights w{at::empty({32, 1856, 2688}, meta(at::kBFloat16)),
                     at::empty({32, 2688, 1856}, meta(at::kBFloat16)), {}, {}};
  std::unique_ptr<MoeExperts> experts = make_moe_experts(nano.spec, nano.ctx);
  constexpr int64_t kMax = 160;
  const std::vector<int64_t> classes = experts->token_classes(kMax);
  ASSERT_FALSE(classes.empty());
  EXPECT_EQ(classes.front(), 1);
  EXPECT_LT(classes.size(), static_cast<size_t>(kMax));
  rt.set_key_only(true);
  auto gemm_keys = [&] {
    std::set<std::string> out;
    for (const std::string& k : rt.reached_keys())
      if (k.rfind("fused_moe_gemm", 0) == 0) out.insert(k);
    return out;
  };
  rt.clear_reached_keys();
  for (int64_t m : classes) run_local_experts(*experts, m, w, c10::Device(c10::kMeta));
  const std::set<std::string> by_class = gemm_keys();
  rt.clear_reached_keys();
  for (int64_t m = 1; m <= kMax; ++m) run_local_experts(*experts, m, w, c10::Device(c10::kMeta));
  EXPECT_EQ(gemm_keys(), by_class);
  EXPECT_GT(by_class.size(), 2u) << "configs by M and the M * top_k specializations";
  EXPECT_THROW(run_local_experts(*experts, 0, w, c10::Device(c10::kMeta)), InputError);
}

}  // namespace
}  // namespace coldstart
