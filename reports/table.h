// coldstart: the terminal comparison table of a run, one row per (variant, strategy).
#pragma once

#include <string>

#include "harness/replay/result.h"

namespace coldstart::reports {

/// Renders `results` for a terminal:
///   - a header naming the scenario, device, SM, mode and coldstart version;
///   - a table, one row per result, grouped by variant (in order of first appearance), with
///     strategy, variant, outcome ("crash @ <phase>" when a phase failed), startup / TTFT /
///     first-decode / steady TTFT in milliseconds, hot-path compiles (count and
///     kernel names, shortened) and the workspace's locked / peak requested size in MB (2^20 B);
///     a null value prints as "-" (not measured, e.g. compile-only mode, or not reached);
///   - below it, the full error text of every result whose outcome is not ok.
/// `color` adds ANSI colors (outcome, header) without changing the text or the alignment.
/// Ends with a newline. Never throws for any RunResults content.
std::string render_table(const RunResults& results, bool color);

}  // namespace coldstart::reports
