// coldstart: small helpers shared by the report renderers (escaping, number formatting, row
// order). Internal to reports/; nothing here measures anything.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/replay/result.h"

namespace coldstart::reports::detail {

/// The startup phases in the order the engine runs them (DESIGN.md "phase").
const std::vector<std::string>& startup_phase_order();

/// Text safe inside XML/HTML element content and attribute values: escapes & < > " ' and makes
/// every character XML 1.0 cannot carry visible instead: a C0 control other than tab, newline
/// and CR becomes the four characters "\xNN"; U+FFFE, U+FFFF and invalid UTF-8 become U+FFFD.
/// With `attribute`, tab, newline and CR become character references so a parser keeps them.
std::string xml_escape(const std::string& text, bool attribute = false);

/// The text with invalid UTF-8 replaced by U+FFFD and C0 controls (except \t \n) shown as
/// "\xNN"; used for Markdown and JSON strings.
std::string clean_text(const std::string& text);

/// Text for a Markdown table cell or line: clean_text, no line breaks, pipes and the Markdown /
/// HTML specials (* ` [ ] \\ < > &) escaped; '_' is kept (GitHub does not emphasize inside words).
std::string md_text(const std::string& raw);

/// The text safe to print on a terminal: invalid UTF-8 becomes U+FFFD, every C0 control (tab,
/// CR and ESC among them; newline too unless `keep_newlines`) and DEL become "\xNN", C1 controls
/// (U+0080..U+009F) and the bidirectional and line-separator controls (U+200E, U+200F,
/// U+2028..U+202E, U+2066..U+2069) "\uNNNN", so a name or error string from a results or scenario file cannot
/// move the cursor, set the window title or fake a line.
std::string terminal_text(const std::string& text, bool keep_newlines = false);

/// `run` with every string in it (names, errors, kernel names, extra fields and their keys) made
/// terminal_text; error texts keep their newlines (they are printed line by line).
RunResults terminal_safe(const RunResults& run);

/// First line of `text` (up to the first '\n', '\r' dropped).
std::string first_line(const std::string& text);

/// "strategy" or "strategy [variant]".
std::string label(const StrategyResult& r);

/// Variants in order of first appearance.
std::vector<std::string> variants_of(const RunResults& run);

/// The results of `run` grouped by variant (variants in order of first appearance, strategies in
/// run order).
std::vector<const StrategyResult*> grouped_rows(const RunResults& run);

/// `v` when present and finite.
std::optional<double> finite(const std::optional<double>& v);

/// extra[key] when it is a boolean.
std::optional<bool> extra_bool(const StrategyResult& r, const char* key);

/// extra[key] when it is a non-empty string.
std::optional<std::string> extra_string(const StrategyResult& r, const char* key);

/// Sum of the startup phases' host time (request == -1), milliseconds.
/// Whether `p` is a startup phase: request -1, other than a coverage run's envelope sweep (also
/// request -1, run after startup in place of the requests).
bool is_startup_phase(const PhaseTiming& p);
double startup_phase_sum(const StrategyResult& r);

/// "NVIDIA H200 (sm_90, 132 SMs)": the device name with its SM version and count, each added
/// only when known and not already part of the name.
std::string device_text(const RunMeta& m);

/// Where a compile happened, as reports print it: its phase, then ", drafter pass P (N rows)" when
/// an MTP drafter's pass of a request step needed it ("prefill, drafter pass 1 (300 rows)"), then
/// ", rank R" in a multi-rank result ("prefill, rank 3").
std::string compile_where(const CompileEvent& e);

/// The `ranks` block of a multi-rank result (StrategyResult::extra["ranks"], written by
/// harness/cli/ranks_run.h) as plain text lines for the strategy labelled `who`: a row per rank
/// (outcome, hot-path compiles, collectives, host wait ms, times arrived last), each rank's error,
/// then the largest startup and request-step stall with the rank that arrived last and what it
/// compiled there; a block with `stopped` (the watchdog or an interrupt stopped rank 0 before
/// it merged) gives each rank's last published state instead. Missing fields print as 0 / "?";
/// never throws on a malformed block.
std::string ranks_summary(const std::string& who, const nlohmann::json& ranks);

/// What the table and Markdown put beside the hot-path compile count: " (N in the steady
/// request)" when N of those compiles were the steady request's (steady_cold: it was not warm),
/// then " (+N loaded)" when N hot-path events were loads from the on-disk kernel cache; "" when
/// neither.
std::string loaded_suffix(const StrategyResult& r);

/// Why first / steady TTFT of `r` compares different things, or nullopt when it does not: the
/// steady request compiled, loaded or autotuned (extra.steady_cold) or pinned another prompt
/// length (extra.steady_not_comparable). Reports then show the ratio as not comparable.
std::optional<std::string> steady_not_comparable(const StrategyResult& r);

/// The strategy compiled on the hot path although it says `allow_hot_path_compiles: false`
/// (a failure for CI even when the replay itself was ok).
bool disallowed_hot_path(const StrategyResult& r);

/// Bytes as MB (2^20) with two decimals, e.g. "0.51".
std::string mb(long long bytes);

/// The largest `peak_allocated_bytes` of the result's `phase_memory` (the most device memory
/// the strategy held at once, in bytes); nullopt when the result has none (older files).
std::optional<long long> peak_device_bytes(const StrategyResult& r);

/// The workspace's locked size in MB (mb()), or "-" when it was never locked: the result's
/// workspace_policy (extra) never locks (grow, fixed, resize), or its workspace_locked (extra)
/// is false. 0.00 there would read as "locked at nothing".
std::string locked_mb(const StrategyResult& r);

/// How a failed step ran, for its "(request 0, step 1: ...)" line: "", ", as graph full@4",
/// ", run eagerly" or ", run eagerly: <why>" (`graph` and `eager_reason` are
/// extra.failed_step.graph and .eager_reason).
std::string step_graph_text(const std::string& graph, const std::string& eager_reason);

/// Sum of compile_ms over the hot-path compiles (hot_path_compiled: loads from the on-disk
/// cache left out), milliseconds. In compile-only mode a memo-served compile counts its recorded
/// cold compile time.
double hot_path_compile_ms(const StrategyResult& r);

/// The scenario's expect: rules as the run checked them, counted: "2 met, 1 unmet" then, when
/// there are any, ", 3 for another mode, arch or device" (not_applicable) and ", 1 not checked"
/// (not_checked: its strategy or variant did not run). The words replay prints for the same
/// statuses.
std::string rule_tally(const RunResults& run);

/// Which strategy to pick in one variant of a run, as the table, Markdown and HTML show it.
/// Only strategies that ran (not skipped, not interrupted) are weighed.
struct VariantVerdict {
  std::string variant;
  /// The recommended strategy: among those that ended ok (and did not compile on the hot path
  /// against their own allow_hot_path_compiles: false), those with the fewest hot-path
  /// compiles; of these, those whose first-request TTFT is within 5% of the lowest (GPU runs;
  /// closer is run-to-run noise); of these, those whose startup is within 5% of the shortest;
  /// of these, the one with the fewest warmers (then the shorter startup). "" when none ended ok.
  std::string best;
  std::string best_why;  ///< "ok, 0 hot-path compiles, first TTFT 85.05 ms, startup +28.5 ms vs none"
  /// Labelled lines in this order: "avoid the crash" (or "outcome" when nothing failed),
  /// "fewest hot-path compiles", "lowest first TTFT", "hot-path compile time", "startup". Plain
  /// text: each renderer escapes it.
  std::vector<std::pair<std::string, std::string>> lines;
};

/// One named part of a first request's TTFT excess: first-request ms minus steady-request ms
/// over the TTFT phases (prefill, continuation_prefill), and how it was measured.
struct ExcessPart {
  std::string name;    ///< "JIT compile + module load", "kernel cache load", ...
  double ms = 0;       ///< first minus steady, milliseconds (negative: the steady request paid more)
  std::string source;  ///< "host wall time (JIT monitor)", "CUDA events", ...
};

/// first TTFT - steady TTFT split into named parts (GPU runs whose steady request is the first
/// one's twin). Always first: JIT compile + module load and kernel cache loads (the JIT
/// monitor's host wall time of the hot-path records in the TTFT phases, by wave) and autotune
/// benchmarking (the autotuner's timed candidate runs). Then, for runs with `ttft_host_ms` (the
/// engine thread's TTFT window split by what it did, api_timer.h), that split's first-minus-steady
/// parts: CUDA allocator, launch + lazy module load, graph launch, other CUDA API, waiting for the
/// GPU (CUPTI), JIT launch path, model host work, engine host work; these add up to the window,
/// so `unexplained_ms` is only what the JIT's timed windows held beyond its records. For older
/// files or runs without CUPTI: GPU time (CUDA events around the model's pieces and attention,
/// first_time_cost_ms) and sampling, and the rest is unexplained. Compiles and tunings without a
/// scheduler step (files older than the step fields) are not counted.
struct TtftExcess {
  double first_ms = 0, steady_ms = 0, excess_ms = 0;
  std::vector<ExcessPart> parts;
  double unexplained_ms = 0;
};

/// The split for `r`, or nullopt when there is nothing to split: no TTFT or steady TTFT
/// (compile-only mode, a failed run), no first_time_cost_ms (no steady twin, older files), or a
/// steady request that pinned another prompt length (steady_not_comparable).
std::optional<TtftExcess> ttft_excess(const StrategyResult& r);

/// The parts named in any of `splits`, in first-seen order, with their sources: the columns of
/// an excess table (splits of different files may name different parts).
std::vector<ExcessPart> excess_columns(const std::vector<TtftExcess>& splits);

/// `x`'s part named `name`, nullptr when it has none.
const ExcessPart* excess_part(const TtftExcess& x, const std::string& name);

/// `ms` with one decimal, "0.0" for what rounds to zero (never "-0.0").
std::string tenths(double ms);

/// " (N%)": the unexplained rest's share of the excess, "" when the excess is under 1 ms (a share
/// of noise says nothing).
std::string share_of(const TtftExcess& x);

/// One verdict per variant of `run` (variants_of order); empty when the run has no results.
std::vector<VariantVerdict> verdicts(const RunResults& run);

/// The cold keys of one kernel in an envelope sweep (`coldstart coverage`): how many, their
/// measured compile time (ms; keys without a time left out of the sum) and the smallest classes
/// that first reach them, in sweep order, each with its key count ("prefill 17" x 2).
struct ColdKernel {
  std::string kernel;
  int keys = 0;
  double compile_ms = 0;
  std::vector<std::pair<std::string, int>> classes;
};

/// One strategy's row of the envelope coverage (extra.envelope of an --envelope / coverage run).
struct CoverageRow {
  const StrategyResult* result = nullptr;
  int classes = 0, classes_run = 0, reached = 0, at_startup = 0, on_disk = 0, cold = 0;
  std::optional<double> cold_compile_ms;  ///< null when the run did not time them
  std::string stopped_at;                 ///< the class a failing sweep stopped in, else ""
  bool unfinished = false;                ///< a partial report: the run was stopped after
                                          ///< stopped_at (timeout, interrupt)
  std::vector<ColdKernel> cold_kernels;   ///< by first reach
  int ranks = 0;  ///< engine.ranks: all: the ranks whose sweeps the counts add up (keys per rank)
  /// The classes that first reach the cold keys (engine.envelope_warmup_classes for
  /// envelope-warmup), joined with ", "; "" when none is cold.
  std::string warmup_classes;
};

/// "3 keys" / "1 key" of a row's cold keys, with ", counted per rank over N ranks" under
/// engine.ranks: all.
std::string cold_count_text(const CoverageRow& c);

/// "" for a finished sweep; for one that stopped (a crash in a class, a timeout, an interrupt)
/// a caveat for its "warm them at startup" line: the classes found so far, not all that a
/// finished sweep would list.
std::string partial_sweep_caveat(const CoverageRow& c);

/// The coverage rows of `run`'s results that carry extra.envelope, in result order.
std::vector<CoverageRow> coverage_rows(const RunResults& run);

/// True when some result of `run` carries extra.envelope: a `coldstart coverage` (replay
/// --envelope) run, which replays the envelope's classes instead of the scenario's requests.
bool is_envelope_run(const RunResults& run);

/// "coldstart coverage" when every run of `runs` is an envelope run (and there is one), else
/// "coldstart replay": the reports' title; of one run, by is_envelope_run.
std::string report_title(const std::vector<RunResults>& runs);
std::string report_title(const RunResults& run);

/// "fused_moe_gemm 4 (prefill 17 x2, prefill 129 x2)": one ColdKernel in a line.
std::string cold_kernel_text(const ColdKernel& k);

}  // namespace coldstart::reports::detail
