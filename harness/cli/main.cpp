// The `coldstart` command.
//
//   coldstart replay SCENARIO [--strategy NAME]... [--device auto|cuda|compile-only] [--arch sm_XX]
//                    [--set KEY=VALUE]... [--json FILE] [--cache-dir DIR]
//                    [--jit-monitor record|warn|error] [--timeout S] [--no-isolate] [-v]
//   coldstart list   [SCENARIO...]
//
// The parent process never touches the GPU: it validates the scenario, then starts one child per
// (variant, strategy) (`coldstart _child ...`, the same binary), collects what each child
// reports (harness/isolate), and renders the results. Exit status: 0 when every strategy ran
// (a reproduced crash or timeout is a result), 1 when the harness failed for some strategy
// (outcome "error"), 2 on bad input.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <execinfo.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <ctime>
#include <iostream>

#include "harness/common/paths.h"
#include "harness/isolate/isolate.h"
#include "harness/jit/jit.h"
#include "harness/replay/engine.h"
#include "harness/replay/result.h"
#include "harness/replay/scenario.h"
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
  std::string scenario;
  std::vector<std::string> strategies;
  std::string device = "auto";
  std::string arch;
  std::vector<std::string> sets;
  std::string json;
  std::string cache_dir;
  std::string jit_monitor = "record";
  double timeout_s = 0;
  bool no_isolate = false;
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

Scenario load(const ReplayArgs& a) {
  Scenario s = load_scenario(a.scenario, a.sets);
  for (const auto& st : s.strategies) {
    for (const auto& w : st.warmers) {
      if (!warmer_exists(w)) {
        std::string known;
        for (const auto& n : warmer_names()) known += (known.empty() ? "" : ", ") + n;
        throw InputError(fmt::format("{}: strategy '{}': unknown warmer '{}' (known: {})",
                                     a.scenario, st.name, w, known));
      }
    }
  }
  return s;
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
                {"cudagraph_capture_sizes", e.cudagraph_capture_sizes}};
  nlohmann::json req = nlohmann::json::array();
  for (const auto& r : s.requests)
    req.push_back({{"prompt_tokens", r.prompt_tokens}, {"decode_steps", r.decode_steps}});
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
  o.device = select_device(a.device, a.arch);
  o.jit.arch = o.device.arch();
  o.jit.cache_dir = a.cache_dir;
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

int replay_main(const ReplayArgs& a, const std::string& cmdline) {
  const Scenario s = load(a);
  for (const auto& name : a.strategies) {
    bool found = false;
    for (const auto& st : s.strategies) found = found || st.name == name;
    if (!found) throw InputError(fmt::format("--strategy '{}': not in {}", name, a.scenario));
  }
  std::vector<std::pair<int, const StrategySpec*>> jobs;
  for (size_t v = 0; v < s.variants.size(); ++v)
    for (const auto& st : s.strategies)
      if (a.strategies.empty() ||
          std::find(a.strategies.begin(), a.strategies.end(), st.name) != a.strategies.end())
        jobs.emplace_back(static_cast<int>(v), &st);

  RunResults run;
  run.scenario = summarize(s);
  const bool tty = isatty(STDERR_FILENO);
  const std::string started_at = now_iso8601();
  const auto t_start = std::chrono::steady_clock::now();
  int harness_errors = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const int v = jobs[j].first;
    const StrategySpec& st = *jobs[j].second;
    const std::string label =
        st.name + (s.variants[v].name.empty() ? "" : " [" + s.variants[v].name + "]");
    std::cerr << fmt::format("[{}/{}] {} ...", j + 1, jobs.size(), label) << (tty ? "" : "\n")
              << std::flush;
    StrategyResult r;
    if (a.no_isolate) {
      r = run_in_process(a, s, v, st, {});
    } else {
      isolate::ChildSpec spec;
      spec.argv = {self_exe(), "_child", a.scenario, "--strategy", st.name, "--variant-index",
                   std::to_string(v), "--device", a.device, "--jit-monitor", a.jit_monitor,
                   "--seed", std::to_string(a.seed)};
      if (!a.arch.empty()) spec.argv.insert(spec.argv.end(), {"--arch", a.arch});
      if (!a.cache_dir.empty()) spec.argv.insert(spec.argv.end(), {"--cache-dir", a.cache_dir});
      if (a.verbose) spec.argv.push_back("-v");
      for (const auto& kv : a.sets) spec.argv.insert(spec.argv.end(), {"--set", kv});
      spec.timeout_s = a.timeout_s > 0 ? a.timeout_s : s.timeout_s;
      StrategyResult fallback;
      fallback.strategy = st.name;
      fallback.variant = s.variants[v].name;
      fallback.warmers = st.warmers;
      auto on_err = [&](const std::string& line) {
        if (a.verbose) std::cerr << "  " << line << "\n";
      };
      isolate::ChildExit ex = isolate::run_child(spec, {}, on_err);
      r = isolate::classify(ex, isolate::last_snapshot(ex.messages, fallback));
    }
    if (r.outcome == Outcome::kError) ++harness_errors;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::cerr << (tty ? "\r" : "")
              << fmt::format("[{}/{}] {}: {}{} ({:.1f} s elapsed)\n", j + 1, jobs.size(), label,
                             outcome_name(r.outcome),
                             r.failed_phase ? " in " + *r.failed_phase : std::string(), elapsed);
    run.results.push_back(std::move(r));
    run.meta = make_meta(run.results, cmdline, started_at);
    // Written after every strategy, atomically, so results survive a later failure.
    if (!a.json.empty()) write_results_json(a.json, run);
  }
  std::cout << reports::render_table(run, isatty(STDOUT_FILENO) != 0);
  return harness_errors > 0 ? 1 : 0;
}

