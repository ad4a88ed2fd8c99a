// Tests of run_child and classify against a real child (isolate_test_child) that ends in each way
// a strategy can: ok, a caught crash, abort, segfault, hang, non-zero exit, spawn failure.
#include "harness/isolate/isolate.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "harness/common/error.h"
#include "harness/common/paths.h"

namespace coldstart::isolate {
namespace {

using How = ChildExit::How;

ChildSpec spec_for(const std::string& mode, double timeout_s = 30,
                   std::vector<std::string> more = {}) {
  ChildSpec s;
  s.argv = {CS_ISOLATE_TEST_CHILD, mode};
  for (auto& a : more) s.argv.push_back(a);
  s.timeout_s = timeout_s;
  return s;
}

StrategyResult fresh() {
  StrategyResult r;
  r.strategy = "fresh";
  return r;
}

StrategyResult classified(const ChildExit& ex) { return classify(ex, last_snapshot(ex.messages, fresh())); }

// The phase a snapshot line announces as running, "" when none (or not a snapshot).
std::string announced_phase(const std::string& line) {
  auto s = parse_snapshot(line);
  return s ? s->current_phase.value_or("") : "";
}

// No child of ours is left, running or zombie.
void expect_no_children() {
  int status = 0;
  errno = 0;
  pid_t r = ::waitpid(-1, &status, WNOHANG);
  EXPECT_TRUE(r == 0 || (r == -1 && errno == ECHILD)) << "waitpid(-1) returned " << r;
}

// True when `pid` is gone or only a zombie (a zombie runs nothing; its new parent reaps it).
bool dead(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

bool dies_within(pid_t pid, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (dead(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return dead(pid);
}

TEST(RunChild, OkChildDeliversSnapshotsInOrderAndExitsZero) {
  std::vector<std::string> seen;
  std::vector<std::string> err_lines;
  ChildExit ex = run_child(
      spec_for("ok"), [&](const std::string& l) { seen.push_back(l); },
      [&](const std::string& l) { err_lines.push_back(l); });
  EXPECT_EQ(ex.how, How::kExited);
  EXPECT_EQ(ex.exit_code, 0);
  EXPECT_EQ(ex.signal, 0);
  EXPECT_EQ(seen, ex.messages);
  ASSERT_EQ(ex.messages.size(), 23u);  // 11 phases x (start, end) + final
  // Snapshots grow monotonically: phase count never goes down.
  size_t prev = 0;
  for (const auto& m : ex.messages) {
    auto s = parse_snapshot(m);
    ASSERT_TRUE(s.has_value()) << m;
    EXPECT_GE(s->result.phases.size(), prev);
    prev = s->result.phases.size();
  }
  ASSERT_EQ(err_lines.size(), 11u);
  EXPECT_EQ(err_lines.front(), "phase init done");
  EXPECT_EQ(err_lines.back(), "phase decode done");
  EXPECT_NE(ex.stderr_tail.find("phase decode done\n"), std::string::npos);

  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kOk);
  EXPECT_FALSE(r.error.has_value());
  EXPECT_FALSE(r.failed_phase.has_value());
  EXPECT_EQ(r.strategy, "test-strategy");
  EXPECT_EQ(r.phases.size(), 11u);
  EXPECT_EQ(r.hot_path_compiles.size(), 1u);
  EXPECT_EQ(r.startup_compiles, 2);
  EXPECT_EQ(r.startup_ms, 42.0);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.signal.has_value());
  EXPECT_GT(r.wall_ms, 0);
  EXPECT_FALSE(r.extra.contains("final"));
  EXPECT_FALSE(r.extra.contains("current_phase"));
  EXPECT_FALSE(r.extra.contains("stderr_tail"));
  expect_no_children();
}

TEST(RunChild, AbortIsACrashInTheRunningPhase) {
  ChildExit ex = run_child(spec_for("abort"));
  EXPECT_EQ(ex.how, How::kSignaled);
  EXPECT_EQ(ex.signal, SIGABRT);
  EXPECT_EQ(ex.signal_name, "SIGABRT");
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kCrash);
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(*r.error,
            "child killed by SIGABRT (signal 6); last stderr line: assertion failed: about to abort");
  EXPECT_EQ(r.failed_phase, "first_decode");
  EXPECT_EQ(r.signal, "SIGABRT");
  EXPECT_FALSE(r.exit_code.has_value());
  // Everything recorded before the crash is kept.
  EXPECT_EQ(r.phases.size(), 9u);
  EXPECT_EQ(r.hot_path_compiles.size(), 1u);
  EXPECT_EQ(r.hot_path_compiles[0].kernel, "tq_store");
  EXPECT_TRUE(r.extra.contains("stderr_tail"));
  expect_no_children();
}

TEST(RunChild, SegfaultIsACrash) {
  ChildSpec s = spec_for("segfault");
  s.env = {{"ASAN_OPTIONS", "handle_segv=0"}};  // under a sanitizer build, let the signal through
  ChildExit ex = run_child(s);
  EXPECT_EQ(ex.how, How::kSignaled);
  EXPECT_EQ(ex.signal, SIGSEGV);
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kCrash);
  EXPECT_EQ(r.error.value_or("").rfind("child killed by SIGSEGV (signal 11)", 0), 0u) << *r.error;
  EXPECT_NE(r.error->find("; last stderr line: "), std::string::npos);
  EXPECT_NE(r.extra.value("stderr_tail", "").find("writing through a null pointer"), std::string::npos);
  EXPECT_EQ(r.failed_phase, "prefill");
  expect_no_children();
}

TEST(RunChild, HangIsStoppedByTheWatchdog) {
  const double timeout = 1.0;
  auto t0 = std::chrono::steady_clock::now();
  ChildExit ex = run_child(spec_for("hang", timeout));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(ex.how, How::kTimedOut);
  EXPECT_EQ(ex.signal, SIGTERM);
  EXPECT_GE(took, timeout);
  EXPECT_LT(took, timeout + 3);
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kTimeout);
  EXPECT_EQ(r.error, "wall-clock limit of 1 s reached (watchdog)");
  EXPECT_EQ(r.failed_phase, "graph_capture");
  EXPECT_EQ(r.phases.size(), 5u);
  expect_no_children();
}

