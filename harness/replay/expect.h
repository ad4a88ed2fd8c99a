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
/// applies but matches no result is a failure of its own; a skipped result (outcome "skipped", or
/// a result whose `extra` holds "skipped") is exempt from every check but `outcome: skipped`.
/// A rule with an `arch` applies only when `sm` (the run's compute capability, e.g. 90) is that
/// arch's; with sm == 0 (unknown) such rules do not apply.
std::vector<std::string> check_expectations(const Scenario& s, const std::string& mode,
                                            const std::vector<StrategyResult>& results, int sm = 0);

}  // namespace coldstart
