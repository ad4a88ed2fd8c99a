// The serving envelope (EngineOptions::envelope, `coldstart coverage`, issue 29): after startup,
// one step of each class of request and batch shape the scenario's server can be sent, with the
// JIT in key-only mode (JitRuntime::set_key_only), so every kernel key the envelope reaches is
// known without compiling it, next to the keys startup compiled.
//
// The classes, first version, in this order (each a step the engine runs as it would serve it:
// graph replay where a captured size holds it, else eager, through Engine::run_step):
//   prefill n     one sequence, no cached context, n = 1 .. min(max_num_batched_tokens,
//                 max_model_len - 1): every prompt chunk a fresh prompt can start with. Every
//                 count is run (no class derivation yet: each family's token-count classes, e.g.
//                 fused_moe::envelope_token_classes, are to replace it where proved);
//   continue n    one sequence whose first max_num_batched_tokens tokens are cached, n new ones
//                 (the chunked prefill's later chunks), when max_model_len allows a second chunk:
//                 n = 1 .. min(max_num_batched_tokens, max_model_len - 1 - max_num_batched_tokens);
//   decode B      B sequences of one new token each, B = 1 .. max_num_seqs.
// Batches mixing decodes with a prefill, several prefills, and speculative verify rows are not
// enumerated yet. Keys inside a replayed CUDA graph are not reached by the replay (its kernels
// were captured at startup); such a class is counted as covered by its graph.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/engine/engine.h"
#include "harness/engine/engine_internal.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace {

struct EnvelopeClass {
  std::string label;           ///< "prefill 17", "continue 5 after 8192", "decode 12"
  std::vector<SeqStep> seqs;
  int tokens = 0;
};

std::vector<EnvelopeClass> envelope_classes(const EngineConfig& e) {
  std::vector<EnvelopeClass> out;
  const int chunk = e.max_num_batched_tokens;
  const int bs = e.block_size;
  for (int n = 1; n <= std::min(chunk, e.max_model_len - 1); ++n)
    out.push_back({fmt::format("prefill {}", n), {null_block_step(0, n, bs)}, n});
  for (int n = 1; n <= std::min(chunk, e.max_model_len - 1 - chunk); ++n)
    out.push_back({fmt::format("continue {} after {}", n, chunk), {null_block_step(chunk, n, bs)}, n});
  for (int b = 1; b <= e.max_num_seqs; ++b) {
    EnvelopeClass c{fmt::format("decode {}", b), {}, b};
    for (int r = 0; r < b; ++r) {
      SeqStep s = null_block_step(1, 1, bs);
      s.req_slot = r;
      c.seqs.push_back(s);
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

void Engine::do_envelope() {
  if (mode() == DeviceMode::kCuda) {
    throw InputError("the serving envelope (replay --envelope) runs in compile-only mode only: "
                     "key-only steps launch nothing");
  }
  jit::JitRuntime& rt = *jit_;
  std::set<std::string> startup_keys;
  for (const jit::CompileRecord& r : rt.monitor().records()) startup_keys.insert(r.key);
  const std::vector<EnvelopeClass> classes = envelope_classes(scenario_.engine);
  const auto t0 = std::chrono::steady_clock::now();
  rt.clear_reached_keys();
  rt.set_key_only(true);
  nlohmann::json cold = nlohmann::json::array(), loaded = nlohmann::json::array();
  size_t done = 0;
  // Written whether the sweep ends or a class fails (a crash the engine raises in that step):
  // what the classes before it reached is kept, and the failing class is named.
  auto record = [&](const std::string& stopped_at) {
    rt.set_key_only(false);
    rt.monitor().set_step(StepContext{});
    const std::vector<std::string> reached = rt.reached_keys();
    size_t covered = 0;
    for (const std::string& k : reached) covered += startup_keys.count(k);
    nlohmann::json e = {
        {"classes", classes.size()},
        {"classes_run", done},
        {"startup_keys", startup_keys.size()},
        {"reached_keys", reached.size()},
        {"covered_at_startup", covered},
        {"loaded_keys", loaded.size()},
        {"cold_keys", cold.size()},
        {"cold", cold},
        {"loaded", loaded},
        {"sweep_ms",
         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()}};
    if (!stopped_at.empty()) e["stopped_at_class"] = stopped_at;
    result_.extra["envelope"] = std::move(e);
  };
  for (size_t i = 0; i < classes.size(); ++i) {
    const EnvelopeClass& c = classes[i];
    StepContext ctx;
    ctx.request = static_cast<int>(i);
    ctx.wave = 2;
    ctx.step = 0;
    ctx.batch_tokens = c.tokens;
    ctx.batch_seqs = static_cast<int>(c.seqs.size());
    rt.monitor().set_step(ctx);
    const size_t before = rt.monitor().num_records();
    try {
      run_step(c.seqs);
    } catch (...) {
      record(c.label);
      log(fmt::format("envelope: stopped in class '{}' ({} of {} classes run)", c.label, done,
                      classes.size()));
      throw;
    }
    ++done;
    // Most classes reach no new key: copy the monitor's records only when one did.
    if (rt.monitor().num_records() == before) continue;
    const std::vector<jit::CompileRecord> recs = rt.monitor().records();
    for (size_t k = before; k < recs.size(); ++k) {
      if (recs[k].source != "key" && recs[k].source != "disk") continue;
      (recs[k].source == "key" ? cold : loaded)
          .push_back({{"kernel", recs[k].kernel}, {"key", recs[k].key}, {"class", c.label},
                      {"tokens", c.tokens}, {"seqs", c.seqs.size()}});
    }
  }
  record("");
  const nlohmann::json& e = result_.extra["envelope"];
  log(fmt::format("envelope: {} classes, {} keys reached, {} compiled at startup, {} on disk, "
                  "{} cold",
                  classes.size(), e["reached_keys"].get<size_t>(),
                  e["covered_at_startup"].get<size_t>(), loaded.size(), cold.size()));
}

}  // namespace coldstart
