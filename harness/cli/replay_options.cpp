// `coldstart replay` / `_child` / `report` options: validation before any child starts, and
// writing results (see replay_options.h).
#include "harness/cli/replay_options.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "harness/cli/compare.h"
#include "harness/common/paths.h"
#include "harness/models/moe.engine_keys.h"
#include "harness/engine/capture_policy.engine_keys.h"
#include "harness/jit/driver.h"
#include "harness/jit/nvrtc_archs.h"
#include "harness/models/model.h"
#include "harness/runtime/device.h"
#include "reports/renderers.h"
#include "warmers/warmer.h"

namespace coldstart::cli {

jit::MonitorMode parse_monitor(const std::string& s) {
  if (s == "record") return jit::MonitorMode::kRecord;
  if (s == "warn") return jit::MonitorMode::kWarn;
  if (s == "error") return jit::MonitorMode::kError;
  throw InputError("--jit-monitor '" + s + "': expected record, warn or error");
}

ProgressMode parse_progress(const std::string& s, bool stderr_is_tty) {
  if (s == "auto") return stderr_is_tty ? ProgressMode::kLive : ProgressMode::kPlain;
  if (s == "live") return ProgressMode::kLive;
  if (s == "plain") return ProgressMode::kPlain;
  if (s == "none") return ProgressMode::kNone;
  throw InputError("--progress '" + s + "': expected auto, live, plain or none");
}

/// What the loader checks beyond the file format: warmer names, and whether the registered
/// model families and mixer backends can replay it (so an unsupported scenario exits 2, at the
/// line of the key, before any strategy runs).
ScenarioRules replay_rules(std::optional<Target> target) {
  ScenarioRules rules;
  rules.known_warmers = warmer_names();
  rules.check_replayable = [target](const Scenario& s) {
    // A target the scenario's `archs` exclude skips every strategy: its kernels are not checked.
    const bool excluded = target && !s.archs.empty() &&
                          std::find(s.archs.begin(), s.archs.end(), target->arch) == s.archs.end();
    std::vector<ScenarioProblem> problems = check_replayable(s, target && !excluded ? &*target : nullptr);
    for (ScenarioProblem& p : check_capture_policy(s.engine)) problems.push_back(std::move(p));
    // Known here: the target is known only in compile-only mode (known_target), where no router
    // scores exist to route the experts of each rank by.
    if (target && expert_parallel(s.engine) && moe_routing_simulation(s.engine) == "none")
      problems.push_back({"engine.moe_routing_simulation",
                          "none: under expert parallelism compile-only mode cannot route tokens by "
                          "the router's scores (they need the GPU); set uniform_random or "
                          "normal_routing (vLLM's routing simulation) to replay it without one"});
    // A warmer whose mixer backend is gone (renamed, removed) would find no layers and skip:
    // refused here, before anything runs.
    for (const StrategySpec& st : s.strategies)
      for (const std::string& w : st.warmers)
        for (const std::string& m : warmer_unresolved_mixers(w))
          problems.push_back({"strategies", fmt::format("strategy '{}': warmer '{}' looks up mixers "
                                                        "'{}', which no registered mixer backend "
                                                        "has as its name or kind",
                                                        st.name, w, m)});
    return problems;
  };
  return rules;
}

/// The target when it is known without touching a GPU (the parent never initializes CUDA before
/// it forks children): compile-only mode, or a build without CUDA. On a GPU the child learns the
/// device, and a kernel the device lacks makes that strategy's outcome `error`.
std::optional<Target> known_target(const ReplayArgs& a) {
  if (a.device != "compile-only" && !(a.device == "auto" && !built_with_cuda())) return std::nullopt;
  Target t = a.target.empty() ? target_for_arch(a.arch.empty() ? "sm_90" : a.arch, a.sm_count)
                              : target_profile(a.target);
  if (!a.target.empty() && a.sm_count > 0) t.sm_count = a.sm_count;
  return t;
}

Scenario load(const ReplayArgs& a) {
  return load_scenario(a.scenario, a.sets, replay_rules(known_target(a)));
}

void validate_run_options(const ReplayArgs& a) {
  parse_monitor(a.jit_monitor);
  parse_progress(a.progress, false);
  if (a.host_split && a.device == "compile-only")
    throw InputError("--host-split times CUDA calls on a GPU; compile-only mode makes none");
  if (a.envelope && a.check)
    throw InputError("--check checks the scenario's expect: rules, which are about its requests; "
                     "an --envelope run replays none");
  if (a.envelope && parse_monitor(a.jit_monitor) == jit::MonitorMode::kError)
    throw InputError("--jit-monitor error refuses every compile after startup, and the envelope "
                     "compiles the keys it finds cold once each to time them: leave it at record");
  if (a.envelope && !known_target(a))
    throw InputError("--envelope runs key-only steps, which need compile-only mode: add --device "
                     "compile-only (and --target for the GPU to cover)");
  if (a.jobs < 1 || a.jobs > 64)
    throw InputError(fmt::format("--jobs {}: expected 1 to 64 strategy runs at once", a.jobs));
  if (a.jobs > 1 && !known_target(a))
    throw InputError("--jobs runs strategies side by side, which only compile-only mode can (on a "
                     "GPU each run sizes its KV cache from the whole device's memory): add "
                     "--device compile-only, or leave --jobs at 1");
  if (a.jobs > 1 && a.no_isolate)
    throw InputError("--jobs runs each strategy in its own child; --no-isolate runs them in this "
                     "process, one at a time");
  if (a.device != "auto" && a.device != "cuda" && a.device != "compile-only") {
    throw InputError("--device '" + a.device + "': expected auto, cuda or compile-only");
  }
  if (a.device == "cuda") {
    if (!built_with_cuda()) {
      throw InputError("--device cuda: this build's libtorch has no CUDA (compile-only build); "
                       "build against a PyTorch install with CUDA (README)");
    }
    if (!jit::driver_available()) {
      throw InputError("--device cuda: no usable CUDA driver: " + jit::driver_unavailable_reason());
    }
  }
  if (!a.arch.empty() && a.arch != "sm_" + std::to_string(jit::arch_sm(a.arch)))
    throw InputError("--arch '" + a.arch + "': expected a base arch such as sm_86, sm_90 or sm_100 "
                     "(kernels that need sm_90a / sm_100a compile for it by themselves)");
  if (!a.arch.empty() && !jit::nvrtc_can_target(a.arch))
    throw InputError("--arch '" + a.arch + "': " + jit::nvrtc_cannot_target_text(a.arch));
  if (!a.target.empty()) {
    const Target t = target_profile(a.target);  // throws for an unknown name
    if (!jit::nvrtc_can_target(t.arch))
      throw InputError("--target " + a.target + ": " + jit::nvrtc_cannot_target_text(t.arch));
  }
  if (!a.target.empty() || !a.arch.empty() || a.sm_count != 0) {
    // Device-independent part of the target: the profile and arch agree, the SM count is sane.
    // Either may come from its environment variable: the text names both spellings.
    if (!a.target.empty() && !a.arch.empty() && parse_sm(a.arch) != target_profile(a.target).sm)
      throw InputError("--arch / COLDSTART_ARCH " + a.arch + " contradicts --target / "
                       "COLDSTART_TARGET " + a.target + " (" + target_profile(a.target).arch + ")");
    if (a.sm_count < 0 || a.sm_count > 1024)
      throw InputError("--sm-count " + std::to_string(a.sm_count) + ": expected 1..1024");
  }
  if (!(a.timeout_s >= 0) || a.timeout_s > kMaxTimeoutS)  // also refuses NaN and inf
    throw InputError(fmt::format(
        "--timeout must be between 0 (the scenario's timeout_s) and {:g} seconds (7 days)",
        kMaxTimeoutS));
  if (!a.cache_dir.empty()) {
    try {
      paths::make_dirs(a.cache_dir);
    } catch (const Error& e) {
      throw InputError(std::string("--cache-dir: ") + e.what());
    }
    if (!paths::is_directory(a.cache_dir) || ::access(a.cache_dir.c_str(), R_OK | X_OK) != 0) {
      throw InputError("--cache-dir '" + a.cache_dir + "': not a readable directory");
    }
    // A read-only cache (a shared, pre-built one) is used as it is: its entries load, new
    // compiles stay in memory (each strategy's result lists that as a JIT warning).
    if (::access(a.cache_dir.c_str(), W_OK) != 0) {
      std::fprintf(stderr, "coldstart: --cache-dir '%s' is read-only: its entries are used, new "
                   "compiles are not saved\n", a.cache_dir.c_str());
    }
  }
}

void write_outputs(const ReplayArgs& a, const std::vector<RunResults>& runs) {
  if (!a.json.empty()) {
    if (runs.size() == 1) {
      write_results_json(a.json, runs.front());
    } else {
      write_merged_json(a.json, runs);
    }
  }
  reports::ReportFiles files;
  files.junit = a.junit;
  files.markdown = a.md;
  files.html = a.html;
  files.trace = a.trace;
  files.hot_path_compiles_fail = a.jit_monitor == "error";
  reports::write_report_files(runs, files);
}

/// The filter's parser (NameFilter) descends once per nested group: bounded, so a --filter of
/// thousands of nested groups cannot overflow the stack. Names are short; a filter needs neither.
void check_filter_size(const std::string& filter) {
  int depth = 0, deepest = 0;
  for (char c : filter) {
    if (c == '(') deepest = std::max(deepest, ++depth);
    if (c == ')') --depth;
  }
  if (filter.size() > 1024 || deepest > 32) {
    throw InputError(fmt::format("--filter: {} characters with groups nested {} deep; at most 1024 "
                                 "characters and 32 levels",
                                 filter.size(), deepest));
  }
}

namespace {
// A CLI11 check refusing an empty value, which would otherwise silently mean "not given".
std::function<std::string(const std::string&)> refuse_empty(std::string what) {
  return [what = std::move(what)](const std::string& v) { return v.empty() ? what : std::string(); };
}
}  // namespace

void add_common_options(CLI::App* cmd, ReplayArgs& a) {
  cmd->add_option("--device", a.device, "auto | cuda | compile-only")
      ->envname("COLDSTART_DEVICE")->capture_default_str();
  cmd->add_option("--arch", a.arch,
                  "compile target in compile-only mode, e.g. sm_86, sm_90, sm_100; these three "
                  "take their flagship profile (rtx-a4000 16 GB, h200, b200), memory included")
      ->envname("COLDSTART_ARCH")
      ->check(refuse_empty("needs an arch such as sm_86, sm_90 or sm_100"));
  cmd->add_option("--target", a.target,
                  "compile-only target GPU: rtx-a4000, a10, h100, h200, b200 (arch, SM count, "
                  "device memory, device name for tuned tables)")
      ->envname("COLDSTART_TARGET")
      ->check(refuse_empty("needs a profile name (rtx-a4000, a10, h100, h200, b200)"));
  cmd->add_option("--sm-count", a.sm_count,
                  "compile-only SM count (with --arch, or replacing the --target profile's)")
      ->envname("COLDSTART_SM_COUNT")
      ->check(CLI::Range(1, 1024));  // a given 0 was taken for "not given" and silently ignored
  cmd->add_option("--set", a.sets, "override a scenario key, KEY=VALUE (repeatable)");
  cmd->add_option("--cache-dir", a.cache_dir,
                  "persistent on-disk kernel cache (default: a fresh, cold one per run)")
      ->envname("COLDSTART_CACHE_DIR");
  cmd->add_option("--jit-monitor", a.jit_monitor,
                  "record | warn | error: error turns the first hot-path compile into a crash")
      ->envname("COLDSTART_JIT_MONITOR")->capture_default_str();
  cmd->add_option("--seed", a.seed, "seed of weights and prompts")->capture_default_str();
  cmd->add_flag("-v,--verbose", a.verbose, "print each phase and the children's stderr");
  cmd->add_option("--graph-replay-stale", a.graph_replay_stale,
                  "stop | run: a replay of a CUDA graph whose buffers moved since capture is a "
                  "crash either way; run (GPU runs) launches it first and reports whether the "
                  "device faulted")
      ->check(CLI::IsMember({"stop", "run"}))
      ->capture_default_str();
  cmd->add_flag("--host-split", a.host_split,
                "GPU runs: split each request's host time by what the engine did, CUDA API calls "
                "by kind through CUPTI (adds host time to every CUDA call while requests run)");
}

void add_report_options(CLI::App* cmd, ReplayArgs& a) {
  cmd->add_option("--junit", a.junit, "write JUnit XML (one test case per scenario and strategy)");
  cmd->add_option("--md", a.md, "write a Markdown summary (for a pull-request comment)");
  cmd->add_option("--html", a.html, "write a self-contained HTML report with charts");
  cmd->add_option("--trace", a.trace, "write a Chrome trace (Perfetto, chrome://tracing)");
  cmd->add_flag("--force", a.force,
                "let an output replace a symbolic link, device, FIFO or socket at its path "
                "(refused otherwise)");
}

void add_run_options(CLI::App* cmd, ReplayArgs& a) {
  cmd->add_option("scenarios", a.scenario_files, "scenario YAML files")->required();
  add_common_options(cmd, a);
  add_report_options(cmd, a);
  cmd->add_option("--strategy", a.strategies, "run only these strategies (repeatable)");
  cmd->add_option("--filter", a.filter,
                  "run only scenarios/strategies whose name (or scenario/strategy) matches")
      ->envname("COLDSTART_FILTER");
  cmd->add_option("--json", a.json, "write the results (schema coldstart.replay/1) here");
  cmd->add_option("--timeout", a.timeout_s,
                  "per-strategy watchdog: seconds of wall time per child (0 or unset: the "
                  "scenario's timeout_s)");
  cmd->add_option("--progress", a.progress,
                  "auto | live | plain | none: progress on stderr (auto: a live line on a "
                  "terminal, else one plain line per strategy run start and end)")
      ->envname("COLDSTART_PROGRESS")->capture_default_str();
  cmd->add_option("--jobs,-j", a.jobs,
                  "compile-only mode: run up to N strategies at once, each in its own child "
                  "(results keep the one-at-a-time order; times are measured under the others' "
                  "load, and a key two runs compile at the same time is measured by both, so "
                  "fewer are marked reused)")
      ->envname("COLDSTART_JOBS")->capture_default_str();
  cmd->add_flag("--no-compile-memo", a.no_compile_memo,
                "compile-only mode: compile every key in every strategy (by default a key "
                "another strategy of this run compiled is reused with its measured compile "
                "time and marked reused)");
}

}  // namespace coldstart::cli
