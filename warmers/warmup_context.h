// What a warmer may use of the engine: the JIT runtime, the workspace, the target GPU, the
// mixers of one backend or kind, and a dummy run of a given batch shape. Nothing else: a warmer
// never sees the engine's graphs, scheduler or results.
#pragma once

#include <ATen/core/Tensor.h>

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

/// The batch of one serving-envelope class (engine_envelope.cpp, `coldstart coverage`), every
/// block the null block 0: "prefill N" one fresh prompt of N tokens; "continue N after C" N new
/// tokens after C cached ones; "decode B" B sequences of one new token after one cached, request
/// slots 0..B-1 ("decode B after C": after C cached tokens each); "decode B + prefill N" and
/// "decode B after C + prefill N" those B decode rows, then a fresh prompt of N tokens in slot B;
/// "decode B + continue N after C" the B decode rows, then N new tokens after C cached ones in
/// slot B; "prefill N + prefill M" two fresh prompts, slots 0 and 1 (a 1-token one first: it is a
/// decode row to the batch split). nullopt when `label` is none of these forms or a count is not
/// positive.
inline std::optional<std::vector<SeqStep>> envelope_class_steps(const std::string& label,
                                                                int block_size) {
  int n = 0, c = 0;
  char tail = 0;
  if (std::sscanf(label.c_str(), "prefill %d%c", &n, &tail) == 1 && n > 0)
    return std::vector<SeqStep>{null_block_step(0, n, block_size)};
  if (std::sscanf(label.c_str(), "continue %d after %d%c", &n, &c, &tail) == 2 && n > 0 && c > 0)
    return std::vector<SeqStep>{null_block_step(c, n, block_size)};
  // B decode rows, each one new token after `context` cached ones, in slots 0..B-1; then a fresh
  // prompt of `prompt` tokens in slot B when `prompt` > 0.
  auto decodes = [block_size](int rows, int context, int prompt) {
    std::vector<SeqStep> seqs;
    for (int r = 0; r < rows; ++r) {
      seqs.push_back(null_block_step(context, 1, block_size));
      seqs.back().req_slot = r;
    }
    if (prompt > 0) {
      seqs.push_back(null_block_step(0, prompt, block_size));
      seqs.back().req_slot = rows;
    }
    return seqs;
  };
  int p = 0;
  if (std::sscanf(label.c_str(), "prefill %d + prefill %d%c", &n, &p, &tail) == 2 && n > 0 &&
      p > 0) {
    std::vector<SeqStep> seqs{null_block_step(0, n, block_size), null_block_step(0, p, block_size)};
    seqs[1].req_slot = 1;
    // A 1-token prompt is a decode row to the engines' batch split (vLLM's
    // split_decodes_and_prefills, decode_threshold 1), and decodes lead the batch.
    if (p == 1 && n > 1) std::swap(seqs[0], seqs[1]);
    return seqs;
  }
  if (std::sscanf(label.c_str(), "decode %d + continue %d after %d%c", &n, &p, &c, &tail) == 3 &&
      n > 0 && p > 0 && c > 0) {
    std::vector<SeqStep> seqs = decodes(n, 1, 0);
    seqs.push_back(null_block_step(c, p, block_size));
    seqs.back().req_slot = n;
    return seqs;
  }
  if (std::sscanf(label.c_str(), "decode %d after %d + prefill %d%c", &n, &c, &p, &tail) == 3 &&
      n > 0 && c > 0 && p > 0)
    return decodes(n, c, p);
  if (std::sscanf(label.c_str(), "decode %d after %d%c", &n, &c, &tail) == 2 && n > 0 && c > 0)
    return decodes(n, c, 0);
  if (std::sscanf(label.c_str(), "decode %d + prefill %d%c", &n, &c, &tail) == 2 && n > 0 &&
      c > 0)
    return decodes(n, 1, c);
  if (std::sscanf(label.c_str(), "decode %d%c", &n, &tail) == 1 && n > 0) return decodes(n, 1, 0);
  return std::nullopt;
}

}  // namespace coldstart
