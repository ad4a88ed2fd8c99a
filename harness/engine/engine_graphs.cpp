// The replay engine (engine.h), part 3 of 5: CUDA graph capture (piecewise and full, vLLM's
// CUDAGraphMode) and replay, eager steps, sampling: what one model step runs.
#include "harness/engine/engine.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <numeric>

#include "harness/engine/capture_policy.engine_keys.h"
#include "harness/engine/engine_internal.h"
#include "harness/models/spec_decode.engine_keys.h"
#include "harness/runtime/host_upload.h"
#include "harness/dist/rank_group.h"

namespace coldstart {

using engine_detail::Clock;
using engine_detail::captures_piecewise;
using engine_detail::cdiv;
using engine_detail::ms_since;

namespace {
/// Marks a capture in the JIT for its lifetime (a kernel first needed inside it is refused, as
/// the driver refuses its module load) and in the ledger, aborted unless end() is called.
class CaptureMarks {
 public:
  CaptureMarks(jit::JitRuntime& jit, GraphLedger& ledger, const std::string& label)
      : jit_(jit), ledger_(ledger) {
    ledger_.begin_capture(label);
    jit_.set_capturing(label);
  }
  ~CaptureMarks() {
    jit_.set_capturing("");
    if (ledger_.capturing()) ledger_.abort_capture();
  }
  GraphLedger::GraphId end() {
    jit_.set_capturing("");
    return ledger_.end_capture();
  }

 private:
  jit::JitRuntime& jit_;
  GraphLedger& ledger_;
};
/// Deactivates GPU spans for its lifetime and restores each one's previous state.
class PausedSpans {
 public:
  explicit PausedSpans(std::initializer_list<GpuSpans*> spans) {
    for (GpuSpans* sp : spans) {
      was_.emplace_back(sp, sp->active());
      sp->set_active(false);
    }
  }
  ~PausedSpans() {
    for (auto& [sp, active] : was_) sp->set_active(active);
  }
  PausedSpans(const PausedSpans&) = delete;
  PausedSpans& operator=(const PausedSpans&) = delete;

