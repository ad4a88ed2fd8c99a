// coldstart: the `expect:` block of a scenario, a list of typed rules (format in scenario.h; the
// results are checked against them by harness/replay/expect.h).
#include <fmt/format.h>

#include <algorithm>

#include "harness/common/target.h"
#include "harness/replay/scenario_internal.h"

namespace coldstart::scenario_detail {
namespace {

const std::vector<std::string> kExpectKeys = {
    "strategy",          "variant",          "mode",             "arch",             "device",
    "rank",              "outcome",           "failed_phase",     "error_prefix",
    "hot_path_compiles", "hot_path_kernels", "max_hot_path_compiles"};
const std::vector<std::string> kChecks = {"outcome",          "failed_phase",
                                          "error_prefix",     "hot_path_compiles",
                                          "hot_path_kernels", "max_hot_path_compiles"};
const std::vector<std::string> kModes = {"cuda", "compile-only"};
// The archs a rule may be limited to: one per GPU generation coldstart targets.
const std::vector<std::string> kArchs = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"};
const std::vector<std::string> kOutcomes = {"ok", "crash", "timeout", "error", "skipped"};

// A string that must be one of `known`.
std::optional<std::string> read_choice(Checker& c, const Entry& x,
                                       const std::vector<std::string>& known, const char* what) {
  auto v = read_string(c, x.path, x.value);
  if (!v) return std::nullopt;
  if (!contains(known, *v)) {
    c.fail(x.path, x.value.Mark(),
           fmt::format("unknown {} '{}'{}; known: {}", what, *v, suggest(*v, known), names(known)));
    return std::nullopt;
  }
  return v;
}

}  // namespace

void load_expectations(Checker& c, const Entry& ex, const std::vector<std::string>& strategies,
                       const std::vector<std::string>& variants, std::vector<Expectation>& out,
                       int world) {
  if (!ex.value.IsSequence()) {
    c.fail(ex.path, ex.value.IsDefined() ? ex.value.Mark() : ex.key_node.Mark(),
           fmt::format("expected a list of rules like {{strategy: none, outcome: crash}}, got {}",
                       kind_name(kind_of(ex.value))));
    return;
  }
  for (size_t i = 0; i < ex.value.size(); ++i) {
    const YAML::Node& n = ex.value[i];
    Path p = child(ex.path, std::to_string(i));
    MapView mv(c, n, p, n.Mark(), &kExpectKeys);
    if (!mv.ok()) continue;
    const size_t errors_before = c.error_count();
    Expectation r;
    if (const OverrideRec* o = c.origin(p); o && !o->file_marks)
      r.where = o->label;
    else
      r.where = fmt::format("{}:{}", c.file(), n.Mark().line + 1);

    if (const Entry* x = mv.require("strategy")) {
      if (auto v = read_string(c, x->path, x->value)) {
        if (*v != "*" && !contains(strategies, *v))
          c.fail(x->path, x->value.Mark(),
                 fmt::format("unknown strategy '{}'{}; strategies: {} (or \"*\" for every one)", *v,
                             suggest(*v, strategies), names(strategies)));
        else
          r.strategy = *v;
      }
    }
    if (const Entry* x = mv.get("variant")) {
      if (auto v = read_string(c, x->path, x->value)) {
        if (!contains(variants, *v)) {
          std::string known;
          for (const auto& name : variants)
            known += fmt::format("{}\"{}\"", known.empty() ? "" : ", ", name);
          const bool no_matrix = variants.size() == 1 && variants[0].empty();
          c.fail(x->path, x->value.Mark(),
                 no_matrix ? fmt::format("unknown variant \"{}\": the scenario has no matrix, so "
                                         "its results have no variant (leave 'variant' out)",
                                         *v)
                           : fmt::format("unknown variant \"{}\"{}; variants: {}", *v,
                                         suggest(*v, variants), known));
        } else {
          r.variant = *v;
        }
      }
    }
    if (const Entry* x = mv.get("mode")) r.mode = read_choice(c, *x, kModes, "mode");
    if (const Entry* x = mv.get("arch")) r.arch = read_choice(c, *x, kArchs, "arch");
    if (const Entry* x = mv.get("device")) {
      std::vector<std::string> profiles;
      for (const Target& t : target_profiles()) profiles.push_back(t.profile);
      r.device = read_choice(c, *x, profiles, "device");
    }
    if (const Entry* x = mv.get("rank")) {
      r.rank = read_int_in(c, x->path, x->value, 0, 63);
      // A rank the run cannot have is a typo found now, not after the whole run.
      if (r.rank && world > 0 && *r.rank >= world)
        c.fail(x->path, x->value.Mark(),
               fmt::format("rank {} is not a rank of this scenario: tensor_parallel_size is {} "
                           "(ranks 0..{})",
                           *r.rank, world, world - 1));
    }
    if (const Entry* x = mv.get("outcome")) r.outcome = read_choice(c, *x, kOutcomes, "outcome");
    if (const Entry* x = mv.get("failed_phase")) {
      r.failed_phase = read_choice(c, *x, replay_phase_names(), "phase");
    }
    if (const Entry* x = mv.get("error_prefix")) r.error_prefix = read_string(c, x->path, x->value);
    if (const Entry* x = mv.get("hot_path_compiles"))
      r.hot_path_compiles = read_int_in(c, x->path, x->value, 0);
    if (const Entry* x = mv.get("max_hot_path_compiles"))
      r.max_hot_path_compiles = read_int_in(c, x->path, x->value, 0);
    if (const Entry* x = mv.get("hot_path_kernels")) {
      if (!x->value.IsSequence()) {
        c.fail(
            x->path, x->value.IsDefined() ? x->value.Mark() : x->key_node.Mark(),
            fmt::format("expected a list of kernel names, got {}", kind_name(kind_of(x->value))));
      } else {
        std::vector<std::string> kernels;
        for (size_t k = 0; k < x->value.size(); ++k)
          if (auto v = read_string(c, child(x->path, std::to_string(k)), x->value[k])) {
            if (v->empty())
              c.fail(child(x->path, std::to_string(k)), x->value[k].Mark(), "a kernel name must not be empty");
            else
              kernels.push_back(*v);
          }
        std::sort(kernels.begin(), kernels.end());
        kernels.erase(std::unique(kernels.begin(), kernels.end()), kernels.end());
        r.hot_path_kernels = std::move(kernels);
      }
    }
    const bool has_check = std::any_of(kChecks.begin(), kChecks.end(),
                                       [&](const std::string& k) { return mv.get(k) != nullptr; });
    if (!has_check)
      c.fail(p, n.Mark(), fmt::format("a rule needs at least one check: {}", names(kChecks)));
    if (c.error_count() == errors_before) out.push_back(std::move(r));
  }
}

}  // namespace coldstart::scenario_detail

namespace coldstart {

const std::vector<std::string>& replay_phase_names() {
  // Startup (engine.cpp), then request steps named by what they do for the lead request
  // (engine_requests.cpp).
  static const std::vector<std::string> kPhases = {
      "init",          "load_weights",  "profile_run",          "kv_cache_alloc",
      "kernel_warmup", "graph_capture", "workspace_lock",       "sampler_warmup",
      "prefill",       "continuation_prefill", "first_decode", "decode",
      "prefill_others", "steady_request"};
  return kPhases;
}

}  // namespace coldstart
