// coldstart compare / merge: a regression gate between two results files, and the folding of
// several machines' results (one per arch in a CI matrix) into one file.
//
// Torch-free: links only the result schema (cs_result).
//
// Merged file format (schema "coldstart.merged/1"):
//   {"schema": "coldstart.merged/1", "runs": [<a whole "coldstart.replay/1" object>, ...]}
// Each run keeps its own `meta` (machine, SM, versions), so nothing about where a result came
// from is lost. read_any_results() accepts either form and returns the runs as a list.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/replay/result.h"

namespace coldstart::cli {

/// The schema tag of a merged results file.
inline constexpr const char* kMergedSchema = "coldstart.merged/1";

/// Settings of the regression gate.
struct CompareOptions {
  /// A timing counts as a regression only when it grew by more than this percentage of the
  /// baseline value AND by more than the run-to-run spread recorded in the files. Must be >= 0.
  double max_regression_pct = 10.0;
  /// Strategy results of the baseline missing from the current file, or interrupted there, fail
  /// the comparison (a strategy that stopped running cannot regress silently) unless this is set
  /// (`--allow-removed`).
  bool allow_removed = false;
  /// Gate outcome and hot-path compile differences of a cross-target comparison (a baseline from
  /// another GPU or --target profile) as regressions (`--gate-cross-target`). Off by default:
  /// another GPU selects other tiles from its own tuned tables (vLLM's fused_moe config files
  /// are named per device) and may run out of memory where a larger one does not, so its
  /// differences are shown as "differs (other target)" and never fail the comparison.
  bool gate_cross_target = false;
};

/// One timing (startup_ms, ttft_ms, steady_ttft_ms or first_decode_ms) of a matched pair.
/// Milliseconds.
struct MetricDelta {
  std::string name;  ///< "startup_ms" | "ttft_ms" | "steady_ttft_ms" | "first_decode_ms"
  std::optional<double> baseline;   ///< null when the baseline had none (compile-only, crash)
  std::optional<double> current;
  /// Run-to-run spread used as the noise floor: max(baseline max-min, current max-min) from the
  /// `<name>_min` / `<name>_max` fields written by repeated runs; 0 when neither side repeated.
  double spread_ms = 0;
  bool compared = false;  ///< both sides had a value and ran in the same mode
  bool gated = false;     ///< the current file recorded a spread (--repeat), so it can be flagged
  bool regressed = false; ///< grew beyond both the threshold and the spread
  bool improved = false;  ///< shrank beyond both the threshold and the spread
  /// current - baseline, ms (0 unless compared).
  double delta_ms() const;
  /// 100 * (current - baseline) / baseline; +inf when the baseline is 0 and current is larger.
  double delta_pct() const;
};

/// A hot-path compile whose instance (kernel, constexprs, specializations) the baseline also
/// compiled on the hot path, from another program text: the kernel's source changed.
struct SourceChange {
  CompileEvent current;              ///< the current run's compile
  std::string baseline_source_hash;  ///< the baseline key's source hash (hex)
};

/// A hot-path compile whose key differs from a baseline compile of the same kernel in the same
/// phase only in values (a constexpr such as NUM_CACHE_LINES that follows the KV cache size, a
/// tuned config, an argument specialization): the same compile with another key, not a new one.
struct KeyChange {
  CompileEvent current;      ///< the current run's compile
  std::string baseline_key;  ///< the baseline compile it stands in for
  /// What differs: "NUM_CACHE_LINES 58008 -> 58002", "specializations (i32) -> (i32:16)".
  std::string what;
};

/// How one (scenario, target, variant, strategy) fared between the two files.
struct CompareRow {
  enum class Presence { kBoth, kAdded, kRemoved };  ///< added = only in current
  std::string scenario;
  int sm = 0;               ///< the current run's SM (the baseline's for a removed row)
  std::string target;       ///< run_target() of that run, e.g. "NVIDIA H200"
  std::string variant;      ///< "" when the scenario has no variants
  std::string strategy;
  Presence presence = Presence::kBoth;
  std::optional<Outcome> baseline_outcome;  ///< empty for an added row
  std::optional<Outcome> current_outcome;   ///< empty for a removed row
  /// "", or e.g. "NEW CRASH in first_decode: Workspace is locked ..." / "FIXED (was crash)".
  std::string outcome_change;
  bool new_failure = false;  ///< current is crash/timeout/error and differs from the baseline
  /// The current result's outcome is `interrupted` (the run was stopped from outside): nothing is
  /// compared, and the pair fails the comparison like a removed one unless --allow-removed.
  bool interrupted = false;
  bool not_comparable = false;  ///< one side is an --envelope run, the other a request replay
  std::vector<MetricDelta> metrics;  ///< startup_ms, ttft_ms, steady_ttft_ms, first_decode_ms
  std::vector<CompileEvent> new_hot_path_compiles; ///< hot-path compiles absent from the baseline
  /// Hot-path compiles of instances the baseline compiled from other kernel source: reported,
  /// never a regression.
  std::vector<SourceChange> kernel_source_changed;
  /// Hot-path compiles paired with a baseline compile of the same kernel and phase that only
  /// differs in key values: reported, never a regression (the count did not grow).
  std::vector<KeyChange> key_changed;
  bool fewer_hot_path_compiles = false;  ///< current compiled less on the hot path than the baseline
  /// Hot-path compiles (disk loads excluded) of the baseline and current result; -1 for the side
  /// an added or removed row lacks.
  int baseline_hot_path_compiles = -1;
  int current_hot_path_compiles = -1;
  /// A compared timing moved by more than the threshold but was not gated (the current file
  /// recorded no spread): shown as "changed (not gated)", never a regression.
  bool ungated_change = false;
  /// Baseline and current ran on different targets (run_target): timings are never gated, and a
  /// new failure or new hot-path compile regresses only with CompareOptions::gate_cross_target.
  bool cross_target = false;
  bool regressed = false;   ///< any of: new_failure, new hot-path compile, a regressed metric

