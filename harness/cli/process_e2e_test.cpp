// End to end, the process side of a run: signals, the watchdog, the child that dies with its
// parent, a closed stdout, inputs edited mid-run, the persistent cache directory and the
// phases the child announces.
#include "harness/cli/e2e_fixture.h"

namespace coldstart {
namespace {

using namespace e2e;  // NOLINT: the fixture and its helpers

/// With a persistent --cache-dir every strategy starts from the directory as the run found it:
/// the warmer compiles the key `none` compiled on its hot path again instead of loading it; the
/// next run loads everything the first one compiled.
TEST_F(ReplayE2E, PersistentCacheDirEveryStrategyStartsFromTheRunStartState) {
  const std::string cache = paths::join(dir_, "kernels");
  paths::make_dirs(cache);
  const std::string args = "--strategy none --strategy tq-decode-warmup "
                           "--set cudagraph_mode=piecewise --cache-dir " + cache;
  auto first = replay("scenarios/qwen3-8b-turboquant.yaml", args);
  ASSERT_EQ(first.size(), 2u);
  const StrategyResult& none = first.at("none []");
  const StrategyResult& warm = first.at("tq-decode-warmup []");
  ASSERT_EQ(none.hot_path_compiles.size(), 1u);
  bool compiled_again = false;
  for (const auto& c : warm.startup_compile_list) {
    EXPECT_EQ(c.source, "nvrtc") << c.kernel << ": loaded what another strategy compiled";
    compiled_again |= c.key == none.hot_path_compiles[0].key;
  }
  EXPECT_TRUE(compiled_again);
  int entries = 0;
  if (DIR* d = opendir(cache.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      EXPECT_NE(n[0], '.') << "the run's work directory was left behind: " << n;
      entries += n.size() > 6 && n.compare(n.size() - 6, 6, ".cubin") == 0;
    }
    closedir(d);
  }
  EXPECT_EQ(entries, static_cast<int>(warm.startup_compile_list.size()));
  auto second = replay("scenarios/qwen3-8b-turboquant.yaml", args);
  for (const auto& [name, r] : second) {
    for (const auto& c : r.startup_compile_list) EXPECT_EQ(c.source, "disk") << name << c.kernel;
    for (const auto& c : r.hot_path_compiles) EXPECT_EQ(c.source, "disk") << name << c.kernel;
  }
  // Damaged entries are recompiled and replaced in the cache directory itself, not only in the
  // strategy's private view (every later run recompiled and warned again), and a symbolic link
  // planted in the cache is never followed by the merge.
  std::vector<std::string> cubins;
  if (DIR* d = opendir(cache.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 6 && n.compare(n.size() - 6, 6, ".cubin") == 0) cubins.push_back(n);
    }
    closedir(d);
  }
  ASSERT_FALSE(cubins.empty());
  for (const std::string& n : cubins) {  // a flipped byte in each cubin, in place (same inode)
    const std::string p = paths::join(cache, n);
    std::string bytes = read_text(p);
    ASSERT_FALSE(bytes.empty());
    bytes.back() = static_cast<char>(bytes.back() ^ 0x5a);
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  }
  const std::string elsewhere = paths::join(dir_, "elsewhere");
  paths::make_dirs(elsewhere);
  for (const char* planted : {"autotune", "sub"})
    if (!paths::exists(paths::join(cache, planted)))
      ASSERT_EQ(::symlink(elsewhere.c_str(), paths::join(cache, planted).c_str()), 0);
  const std::string one = "--strategy none --set cudagraph_mode=piecewise --cache-dir " + cache;
  auto third = replay("scenarios/qwen3-8b-turboquant.yaml", one);
  ASSERT_EQ(third.size(), 1u);
  const nlohmann::json& warnings = third.begin()->second.extra.value("jit_warnings", nlohmann::json::array());
  EXPECT_NE(warnings.dump().find("is damaged"), std::string::npos) << warnings.dump();
  auto fourth = replay("scenarios/qwen3-8b-turboquant.yaml", one);
  for (const auto& [name, r] : fourth) {
    for (const auto& c : r.startup_compile_list) EXPECT_EQ(c.source, "disk") << name << c.kernel;
    for (const auto& c : r.hot_path_compiles) EXPECT_EQ(c.source, "disk") << name << c.kernel;
    EXPECT_FALSE(r.extra.contains("jit_warnings")) << r.extra["jit_warnings"].dump();
  }
  EXPECT_TRUE(paths::directory_entries(elsewhere).value_or(std::vector<std::string>{"?"}).empty())
      << "the merge wrote through a symbolic link in the cache";
}

/// Ctrl-C during a run: what finished stays, the running strategy is `interrupted` in the phase it
/// had reached, its child is stopped, strategies not started are not run, every report accepts
/// the outcome, and the exit status is 130 (issue 10).
TEST_F(ReplayE2E, SigintKeepsWhatFinishedRecordsTheRunningStrategyAndStopsItsChild) {
  const std::string json = paths::join(dir_, "r.json"), out = paths::join(dir_, "out.txt");
  const std::string reports = " --md " + paths::join(dir_, "r.md") + " --html " +
                              paths::join(dir_, "r.html") + " --junit " +
                              paths::join(dir_, "r.xml") + " --trace " +
                              paths::join(dir_, "r.trace");
  const pid_t pid = start_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device "
                                    "compile-only --arch sm_90 -v --json " + json + reports,
                                    out);
  ASSERT_GT(pid, 0);
  // Once the first strategy finished and the second one's child is warming up (its -v log line
  // says so), press Ctrl-C.
  std::vector<pid_t> kids;
  const bool running = within(600, [&] {
    if (read_text(out).find("tq-decode-warmup [cudagraph_mode=piecewise]:   | kernel_warmup") ==
        std::string::npos)
      return false;
    kids = children_of(pid);
    return !kids.empty();
  });
  if (!running) ::kill(pid, SIGKILL);
  ASSERT_TRUE(running) << read_text(out);
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(wait_status(pid), 130) << read_text(out);
  for (pid_t k : kids) {
    EXPECT_TRUE(within(1.5, [&] { return gone(k); })) << "child " << k << " left running";
  }

