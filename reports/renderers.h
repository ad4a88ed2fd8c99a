// coldstart: report renderers for CI and for people: JUnit XML, Markdown, self-contained HTML with
// charts, and a Chrome trace-event timeline. Each renderer is a pure function of one or more
// RunResults (one per scenario) and returns text; none measures anything. write_report_files is
// the single entry point for the command line (--junit / --md / --html / --trace).
#pragma once

#include <string>
#include <vector>

#include "harness/replay/result.h"

namespace coldstart::reports {

/// Settings of the JUnit renderer.
struct JunitOptions {
  /// Treat every hot-path compile as a test failure, whatever the strategy allows
  /// (`--jit-monitor error`). Without it, only strategies whose result carries
  /// extra["allow_hot_path_compiles"] == false fail on a hot-path compile.
  bool hot_path_compiles_fail = false;
};

/// JUnit XML (the Jenkins / Ant dialect that GitHub Actions reporters, GitLab and Jenkins read):
/// <testsuites> holding one <testsuite> per RunResults, named "<scenario> (<target tag>)" where
/// the tag is "<target>, sm_NN, <mode>" (run_target; "sm_90, compile-only" without a --target
/// profile) so merged runs of several machines never share a name; its tests, failures, errors,
/// skipped and time totals match its test cases; the run's meta are its <properties>.
/// Test cases, classname = the suite's name:
///   * one per (variant, strategy), name "strategy [variant] (<target tag>)", time = wall_ms:
///     - outcome crash / timeout: <failure type="crash|timeout" message="<phase>: <first line>">
///       with the full error text, unless a met expect: rule (RunResults::rules) checks this
///       result's outcome: then it is what the scenario reproduces and the case passes;
///     - outcome error: <error> likewise;
///     - a hot-path compile when not allowed (see JunitOptions) and no met rule checks this
///       result's hot-path compiles: <failure type="hot_path_compile"> listing kernel, key and
///       phase of each (appended to a crash failure's text instead, so a test case has at most
///       one failure element);
///     - <skipped message="reason"> for outcome skipped, and <skipped message="interrupted:
///       <phase>: <first line>"> for outcome interrupted (neither a pass nor a failure);
///   * one per expect: rule, name "rule at <file>:<line>: <strategy> [variant]: <checks>
///     (<target tag>)", time 0: met passes, unmet is <failure type="expectation"> with one line
///     per failed check, not_checked / not_applicable are <skipped> with the reason. So the
///     JUnit of a run that passes --check has no rule failures and no failure for a crash a
///     checked rule expects.
/// Phases, TTFT and workspace figures go into the test case's <system-out>. All text is escaped;
/// characters XML cannot carry are shown as "\xNN". Never throws for any RunResults content.
std::string render_junit(const std::vector<RunResults>& runs, const JunitOptions& options = {});

/// A GitHub-flavoured Markdown summary for a pull-request comment: a device and versions line,
/// then per scenario a table (strategy, variant, outcome, startup, TTFT, first decode,
/// first/steady TTFT ratio, hot-path compiles, workspace locked / requested in MB = 2^20 B),
/// failed rows (crash, timeout, error, interrupted) before ok rows, every number with its unit,
/// null values as "–" with a note saying why, and the full error texts in a <details> block.
/// The result is at most `max_bytes` long (0: no limit; default GitHub's 65,536-character
/// comment limit, counted in bytes, which is stricter): past it the excess tables go first and
/// errors are cut to 12 lines, then verdict details and errors, then whole scenarios from the
/// end, each step said in a closing line.
constexpr size_t kCommentLimitBytes = 65536;
std::string render_markdown(const std::vector<RunResults>& runs,
                            size_t max_bytes = kCommentLimitBytes);

/// One self-contained HTML page (inline CSS and inline SVG, no script, no network): per scenario
/// and variant a results table with outcome badges, a horizontal stacked bar chart of startup
/// time by phase per strategy (with a legend), a grouped bar chart of first-request TTFT against
/// steady TTFT per strategy ("not measured" when null), the hot-path compile list and the full
/// error texts.
std::string render_html(const std::vector<RunResults>& runs);

/// Chrome trace-event JSON ({"traceEvents": [...], "displayTimeUnit": "ms"}) for Perfetto and
/// chrome://tracing: one process per scenario, one thread per (variant, strategy), named by
/// metadata events; one complete ("X") event per timed phase, back to back from ts 0 in
/// microseconds; one complete event per compile (startup and hot-path) laid out sequentially
/// from the start of its phase and clamped to it (args: kernel, key, compile_ms, source,
/// hot_path); and an instant ("i") event with the outcome where the run ended. When a run failed
/// in a phase that was never timed but compiled kernels in it, that phase is drawn as a slice
/// just long enough for its compiles and marked args.timed = false.
std::string render_trace(const std::vector<RunResults>& runs);

/// Where write_report_files puts each report; an empty path means "do not write that one".
struct ReportFiles {
  std::string junit, markdown, html, trace;
  bool hot_path_compiles_fail = false;  ///< passed to render_junit (`--jit-monitor error`)
};

/// Renders and writes each report whose path is set. Each file is written atomically: the text
/// goes to a temporary file in the same directory, is flushed, then renamed over the path.
/// Throws coldstart::Error naming the path and the OS error when a file cannot be written (the
/// temporary file is removed; reports written before the failing one stay).
void write_report_files(const std::vector<RunResults>& runs, const ReportFiles& files);

}  // namespace coldstart::reports
