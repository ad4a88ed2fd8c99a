// aot-prefill-warmup: one eager prefill step of a single block of synthetic tokens through the
// whole model, attention included, before graph capture; its K/V go to the null block. It
// mirrors an engine's dummy run with attention metadata (vLLM builds one for FULL-mode capture).
// The step makes the ahead-of-time libraries do their once-per-process work before the first
// request: loading the prefill attention and sampling kernels, creating handles, the first
// device-to-host copy. Because it runs one block (not the request's length), what it removes from
// the first request is the shape-independent part of the first-time cost; what remains is
// per-shape (e.g. GEMM algorithm choice for a new M).
#include <fmt/format.h>

#include "warmers/warmer.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace {

class AotPrefillWarmup final : public Warmer {
 public:
  std::string name() const override { return "aot-prefill-warmup"; }
  std::string description() const override {
    return "one eager prefill step (one block, attention + sampling) before capture, like an "
           "engine's dummy run with attention metadata";
  }

  void run(WarmupContext& ctx) override {
    const int bs = ctx.scenario().engine.block_size;
    // Longer than the largest capture size so the step runs eagerly, as a prefill does.
    int tokens = bs;
    for (int size : ctx.scenario().engine.cudagraph_capture_sizes) {
      while (tokens <= size) tokens += bs;
    }
    ctx.dummy_run({null_block_step(0, tokens, bs)});
    ctx.log(fmt::format("aot-prefill-warmup: one eager prefill step of {} tokens", tokens));
  }
};

CS_REGISTER_WARMER(AotPrefillWarmup);

}  // namespace
}  // namespace coldstart
