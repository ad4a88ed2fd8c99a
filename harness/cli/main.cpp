// The `coldstart` command.
//
//   coldstart replay SCENARIO... [--strategy NAME]... [--filter REGEX] [--repeat N]
//                    [--device auto|cuda|compile-only] [--arch sm_XX] [--set KEY=VALUE]...
//                    [--json FILE] [--junit FILE] [--md FILE] [--html FILE] [--trace FILE]
//                    [--cache-dir DIR] [--jit-monitor record|warn|error] [--timeout S]
//                    [--no-isolate] [-v]
//   coldstart report RESULTS.json... [--junit FILE] [--md FILE] [--html FILE] [--trace FILE]
//   coldstart compare BASELINE.json CURRENT.json [--max-regression PCT] [--allow-removed]
//   coldstart merge RESULTS.json... -o MERGED.json
//   coldstart list [SCENARIO...] [--filter REGEX]
//   coldstart doctor
//
// The parent process never touches the GPU: it validates the scenario, then starts one child per
// (variant, strategy) (`coldstart _child ...`, the same binary), collects what each child
// reports (harness/isolate), and renders the results. The children read the scenario and the
// files it names from copies the parent made when it validated them (harness/cli/run_inputs.h).
// Exit status: 0 when every strategy ran (a reproduced crash or timeout is a result), 1 when the
// harness failed for some strategy (outcome "error"), 2 on bad input, 128 + the signal (130 for
// SIGINT, 143 for SIGTERM) when the run was interrupted.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <dirent.h>
#include <execinfo.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <iostream>
#include <regex>

#include "harness/cli/cache_snapshot.h"
#include "harness/cli/compare.h"
#include "harness/cli/doctor.h"
#include "harness/cli/run_inputs.h"
#include "harness/common/paths.h"
#include "harness/isolate/isolate.h"
#include "harness/jit/driver.h"
#include "harness/jit/nvrtc_archs.h"
#include "harness/jit/jit.h"
#include "harness/replay/engine.h"
#include "harness/replay/expect.h"
#include "harness/replay/result.h"
#include "harness/replay/scenario.h"
#include "reports/renderers.h"
#include "reports/table.h"
#include "warmers/warmer.h"

#ifndef COLDSTART_GIT_SHA
#define COLDSTART_GIT_SHA "unknown"
#endif
#ifndef COLDSTART_VERSION
#define COLDSTART_VERSION "0.0.0"
#endif