int list_main(const std::vector<std::string>& scenarios) {
  std::cout << "warmers:\n";
  for (const auto& n : warmer_names()) std::cout << "  " << n << "  " << make_warmer(n)->description() << "\n";
  for (const auto& f : scenarios) {
    Scenario s = load_scenario(f);
    std::cout << "scenario " << s.name << " (" << f << "):\n";
    for (const auto& v : s.variants)
      for (const auto& st : s.strategies) {
        std::string ws;
        for (const auto& w : st.warmers) ws += (ws.empty() ? "" : ", ") + w;
        std::cout << "  " << st.name << (v.name.empty() ? "" : " [" + v.name + "]") << ": ["
                  << ws << "]\n";
      }
  }
  return 0;
}

void add_replay_options(CLI::App* cmd, ReplayArgs& a) {
  cmd->add_option("scenario", a.scenario, "scenario YAML file")->required();
  cmd->add_option("--device", a.device, "auto | cuda | compile-only")
      ->envname("COLDSTART_DEVICE")->capture_default_str();
  cmd->add_option("--arch", a.arch, "compile target in compile-only mode, e.g. sm_86, sm_90, sm_100")
      ->envname("COLDSTART_ARCH");
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
  CLI::App* replay = app.add_subcommand("replay", "replay a scenario for each strategy");
  add_replay_options(replay, ra);
  replay->add_option("--strategy", ra.strategies, "run only these strategies (repeatable)");
  replay->add_option("--json", ra.json, "write the results (schema coldstart.replay/1) here");
  replay->add_option("--timeout", ra.timeout_s, "per-strategy watchdog, seconds (default: the scenario's)");
  replay->add_flag("--no-isolate", ra.no_isolate,
                   "run strategies in this process (debugging; a crash ends the run)");

  ReplayArgs ca;
  CLI::App* child = app.add_subcommand("_child", "internal: one strategy, reporting on fd 3");
  child->group("");  // hidden
  add_replay_options(child, ca);
  child->add_option("--strategy", ca.strategy_name)->required();
  child->add_option("--variant-index", ca.variant_index)->required();

  std::vector<std::string> list_files;
  CLI::App* list = app.add_subcommand("list", "list warmers, and the strategies of scenarios");
  list->add_option("scenarios", list_files, "scenario files");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*replay) return replay_main(ra, cmdline);
    if (*child) return child_main(ca);
    if (*list) return list_main(list_files);
  } catch (const InputError& e) {
    std::cerr << "coldstart: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "coldstart: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
