// `coldstart _child --job FILE`: one (variant, strategy) in this process, reporting snapshots and
// its result to the parent on the result channel; also what --no-isolate runs; and `_job`, which
// prints the job the parent would write (replay_options.h, child_job.h).
#include <execinfo.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "harness/cli/child_job.h"
#include "harness/cli/ranks_run.h"
#include "harness/dist/ranks.engine_keys.h"
#include "harness/cli/replay_options.h"
#include "harness/cli/run_inputs.h"
#include "harness/replay/engine_keys.h"
#include "harness/isolate/isolate.h"
#include "harness/engine/engine.h"

namespace coldstart::cli {

StrategyResult run_in_process(const ChildJob& job,
                              std::function<void(const StrategyResult&, const std::string&)> on_snapshot) {
  if (replays_all_ranks(job.scenario.engine))
    return job.rank == 0 ? run_all_ranks(job, std::move(on_snapshot))
                         : run_one_rank(job, std::move(on_snapshot));
  return run_engine(job, std::move(on_snapshot), nullptr);
}

StrategyResult run_engine(const ChildJob& job, SnapshotFn on_snapshot, dist::RankGroup* group) {
  const Scenario& s = job.scenario;
  const std::string& variant = s.variants.at(0).name;
  EngineOptions o;
  o.device = select_device(job.device, job.arch, job.target, job.sm_count);
  if (!s.archs.empty() &&
      std::find(s.archs.begin(), s.archs.end(), o.device.arch()) == s.archs.end()) {
    // The scenario excludes this device: nothing runs; the result says why (JUnit: skipped).
    StrategyResult r;
    r.strategy = job.strategy.name;
    r.variant = variant;
    r.warmers = job.strategy.warmers;
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
  o.jit.cache_dir = job.cache_dir;
  o.jit.compile_memo_dir = job.compile_memo;
  o.jit.monitor = parse_monitor(job.jit_monitor);
  o.seed = job.seed;
  o.host_split = job.host_split;
  o.run_stale_graph_replays = job.graph_replay_stale == "run";
  o.envelope = job.envelope;
  o.on_snapshot = std::move(on_snapshot);
  o.ranks = group;
  if (job.verbose) o.on_log = [](const std::string& l) { std::cerr << "  | " << l << "\n"; };
  Engine engine(s, job.strategy, variant, o);
  return engine.run();
}

ChildJob make_child_job(const ReplayArgs& a, const Scenario& variant_scenario,
                        const StrategySpec& strategy) {
  ChildJob job;
  job.scenario = variant_scenario;
  job.strategy = strategy;
  job.device = a.device;
  job.arch = a.arch;
  job.target = a.target;
  job.sm_count = a.sm_count;
  job.cache_dir = a.cache_dir;
  job.compile_memo = a.compile_memo;
  job.jit_monitor = a.jit_monitor;
  job.seed = a.seed;
  job.verbose = a.verbose;
  job.host_split = a.host_split;
  job.graph_replay_stale = a.graph_replay_stale;
  job.envelope = a.envelope;
  return job;
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

int child_main(const std::string& job_file) {
  // A child never outlives the `coldstart replay` that started it, even one killed by SIGKILL.
  isolate::die_with_parent();
  std::signal(SIGPIPE, SIG_IGN);
  install_crash_backtrace();
  // Without the channel nothing the child does reaches anyone: refuse before running.
  const auto channel = isolate::ResultChannel::from_env();
  if (!channel.active())
    throw InputError("_child: no result channel (COLDSTART_RESULT_FD must name an open file "
                     "descriptor, e.g. COLDSTART_RESULT_FD=3 ... 3>lines.txt)");
  const ChildJob job = read_child_job(job_file);
  // The phase of the engine's last snapshot (it sends one as it ends) goes with the final result:
  // empty after a complete run, the failing phase after a caught error.
  std::string last_phase;
  auto send = [&](const StrategyResult& r, bool final) {
    isolate::send_snapshot(channel, r,
                           last_phase.empty() ? std::nullopt : std::optional<std::string>(last_phase),
                           final);
  };
  StrategyResult r = run_in_process(job, [&](const StrategyResult& snap, const std::string& phase) {
    last_phase = phase;
    send(snap, false);
  });
  send(r, true);
  return 0;
}

int job_main(ReplayArgs a) {
  validate_run_options(a);
  // As replay hands it: the compile memo the environment names (replay makes a private one
  // otherwise, which cannot outlive this command).
  const std::string memo = shared_compile_memo_dir();
  if (a.compile_memo.empty() && !memo.empty() && a.device != "cuda") a.compile_memo = memo;
  const int variant_index = a.variant_index;
  const Scenario s = load(a);
  const StrategySpec* strategy = nullptr;
  for (const auto& st : s.strategies)
    if (st.name == a.strategy_name) strategy = &st;
  if (strategy == nullptr)
    throw InputError(fmt::format("{}: no strategy '{}'", a.scenario, a.strategy_name));
  if (variant_index < 0 || static_cast<size_t>(variant_index) >= s.variants.size())
    throw InputError(fmt::format("{}: --variant-index {}: the scenario has {} variant(s)",
                                 a.scenario, variant_index, s.variants.size()));
  Scenario v = apply_variant(s, s.variants[variant_index]);
  // Directory keys as absolute paths: the job may be run from another directory.
  rewrite_directory_keys(v, absolute_path);
  std::cout << nlohmann::json(make_child_job(a, v, *strategy)).dump(2) << "\n";
  return 0;
}

}  // namespace coldstart::cli