namespace coldstart {
namespace {

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
  bool verbose = false;
  uint64_t seed = 1234;
  // child only
  int variant_index = 0;
  std::string strategy_name;
};

jit::MonitorMode parse_monitor(const std::string& s) {
  if (s == "record") return jit::MonitorMode::kRecord;
  if (s == "warn") return jit::MonitorMode::kWarn;
  if (s == "error") return jit::MonitorMode::kError;
  throw InputError("--jit-monitor '" + s + "': expected record, warn or error");
}

std::string self_exe() { return paths::self_executable(); }

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

/// What the loader checks beyond the file format: warmer names, and whether the registered
/// model families and mixer backends can replay it (so an unsupported scenario exits 2, at the
/// line of the key, before any strategy runs).
ScenarioRules replay_rules(std::optional<Target> target = std::nullopt) {
  ScenarioRules rules;
  rules.known_warmers = warmer_names();
  rules.check_replayable = [target](const Scenario& s) {
    // A target the scenario's `archs` exclude skips every strategy: its kernels are not checked.
    const bool excluded = target && !s.archs.empty() &&
                          std::find(s.archs.begin(), s.archs.end(), target->arch) == s.archs.end();
    return check_replayable(s, target && !excluded ? &*target : nullptr);
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

/// Checks, before any strategy runs, every option a child would otherwise reject one strategy
/// at a time: device, arch, JIT monitor mode, cache directory, output paths, timeout. Throws
/// InputError (exit status 2).
void validate_run_options(const ReplayArgs& a, const std::vector<std::string>& outputs) {
  parse_monitor(a.jit_monitor);
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
    if (!a.target.empty() && !a.arch.empty() && parse_sm(a.arch) != target_profile(a.target).sm)
      throw InputError("--arch " + a.arch + " contradicts --target " + a.target + " (" +
                       target_profile(a.target).arch + ")");
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
  for (const auto& out : outputs) {
    if (out.empty()) continue;
    if (paths::is_directory(out)) throw InputError("output '" + out + "': is a directory");
    const std::string dir = paths::parent(out).empty() ? "." : paths::parent(out);
    if (!paths::is_directory(dir) || ::access(dir.c_str(), W_OK) != 0) {
      throw InputError("output '" + out + "': directory '" + dir + "' does not exist or is not writable");
    }
  }
}

ScenarioSummary summarize(const Scenario& s) {
  ScenarioSummary sum;
  sum.name = s.name;
  sum.file = s.file;
  const ModelConfig& m = s.model;
  sum.model = {{"architecture", m.architecture}, {"model_type", m.model_type},
               {"config", m.config_file}, {"hidden_size", m.hidden_size},
               {"num_hidden_layers", m.num_hidden_layers},
               {"num_attention_heads", m.num_attention_heads},
               {"num_key_value_heads", m.num_key_value_heads}, {"head_dim", m.head_dim},
               {"intermediate_size", m.intermediate_size}, {"vocab_size", m.vocab_size}};
  const EngineConfig& e = s.engine;
  sum.engine = {{"max_num_seqs", e.max_num_seqs},
                {"max_num_batched_tokens", e.max_num_batched_tokens},
                {"max_model_len", e.max_model_len}, {"block_size", e.block_size},
                {"kv_cache_dtype", e.kv_cache_dtype},
                {"cudagraph_mode", cudagraph_mode_name(e.cudagraph_mode)},
                {"cudagraph_capture_sizes", e.cudagraph_capture_sizes},
                {"tensor_parallel_size", e.tensor_parallel_size},
                {"mamba_ssm_cache_dtype", e.mamba_ssm_cache_dtype},
                {"num_speculative_tokens", e.num_speculative_tokens}};
  nlohmann::json req = nlohmann::json::array();
  for (const auto& r : s.requests)
    req.push_back({{"prompt_tokens", r.prompt_tokens}, {"decode_steps", r.decode_steps},
                   {"arrival_step", r.arrival_step}, {"steady", r.steady}});
  sum.engine["requests"] = req;
  return sum;
}

/// Runs one (variant, strategy) in this process. Used by the child and by --no-isolate.
StrategyResult run_in_process(const ReplayArgs& a, const Scenario& base, int variant_index,
                              const StrategySpec& strategy,
                              std::function<void(const StrategyResult&)> on_snapshot) {
  const Variant& v = base.variants.at(variant_index);
  Scenario s = apply_variant(base, v);
  EngineOptions o;
  o.device = select_device(a.device, a.arch, a.target, a.sm_count);
  if (!s.archs.empty() &&
      std::find(s.archs.begin(), s.archs.end(), o.device.arch()) == s.archs.end()) {
    // The scenario excludes this device: nothing runs; the result says why (JUnit: skipped).
    StrategyResult r;
    r.strategy = strategy.name;
    r.variant = v.name;
    r.warmers = strategy.warmers;
    r.outcome = Outcome::kError;
    std::string list;
    for (const auto& x : s.archs) list += (list.empty() ? "" : ", ") + x;
    r.extra["skipped"] = fmt::format("{} runs on [{}]; this device is {} ({})", s.name, list,
                                     o.device.arch(), o.device.name);
    r.error = r.extra["skipped"].get<std::string>();
    r.extra["meta"] = device_meta_json(o.device);
    return r;
  }
  o.jit.arch = o.device.arch();
  o.jit.cache_dir = a.cache_dir;
  o.jit.compile_memo_dir = a.compile_memo;
  o.jit.monitor = parse_monitor(a.jit_monitor);
  o.seed = a.seed;
  o.on_snapshot = std::move(on_snapshot);
  if (a.verbose) o.on_log = [](const std::string& l) { std::cerr << "  | " << l << "\n"; };
  Engine engine(s, strategy, v.name, o);
  return engine.run();
}

/// On a fatal signal in a child, print a backtrace to stderr (the parent keeps the stderr tail
/// in the result) and die of the same signal, so the parent classifies it as that signal.
void install_crash_backtrace() {
  auto handler = [](int sig) {
    void* frames[64];
    const int n = backtrace(frames, 64);
    const char msg[] = "coldstart child: fatal signal, backtrace:\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    std::signal(sig, SIG_DFL);
    raise(sig);
  };
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, handler);
}

int child_main(const ReplayArgs& a) {
  std::signal(SIGPIPE, SIG_IGN);
  install_crash_backtrace();
  const Scenario s = load(a);
  const StrategySpec* strategy = nullptr;
  for (const auto& st : s.strategies)
    if (st.name == a.strategy_name) strategy = &st;
  if (strategy == nullptr) throw InputError("no strategy '" + a.strategy_name + "'");
  const auto channel = isolate::ResultChannel::from_env();
  auto send = [&](const StrategyResult& r, bool final) {
    std::optional<std::string> phase;
    if (r.extra.contains("current_phase") && r.extra["current_phase"].is_string() &&
        !r.extra["current_phase"].get<std::string>().empty()) {
      phase = r.extra["current_phase"].get<std::string>();
    }
    isolate::send_snapshot(channel, r, phase, final);
  };
  StrategyResult r = run_in_process(a, s, a.variant_index, *strategy,
                                    [&](const StrategyResult& snap) { send(snap, false); });
  send(r, true);
  return 0;
}

RunMeta make_meta(const std::vector<StrategyResult>& results, const std::string& cmdline,
                  const std::string& started_at) {
  RunMeta m;
  m.coldstart_version = COLDSTART_VERSION;
  m.git_sha = COLDSTART_GIT_SHA;
  m.hostname = hostname();
  m.started_at = started_at;
  m.command_line = cmdline;
  m.nvrtc = jit::nvrtc_version();
  for (const auto& r : results) {
    auto it = r.extra.find("meta");
    if (it == r.extra.end() || !it->is_object()) continue;
    const auto& j = *it;
    m.mode = j.value("mode", "");
    m.device_name = j.value("device_name", "");
    m.sm = j.value("sm", 0);
    m.sm_count = j.value("sm_count", 0);
    m.driver = j.value("driver", "");
    m.cuda = j.value("cuda", "");
    m.torch = j.value("torch", "");
    break;
  }
  return m;
}

/// Folds N runs of one strategy: the first run's result, with startup / TTFT / first-decode /
/// steady figures replaced by their medians and the spread kept as `<field>_min` / `<field>_max`
/// (what `coldstart compare` uses to tell a regression from noise), plus every run's outcome.
StrategyResult fold_repeats(std::vector<StrategyResult> runs) {
  StrategyResult out = runs.front();
  if (runs.size() == 1) return out;
  out.extra["repeats"] = runs.size();
  nlohmann::json outcomes = nlohmann::json::array();
  for (const auto& r : runs) outcomes.push_back(outcome_name(r.outcome));
  out.extra["repeat_outcomes"] = outcomes;
  auto fold = [&](const char* name, std::optional<double> StrategyResult::*field) {
    std::vector<double> v;
    for (const auto& r : runs)
      if (r.*field) v.push_back(*(r.*field));
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    out.*field = v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
    out.extra[std::string(name) + "_min"] = v.front();
    out.extra[std::string(name) + "_max"] = v.back();
  };
  fold("startup_ms", &StrategyResult::startup_ms);
  fold("ttft_ms", &StrategyResult::ttft_ms);
  fold("first_decode_ms", &StrategyResult::first_decode_ms);
  fold("steady_ttft_ms", &StrategyResult::steady_ttft_ms);
  fold("steady_decode_ms", &StrategyResult::steady_decode_ms);
  return out;
}

/// The result of one strategy's repeated runs: fold_repeats of `reps` when all `wanted` runs
/// finished. Otherwise the run was interrupted: the interrupted run's result (or, when the
/// interrupt came between two runs, the fold of those that finished), with outcome
/// `interrupted` and extra["repeats_completed"] saying how many finished.
StrategyResult interrupted_repeats(std::vector<StrategyResult> reps, int wanted) {
  const bool stopped = !reps.empty() && reps.back().outcome == Outcome::kInterrupted;
  if (!stopped && static_cast<int>(reps.size()) == wanted) return fold_repeats(std::move(reps));
  const int completed = static_cast<int>(reps.size()) - (stopped ? 1 : 0);
  StrategyResult out = stopped ? reps.back() : fold_repeats(reps);
  if (!stopped) {
    const int sig = isolate::interrupt_signal();
    out.outcome = Outcome::kInterrupted;
    out.error = fmt::format("interrupted by {} (the run was stopped) after {} of {} runs",
                            isolate::signal_name(sig), completed, wanted);
    out.failed_phase = std::nullopt;
  }
  if (wanted > 1) out.extra["repeats_completed"] = completed;
  return out;
}

/// The live progress line: what runs now, how many done of how many, elapsed time. Only on a
/// terminal; quiet otherwise.
class Progress {
 public:
  Progress(size_t total, bool enabled) : total_(total), enabled_(enabled) {}
  void update(size_t index, const std::string& label, const std::string& phase) {
    if (!enabled_) return;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::cerr << fmt::format("\r\033[K[{}/{}] {}{} ({:.1f} s)", index + 1, total_, label,
                             phase.empty() ? "" : ": " + phase, s)
              << std::flush;
  }
  void done(size_t index, const std::string& label, const StrategyResult& r) {
    if (!enabled_) return;
    std::cerr << fmt::format("\r\033[K[{}/{}] {}: {}{}\n", index + 1, total_, label,
                             outcome_name(r.outcome),
                             r.failed_phase ? " in " + *r.failed_phase : std::string());
  }

 private:
  size_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

struct Job {
  size_t scenario;
  int variant;
  const StrategySpec* strategy;
};

/// Runs one (variant, strategy) of `s` in a child, which loads the scenario from `inputs`' copy
/// (never the user's files); in this process with --no-isolate.
StrategyResult run_job(const ReplayArgs& a, const cli::RunInputs& inputs, const Scenario& s,
                       const Job& job, const std::function<void(const std::string&)>& on_phase) {
  const StrategySpec& st = *job.strategy;
  if (a.no_isolate) return run_in_process(a, s, job.variant, st, {});
  isolate::ChildSpec spec;
  spec.argv = {self_exe(), "_child", inputs.scenario_path(job.scenario), "--strategy", st.name,
               "--variant-index", std::to_string(job.variant), "--device", a.device,
               "--jit-monitor", a.jit_monitor, "--seed", std::to_string(a.seed)};
  if (!a.arch.empty()) spec.argv.insert(spec.argv.end(), {"--arch", a.arch});
  if (!a.target.empty()) spec.argv.insert(spec.argv.end(), {"--target", a.target});
  if (a.sm_count != 0) spec.argv.insert(spec.argv.end(), {"--sm-count", std::to_string(a.sm_count)});
  if (!a.cache_dir.empty()) spec.argv.insert(spec.argv.end(), {"--cache-dir", a.cache_dir});
  if (!a.compile_memo.empty()) spec.argv.insert(spec.argv.end(), {"--compile-memo", a.compile_memo});
  if (a.verbose) spec.argv.push_back("-v");
  for (const auto& kv : a.sets) spec.argv.insert(spec.argv.end(), {"--set", kv});
  for (const auto& kv : inputs.child_sets(job.scenario))
    spec.argv.insert(spec.argv.end(), {"--set", kv});
  spec.timeout_s = a.timeout_s > 0 ? a.timeout_s : s.timeout_s;
  // Whatever the child leaves under $TMPDIR (its cold kernel cache, ...) goes with it, also when
  // the watchdog or an interrupt stops it before it can clean up.
  spec.private_tmpdir = true;
  StrategyResult fallback;
  fallback.strategy = st.name;
  fallback.variant = s.variants[job.variant].name;
  fallback.warmers = st.warmers;
  fallback.extra["allow_hot_path_compiles"] = st.allow_hot_path_compiles;
  auto on_msg = [&](const std::string& line) {
    // Snapshot lines carry the running phase; a cheap find keeps parsing off the hot loop.
    const auto at = line.find("\"current_phase\":\"");
    if (at == std::string::npos) return;
    const auto b = at + 17, e = line.find('"', b);
    if (e != std::string::npos) on_phase(line.substr(b, e - b));
  };
  // Which strategy a child's line comes from (strategies may run one after another quickly, and
  // a warn line alone cannot say).
  const std::string who = s.variants[job.variant].name.empty()
                              ? st.name
                              : st.name + " [" + s.variants[job.variant].name + "]";
  auto on_err = [&](const std::string& line) {
    // Children's stderr is shown with -v; `--jit-monitor warn` lines always.
    if (a.verbose || line.rfind("coldstart: hot-path compile", 0) == 0)
      std::cerr << "  " << who << ": " << line << "\n";
  };
  isolate::ChildExit ex = isolate::run_child(spec, on_msg, on_err);
  return isolate::classify(ex, isolate::last_snapshot(ex.messages, fallback));
}

bool selected(const ReplayArgs& a, const Scenario& s, const StrategySpec& st) {
  if (!a.strategies.empty() &&
      std::find(a.strategies.begin(), a.strategies.end(), st.name) == a.strategies.end())
    return false;
  if (a.filter.empty()) return true;
  const std::regex re(a.filter);
  return std::regex_search(s.name, re) || std::regex_search(st.name, re) ||
         std::regex_search(s.name + "/" + st.name, re);
}

void write_outputs(const ReplayArgs& a, const std::vector<RunResults>& runs) {
  if (!a.json.empty()) {
    if (runs.size() == 1) {
      write_results_json(a.json, runs.front());
    } else {
      cli::write_merged_json(a.json, runs);
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

/// std::regex compiles and matches by recursion: a --filter of thousands of nested groups
/// overflows the stack. Names are short, so a filter has no need of either.
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

/// Same file (device and inode) as an existing `input`: an output must never overwrite an input.
bool same_file(const std::string& out, const std::string& input) {
  struct stat so {}, si {};
  return ::stat(out.c_str(), &so) == 0 && ::stat(input.c_str(), &si) == 0 &&
         so.st_dev == si.st_dev && so.st_ino == si.st_ino;
}

int replay_main(ReplayArgs a, const std::string& cmdline) {
  if (a.repeat < 1) throw InputError("--repeat must be at least 1");
  const std::vector<std::string> outputs = {a.json, a.junit, a.md, a.html, a.trace};
  validate_run_options(a, outputs);
  std::vector<Scenario> scenarios;
  for (const auto& f : a.scenario_files) {
    ReplayArgs one = a;
    one.scenario = f;
    scenarios.push_back(load(one));
  }
  // An output that is one of the run's inputs would be overwritten after the first strategy
  // (and the children, which read the scenario, would then read results).
  for (const auto& out : outputs) {
    if (out.empty()) continue;
    for (const Scenario& sc : scenarios) {
      for (const std::string& in : {sc.file, sc.model.config_file}) {
        if (!in.empty() && same_file(out, in))
          throw InputError("output '" + out + "': is an input of this run (" + in + ")");
      }
    }
  }
  for (const auto& name : a.strategies) {
    bool found = false;
    for (const auto& s : scenarios)
      for (const auto& st : s.strategies) found = found || st.name == name;
    if (!found) throw InputError(fmt::format("--strategy '{}': in none of the scenarios", name));
  }
  if (!a.filter.empty()) {
    check_filter_size(a.filter);
    try {
      std::regex check(a.filter);
    } catch (const std::regex_error& e) {
      throw InputError(fmt::format("--filter '{}': not a regular expression: {}", a.filter, e.what()));
    }
  }
  // Fault injection (engine_internal.h stall_if_asked): refuse a name no replay announces, and
  // say that it is on, so an injected stall never passes for a real hang.
  if (const char* stall = std::getenv("COLDSTART_STALL_IN_PHASE")) {
    std::vector<std::string> phases = replay_phase_names();
    phases.erase(std::remove(phases.begin(), phases.end(), "steady_request"), phases.end());
    if (std::find(phases.begin(), phases.end(), stall) == phases.end())
      throw InputError(fmt::format("COLDSTART_STALL_IN_PHASE='{}': not a phase a replay stalls in "
                                   "({})", stall, fmt::join(phases, ", ")));
    std::cerr << fmt::format("coldstart: fault injection: COLDSTART_STALL_IN_PHASE={}: every "
                             "strategy stops in {} until the watchdog (--timeout) stops it\n",
                             stall, stall);
  }
  std::vector<Job> jobs;
  for (size_t i = 0; i < scenarios.size(); ++i)
    for (size_t v = 0; v < scenarios[i].variants.size(); ++v)
      for (const auto& st : scenarios[i].strategies)
        if (selected(a, scenarios[i], st)) jobs.push_back({i, static_cast<int>(v), &st});
  if (jobs.empty()) throw InputError("no strategy selected (check --strategy / --filter)");

  // From here on, SIGINT / SIGTERM stop the running strategy's child, keep what finished and end
  // the run with 128 + the signal (isolate::InterruptScope); every temporary directory below is
  // removed on the way out. --no-isolate runs strategies in this process: the default action.
  std::optional<isolate::InterruptScope> interrupts;
  if (!a.no_isolate) interrupts.emplace();
  const auto interrupted = [&] { return interrupts && isolate::interrupt_signal() != 0; };

  // The children replay what was validated: copies of the scenarios and the files they name.
  const cli::RunInputs inputs(scenarios, a.sets,
                              [&](const std::string& path, const std::vector<std::string>& sets) {
                                ReplayArgs one = a;
                                one.scenario = path;
                                one.sets = sets;
                                return load(one);
                              });

  // Compile-only children share one compile memo for this run (JitOptions::compile_memo_dir):
  // removed when the run ends.
  std::optional<paths::ScopedTempDir> memo;
  if (!a.no_compile_memo && a.device != "cuda") {
    memo.emplace("coldstart-memo-");
    a.compile_memo = memo->path;
  }
  // With a persistent --cache-dir, each strategy run starts from the directory as it was when
  // this run began (its own view), and what it compiled is merged back when it ends.
  std::optional<cli::CacheSnapshots> cache_views;
  if (!a.cache_dir.empty()) cache_views.emplace(a.cache_dir);
  std::vector<RunResults> runs(scenarios.size());
  for (size_t i = 0; i < scenarios.size(); ++i) runs[i].scenario = summarize(scenarios[i]);
  const std::string started_at = now_iso8601();
  Progress progress(jobs.size(), isatty(STDERR_FILENO) != 0);
  int harness_errors = 0;
  std::string write_failed;  // the last results write's error, "" when it succeeded
  size_t not_run = 0;        // strategies an interrupt kept from starting
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (interrupted()) {
      not_run = jobs.size() - j;
      break;
    }
    const Job& job = jobs[j];
    const Scenario& s = scenarios[job.scenario];
    const std::string label = (scenarios.size() > 1 ? s.name + ": " : std::string()) +
                              job.strategy->name +
                              (s.variants[job.variant].name.empty()
                                   ? ""
                                   : " [" + s.variants[job.variant].name + "]");
    std::vector<StrategyResult> reps;
    for (int k = 0; k < a.repeat; ++k) {
      if (k > 0 && interrupted()) break;
      const std::string lab = a.repeat > 1 ? fmt::format("{} (run {}/{})", label, k + 1, a.repeat) : label;
      progress.update(j, lab, "");
      ReplayArgs ja = a;
      if (cache_views) ja.cache_dir = cache_views->begin_job();
      reps.push_back(run_job(ja, inputs, s, job,
                             [&](const std::string& phase) { progress.update(j, lab, phase); }));
      if (cache_views) cache_views->end_job(ja.cache_dir);
      if (reps.back().outcome == Outcome::kInterrupted) break;
    }
    StrategyResult r = interrupted_repeats(std::move(reps), a.repeat);
    progress.done(j, label, r);
    if (r.outcome == Outcome::kError && !r.extra.contains("skipped")) ++harness_errors;
    RunResults& run = runs[job.scenario];
    run.results.push_back(std::move(r));
    run.meta = make_meta(run.results, cmdline, started_at);
    run.meta.sets = a.sets;
    run.meta.inputs = inputs.inputs(job.scenario);
    // Written after every strategy, atomically, so results survive a later failure. A write
    // that fails (the directory went away or became read-only) does not stop the run: the
    // results stay in memory and the write is tried again at the end.
    try {
      write_outputs(a, runs);
      write_failed.clear();
    } catch (const Error& e) {
      if (write_failed.empty()) std::cerr << "coldstart: writing the results failed (" << e.what()
                                          << "); continuing, will try again at the end\n";
      write_failed = e.what();
    }
  }
  if (!write_failed.empty()) {
    try {
      write_outputs(a, runs);
      write_failed.clear();
    } catch (const Error& e) {
      write_failed = e.what();
    }
  }
  for (const RunResults& run : runs) {
    if (!run.results.empty()) std::cout << reports::render_table(run, isatty(STDOUT_FILENO) != 0);
  }
  if (!write_failed.empty()) {
    // The table above is what remains of this run: say so, and fail (a harness error).
    std::cerr << "coldstart: error: the results could not be written: " << write_failed << "\n";
    ++harness_errors;
  }
  if (interrupted()) {
    // What finished is in the table and the results; the rules of a partial run are not checked.
    const int sig = isolate::interrupt_signal();
    std::cerr << fmt::format("coldstart: interrupted by {}: {} strategy run(s) not started; "
                             "expect: rules not checked\n",
                             isolate::signal_name(sig), not_run);
    return 128 + sig;
  }
  // The scenarios' own tests: every `expect:` rule against this run's results.
  int unmet = 0;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    if (scenarios[i].expectations.empty() || runs[i].results.empty()) continue;
    const nlohmann::json& m = runs[i].results.front().extra;
    const std::string mode = m.contains("device_mode") && m["device_mode"].is_string()
                                 ? m["device_mode"].get<std::string>()
                                 : std::string("compile-only");
    // With --strategy / --filter only some strategies ran: rules about the others are not
    // failures of this run.
    Scenario checked = scenarios[i];
    std::vector<Expectation> kept;
    size_t other_mode = 0;
    const std::string run_arch = "sm_" + std::to_string(runs[i].meta.sm);
    for (const Expectation& x : checked.expectations) {
      bool ran = x.strategy == "*";
      for (const auto& r : runs[i].results) ran = ran || r.strategy == x.strategy;
      if ((x.mode && *x.mode != mode) || (x.arch && *x.arch != run_arch)) {
        ++other_mode;  // a rule for the other mode or arch does not apply to this run
      } else if (ran) {
        kept.push_back(x);
      }
    }
    checked.expectations = kept;
    const auto lines = check_expectations(checked, mode, runs[i].results, runs[i].meta.sm);
    const std::string not_applied =
        other_mode ? fmt::format("; {} rule(s) for another mode or arch not checked", other_mode) : "";
    if (lines.empty()) {
      std::cout << fmt::format("expectations of {}: {} rule(s) met ({}){}\n", scenarios[i].name,
                               kept.size(), mode, not_applied);
    } else {
      std::cout << fmt::format("expectations of {}: {} unmet ({})\n", scenarios[i].name,
                               lines.size(), mode);
      for (const auto& l : lines) std::cout << "  UNMET " << l << "\n";
      unmet += static_cast<int>(lines.size());
    }
  }
  if (harness_errors > 0) return 1;
  return a.check && unmet > 0 ? 3 : 0;
}

int report_main(const std::vector<std::string>& inputs, const ReplayArgs& a) {
  parse_monitor(a.jit_monitor);
  std::vector<RunResults> runs;
  for (const auto& f : inputs)
    for (auto& r : cli::read_any_results(f)) runs.push_back(std::move(r));
  write_outputs(a, runs);
  for (const RunResults& run : runs) std::cout << reports::render_table(run, isatty(STDOUT_FILENO) != 0);
  return 0;
}

int list_main(std::vector<std::string> scenarios, const std::string& filter) {
  std::optional<std::regex> re;
  if (!filter.empty()) {
    check_filter_size(filter);
    try {
      re.emplace(filter);
    } catch (const std::regex_error& e) {
      throw InputError(fmt::format("--filter '{}': not a regular expression: {}", filter, e.what()));
    }
  }
  auto shown = [&](const std::string& text) { return !re || std::regex_search(text, *re); };
  std::vector<std::string> warmers;
  for (const auto& n : warmer_names())
    if (shown(n)) warmers.push_back("  " + n + "  " + make_warmer(n)->description());
  if (!warmers.empty()) std::cout << "warmers:\n";
  for (const auto& w : warmers) std::cout << w << "\n";
  // What the registries hold: model families, the mixer backends their layers run on, the
  // compile-only targets and the config selectors kernels use.
  std::vector<std::string> lines;
  for (const auto& f : model_families()) {
    std::string archs;
    for (const auto& a : f.architectures) archs += (archs.empty() ? "" : ", ") + a;
    if (shown(f.name) || shown(archs)) lines.push_back("  " + f.name + " [" + archs + "]  " + f.description);
  }
  if (!lines.empty()) std::cout << "model families:\n";
  for (const auto& l : lines) std::cout << l << "\n";
  lines.clear();
  for (const auto& b : mixer_backends()) {
    std::string dtypes;
    for (const auto& d : b.kv_cache_dtypes) dtypes += (dtypes.empty() ? "" : ", ") + d;
    const std::string text = b.kind + "/" + b.name + " (kv_cache_dtype: " +
                             (dtypes.empty() ? std::string("any") : dtypes) + ")";
    if (shown(text)) lines.push_back("  " + text + "  " + b.description);
  }
  if (!lines.empty()) std::cout << "mixer backends:\n";
  for (const auto& l : lines) std::cout << l << "\n";
  lines.clear();
  for (const Target& t : target_profiles()) {
    const std::string text = fmt::format("{}  {}, {}, {} SMs, {} KiB shared memory per block",
                                         t.profile, t.device_name, t.arch, t.sm_count,
                                         t.shared_memory_per_block / 1024);
    if (shown(text)) lines.push_back("  " + text);
  }
  if (!lines.empty()) std::cout << "targets (--target, compile-only mode):\n";
  for (const auto& l : lines) std::cout << l << "\n";
  if (!re) {
    std::cout << "config selectors (recorded with every compile):\n"
                 "  table      vLLM-style tuned JSON (E=..,N=..,device_name=..), nearest batch key\n"
                 "  heuristic  a function of the problem shape and the target\n"
                 "  autotune   Triton semantics: compile + benchmark every candidate on a key's\n"
                 "             first call, keep the fastest (first candidate in compile-only mode)\n"
                 "  default    a documented default when no tuned table matches\n";
  }
  if (scenarios.empty() && paths::is_directory("scenarios")) {
    DIR* d = opendir("scenarios");
    while (d != nullptr) {
      dirent* e = readdir(d);
      if (e == nullptr) break;
      const std::string name = e->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".yaml") == 0)
        scenarios.push_back("scenarios/" + name);
    }
    if (d != nullptr) closedir(d);
    std::sort(scenarios.begin(), scenarios.end());
  }
  for (const auto& f : scenarios) {
    Scenario s = load_scenario(f, {}, replay_rules());
    std::vector<std::string> lines;
    for (const auto& v : s.variants)
      for (const auto& st : s.strategies) {
        if (!shown(s.name) && !shown(st.name) && !shown(s.name + "/" + st.name)) continue;
        std::string ws;
        for (const auto& w : st.warmers) ws += (ws.empty() ? "" : ", ") + w;
        lines.push_back("  " + st.name + (v.name.empty() ? "" : " [" + v.name + "]") + ": [" + ws + "]");
      }
    if (lines.empty()) continue;
    std::cout << "scenario " << s.name << " (" << f << "):\n";
    for (const auto& l : lines) std::cout << l << "\n";
  }
  return 0;
}

void add_common_options(CLI::App* cmd, ReplayArgs& a) {
  cmd->add_option("--device", a.device, "auto | cuda | compile-only")
      ->envname("COLDSTART_DEVICE")->capture_default_str();
  cmd->add_option("--arch", a.arch, "compile target in compile-only mode, e.g. sm_86, sm_90, sm_100")
      ->envname("COLDSTART_ARCH");
  cmd->add_option("--target", a.target,
                  "compile-only target GPU: rtx-a4000, a10, h100, h200, b200 (arch, SM count, "
                  "device name for tuned tables)")
      ->envname("COLDSTART_TARGET");
  cmd->add_option("--sm-count", a.sm_count,
                  "compile-only SM count (with --arch, or replacing the --target profile's)")
      ->envname("COLDSTART_SM_COUNT");
  cmd->add_option("--set", a.sets, "override a scenario key, KEY=VALUE (repeatable)");
  cmd->add_option("--cache-dir", a.cache_dir,
                  "persistent on-disk kernel cache (default: a fresh, cold one per run)")
      ->envname("COLDSTART_CACHE_DIR");
  cmd->add_option("--jit-monitor", a.jit_monitor,
                  "record | warn | error: error turns the first hot-path compile into a crash")
      ->envname("COLDSTART_JIT_MONITOR")->capture_default_str();
  cmd->add_option("--seed", a.seed, "seed of weights and prompts")->capture_default_str();
  cmd->add_flag("-v,--verbose", a.verbose, "print each phase and the children's stderr");
}

void add_report_options(CLI::App* cmd, ReplayArgs& a) {
  cmd->add_option("--junit", a.junit, "write JUnit XML (one test case per scenario and strategy)");
  cmd->add_option("--md", a.md, "write a Markdown summary (for a pull-request comment)");
  cmd->add_option("--html", a.html, "write a self-contained HTML report with charts");
  cmd->add_option("--trace", a.trace, "write a Chrome trace (Perfetto, chrome://tracing)");
}

}  // namespace
}  // namespace coldstart

