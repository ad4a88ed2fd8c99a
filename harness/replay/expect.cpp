// coldstart: checking results against a scenario's expect: rules (see expect.h).
#include "harness/replay/expect.h"

#include <fmt/format.h>

#include <algorithm>

namespace coldstart {
namespace {

// Whether rule `e` is about runs in `mode` on compute capability `sm` (0: unknown, so a rule
// with an arch is not).
bool applies(const Expectation& e, const std::string& mode, int sm) {
  if (e.mode && *e.mode != mode) return false;
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

// The unmet checks of rule `e` on result `r`, as "what it is, expected what" phrases.
std::vector<std::string> unmet(const Expectation& e, const StrategyResult& r) {
  std::vector<std::string> out;
  const std::string outcome = outcome_name(r.outcome);
  // A skipped run did not happen here: it passes `outcome: skipped` and is exempt from the rest.
  if (r.outcome == Outcome::kSkipped) return out;
  if (e.outcome && *e.outcome != outcome)
    out.push_back(fmt::format("outcome {}, expected {}", outcome, *e.outcome));
  if (e.failed_phase && r.failed_phase != e.failed_phase)
    out.push_back(fmt::format("failed_phase {}, expected '{}'", quoted_or_none(r.failed_phase),
                              *e.failed_phase));
  if (e.error_prefix && (!r.error || r.error->compare(0, e.error_prefix->size(), *e.error_prefix)))
    out.push_back(fmt::format("error {}, expected one starting with '{}'", quoted_or_none(r.error),
                              *e.error_prefix));
  const std::vector<CompileEvent> compiled = hot_path_compiled(r);  // disk loads are not compiles
  const int compiles = static_cast<int>(compiled.size());
  // A warm --cache-dir serves kernels from disk: say so beside a count that fell short.
  const int loads = hot_path_loads(r);
  const std::string served =
      loads > 0 ? fmt::format(" ({} more loaded from the on-disk kernel cache: a warm --cache-dir "
                              "served them)",
                              loads)
                : std::string();
  if (e.hot_path_compiles && compiles != *e.hot_path_compiles)
    out.push_back(
        fmt::format("{} hot-path compiles, expected {}{}", compiles, *e.hot_path_compiles, served));
  if (e.max_hot_path_compiles && compiles > *e.max_hot_path_compiles)
    out.push_back(fmt::format("{} hot-path compiles, expected at most {}", compiles,
                              *e.max_hot_path_compiles));
  if (e.hot_path_kernels) {
    std::vector<std::string> kernels;
    for (const auto& c : compiled) kernels.push_back(c.kernel);
    std::sort(kernels.begin(), kernels.end());
    kernels.erase(std::unique(kernels.begin(), kernels.end()), kernels.end());
    if (kernels != *e.hot_path_kernels)
      out.push_back(fmt::format("hot-path kernels {}, expected {}{}", list_text(kernels),
                                list_text(*e.hot_path_kernels), served));
  }
  return out;
}

}  // namespace

std::vector<std::string> check_expectations(const Scenario& s, const std::string& mode,
                                            const std::vector<StrategyResult>& results, int sm) {
  std::vector<std::string> failures;
  for (const auto& e : s.expectations) {
    if (!applies(e, mode, sm)) continue;  // a rule for the other mode or another arch
    bool matched = false;
    for (const auto& r : results) {
      if (!matches(e, r)) continue;
      matched = true;
      const std::string who =
          r.variant.empty() ? r.strategy : fmt::format("{} [{}]", r.strategy, r.variant);
      for (const auto& what : unmet(e, r))
        failures.push_back(fmt::format("{}: {} (rule at {})", who, what, e.where));
    }
    if (!matched) {
      std::string rule = fmt::format("strategy '{}'", e.strategy);
      if (e.variant) rule += fmt::format(", variant \"{}\"", *e.variant);
      if (e.mode) rule += fmt::format(", mode {}", *e.mode);
      if (e.arch) rule += fmt::format(", arch {}", *e.arch);
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
  Scenario checked = s;
  checked.expectations.clear();
  for (const Expectation& e : s.expectations) {
    if (!applies(e, out.mode, run.meta.sm)) {
      ++out.not_applicable;
      continue;
    }
    // A rule no result of this run matches (--strategy / --filter ran other strategies, or a
    // --set replaced the matrix axis its variant names) is not checked: listed, never unmet.
    bool ran = false, strategy_ran = false;
    for (const auto& r : run.results) {
      ran = ran || matches(e, r);
      strategy_ran = strategy_ran || e.strategy == "*" || e.strategy == r.strategy;
    }
    if (ran) {
      checked.expectations.push_back(e);
    } else if (!strategy_ran) {
      ++out.strategy_not_run;
    } else {
      std::string rule = fmt::format("strategy '{}'", e.strategy);
      if (e.variant) rule += fmt::format(", variant \"{}\"", *e.variant);
      out.not_checked.push_back(fmt::format("rule at {} ({}): no result of this run", e.where, rule));
    }
  }
  out.checked = checked.expectations.size();
  out.unmet = check_expectations(checked, out.mode, run.results, run.meta.sm);
  return out;
}

}  // namespace coldstart