  const auto results = results_so_far(json);
  ASSERT_GE(results.size(), 2u);
  EXPECT_LT(results.size(), 10u) << "strategies not yet started are not run";
  for (size_t i = 0; i + 1 < results.size(); ++i)
    EXPECT_NE(results[i].outcome, Outcome::kInterrupted);
  const StrategyResult& last = results.back();
  EXPECT_EQ(last.outcome, Outcome::kInterrupted) << last.error.value_or("");
  EXPECT_EQ(last.error.value_or("").rfind("interrupted by SIGINT (the run was stopped)", 0), 0u)
      << last.error.value_or("");
  EXPECT_FALSE(last.failed_phase.value_or("").empty()) << "the phase it had reached";
  const std::string text = read_text(out);
  EXPECT_NE(text.find("interrupted @ " + last.failed_phase.value_or("?")), std::string::npos)
      << text;
  EXPECT_NE(text.find("coldstart: interrupted by SIGINT"), std::string::npos) << text;
  // Every report accepts the outcome, and the results read back and compare.
  EXPECT_NE(read_text(paths::join(dir_, "r.md")).find("interrupted"), std::string::npos);
  EXPECT_NE(read_text(paths::join(dir_, "r.html")).find("badge interrupted"), std::string::npos);
  EXPECT_NE(read_text(paths::join(dir_, "r.xml")).find("<skipped message=\"interrupted: "),
            std::string::npos);
  EXPECT_NE(read_text(paths::join(dir_, "r.trace")).find("\"interrupted"), std::string::npos);
  EXPECT_EQ(run_coldstart("report " + json + " --md " + paths::join(dir_, "again.md")), 0);
  const std::string cmp = paths::join(dir_, "cmp.txt");
  EXPECT_EQ(run_coldstart("compare " + json + " " + json, cmp), 1) << read_text(cmp);
  EXPECT_NE(read_text(cmp).find("interrupted in the current file"), std::string::npos)
      << read_text(cmp);
  EXPECT_EQ(run_coldstart("compare " + json + " " + json + " --allow-removed", cmp), 0)
      << read_text(cmp);
}