  /// "scenario / strategy [variant] (NVIDIA H200, sm_90)": how reasons and tables name the pair.
  std::string label() const;
};

/// The result of compare_results().
struct CompareReport {
  std::vector<CompareRow> rows;
  bool regressed = false;            ///< any row regressed
  std::vector<std::string> reasons;  ///< one line per regression, naming the pair and the cause
  std::vector<std::string> notes;    ///< informational (e.g. SM differs, duplicate results)
  double max_regression_pct = 10.0;  ///< the threshold used, percent

  /// An aligned plain-text table (one line per pair: outcome, the three timings as
  /// "base -> current (+x.x%)", new hot-path compiles, verdict), then the notes, then
  /// "REGRESSED:" with each reason, or "no regressions".
  std::string render() const;
  /// The same report as Markdown for a pull-request comment: a verdict line, the regressions,
  /// one table per scenario and target (only the pairs that changed, with a count of the
  /// unchanged ones), the kernel-source changes and the notes. At most `max_bytes` long (0: no
  /// limit; default GitHub's 65,536-character comment limit, counted in bytes): past it whole
  /// blocks (reasons, scenario tables, detail lists, notes) are kept in order while they fit and
  /// a closing line counts the rest.
  std::string render_markdown(size_t max_bytes = 65536) const;
};

/// Compares two sets of runs. Pairs are matched by (scenario name, target (run_target: the device
/// or the compile-only --target profile), variant, strategy); when a scenario was run on exactly
/// one target on each side, the target is not part of the match (a single-machine comparison,
/// e.g. before/after a change); if those two targets differ, a note says it is a cross-target
/// comparison: timings are not gated, and new failures and hot-path compiles are listed as
/// differences (verdict "differs (other target)") that regress only with
/// `options.gate_cross_target`. Null timings are not compared, nor timings of runs in
/// different modes (meta.mode: cuda vs compile-only; a note says so). A pair regresses on a new
/// crash/timeout/error, on a hot-path compile whose instance (kernel; split_compile_key's
/// identity: constexprs and specializations, without arch, compiler or source hash) was not a
/// hot-path compile in the baseline (one that was, from another source hash, is listed as
/// kernel_source_changed), or on a timing that grew by more than `options.max_regression_pct`
/// percent and more than the recorded spread. Pairs present on one side only are listed as
/// added/removed; removed ones fail the comparison unless `options.allow_removed`, and so do pairs
/// whose current result was interrupted (not measured). A pair whose baseline was interrupted is
/// listed as "not compared" and never fails. A scenario
/// whose model or engine summary differs between the files gets a note (the shapes compared are
/// not the same). Throws InputError when max_regression_pct is negative or NaN.
CompareReport compare_results(const std::vector<RunResults>& baseline,
                              const std::vector<RunResults>& current, const CompareOptions& options);

/// Same, for two single-run files.
CompareReport compare_results(const RunResults& baseline, const RunResults& current,
                              const CompareOptions& options);

/// `coldstart compare BASELINE CURRENT [--max-regression PCT] [--md FILE] [--gate-cross-target]`:
/// reads both files
/// (single-run or merged), prints the report to stdout and, with `md_path`, writes
/// render_markdown() there (atomically). Returns 1 when regressed (each reason printed), 0 when
/// not, 2 when a file cannot be read or parsed, the threshold is invalid or the Markdown path is
/// one of the inputs, or a symbolic link, device, FIFO or socket without `force` (message on
/// stderr); a Markdown file that cannot be written is exit 1.
int compare_main(const std::string& baseline, const std::string& current,
                 double max_regression_pct, bool allow_removed = false,
                 const std::string& md_path = "", bool force = false,
                 bool gate_cross_target = false);

/// Writes `runs` as a merged results file {"schema": "coldstart.merged/1", "runs": [...]},
/// pretty-printed, atomically (temp file in the same directory, fsync, rename).
/// Throws Error naming the path and the OS error when writing fails.
void write_merged_json(const std::string& path, const std::vector<RunResults>& runs);

/// Reads a single-run ("coldstart.replay/1") or merged ("coldstart.merged/1") results file and
/// returns its runs (one for a single-run file). Throws InputError "<path>: ..." when the file
/// cannot be opened, is not JSON, has an unknown schema, or a run in it is malformed (the
/// message then names the run's index).
std::vector<RunResults> read_any_results(const std::string& path);

/// Folds runs from several files into one list, in input order. A strategy result with the same
/// (scenario name, target (run_target), variant, strategy) as one in an earlier run replaces it
/// (an H100 and an H200 run of one scenario are both kept): the earlier copy
/// is dropped (a run left with no results is dropped entirely) and a warning naming the pair is
/// appended to `warnings` when given. Runs keep their own meta.
std::vector<RunResults> merge_results(const std::vector<RunResults>& runs,
                                      std::vector<std::string>* warnings = nullptr);

/// `coldstart merge INPUT... -o OUTPUT`: reads every input (single-run or merged), merges them
/// with merge_results (warnings on stderr), writes OUTPUT as a merged file and prints a one-line
/// summary to stderr. Returns 0 on success, 2 when an input cannot be read, no input was given or
/// OUTPUT is a symbolic link, device, FIFO or socket without `force` (--force), 1 when the output
/// cannot be written.
int merge_main(const std::vector<std::string>& inputs, const std::string& output, bool force = false);

}  // namespace coldstart::cli