TEST(RunChild, ChildIgnoringSigtermIsKilled) {
  const double timeout = 0.5;
  auto t0 = std::chrono::steady_clock::now();
  ChildExit ex = run_child(spec_for("ignore-term", timeout));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(ex.how, How::kTimedOut);
  EXPECT_EQ(ex.signal, SIGKILL);
  EXPECT_GE(took, timeout + kKillGraceSeconds - 0.05);
  EXPECT_LT(took, timeout + 3);
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kTimeout);
  EXPECT_EQ(r.error.value_or("").rfind("wall-clock limit of 0.5 s reached (watchdog)", 0), 0u);
  EXPECT_EQ(r.failed_phase, "kernel_warmup");
  expect_no_children();
}

// A child killed from outside (here SIGKILL by the test, as an OOM killer or a user would) is a
// crash in the phase its last progress message announced.
TEST(RunChild, ChildKilledFromOutsideGetsThePhaseOfItsLastMessage) {
  ChildExit ex = run_child(spec_for("hang", 30), [](const std::string& line) {
    if (announced_phase(line) == "graph_capture") {
      ::kill(static_cast<pid_t>(parse_snapshot(line)->result.extra.value("pid", 0LL)), SIGKILL);
    }
  });
  EXPECT_EQ(ex.how, How::kSignaled);
  EXPECT_EQ(ex.signal, SIGKILL);
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kCrash);
  EXPECT_EQ(r.error.value_or("").rfind("child killed by SIGKILL (signal 9)", 0), 0u) << *r.error;
  EXPECT_EQ(r.failed_phase, "graph_capture");
  EXPECT_EQ(r.phases.size(), 5u);
  expect_no_children();
}

