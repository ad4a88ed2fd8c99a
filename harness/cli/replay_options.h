// The `coldstart` subcommands that replay or read scenarios and results (replay, _child, report,
// list): their shared options, the checks the parent makes before any child starts, and their
// entry points. main.cpp wires them to the command line; compare, merge and doctor live in
// compare.h and doctor.h.
//
// Files: replay_options.cpp (options, validation, output writing), replay_cmd.cpp (`replay`: the
// parent, repeats, children, expectations), child_cmd.cpp (`_child` and --no-isolate: one
// strategy in this process), list_cmd.cpp (`list`, `report`).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/cli/child_job.h"
#include "harness/common/target.h"
#include "harness/jit/jit.h"
#include "harness/replay/result.h"
#include "harness/replay/scenario.h"

namespace CLI {
class App;
}

namespace coldstart::cli {

/// Every option of `replay` and `_child` (a child gets the parent's, plus the one strategy and
/// variant it runs); `report` uses the output paths and the JIT monitor mode.
struct ReplayArgs {
  std::string scenario;                     // the one scenario of a child
  std::vector<std::string> scenario_files;  // replay: one or more
  std::string filter;
  int repeat = 1;
  std::string junit, md, html, trace;
  std::vector<std::string> strategies;
  std::string device = "auto";
  std::string arch;
  std::string target;  // compile-only target profile (--target h200)
  int sm_count = 0;    // compile-only SM count (--sm-count)
  std::vector<std::string> sets;
  std::string json;
  std::string cache_dir;
  std::string compile_memo;      // the run's compile memo directory (JitOptions::compile_memo_dir)
  bool no_compile_memo = false;  // --no-compile-memo
  std::string jit_monitor = "record";
  double timeout_s = 0;
  bool no_isolate = false;
  bool check = false;  // exit 3 when an `expect:` rule is unmet
  bool force = false;  // --force: outputs may replace a symbolic link, device, FIFO or socket
  std::string progress = "auto";  // --progress: auto, live, plain or none
  bool verbose = false;
  std::string graph_replay_stale = "stop";  // --graph-replay-stale: stop | run
  bool host_split = false;  // --host-split: CUPTI split of the engine thread's time (GPU runs)
  bool envelope = false;    // `coldstart coverage`: the serving envelope instead of the requests
  int jobs = 1;             // --jobs: strategy runs at once (compile-only mode)
  uint64_t seed = 1234;
  // `_job` only: the strategy and variant whose job it prints
  int variant_index = 0;
  std::string strategy_name;
};

/// How `replay` reports progress on stderr (replay_cmd.cpp, Progress).
enum class ProgressMode { kLive, kPlain, kNone };

/// --progress's value: "live" (one line rewritten in place), "plain" (a line per strategy run
/// start and end), "none", or "auto": live when stderr is a terminal (`stderr_is_tty`), plain
/// otherwise. Throws InputError for any other value.
ProgressMode parse_progress(const std::string& s, bool stderr_is_tty);

/// --jit-monitor's value as a mode. Throws InputError for anything but record, warn or error.
jit::MonitorMode parse_monitor(const std::string& s);

/// What the loader checks beyond the file format: warmer names, and whether the registered
/// model families and mixer backends can replay the scenario for `target` (when known).
ScenarioRules replay_rules(std::optional<Target> target = std::nullopt);

/// The target when it is known without touching a GPU: compile-only mode, or a build without
/// CUDA; nullopt on a GPU (the child learns the device).
std::optional<Target> known_target(const ReplayArgs& a);

/// a.scenario loaded with a.sets and replay_rules(known_target(a)). Throws InputError.
Scenario load(const ReplayArgs& a);

/// Checks every option a child would otherwise reject one strategy at a time (device, arch,
/// target, SM count, JIT monitor mode, cache directory, timeout). The outputs are checked with
/// the run's inputs once the scenarios are loaded (paths::check_output_paths). Throws
/// InputError (exit status 2).
void validate_run_options(const ReplayArgs& a);

/// Refuses a --filter over 1024 characters or with groups nested over 32 deep (InputError).
void check_filter_size(const std::string& filter);

/// Writes `runs` to every output a.json / a.junit / a.md / a.html / a.trace names (a merged
/// file when several scenarios ran). Throws Error when a write fails.
void write_outputs(const ReplayArgs& a, const std::vector<RunResults>& runs);

/// Adds the options `replay` and `_child` share (device, arch, target, sets, cache, monitor).
void add_common_options(CLI::App* cmd, ReplayArgs& a);
/// Adds the report outputs (--junit, --md, --html, --trace).
void add_report_options(CLI::App* cmd, ReplayArgs& a);
/// Adds what `replay` and `coverage` share: the scenario files, add_common_options,
/// add_report_options, --strategy, --filter, --json, --timeout, --progress, --no-compile-memo.
void add_run_options(CLI::App* cmd, ReplayArgs& a);

/// Runs `job` in this process (the child, and --no-isolate); `on_snapshot` receives the result
/// as it grows and the phase running ("" when none). A device the scenario's `archs` exclude
/// gives a kSkipped result without running anything.
StrategyResult run_in_process(
    const ChildJob& job,
    std::function<void(const StrategyResult&, const std::string& current_phase)> on_snapshot);

/// The job of one (variant, strategy): `variant_scenario` (apply_variant, paths as the child
/// must read them) and the run's options from `a` (device, arch, target, SM count, cache, compile
/// memo, JIT monitor, seed, verbosity).
ChildJob make_child_job(const ReplayArgs& a, const Scenario& variant_scenario,
                        const StrategySpec& strategy);

/// `coldstart replay`: exit 0 when every strategy ran, 1 on a harness error or when every
/// strategy run timed out (unless --check held rules that all passed), 3 with --check when an
/// expect: rule is unmet, 128 + signal when interrupted. Throws InputError (exit 2).
int replay_main(ReplayArgs a, const std::string& cmdline);
/// `coldstart coverage SCENARIO...`: the serving envelope of each scenario per strategy
/// (engine_envelope.cpp: the classes; key-only steps; cold keys compiled once to time them), in
/// compile-only mode (--device auto means compile-only here; --device cuda is refused) for
/// --target / --arch (default sm_90: the h200 profile). Same outputs and exit status as
/// replay_main, no expect: rules checked. Throws InputError (exit 2).
int coverage_main(ReplayArgs a, const std::string& cmdline);
/// `coldstart _child --job FILE`: runs the job the parent wrote (child_job.h), its snapshots and
/// result on the result channel (fd 3). Throws Error when the job file is unreadable.
int child_main(const std::string& job_file);
/// `coldstart _job SCENARIO --strategy S --variant-index N ...`: prints (stdout, JSON) the job a
/// replay with these options would hand that strategy's child, naming the user's files (a replay
/// names its private copies): to rerun one child alone, e.g. under compute-sanitizer, with
/// `_child --job`. Throws InputError for a bad scenario, strategy or variant index.
int job_main(ReplayArgs a);
/// `coldstart report`: renders results files (single-run or merged).
int report_main(const std::vector<std::string>& inputs, const ReplayArgs& a);
/// `coldstart list`: warmers, model families, mixer backends, targets, scenarios' strategies.
int list_main(std::vector<std::string> scenarios, const std::string& filter);

}  // namespace coldstart::cli