/// --jobs 2 (compile-only): two strategies run side by side, each in its own child. Ctrl-C stops
/// both (each recorded as interrupted, in job order), starts no other, leaves no child, and the
/// run exits 130; a GPU run, a run in this process and 0 jobs are refused before anything runs.
TEST_F(ReplayE2E, JobsRunStrategiesSideBySideAndSigintStopsEveryChild) {
  const std::string json = paths::join(dir_, "r.json"), out = paths::join(dir_, "out.txt");
  // Every strategy stalls in load_weights (fault injection) until it is stopped.
  const pid_t pid = start_coldstart("replay scenarios/qwen3-8b-bf16.yaml --device compile-only "
                                    "--arch sm_90 --jobs 2 --json " + json,
                                    out, "COLDSTART_STALL_IN_PHASE=load_weights");
  ASSERT_GT(pid, 0);
  std::vector<pid_t> kids;
  const bool both = within(300, [&] { return (kids = children_of(pid)).size() == 2; });
  if (!both) ::kill(pid, SIGKILL);
  ASSERT_TRUE(both) << read_text(out);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(wait_status(pid), 130) << read_text(out);
  for (pid_t k : kids) EXPECT_TRUE(within(3, [&] { return gone(k); })) << "child " << k << " left running";
  const auto results = results_so_far(json);
  ASSERT_EQ(results.size(), 2u) << read_text(out);
  EXPECT_EQ(results[0].strategy, "none");
  EXPECT_EQ(results[1].strategy, "aot-prefill-warmup");
  for (const StrategyResult& r : results) EXPECT_EQ(r.outcome, Outcome::kInterrupted) << r.strategy;
  EXPECT_NE(read_text(out).find("strategy run(s) not started"), std::string::npos) << read_text(out);

  for (const char* bad : {"--device cuda --jobs 2", "--device compile-only --jobs 0",
                          "--device compile-only --jobs 2 --no-isolate"}) {
    EXPECT_EQ(run_coldstart(std::string("replay scenarios/qwen3-8b-bf16.yaml ") + bad, out), 2) << bad;
    EXPECT_NE(read_text(out).find("--jobs"), std::string::npos) << bad << ": " << read_text(out);
  }
}

/// SIGTERM (a CI job cancelled) while the first strategy runs: it is recorded as interrupted,
/// nothing else runs, exit status 143, and no temporary directory is left.
TEST_F(ReplayE2E, SigtermInTheFirstStrategyExits143) {
  // SIGHUP (the terminal or ssh session closed) stops the run the same way (issue 26).
  for (const auto& [sig, name] : {std::pair<int, std::string>{SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"}}) {
    const std::string json = paths::join(dir_, name + ".json"), out = paths::join(dir_, name + ".txt");
    const std::string tmp = paths::join(dir_, "tmp-" + name);
    paths::make_dirs(tmp);
    const pid_t pid = start_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device "
                                      "compile-only --arch sm_90 --json " + json,
                                      out, "TMPDIR=" + tmp);
    ASSERT_GT(pid, 0);
    std::vector<pid_t> kids;
    ASSERT_TRUE(within(120, [&] { return !(kids = children_of(pid)).empty(); })) << read_text(out);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // into its first phases
    ASSERT_EQ(::kill(pid, sig), 0);
    EXPECT_EQ(wait_status(pid), 128 + sig) << name << ": " << read_text(out);
    for (pid_t k : kids) {
      EXPECT_TRUE(within(1.5, [&] { return gone(k); })) << "child " << k << " left running";
    }
    const auto results = results_so_far(json);
    ASSERT_EQ(results.size(), 1u) << read_text(out);
    EXPECT_EQ(results[0].outcome, Outcome::kInterrupted);
    EXPECT_EQ(results[0].error.value_or("").rfind("interrupted by " + name, 0), 0u) << name;
    // The device is named even when the child had not reported it yet (the parent knows a
    // compile-only target without a GPU).
    EXPECT_EQ(cli::read_any_results(json).at(0).meta.device_name, "compile-only: NVIDIA H200") << name;
    const std::vector<std::string> left = names_in(tmp);
    EXPECT_TRUE(left.empty()) << name << ": left in TMPDIR: " << left.front();
  }
}

/// A child never outlives its parent, even one killed by SIGKILL (issue 26: it ran on).
TEST_F(ReplayE2E, TheChildDiesWithAParentKilledBySigkill) {
  const std::string out = paths::join(dir_, "out.txt");
  // The child stalls in kernel_warmup for ever: only its parent's death can end it.
  const pid_t pid = start_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device "
                                    "compile-only --arch sm_90 --strategy tq-decode-warmup",
                                    out, "COLDSTART_STALL_IN_PHASE=load_weights");
  ASSERT_GT(pid, 0);
  std::vector<pid_t> kids;
  ASSERT_TRUE(within(120, [&] { return !(kids = children_of(pid)).empty(); })) << read_text(out);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // well into the stall
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_EQ(wait_status(pid), 256 + SIGKILL);
  for (pid_t k : kids) {
    const bool ended = within(5.0, [&] { return gone(k); });  // slack for a loaded 2-core CI
    EXPECT_TRUE(ended) << "child " << k << " outlived its parent";
    if (!ended) ::kill(k, SIGKILL);
  }
}