// SIGINT to the parent under an InterruptScope: the parent survives, the child and everything in
// its group are stopped, and the strategy is `interrupted` in the phase it had reached.
TEST(Interrupt, SigintStopsTheChildAndItsGroupAndKeepsItsPhase) {
  InterruptScope scope;
  EXPECT_EQ(interrupt_signal(), 0);
  auto t0 = std::chrono::steady_clock::now();
  ChildExit ex = run_child(spec_for("grandchild", 60), [](const std::string& line) {
    auto s = parse_snapshot(line);
    if (s && s->result.extra.contains("grandchild_pid")) ::raise(SIGINT);  // as a Ctrl-C would
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(interrupt_signal(), SIGINT);
  EXPECT_EQ(ex.how, How::kInterrupted);
  EXPECT_EQ(ex.interrupt_signal, SIGINT);
  EXPECT_EQ(ex.signal, SIGTERM) << "stopped as the watchdog stops a child";
  EXPECT_LT(took, 10.0);
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kInterrupted);
  EXPECT_EQ(r.error, "interrupted by SIGINT (the run was stopped)");
  EXPECT_EQ(r.failed_phase, "kernel_warmup");
  EXPECT_EQ(r.phases.size(), 4u) << "what the child recorded is kept";
  const long long g = r.extra.value("grandchild_pid", 0LL);
  ASSERT_GT(g, 0);
  EXPECT_TRUE(dies_within(static_cast<pid_t>(g), 2.0)) << "grandchild " << g << " survived";
  expect_no_children();
}

// A child that ignores SIGTERM is killed after the grace period, or at once on a second signal.
TEST(Interrupt, SecondSignalKillsAChildIgnoringSigtermAtOnce) {
  InterruptScope scope;
  auto t0 = std::chrono::steady_clock::now();
  int sent = 0;
  ChildExit ex = run_child(spec_for("ignore-term", 60), [&](const std::string& line) {
    if (announced_phase(line) == "kernel_warmup" && sent++ == 0) {
      ::raise(SIGTERM);
      ::raise(SIGTERM);
    }
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(ex.how, How::kInterrupted);
  EXPECT_EQ(ex.interrupt_signal, SIGTERM);
  EXPECT_EQ(ex.signal, SIGKILL);
  EXPECT_LT(took, kKillGraceSeconds) << "no grace period after the second signal";
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kInterrupted);
  EXPECT_EQ(r.error, "interrupted by SIGTERM (the run was stopped), child killed with SIGKILL");
  EXPECT_EQ(r.failed_phase, "kernel_warmup");
  expect_no_children();
}

// A child that finished before the interrupt reached it keeps its own result.
TEST(Interrupt, AChildThatFinishedFirstKeepsItsVerdict) {
  ChildExit ex;
  ex.how = How::kInterrupted;
  ex.interrupt_signal = SIGINT;
  ex.exit_code = 0;
  StrategyResult s = fresh();
  s.outcome = Outcome::kOk;
  EXPECT_EQ(classify(ex, Snapshot(s, std::nullopt, /*final=*/true)).outcome, Outcome::kOk);
}

// What a child leaves under $TMPDIR when the watchdog stops it (a cold kernel cache, ...) is gone
// with it when the parent gives it a private TMPDIR; without one it stays behind.
TEST(RunChild, PrivateTmpdirIsRemovedAfterTheWatchdogStopsTheChild) {
  const std::string tmp = paths::make_temp_dir("cs-isolate-tmp-");
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  auto left_in_tmp = [&] {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(tmp.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      ::closedir(d);
    }
    return names;
  };
  ChildSpec s = spec_for("tmpdir-hang", 1.0);
  s.private_tmpdir = true;
  ChildExit ex = run_child(s);
  EXPECT_EQ(ex.how, How::kTimedOut);
  StrategyResult r = classified(ex);
  const std::string entry = r.extra.value("tmp_entry", "");
  EXPECT_EQ(entry.rfind(tmp + "/coldstart-child-", 0), 0u) << entry;
  EXPECT_FALSE(paths::exists(entry));
  EXPECT_TRUE(left_in_tmp().empty()) << left_in_tmp().front();

  s.private_tmpdir = false;  // as before: the child's directory outlives it
  ChildExit plain = run_child(s);
  const std::string leaked = classified(plain).extra.value("tmp_entry", "");
  EXPECT_EQ(paths::parent(leaked), tmp);
  EXPECT_TRUE(paths::exists(leaked + "/entry.cubin"));

  if (saved.empty()) ::unsetenv("TMPDIR"); else ::setenv("TMPDIR", saved.c_str(), 1);
  paths::remove_tree(tmp);
  expect_no_children();
}

TEST(RunChild, NonZeroExitWithoutFinalSnapshotIsAnError) {
  ChildExit ex = run_child(spec_for("exit3"));
  EXPECT_EQ(ex.how, How::kExited);
  EXPECT_EQ(ex.exit_code, 3);
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kError);
  EXPECT_EQ(r.error, "child exited with code 3 before sending its final result; "
                     "last stderr line: fatal: out of device memory");
  EXPECT_EQ(r.failed_phase, "kv_cache_alloc");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.extra.value("stderr_tail", "").find("fatal: out of device memory"), std::string::npos);
  expect_no_children();
}

