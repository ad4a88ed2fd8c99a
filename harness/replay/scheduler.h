// The request scheduler of a replay: forms each step's batch the way vLLM V1's Scheduler.schedule
// does (vllm/v1/core/sched/scheduler.py, read at commit b4622cf9): running requests first, in
// order, each getting its remaining prompt tokens (chunked to the token budget) or one decode
// token; then waiting requests that have arrived, first come first served, while fewer than
// max_num_seqs run and token budget is left, the head of the queue chunked to what is left
// (or not admitted when chunked prefill is off and its prompt does not fit). New requests join
// running decodes in the same step, so mixed prefill/decode batches occur. No preemption: the
// replay's KV cache always holds every request. Torch-free.
#pragma once

#include <vector>

namespace coldstart {

/// One request as the scheduler sees it.
struct SchedRequest {
  int id = 0;             ///< caller's index
  int prompt_tokens = 0;  ///< > 0
  int decode_steps = 0;   ///< decode steps after the first sampled token (>= 0)
  int arrival_step = 0;   ///< the step at which it arrives (>= 0)
};

/// One request's share of a step.
struct ScheduledSeq {
  int id = 0;
  int context_len = 0;             ///< tokens already in the KV cache
  int query_len = 0;               ///< new tokens this step
  bool completes_prefill = false;  ///< the last prompt chunk: the step samples its first token
  int decode_index = -1;           ///< >= 0: this is its decode step number decode_index (0 = first)
};

/// One scheduler step.
struct SchedStep {
  int index = 0;  ///< step number (idle steps with nothing to run are skipped, not listed)
  std::vector<ScheduledSeq> seqs;  ///< in batch order: running first, then newly admitted
  int num_tokens() const;
  /// Both prefill and decode rows.
  bool mixed() const;
};

/// Forms steps until every request has finished.
class Scheduler {
 public:
  /// Throws Error when a limit is < 1 or a request is malformed.
  Scheduler(std::vector<SchedRequest> requests, int max_num_seqs, int max_num_batched_tokens,
            bool enable_chunked_prefill);
  /// True when every request finished.
  bool done() const;
  /// The next step's batch (advances the step counter over idle steps). Throws Error when
  /// nothing can ever be scheduled (a prompt longer than the budget with chunked prefill off).
  /// Call complete() before the next call.
  SchedStep next();
  /// Records that `step` ran: computed tokens advance, requests that finished leave.
  void complete(const SchedStep& step);
  /// The first step index at or after which request `id` arrives.
  int arrival_step(int id) const;

 private:
  struct State {
    SchedRequest r;
    int computed = 0;   ///< tokens in the KV cache
    int decoded = 0;    ///< decode steps done
    bool admitted = false;
    bool finished = false;
  };
  State& find(int id);
  std::vector<State> reqs_;
  std::vector<int> running_;  ///< ids in admission order
  int max_num_seqs_, budget_;
  bool chunked_;
  int step_ = 0;
};

}  // namespace coldstart