 private:
  std::vector<std::pair<GpuSpans*, bool>> was_;
};

/// Whether a FULL decode graph can hold `batch`: uniform decode rows, or under speculative
/// decoding uniform verify rows of 1 + k tokens (vLLM's uniform_decode_query_len).
bool fits_full_graphs(const ForwardBatch& batch) {
  return batch.spec_query_len > 1 ? batch.uniform_verify() : batch.uniform_decode();
}

/// `t` [N, ...] with zero rows appended up to `rows`.
at::Tensor zero_rows_after(const at::Tensor& t, int rows) {
  if (rows <= t.size(0)) return t;
  std::vector<int64_t> shape = t.sizes().vec();
  shape[0] = rows - t.size(0);
  return at::cat({t, at::zeros(shape, t.options())});
}
}  // namespace

/// Copies a step's inputs into the static batch a graph of `size` rows was captured with, and
/// pads the rest (token 0 at position 0; with attention metadata, slot -1 and length 0 so the
/// kernels skip the padding rows). Full graphs hold uniform decode batches only: one token per
/// request, so query_start_loc (0, 1, ..., size) never changes; under speculative decoding
/// uniform verify batches of spec_query_len tokens per request, whose padding requests get no
/// tokens (query_start_loc padded with the step's token count, PAD_SLOT_ID state pages and one
/// accepted token, as vLLM's GDN metadata builder pads them).
static void copy_into_static(ForwardBatch& captured, const ForwardBatch& step, int size,
                      bool attention_metadata) {
  const int n = step.num_tokens;
  captured.input_ids.narrow(0, 0, n).copy_(step.input_ids);
  captured.positions.narrow(0, 0, n).copy_(step.positions);
  const bool verify = captured.spec_query_len > 1;
  const int b = step.num_reqs, bs = captured.num_reqs;  // requests of the step, of the graph
  if (attention_metadata) {
    captured.slot_mapping.narrow(0, 0, n).copy_(step.slot_mapping);
    captured.seq_lens.narrow(0, 0, b).copy_(step.seq_lens);
    captured.state_slots.narrow(0, 0, b).copy_(step.state_slots);
    if (verify) {
      captured.query_start_loc.narrow(0, 0, b + 1).copy_(step.query_start_loc);
      captured.spec_state_slots.narrow(0, 0, b).copy_(step.spec_state_slots);
      captured.num_accepted_tokens.narrow(0, 0, b).copy_(step.num_accepted_tokens);
    }
  }
  if (size > n) {
    captured.input_ids.narrow(0, n, size - n).fill_(0);
    captured.positions.narrow(0, n, size - n).fill_(0);
    if (attention_metadata) captured.slot_mapping.narrow(0, n, size - n).fill_(-1);
  }
  if (!attention_metadata || bs == b) return;
  captured.seq_lens.narrow(0, b, bs - b).fill_(0);
  captured.state_slots.narrow(0, b, bs - b).fill_(0);  // the null state slot
  if (verify) {
    captured.query_start_loc.narrow(0, b + 1, bs - b).fill_(n);
    captured.spec_state_slots.narrow(0, b, bs - b).fill_(-1);
    captured.num_accepted_tokens.narrow(0, b, bs - b).fill_(1);
  }
}

void Engine::do_graph_capture() {
  const EngineConfig& e = scenario_.engine;
  const bool piecewise = captures_piecewise(e.cudagraph_mode);
  const bool full_decode = e.cudagraph_mode == CudaGraphMode::kFullAndPiecewise ||
                           e.cudagraph_mode == CudaGraphMode::kFullDecodeOnly ||
                           e.cudagraph_mode == CudaGraphMode::kFull;
  const int L = model_->num_layers();
  const int64_t out_width = max_mixer_output_width();
  std::vector<int> sizes = e.cudagraph_capture_sizes;
  // vLLM's capture order (CudagraphDispatcher.get_capture_descs, vllm/v1/cudagraph_dispatcher.py
  // at ae2e8e62): every PIECEWISE (mixed) size first, then every FULL uniform-decode size, each
  // largest first; FULL decode sizes are the capture sizes in [1, max_num_seqs]. The capture
  // policy keys (capture_policy.engine_keys.h) may turn the order and the eager warmups.
  if (capture_ascending(e))
    std::sort(sizes.begin(), sizes.end());
  else
    std::sort(sizes.rbegin(), sizes.rend());
  const int warmups = capture_warmups(e);
  // A step with more tokens than the largest capture size finds no graph and runs eagerly
  // (execute(); vLLM's CudagraphDispatcher.dispatch, vllm/v1/cudagraph_dispatcher.py at
  // ae2e8e62, returns CUDAGraphMode.NONE for it without a log line).
  // Under speculative decoding a FULL size holds size / (1 + k) verify requests
  // (spec_decode.engine_keys.h): the sizes up to (1 + k) * max_num_seqs.
  const int max_full = e.max_num_seqs * (num_speculative_tokens(e) + 1);
  int largest_full = 0;
  for (int P : sizes)
    if (full_decode && P <= max_full) largest_full = std::max(largest_full, P);
  const int largest_piecewise =
      piecewise && !sizes.empty() ? *std::max_element(sizes.begin(), sizes.end()) : 0;
  result_.extra["capture_policy"] = {{"order", capture_ascending(e) ? "ascending" : "largest_first"},
                                     {"warmups_per_size", warmups},
                                     {"largest_piecewise_size", largest_piecewise},
                                     {"largest_full_decode_size", largest_full}};
  int captured = 0;
  CaptureStreamScope capture_stream(mode());
  if (piecewise) {
    for (int P : sizes) {
      auto g = std::make_unique<PiecewiseGraphs>();
      g->size = P;
      g->in = make_batch(dummy_seqs(P), /*skip_attention=*/true);
      capture_step_ = fmt::format("piecewise capture size {}", P);
      for (int w = 0; w < warmups; ++w) {  // eager warmups; mixers skipped
        run_eager(g->in);
        drafter_dummy_run(g->in, /*capturing=*/false);
      }
      // Zeroed: rows past a step's token count are padding the pieces still read (see execute).
      g->mixer_out =
          at::zeros({P, out_width}, at::TensorOptions().dtype(at::kBFloat16).device(device()));
      g->static_ledger_id = ledger_.add_buffer(
          fmt::format("the static batch of piecewise capture size {}", P),
          g->mixer_out.numel() * g->mixer_out.element_size(), tensor_address(g->mixer_out));
      ForwardState st;
      for (int i = 0; i <= L; ++i) {
        CapturedGraph graph(mode());
        CaptureMarks marks(*jit_, ledger_,
                           fmt::format("piecewise graph of piece {} at capture size {}", i, P));
        ledger_.touch(g->static_ledger_id);
        graph.capture([&] { model_->piece(i, st, g->in); }, pool_);
        g->ledger_ids.push_back(marks.end());
        g->graphs.push_back(std::move(graph));
        g->states.push_back(st);
        if (i < L) st.mixer_out = g->mixer_out.narrow(1, 0, mixers_[i]->spec().output_width);
      }
      drafter_dummy_run(g->in, /*capturing=*/true);  // after the capturing _dummy_run's forward
      piecewise_[P] = std::move(g);
      ++captured;
    }
  }
  if (full_decode) {
    for (int P : sizes) {
      if (P > max_full) continue;
      if (capture_lazily(e)) {
        lazy_sizes_.push_back(P);  // captured by execute() on first use
        continue;
      }
      capture_full_decode(P, fmt::format("full decode capture size {}", P));
      ++captured;
    }
    std::sort(lazy_sizes_.begin(), lazy_sizes_.end());
    if (capture_lazily(e)) {
      result_.extra["capture_policy"]["lazy_sizes"] = lazy_sizes_;
      result_.extra["capture_policy"]["lazy_captures"] = nlohmann::json::array();
    }
  }
  result_.extra["graphs_captured"] = captured;
  capture_step_.clear();
  // vLLM locks the workspace at the end of capture_model; with cudagraph_mode none capture_model
  // returns early and the workspace is never locked (gpu_model_runner.py at 000fc94b; PR #46883
  // proposes locking on every path, not merged). do_workspace_lock records it.
}

void Engine::capture_full_decode(int P, const std::string& step) {
  const EngineConfig& e = scenario_.engine;
  auto g = std::make_unique<FullGraph>();
  g->size = P;
  // Full decode sizes are at most max_num_seqs, so vLLM's dummy batch of P tokens is P decode
  // requests of one token each, in the null block; with attention metadata. Under speculative
  // decoding P / (1 + k) verify requests: the capture's metadata knows their drafts
  // (build_for_cudagraph_capture), the eager warmups' only under cudagraph_warmup_metadata
  // capture (spec_decode.engine_keys.h).
  const bool spec = num_speculative_tokens(e) > 0;
  g->in = make_batch(spec ? dummy_verify_seqs(P, true) : dummy_seqs(P), /*skip_attention=*/false);
  capture_step_ = step;
  // The drafter's dummy_run (warmups and after the capture) has no attention metadata, whatever
  // the target's had.
  const ForwardBatch draft_batch = drafter_ ? make_batch(dummy_seqs(P), true) : ForwardBatch{};
  {
    const ForwardBatch warm =
        spec && !warmups_use_capture_metadata(e) ? make_batch(dummy_verify_seqs(P, false), false)
                                                 : g->in;
    for (int w = 0; w < capture_warmups(e); ++w) {  // cudagraph_num_of_warmups
      run_eager(warm);
      drafter_dummy_run(draft_batch, /*capturing=*/false);
    }
  }
  g->graph = std::make_unique<CapturedGraph>(mode());
  g->static_ledger_id = ledger_.add_buffer(
      fmt::format("the static batch of full decode capture size {}", P),
      g->in.input_ids.numel() * g->in.input_ids.element_size(), tensor_address(g->in.input_ids));
  CaptureMarks marks(*jit_, ledger_, fmt::format("full decode graph at capture size {}", P));
  // Attention inside: the graph reads the KV cache through the block table.
  ledger_.touch(g->static_ledger_id);
  ledger_.touch(block_table_ledger_id_);
  for (GraphLedger::BufferId id : cache_ledger_ids_) ledger_.touch(id);
  {
    // A lazy capture runs inside a timed request step, where the GPU spans are active; an event
    // recorded into a capture cannot be timed, so they pause for the capture itself.
    const PausedSpans paused({sdpa_spans_.get(), model_spans_.get(), mixer_spans_.get()});
    g->graph->capture([&] { g->hidden = run_eager(g->in); }, pool_);
  }
  g->ledger_id = marks.end();
  drafter_dummy_run(draft_batch, /*capturing=*/true);
  full_[P] = std::move(g);
  capture_step_.clear();
}

void Engine::capture_lazily_if_needed(int num_tokens) {
  const auto it = std::lower_bound(lazy_sizes_.begin(), lazy_sizes_.end(), num_tokens);
  if (it == lazy_sizes_.end() || full_.count(*it)) return;
  const int P = *it;
  const StepContext st = jit_->monitor().step();
  const std::string where =
      st.request >= 0 ? fmt::format("request {}, step {}", st.request, st.step) : current_phase_;
  const auto t0 = Clock::now();
  {
    CaptureStreamScope capture_stream(mode());
    capture_full_decode(P, fmt::format("lazy full decode capture size {} ({})", P, where));
  }
  result_.extra["capture_policy"]["lazy_captures"].push_back(
      {{"size", P}, {"phase", current_phase_}, {"request", st.request}, {"step", st.step},
       {"ms", mode() == DeviceMode::kCuda ? nlohmann::json(ms_since(t0)) : nlohmann::json()}});
  result_.extra["graphs_captured"] = result_.extra.value("graphs_captured", 0) + 1;
}

std::string Engine::eager_reason(const ForwardBatch& batch) const {
  const EngineConfig& e = scenario_.engine;
  const int N = batch.num_tokens;
  if (e.cudagraph_mode == CudaGraphMode::kNone) return "cudagraph_mode none captures no graphs";
  if (!captures_piecewise(e.cudagraph_mode)) {
    const int largest_full = full_.empty() ? 0 : full_.rbegin()->first;
    if (fits_full_graphs(batch) && largest_full > 0 && N > largest_full)
      return fmt::format("{} decode tokens, more than the largest full decode capture size, {}",
                         N, largest_full);
    return fmt::format("a {} step, which {} never captures",
                       batch.uniform_decode()   ? "decode"
                       : batch.uniform_verify() ? "verify"
                                                : "prefill or mixed",
                       cudagraph_mode_name(e.cudagraph_mode));
  }
  const int largest_piecewise = piecewise_.empty() ? 0 : piecewise_.rbegin()->first;
  if (N > largest_piecewise)
    return fmt::format("{} tokens, more than the largest piecewise capture size, {}", N,
                       largest_piecewise);
  return "";
}

/// Records a stale replay in the ledger and raises it; `report` says whether it was launched and
/// what the device did. run() puts the ledger into the result after the throw.
[[noreturn]] static void raise_stale(GraphLedger& ledger, const StaleReference& ref,
                                     const std::string& report) {
  ledger.note_stale_replay(ref, report);
  throw StaleGraphReplayError(GraphLedger::stale_text(ref) + "; " + report, ref);
}

std::optional<StaleReference> Engine::check_replay(GraphLedger::GraphId id) {
  std::optional<StaleReference> stale = ledger_.stale(id);
  if (!stale) return std::nullopt;
  if (options_.run_stale_graph_replays && mode() == DeviceMode::kCuda) return stale;
  const char* report = mode() == DeviceMode::kCuda ? "not launched (--graph-replay-stale stop)"
                                                   : "not launched (compile-only mode)";
  raise_stale(ledger_, *stale, report);
}

void Engine::finish_stale_replay(const StaleReference& ref) {
  // The graph ran on the released block; whether the device noticed decides what a server sees:
  // a sticky illegal-address error, or nothing at all (the caching allocator still holds the
  // block, or handed it to another tensor, and the results are silently wrong).
  const std::string fault = device_fault_after_sync(mode());
  const std::string report = fault.empty()
                                 ? "launched under --graph-replay-stale run: the device raised no "
                                   "fault (a silent read and write of released memory)"
                                 : "launched under --graph-replay-stale run: the device faulted: " + fault;
  raise_stale(ledger_, ref, report);
}

at::Tensor Engine::run_eager(const ForwardBatch& batch) {
  return run_pieces(*model_, 0, ForwardState{}, batch);
}

at::Tensor Engine::run_pieces(Model& model, size_t first_mixer, ForwardState st,
                              const ForwardBatch& batch, int padded_rows) {
  const int L = model.num_layers();
  const int N = batch.num_tokens;
  // Padded: the pieces see padded_rows rows (token 0 at position 0 past the step's), the mixers
  // the step's N rows with its metadata, as a piecewise graph of that size runs them (execute).
  ForwardBatch padded;
  const bool pad = padded_rows > N;
  if (pad) {
    padded = batch;
    padded.num_tokens = padded_rows;
    padded.input_ids = zero_rows_after(batch.input_ids, padded_rows);
    padded.positions = zero_rows_after(batch.positions, padded_rows);
  }
  const ForwardBatch& rows = pad ? padded : batch;
  for (int i = 0; i <= L; ++i) {
    if (model_spans_) model_spans_->begin();
    model.piece(i, st, rows);
    if (model_spans_) model_spans_->end();
    if (i == L) break;
    // Without metadata (profile run, piecewise capture) a mixer leaves its output buffer as it
    // is, as vLLM's layers return early when attn_metadata is None (forward_no_metadata). The
    // buffer starts zeroed, as vLLM's GDN layer allocates core_attn_out with torch.zeros (PR
    // #28182): uninitialized rows would reach the MoE router as garbage (NaN logits pick
    // expert ids out of range).
    Mixer& mixer = *mixers_.at(first_mixer + static_cast<size_t>(i));
    st.mixer_out = at::zeros({rows.num_tokens, mixer.spec().output_width},
                             at::TensorOptions().dtype(at::kBFloat16).device(device()));
    std::vector<at::Tensor> in = st.mixer_in;
    at::Tensor out = st.mixer_out;
    if (pad) {
      for (at::Tensor& t : in) t = t.narrow(0, 0, N);
      out = out.narrow(0, 0, N);
    }
    if (batch.skip_attention) {
      mixer.forward_no_metadata(in, out, batch);
    } else {
      if (mixer_spans_) mixer_spans_->begin();
      mixer.forward(in, out, batch);
      if (mixer_spans_) mixer_spans_->end();
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
  const double stall0 = api_timer_ ? api_timer_->stall_ms() : 0.0;
  const auto t0 = Clock::now();
  at::Tensor ids = at::argmax(logits.narrow(0, 0, rows), -1).to(at::kCPU);  // syncs
  for (int r = 0; r < rows; ++r) out[r] = ids[r].item<int64_t>();
  // Less the CUDA API's own host time (a first launch's module load): counted as its own part.
  sampling_ms_ += ms_since(t0) - ((api_timer_ ? api_timer_->stall_ms() : 0.0) - stall0);
  return out;
}

std::vector<int64_t> Engine::execute(const ForwardBatch& batch) {
  // The model's host work (libtorch dispatch, library heuristics, config selection), apart from
  // the CUDA API calls, the JIT and the engine's own scheduling and batch preparation.
  const jit::HostFrame model_host(jit::HostPart::kModelHost);
  const int N = batch.num_tokens;
  // Logits are computed eagerly for the sampled rows only, outside every graph (vLLM V1
  // execute_model: compute_logits(hidden_states[logits_indices])).
  auto finish = [&](const at::Tensor& hidden) {
    if (model_spans_) model_spans_->begin();
    at::Tensor logits = model_->compute_logits(last_token_hidden(hidden, batch));
    if (model_spans_) model_spans_->end();
    // The drafter reads the step's rows of the final hidden states (graphs hold padded ones),
    // or of what the model stashes for it (Model::mtp_target_hidden).
    if (drafter_) {
      const at::Tensor stash = model_->mtp_target_hidden();
      step_hidden_ = (stash.defined() ? stash : hidden).narrow(0, 0, N);
    }
    return sample(logits, static_cast<int>(logits.size(0)));
  };
  // Full decode graph (mixers inside); under lazy capture, captured here on first use. With
  // speculative decoding the FULL graphs hold uniform verify batches (1 + k rows a request).
  if (fits_full_graphs(batch)) {
    if (!lazy_sizes_.empty()) capture_lazily_if_needed(N);
    auto it = full_.lower_bound(N);
    if (it != full_.end()) {
      FullGraph& g = *it->second;
      if (mode() == DeviceMode::kCuda) copy_into_static(g.in, batch, g.size, true);
      step_graph_ = fmt::format("full@{}", g.size);
      const std::optional<StaleReference> stale = check_replay(g.ledger_id);
      g.graph->replay();
      if (stale) finish_stale_replay(*stale);
      meet_ranks_after_graph(step_graph_);
      return finish(g.hidden);
    }
  }
  // Piecewise graphs, mixers eager in between.
  auto it = piecewise_.lower_bound(N);
  if (it != piecewise_.end()) {
    PiecewiseGraphs& g = *it->second;
    if (mode() == DeviceMode::kCuda) copy_into_static(g.in, batch, g.size, false);
    step_graph_ = fmt::format("piecewise@{}", g.size);
    // The padding rows of the mixer outputs: the mixers write only the step's N rows, the pieces
    // read all g.size; keep the padding zero (vLLM's GDN output buffer is zero-filled).
    if (g.size > N) g.mixer_out.narrow(0, N, g.size - N).zero_();
    const int L = model_->num_layers();
    for (int i = 0; i <= L; ++i) {
      const std::optional<StaleReference> stale = check_replay(g.ledger_ids[i]);
      if (model_spans_) model_spans_->begin();
      g.graphs[i].replay();
      if (model_spans_) model_spans_->end();
      if (stale) finish_stale_replay(*stale);
      if (i > 0) meet_ranks_after_graph(fmt::format("{} piece {}", step_graph_, i));
      if (i == L) break;
      std::vector<at::Tensor> in;
      for (const at::Tensor& t : g.states[i].mixer_in) in.push_back(t.narrow(0, 0, N));
      at::Tensor out = g.mixer_out.narrow(0, 0, N).narrow(1, 0, mixers_[i]->spec().output_width);
      if (mixer_spans_) mixer_spans_->begin();
      mixers_[i]->forward(in, out, batch);
      if (mixer_spans_) mixer_spans_->end();
    }
    return finish(g.states[L].hidden);
  }
  step_graph_ = "eager";
  step_eager_reason_ = eager_reason(batch);
  return finish(run_eager(batch));
}

void Engine::meet_ranks_after_graph(const std::string& graph) {
  // A captured graph holds its all-reduces (NCCL captures them; tp_all_reduce issues nothing
  // while capturing), so its replay is where the ranks meet: once per replay.
  if (options_.ranks != nullptr && options_.ranks->world() > 1)
    options_.ranks->all_reduce({1}, "cudagraph replay " + graph);
}

std::vector<SeqStep> Engine::dummy_verify_seqs(int num_tokens, bool drafts) const {
  // vLLM's _dummy_run with uniform_decode: cdiv(num_tokens, 1 + k) requests of 1 + k tokens, in
  // the null block; the capture's metadata gives each num_accepted_tokens = 1 + k (the diff of
  // query_start_loc, gdn_attn.py build_for_cudagraph_capture).
  const int q = num_speculative_tokens(scenario_.engine) + 1;
  const int num_reqs = std::max(1, (num_tokens + q - 1) / q);
  std::vector<SeqStep> seqs;
  for (int r = 0; r < num_reqs; ++r) {
    SeqStep s;
    s.req_slot = r;
    s.query_len = std::min(q, num_tokens - r * q);
    s.blocks.assign(1, 0);
    s.state_pages.assign(q, 0);
    s.verify = drafts;
    s.num_accepted = q;
    seqs.push_back(s);
  }
  return seqs;
}

std::vector<int64_t> Engine::run_step(const std::vector<SeqStep>& seqs) {
  const ForwardBatch batch = make_batch(seqs, false);
  std::vector<int64_t> ids = execute(batch);
  if (drafter_) propose_drafts(seqs, batch);
  return ids;
}

int Engine::drafter_rows(int num_tokens) const {
  const EngineConfig& e = scenario_.engine;
  if (!captures_piecewise(e.cudagraph_mode)) return num_tokens;
  int best = 0;
  for (int s : e.cudagraph_capture_sizes)
    if (s >= num_tokens && (best == 0 || s < best)) best = s;
  return best > 0 ? best : num_tokens;
}

void Engine::propose_drafts(const std::vector<SeqStep>& seqs, const ForwardBatch& batch) {
  // EagleProposer.propose (spec_decode.engine_keys.h): the first pass over every row the target
  // just ran, with its metadata and the target's final-normed hidden states; each request's
  // draft is argmax of its last row's logits. Each pass's rows are padded to a capture size as
  // vLLM pads them for the drafter's piecewise graphs (drafter_rows).
  const int k = num_speculative_tokens(scenario_.engine);
  const jit::HostFrame model_host(jit::HostPart::kModelHost);
  const size_t first = static_cast<size_t>(model_->num_layers());
  // Compiles in a request step say which drafter pass (and its rows) needed them.
  const StepContext step = jit_->monitor().step();
  struct RestoreStep {
    jit::JitMonitor& monitor;
    StepContext step;
    ~RestoreStep() { monitor.set_step(step); }
  } restore{jit_->monitor(), step};
  auto stamp = [&](int pass, int tokens) {
    if (step.request < 0) return;  // a warmer's or a dummy run's: no request step to stamp
    StepContext s = step;
    s.drafter_pass = pass;
    s.drafter_tokens = tokens;
    jit_->monitor().set_step(s);
  };
  int rows = drafter_rows(batch.num_tokens);
  stamp(1, rows);
  ForwardState st;
  st.target_hidden = zero_rows_after(step_hidden_, rows);
  at::Tensor hidden = run_pieces(*drafter_, first, st, batch, rows);
  std::vector<int64_t> last;
  for (int r = 0; r < batch.num_reqs; ++r)
    last.push_back(batch.query_start[r] + batch.query_lens[r] - 1);
  hidden = device().is_meta()
               ? at::empty({static_cast<int64_t>(last.size()), hidden.size(1)}, hidden.options())
               : hidden.index({upload(last, at::kLong, device())});
  sample(drafter_->compute_logits(hidden), batch.num_reqs);
  // Then k - 1 passes of one row per request (max_query_len 1), each at the next position and
  // fed the drafter's own output for the row before (method "mtp"). A row whose position reaches
  // max_model_len stays in the batch parked at position 0 with sequence length 1 and no cache
  // slot, its draft ignored (EagleProposer.propose: clamped_positions, seq_lens.masked_fill_(..., 1)
  // and PADDING_SLOT_ID; vllm/v1/spec_decode/eagle.py @ 008603a3). Here: no blocks, so make_batch
  // gives it slot -1 and a null block-table row.
  for (int j = 1; j < k; ++j) {
    std::vector<SeqStep> next = seqs;
    for (SeqStep& s : next) {
      s.context_len += s.query_len - 1 + j;
      if (s.context_len >= scenario_.engine.max_model_len) {
        s.context_len = 0;
        s.blocks.clear();
      }
      s.query_len = 1;
      s.verify = false;
    }
    const ForwardBatch b = make_batch(next, false);
    rows = drafter_rows(b.num_tokens);
    stamp(1 + j, rows);
    ForwardState ds;
    ds.target_hidden = zero_rows_after(hidden, rows);
    hidden = run_pieces(*drafter_, first, ds, b, rows).narrow(0, 0, b.num_tokens);
    sample(drafter_->compute_logits(hidden), b.num_reqs);
  }
}

void Engine::drafter_dummy_run(const ForwardBatch& batch, bool capturing) {
  if (!drafter_) return;
  // EagleProposer.dummy_run: num_speculative_tokens forwards of the same num_tokens, one while
  // the runner captures; model forwards only (no logits, no attention metadata).
  const int forwards = capturing ? 1 : num_speculative_tokens(scenario_.engine);
  const at::Tensor stash = model_->mtp_target_hidden();
  const int64_t width = stash.defined() ? stash.size(1) : scenario_.model.hidden_size;
  for (int f = 0; f < forwards; ++f) {
    ForwardState st;
    st.target_hidden = at::zeros({batch.num_tokens, width},
                                 at::TensorOptions().dtype(at::kBFloat16).device(device()));
    run_pieces(*drafter_, static_cast<size_t>(model_->num_layers()), st, batch);
  }
}

}  // namespace coldstart
