// Where in the replayed request stream something happened: the scheduler step and its batch.
// The JIT monitor stamps every compile, disk load and autotune with the step running when it
// happened (harness/jit), and the results carry it (harness/replay/result.h), so a hot-path
// compile is tied to the request that paid for it.
#pragma once

namespace coldstart {

/// A scheduler step of the replay and its batch. `request < 0`: no step was running (startup,
/// warmers, graph capture).
struct StepContext {
  int request = -1;       ///< the scenario's request index (requests: list order, steady
                          ///< included) whose step it was: the wave's lead when it is in the
                          ///< batch, else the batch's first request
  int wave = -1;          ///< 0: the first wave of requests; 1: the steady request
  int step = -1;          ///< the scheduler step within the wave, from 0
  int batch_tokens = 0;   ///< tokens in the step's batch
  int batch_seqs = 0;     ///< sequences in the step's batch
  bool batch_mixed = false;  ///< the batch mixes prefill and decode rows
  /// 0: the target model's forward. p >= 1: the draft model's p-th pass after it (speculative
  /// decoding's MTP head: pass 1 over the step's rows, the others one row per request).
  int drafter_pass = 0;
  int drafter_tokens = 0;  ///< rows that drafter pass ran (padded to a capture size when it is)

  bool operator==(const StepContext& o) const {
    return request == o.request && wave == o.wave && step == o.step &&
           batch_tokens == o.batch_tokens && batch_seqs == o.batch_seqs &&
           batch_mixed == o.batch_mixed && drafter_pass == o.drafter_pass &&
           drafter_tokens == o.drafter_tokens;
  }
};

}  // namespace coldstart