TEST(RunChild, CrashReportedByTheChildKeepsItsText) {
  ChildExit ex = run_child(spec_for("crash-result"));
  EXPECT_EQ(ex.how, How::kExited);
  EXPECT_EQ(ex.exit_code, 0);
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kCrash);
  EXPECT_EQ(r.failed_phase, "first_decode");
  EXPECT_EQ(r.error.value_or("").rfind("Workspace is locked but allocation from", 0), 0u);
  EXPECT_EQ(r.phases.size(), 9u);
  EXPECT_EQ(r.exit_code, 0);
  expect_no_children();
}

TEST(RunChild, LargeOutputOnBothPipesDoesNotDeadlock) {
  const int n = 20000;
  int count = 0;
  std::string last_err;
  ChildExit ex = run_child(
      spec_for("big-output", 60, {std::to_string(n)}), [&](const std::string&) { ++count; },
      [&](const std::string& l) { last_err = l; });
  EXPECT_EQ(ex.how, How::kExited);
  EXPECT_EQ(ex.exit_code, 0);
  ASSERT_EQ(ex.messages.size(), static_cast<size_t>(n + 1));
  EXPECT_EQ(count, n + 1);
  for (int i = 0; i < n; i += 997) {
    auto s = parse_snapshot(ex.messages[i]);
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->result.extra.value("seq", -1), i);
  }
  auto fin = parse_snapshot(ex.messages.back());
  ASSERT_TRUE(fin.has_value());
  EXPECT_EQ(fin->result.extra.value("seq", -1), n);
  EXPECT_EQ(fin->result.extra.value("blob", "").size(), 200000u);
  EXPECT_EQ(last_err, "last stderr line");
  EXPECT_LE(ex.stderr_tail.size(), kStderrTailBytes);
  EXPECT_GT(ex.stderr_tail.size(), kStderrTailBytes / 2);
  EXPECT_EQ(ex.stderr_tail.substr(ex.stderr_tail.size() - 17), "last stderr line\n");
  EXPECT_EQ(ex.stderr_tail.rfind("stderr line ", 0), 0u);  // starts on a line boundary
  EXPECT_EQ(classified(ex).outcome, Outcome::kOk);
  expect_no_children();
}

TEST(RunChild, TimeoutKillsTheWholeProcessGroup) {
  ChildExit ex = run_child(spec_for("grandchild", 1.0));
  EXPECT_EQ(ex.how, How::kTimedOut);
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kTimeout);
  EXPECT_EQ(r.failed_phase, "kernel_warmup");
  long long g = r.extra.value("grandchild_pid", 0LL);
  ASSERT_GT(g, 0);
  EXPECT_TRUE(dies_within(static_cast<pid_t>(g), 2.0)) << "grandchild " << g << " survived";
  expect_no_children();
}

TEST(RunChild, LeftoverGrandchildDoesNotHoldTheParent) {
  // The grandchild keeps the pipes open after the child exits: run_child must still return at
  // once, and clean the grandchild up.
  auto t0 = std::chrono::steady_clock::now();
  ChildExit ex = run_child(spec_for("grandchild-exit", 20));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(ex.how, How::kExited);
  EXPECT_LT(took, 5.0);
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kOk);
  long long g = r.extra.value("grandchild_pid", 0LL);
  ASSERT_GT(g, 0);
  EXPECT_TRUE(dies_within(static_cast<pid_t>(g), 2.0)) << "grandchild " << g << " survived";
  expect_no_children();
}

TEST(RunChild, EnvironmentReachesTheChild) {
  ChildSpec s = spec_for("env");
  s.env = {{"COLDSTART_TEST_VALUE", "hello world"}, {"COLDSTART_RESULT_FD", "99"}};
  ChildExit ex = run_child(s);
  StrategyResult r = classified(ex);
  EXPECT_EQ(r.outcome, Outcome::kOk);
  EXPECT_EQ(r.extra.value("value", ""), "hello world");
  EXPECT_EQ(r.extra.value("fd", ""), "3");  // the channel fd is ours to set
}