int main(int argc, char** argv) {
  using namespace coldstart;
  std::string cmdline;
  for (int i = 0; i < argc; ++i) cmdline += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{"coldstart: replays an LLM server's startup and first request against "
               "runtime-compiled CUDA kernels, per warmup strategy"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(COLDSTART_VERSION) + " (" + COLDSTART_GIT_SHA + ")");

  ReplayArgs ra;
  CLI::App* replay = app.add_subcommand("replay", "replay scenarios for each strategy");
  replay->add_option("scenarios", ra.scenario_files, "scenario YAML files")->required();
  add_common_options(replay, ra);
  add_report_options(replay, ra);
  replay->add_option("--strategy", ra.strategies, "run only these strategies (repeatable)");
  replay->add_option("--filter", ra.filter,
                     "run only scenarios/strategies whose name (or scenario/strategy) matches")
      ->envname("COLDSTART_FILTER");
  replay->add_option("--repeat", ra.repeat,
                     "run each strategy N times; keep median, min and max")->capture_default_str();
  replay->add_option("--json", ra.json, "write the results (schema coldstart.replay/1) here");
  replay->add_option("--timeout", ra.timeout_s,
                     "per-strategy watchdog: seconds of wall time per child (0 or unset: the "
                     "scenario's timeout_s)");
  replay->add_flag("--check", ra.check,
                   "exit 3 when a scenario's expect: rules are not met by this run (the rules "
                   "are always checked and printed)");
  replay->add_flag("--no-compile-memo", ra.no_compile_memo,
                   "compile-only mode: compile every key in every strategy (by default a key "
                   "another strategy of this run compiled is reused with its measured compile "
                   "time and marked reused)");
  replay->add_flag("--no-isolate", ra.no_isolate,
                   "run strategies in this process (debugging; a crash ends the run)");

  ReplayArgs ca;
  CLI::App* child = app.add_subcommand("_child", "internal: one strategy, reporting on fd 3");
  child->group("");  // hidden
  child->add_option("scenario", ca.scenario)->required();
  add_common_options(child, ca);
  child->add_option("--strategy", ca.strategy_name)->required();
  child->add_option("--variant-index", ca.variant_index)->required();
  child->add_option("--compile-memo", ca.compile_memo);

  ReplayArgs rep;
  std::vector<std::string> report_inputs;
  CLI::App* report = app.add_subcommand("report", "render results files (single-run or merged)");
  report->add_option("results", report_inputs, "results JSON files")->required();
  add_report_options(report, rep);
  rep.jit_monitor = "record";
  report->add_option("--jit-monitor", rep.jit_monitor,
                     "error: count hot-path compiles as JUnit failures")->capture_default_str();

  std::vector<std::string> list_files;
  std::string list_filter;
  CLI::App* list = app.add_subcommand("list", "list warmers, scenarios and their strategies");
  list->add_option("scenarios", list_files, "scenario files (default: scenarios/*.yaml)");
  list->add_option("--filter", list_filter, "only names matching this regular expression");

  std::string cmp_base, cmp_cur;
  double cmp_pct = 10.0;
  CLI::App* compare = app.add_subcommand("compare", "compare two results files; exit 1 on a regression");
  compare->add_option("baseline", cmp_base, "baseline results file (single-run or merged)")->required();
  compare->add_option("current", cmp_cur, "current results file (single-run or merged)")->required();
  compare->add_option("--max-regression", cmp_pct,
                      "percent a timing may grow (beyond the run-to-run spread) before it fails")
      ->envname("COLDSTART_MAX_REGRESSION")->capture_default_str();
  bool cmp_allow_removed = false;
  compare->add_flag("--allow-removed", cmp_allow_removed,
                    "do not fail when baseline strategy results are missing from the current "
                    "file or were interrupted there");

  std::vector<std::string> merge_in;
  std::string merge_out;
  CLI::App* merge = app.add_subcommand("merge", "fold results files from several machines into one");
  merge->add_option("inputs", merge_in, "results files (single-run or merged)")->required();
  merge->add_option("-o,--output", merge_out, "merged results file to write")->required();

  CLI::App* doctor =
      app.add_subcommand("doctor", "show driver, GPU, versions; check NVRTC, driver load, CUDA graphs");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*replay) return replay_main(ra, cmdline);
    if (*child) return child_main(ca);
    if (*report) return report_main(report_inputs, rep);
    if (*list) return list_main(list_files, list_filter);
    if (*compare) return cli::compare_main(cmp_base, cmp_cur, cmp_pct, cmp_allow_removed);
    if (*merge) return cli::merge_main(merge_in, merge_out);
    if (*doctor) return cli::doctor_main();
  } catch (const InputError& e) {
    std::cerr << "coldstart: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "coldstart: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
