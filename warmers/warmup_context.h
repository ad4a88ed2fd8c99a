// What a warmer may use of the engine: the JIT runtime, the workspace, the target GPU, the
// mixers of one backend or kind, and a dummy run of a given batch shape. Nothing else: a warmer
// never sees the engine's graphs, scheduler or results.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "harness/models/mixer.h"

namespace coldstart {

class WarmupContext {
 public:
  virtual ~WarmupContext() = default;
  virtual const Scenario& scenario() const = 0;
  virtual DeviceMode mode() const = 0;
  /// cuda:0, or meta in compile-only mode.
  virtual c10::Device device() const = 0;
  virtual const Target& target() const = 0;
  virtual jit::JitRuntime& jit() = 0;
  virtual WorkspaceManager& workspace() = 0;
  /// The layers' mixers `ref` matches (backend() or spec().kind), in layer order (empty when the
  /// model has none). Throws Error for a reference no registered backend has (a harness fault:
  /// the warmer should have declared it in Warmer::mixers_used).
  virtual std::vector<Mixer*> mixers(const MixerRef& ref) = 0;
  /// A batch on the engine's own input tensors and block table (so strides and alignment, and
  /// with them the kernels' compile keys, match serving). Token ids are synthetic. Request slots
  /// must be 0..B-1 in order; blocks should be the null block 0, which no request uses.
  virtual ForwardBatch make_batch(const std::vector<SeqStep>& seqs) = 0;
  /// One model step for `seqs` the way a request step runs (graphs when a captured size fits,
  /// else eager; mixers included; sampling and copy to host), on synthetic tokens. Returns the
  /// sampled token ids (zeros in compile-only mode).
  virtual std::vector<int64_t> dummy_run(const std::vector<SeqStep>& seqs) = 0;
  /// Expert parallelism: the token counts at which this rank's routed experts reach different
  /// compile keys, up to max_num_batched_tokens (Model::expert_token_classes); empty without it.
  virtual std::vector<int64_t> expert_token_classes() = 0;
  /// Runs this rank's routed experts once at M tokens routed to its own experts, as the
  /// dispatch hands them (Model::run_local_experts): the grouped GEMM's key and config at M,
  /// whatever the routing. No collective. Throws Error without expert parallelism.
  virtual void run_local_experts(int64_t M) = 0;
  /// Writes a progress line.
  virtual void log(const std::string& line) = 0;
  /// The running warmer finds nothing to do for this model or these settings (no layer of its
  /// kind, a budget too small for its batch): logs `<warmer>: <reason>` and records the reason in
  /// the result (`warmers_skipped`), so a strategy that equals `none` says so.
  virtual void skip(const std::string& reason) = 0;
  /// What the running warmer did, for the reader of the result: `summary` is one line (printed
  /// under the table), `data` its numbers; both land in the result's `warmer_reports` under the
  /// warmer's name ({"summary": ..., and data's keys}).
  virtual void report(const std::string& summary, const nlohmann::json& data) = 0;
};

/// A synthetic sequence of a warmer's dummy step: `query_len` new tokens after `context_len`
/// cached ones, every block the null block 0 (which no request uses), request slot 0.
inline SeqStep null_block_step(int context_len, int query_len, int block_size) {
  SeqStep s;
  s.context_len = context_len;
  s.query_len = query_len;
  s.blocks.assign((context_len + query_len + block_size - 1) / block_size, 0);
  return s;
}

/// The batch of one serving-envelope class (engine_envelope.cpp, `coldstart coverage`,
/// envelope-warmup), every block the null block 0. A label is one part or several joined by
/// " + ", each part some rows of the step:
///   "prefill N"           a fresh prompt of N tokens ("prefill N x S": S such prompts);
///   "continue N after C"  N new tokens after C cached ones (a later chunk of a prompt);
///   "decode B"            B rows of one new token after one cached ("decode B after C": after C);
///   "verify B"            B speculative verify rows of 1 + spec_k tokens (the last sampled
///                         token and spec_k drafts) after one cached ("verify B after C"), each
///                         with 1 + spec_k state pages and one accepted token before; only when
///                         spec_k > 0.
/// The rows are grouped as vLLM's batch reorder groups them: requests of at most decode_threshold
/// scheduled tokens first, the rest after (reorder_batch_to_split_decodes_and_prefills,
/// vllm/v1/attention/backends/utils.py, read in a stored tree where it sits at line 665; it
/// swaps rows, so the order inside a group is vLLM's own, kept here as written). Inside the
/// front group verify rows lead, as Engine::make_batch requires (the replay's convention: vLLM
/// does not order verify rows before one-token decodes). So: verify rows, then one-token rows
/// (a 1-token prompt or chunk is a decode row to the split), then the rest, each group in label
/// order; request slots 0..B-1 in that order. Newer trees split the later group further
/// (chunked-prefill extends apart from first chunks); the label order stands in for that.
/// nullopt when a part is none of these forms or a count is not positive.
inline std::optional<std::vector<SeqStep>> envelope_class_steps(const std::string& label,
                                                                int block_size, int spec_k = 0) {
  std::vector<SeqStep> rows;
  size_t start = 0;
  while (true) {
    const size_t plus = label.find(" + ", start);
    const std::string part =
        label.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
    const char* p = part.c_str();
    int n = 0, c = 0;
    char tail = 0;
    auto add = [&](int count, int context, int query) {
      for (int r = 0; r < count; ++r) rows.push_back(null_block_step(context, query, block_size));
    };
    if (std::sscanf(p, "prefill %d x %d%c", &n, &c, &tail) == 2 && n > 0 && c > 0) {
      add(c, 0, n);
    } else if (std::sscanf(p, "prefill %d%c", &n, &tail) == 1 && n > 0) {
      add(1, 0, n);
    } else if (std::sscanf(p, "continue %d after %d%c", &n, &c, &tail) == 2 && n > 0 && c > 0) {
      add(1, c, n);
    } else if (std::sscanf(p, "decode %d after %d%c", &n, &c, &tail) == 2 && n > 0 && c > 0) {
      add(n, c, 1);
    } else if (std::sscanf(p, "decode %d%c", &n, &tail) == 1 && n > 0) {
      add(n, 1, 1);
    } else if (part.rfind("verify ", 0) == 0) {
      const bool after = std::sscanf(p, "verify %d after %d%c", &n, &c, &tail) == 2;
      if (!after && std::sscanf(p, "verify %d%c", &n, &tail) != 1) return std::nullopt;
      if (!after) c = 1;  // "verify B": after one cached token, as "decode B"
      if (spec_k <= 0 || n <= 0 || c <= 0) return std::nullopt;
      const size_t first = rows.size();
      add(n, c, 1 + spec_k);
      for (size_t r = first; r < rows.size(); ++r) {
        rows[r].verify = true;
        rows[r].state_pages.assign(1 + spec_k, 0);
        rows[r].num_accepted = 1;
      }
    } else {
      return std::nullopt;
    }
    if (plus == std::string::npos) break;
    start = plus + 3;
  }
  auto group = [](const SeqStep& s) { return s.verify ? 0 : s.query_len == 1 ? 1 : 2; };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const SeqStep& a, const SeqStep& b) { return group(a) < group(b); });
  for (size_t r = 0; r < rows.size(); ++r) rows[r].req_slot = static_cast<int>(r);
  return rows;
}

/// Whether a server with engine settings `e` can be sent the batch `seqs` (an envelope class's):
/// at most max_num_batched_tokens new tokens and max_num_seqs rows, and every row's cached plus
/// new tokens below max_model_len (a request's prompt leaves room for the token it generates).
/// The coverage sweep's mixed classes and envelope-warmup apply this one rule.
inline bool envelope_batch_fits(const std::vector<SeqStep>& seqs, const EngineConfig& e) {
  int tokens = 0;
  for (const SeqStep& s : seqs) {
    tokens += s.query_len;
    if (s.context_len + s.query_len >= e.max_model_len) return false;
  }
  return tokens <= e.max_num_batched_tokens && static_cast<int>(seqs.size()) <= e.max_num_seqs;
}

}  // namespace coldstart
