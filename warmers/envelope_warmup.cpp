// envelope-warmup: the warmer `coldstart coverage` generates. Coverage lists, for a strategy,
// the envelope classes (engine_envelope.cpp: "prefill N", "continue N after C", "decode B")
// that first reach each kernel key the strategy's startup left cold; set as
// engine.envelope_warmup_classes, this warmer runs one dummy step of each class before graph
// capture, so exactly those keys compile (and autotune) at startup instead of on a request.
//
// The step is the engine's own warmup entry point, not a list of keys compiled blindly: vLLM V1
// warms its compile sizes the same way, Worker.compile_or_warm_up_model
// (vllm/v1/worker/gpu_worker.py at vllm-project/vllm 0012cf69) calling
// model_runner._dummy_run(size) for each compile size that is not a capture size, before
// capture_model. Like those dummy runs, these steps run before the capture, unpadded: a class
// whose steps after capture are padded to a piecewise capture size reaches the same keys only
// where the mixers' inputs have the same strides padded or not (fresh tensors, as the models
// build them; coverage --strategy envelope lists any key that still differs). A class is a batch
// shape rather than a token count only because the envelope's keys also follow the batch's
// metadata (cached context, number of sequences); the classes run in the order listed. Under
// expert parallelism an "experts M" class runs this rank's routed experts alone at M tokens
// (WarmupContext::run_local_experts), after the steps: the count a rank receives follows the
// routing, which no dummy batch fixes.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/models/spec_decode.engine_keys.h"
#include "warmers/envelope_warmup.engine_keys.h"
#include "warmers/warmer.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace {

// The largest count in `label` (its digit runs; the loader allows at most 9 digits each).
long long largest_count(const std::string& label) {
  long long best = 0, cur = 0;
  for (char ch : label) {
    if (ch >= '0' && ch <= '9') {
      cur = cur * 10 + (ch - '0');
      best = std::max(best, cur);
    } else {
      cur = 0;
    }
  }
  return best;
}

/// `items` joined by ", ", the first `shown` of them and a count of the rest: a generated list
/// of thousands of classes stays readable in a report line (the JSON detail keeps them all).
std::string first_of(const std::vector<std::string>& items, size_t shown = 8) {
  if (items.size() <= shown) return fmt::format("{}", fmt::join(items, ", "));
  return fmt::format("{}, and {} more",
                     fmt::join(items.begin(), items.begin() + static_cast<long>(shown), ", "),
                     items.size() - shown);
}

class EnvelopeWarmup final : public Warmer {
 public:
  std::string name() const override { return "envelope-warmup"; }
  std::string description() const override {
    return "one dummy step per class of engine.envelope_warmup_classes (the classes `coldstart "
           "coverage` finds reaching a strategy's cold keys), like vLLM's _dummy_run per compile "
           "size";
  }

