// moe-ep-warmup: coldstart's own warmer (no engine ships it) for expert parallelism. Under an
// all-to-all dispatch each rank's grouped-GEMM M is the number of tokens routed to its experts
// (moe_layer_forward_ep), so the fused-MoE config a rank selects (vLLM's tuned table or
// get_default_config by M, and with it the compile key) follows each step's routing: ranks of
// one step need different kernels, and a rank whose M class no startup step reached compiles
// on the hot path while the others wait in the dispatch. vLLM's startup reaches the classes its
// dummy batches happen to route to each rank (the profile run at max_num_batched_tokens, capture
// warmups at the capture sizes). This warmer runs eager dummy steps of 1, 2, 4, ...,
// max_num_batched_tokens synthetic tokens in the null block (the whole model: attention and
// mixer kernels too), then each rank's routed experts once at each token count of their key
// classes (Model::expert_token_classes: the config by M and the Triton specialization of the
// M-dependent ints). The steps alone left some classes to chance: the routing decides the count
// a rank receives, and `coldstart coverage` found ranks whose count later fell in a class
// (M * top_k a multiple of 16) no step had given them.
#include <fmt/format.h>

#include "harness/models/moe.engine_keys.h"
#include "warmers/warmer.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace {

class MoeEpWarmup final : public Warmer {
 public:
  std::string name() const override { return "moe-ep-warmup"; }
  std::string description() const override {
    return "expert parallelism (coldstart's own): eager dummy steps of 1, 2, 4, ... "
           "max_num_batched_tokens tokens, so each rank's routed M meets every fused-MoE config "
           "class at startup";
  }

  void run(WarmupContext& ctx) override {
    const EngineConfig& e = ctx.scenario().engine;
    if (!expert_parallel(e)) {
      ctx.skip("no expert parallelism (engine.enable_expert_parallel with tensor_parallel_size > "
               "1): every rank's M is the step's token count, which the engine's own startup "
               "covers");
      return;
    }
    const int bs = e.block_size;
    std::vector<int> sizes;
    for (int n = 1; n < e.max_num_batched_tokens; n *= 2) sizes.push_back(n);
    sizes.push_back(e.max_num_batched_tokens);
    for (int n : sizes) ctx.dummy_run({null_block_step(0, n, bs)});
    const std::vector<int64_t> counts = ctx.expert_token_classes();
    for (int64_t m : counts) ctx.run_local_experts(m);
    ctx.report(fmt::format("{} eager dummy steps of 1 to {} tokens; this rank's experts at {} "
                           "token-count classes",
                           sizes.size(), sizes.back(), counts.size()),
               {{"steps", sizes}, {"expert_token_classes", counts}});
  }
};

CS_REGISTER_WARMER(MoeEpWarmup);

}  // namespace
}  // namespace coldstart
