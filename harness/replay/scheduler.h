// The request scheduler of a replay: forms each step's batch the way vLLM V1's Scheduler.schedule
// does (vllm/v1/core/sched/scheduler.py, read at commit b4622cf9): running requests first, in
// order, each getting its remaining prompt tokens (chunked to the token budget) or one decode
// token; then waiting requests that have arrived, first come first served, while fewer than
// max_num_seqs run and token budget is left, the head of the queue chunked to what is left
// (or not admitted when chunked prefill is off and its prompt does not fit, or when the KV cache
// has too few free blocks: allocate_slots fails and the queue waits, first come first served).
// New requests join running decodes in the same step, so mixed prefill/decode batches occur. A
// request takes all its blocks when admitted and returns them when it finishes (vLLM allocates
// them chunk by chunk; with no preemption the peak is the same). Torch-free.
#pragma once

#include <cstdint>
#include <vector>

namespace coldstart {

/// One request as the scheduler sees it.
struct SchedRequest {
  int id = 0;             ///< caller's index
  int prompt_tokens = 0;  ///< > 0
  int decode_steps = 0;   ///< decode steps after the first sampled token (>= 0)
  int64_t arrival_step = 0;  ///< the step at which it arrives (>= 0)
  int64_t blocks = 0;        ///< KV-cache blocks it holds while it runs (prompt + output, plus
                             ///< a state page for models with recurrent layers)
};

/// One request's share of a step.
struct ScheduledSeq {
  int id = 0;
  int context_len = 0;             ///< tokens already in the KV cache
  int query_len = 0;               ///< new tokens this step
  bool completes_prefill = false;  ///< the last prompt chunk: the step samples its first token
  int decode_index = -1;           ///< >= 0: this is its decode step number decode_index (0 = first)
  int num_draft_tokens = 0;        ///< a verify row: query_len - 1 draft tokens (speculative
                                   ///< decoding), 0 otherwise
};

/// One scheduler step.
struct SchedStep {
  int64_t index = 0;  ///< step number (idle steps with nothing to run are skipped, not listed)
  std::vector<ScheduledSeq> seqs;  ///< in batch order: running first, then newly admitted
  int num_tokens() const;
  /// Both prefill and decode rows.
  bool mixed() const;
};

/// Forms steps until every request has finished.
class Scheduler {
 public:
  /// `free_blocks` < 0: no KV-cache limit. Throws Error when a limit is < 1 or a request is
  /// malformed, InputError when a request needs more blocks than the whole cache has (vLLM
  /// would keep it waiting for ever; the replay refuses it).
  Scheduler(std::vector<SchedRequest> requests, int max_num_seqs, int max_num_batched_tokens,
            bool enable_chunked_prefill, int64_t free_blocks = -1);
  /// Speculative decoding (vLLM's scheduler with spec tokens): every decode row becomes a verify
  /// row of 1 + num_spec_tokens tokens (the last sampled token and its drafts; fewer when the
  /// token budget is short), and a step that ran it advances the request by 1 + `accepted`
  /// tokens (accepted drafts plus the bonus token). Output tokens count against decode_steps.
  /// A verify row is also cut so its last position stays below max_model_len (vLLM:
  /// max_model_len - 1 - computed tokens, "necessary when using spec decoding"), never below
  /// one token; max_model_len 0 = no limit. Call before the first next(); throws Error when a
  /// value is negative or accepted > num_spec_tokens.
  void set_speculative(int num_spec_tokens, int accepted, int max_model_len = 0);
  /// Tokens a step that ran `q` adds to its request: 1 + the drafts it accepts for a verify row
  /// (speculative decoding), 1 for a plain decode row, query_len for a prefill chunk.
  int emitted_tokens(const ScheduledSeq& q) const;
  /// True when every request finished.
  bool done() const;
  /// The next step's batch (advances the step counter over idle steps). Throws Error when
  /// nothing can ever be scheduled (a prompt longer than the budget with chunked prefill off).
  /// Call complete() before the next call.
  SchedStep next();
  /// Records that `step` ran: computed tokens advance, requests that finished leave and return
  /// their blocks.
  void complete(const SchedStep& step);
  /// The step at which request `id` arrives.
  int64_t arrival_step(int id) const;
  /// Whether request `id` has finished.
  bool finished(int id) const;

 private:
  struct State {
    SchedRequest r;
    int computed = 0;   ///< tokens in the KV cache
    int decoded = 0;    ///< output tokens after the first (one per decode step without drafts)
    int steps = 0;      ///< decode (verify) steps run
    bool admitted = false;
    bool finished = false;
  };
  State& find(int id);
  std::vector<State> reqs_;
  std::vector<int> running_;  ///< ids in admission order
  int max_num_seqs_, budget_;
  bool chunked_;
  int64_t free_blocks_;
  int64_t step_ = 0;
  int spec_tokens_ = 0;  ///< drafts per verify row
  int accepted_ = 0;     ///< drafts a verify step accepts
  int max_model_len_ = 0;  ///< caps verify rows (0: no cap)
};

}  // namespace coldstart