  void run(WarmupContext& ctx) override {
    const EngineConfig& e = ctx.scenario().engine;
    const std::string& list = envelope_warmup_classes(e);
    if (list.empty()) {
      ctx.skip("engine.envelope_warmup_classes is not set or is empty (run `coldstart coverage` "
               "and set it to the classes it lists for the strategy)");
      return;
    }
    const std::vector<std::string> labels = split_list_items(list);
    // The loader checked each class's form. A class this server could never be sent (after a
    // --set that shrank the envelope, say) warms nothing a request could reach: left out, and
    // named in the report.
    std::vector<std::vector<SeqStep>> steps;
    std::vector<std::string> run, outside;
    std::vector<int64_t> expert_counts;  // "experts M" classes, run after the steps
    std::vector<std::string> no_experts;    // "experts M" without expert parallelism
    // No count of a class this server can be sent exceeds the largest of its limits; a larger
    // one is outside before its batch is built (a 9-digit "decode B" would build B rows).
    const long long limit = std::max<long long>(
        {e.max_num_seqs, e.max_num_batched_tokens, e.max_model_len});
    const bool has_experts = !ctx.expert_token_classes().empty();  // expert parallelism
    const int spec_k = num_speculative_tokens(e);
    std::set<std::string> seen;
    std::map<std::string, std::string> batches;  // each batch run, by its rows, and its label
    std::vector<std::string> same_batch;          // "label (as earlier label)"
    for (const std::string& label : labels) {
      // A class listed twice warms nothing the first step did not: it runs once.
      if (!seen.insert(label).second) continue;
      // "experts M": this rank's routed experts at M tokens (a count no step could route to a
      // rank is outside the envelope; without expert parallelism there is nothing to run).
      if (label.rfind("experts ", 0) == 0) {
        const int64_t m = std::stoll(label.substr(8));
        if (!has_experts) {
          no_experts.push_back(label);
        } else if (m > e.max_num_batched_tokens) {
          outside.push_back(label);
        } else {
          run.push_back(label);
          expert_counts.push_back(m);
        }
        continue;
      }
      if (largest_count(label) > limit) {
        outside.push_back(label);
        continue;
      }
      // A verify row needs speculative decoding: without it no step of this server has one.
      if (spec_k == 0 && label.find("verify ") != std::string::npos) {
        outside.push_back(label);
        continue;
      }
      std::optional<std::vector<SeqStep>> seqs = envelope_class_steps(label, e.block_size, spec_k);
      if (!seqs) throw Error(fmt::format("envelope-warmup: '{}' is no envelope class", label));
      if (!envelope_batch_fits(*seqs, e)) {
        outside.push_back(label);
        continue;
      }
      // Parts written in another order can give the same batch (the rows go in the engines'
      // order: "prefill 2 + decode 1" is "decode 1 + prefill 2"): that batch runs once.
      std::string batch;
      for (const SeqStep& r : *seqs)
        batch += fmt::format("{}:{}:{}:{};", r.context_len, r.query_len, r.verify ? 1 : 0,
                             r.state_pages.size());
      if (const auto [it, fresh] = batches.emplace(batch, label); !fresh) {
        same_batch.push_back(fmt::format("{} (as {})", label, it->second));
        continue;
      }
      run.push_back(label);
      steps.push_back(std::move(*seqs));
    }
    const std::string no_ep =
        no_experts.empty()
            ? std::string()
            : fmt::format("{} without expert parallelism (no rank holds only some experts), not "
                          "run: {}",
                          no_experts.size(), first_of(no_experts));
    if (steps.empty() && expert_counts.empty()) {
      if (outside.empty()) {
        ctx.skip(fmt::format("every class of engine.envelope_warmup_classes is an experts class, "
                             "and this server has no expert parallelism ({})",
                             first_of(no_experts)));
        return;
      }
      ctx.skip(fmt::format("every class of engine.envelope_warmup_classes is outside this "
                           "server's envelope (max_num_batched_tokens {}, max_num_seqs {}, "
                           "max_model_len {}{}): {}{}",
                           e.max_num_batched_tokens, e.max_num_seqs, e.max_model_len,
                           spec_k == 0 ? ", no speculative decoding" : "",
                           first_of(outside), no_ep.empty() ? "" : "; " + no_ep));
      return;
    }
    for (const auto& seqs : steps) ctx.dummy_run(seqs);
    for (int64_t m : expert_counts) ctx.run_local_experts(m);
    ctx.log(fmt::format("envelope-warmup: {} dummy steps ({})", run.size(), fmt::join(run, ", ")));
    std::string summary =
        expert_counts.empty()
            ? fmt::format("{} envelope class{}, one dummy step each", run.size(),
                          run.size() == 1 ? "" : "es")
            : fmt::format("{} envelope class{}, one dummy step each ({} of them this rank's "
                          "experts alone)",
                          run.size(), run.size() == 1 ? "" : "es", expert_counts.size());
    if (!outside.empty())
      summary += fmt::format("; {} outside this server's envelope, not run: {}", outside.size(),
                             first_of(outside));
    if (!no_ep.empty()) summary += "; " + no_ep;
    if (!same_batch.empty())
      summary += fmt::format("; {} the same batch as an earlier class, run once: {}",
                             same_batch.size(), first_of(same_batch));
    ctx.report(summary, {{"classes", run}, {"outside_envelope", outside},
                         {"no_expert_parallelism", no_experts}, {"same_batch", same_batch}});
  }
};

CS_REGISTER_WARMER(EnvelopeWarmup);

}  // namespace
}  // namespace coldstart