/// `coldstart replay ... | true`: the reader is gone before the table is printed; the run still
/// writes its results and exits with its verdict instead of dying by SIGPIPE (issue 26).
TEST_F(ReplayE2E, AClosedStdoutCostsNeitherTheResultsNorTheExitStatus) {
  const std::string json = paths::join(dir_, "r.json"), rc = paths::join(dir_, "rc");
  const std::string cmd = "cd '" + source_dir() + "' && { '" CS_COLDSTART_BIN
                          "' replay scenarios/qwen3-8b-turboquant.yaml --device compile-only "
                          "--arch sm_90 --strategy none --check --json " + json +
                          " 2>/dev/null; echo $? >'" + rc + "'; } | true";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(read_text(rc), "0\n") << "128 + 13 is SIGPIPE";
  EXPECT_EQ(results_so_far(json).size(), 2u);  // none in both variants
}

/// A watchdog timeout stops a child that cannot clean up after itself: its cold kernel cache
/// (a directory under its TMPDIR) must not outlive it, nor anything else of the run's. The child
/// stalls in graph_capture (COLDSTART_STALL_IN_PHASE), after its warmer compiled into that
/// cache, so the kill comes at the same point on a fast machine and on a loaded one (a fixed
/// 4-second limit on a strategy that compiles for long stopped a GPU build still in init under
/// `ctest -j16`).
TEST_F(ReplayE2E, WatchdogTimeoutLeavesNoTemporaryDirectory) {
  const std::string json = paths::join(dir_, "r.json"), out = paths::join(dir_, "out.txt");
  const std::string tmp = paths::join(dir_, "tmp");
  paths::make_dirs(tmp);
  const pid_t pid = start_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device "
                                    "compile-only --strategy tq-decode-warmup --set "
                                    "cudagraph_mode=piecewise "
                                    "--timeout 15 --json " + json,
                                    out, "TMPDIR=" + tmp + " COLDSTART_STALL_IN_PHASE=graph_capture");
  ASSERT_GT(pid, 0);
  // Its only strategy timed out: nothing was measured, which CI must notice (exit 1).
  EXPECT_EQ(wait_status(pid), 1) << read_text(out);
  EXPECT_NE(read_text(out).find("every strategy run (1) timed out: nothing was measured"),
            std::string::npos)
      << read_text(out);
  const auto results = results_so_far(json);
  ASSERT_EQ(results.size(), 1u) << read_text(out);
  EXPECT_EQ(results[0].outcome, Outcome::kTimeout) << read_text(out);
  EXPECT_EQ(results[0].failed_phase.value_or("-"), "graph_capture") << read_text(out);
  EXPECT_FALSE(results[0].startup_compile_list.empty())
      << "nothing was compiled into the cache before the kill";
  const std::vector<std::string> left = names_in(tmp);
  EXPECT_TRUE(left.empty()) << "left in TMPDIR: " << left.front();
}

