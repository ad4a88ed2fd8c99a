// The replay engine (engine.h), part 5 of 5: recording the result: the device meta block and
// the snapshots sent after every phase (compiles, workspace, model report).
#include "harness/engine/engine.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>

#include "harness/engine/engine_internal.h"

namespace coldstart {

using engine_detail::Clock;
using engine_detail::cdiv;
using engine_detail::ms_since;

nlohmann::json device_meta_json(const DeviceInfo& dev) {
  const Target& t = dev.target;
  return {{"mode", device_mode_name(dev.mode)}, {"device_name", dev.name},
          {"sm", dev.sm}, {"sm_count", dev.sm_count},
          {"driver", dev.driver_version}, {"cuda", dev.cuda_runtime_version},
          {"nvrtc", dev.nvrtc_version}, {"torch", dev.torch_version},
          {"target", {{"profile", t.profile}, {"device_name", t.device_name}, {"arch", t.arch},
                      {"sm_count", t.sm_count},
                      {"shared_memory_per_block", t.shared_memory_per_block},
                      {"memory_bytes", t.memory_bytes}, {"context_bytes", t.context_bytes},
                      {"library_growth_bytes", t.library_growth_bytes}}}};
}

void Engine::snapshot() {
  const jit::ReportingFrame reporting;  // left out of TTFT, so out of its host split too
  const auto t0 = Clock::now();
  snapshot_inner();
  snapshot_ms_ += ms_since(t0);
}

void Engine::snapshot_inner() {
  const auto recs = jit_ ? jit_->monitor().records() : std::vector<jit::CompileRecord>{};
  result_.startup_compiles = 0;
  result_.hot_path_compiles.clear();
  result_.startup_compile_list.clear();
  // A coverage sweep records its cold keys without compiling them (source "key"); the pass after
  // it compiles each once (phase envelope_compile), and that time is the key's compile time.
  std::map<std::string, const jit::CompileRecord*> compiled_after_sweep;
  for (const auto& r : recs)
    if (r.phase == engine_detail::kEnvelopeCompilePhase) compiled_after_sweep.emplace(r.key, &r);
  for (const auto& r : recs) {
    if (r.phase == engine_detail::kEnvelopeCompilePhase) continue;
    CompileEvent ev{r.kernel,         r.key,    r.compile_ms,     r.phase,
                    r.source,         r.selector, r.tuning_key, r.config,
                    r.num_candidates, r.reused, r.step};
    if (r.source == "key") {
      if (const auto it = compiled_after_sweep.find(r.key); it != compiled_after_sweep.end()) {
        ev.compile_ms = it->second->compile_ms;
        ev.reused = it->second->reused;
      }
    }
    if (r.hot_path) {
      result_.hot_path_compiles.push_back(ev);
    } else {
      if (r.source == "nvrtc") ++result_.startup_compiles;
      result_.startup_compile_list.push_back(ev);
    }
  }
  // Every autotuning (kernel, tuning key, phase, candidates, pick, wall / compile / benchmark
  // ms, each candidate's median on the GPU; benchmark and candidate times null in compile-only
  // mode, where nothing runs).
  nlohmann::json tunes = nlohmann::json::array();
  if (jit_) {
    for (const auto& a : jit_->monitor().autotunes()) {
      nlohmann::json cand = nlohmann::json::object();
      for (const auto& [name, ms] : a.candidate_ms) cand[name] = ms ? nlohmann::json(*ms) : nullptr;
      const bool timed = mode() == DeviceMode::kCuda;
      tunes.push_back({{"kernel", a.kernel},
                       {"tuning_key", a.tuning_key},
                       {"phase", a.phase},
                       {"hot_path", a.hot_path},
                       {"config", a.config},
                       {"num_candidates", a.num_candidates},
                       {"num_failed", a.num_failed},
                       {"tune_ms", a.tune_ms},
                       {"compile_ms", a.compile_ms},
                       {"benchmark_ms", timed ? nlohmann::json(a.tune_ms - a.compile_ms) : nullptr},
                       {"candidate_ms", cand}});
      if (a.step.request >= 0) {
        tunes.back()["request"] = a.step.request;
        tunes.back()["wave"] = a.step.wave;
        tunes.back()["step"] = a.step.step;
      }
    }
  }
  if (!tunes.empty()) result_.extra["autotunes"] = std::move(tunes);
  // The steady request is the warm reference of first / steady: one that compiled, loaded or
  // autotuned anything is not, so the count is recorded and the ratio dropped.
  int cold = 0;
  for (const auto& r : recs) cold += r.hot_path && r.step.wave == 1;
  if (jit_)
    for (const auto& a : jit_->monitor().autotunes()) cold += a.hot_path && a.step.wave == 1;
  if (cold > 0) {
    result_.extra["steady_cold"] = cold;
    result_.extra.erase("ttft_first_over_steady");
  }
  if (jit_) {
    const std::vector<std::string> warnings = jit_->monitor().warnings();
    if (!warnings.empty()) result_.extra["jit_warnings"] = warnings;
  }
  if (workspace_) {
    result_.workspace.locked_bytes = workspace_->locked_bytes();
    result_.workspace.peak_requested_bytes = workspace_->peak_requested_bytes();
    result_.workspace.num_slots = workspace_->num_slots();
    result_.extra["workspace_current_bytes"] = workspace_->current_bytes();
  }
  if (model_) {
    nlohmann::json r = model_->report();
    if (!r.is_null()) result_.extra["model"] = std::move(r);
  }
  if (options_.on_snapshot) options_.on_snapshot(result_, current_phase_);
}

}  // namespace coldstart
