// tq-reserve-max: the approach of vLLM PR #40798 ("[TurboQuant] Share decode scratch workspace
// across layers"): before the workspace is locked, reserve the largest scratch the TurboQuant
// backend can ask for: decode at max_num_seqs sequences and a continuation prefill over
// max_model_len - 1 cached tokens (rounded up to the block size). Compiles nothing, so the
// TurboQuant kernels still compile on the first request.
#include <fmt/format.h>

#include <algorithm>

#include "harness/models/turboquant_attention.h"
#include "harness/replay/engine.h"
#include "warmers/warmer.h"

namespace coldstart {
namespace {

class TqReserveMax final : public Warmer {
 public:
  std::string name() const override { return "tq-reserve-max"; }
  std::string description() const override {
    return "TurboQuant: reserve the max decode / continuation workspace before the lock, "
           "compiling nothing (vLLM PR #40798)";
  }

  void run(Engine& engine) override {
    auto* tq = dynamic_cast<TurboQuantAttention*>(&engine.attention());
    if (tq == nullptr) {
      engine.log("tq-reserve-max: no TurboQuant attention layers, nothing to reserve");
      return;
    }
    const auto& e = engine.scenario().engine;
    const int64_t decode = tq->decode_workspace_bytes(e.max_num_seqs);
    const int64_t cont = tq->continuation_workspace_bytes(e.max_model_len - 1);
    engine.workspace().reserve(std::max(decode, cont), CS_HERE);
    engine.log(fmt::format("tq-reserve-max: decode {} B, continuation {} B reserved", decode, cont));
  }
};

CS_REGISTER_WARMER(TqReserveMax);

}  // namespace
}  // namespace coldstart
