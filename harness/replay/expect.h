// coldstart: checking a run's results against a scenario's `expect:` rules (the rule format and
// its meaning are described at the top of scenario.h). No torch, no CUDA.
#pragma once

#include <string>
#include <vector>

#include "harness/replay/result.h"
#include "harness/replay/scenario.h"

namespace coldstart {

/// One readable line per unmet check of s.expectations against `results` (the results of one run
/// of `s` in `mode`, "cuda" or "compile-only"), in rule order, then result order; empty when every
/// rule holds. A line reads
///     <strategy> [<variant>]: outcome crash, expected ok (rule at <file>:<line>)
/// (without " [<variant>]" when the variant is ""). Each rule applies to every result whose
/// strategy, variant and mode it matches; a rule for another mode does not apply; a rule that
/// applies but matches no result is a failure of its own; a skipped result (Outcome::kSkipped) is
/// exempt from every check but `outcome: skipped`.
/// A rule with an `arch` applies only when `sm` (the run's compute capability, e.g. 90) is that
/// arch's; with sm == 0 (unknown) such rules do not apply. A rule with a `device` (a target
/// profile name) applies only when the run's target (run_target() of `device`, the run's
/// meta.device_name, e.g. "NVIDIA H200" or "compile-only: NVIDIA H200") is that profile's device
/// name, ignoring case.
std::vector<std::string> check_expectations(const Scenario& s, const std::string& mode,
                                            const std::vector<StrategyResult>& results, int sm = 0,
                                            const std::string& device = "");

/// What `coldstart replay` prints and gates on for one scenario's run: s.expectations checked
/// against run.results. The run's mode is its results' `device_mode` ("cuda" or "compile-only";
/// compile-only when unrecorded), its arch is run.meta.sm's and its device run.meta.device_name.
/// A rule for another mode, arch or device is counted in `not_applicable`; a rule about a strategy that did not run (--strategy /
/// --filter chose others) is counted in `strategy_not_run`; one whose variant was not produced
/// (a --set replaced that matrix axis) is listed in `not_checked`; neither is ever unmet; every
/// other rule is checked
/// (check_expectations) and counted in `checked`. A kernel rule that fails on a result whose
/// kernels came from a warm on-disk cache says how many were loaded instead of compiled.
struct RunExpectations {
  std::string mode;                 ///< "cuda" | "compile-only"
  size_t checked = 0;               ///< rules that applied to this run
  size_t not_applicable = 0;        ///< rules for another mode, arch or device
  std::vector<std::string> unmet;   ///< check_expectations' lines; empty when every rule held
  /// Rules about a strategy that did not run (--strategy / --filter): counted, not checked.
  size_t strategy_not_run = 0;
  /// Rules whose strategy ran but whose variant this run did not produce (a --set replaced the
  /// matrix axis): "rule at <file>:<line> (strategy 'x', variant \"v\"): no result of this run"
  std::vector<std::string> not_checked;
  /// Every rule of the scenario in rule order with its status (met, unmet, not_checked,
  /// not_applicable): what the results file keeps as RunResults::rules and JUnit reports.
  std::vector<RuleCheck> rules;
};
RunExpectations check_run_expectations(const Scenario& s, const RunResults& run);

}  // namespace coldstart
