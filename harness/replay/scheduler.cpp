#include "harness/replay/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "harness/common/error.h"

namespace coldstart {

int SchedStep::num_tokens() const {
  int n = 0;
  for (const auto& s : seqs) n += s.query_len;
  return n;
}

bool SchedStep::mixed() const {
  bool prefill = false, decode = false;
  for (const auto& s : seqs) (s.decode_index >= 0 ? decode : prefill) = true;
  return prefill && decode;
}

Scheduler::Scheduler(std::vector<SchedRequest> requests, int max_num_seqs,
                     int max_num_batched_tokens, bool enable_chunked_prefill, int64_t free_blocks)
    : max_num_seqs_(max_num_seqs),
      budget_(max_num_batched_tokens),
      chunked_(enable_chunked_prefill),
      free_blocks_(free_blocks) {
  if (max_num_seqs < 1 || max_num_batched_tokens < 1) {
    throw Error("scheduler: max_num_seqs and max_num_batched_tokens must be >= 1");
  }
  for (const auto& r : requests) {
    if (r.prompt_tokens < 1 || r.decode_steps < 0 || r.arrival_step < 0 || r.blocks < 0) {
      throw Error(fmt::format("scheduler: request {} is malformed", r.id));
    }
    if (free_blocks >= 0 && r.blocks > free_blocks) {
      throw InputError(fmt::format(
          "request {} needs {} KV-cache blocks but the cache has {} usable: vLLM would keep it "
          "waiting for ever; give the engine more blocks (num_gpu_blocks, gpu_memory_utilization) "
          "or shorten the request",
          r.id, r.blocks, free_blocks));
    }
    reqs_.push_back(State{r});
  }
  // Arrival order, ties in the caller's order (FCFS).
  std::stable_sort(reqs_.begin(), reqs_.end(), [](const State& a, const State& b) {
    return a.r.arrival_step < b.r.arrival_step;
  });
}

void Scheduler::set_speculative(int num_spec_tokens, int accepted, int max_model_len) {
  if (num_spec_tokens < 0 || accepted < 0 || accepted > num_spec_tokens || max_model_len < 0)
    throw Error(fmt::format("scheduler: {} accepted of {} draft tokens", accepted, num_spec_tokens));
  spec_tokens_ = num_spec_tokens;
  accepted_ = accepted;
  max_model_len_ = max_model_len;
}

int Scheduler::emitted_tokens(const ScheduledSeq& q) const {
  return q.decode_index >= 0 ? 1 + std::min(accepted_, q.num_draft_tokens) : q.query_len;
}

bool Scheduler::done() const {
  return std::all_of(reqs_.begin(), reqs_.end(), [](const State& s) { return s.finished; });
}

Scheduler::State& Scheduler::find(int id) {
  for (auto& s : reqs_)
    if (s.r.id == id) return s;
  throw Error(fmt::format("scheduler: no request {}", id));
}

bool Scheduler::finished(int id) const {
  for (const auto& s : reqs_)
    if (s.r.id == id) return s.finished;
  throw Error(fmt::format("scheduler: no request {}", id));
}

int64_t Scheduler::arrival_step(int id) const {
  for (const auto& s : reqs_)
    if (s.r.id == id) return s.r.arrival_step;
  throw Error(fmt::format("scheduler: no request {}", id));
}

SchedStep Scheduler::next() {
  if (done()) throw Error("scheduler: every request already finished");
  // Skip idle steps: nothing running and the next arrival still ahead.
  if (running_.empty()) {
    int64_t first = std::numeric_limits<int64_t>::max();
    for (const auto& s : reqs_)
      if (!s.admitted) first = std::min(first, s.r.arrival_step);
    step_ = std::max(step_, first);
  }
  SchedStep out;
  out.index = step_;
  int budget = budget_;
  for (int id : running_) {
    if (budget <= 0) break;
    State& s = find(id);
    ScheduledSeq q;
    q.id = id;
    q.context_len = s.computed;
    if (s.computed < s.r.prompt_tokens) {
      q.query_len = std::min(s.r.prompt_tokens - s.computed, budget);
      q.completes_prefill = s.computed + q.query_len == s.r.prompt_tokens;
    } else {
      // A verify row: the last sampled token and its drafts, cut to the budget left and so
      // its last position stays below max_model_len (vllm/v1/core/sched/scheduler.py).
      q.query_len = std::min(1 + spec_tokens_, budget);
      if (max_model_len_ > 0)
        q.query_len = std::max(1, std::min(q.query_len, max_model_len_ - 1 - s.computed));
      q.num_draft_tokens = q.query_len - 1;
      q.decode_index = s.steps;
    }
    budget -= q.query_len;
    out.seqs.push_back(q);
  }
  for (auto& s : reqs_) {
    if (budget <= 0 || static_cast<int>(running_.size()) >= max_num_seqs_) break;
    if (s.admitted || s.r.arrival_step > step_) continue;
    if (!chunked_ && s.r.prompt_tokens > budget) break;  // head of line waits for a whole budget
    if (free_blocks_ >= 0 && s.r.blocks > free_blocks_) break;  // allocate_slots fails: it waits
    if (free_blocks_ >= 0) free_blocks_ -= s.r.blocks;
    ScheduledSeq q;
    q.id = s.r.id;
    q.query_len = std::min(s.r.prompt_tokens, budget);
    q.completes_prefill = q.query_len == s.r.prompt_tokens;
    budget -= q.query_len;
    s.admitted = true;
    running_.push_back(s.r.id);
    out.seqs.push_back(q);
  }
  if (out.seqs.empty()) {
    throw InputError(fmt::format(
        "nothing can be scheduled at step {}: a prompt longer than max_num_batched_tokens {} "
        "with chunked prefill off",
        step_, budget_));
  }
  return out;
}

void Scheduler::complete(const SchedStep& step) {
  for (const auto& q : step.seqs) {
    State& s = find(q.id);
    // A decode row's accepted drafts and the token before them stay in the KV cache; the bonus
    // token is the next step's first row.
    s.computed += emitted_tokens(q);
    if (q.decode_index >= 0) {
      s.decoded += emitted_tokens(q);
      ++s.steps;
    }
    // Finished once the prompt is in and every decode step ran (decode_steps == 0: the first
    // sampled token ends it).
    if (!s.finished && s.computed >= s.r.prompt_tokens && s.decoded >= s.r.decode_steps) {
      s.finished = true;
      if (free_blocks_ >= 0) free_blocks_ += s.r.blocks;
    }
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [&](int id) { return find(id).finished; }),
                 running_.end());
  step_ = step.index + 1;
}

}  // namespace coldstart
