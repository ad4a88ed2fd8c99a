// isolate_test_child MODE: a stand-in for a strategy's child process that ends in the way MODE
// asks, so isolate_test can check run_child and classify against real process behaviour.
//
// Modes: ok, abort, segfault, hang, ignore-term, exit3, crash-result, big-output, grandchild,
// grandchild-exit, env, tmpdir-hang.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "harness/isolate/isolate.h"

using coldstart::CompileEvent;
using coldstart::Outcome;
using coldstart::PhaseTiming;
using coldstart::StrategyResult;
using coldstart::isolate::ResultChannel;
using coldstart::isolate::send_snapshot;

namespace {

[[noreturn]] void sleep_forever() {
  for (;;) ::pause();
}

StrategyResult base() {
  StrategyResult r;
  r.strategy = "test-strategy";
  r.warmers = {"tq-decode-warmup"};
  r.outcome = Outcome::kOk;
  r.extra["pid"] = static_cast<long long>(::getpid());  // for tests that signal it themselves
  return r;
}

// Records phases one by one, sending a snapshot at each start and end, and stops before `stop_at`
// (returning with that phase announced as running).
StrategyResult run_phases(const ResultChannel& ch, const char* stop_at) {
  static const char* kPhases[] = {"init",          "load_weights",   "profile_run", "kv_cache_alloc",
                                  "kernel_warmup", "graph_capture",  "workspace_lock", "prefill",
                                  "continuation_prefill", "first_decode", "decode"};
  StrategyResult r = base();
  for (const char* p : kPhases) {
    send_snapshot(ch, r, std::string(p), false);
    if (stop_at && std::strcmp(p, stop_at) == 0) return r;
    std::fprintf(stderr, "phase %s done\n", p);
    r.phases.push_back(PhaseTiming{p, 1.5, std::nullopt, -1});
    if (std::strcmp(p, "kernel_warmup") == 0) r.startup_compiles = 2;
    if (std::strcmp(p, "prefill") == 0) {
      r.hot_path_compiles.push_back(CompileEvent{"tq_store", "tq_store|sm_90", 12.5, "prefill", "nvrtc"});
    }
    send_snapshot(ch, r, std::nullopt, false);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  setpgid(0, 0);  // harmless when the parent already made us a group leader
  if (argc < 2) {
    std::fprintf(stderr, "usage: isolate_test_child MODE\n");
    return 2;
  }
  const std::string mode = argv[1];
  const ResultChannel ch = ResultChannel::from_env();

  if (mode == "ok") {
    StrategyResult r = run_phases(ch, nullptr);
    r.startup_ms = 42.0;
    send_snapshot(ch, r, std::nullopt, true);
    return 0;
  }
  if (mode == "abort") {
    run_phases(ch, "first_decode");
    std::fprintf(stderr, "assertion failed: about to abort\n");
    std::abort();
  }
  if (mode == "segfault") {
    run_phases(ch, "prefill");
    std::fprintf(stderr, "writing through a null pointer\n");
    std::fflush(stderr);
    volatile int* p = nullptr;
    *p = 1;
    ::raise(SIGSEGV);  // in case the write above was somehow survived
    return 0;
  }
  if (mode == "hang") {
    run_phases(ch, "graph_capture");
    sleep_forever();
  }
  if (mode == "ignore-term") {
    ::signal(SIGTERM, SIG_IGN);
    run_phases(ch, "kernel_warmup");
    sleep_forever();
  }
  if (mode == "exit3") {
    run_phases(ch, "kv_cache_alloc");
    std::fprintf(stderr, "fatal: out of device memory\n");
    std::exit(3);
  }
  if (mode == "crash-result") {
    StrategyResult r = run_phases(ch, "first_decode");
    r.outcome = Outcome::kCrash;
    r.failed_phase = "first_decode";
    r.error =
        "Workspace is locked but allocation from 'decode.cu:88:run_decode' requires 2.00 MB, "
        "current size is 0.26 MB. Workspace growth is not allowed after locking.";
    send_snapshot(ch, r, std::nullopt, true);
    return 0;
  }
  if (mode == "big-output") {
    // Far more than a pipe holds on both channels, interleaved: the parent must keep reading.
    StrategyResult r = base();
    std::string filler(150, 'x');
    const int n = argc > 2 ? std::atoi(argv[2]) : 20000;
    for (int i = 0; i < n; ++i) {
      r.extra["seq"] = i;
      send_snapshot(ch, r, std::string("prefill"), false);
      std::fprintf(stderr, "stderr line %d %s\n", i, filler.c_str());
    }
    r.extra["seq"] = n;
    r.extra["blob"] = std::string(200000, 'b');  // one message far larger than PIPE_BUF
    send_snapshot(ch, r, std::nullopt, true);
    std::fprintf(stderr, "last stderr line\n");
    return 0;
  }
  if (mode == "grandchild" || mode == "grandchild-exit") {
    pid_t g = ::fork();
    if (g == 0) sleep_forever();  // inherits our group, stderr and the channel
    StrategyResult r = run_phases(ch, "kernel_warmup");
    r.extra["grandchild_pid"] = static_cast<long long>(g);
    if (mode == "grandchild") {
      send_snapshot(ch, r, std::string("kernel_warmup"), false);
      sleep_forever();
    }
    send_snapshot(ch, r, std::nullopt, true);
    return 0;
  }
  if (mode == "tmpdir-hang") {
    // What a strategy's child leaves when it is stopped: a directory under $TMPDIR (its cold
    // kernel cache) with a file in it, never removed by the child itself.
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/coldstart-jit-XXXXXX";
    if (::mkdtemp(dir.data()) == nullptr) return 2;
    if (FILE* f = std::fopen((dir + "/entry.cubin").c_str(), "w")) {
      std::fputs("cubin", f);
      std::fclose(f);
    }
    StrategyResult r = run_phases(ch, "kernel_warmup");
    r.extra["tmp_entry"] = dir;
    send_snapshot(ch, r, std::string("kernel_warmup"), false);
    sleep_forever();
  }
  if (mode == "env") {
    StrategyResult r = base();
    const char* v = std::getenv("COLDSTART_TEST_VALUE");
    const char* fd = std::getenv("COLDSTART_RESULT_FD");
    r.extra["value"] = v ? v : "(unset)";
    r.extra["fd"] = fd ? fd : "(unset)";
    send_snapshot(ch, r, std::nullopt, true);
    return 0;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
