// `coldstart _child`: one (variant, strategy) in this process, reporting snapshots and its
// result to the parent on the result channel; also what --no-isolate runs (replay_options.h).
#include <execinfo.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <iostream>

#include "harness/cli/replay_options.h"
#include "harness/isolate/isolate.h"
#include "harness/engine/engine.h"

namespace coldstart::cli {

/// Runs one (variant, strategy) in this process. Used by the child and by --no-isolate.
StrategyResult run_in_process(const ReplayArgs& a, const Scenario& base, int variant_index,
                              const StrategySpec& strategy,
                              std::function<void(const StrategyResult&, const std::string&)> on_snapshot) {
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
    r.outcome = Outcome::kSkipped;
    std::string list;
    for (const auto& x : s.archs) list += (list.empty() ? "" : ", ") + x;
    r.skipped = fmt::format("{} runs on [{}]; this device is {} ({})", s.name, list,
                            o.device.arch(), o.device.name);
    r.error = r.skipped;
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

namespace {

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

}  // namespace

int child_main(const ReplayArgs& a) {
  std::signal(SIGPIPE, SIG_IGN);
  install_crash_backtrace();
  const Scenario s = load(a);
  const StrategySpec* strategy = nullptr;
  for (const auto& st : s.strategies)
    if (st.name == a.strategy_name) strategy = &st;
  if (strategy == nullptr) throw InputError("no strategy '" + a.strategy_name + "'");
  const auto channel = isolate::ResultChannel::from_env();
  // The phase of the engine's last snapshot (it sends one as it ends) goes with the final result:
  // empty after a complete run, the failing phase after a caught error.
  std::string last_phase;
  auto send = [&](const StrategyResult& r, bool final) {
    isolate::send_snapshot(channel, r,
                           last_phase.empty() ? std::nullopt : std::optional<std::string>(last_phase),
                           final);
  };
  StrategyResult r = run_in_process(a, s, a.variant_index, *strategy,
                                    [&](const StrategyResult& snap, const std::string& phase) {
                                      last_phase = phase;
                                      send(snap, false);
                                    });
  send(r, true);
  return 0;
}

}  // namespace coldstart::cli
