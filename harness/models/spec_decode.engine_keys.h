// The engine keys of speculative decoding (engine_keys.h), read by the engine (scheduler rows,
// capture sizes, FULL decode capture), by the mixers that serve verify steps (gdn_mixer.cpp,
// paged_attention.cpp) and by the qwen-gdn-warmup warmer. What vLLM does (stored sources read
// with the search tools; facts, not code):
//   verify rows   a running request with drafts is scheduled 1 + k tokens (its last sampled
//                 token and k drafts), cut to the token budget and to max_model_len - 1 -
//                 computed tokens; the rows a step accepts advance its computed tokens
//                 (vllm/v1/core/sched/scheduler.py). The KV cache holds k lookahead slots.
//   capture sizes with FULL decode graphs and k > 0 every capture size is rounded up to a
//                 multiple of 1 + k, sizes above the largest dropped, [1 + k] when none is left
//                 and 1 + k fits under the largest (CompilationConfig.
//                 adjust_cudagraph_sizes_for_spec_decode, vllm/config/compilation.py @ 002284db;
//                 issue #28207). A FULL uniform-decode graph of
//                 size x holds x / (1 + k) verify requests (CudagraphDispatcher).
//   GDN           the metadata builder's build() treats a request as a spec decode only when the
//                 step carries draft tokens for it; build_for_cudagraph_capture() derives them
//                 from the capture batch's query lengths (num_accepted_tokens = diff of
//                 query_start_loc), so the FULL capture runs the spec kernels
//                 (vllm/v1/attention/backends/gdn_attn.py @ 007d5005). The eager warmups before
//                 each capture go through build(): for GDN a batch of 1 + k-token requests
//                 without drafts is a batch of prefills. vLLM PR #39483 (closed) reports the
//                 result, "Triton Error [CUDA]: operation not permitted when stream is
//                 capturing" in _causal_conv1d_update_kernel with qwen3_next_mtp and k = 2, and
//                 proposes that the warmups build capture metadata (cudagraph_warmup_metadata
//                 capture here).
//   state pages   a GDN request holds 1 + k state blocks (spec_state_indices = block_table[:,
//                 :1 + k]) and its conv state has conv_kernel - 1 + k rows
//                 (MambaStateShapeCalculator).
//   drafter       method "mtp": the model's MTP head drafts (Model::make_mtp_drafter), run by
//                 vLLM's EagleProposer (vllm/v1/spec_decode/eagle.py @ 008603a3, the logic in
//                 llm_base_proposer.py @ 00c4f22d in newer trees). propose() after every step:
//                 one pass over all the step's rows with the target's final-normed hidden states,
//                 logits at each request's last row, then k - 1 passes of one row per request
//                 fed the drafter's own output. The drafter's graphs are PIECEWISE only (when the
//                 runner's mixed mode captures any), every pass padded to the smallest capture
//                 size that holds it (pad_for_cudagraph), else eager. dummy_run() inside every
//                 _dummy_run (gpu_model_runner.py @ 000fc94b): k model forwards of the same
//                 num_tokens, one while capturing, with no attention metadata and no logits. The
//                 replay runs the drafter's pieces eagerly at the padded size (its graphs are not
//                 captured) and does not replay the spec-decode helper kernels of
//                 vllm/v1/spec_decode/utils.py (issue #39790). Method "synthetic" replays no
//                 drafter. Either way the drafts are token ids the harness picks and every
//                 verify step accepts spec_accepted_tokens of them.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "harness/replay/engine_keys.h"
#include "harness/replay/scenario.h"

