// The replay engine (engine.h), part 4 of 5: the requests. Batches on the engine's persistent
// tensors and block table (make_batch), and the first wave of requests and the steady request run
// step by step through the scheduler (harness/replay/scheduler.h), with TTFT, first decode, the
// per-step schedule and the first-time costs. Startup is in engine.cpp, the model step in
// engine_graphs.cpp.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "harness/engine/engine.h"
#include "harness/engine/engine_internal.h"
#include "harness/models/spec_decode.engine_keys.h"
#include "harness/replay/scheduler.h"
#include "harness/runtime/host_upload.h"

namespace coldstart {

using engine_detail::Clock;
using engine_detail::cdiv;
using engine_detail::ms_since;
using engine_detail::stall_if_asked;

void Engine::record_first_time_costs() {
  // What the first request paid that the same-length second one did not, per request phase:
  // first-request phase ms minus steady-request phase ms (positive = a first-time cost).
  // Phases are numbered by the scenario's request index of each wave's lead.
  int first_lead = -1, steady_lead = -1;
  for (size_t r = 0; r < scenario_.requests.size(); ++r) {
    int& lead = scenario_.requests[r].steady ? steady_lead : first_lead;
    if (lead < 0) lead = static_cast<int>(r);
  }
  nlohmann::json costs = nlohmann::json::object();
  for (const PhaseTiming& first : result_.phases) {
    if (first.request < 0 || first.request != first_lead) continue;
    for (const PhaseTiming& steady : result_.phases) {
      if (steady.request == steady_lead && steady.name == first.name) {
        costs[first.name] = first.ms - steady.ms;
        const std::string k0 = std::to_string(first_lead) + "." + first.name,
                          k1 = std::to_string(steady_lead) + "." + first.name;
        for (const char* part :
             {"prefill_attention_gpu_ms", "model_pieces_gpu_ms", "mixers_gpu_ms", "sampling_ms"}) {
          const auto& m = result_.extra[part];
          if (m.is_object() && m.contains(k0) && m.contains(k1)) {
            costs[first.name + "." + part] = m[k0].get<double>() - m[k1].get<double>();
          }
        }
      }
    }
  }
  // A steady request that pins another prompt length does other work than the first request:
  // first / steady is not a first-time cost then (steady_not_comparable, set in both modes).
  if (result_.extra.contains("steady_not_comparable")) return;
  result_.extra["first_time_cost_ms"] = costs;
  // (snapshot_inner drops the ratio again when the steady request was cold: steady_cold.)
  if (result_.ttft_ms && result_.steady_ttft_ms && *result_.steady_ttft_ms > 0) {
    result_.extra["ttft_first_over_steady"] = *result_.ttft_ms / *result_.steady_ttft_ms;
  }
}

namespace {
/// The phase a step belongs to, named by what it does for the wave's lead request (the first
/// request: its TTFT and first decode are the headline figures). Steps the lead is not in are
/// "decode" when every row decodes, else "prefill_others".
std::string step_role(const SchedStep& st, int lead) {
  bool all_decode = true;
  for (const ScheduledSeq& q : st.seqs) {
    if (q.id == lead) {
      if (q.decode_index == 0) return "first_decode";
      if (q.decode_index > 0) return "decode";
      return q.context_len == 0 ? "prefill" : "continuation_prefill";
    }
    all_decode = all_decode && q.decode_index >= 0;
  }
  return all_decode ? "decode" : "prefill_others";
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
}  // namespace

void Engine::do_wave(const std::vector<int>& ids, int wave) {
  if (options_.host_split && mode() == DeviceMode::kCuda && !api_timer_ &&
      !result_.extra.contains("cuda_api_timing")) {
    // Where the engine's thread spends its time (api_timer.h): CUDA API calls by kind through
    // CUPTI's callback API (allocator growth, lazy module loading on a first launch, a graph's
    // first launch, waits), the JIT, the model's host code, the engine's own. Started only now:
    // CUPTI takes device memory when it starts, which before kv_cache_alloc would shrink the
    // KV cache (6 blocks fewer on the H200) and with it the kernels' compile keys.
    std::string why_not;
    api_timer_ = jit::ApiTimer::start(&why_not);
    result_.extra["cuda_api_timing"] =
        api_timer_ ? "on while requests ran: CUPTI's callbacks add host time to every CUDA call, "
                     "so this run's TTFT is not comparable with one without --host-split"
                   : "not measured: " + why_not;
  }
  // CUPTI's API callbacks only while requests run (startup is not slowed by the measurement).
  struct ApiCallbacksOn {
    jit::ApiTimer* timer;
    explicit ApiCallbacksOn(jit::ApiTimer* t) : timer(t) {
      if (timer) timer->set_api_callbacks(true);
    }
    ~ApiCallbacksOn() {
      try {
        if (timer) timer->set_api_callbacks(false);
      } catch (const std::exception&) {  // the wave's own error, if any, is the one to report
      }
    }
  } api_callbacks(api_timer_);
  const EngineConfig& e = scenario_.engine;
  const bool timed = mode() == DeviceMode::kCuda;
  const int lead = ids.front();
  // Each request is a fresh sequence with its own blocks (no prefix-cache hits), taken from the
  // free block queue when it is admitted and returned when it finishes; a model with recurrent
  // layers also gives it one state page (vLLM mamba_cache_mode "none"), 1 + k of them under
  // speculative decoding, whose verify rows also write k lookahead KV slots.
  const int spec_k = num_speculative_tokens(e);
  const int state_pages_per_req = has_state_ ? 1 + spec_k : 0;
  auto kv_blocks = [&](const RequestSpec& r) {
    return cdiv(r.prompt_tokens + r.decode_steps + spec_k, e.block_size);
  };
  std::vector<SchedRequest> reqs;
  for (int id : ids) {
    const RequestSpec& r = scenario_.requests[id];
    const int64_t need = kv_blocks(r) + state_pages_per_req;
    reqs.push_back({id, r.prompt_tokens, r.decode_steps, r.arrival_step, need});
  }
  Scheduler sched(reqs, e.max_num_seqs, e.max_num_batched_tokens, e.enable_chunked_prefill,
                  has_cache_ ? static_cast<int64_t>(free_blocks_.size()) : -1);
  if (spec_k > 0) sched.set_speculative(spec_k, spec_accepted_tokens(e), e.max_model_len);
  std::map<int, std::vector<int32_t>> blocks;
  std::map<int, std::vector<int32_t>> state_pages;
  std::map<int, int> num_accepted;  // 1 + the drafts the request's last verify step accepted
  auto admit = [&](int id) {
    const RequestSpec& r = scenario_.requests[id];
    const int n = kv_blocks(r);
    CS_CHECK(free_blocks_.size() >= static_cast<size_t>(n + state_pages_per_req),
             "the scheduler admitted a request the free block queue cannot hold");
    for (int i = 0; i < n; ++i) {
      blocks[id].push_back(free_blocks_.front());
      free_blocks_.pop_front();
    }
    for (int i = 0; i < state_pages_per_req; ++i) {
      state_pages[id].push_back(free_blocks_.front());
      free_blocks_.pop_front();
    }
    num_accepted[id] = 1;
  };
  auto release = [&](int id) {
    for (int32_t b : blocks[id]) free_blocks_.push_back(b);
    for (int32_t b : state_pages[id]) free_blocks_.push_back(b);
    blocks.erase(id);
    state_pages.erase(id);
  };
  std::map<int, Clock::time_point> arrival;
  std::map<int, double> reporting_at_arrival;
  jit::HostTimes host_at_arrival{};  // the lead's: where its TTFT's host time goes
  std::map<std::string, double> aggregated;  // role -> ms of steps not timed as their own phase
  std::vector<std::string> aggregated_order;
  std::vector<double> lead_decode_ms;
  device_synchronize(mode());
  current_phase_ = wave == 0 ? "prefill" : "steady_request";
  while (!sched.done()) {
    const SchedStep st = sched.next();
    const auto t0 = Clock::now();
    for (int id : ids) {
      if (!arrival.count(id) && st.index >= sched.arrival_step(id)) {
        arrival[id] = t0;
        reporting_at_arrival[id] = snapshot_ms_;
        if (id == lead && api_timer_) host_at_arrival = api_timer_->totals();
      }
    }
    std::vector<SeqStep> seqs;
    for (const ScheduledSeq& q : st.seqs) {
      if (!blocks.count(q.id)) admit(q.id);
      SeqStep s;
      s.req_slot = static_cast<int>(seqs.size());
      s.state_slot = has_state_ ? state_pages[q.id].front() : 0;
      s.state_pages = state_pages[q.id];
      s.verify = q.num_draft_tokens > 0;
      s.num_accepted = num_accepted[q.id];
      s.context_len = q.context_len;
      s.query_len = q.query_len;
      s.blocks = blocks[q.id];
      seqs.push_back(std::move(s));
    }
    const std::string role = step_role(st, lead);
    // Every compile, load and autotune of this step is stamped with it (the request that paid).
    StepContext ctx;
    ctx.request = st.seqs.empty() ? lead : st.seqs.front().id;
    for (const ScheduledSeq& q : st.seqs)
      if (q.id == lead) ctx.request = lead;
    ctx.wave = wave;
    ctx.step = st.index;
    ctx.batch_tokens = st.num_tokens();
    ctx.batch_seqs = static_cast<int>(st.seqs.size());
    ctx.batch_mixed = st.mixed();
    jit_->monitor().set_step(ctx);
    // Listed before it runs, so a step that fails is in the schedule too; `ms` is filled after.
    const bool listed = schedule_.size() < 512;
    if (listed) {
      nlohmann::json rows = nlohmann::json::array();
      for (const ScheduledSeq& q : st.seqs) {
        rows.push_back({{"request", q.id}, {"context", q.context_len}, {"query", q.query_len},
                        {"kind", q.num_draft_tokens > 0 ? "verify"
                                 : q.decode_index >= 0  ? "decode"
                                                        : "prefill"}});
      }
      schedule_.push_back({{"wave", wave}, {"step", st.index}, {"phase", role},
                           {"num_tokens", st.num_tokens()}, {"mixed", st.mixed()},
                           {"ms", nullptr}, {"seqs", rows}});
      result_.extra["schedule"] = schedule_;
    }
    auto body = [&] {
      step_graph_.clear();  // set by execute() once it picks a graph or eager
      step_eager_reason_.clear();
      try {
        run_step(seqs);
      } catch (...) {
        // The failed step says how it ran too (a stale replay fails on its graph's launch).
        if (listed) {
          schedule_.back()["graph"] = step_graph_;
          result_.extra["schedule"] = schedule_;
        }
        throw;
      }
    };
    double ms = 0;
    if (role == "prefill" || role == "continuation_prefill" || role == "first_decode") {
      phase(role, lead, body);
      ms = result_.phases.back().ms;
    } else {
      double reporting = 0;
      if (current_phase_ != role) {
        current_phase_ = role;
        jit_->monitor().set_phase(role);
        // Announced like a phase, so a child killed by a signal in these steps is reported in
        // this phase (the parent takes failed_phase from the last snapshot). The snapshot's time
        // is the harness's own reporting, not the step's.
        const double before = snapshot_ms_;
        snapshot();
        reporting = snapshot_ms_ - before;
        stall_if_asked(role);
      }
      // Memory of the steps aggregated under one role, as phase() records a phase's: the most
      // any of its steps allocated at once, and what was allocated after the last (or failing)
      // one.
      with_phase_memory(std::to_string(lead) + "." + role, /*accumulate=*/true, [&] {
        body();
        device_synchronize(mode());
      });
      ms = ms_since(t0) - reporting;
      if (!aggregated.count(role)) aggregated_order.push_back(role);
      aggregated[role] += ms;
    }
    for (const ScheduledSeq& q : st.seqs) {
      if (q.id == lead && q.decode_index >= 0) lead_decode_ms.push_back(ms);
      if (q.completes_prefill) {
        // TTFT: arrival to the first sampled token, without the harness's own reporting.
        const double reporting = snapshot_ms_ - reporting_at_arrival[q.id];
        const double ttft = ms_since(arrival[q.id]) - reporting;
        // The lead's TTFT window split by what the engine's thread did (api_timer.h): the parts
        // add up to its wall time, reporting included (TTFT leaves reporting out).
        if (q.id == lead && timed && api_timer_)
          result_.extra["ttft_host_ms"][std::to_string(wave)] =
              host_split(host_at_arrival, api_timer_->totals());
        result_.extra["harness_reporting_ms"][std::to_string(wave)] = reporting;
        if (timed) result_.extra["request_ttft_ms"][std::to_string(q.id)] = ttft;
        if (q.id == lead && timed) (wave == 0 ? result_.ttft_ms : result_.steady_ttft_ms) = ttft;
      }
    }
    if (listed) {
      // Whether the step ran as a captured graph, and of which size, or eagerly.
      schedule_.back()["graph"] = step_graph_;
      if (timed) schedule_.back()["ms"] = ms;
      result_.extra["schedule"] = schedule_;
    }
    sched.complete(st);
    for (const ScheduledSeq& q : st.seqs)
      if (q.num_draft_tokens > 0) num_accepted[q.id] = sched.emitted_tokens(q);
    for (const ScheduledSeq& q : st.seqs)
      if (sched.finished(q.id) && blocks.count(q.id)) release(q.id);
  }
  jit_->monitor().set_step(StepContext{});
  // Steps not timed as their own phase: drop what they recorded in the GPU spans.
  for (GpuSpans* s : {sdpa_spans_.get(), model_spans_.get(), mixer_spans_.get()}) s->take_total_ms();
  sampling_ms_ = 0;
  for (const std::string& role : aggregated_order) {
    result_.phases.push_back(PhaseTiming{role, aggregated[role], std::nullopt, lead});
  }
  std::vector<double> rest(lead_decode_ms.size() > 1 ? lead_decode_ms.begin() + 1
                                                     : lead_decode_ms.end(),
                           lead_decode_ms.end());
  if (wave == 0) {
    if (timed && !lead_decode_ms.empty()) result_.first_decode_ms = lead_decode_ms[0];
    result_.extra["first_request_decode_median_ms"] =
        timed && !rest.empty() ? nlohmann::json(median_of(rest)) : nlohmann::json(nullptr);
  } else {
    // The steady request is the warm twin of the first: one that pins another prompt length
    // does other work, and first / steady says nothing about first-time costs.
    const RequestSpec* first = nullptr;
    const RequestSpec* steady = nullptr;
    for (const RequestSpec& r : scenario_.requests) {
      if (r.steady && !steady) steady = &r;
      if (!r.steady && !first) first = &r;
    }
    if (first && steady && first->prompt_tokens != steady->prompt_tokens)
      result_.extra["steady_not_comparable"] =
          fmt::format("the steady request has {} prompt tokens, the first request {}",
                      steady->prompt_tokens, first->prompt_tokens);
    if (timed) {
      if (!lead_decode_ms.empty()) result_.steady_decode_ms = median_of(lead_decode_ms);
      record_first_time_costs();
    }
  }
  snapshot();
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
  const int spec_k = num_speculative_tokens(scenario_.engine);
  if (spec_k > 0) {
    // vLLM's GDN metadata: spec_state_indices = block_table[:, :1 + k] of the state group, and
    // num_accepted_tokens per request; verify rows lead the batch (reorder_batch_threshold).
    b.spec_query_len = spec_k + 1;
    std::vector<int32_t> pages, accepted;
    for (const SeqStep& s : seqs) {
      for (int c = 0; c <= spec_k; ++c)
        pages.push_back(c < static_cast<int>(s.state_pages.size()) ? s.state_pages[c]
                                                                   : s.state_slot);
      accepted.push_back(s.num_accepted);
    }
    while (b.num_spec_reqs < b.num_reqs && seqs[b.num_spec_reqs].verify) ++b.num_spec_reqs;
    for (size_t r = b.num_spec_reqs; r < seqs.size(); ++r)
      CS_CHECK(!seqs[r].verify, "verify rows lead the batch (vLLM reorders them first)");
    b.spec_state_slots = to_dev(pages, at::kInt).view({b.num_reqs, spec_k + 1});
    b.num_accepted_tokens = to_dev(accepted, at::kInt);
  }
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
  // A verify row's logits cover all its rows (the drafts' positions and the bonus token's:
  // vLLM's logits_indices under speculative decoding), other requests' only the last row.
  std::vector<int64_t> last;
  for (int r = 0; r < batch.num_reqs; ++r) {
    const int first = r < batch.num_spec_reqs ? batch.query_start[r]
                                              : batch.query_start[r] + batch.query_lens[r] - 1;
    for (int t = first; t < batch.query_start[r] + batch.query_lens[r]; ++t) last.push_back(t);
  }
  if (device().is_meta()) {
    return at::empty({static_cast<int64_t>(last.size())},
                     at::TensorOptions().dtype(at::kLong).device(device()));
  }
  return at::from_blob(last.data(), {static_cast<int64_t>(last.size())}, at::kLong).clone().to(device());
}

}  // namespace coldstart
