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

#include "harness/models/turboquant_attention.h"
#include "harness/replay/engine.h"
#include "warmers/warmer.h"

namespace coldstart {
namespace {

class TqDecodeWarmup final : public Warmer {
 public:
  std::string name() const override { return "tq-decode-warmup"; }
  std::string description() const override {
    return "TurboQuant: compile store/decode/dequant kernels with small synthetic calls per "
           "distinct layer config (vLLM PR #42215)";
  }

  void run(Engine& engine) override {
    auto* tq = dynamic_cast<TurboQuantAttention*>(&engine.attention());
    if (tq == nullptr) {
      engine.log("tq-decode-warmup: no TurboQuant attention layers, nothing to warm");
      return;
    }
    std::set<std::string> warmed;
    for (int layer = 0; layer < tq->num_layers(); ++layer) {
      if (!warmed.insert(tq->layer_compile_config(layer)).second) continue;
      warm_layer(engine, *tq, layer);
    }
    engine.log(fmt::format("tq-decode-warmup: {} layer(s), {} distinct compile config(s)",
                           tq->num_layers(), warmed.size()));
  }

 private:
  // Synthetic q/k/v laid out as the model hands them to attention (q and k contiguous after RoPE,
  // v a column slice of the fused QKV projection), so strides specialize the same way.
  static void run_backend(Engine& engine, TurboQuantAttention& tq, int layer, const SeqStep& s) {
    const auto& m = engine.scenario().model;
    const int64_t n = s.query_len, D = m.head_dim, Hq = m.num_attention_heads,
                  Hk = m.num_key_value_heads;
    const auto opt = at::TensorOptions().dtype(at::kBFloat16).device(engine.device());
    at::Tensor qkv = at::empty({n, (Hq + 2 * Hk) * D}, opt);
    if (engine.mode() == DeviceMode::kCuda) qkv.normal_();
    at::Tensor q = qkv.narrow(1, 0, Hq * D).contiguous();
    at::Tensor k = qkv.narrow(1, Hq * D, Hk * D).contiguous();
    at::Tensor v = qkv.narrow(1, (Hq + Hk) * D, Hk * D);
    at::Tensor out = at::empty({n, Hq * D}, opt);
    ForwardBatch batch = engine.make_batch({s});
    tq.forward(layer, q, k, v, out, batch);
  }

  static void warm_layer(Engine& engine, TurboQuantAttention& tq, int layer) {
    const int bs = tq.layout().block_size;
    // Everything lives in the null block 0, which no request uses.
    SeqStep decode;
    decode.context_len = bs - 1;
    decode.query_len = 1;
    decode.blocks = {0};
    run_backend(engine, tq, layer, decode);  // cache store + batch-1 split-KV decode
    SeqStep cont;
    cont.context_len = bs;
    cont.query_len = 2;
    cont.blocks = {0, 0};
    run_backend(engine, tq, layer, cont);  // continuation prefill over one cached block
  }
};

CS_REGISTER_WARMER(TqDecodeWarmup);

}  // namespace
}  // namespace coldstart
