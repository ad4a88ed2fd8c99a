#include "harness/replay/engine.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "harness/replay/engine_internal.h"
#include "harness/replay/kv_cache_plan.h"
#include "harness/runtime/host_upload.h"
#include "harness/runtime/nvtx.h"
#include "warmers/warmer.h"

namespace coldstart {

using engine_detail::Clock;
using engine_detail::cdiv;
using engine_detail::ms_since;

namespace {
/// The text of an exception as a result's `error`: c10 errors without their C++ backtrace.
std::string error_text(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

/// True for the failures the replayed engine itself raises: the workspace-lock assertion, a
/// hot-path compile refused by the JIT monitor (`--jit-monitor error`, vLLM's strict mode), and
/// running out of device memory (torch's allocator message, matched by text so libtorch 1.x,
/// which has no OutOfMemoryError class, builds too). Anything else (a kernel wrapper's argument
/// check, a CUDA error of one of the harness's kernels, a libtorch shape error) is a harness
/// fault.
bool engine_raised(const std::exception& e) {
  if (dynamic_cast<const WorkspaceLockedError*>(&e) || dynamic_cast<const jit::HotPathCompileError*>(&e))
    return true;
  return std::string(e.what()).find("CUDA out of memory") != std::string::npos;
}

}  // namespace

// ---- graphs --------------------------------------------------------------------------------

/// Copies a step's inputs into the static batch a graph of `size` rows was captured with, and
/// pads the rest (token 0 at position 0; with attention metadata, slot -1 and length 0 so the
/// kernels skip the padding rows). Full graphs hold uniform decode batches only, so their
/// query_start_loc (0, 1, ..., size) never changes.
static void copy_into_static(ForwardBatch& captured, const ForwardBatch& step, int size,
                      bool attention_metadata) {
  const int n = step.num_tokens;
  captured.input_ids.narrow(0, 0, n).copy_(step.input_ids);
  captured.positions.narrow(0, 0, n).copy_(step.positions);
  if (attention_metadata) {
    captured.slot_mapping.narrow(0, 0, n).copy_(step.slot_mapping);
    captured.seq_lens.narrow(0, 0, n).copy_(step.seq_lens);
    captured.state_slots.narrow(0, 0, n).copy_(step.state_slots);
  }
  if (size == n) return;
  captured.input_ids.narrow(0, n, size - n).fill_(0);
  captured.positions.narrow(0, n, size - n).fill_(0);
  if (attention_metadata) {
    captured.slot_mapping.narrow(0, n, size - n).fill_(-1);
    captured.seq_lens.narrow(0, n, size - n).fill_(0);
    captured.state_slots.narrow(0, n, size - n).fill_(0);  // the null state slot
  }
}

/// Piecewise graphs of one capture size: one graph per piece, attention eager in between
/// (vLLM's CUDAGraphMode.PIECEWISE).
class PiecewiseGraphs {
 public:
  int size = 0;
  ForwardBatch in;  ///< the batch the graphs were captured with; its tensors are static
  std::vector<CapturedGraph> graphs;
  std::vector<ForwardState> states;  ///< state after each piece (kept alive: static outputs)
  at::Tensor mixer_out;              ///< [size, widest mixer output] written by eager mixers
};

/// One full graph of a uniform-decode size, mixers inside (vLLM's CUDAGraphMode.FULL for
/// decode batches in full_and_piecewise).
class FullGraph {
 public:
  int size = 0;
  ForwardBatch in;  ///< the batch the graph was captured with; its tensors are static
  std::unique_ptr<CapturedGraph> graph;
  at::Tensor hidden;  ///< [size, H] final hidden states, the graph's static output
};

// ---- engine --------------------------------------------------------------------------------

nlohmann::json device_meta_json(const DeviceInfo& dev) {
  const Target& t = dev.target;
  return {{"mode", device_mode_name(dev.mode)}, {"device_name", dev.name},
          {"sm", dev.sm}, {"sm_count", dev.sm_count},
          {"driver", dev.driver_version}, {"cuda", dev.cuda_runtime_version},
          {"nvrtc", dev.nvrtc_version}, {"torch", dev.torch_version},
          {"target", {{"profile", t.profile}, {"device_name", t.device_name}, {"arch", t.arch},
                      {"sm_count", t.sm_count},
                      {"shared_memory_per_block", t.shared_memory_per_block}}}};
}

Engine::Engine(const Scenario& scenario, const StrategySpec& strategy, std::string variant,
               EngineOptions options)
    : scenario_(scenario), strategy_(strategy), variant_(std::move(variant)),
      options_(std::move(options)) {
  result_.strategy = strategy_.name;
  result_.variant = variant_;
  result_.warmers = strategy_.warmers;
  result_.outcome = Outcome::kError;
  result_.extra["allow_hot_path_compiles"] = strategy_.allow_hot_path_compiles;
  sdpa_spans_ = std::make_unique<GpuSpans>(mode());
  model_spans_ = std::make_unique<GpuSpans>(mode());
}

Engine::~Engine() = default;

c10::Device Engine::device() const {
  return mode() == DeviceMode::kCuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kMeta);
}

int Engine::max_blocks_per_req() const {
  return cdiv(scenario_.engine.max_model_len, scenario_.engine.block_size);
}

std::vector<Mixer*> Engine::mixers(const std::string& backend_or_kind) {
  std::vector<Mixer*> out;
  for (auto& m : mixers_) {
    if (m->backend() == backend_or_kind || m->spec().kind == backend_or_kind) out.push_back(m.get());
  }
  return out;
}

void Engine::build_mixers() {
  // The engine walks the model's layer plan: one mixer per layer from its registered backend.
  mixers_.clear();
  nlohmann::json plan = nlohmann::json::array();
  for (const MixerSpec& spec : model_->layer_plan()) {
    mixers_.push_back(make_mixer(spec, mixer_ctx_));
    plan.push_back(spec.summary() + " " + mixers_.back()->backend());
  }
  result_.extra["layer_plan"] = plan;
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

void Engine::snapshot() {
  const auto t0 = Clock::now();
  snapshot_inner();
  snapshot_ms_ += ms_since(t0);
}

void Engine::snapshot_inner() {
  result_.extra["current_phase"] = current_phase_;
  const auto recs = jit_ ? jit_->monitor().records() : std::vector<jit::CompileRecord>{};
  result_.startup_compiles = 0;
  result_.hot_path_compiles.clear();
  result_.startup_compile_list.clear();
  for (const auto& r : recs) {
    CompileEvent ev{r.kernel, r.key, r.compile_ms, r.phase, r.source,
                    r.selector, r.tuning_key, r.config, r.num_candidates, r.reused};
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
    }
  }
  if (!tunes.empty()) result_.extra["autotunes"] = std::move(tunes);
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
  if (options_.on_snapshot) options_.on_snapshot(result_);
}

void Engine::phase(const std::string& name, int request, const std::function<void()>& body) {
  current_phase_ = name;
  if (jit_) jit_->monitor().set_phase(name);
  log(request < 0 ? name : fmt::format("request {}: {}", request, name));
  snapshot();
  engine_detail::stall_if_asked(name);
  NvtxRange range(name.c_str());
  const MemoryStats mem0 = request >= 0 ? memory_stats(mode()) : MemoryStats{};
  sdpa_spans_->set_active(request >= 0);
  model_spans_->set_active(request >= 0);
  const size_t first_record = jit_ ? jit_->monitor().num_records() : 0;  // init creates jit_
  const auto t0 = Clock::now();
  body();
  device_synchronize(mode());
  // A compile served from the run's compile memo (compile-only mode) took no time here; charge it
  // what compiling that key measured earlier in this run, so startup times stay comparable across
  // strategies whether or not the memo was used.
  const double charged =
      jit_ ? jit_->monitor().compile_ms_since(first_record, /*reused_only=*/true) : 0.0;
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
    if (request >= 0 && mode() == DeviceMode::kCuda) {
      const std::string key = std::to_string(request) + "." + name;
      result_.extra["prefill_attention_gpu_ms"][key] = sdpa;
      result_.extra["model_pieces_gpu_ms"][key] = pieces;
      result_.extra["sampling_ms"][key] = sampling_ms_;
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
    if (!first_wave.empty()) do_wave(first_wave, 0);
    if (!steady.empty()) do_wave(steady, 1);
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
    result_.outcome = crash ? Outcome::kCrash : Outcome::kError;
    result_.error = crash ? error_text(e) : "harness fault: " + error_text(e);
    result_.failed_phase = current_phase_;
    log(std::string(crash ? "crash" : "error") + " in " + current_phase_ + ": " + *result_.error);
  }
  snapshot();
  return result_;
}

void Engine::do_init() {
  jit::JitOptions jo = options_.jit;
  if (jo.arch.empty()) jo.arch = options_.device.arch();
  jo.launch = mode() == DeviceMode::kCuda;
  jit_ = std::make_unique<jit::JitRuntime>(jo);
  jit_->monitor().set_phase("init");
  workspace_ = std::make_unique<WorkspaceManager>(device());
  if (mode() == DeviceMode::kCuda) {
    // Creates the CUDA context and torch's allocator state, as an engine's worker init does.
    at::empty({1}, at::TensorOptions().device(device())).fill_(0);
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
  mixer_ctx_ = ctx;
  model_ = make_model(scenario_.model, ctx);
  build_mixers();
  // On the meta device in compile-only mode (device()): made on the CPU first, a long
  // max_model_len x max_num_seqs table (8 TiB at 2^31 tokens x 1024 sequences) failed there.
  block_table_ = at::zeros({scenario_.engine.max_num_seqs, max_blocks_per_req()},
                           at::TensorOptions().dtype(at::kInt).device(device()));
}

void Engine::do_load_weights() {
  const int64_t bytes = model_->load_weights(options_.seed);
  result_.extra["weights_bytes"] = bytes;
}

std::vector<SeqStep> Engine::dummy_seqs(int num_tokens) const {
  // vLLM V1 GPUModelRunner._dummy_run (gpu_model_runner.py, main of 2026, commit 000fc94b):
  // num_reqs = min(num_tokens, max_num_seqs) requests of num_tokens // num_reqs tokens, the last
  // one also taking the remainder; every token in the null block.
  const int num_reqs = std::max(1, std::min(num_tokens, scenario_.engine.max_num_seqs));
  std::vector<SeqStep> seqs;
  for (int r = 0; r < num_reqs; ++r) {
    SeqStep s;
    s.req_slot = r;
    s.query_len = num_tokens / num_reqs + (r == num_reqs - 1 ? num_tokens % num_reqs : 0);
    s.blocks.assign(1, 0);
    seqs.push_back(s);
  }
  return seqs;
}

void Engine::do_profile_run() {
  // vLLM's profile_run: _dummy_run(max_num_batched_tokens, is_profile=True) with no attention
  // metadata, so every mixer returns early; then _dummy_sampler_run on the last token of each
  // dummy request. Its peak activation memory sizes the KV cache.
  reset_peak_memory(mode());
  const std::vector<SeqStep> seqs = dummy_seqs(scenario_.engine.max_num_batched_tokens);
  ForwardBatch b = make_batch(seqs, /*skip_attention=*/true);
  sample(model_->compute_logits(last_token_hidden(run_eager(b), b)), b.num_reqs);
  const MemoryStats m = memory_stats(mode());
  result_.extra["profile_peak_bytes"] = m.peak_allocated;
  result_.extra["profile_run_requests"] = b.num_reqs;
}

void Engine::do_kv_cache_alloc() {
  // The layout vLLM's KV cache manager gives (plan_kv_cache, harness/replay/kv_cache_plan.h):
  // layers grouped by cache spec, group_size shared tensors of num_blocks pages, one layer of
  // every group in each; for hybrid models the block size is raised until an attention page holds
  // a state page. Recurrent-state layers keep one page per running request.
  const EngineConfig& e = scenario_.engine;
  KvCachePlanInput in;
  in.block_size = e.block_size;
  for (auto& m : mixers_) {
    const CacheSpec c = m->cache_spec();
    if (c.kind == CacheSpec::Kind::kNone) continue;
    in.layers.push_back({m->spec().layer, c.group, c.kind == CacheSpec::Kind::kPagedKv,
                         c.bytes_per_token, c.bytes_per_request});
  }
  const bool has_state = std::any_of(in.layers.begin(), in.layers.end(),
                                     [](const LayerCacheNeed& l) { return !l.paged; });
  if (in.layers.empty()) return;
  // Block counts below are in blocks of the size after vLLM's hybrid rule.
  const int block_size = plan_page(in).block_size;
  const int64_t blocks_per_req = cdiv(e.max_model_len, block_size);
  if (e.num_gpu_blocks) {
    in.num_gpu_blocks = *e.num_gpu_blocks;
    result_.extra["kv_cache_sizing"] = "num_gpu_blocks from the scenario";
  } else if (mode() == DeviceMode::kCuda) {
    const MemoryStats m = memory_stats(mode());
    const double budget = e.gpu_memory_utilization * static_cast<double>(m.total_device);
    const double non_kv = static_cast<double>(m.peak_allocated) +
                          static_cast<double>(m.total_device - m.free_device - m.reserved);
    in.available_bytes = static_cast<int64_t>(std::max(0.0, budget - non_kv));
    result_.extra["kv_cache_sizing"] = "gpu_memory_utilization after the profile run (vLLM)";
  } else {
    // At most 2^31 - 1 (block ids are 32-bit): a huge max_num_seqs x max_model_len is capped.
    in.num_gpu_blocks = std::min<int64_t>(
        static_cast<int64_t>(e.max_num_seqs) * (blocks_per_req + 1) + 1, kMaxKvBlocks);
    result_.extra["kv_cache_sizing"] =
        "compile-only: max_num_seqs full-length sequences (+ a state page each) + the null block";
  }
  // vLLM's startup check: the cache must hold one max_model_len request (the loader checks a
  // fixed num_gpu_blocks the same way); a request that needs more blocks than are usable is
  // refused by the scheduler.
  in.min_blocks = blocks_per_req;
  const KvCachePlan plan = plan_kv_cache(in);
  if (plan.block_size_raised) {
    // vLLM: "Setting attention block size to N tokens to ensure that attention page size is >=
    // mamba page size"; every mixer is rebuilt for the new block size.
    result_.extra["block_size_raised"] = {{"from", e.block_size}, {"to", plan.block_size}};
    scenario_.engine.block_size = plan.block_size;
    build_mixers();
    block_table_ = at::zeros({e.max_num_seqs, max_blocks_per_req()},
                             block_table_.options().device(block_table_.device()));
  }
  num_blocks_ = plan.num_blocks;
  has_cache_ = true;
  free_blocks_.reset(1, num_blocks_);
  // Zero-filled, as vLLM's GPUModelRunner._allocate_kv_cache_tensors allocates each KV cache
  // tensor (torch.zeros(size, dtype=torch.int8)): the null block's recurrent state, which warmup
  // and padded batches read, starts at zero rather than at whatever the allocator held.
  for (int t = 0; t < plan.group_size; ++t) {
    cache_tensors_.push_back(at::zeros({plan.tensor_bytes()},
                                       at::TensorOptions().dtype(at::kByte).device(device())));
  }
  nlohmann::json groups = nlohmann::json::array();
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    groups.push_back({{"spec", plan.group_specs[g]}, {"layers", plan.groups[g]}});
  }
  for (auto& m : mixers_) {
    const int t = m->spec().layer < static_cast<int>(plan.tensor_of_layer.size())
                      ? plan.tensor_of_layer[m->spec().layer]
                      : -1;
    if (t >= 0) m->bind_cache({cache_tensors_[t], plan.num_blocks, plan.page_bytes, has_state});
  }
  result_.extra["cache_groups"] = groups;
  result_.extra["kv_cache_plan"] = {{"block_size", plan.block_size},
                                    {"page_bytes", plan.page_bytes},
                                    {"state_padding_bytes", plan.state_padding_bytes},
                                    {"tensors", plan.group_size},
                                    {"tensor_bytes", plan.tensor_bytes()}};
  result_.extra["num_gpu_blocks"] = num_blocks_;
  result_.extra["kv_cache_bytes"] = plan.tensor_bytes() * plan.group_size;
  has_state_ = has_state;
}

void Engine::do_kernel_warmup() {
  for (const std::string& name : strategy_.warmers) {
    auto w = make_warmer(name);
    log("warmer " + name);
    current_warmer_ = name;
    const auto t0 = Clock::now();
    w->run(*this);
    device_synchronize(mode());
    result_.extra["warmer_ms"][name] = ms_since(t0);
  }
}

void Engine::do_graph_capture() {
  const EngineConfig& e = scenario_.engine;
  const bool piecewise = e.cudagraph_mode == CudaGraphMode::kPiecewise ||
                         e.cudagraph_mode == CudaGraphMode::kFullAndPiecewise;
  const bool full_decode = e.cudagraph_mode == CudaGraphMode::kFullAndPiecewise ||
                           e.cudagraph_mode == CudaGraphMode::kFullDecodeOnly ||
                           e.cudagraph_mode == CudaGraphMode::kFull;
  const int L = model_->num_layers();
  const int64_t out_width = max_mixer_output_width();
  std::vector<int> sizes = e.cudagraph_capture_sizes;
  // vLLM's capture order (CudagraphDispatcher.get_capture_descs, vllm/v1/cudagraph_dispatcher.py
  // at ae2e8e62): every PIECEWISE (mixed) size first, then every FULL uniform-decode size, each
  // largest first; FULL decode sizes are the capture sizes in [1, max_num_seqs].
  std::sort(sizes.rbegin(), sizes.rend());
  auto make_static = [&](int P, bool with_attention) {
    std::vector<SeqStep> seqs;
    if (with_attention) {
      for (int r = 0; r < P; ++r) {  // P decode requests, one token each, in the null block
        SeqStep s;
        s.req_slot = r;
        s.context_len = 0;
        s.query_len = 1;
        s.blocks.assign(1, 0);
        seqs.push_back(s);
      }
    } else {
      seqs = dummy_seqs(P);
    }
    return make_batch(seqs, !with_attention);
  };
  int captured = 0;
  CaptureStreamScope capture_stream(mode());
  if (piecewise) {
    for (int P : sizes) {
      auto g = std::make_unique<PiecewiseGraphs>();
      g->size = P;
      g->in = make_static(P, /*with_attention=*/false);
      run_eager(g->in);  // eager warmup; mixers skipped (no metadata)
      // Zeroed: rows past a step's token count are padding the pieces still read (see execute).
      g->mixer_out =
          at::zeros({P, out_width}, at::TensorOptions().dtype(at::kBFloat16).device(device()));
      ForwardState st;
      for (int i = 0; i <= L; ++i) {
        CapturedGraph graph(mode());
        graph.capture([&] { model_->piece(i, st, g->in); }, pool_);
        g->graphs.push_back(std::move(graph));
        g->states.push_back(st);
        if (i < L) st.mixer_out = g->mixer_out.narrow(1, 0, mixers_[i]->spec().output_width);
      }
      piecewise_[P] = std::move(g);
      ++captured;
    }
  }
  if (full_decode) {
    for (int P : sizes) {
      if (P > e.max_num_seqs) continue;
      auto g = std::make_unique<FullGraph>();
      g->size = P;
      g->in = make_static(P, /*with_attention=*/true);
      run_eager(g->in);  // one eager warmup run per size (cudagraph_num_of_warmups = 1)
      g->graph = std::make_unique<CapturedGraph>(mode());
      g->graph->capture([&] { g->hidden = run_eager(g->in); }, pool_);
      full_[P] = std::move(g);
      ++captured;
    }
  }
  result_.extra["graphs_captured"] = captured;
  // vLLM locks the workspace at the end of capture_model; with cudagraph_mode none capture_model
  // returns early and the workspace is never locked (gpu_model_runner.py at 000fc94b; PR #46883
  // proposes locking on every path, not merged). do_workspace_lock records it.
}

void Engine::do_workspace_lock() {
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

ForwardBatch Engine::make_batch(const std::vector<SeqStep>& seqs, bool skip_attention) {
  ForwardBatch b;
  b.skip_attention = skip_attention;
  b.num_reqs = static_cast<int>(seqs.size());
  std::vector<int64_t> ids, pos, slots;
  std::vector<int32_t> seq_lens, state_slots;
  const int bs = scenario_.engine.block_size;
  for (const SeqStep& s : seqs) {
    state_slots.push_back(s.state_slot);
    b.query_start.push_back(static_cast<int>(pos.size()));
    b.query_lens.push_back(s.query_len);
    b.context_lens.push_back(s.context_len);
    seq_lens.push_back(s.context_len + s.query_len);
    for (int t = 0; t < s.query_len; ++t) {
      const int p = s.context_len + t;
      pos.push_back(p);
      ids.push_back((static_cast<int64_t>(p) * 7919 + 17) % scenario_.model.vocab_size);
      const int blk = p / bs;
      slots.push_back(blk < static_cast<int>(s.blocks.size())
                          ? static_cast<int64_t>(s.blocks[blk]) * bs + p % bs
                          : -1);
    }
  }
  b.num_tokens = static_cast<int>(pos.size());
  const c10::Device dev = device();
  auto to_dev = [&](const auto& v, c10::ScalarType t) { return upload(v, t, dev); };
  b.input_ids = to_dev(ids, at::kLong);
  b.positions = to_dev(pos, at::kLong);
  b.slot_mapping = to_dev(slots, at::kLong);
  b.seq_lens = to_dev(seq_lens, at::kInt);
  std::vector<int32_t> starts(b.query_start.begin(), b.query_start.end());
  starts.push_back(static_cast<int32_t>(pos.size()));
  b.query_start_loc = to_dev(starts, at::kInt);
  b.state_slots = to_dev(state_slots, at::kInt);
  // Block-table rows of the batch's request slots, written in place so the batch keeps the
  // engine table's stride (max_blocks_per_req), as vLLM's persistent block table does.
  int max_slot = 0;
  for (const SeqStep& s : seqs) max_slot = std::max(max_slot, s.req_slot);
  CS_CHECK(max_slot < block_table_.size(0), "request slot beyond max_num_seqs");
  for (size_t r = 0; r < seqs.size(); ++r) CS_CHECK(seqs[r].req_slot == static_cast<int>(r),
                                                    "batches use request slots 0..B-1 in order");
  if (!dev.is_meta()) {
    for (const SeqStep& s : seqs) {
      std::vector<int32_t> row(max_blocks_per_req(), 0);
      std::copy(s.blocks.begin(), s.blocks.begin() + std::min<size_t>(s.blocks.size(), row.size()),
                row.begin());
      block_table_[s.req_slot].copy_(
          at::from_blob(row.data(), {static_cast<int64_t>(row.size())}, at::kInt));
    }
  }
  b.block_table = block_table_.narrow(0, 0, b.num_reqs);
  return b;
}

at::Tensor Engine::last_token_rows(const ForwardBatch& batch) const {
  std::vector<int64_t> last;
  for (int r = 0; r < batch.num_reqs; ++r) last.push_back(batch.query_start[r] + batch.query_lens[r] - 1);
  if (device().is_meta()) {
    return at::empty({batch.num_reqs}, at::TensorOptions().dtype(at::kLong).device(device()));
  }
  return at::from_blob(last.data(), {batch.num_reqs}, at::kLong).clone().to(device());
}

at::Tensor Engine::run_eager(const ForwardBatch& batch) {
  ForwardState st;
  const int L = model_->num_layers();
  for (int i = 0; i <= L; ++i) {
    if (model_spans_) model_spans_->begin();
    model_->piece(i, st, batch);
    if (model_spans_) model_spans_->end();
    if (i == L) break;
    // Without metadata (profile run, piecewise capture) a mixer leaves its output buffer as it
    // is, as vLLM's layers return early when attn_metadata is None (forward_no_metadata). The
    // buffer starts zeroed, as vLLM's GDN layer allocates core_attn_out with torch.zeros (PR
    // #28182): uninitialized rows would reach the MoE router as garbage (NaN logits pick
    // expert ids out of range).
    st.mixer_out = at::zeros({batch.num_tokens, mixers_[i]->spec().output_width},
                             at::TensorOptions().dtype(at::kBFloat16).device(device()));
    if (batch.skip_attention) {
      mixers_[i]->forward_no_metadata(st.mixer_in, st.mixer_out, batch);
    } else {
      mixers_[i]->forward(st.mixer_in, st.mixer_out, batch);
    }
  }
  return st.hidden;
}

at::Tensor Engine::last_token_hidden(const at::Tensor& hidden, const ForwardBatch& batch) const {
  return hidden.index({last_token_rows(batch)});
}

std::vector<int64_t> Engine::sample(const at::Tensor& logits, int rows) {
  std::vector<int64_t> out(rows, 0);
  if (mode() != DeviceMode::kCuda) return out;  // compile-only: nothing to read
  // Greedy sampling and the copy to the host. Timed on its own (after the forward pass has
  // drained) so a first-time cost here shows up by name.
  device_synchronize(mode());
  const auto t0 = Clock::now();
  at::Tensor ids = at::argmax(logits.narrow(0, 0, rows), -1).to(at::kCPU);  // syncs
  for (int r = 0; r < rows; ++r) out[r] = ids[r].item<int64_t>();
  sampling_ms_ += ms_since(t0);
  return out;
}

std::vector<int64_t> Engine::execute(const ForwardBatch& batch) {
  const int N = batch.num_tokens;
  // Logits are computed eagerly for the sampled rows only, outside every graph (vLLM V1
  // execute_model: compute_logits(hidden_states[logits_indices])).
  auto finish = [&](const at::Tensor& hidden) {
    return sample(model_->compute_logits(last_token_hidden(hidden, batch)), batch.num_reqs);
  };
  // Full decode graph (mixers inside).
  if (batch.uniform_decode()) {
    auto it = full_.lower_bound(N);
    if (it != full_.end()) {
      FullGraph& g = *it->second;
      if (mode() == DeviceMode::kCuda) copy_into_static(g.in, batch, g.size, true);
      g.graph->replay();
      return finish(g.hidden);
    }
  }
  // Piecewise graphs, mixers eager in between.
  auto it = piecewise_.lower_bound(N);
  if (it != piecewise_.end()) {
    PiecewiseGraphs& g = *it->second;
    if (mode() == DeviceMode::kCuda) copy_into_static(g.in, batch, g.size, false);
    // The padding rows of the mixer outputs: the mixers write only the step's N rows, the pieces
    // read all g.size; keep the padding zero (vLLM's GDN output buffer is zero-filled).
    if (g.size > N) g.mixer_out.narrow(0, N, g.size - N).zero_();
    const int L = model_->num_layers();
    for (int i = 0; i <= L; ++i) {
      g.graphs[i].replay();
      if (i == L) break;
      std::vector<at::Tensor> in;
      for (const at::Tensor& t : g.states[i].mixer_in) in.push_back(t.narrow(0, 0, N));
      at::Tensor out = g.mixer_out.narrow(0, 0, N).narrow(1, 0, mixers_[i]->spec().output_width);
      mixers_[i]->forward(in, out, batch);
    }
    return finish(g.states[L].hidden);
  }
  return finish(run_eager(batch));
}

}  // namespace coldstart