/// The scenario file and its config.json edited while the run goes on: every strategy replays
/// what was validated when the run started, and meta.inputs records those files' checksums.
TEST_F(ReplayE2E, InputsEditedDuringTheRunChangeNoLaterStrategy) {
  const std::string sdir = paths::join(dir_, "s/scenarios");
  const std::string cdir = paths::join(dir_, "s/fixtures/hf-configs");
  paths::make_dirs(sdir);
  paths::make_dirs(cdir);
  const std::string scenario = paths::join(sdir, "edited.yaml");
  const std::string config = paths::join(cdir, "qwen3-8b.json");
  const std::string scenario_text = read_text(source_dir() + "/scenarios/qwen3-8b-turboquant.yaml");
  const std::string config_text = read_text(source_dir() + "/fixtures/hf-configs/qwen3-8b.json");
  std::ofstream(scenario) << scenario_text;
  std::ofstream(config) << config_text;
  const std::string json = paths::join(dir_, "r.json"), out = paths::join(dir_, "out.txt");
  const pid_t pid = start_coldstart("replay " + scenario + " --device compile-only --arch sm_90 "
                                    "--strategy none --strategy tq-decode-warmup "
                                    "--set cudagraph_mode=full_and_piecewise --json " + json,
                                    out);
  ASSERT_GT(pid, 0);
  // The first strategy's child is running: edit both files before the second one starts.
  ASSERT_TRUE(within(120, [&] { return !children_of(pid).empty(); })) << read_text(out);
  std::string edited = scenario_text;
  for (size_t at; (at = edited.find("prompt_tokens: 512")) != std::string::npos;)
    edited.replace(at, 18, "prompt_tokens: 384");
  ASSERT_NE(edited, scenario_text);
  std::ofstream(scenario, std::ios::trunc) << edited;
  std::string cfg = config_text;
  const size_t layers = cfg.find("\"num_hidden_layers\": 36");
  ASSERT_NE(layers, std::string::npos);
  cfg.replace(layers, 23, "\"num_hidden_layers\": 2");
  std::ofstream(config, std::ios::trunc) << cfg;
  EXPECT_EQ(wait_status(pid), 0) << read_text(out);

  const auto runs = cli::read_any_results(json);
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_EQ(runs[0].results.size(), 2u);
  for (const StrategyResult& r : runs[0].results) {
    EXPECT_EQ(r.outcome, Outcome::kOk) << r.strategy << ": " << r.error.value_or("");
    const nlohmann::json& schedule = r.extra.at("schedule");
    ASSERT_FALSE(schedule.empty());
    EXPECT_EQ(schedule[0].at("num_tokens").get<int>(), 512)
        << r.strategy << " read the edited scenario";
    EXPECT_EQ(r.extra.at("kv_cache_plan"), runs[0].results[0].extra.at("kv_cache_plan"))
        << r.strategy << " read the edited config.json";
  }
  // meta.inputs: the files as validated, not as edited.
  const auto& inputs = runs[0].meta.inputs;
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(inputs[0].role, "scenario");
  EXPECT_EQ(inputs[0].path, scenario);
  EXPECT_EQ(inputs[0].bytes, static_cast<long long>(scenario_text.size()));
  EXPECT_EQ(inputs[0].fnv1a64, checksum::fnv1a64_hex(scenario_text));
  EXPECT_EQ(inputs[1].role, "config");
  EXPECT_EQ(inputs[1].path, config);
  EXPECT_EQ(inputs[1].fnv1a64, checksum::fnv1a64_hex(config_text));
  EXPECT_EQ(read_text(json).find("\"fnv1a64\": \"" + checksum::fnv1a64_hex(edited)),
            std::string::npos);
}

/// A child announces every phase it enters, the decode steps too, so a child killed by a signal
/// there (which reports nothing itself) is a crash in `decode`, not in the phase before.
TEST_F(ReplayE2E, ChildAnnouncesEveryPhaseItEnters) {
  const std::string lines = paths::join(dir_, "lines.txt"), out = paths::join(dir_, "out.txt");
  const std::string job = paths::join(dir_, "job.json");
  // The job a replay would hand this strategy's child, then the child alone.
  const std::string cmd = "cd '" + source_dir() + "' && '" CS_COLDSTART_BIN
                          "' _job scenarios/qwen3-8b-turboquant.yaml --strategy none "
                          "--variant-index 1 --device compile-only --arch sm_90 >'" + job +
                          "' 2>'" + out + "' && COLDSTART_RESULT_FD=3 '" CS_COLDSTART_BIN
                          "' _child --job '" + job + "' 3>'" + lines + "' >'" + out + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(out);
  // The first request's decode steps are announced before they run: a snapshot says "decode"
  // while its phase list has no decode entry of request 0 yet (the wave's last snapshot, sent
  // after the steps, does not count).
  bool first_decode_seen = false, decode_announced = false;
  std::istringstream in(read_text(lines));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("final").get<bool>() || !j.at("current_phase").is_string()) continue;
    const std::string p = j.at("current_phase").get<std::string>();
    first_decode_seen |= p == "first_decode";
    bool timed = false;
    for (const auto& ph : j.at("phases"))
      timed |= ph.at("name") == "decode" && ph.at("request") == 0;
    decode_announced |= first_decode_seen && p == "decode" && !timed;
  }
  EXPECT_TRUE(first_decode_seen);
  EXPECT_TRUE(decode_announced) << "no snapshot announced the decode steps before they ran";
}

}  // namespace
}  // namespace coldstart