TEST(RunChild, MissingExecutableIsASpawnFailure) {
  ChildSpec s;
  s.argv = {"/nonexistent/coldstart-child", "ok"};
  s.timeout_s = 5;
  ChildExit ex = run_child(s);
  EXPECT_EQ(ex.how, How::kSpawnFailed);
  EXPECT_NE(ex.spawn_error.find("No such file"), std::string::npos) << ex.spawn_error;
  StrategyResult r = classify(ex, fresh());
  EXPECT_EQ(r.outcome, Outcome::kError);
  EXPECT_EQ(r.strategy, "fresh");
  EXPECT_EQ(r.error.value_or("").rfind("cannot start child: ", 0), 0u);
  EXPECT_FALSE(r.exit_code.has_value());

  ChildExit empty = run_child(ChildSpec{});
  EXPECT_EQ(empty.how, How::kSpawnFailed);
  expect_no_children();
}

TEST(RunChild, ExceptionInCallbackStillReapsTheChild) {
  EXPECT_THROW(run_child(spec_for("hang", 30),
                         [](const std::string&) { throw std::runtime_error("stop"); }),
               std::runtime_error);
  expect_no_children();
}

TEST(Classify, NoSnapshotAtAll) {
  ChildExit ex;
  ex.how = How::kSignaled;
  ex.signal = SIGKILL;
  ex.signal_name = "SIGKILL";
  ex.wall_ms = 12;
  StrategyResult r = classify(ex, fresh());
  EXPECT_EQ(r.outcome, Outcome::kCrash);
  EXPECT_EQ(r.error, "child killed by SIGKILL (signal 9)");
  EXPECT_FALSE(r.failed_phase.has_value());
  EXPECT_EQ(r.wall_ms, 12);

  ChildExit zero;
  zero.how = How::kExited;
  zero.exit_code = 0;
  StrategyResult z = classify(zero, fresh());
  EXPECT_EQ(z.outcome, Outcome::kError);
  EXPECT_EQ(z.error, "child exited with code 0 before sending its final result");
}

TEST(Classify, NonZeroExitAfterAnOkFinalSnapshotIsAnError) {
  StrategyResult s = fresh();
  s.outcome = Outcome::kOk;
  ChildExit ex;
  ex.how = How::kExited;
  ex.exit_code = 1;
  ex.stderr_tail = "x\nteardown failed\n\n";
  StrategyResult r = classify(ex, Snapshot(s, std::nullopt, /*final=*/true));
  EXPECT_EQ(r.outcome, Outcome::kError);
  EXPECT_EQ(r.error,
            "child exited with code 1 after sending its final result; last stderr line: teardown failed");
  EXPECT_EQ(r.failed_phase, "teardown");
}

TEST(ResultChannel, InactiveWithoutEnvAndRejectsNewlines) {
  ::unsetenv(kResultFdEnv);
  EXPECT_FALSE(ResultChannel::from_env().active());
  ::setenv(kResultFdEnv, "not-a-number", 1);
  EXPECT_FALSE(ResultChannel::from_env().active());
  ::unsetenv(kResultFdEnv);
  ResultChannel none;
  EXPECT_NO_THROW(none.send("ignored"));

  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ResultChannel ch(p[1]);
  EXPECT_THROW(ch.send("two\nlines"), Error);
  ch.send("one line");
  char buf[32] = {};
  ASSERT_EQ(::read(p[0], buf, sizeof buf), 9);
  EXPECT_EQ(std::string(buf), "one line\n");
  ::close(p[0]);
  ::close(p[1]);
}

TEST(Snapshot, LineIsOneLineAndRoundTrips) {
  StrategyResult r = fresh();
  r.error = "multi\nline\nerror";
  std::string line = snapshot_line(r, std::string("prefill"), false);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  auto back = parse_snapshot(line);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->result.error, r.error);
  EXPECT_EQ(back->current_phase.value_or(""), "prefill");
  EXPECT_FALSE(back->final);
  EXPECT_FALSE(back->result.extra.contains("current_phase")) << "protocol fields are typed";
  EXPECT_FALSE(back->result.extra.contains("final"));
  const auto fin = parse_snapshot(snapshot_line(r, std::nullopt, true));
  ASSERT_TRUE(fin.has_value());
  EXPECT_TRUE(fin->final);
  EXPECT_FALSE(fin->current_phase.has_value());
  EXPECT_FALSE(parse_snapshot("not json").has_value());
  EXPECT_FALSE(parse_snapshot("[1,2]").has_value());
  EXPECT_FALSE(parse_snapshot(R"({"strategy":"x","outcome":"weird"})").has_value());
}

}  // namespace
}  // namespace coldstart::isolate