namespace coldstart {

inline std::vector<EngineKeySpec> engine_keys_spec_decode() {
  EngineKeySpec k;
  k.name = "num_speculative_tokens";
  k.owner = "engine (speculative decoding)";
  k.type = EngineKeyType::kInt;
  k.min = 0;
  k.max = 16;
  k.unit = "draft tokens";
  k.default_value = "0";
  k.doc = "vLLM's speculative_config.num_speculative_tokens: each decode step verifies 1 + k "
          "rows per request; speculative_method says who drafts them";

  EngineKeySpec acc;
  acc.name = "spec_accepted_tokens";
  acc.owner = "engine (speculative decoding)";
  acc.type = EngineKeyType::kInt;
  acc.min = -1;
  acc.max = 16;
  acc.unit = "draft tokens";
  acc.default_value = "-1";
  acc.doc = "drafts every verify step accepts (0..num_speculative_tokens; -1: all of them): a "
            "step emits 1 + accepted tokens";
  acc.in_result = EngineKeyInResult::kWhenSet;

  EngineKeySpec meta;
  meta.name = "cudagraph_warmup_metadata";
  meta.owner = "engine (speculative decoding)";
  meta.type = EngineKeyType::kChoice;
  meta.choices = {"build", "capture"};
  meta.default_value = "build";
  meta.doc = "the metadata of the eager warmups before a FULL decode capture: build (vLLM: no "
             "drafts, so GDN runs verify batches as prefills) or capture (vLLM PR #39483's "
             "proposal: the capture's own metadata, spec kernels included)";
  meta.in_result = EngineKeyInResult::kWhenSet;
  EngineKeySpec method;
  method.name = "speculative_method";
  method.owner = "engine (speculative decoding)";
  method.type = EngineKeyType::kChoice;
  method.choices = {"mtp", "synthetic"};
  method.default_value = "mtp";
  method.doc = "who drafts when num_speculative_tokens > 0: mtp (vLLM's method \"mtp\": the "
               "model's MTP head, replayed as the draft model) or synthetic (no draft model "
               "replayed, only the verify steps)";
  method.in_result = EngineKeyInResult::kWhenSet;
  return {k, acc, meta, method};
}

/// engine.num_speculative_tokens: k, draft tokens per verify step (0 = no speculative decoding).
inline int num_speculative_tokens(const EngineConfig& e) {
  return static_cast<int>(e.int_key("num_speculative_tokens"));
}

/// Drafts a verify step accepts: engine.spec_accepted_tokens, -1 meaning all k.
inline int spec_accepted_tokens(const EngineConfig& e) {
  const int k = num_speculative_tokens(e);
  const int a = static_cast<int>(e.int_key("spec_accepted_tokens"));
  return a < 0 ? k : std::min(a, k);
}

/// Whether the replay runs a draft model: num_speculative_tokens > 0 with method mtp.
inline bool uses_mtp_drafter(const EngineConfig& e) {
  return num_speculative_tokens(e) > 0 && e.string_key("speculative_method") == "mtp";
}

/// engine.cudagraph_warmup_metadata == "capture".
inline bool warmups_use_capture_metadata(const EngineConfig& e) {
  return e.string_key("cudagraph_warmup_metadata") == "capture";
}

/// Whether vLLM rounds the capture sizes for speculative decoding: k > 0 and FULL decode graphs.
inline bool spec_decode_rounds_capture_sizes(const EngineConfig& e) {
  return num_speculative_tokens(e) > 0 &&
         (e.cudagraph_mode == CudaGraphMode::kFullDecodeOnly ||
          e.cudagraph_mode == CudaGraphMode::kFullAndPiecewise);
}

/// vLLM's adjust_cudagraph_sizes_for_spec_decode (no sequence parallelism): every size rounded up
/// to a multiple of `query_len` (1 + k), those above the largest given size dropped, sorted and
/// de-duplicated; [query_len] when none is left and query_len fits under the largest; empty when
/// it does not (vLLM raises; check_spec_decode refuses it first).
inline std::vector<int> spec_decode_capture_sizes(const std::vector<int>& sizes, int query_len) {
  if (sizes.empty() || query_len <= 1) return sizes;
  const int largest = *std::max_element(sizes.begin(), sizes.end());
  std::set<int> out;
  for (int s : sizes) {
    const int up = (s + query_len - 1) / query_len * query_len;
    if (up <= largest) out.insert(up);
  }
  if (out.empty() && query_len <= largest) out.insert(query_len);
  return {out.begin(), out.end()};
}

/// Speculative-decoding settings the replay refuses before anything runs.
inline std::vector<ScenarioProblem> check_spec_decode(const EngineConfig& e) {
  std::vector<ScenarioProblem> out;
  const int k = num_speculative_tokens(e);
  const int a = static_cast<int>(e.int_key("spec_accepted_tokens"));
  if (a > k)
    out.push_back({"engine.spec_accepted_tokens",
                   "is " + std::to_string(a) + ", more than num_speculative_tokens (" +
                       std::to_string(k) + "): set it to at most that, or -1 (all drafts)"});
  if (k == 0) return out;
  if (spec_decode_rounds_capture_sizes(e) &&
      spec_decode_capture_sizes(e.cudagraph_capture_sizes, k + 1).empty())
    // Named at the size list when the scenario gives one (the list is what has no room).
    out.push_back({e.capture_sizes_listed ? "engine.cudagraph_capture_sizes"
                                          : "engine.num_speculative_tokens",
                   "no capture size is left after rounding to a multiple of " +
                       std::to_string(k + 1) +
                       " (num_speculative_tokens + 1): vLLM refuses to start; list a larger "
                       "capture size"});
  return out;
}

}  // namespace coldstart
