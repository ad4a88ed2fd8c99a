// The replay engine (engine.h), part 1 of 5: construction, the startup phases in order (run,
// phase), init and weights, the warmers' context (WarmupContext), workspace lock and sampler
// warmup. The other parts: engine_memory.cpp (profile run, KV cache allocation),
// engine_graphs.cpp (CUDA graph capture and replay, eager steps, sampling),
// engine_requests.cpp (batches, the request loop and scheduler glue), engine_results.cpp
// (result snapshots, first-time costs, the device meta block).
#include "harness/engine/engine.h"

#include "harness/dist/rank_group.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "harness/engine/engine_internal.h"
#include "harness/models/spec_decode.engine_keys.h"
#include "harness/engine/workspace_policy.engine_keys.h"
#include "harness/runtime/meta_memory.h"
#include "harness/runtime/nvtx.h"
#include "warmers/warmer.h"

namespace coldstart {

using engine_detail::Clock;
using engine_detail::captures_piecewise;
using engine_detail::cdiv;
using engine_detail::ms_since;

namespace {
/// The text of an exception as a result's `error`: c10 errors without their C++ backtrace.
std::string error_text(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

/// True for the failures the replayed engine itself raises: the workspace-lock assertion, a fixed
/// workspace's overflow, a replay of a graph whose buffers moved since capture (graph_ledger.h:
/// the engine would run on released memory), a kernel first loaded inside a graph capture (the
/// driver refuses it), a hot-path compile refused by the JIT monitor
/// (`--jit-monitor error`, vLLM's strict mode), vLLM's refusal to start when the KV cache gets too
/// little memory, and running out of device memory (the compile-only memory model's, or torch's
/// allocator message, matched by text so libtorch 1.x, which has no OutOfMemoryError class,
/// builds too). Anything else (a kernel wrapper's argument
/// check, a CUDA error of one of the harness's kernels, a libtorch shape error) is a harness
/// fault.
bool engine_raised(const std::exception& e) {
  if (dynamic_cast<const WorkspaceLockedError*>(&e) || dynamic_cast<const jit::HotPathCompileError*>(&e) ||
      dynamic_cast<const WorkspaceOverflowError*>(&e) || dynamic_cast<const StaleGraphReplayError*>(&e) ||
      dynamic_cast<const jit::CaptureUnsupportedError*>(&e) ||
      dynamic_cast<const KvCacheMemoryError*>(&e) || dynamic_cast<const DeviceOutOfMemoryError*>(&e) ||
      dynamic_cast<const dist::CollectiveError*>(&e))
    return true;
  return std::string(e.what()).find("CUDA out of memory") != std::string::npos;
}

}  // namespace

Engine::Engine(const Scenario& scenario, const StrategySpec& strategy, std::string variant,
               EngineOptions options)
    : scenario_(scenario), strategy_(strategy), variant_(std::move(variant)),
      options_(std::move(options)) {
  result_.strategy = strategy_.name;
  result_.variant = variant_;
  result_.warmers = strategy_.warmers;
  result_.outcome = Outcome::kError;
  result_.extra["allow_hot_path_compiles"] = strategy_.allow_hot_path_compiles;
  // Speculative decoding: vLLM rounds the capture sizes before anything is built from them
  // (spec_decode.engine_keys.h), so every reader of the list (graph capture, the attention
  // backend's 3D threshold) sees the rounded one.
  EngineConfig& e = scenario_.engine;
  if (const int k = num_speculative_tokens(e); k > 0) {
    nlohmann::json spec = {{"num_speculative_tokens", k},
                           {"accepted_per_step", spec_accepted_tokens(e)},
                           {"verify_query_len", k + 1},
                           {"warmup_metadata", warmups_use_capture_metadata(e) ? "capture" : "build"},
                           {"method", e.string_key("speculative_method")},
                           {"draft_model",
                            !uses_mtp_drafter(e) ? "not replayed (synthetic draft tokens)"
                            : captures_piecewise(e.cudagraph_mode)
                                ? "the model's MTP head (eager, passes padded to capture sizes "
                                  "as for its piecewise graphs; drafts are synthetic ids)"
                                : "the model's MTP head (eager, unpadded: no piecewise graphs; "
                                  "drafts are synthetic ids)"}};
    if (spec_decode_rounds_capture_sizes(e)) {
      spec["capture_sizes_given"] = e.cudagraph_capture_sizes;
      e.cudagraph_capture_sizes = spec_decode_capture_sizes(e.cudagraph_capture_sizes, k + 1);
      spec["capture_sizes"] = e.cudagraph_capture_sizes;
    }
    result_.extra["spec_decode"] = spec;
  }
  sdpa_spans_ = std::make_unique<GpuSpans>(mode());
  model_spans_ = std::make_unique<GpuSpans>(mode());
  mixer_spans_ = std::make_unique<GpuSpans>(mode());
  // Spans leave out what held the host inside them (a hot-path compile, a cudaMalloc): it is
  // reported as its own part, not again as GPU time.
  auto stall = [this] { return host_stall_ms(); };
  for (GpuSpans* s : {sdpa_spans_.get(), model_spans_.get(), mixer_spans_.get()}) s->set_stall_clock(stall);
}

nlohmann::json Engine::host_split(const jit::HostTimes& from, const jit::HostTimes& to) {
  nlohmann::json by_part = nlohmann::json::object();
  for (size_t k = 0; k < jit::kNumHostParts; ++k)
    by_part[jit::host_part_name(static_cast<jit::HostPart>(k))] = to[k] - from[k];
  return by_part;
}

double Engine::host_stall_ms() const {
  return (jit_ ? jit_->monitor().host_stall_ms() : 0.0) + (api_timer_ ? api_timer_->stall_ms() : 0.0);
}

Engine::~Engine() = default;

c10::Device Engine::device() const {
  return mode() == DeviceMode::kCuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kMeta);
}

int Engine::max_blocks_per_req() const {
  return cdiv(scenario_.engine.max_model_len, scenario_.engine.block_size);
}

std::vector<Mixer*> Engine::mixers(const MixerRef& ref) {
  if (!ref.registered())
    throw Error("a warmer asked for mixers '" + ref.name() + "', which no registered mixer "
                "backend has as its name or kind");
  std::vector<Mixer*> out;
  for (auto& m : mixers_)
    if (ref.matches(*m)) out.push_back(m.get());
  return out;
}

std::vector<int64_t> Engine::expert_token_classes() {
  return model_->expert_token_classes(scenario_.engine.max_num_batched_tokens);
}

void Engine::run_local_experts(int64_t M) { model_->run_local_experts(M); }

void Engine::build_mixers() {
  // The engine walks the model's layer plan: one mixer per layer from its registered backend.
  mixers_.clear();
  nlohmann::json plan = nlohmann::json::array();
  for (const MixerSpec& spec : model_->layer_plan()) {
    mixers_.push_back(make_mixer(spec, mixer_ctx_));
    plan.push_back(spec.summary() + " " + mixers_.back()->backend());
  }
  result_.extra["layer_plan"] = plan;
  // The drafter's layers follow (vLLM registers the MTP layers in the same forward context, so
  // they share the KV cache config and every layer-wide walk, warmers' included).
  if (drafter_) {
    nlohmann::json draft = nlohmann::json::array();
    for (const MixerSpec& spec : drafter_->layer_plan()) {
      mixers_.push_back(make_mixer(spec, mixer_ctx_));
      draft.push_back(spec.summary() + " " + mixers_.back()->backend());
    }
    result_.extra["drafter_layer_plan"] = draft;
  }
}

int64_t Engine::max_mixer_output_width() const {
  int64_t w = 0;
  for (const auto& m : mixers_) w = std::max(w, m->spec().output_width);
  return w;
}

void Engine::log(const std::string& line) {
  if (options_.on_log) options_.on_log(line);
}

void Engine::skip(const std::string& reason) {
  log(current_warmer_ + ": " + reason);
  result_.extra["warmers_skipped"][current_warmer_] = reason;
}

void Engine::report(const std::string& summary, const nlohmann::json& data) {
  log(current_warmer_ + ": " + summary);
  nlohmann::json entry = data.is_object() ? data : nlohmann::json::object();
  entry["summary"] = summary;
  result_.extra["warmer_reports"][current_warmer_] = entry;
}

void Engine::with_phase_memory(const std::string& key, bool accumulate,
                               const std::function<void()>& body) {
  // Its own peak window: the most allocated at once while `body` ran, with what earlier phases
  // left allocated. Recorded when `body` fails too (an out-of-memory error names the phase).
  reset_peak_memory(mode());
  auto record = [&] {
    const MemoryStats m = memory_stats(mode());
    nlohmann::json& slot = result_.extra["phase_memory"][key];
    long long peak = m.peak_allocated;
    if (accumulate && slot.is_object()) peak = std::max(peak, slot.value("peak_allocated_bytes", 0LL));
    slot = {{"peak_allocated_bytes", peak}, {"allocated_bytes", m.allocated}};
  };
  try {
    body();
  } catch (...) {
    try {
      record();
    } catch (...) {  // the phase's own error is the one to report
    }
    throw;
  }
  record();
}

void Engine::phase(const std::string& name, int request, const std::function<void()>& body) {
  current_phase_ = name;
  if (jit_) jit_->monitor().set_phase(name);
  log(request < 0 ? name : fmt::format("request {}: {}", request, name));
  snapshot();
  engine_detail::stall_if_asked(name);
  NvtxRange range(name.c_str());
  const MemoryStats mem0 = request >= 0 ? memory_stats(mode()) : MemoryStats{};
  for (GpuSpans* s : {sdpa_spans_.get(), model_spans_.get(), mixer_spans_.get()}) s->set_active(request >= 0);
  const jit::HostTimes host0 = api_timer_ ? api_timer_->totals() : jit::HostTimes{};
  const size_t first_record = jit_ ? jit_->monitor().num_records() : 0;  // init creates jit_
  const auto t0 = Clock::now();
  with_phase_memory(request < 0 ? name : std::to_string(request) + "." + name,
                    /*accumulate=*/false, [&] {
                      body();
                      device_synchronize(mode());
                    });
  // A compile served from the run's compile memo (compile-only mode) took no time here; charge it
  // what compiling that key measured earlier in this run, on as many threads as compiled it here
  // (a warmer's pool), so identical work costs the same whether or not the memo served it.
  const double charged = jit_ ? jit_->monitor().memo_charge_ms_since(first_record) : 0.0;
  result_.phases.push_back(PhaseTiming{name, ms_since(t0) + charged, std::nullopt, request});
  if (request >= 0 && mode() == DeviceMode::kCuda) {
    // Caching-allocator growth inside a request phase: new cudaMalloc segments and bytes.
    const MemoryStats mem1 = memory_stats(mode());
    const std::string key = std::to_string(request) + "." + name;
    result_.extra["allocator_growth"][key] = {
        {"new_segments", mem1.segments_allocated - mem0.segments_allocated},
        {"reserved_bytes", mem1.reserved - mem0.reserved}};
  }
  if (sdpa_spans_ && request >= 0) {
    // Where a request phase's time went: libtorch prefill attention, the model's own pieces
    // (GEMMs, norms, RoPE; eager runs only), sampling + copy to host. Same keys for both
    // requests, so first-minus-steady differences name the first-time costs.
    const double sdpa = sdpa_spans_->take_total_ms();
    const double pieces = model_spans_->take_total_ms();
    const double mixers = mixer_spans_->take_total_ms();
    if (request >= 0 && mode() == DeviceMode::kCuda) {
      const std::string key = std::to_string(request) + "." + name;
      result_.extra["prefill_attention_gpu_ms"][key] = sdpa;
      result_.extra["model_pieces_gpu_ms"][key] = pieces;
      result_.extra["mixers_gpu_ms"][key] = mixers;
      result_.extra["sampling_ms"][key] = sampling_ms_;
      if (api_timer_) result_.extra["host_ms"][key] = host_split(host0, api_timer_->totals());
    }
  }
  sampling_ms_ = 0;
  snapshot();
}

StrategyResult Engine::run() {
  run_start_ = Clock::now();
  const DeviceInfo& dev = options_.device;
  result_.extra["device_mode"] = device_mode_name(dev.mode);
  const char* loading = std::getenv("CUDA_MODULE_LOADING");
  result_.extra["cuda_module_loading"] = loading ? loading : "LAZY (driver default)";
  result_.extra["meta"] = device_meta_json(dev);
  // Compile-only mode counts the meta device's storages, so each phase's memory is known without
  // a GPU (meta_memory.h). A replay child runs one strategy, so the count starts from nothing.
  // The target's device memory bounds it: an allocation past it raises torch's out-of-memory
  // error, as the device would (0, unbounded, when the target's memory is unknown).
  if (dev.mode != DeviceMode::kCuda) {
    track_meta_memory();
    set_meta_memory_limit(dev.target.memory_bytes);
    // The CUDA context the worker's init creates holds part of the device from the start
    // (target.h: context_bytes, the H200's measurement).
    set_meta_outside_allocator_bytes(dev.target.memory_bytes > 0 ? dev.target.context_bytes : 0);
  }
  try {
    double startup = 0;
    auto timed = [&](const char* name, void (Engine::*fn)()) {
      phase(name, -1, [&] { (this->*fn)(); });
      startup += result_.phases.back().ms;
    };
    timed("init", &Engine::do_init);
    timed("load_weights", &Engine::do_load_weights);
    timed("profile_run", &Engine::do_profile_run);
    timed("kv_cache_alloc", &Engine::do_kv_cache_alloc);
    timed("kernel_warmup", &Engine::do_kernel_warmup);
    timed("graph_capture", &Engine::do_graph_capture);
    timed("workspace_lock", &Engine::do_workspace_lock);
    timed("sampler_warmup", &Engine::do_sampler_warmup);
    result_.startup_ms = startup;
    // The first wave (every request not marked steady) runs together under the scheduler; the
    // steady request, if any, runs alone afterwards.
    std::vector<int> first_wave, steady;
    for (size_t r = 0; r < scenario_.requests.size(); ++r) {
      (scenario_.requests[r].steady ? steady : first_wave).push_back(static_cast<int>(r));
    }
    if (options_.envelope) {
      phase("envelope", -1, [&] { do_envelope(); });
    } else {
      if (!first_wave.empty()) do_wave(first_wave, 0);
      if (!steady.empty()) do_wave(steady, 1);
    }
    result_.outcome = Outcome::kOk;
    current_phase_.clear();
  } catch (const InputError& e) {
    // Not something the replayed engine raises: this device lacks a kernel the plan needs, or the
    // requests cannot be replayed with these settings (a harness limit, outcome `error`).
    result_.outcome = Outcome::kError;
    result_.error = std::string("not replayable: ") + e.what();
    result_.failed_phase = current_phase_;
    log("error in " + current_phase_ + ": " + *result_.error);
  } catch (const std::exception& e) {
    const bool crash = engine_raised(e);
    if (const auto* t = dynamic_cast<const dist::CollectiveTimeoutError*>(&e))
      result_.extra["collective_timeout"] = {{"seq", t->seq}};
    result_.outcome = crash ? Outcome::kCrash : Outcome::kError;
    result_.error = crash ? error_text(e) : "harness fault: " + error_text(e);
    if (crash && result_.error->find("CUDA out of memory") != std::string::npos)
      *result_.error += " " + memory_holders(e);
    result_.failed_phase = current_phase_;
    log(std::string(crash ? "crash" : "error") + " in " + current_phase_ + ": " + *result_.error);
    // Peers still waiting for this rank (or failing because it left) name it as stopped.
    if (options_.ranks) options_.ranks->mark_stopped(*result_.error);
  }
  if (!mixers_.empty()) record_declared_scratch();
  if (ledger_.num_graphs() > 0 || !workspace_ || workspace_->policy() != WorkspacePolicy::kLock)
    result_.extra["graph_ledger"] = ledger_.to_json();
  // Which scheduler step and batch it failed in, when a request step was running.
  if (result_.outcome != Outcome::kOk && jit_) {
    const StepContext st = jit_->monitor().step();
    if (st.request >= 0) {
      result_.extra["failed_step"] = {{"request", st.request}, {"wave", st.wave},
                                      {"step", st.step},       {"batch_tokens", st.batch_tokens},
                                      {"batch_seqs", st.batch_seqs}, {"batch_mixed", st.batch_mixed}};
      if (st.drafter_pass > 0)
        result_.extra["failed_step"]["drafter"] = {{"pass", st.drafter_pass},
                                                   {"tokens", st.drafter_tokens}};
      if (!step_graph_.empty()) result_.extra["failed_step"]["graph"] = step_graph_;
      if (!step_eager_reason_.empty())
        result_.extra["failed_step"]["eager_reason"] = step_eager_reason_;
    }
  }
  snapshot();
  return result_;
}

void Engine::do_init() {
  jit::JitOptions jo = options_.jit;
  if (jo.arch.empty()) jo.arch = options_.device.arch();
  jo.launch = mode() == DeviceMode::kCuda;
  // The autotuner's benchmark buffer comes from torch's allocator on the engine's device, as
  // Triton's does: counted by the memory model in compile-only mode, by the caching allocator on
  // a GPU, and able to run out of memory in either.
  // Each request is noted (phase included) before the allocation, so a run whose autotune could
  // not get the buffer still declares it, and an out-of-memory error names the autotune.
  jo.benchmark_scratch = [this, dev = device()](int64_t bytes, const std::string& what)
      -> std::shared_ptr<void> {
    {
      const std::lock_guard<std::mutex> lock(bench_buffer_mu_);
      bench_buffer_phases_.insert(jit_ ? jit_->monitor().phase() : std::string());
    }
    try {
      return std::make_shared<at::Tensor>(
          at::empty({bytes / 4}, at::TensorOptions().dtype(at::kInt).device(dev)));
    } catch (const std::exception&) {
      const std::lock_guard<std::mutex> lock(bench_buffer_mu_);
      bench_buffer_failed_for_ = what;  // memory_holders() names it
      throw;
    }
  };
  jit_ = std::make_unique<jit::JitRuntime>(jo);
  jit_->monitor().set_phase("init");
  if (dist::RankGroup* g = options_.ranks) {
    // What this rank compiles is published (a peer's timeout names it) and attached to its
    // next collective (the stall analysis names it); collectives carry the phase and step.
    jit_->monitor().set_before_compile_hook(
        [g](const jit::CompileKey& k) { g->compile_started(k.kernel, k.str()); });
    jit_->monitor().set_observer([g](const jit::CompileRecord& r) {
      g->compile_finished(r.kernel, r.key, r.compile_ms, r.source);
    });
    jit_->monitor().set_autotune_observer([g](const jit::AutotuneRecord&) { g->autotuned(); });
    g->set_where([this] {
      const StepContext st = jit_->monitor().step();
      return dist::Where{jit_->monitor().phase(), st.request, st.step};
    });
  }
  // Moves of graph-referenced buffers are charged to the phase and scheduler step running.
  // During graph capture the phase names the capture size being warmed up or captured.
  ledger_.set_where([this] {
    std::string phase = jit_->monitor().phase();
    if (phase == "graph_capture" && !capture_step_.empty()) phase += " (" + capture_step_ + ")";
    return LedgerWhere{phase, jit_->monitor().step()};
  });
  const WorkspacePolicy policy = workspace_policy_from_name(workspace_policy_key(scenario_.engine));
  result_.extra["workspace_policy"] = workspace_policy_name(policy);
  workspace_ = std::make_unique<WorkspaceManager>(
      device(), 1, policy,
      policy == WorkspacePolicy::kFixed ? workspace_fixed_bytes(scenario_.engine) : 0);
  workspace_->set_ledger(&ledger_);
  if (mode() == DeviceMode::kCuda) {
    // Creates the CUDA context and torch's allocator state, as an engine's worker init does.
    at::empty({1}, at::TensorOptions().device(device())).fill_(0);
  }
  // vLLM's init snapshot (gpu_worker.py init_device, MemorySnapshot once the device is set up):
  // what is outside torch's allocator before the model exists (the CUDA context) is not charged
  // to the KV budget later; only its increase is (memory_profiling's non_torch_increase).
  {
    const MemoryStats m = memory_stats(mode());
    outside_at_init_bytes_ = m.total_device - m.free_device - m.reserved;
    // vLLM then refuses to start when less than gpu_memory_utilization of the device is free.
    if (m.total_device > 0)
      check_startup_free_memory(m.free_device, m.total_device, scenario_.engine.gpu_memory_utilization);
  }
  // Prefill attention stand-in: libtorch SDPA without its cuDNN backend unless asked
  // (COLDSTART_SDPA_CUDNN=1), see configure_sdpa_backends().
  const char* cudnn = std::getenv("COLDSTART_SDPA_CUDNN");
  result_.extra["sdpa_backends"] =
      configure_sdpa_backends(mode(), cudnn != nullptr && std::string(cudnn) == "1");
  MixerContext ctx;
  ctx.mode = mode();
  ctx.device = device();
  ctx.jit = jit_.get();
  ctx.workspace = workspace_.get();
  ctx.target = &options_.device.target;
  ctx.model = &scenario_.model;
  ctx.engine = &scenario_.engine;
  ctx.prefill_attention_spans = sdpa_spans_.get();
  ctx.shared_buffers = &shared_buffers_;
  ctx.ranks = options_.ranks;
  mixer_ctx_ = ctx;
  model_ = make_model(scenario_.model, ctx);
  if (uses_mtp_drafter(scenario_.engine)) {
    drafter_ = model_->make_mtp_drafter();
    CS_CHECK(drafter_ != nullptr, "check_replayable lets the mtp method through only for a "
                                  "family with an MTP head");
  }
  build_mixers();
  // On the meta device in compile-only mode (device()): made on the CPU first, a long
  // max_model_len x max_num_seqs table (8 TiB at 2^31 tokens x 1024 sequences) failed there.
  block_table_ = at::zeros({scenario_.engine.max_num_seqs, max_blocks_per_req()},
                           at::TensorOptions().dtype(at::kInt).device(device()));
  block_table_ledger_id_ = ledger_.add_buffer(
      "the block table", block_table_.numel() * block_table_.element_size(), tensor_address(block_table_));
}

uint64_t Engine::tensor_address(const at::Tensor& t) const {
  return mode() == DeviceMode::kCuda && t.defined() ? reinterpret_cast<uint64_t>(t.data_ptr()) : 0;
}

void Engine::do_load_weights() {
  int64_t bytes = model_->load_weights(options_.seed);
  // The MTP head after the target (it shares the target's embedding and LM head); vLLM loads the
  // drafter in load_model right after the target model.
  if (drafter_) {
    const int64_t draft = drafter_->load_weights(options_.seed + 1);
    result_.extra["drafter_weights_bytes"] = draft;
    bytes += draft;
  }
  result_.extra["weights_bytes"] = bytes;
}

void Engine::do_kernel_warmup() {
  for (const std::string& name : strategy_.warmers) {
    auto w = make_warmer(name);
    log("warmer " + name);
    current_warmer_ = name;
    const auto t0 = Clock::now();
    const size_t first_record = jit_ ? jit_->monitor().num_records() : 0;
    w->run(*this);
    device_synchronize(mode());
    // Charged like the kernel_warmup phase (phase()), so the warmers' times add up to it.
    result_.extra["warmer_ms"][name] =
        ms_since(t0) + (jit_ ? jit_->monitor().memo_charge_ms_since(first_record) : 0.0);
  }
}

void Engine::do_workspace_lock() {
  const WorkspacePolicy policy = workspace_->policy();
  if (policy != WorkspacePolicy::kLock) {
    // Only vLLM V1's manager locks; the other policies never refuse growth after capture.
    result_.extra["workspace_locked"] = false;
    result_.extra["workspace_lock_note"] =
        std::string("workspace_policy ") + workspace_policy_name(policy) + ": never locked";
    return;
  }
  const bool lock = scenario_.engine.cudagraph_mode != CudaGraphMode::kNone;
  if (lock) workspace_->lock();
  result_.extra["workspace_locked"] = lock;
  if (!lock) {
    result_.extra["workspace_lock_note"] =
        "cudagraph_mode none: vLLM's capture_model returns before lock_workspace()";
  }
}

void Engine::do_sampler_warmup() {
  // vLLM Worker.compile_or_warm_up_model after capture_model (gpu_worker.py at 35d5cda1): an
  // eager _dummy_run(min(max_num_seqs, max_num_batched_tokens)) without attention metadata, then
  // _dummy_sampler_run on its last-token hidden states. The workspace is already locked here.
  const EngineConfig& e = scenario_.engine;
  const std::vector<SeqStep> seqs = dummy_seqs(std::min(e.max_num_seqs, e.max_num_batched_tokens));
  ForwardBatch b = make_batch(seqs, /*skip_attention=*/true);
  sample(model_->compute_logits(last_token_hidden(run_eager(b), b)), b.num_reqs);
  jit_->monitor().activate();  // startup is over: the JIT monitor watches the hot path
}

}  // namespace coldstart
