// tq-reserve-max: the approach of vLLM PR #40798 ("[TurboQuant] Share decode scratch workspace
// across layers"): before the workspace is locked, reserve the largest scratch the TurboQuant
// backend can ask for: decode at max_num_seqs sequences and a continuation prefill over
// max_model_len - 1 cached tokens (rounded up to the block size). Compiles nothing, so the
// TurboQuant kernels still compile on the first request.
#include <fmt/format.h>

#include <algorithm>

#include "warmers/warmer.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace {

/// The mixers this file's warmers warm (Warmer::mixers_used).
const MixerRef kTurboQuantMixer{"turboquant_4bit_nc"};

class TqReserveMax final : public Warmer {
 public:
  std::string name() const override { return "tq-reserve-max"; }
  std::vector<std::string> mixers_used() const override { return {kTurboQuantMixer.name()}; }
  std::string description() const override {
    return "TurboQuant: reserve the max decode / continuation workspace before the lock, "
           "compiling nothing (vLLM PR #40798)";
  }

  void run(WarmupContext& ctx) override {
    const std::vector<Mixer*> layers = ctx.mixers(kTurboQuantMixer);
    if (layers.empty()) {
      ctx.skip("no TurboQuant attention layers, nothing to reserve");
      return;
    }
    // One workspace shared by every layer: the largest single request of any layer.
    int64_t bytes = 0;
    for (Mixer* m : layers) bytes = std::max(bytes, m->max_workspace_bytes());
    ctx.workspace().reserve(bytes, CS_HERE);
    ctx.log(fmt::format("tq-reserve-max: {} B reserved (largest decode / continuation scratch)",
                        bytes));
  }
};

CS_REGISTER_WARMER(TqReserveMax);

}  // namespace
}  // namespace coldstart
