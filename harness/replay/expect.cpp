// coldstart: checking results against a scenario's expect: rules (see expect.h).
#include "harness/replay/expect.h"

#include "harness/common/target.h"
#include "harness/replay/yaml_check.h"

#include <fmt/format.h>

#include <algorithm>

namespace coldstart {
namespace {

// Whether a run on `target` (run_target(): a GPU's device name, or a compile-only profile's) is
// on the card of target profile `profile`: the names are equal, ignoring case, as vLLM's
// tuned-table file names compare them (an H100 PCIe is not the h100 profile's H100 SXM).
bool on_device(const std::string& profile, const std::string& target) {
  return scenario_detail::lower(target_profile(profile).device_name) ==
         scenario_detail::lower(target);
}

// Whether rule `e` is about runs in `mode` on compute capability `sm` (0: unknown, so a rule
// with an arch is not) on `target` (run_target(); a rule with a device applies only there).
bool applies(const Expectation& e, const std::string& mode, int sm, const std::string& target) {
  if (e.mode && *e.mode != mode) return false;
  if (e.device && !on_device(*e.device, target)) return false;
  return !e.arch || *e.arch == "sm_" + std::to_string(sm);
}

bool matches(const Expectation& e, const StrategyResult& r) {
  return (e.strategy == "*" || e.strategy == r.strategy) && (!e.variant || *e.variant == r.variant);
}

std::string quoted_or_none(const std::optional<std::string>& v) {
  return v ? fmt::format("'{}'", *v) : std::string("none");
}

std::string list_text(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s + "]";
}

// What a rule checks in one result: the whole result's, or one rank's (a rule with `rank`).
struct Checked {
  std::string outcome;
  std::optional<std::string> failed_phase;
  std::optional<std::string> error;
  std::vector<CompileEvent> compiled;  // hot-path compiles, disk loads left out
  int loads = 0;                       // hot-path kernel-cache loads
};

// The view of `r` rule `e` checks; nullopt (and `why`) when it names a rank `r` has not.
std::optional<Checked> checked_view(const Expectation& e, const StrategyResult& r,
                                    std::string& why) {
  Checked v;
  if (!e.rank) {
    v.outcome = outcome_name(r.outcome);
    v.failed_phase = r.failed_phase;
    v.error = r.error;
    v.compiled = hot_path_compiled(r);
    v.loads = hot_path_loads(r);
    return v;
  }
  // A multi-rank result (engine.ranks: all) keeps every rank's outcome in extra.ranks.per_rank
  // and tags each compile with its rank (harness/cli/ranks_run.cpp).
  const auto ranks = r.extra.find("ranks");
  const nlohmann::json* per_rank = nullptr;
  if (ranks != r.extra.end() && ranks->is_object() && ranks->contains("per_rank"))
    per_rank = &ranks->at("per_rank");
  if (per_rank == nullptr || !per_rank->is_array()) {
    why = fmt::format("rank {}: the result has no per-rank results (only a run with engine.ranks: "
                      "all and tensor_parallel_size > 1 has them)",
                      *e.rank);
    return std::nullopt;
  }
  if (static_cast<size_t>(*e.rank) >= per_rank->size()) {
    why = fmt::format("rank {}: the run had {} ranks", *e.rank, per_rank->size());
    return std::nullopt;
  }
  const nlohmann::json& pr = per_rank->at(static_cast<size_t>(*e.rank));
  v.outcome = pr.value("outcome", "");
  if (pr.contains("failed_phase")) v.failed_phase = pr.at("failed_phase").get<std::string>();
  if (pr.contains("error")) v.error = pr.at("error").get<std::string>();
  for (const auto& c : r.hot_path_compiles) {
    if (c.rank != *e.rank) continue;
    if (c.source == "disk")
      ++v.loads;
    else
      v.compiled.push_back(c);
  }
  return v;
}

// The unmet checks of rule `e` on result `r`, as "what it is, expected what" phrases (a rule
// with `rank` prefixes each with "rank N: ").
std::vector<std::string> unmet(const Expectation& e, const StrategyResult& r) {
  std::vector<std::string> out;
  // A skipped run did not happen here: it passes `outcome: skipped` and is exempt from the rest.
  if (r.outcome == Outcome::kSkipped) return out;
  std::string why;
  const std::optional<Checked> v = checked_view(e, r, why);
  if (!v) return {why};
  const std::string who = e.rank ? fmt::format("rank {}: ", *e.rank) : std::string();
  auto fail = [&](std::string what) { out.push_back(who + what); };
  if (e.outcome && *e.outcome != v->outcome)
    fail(fmt::format("outcome {}, expected {}", v->outcome, *e.outcome));
  if (e.failed_phase && v->failed_phase != e.failed_phase)
    fail(fmt::format("failed_phase {}, expected '{}'", quoted_or_none(v->failed_phase),
                     *e.failed_phase));
  if (e.error_prefix &&
      (!v->error || v->error->compare(0, e.error_prefix->size(), *e.error_prefix)))
    fail(fmt::format("error {}, expected one starting with '{}'", quoted_or_none(v->error),
                     *e.error_prefix));
  const int compiles = static_cast<int>(v->compiled.size());
  // A warm --cache-dir serves kernels from disk: say so beside a count that fell short.
  const std::string served =
      v->loads > 0 ? fmt::format(" ({} more loaded from the on-disk kernel cache: a warm "
                                 "--cache-dir served them)",
                                 v->loads)
                   : std::string();
  if (e.hot_path_compiles && compiles != *e.hot_path_compiles)
    fail(fmt::format("{} hot-path compiles, expected {}{}", compiles, *e.hot_path_compiles, served));
  if (e.max_hot_path_compiles && compiles > *e.max_hot_path_compiles)
    fail(fmt::format("{} hot-path compiles, expected at most {}", compiles,
                     *e.max_hot_path_compiles));
  if (e.hot_path_kernels) {
    std::vector<std::string> kernels;
    for (const auto& c : v->compiled) kernels.push_back(c.kernel);
    std::sort(kernels.begin(), kernels.end());
    kernels.erase(std::unique(kernels.begin(), kernels.end()), kernels.end());
    if (kernels != *e.hot_path_kernels)
      fail(fmt::format("hot-path kernels {}, expected {}{}", list_text(kernels),
                       list_text(*e.hot_path_kernels), served));
  }
  return out;
}

// The checks rule `e` makes, in rule-file order: (field name, "field value" as one phrase).
std::vector<std::pair<std::string, std::string>> checks_of(const Expectation& e) {
  std::vector<std::pair<std::string, std::string>> out;
  if (e.outcome) out.emplace_back("outcome", "outcome " + *e.outcome);
  if (e.failed_phase) out.emplace_back("failed_phase", "failed_phase " + *e.failed_phase);
  if (e.error_prefix)
    out.emplace_back("error_prefix", fmt::format("error_prefix '{}'", *e.error_prefix));
  if (e.hot_path_compiles)
    out.emplace_back("hot_path_compiles", fmt::format("hot_path_compiles {}", *e.hot_path_compiles));
  if (e.max_hot_path_compiles)
    out.emplace_back("max_hot_path_compiles",
                     fmt::format("max_hot_path_compiles {}", *e.max_hot_path_compiles));
  if (e.hot_path_kernels)
    out.emplace_back("hot_path_kernels", "hot_path_kernels " + list_text(*e.hot_path_kernels));
  return out;
}

// The rule as one line, its mode, arch and device limits first: "mode cuda, outcome crash, ...".
std::string rule_text(const Expectation& e) {
  std::vector<std::string> parts;
  if (e.mode) parts.push_back("mode " + *e.mode);
  if (e.arch) parts.push_back("arch " + *e.arch);
  if (e.device) parts.push_back("device " + *e.device);
  if (e.rank) parts.push_back(fmt::format("rank {}", *e.rank));
  for (auto& [name, text] : checks_of(e)) parts.push_back(std::move(text));
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  return s.empty() ? std::string("(no checks)") : s;
}

// Rule `e` against every result it matches: one line per unmet check, and whether any matched.
std::vector<std::string> check_rule(const Expectation& e, const std::vector<StrategyResult>& results,
                                    bool& matched) {
  std::vector<std::string> failures;
  matched = false;
  for (const auto& r : results) {
    if (!matches(e, r)) continue;
    matched = true;
    const std::string who =
        r.variant.empty() ? r.strategy : fmt::format("{} [{}]", r.strategy, r.variant);
    for (const auto& what : unmet(e, r))
      failures.push_back(fmt::format("{}: {} (rule at {})", who, what, e.where));
  }
  return failures;
}

}  // namespace

std::vector<std::string> check_expectations(const Scenario& s, const std::string& mode,
                                            const std::vector<StrategyResult>& results, int sm,
                                            const std::string& device) {
  RunMeta meta;
  meta.device_name = device;
  meta.sm = sm;
  const std::string target = run_target(meta);
  std::vector<std::string> failures;
  for (const auto& e : s.expectations) {
    if (!applies(e, mode, sm, target)) continue;  // a rule for another mode, arch or device
    bool matched = false;
    for (auto& line : check_rule(e, results, matched)) failures.push_back(std::move(line));
    if (!matched) {
      std::string rule = fmt::format("strategy '{}'", e.strategy);
      if (e.variant) rule += fmt::format(", variant \"{}\"", *e.variant);
      if (e.mode) rule += fmt::format(", mode {}", *e.mode);
      if (e.arch) rule += fmt::format(", arch {}", *e.arch);
      if (e.device) rule += fmt::format(", device {}", *e.device);
      failures.push_back(
          fmt::format("rule at {} ({}) matches no result of this {} run", e.where, rule, mode));
    }
  }
  return failures;
}

RunExpectations check_run_expectations(const Scenario& s, const RunResults& run) {
  RunExpectations out;
  out.mode = "compile-only";
  if (!run.results.empty()) {
    const auto it = run.results.front().extra.find("device_mode");
    if (it != run.results.front().extra.end() && it->is_string()) out.mode = it->get<std::string>();
  }
  for (const Expectation& e : s.expectations) {
    RuleCheck rc;
    rc.where = e.where;
    rc.strategy = e.strategy;
    rc.variant = e.variant;
    rc.rule = rule_text(e);
    for (const auto& check : checks_of(e)) rc.checks.push_back(check.first);
    if (!applies(e, out.mode, run.meta.sm, run_target(run.meta))) {
      ++out.not_applicable;
      rc.status = "not_applicable";
      const bool other_mode = e.mode && *e.mode != out.mode;
      const bool other_arch = !other_mode && e.arch && *e.arch != "sm_" + std::to_string(run.meta.sm);
      std::string on =
          run.meta.sm > 0 ? "sm_" + std::to_string(run.meta.sm) : std::string("an unknown arch");
      std::string limit;
      if (other_mode) {
        limit = "mode " + *e.mode;
      } else if (other_arch) {
        limit = "arch " + *e.arch;
      } else {
        limit = "device " + e.device.value_or("?");
        on += run.meta.device_name.empty() ? " (an unknown device)"
                                           : " (" + run.meta.device_name + ")";
      }
      rc.details.push_back(fmt::format("a rule for {}; this run: {} on {}", limit, out.mode, on));
      out.rules.push_back(std::move(rc));
      continue;
    }
    // A rule no result of this run matches (--strategy / --filter ran other strategies, or a
    // --set replaced the matrix axis its variant names) is not checked: listed, never unmet.
    bool matched = false, strategy_ran = false;
    std::vector<std::string> failures = check_rule(e, run.results, matched);
    for (const auto& r : run.results)
      strategy_ran = strategy_ran || e.strategy == "*" || e.strategy == r.strategy;
    if (matched) {
      ++out.checked;
      rc.status = failures.empty() ? "met" : "unmet";
      rc.details = failures;
      out.unmet.insert(out.unmet.end(), failures.begin(), failures.end());
    } else if (!strategy_ran) {
      ++out.strategy_not_run;
      rc.status = "not_checked";
      rc.details.push_back(fmt::format("strategy '{}' did not run (--strategy / --filter)",
                                       e.strategy));
    } else {
      std::string rule = fmt::format("strategy '{}'", e.strategy);
      if (e.variant) rule += fmt::format(", variant \"{}\"", *e.variant);
      out.not_checked.push_back(fmt::format("rule at {} ({}): no result of this run", e.where, rule));
      rc.status = "not_checked";
      rc.details.push_back(fmt::format("variant \"{}\" was not produced by this run (a --set "
                                       "replaced its matrix axis)",
                                       e.variant.value_or("")));
    }
    out.rules.push_back(std::move(rc));
  }
  return out;
}

}  // namespace coldstart
