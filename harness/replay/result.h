// coldstart: the result of one replay run, and its JSON form (schema "coldstart.replay/1").
//
// These structs are what a strategy's child process reports (as JSON snapshots, see
// harness/isolate/isolate.h), what the parent collects, and what the renderers in reports/ print.
// Nothing here measures anything.
//
// JSON rules (DESIGN.md, "Result schema"):
//   * field names are fixed; a field's meaning never changes, new fields may be added;
//   * every std::optional member is written as JSON null when empty, never omitted;
//   * readers accept unknown fields (StrategyResult keeps them in `extra`) and treat a missing
//     optional field as null, so files written by newer versions still load.
// Units: every `*_ms` is milliseconds (double), every `*_bytes` is bytes.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/step_context.h"

namespace coldstart {

/// The schema tag written at the top of every results file.
inline constexpr const char* kResultSchema = "coldstart.replay/1";

/// How one strategy's run ended.
///   kOk          - every phase ran and the first request completed;
///   kCrash       - the replay failed in a phase (the workspace-lock assertion, an abort, a
///                  signal...);
///   kTimeout     - the watchdog stopped the child;
///   kError       - the harness itself could not run the strategy (spawn failure, bad exit, no
///                  result);
///   kInterrupted - the run was stopped from outside (SIGINT / SIGTERM to `coldstart replay`)
///                  while this strategy ran: nothing about the strategy is known beyond its
///                  last phase (failed_phase), so no report counts it as a failure or a pass.
///   kSkipped     - the strategy did not run here: the scenario's `archs` exclude this device
///                  (StrategyResult::skipped says why). Neither a failure nor a pass.
enum class Outcome { kOk, kCrash, kTimeout, kError, kInterrupted, kSkipped };

/// "ok" | "crash" | "timeout" | "error" | "interrupted" | "skipped".
const char* outcome_name(Outcome o);


/// Inverse of outcome_name. Throws InputError naming the bad text for anything else.
Outcome parse_outcome(const std::string& text);

/// Time spent in one phase (DESIGN.md "phase"). JSON: {name, ms, gpu_ms, request}.
struct PhaseTiming {
  std::string name;
  double ms = 0;                  ///< host wall time of the phase, milliseconds; in compile-only
                                  ///< mode a compile taken from the run's compile memo
                                  ///< (CompileEvent::reused) is charged its recorded compile_ms
  std::optional<double> gpu_ms;   ///< CUDA-event time, milliseconds; null in compile-only mode
  /// -1 for a startup phase; else the scenario's request index (requests: list order, steady
  /// included) of the wave's lead request: the first wave's first request, or the steady one
  int request = -1;
};

/// One JIT compile. JSON: {kernel, key, compile_ms, phase, source[, reused]}.
struct CompileEvent {
  std::string kernel;   ///< kernel name
  std::string key;      ///< printable compile key
  double compile_ms = 0;
  std::string phase;    ///< phase that was running when the compile happened
  std::string source;   ///< "nvrtc" (compiled now) or "disk" (loaded from the on-disk cache)
  /// How the launch config was chosen: "table" | "heuristic" | "autotune" | "default", or "" for
  /// a fixed config (then the three fields below are empty / 0 and left out of the JSON).
  std::string selector;
  std::string tuning_key;  ///< the selector's key, e.g. "M=5 -> 4"
  std::string config;      ///< the chosen config's name
  int num_candidates = 0;  ///< configs the selector chose among
  /// Compile-only mode: compile_ms is that of the same key's first compile in this run (another
  /// strategy's), not compiled again (JSON `reused: true`, left out when false).
  bool reused = false;
  /// The scheduler step that paid for it (JSON, when step.request >= 0: "request", "wave",
  /// "step" and "batch": {"tokens", "seqs", "mixed"}, and "drafter": {"pass", "tokens"} when a
  /// draft model's pass needed it); request -1 during startup.
  StepContext step;
  /// engine.ranks: all: the rank that compiled it (JSON `rank`); -1 (left out) otherwise.
  int rank = -1;
};

/// Workspace manager figures. JSON: {locked_bytes, peak_requested_bytes, num_slots}.
struct WorkspaceStats {
  long long locked_bytes = 0;          ///< per-slot size when the workspace was locked, bytes
  long long peak_requested_bytes = 0;  ///< largest single-slot request seen, bytes (may exceed
                                       ///< locked_bytes: that is the lock assertion)
  int num_slots = 1;                   ///< micro-batch slots, each with its own buffer
};

/// One strategy's result. Field names in JSON equal the member names; `extra` is merged into
/// the same JSON object (its keys never replace a named field).
struct StrategyResult {
  std::string strategy;                 ///< strategy name, e.g. "none", "tq-decode-warmup"
  std::string variant;                  ///< "" or a scenario override, e.g. "cudagraph_mode=full_and_piecewise"
  std::vector<std::string> warmers;     ///< the strategy's warmers in run order
  Outcome outcome = Outcome::kError;
  std::optional<std::string> error;     ///< full error text when outcome != ok
  std::optional<std::string> skipped;   ///< why it did not run, with outcome kSkipped (JSON "skipped")
  std::optional<std::string> failed_phase;
  std::optional<double> startup_ms;     ///< init .. workspace_lock, milliseconds
  std::vector<PhaseTiming> phases;
  std::optional<double> ttft_ms;        ///< first request: arrival to first sampled token
  std::optional<double> first_decode_ms;
  std::optional<double> steady_ttft_ms;   ///< second request, same length, no prefix hits
  std::optional<double> steady_decode_ms;
  int startup_compiles = 0;                       ///< number of compiles before the lock
  std::vector<CompileEvent> hot_path_compiles;    ///< compiles after startup
  std::vector<CompileEvent> startup_compile_list; ///< the startup compiles themselves
  WorkspaceStats workspace;
  std::optional<int> exit_code;         ///< child exit status, null when it did not exit normally
  std::optional<std::string> signal;    ///< e.g. "SIGSEGV" when a signal ended the child
  double wall_ms = 0;                   ///< child wall time as the parent measured it
  nlohmann::json extra = nlohmann::json::object();  ///< free-form fields, merged into the object
};

/// One of a result's timings that `--repeat` folds into a median and keeps the spread of as
/// extra `<name>_min` / `<name>_max` (milliseconds).
struct TimingField {
  const char* name;                                ///< the JSON key, e.g. "steady_ttft_ms"
  std::optional<double> StrategyResult::*field;    ///< the member holding it
};

/// startup_ms, ttft_ms, first_decode_ms, steady_ttft_ms, steady_decode_ms: every timing with a
/// spread (what fold_repeats folds, what the results reader checks the spreads of).
const std::vector<TimingField>& repeat_timings();

/// Folds the N >= 1 runs of one strategy (--repeat; `runs` must not be empty): the first run's
/// result, with each repeat_timings() figure replaced by its median over the runs that have it
/// and its spread kept as extra `<name>_min` / `<name>_max` (what `coldstart compare` uses to
/// tell a regression from noise), plus every run's outcome (extra `repeats`,
/// `repeat_outcomes`). One run is returned as it is.
StrategyResult fold_repeats(std::vector<StrategyResult> runs);

/// The run of a --repeat series that an interrupt stopped: its repeat_timings() figures become
/// those of the runs that finished before it (`finished`: their fold_repeats medians and
/// spreads; a figure none of them has is cleared), not its own partial ones, and extra
/// `times_from_runs` says how many runs they come from. Outcome, error and phases stay the
/// interrupted run's. Nothing changes when `finished` is empty.
void take_finished_times(StrategyResult& interrupted, std::vector<StrategyResult> finished);

/// One file (or directory) a run read its scenario from, as the run's children used it. JSON:
/// {role, path, bytes, fnv1a64} for a file, plus `files` for a directory.
struct InputFile {
  std::string role;     ///< "scenario" | "config" (the HF config.json) | a directory engine key ("tuned_config_dir")
  std::string path;     ///< as the scenario or the command line named it (resolved, not canonical)
  long long bytes = 0;  ///< size of the file; of all its files for a directory
  /// FNV-1a 64 of the file's bytes, 16 hex digits. For a directory: FNV-1a 64 of the lines
  /// "<path relative to it> <that file's fnv1a64>\n" of its regular files, in byte order of
  /// their paths.
  std::string fnv1a64;
  int files = -1;       ///< number of regular files in a directory; -1 (not written) for a file
};

/// Where a result came from. JSON keys equal the member names.
struct RunMeta {
  std::string coldstart_version, git_sha, mode, device_name;
  int sm = 0, sm_count = 0;             ///< e.g. sm = 90; sm_count = number of multiprocessors
  std::string driver, cuda, nvrtc, torch, hostname;
  std::string started_at;               ///< ISO-8601 UTC, e.g. "2025-01-31T12:00:00Z"
  std::string command_line;
  std::vector<std::string> sets;        ///< the run's `--set KEY=VALUE` overrides, in order
  /// The scenario file, every config.json and tuned-config directory its variants read, as they
  /// were validated when the run started: the strategies' children read these copies, never the
  /// user's files, so an edit during the run changes nothing here. Empty in older files.
  std::vector<InputFile> inputs;
};

/// Which scenario ran. `model` and `engine` are free-form summaries (JSON objects).
struct ScenarioSummary {
  std::string name, file;
  nlohmann::json model = nlohmann::json::object();
  nlohmann::json engine = nlohmann::json::object();
};

/// One `expect:` rule of the scenario as the run that wrote the file checked it (what `--check`
/// gates on; JUnit has one test case per rule). JSON: {where, strategy, variant, rule, checks,
/// status, details}.
struct RuleCheck {
  std::string where;                    ///< "<file>:<line>" of the rule, or "--set <KEY>"
  std::string strategy;                 ///< the rule's strategy, "*" for every one
  std::optional<std::string> variant;   ///< the rule's variant; null: every variant
  /// What the rule checks as one line, e.g. "outcome crash, failed_phase first_decode" (its
  /// mode and arch limits included: "mode cuda, arch sm_90, outcome ok")
  std::string rule;
  /// The checked fields among outcome, failed_phase, error_prefix, hot_path_compiles,
  /// max_hot_path_compiles, hot_path_kernels
  std::vector<std::string> checks;
  /// "met" | "unmet" | "not_checked" (no result of this run matches it: its strategy or variant
  /// did not run) | "not_applicable" (a rule for another mode or arch)
  std::string status;
  /// For "unmet": one line per failed check ("none [v]: outcome ok, expected crash"); for the
  /// statuses that were not checked: why
  std::vector<std::string> details;
};

/// A whole results file: {schema, meta, scenario, results, rules}.
struct RunResults {
  RunMeta meta;
  ScenarioSummary scenario;
  std::vector<StrategyResult> results;
  /// The scenario's expect: rules as checked once every strategy had run (empty while the run
  /// is in progress, for an interrupted run, and in files older than this field)
  std::vector<RuleCheck> rules;
};

/// The hot-path events that compiled (source "nvrtc", or "refused" under --jit-monitor error),
/// leaving out loads from the on-disk kernel cache (source "disk"): what every report counts as
/// a hot-path compile, the expect: rules check and compare gates on.
std::vector<CompileEvent> hot_path_compiled(const StrategyResult& r);
/// How many hot-path events were loads from the on-disk kernel cache (shown beside the count).
int hot_path_loads(const StrategyResult& r);
/// The hot-path events (compiles and disk loads) the steady request paid for (step.wave == 1):
/// when there are any, the steady request was not warm and first / steady compares a cold
/// request with another cold one.
std::vector<CompileEvent> steady_cold(const StrategyResult& r);

/// The target a run measured, for keying results across machines: the GPU's name on a GPU
/// ("NVIDIA H200"), the --target profile's device name in compile-only mode ("NVIDIA H200" for
/// --target h200: the mode is meta.mode), "sm_90" for compile-only mode without a profile or
/// when the file names no device. Two sm_90 parts (an H100 and an H200) are two targets.
std::string run_target(const RunMeta& meta);

/// A compile key ("kernel[C=1,...](args)@sm_90/nvrtc-13.0#<source hash>") split into what the
/// compile is (kernel, constexprs, argument specializations: the part before '@'), where it was
/// compiled for ("sm_90/nvrtc-13.0") and the hash of the kernel's program text (hex, "" when the
/// key has none). A key without '@' is all identity.
struct CompileKeyParts {
  std::string identity, target, source_hash;
};
CompileKeyParts split_compile_key(const std::string& key);

bool operator==(const PhaseTiming& a, const PhaseTiming& b);
bool operator==(const CompileEvent& a, const CompileEvent& b);
bool operator==(const WorkspaceStats& a, const WorkspaceStats& b);
bool operator==(const StrategyResult& a, const StrategyResult& b);
bool operator==(const InputFile& a, const InputFile& b);
bool operator==(const RunMeta& a, const RunMeta& b);
bool operator==(const ScenarioSummary& a, const ScenarioSummary& b);
bool operator==(const RuleCheck& a, const RuleCheck& b);
bool operator==(const RunResults& a, const RunResults& b);
inline bool operator!=(const StrategyResult& a, const StrategyResult& b) { return !(a == b); }
inline bool operator!=(const RunResults& a, const RunResults& b) { return !(a == b); }

// nlohmann::json conversions (found by ADL). from_json throws nlohmann::json::exception on a wrong
// type or a missing required field (`name`, `strategy`, `outcome`, `kernel`); from_json of
// RunResults also throws InputError when `schema` is not "coldstart.replay/1".
void to_json(nlohmann::json& j, const PhaseTiming& v);
void from_json(const nlohmann::json& j, PhaseTiming& v);
void to_json(nlohmann::json& j, const CompileEvent& v);
void from_json(const nlohmann::json& j, CompileEvent& v);
void to_json(nlohmann::json& j, const WorkspaceStats& v);
void from_json(const nlohmann::json& j, WorkspaceStats& v);
void to_json(nlohmann::json& j, const StrategyResult& v);
void from_json(const nlohmann::json& j, StrategyResult& v);
void to_json(nlohmann::json& j, const InputFile& v);
void from_json(const nlohmann::json& j, InputFile& v);
void to_json(nlohmann::json& j, const RunMeta& v);
void from_json(const nlohmann::json& j, RunMeta& v);
void to_json(nlohmann::json& j, const ScenarioSummary& v);
void from_json(const nlohmann::json& j, ScenarioSummary& v);
void to_json(nlohmann::json& j, const RuleCheck& v);
void from_json(const nlohmann::json& j, RuleCheck& v);
void to_json(nlohmann::json& j, const RunResults& v);
void from_json(const nlohmann::json& j, RunResults& v);

/// The text of a JSON library error without its "[json.exception.<kind>.<id>] " tag, e.g.
/// "key 'results' not found", for messages that name the file instead.
std::string json_error_text(const nlohmann::json::exception& e);

/// Writes `results` as pretty JSON (2-space indent, trailing newline) to `path`, atomically: the
/// text goes to a temporary file in the same directory, is flushed to disk, then renamed over
/// `path`, so a reader sees either the old file or the complete new one.
/// Throws Error naming the path and the OS error when any step fails (the temp file is removed).
void write_results_json(const std::string& path, const RunResults& results);

/// The JSON of a results file (replay --json, merge -o), for the readers of those files: read with
/// paths::read_input_file (a FIFO, a device or a file past 256 MiB is refused without blocking)
/// and parsed. Throws InputError "<path>: cannot open results file: ..." or "<path>: not valid
/// JSON: ..." (the parser's message without its tag; a number past a double's range included),
/// and for nesting deeper than 128 levels.
nlohmann::json read_results_file_json(const std::string& path);

/// Reads a results file written by write_results_json.
/// Throws InputError "<path>: ..." when the file cannot be opened, is not valid JSON (with the
/// parser's message), has no or a different `schema`, or a field has the wrong type.
RunResults read_results_json(const std::string& path);

}  // namespace coldstart
