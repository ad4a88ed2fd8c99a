// tq-decode-warmup: the TurboQuant decode warmup of vLLM PR #42215 ("[Bugfix][V1][TurboQuant] Warm
// up decode kernels"), run in kernel_warmup before graph capture. It finds the TurboQuant
// attention layers, de-duplicates them by compile configuration, and for each distinct one runs
// the real backend on small synthetic tensors: a cache store plus a batch-1 decode, then a
// continuation prefill over one block of cached tokens. That compiles every TurboQuant kernel on
// the serving path and sizes the workspace only as large as those small calls need (so a longer
// continuation prefill still outgrows it after the lock; vLLM issue #41565).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <set>

#include "warmers/warmer.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace {

/// The mixers this file's warmers warm (Warmer::mixers_used).
const MixerRef kTurboQuant{"turboquant_4bit_nc"};

class TqDecodeWarmup final : public Warmer {
 public:
  std::string name() const override { return "tq-decode-warmup"; }
  std::vector<std::string> mixers_used() const override { return {kTurboQuant.name()}; }
  std::string description() const override {
    return "TurboQuant: compile store/decode/dequant kernels with small synthetic calls per "
           "distinct layer config (vLLM PR #42215)";
  }

  void run(WarmupContext& ctx) override {
    const std::vector<Mixer*> layers = ctx.mixers(kTurboQuant);
    if (layers.empty()) {
      ctx.skip("no TurboQuant attention layers, nothing to warm");
      return;
    }
    std::set<std::string> warmed;
    for (Mixer* m : layers) {
      if (!warmed.insert(m->compile_config()).second) continue;
      warm_layer(ctx, *m);
    }
    ctx.log(fmt::format("tq-decode-warmup: {} layer(s), {} distinct compile config(s)",
                        layers.size(), warmed.size()));
  }

 private:
  // Synthetic inputs laid out as the model hands them (Mixer::dummy_inputs), so strides
  // specialize the same way.
  static void run_mixer(WarmupContext& ctx, Mixer& m, const SeqStep& s) {
    std::vector<at::Tensor> in = m.dummy_inputs(s.query_len);
    at::Tensor out = at::empty({s.query_len, m.spec().output_width},
                               at::TensorOptions().dtype(at::kBFloat16).device(ctx.device()));
    ForwardBatch batch = ctx.make_batch({s});
    m.forward(in, out, batch);
  }

  static void warm_layer(WarmupContext& ctx, Mixer& m) {
    const int bs = ctx.scenario().engine.block_size;
    // Everything lives in the null block 0, which no request uses.
    SeqStep decode;
    decode.context_len = bs - 1;
    decode.query_len = 1;
    decode.blocks = {0};
    run_mixer(ctx, m, decode);  // cache store + batch-1 split-KV decode
    SeqStep cont;
    cont.context_len = bs;
    cont.query_len = 2;
    cont.blocks = {0, 0};
    run_mixer(ctx, m, cont);  // continuation prefill over one cached block
  }
};

CS_REGISTER_WARMER(TqDecodeWarmup);

}  // namespace
}  // namespace coldstart
