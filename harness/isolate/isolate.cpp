// coldstart: child processes with a result channel, stderr capture and a watchdog; interrupts.
// The child side of the channel and the classification of a child's end: result_channel.cpp.
#include "harness/isolate/isolate.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/common/paths.h"

extern char** environ;

namespace coldstart::isolate {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Pipe ends are moved to fds >= 10 so that dup2 onto 2 and 3 in the child can never clobber
// another end of ours; all of them are close-on-exec in the parent.
constexpr int kLowestPipeFd = 10;

int raise_fd(int fd) {
  int high = ::fcntl(fd, F_DUPFD_CLOEXEC, kLowestPipeFd);
  int saved = errno;
  ::close(fd);
  errno = saved;
  return high;
}

// ---- interrupts (InterruptScope) ----
// Written by the signal handler, read by run_child. The handler runs with both signals blocked
// (sa_mask), so it never nests.
volatile sig_atomic_t g_first_signal = 0;  // the first SIGINT / SIGTERM, 0 when none
volatile sig_atomic_t g_signals = 0;       // how many arrived
// The running children's process groups (several when strategies run in parallel, `--jobs`),
// 0 in a free slot. Lock-free atomics: the handler reads them.
constexpr int kMaxChildGroups = 64;
std::atomic<pid_t> g_child_groups[kMaxChildGroups];
static_assert(std::atomic<pid_t>::is_always_lock_free, "the signal handler reads these");

// Takes a free slot for `pid` (a child past kMaxChildGroups is still stopped by its run_child
// loop, only not by the handler's SIGKILL); returns the slot or -1.
int hold_child_group(pid_t pid) {
  for (int i = 0; i < kMaxChildGroups; ++i) {
    pid_t expected = 0;
    if (g_child_groups[i].compare_exchange_strong(expected, pid)) return i;
  }
  return -1;
}
void release_child_group(int& slot) {
  if (slot >= 0) g_child_groups[slot].store(0);
  slot = -1;
}
int g_wake[2] = {-1, -1};                  // the handler writes a byte: poll() wakes at once
int g_scopes = 0;
struct sigaction g_old_int, g_old_term, g_old_hup;
// The signals an InterruptScope turns into an orderly stop (SIGHUP: the terminal went away).
constexpr int kInterruptSignals[] = {SIGINT, SIGTERM, SIGHUP};

void on_interrupt(int sig) {
  const int saved = errno;
  if (g_first_signal == 0) g_first_signal = sig;
  g_signals = g_signals + 1;
  if (g_signals >= 2) {
    // Second signal: the child goes now, without its grace period. Third: the default action.
    for (const std::atomic<pid_t>& g : g_child_groups)
      if (const pid_t pg = g.load(); pg > 0) ::kill(-pg, SIGKILL);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int s : kInterruptSignals) ::sigaction(s, &dfl, nullptr);
  }
  if (g_wake[1] >= 0) (void)!::write(g_wake[1], "!", 1);
  errno = saved;
}

// Owns every resource of one run, so that an early return or a callback's exception still
// kills and reaps the child, closes the fds and removes the child's private TMPDIR.
struct RunState {
  pid_t pid = -1;
  bool reaped = false;
  int fds[5] = {-1, -1, -1, -1, -1};  // result r/w, stderr r/w, pidfd
  std::string tmpdir;                 // ChildSpec::private_tmpdir, removed last
  int group_slot = -1;                // in g_child_groups while the child runs

  ~RunState() {
    release_child_group(group_slot);
    if (pid > 0 && !reaped) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    for (int& fd : fds) close_fd(fd);
    // The child and its group are gone: nothing can write here any more.
    if (!tmpdir.empty()) paths::remove_tree(tmpdir);
  }
  static void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// Splits a byte stream into lines.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line) : max_line_(max_line) {}
  template <typename F>
  void feed(const char* data, size_t n, F&& emit) {
    buf_.append(data, n);
    size_t start = 0;
    for (;;) {
      size_t nl = buf_.find('\n', start);
      if (nl == std::string::npos) break;
      emit(buf_.substr(start, nl - start));
      start = nl + 1;
    }
    buf_.erase(0, start);
    // A line longer than max_line_ is passed on in pieces instead of growing without bound.
    while (max_line_ && buf_.size() > max_line_) {
      emit(buf_.substr(0, max_line_));
      buf_.erase(0, max_line_);
    }
  }
  const std::string& rest() const { return buf_; }

 private:
  std::string buf_;
  size_t max_line_;
};

std::vector<std::string> child_environment(const ChildSpec& spec, const std::string& tmpdir) {
  auto ours = [&](const std::string& name) {  // set by run_child, whatever spec.env says
    return name == kResultFdEnv || name == kParentPidEnv || (!tmpdir.empty() && name == "TMPDIR");
  };
  auto overridden = [&](const char* entry) {
    const char* eq = std::strchr(entry, '=');
    std::string name = eq ? std::string(entry, eq) : std::string(entry);
    if (ours(name)) return true;
    for (const auto& kv : spec.env) {
      if (kv.first == name) return true;
    }
    return false;
  };
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    if (!overridden(*e)) env.emplace_back(*e);
  }
  for (const auto& kv : spec.env) {
    if (!ours(kv.first)) env.push_back(kv.first + "=" + kv.second);
  }
  env.push_back(fmt::format("{}={}", kResultFdEnv, kResultFd));
  env.push_back(fmt::format("{}={}", kParentPidEnv, static_cast<long>(::getpid())));
  if (!tmpdir.empty()) env.push_back("TMPDIR=" + tmpdir);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}


}  // namespace

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return fmt::format("SIG{}", sig);
  }
}

InterruptScope::InterruptScope() {
  if (g_scopes++ > 0) return;
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
    --g_scopes;
    throw Error(fmt::format("interrupt handling: pipe2: {}", std::strerror(errno)));
  }
  g_wake[0] = raise_fd(p[0]);
  g_wake[1] = raise_fd(p[1]);
  g_first_signal = 0;
  g_signals = 0;
  for (std::atomic<pid_t>& g : g_child_groups) g.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  for (int s : kInterruptSignals) sigaddset(&sa.sa_mask, s);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking call returns EINTR and the caller looks
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
  ::sigaction(SIGHUP, &sa, &g_old_hup);
}

InterruptScope::~InterruptScope() {
  if (--g_scopes > 0) return;
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  ::sigaction(SIGHUP, &g_old_hup, nullptr);
  for (int& fd : g_wake) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

int interrupt_signal() { return static_cast<int>(g_first_signal); }

void die_with_parent() {
#ifdef __linux__
  const char* text = std::getenv(kParentPidEnv);
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  const long parent = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || parent <= 1) return;
  // Armed first, then checked: a parent that died before the prctl is seen by getppid().
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return;  // not fatal: the pipes still break
  if (static_cast<long>(::getppid()) != parent) {
    std::fprintf(stderr, "coldstart child: the parent %ld that started it is gone\n", parent);
    std::_Exit(1);
  }
#endif
}

ChildExit run_child(const ChildSpec& spec, std::function<void(const std::string&)> on_message,
                    std::function<void(const std::string&)> on_stderr_line) {
  ChildExit out;
  out.timeout_s = spec.timeout_s;
  const auto t0 = Clock::now();
  auto spawn_failed = [&](std::string why) {
    out.how = ChildExit::How::kSpawnFailed;
    out.spawn_error = std::move(why);
    out.wall_ms = ms_between(t0, Clock::now());
    return out;
  };
  if (spec.argv.empty()) return spawn_failed("empty argv");

  RunState st;
  if (spec.private_tmpdir) {
    try {
      st.tmpdir = paths::make_temp_dir("coldstart-child-");
    } catch (const Error& e) {
      return spawn_failed(e.what());
    }
  }
  int& res_r = st.fds[0];
  int& res_w = st.fds[1];
  int& err_r = st.fds[2];
  int& err_w = st.fds[3];
  int& pidfd = st.fds[4];
  for (int which : {0, 2}) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return spawn_failed(fmt::format("pipe2: {}", std::strerror(errno)));
    st.fds[which] = raise_fd(p[0]);
    st.fds[which + 1] = raise_fd(p[1]);
    if (st.fds[which] < 0 || st.fds[which + 1] < 0) {
      return spawn_failed(fmt::format("fcntl(F_DUPFD_CLOEXEC): {}", std::strerror(errno)));
    }
  }

  // Everything the spawn needs is built before it, in this process.
  std::vector<std::string> argv_s = spec.argv;
  std::vector<std::string> env_s = child_environment(spec, st.tmpdir);
  std::vector<char*> argv_c = c_strings(argv_s);
  std::vector<char*> env_c = c_strings(env_s);

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&fa, res_w, kResultFd);
  posix_spawn_file_actions_adddup2(&fa, err_w, STDERR_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Nothing of ours beyond the channel leaks into the child (our pipe ends included).
  posix_spawn_file_actions_addclosefrom_np(&fa, kResultFd + 1);
#endif
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);  // undo any SIG_IGN of ours (SIGPIPE, ...)
  posix_spawnattr_setpgroup(&attr, 0);         // the child leads a new process group
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv_c[0], &fa, &attr, argv_c.data(), env_c.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return spawn_failed(fmt::format("posix_spawn({}): {}", spec.argv[0], std::strerror(rc)));
  }
  st.pid = pid;
  if (g_scopes > 0) st.group_slot = hold_child_group(pid);  // a second interrupt: SIGKILL from the handler
  RunState::close_fd(res_w);
  RunState::close_fd(err_w);
  ::fcntl(res_r, F_SETFL, ::fcntl(res_r, F_GETFL) | O_NONBLOCK);
  ::fcntl(err_r, F_SETFL, ::fcntl(err_r, F_GETFL) | O_NONBLOCK);
#ifdef SYS_pidfd_open
  // Readable when the child ends: wakes the loop at once even while a grandchild keeps the pipes
  // open. Without it (old kernels) the loop polls for the exit every few milliseconds.
  pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif

  LineSplitter msg_lines(0);
  LineSplitter err_lines(64 * 1024);
  std::string tail;
  auto add_tail = [&](const char* data, size_t n) {
    tail.append(data, n);
    if (tail.size() > 2 * kStderrTailBytes) tail.erase(0, tail.size() - kStderrTailBytes);
  };
  auto emit_message = [&](std::string line) {
    out.messages.push_back(line);
    if (on_message) on_message(out.messages.back());
  };
  auto emit_stderr = [&](const std::string& line) {
    if (on_stderr_line) on_stderr_line(line);
  };

  // Reads what is there now; returns false at EOF (and closes the fd).
  char buf[65536];
  auto read_some = [&](int& fd, bool drain) {
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        if (fd == res_r) {
          msg_lines.feed(buf, static_cast<size_t>(n), emit_message);
        } else {
          add_tail(buf, static_cast<size_t>(n));
          err_lines.feed(buf, static_cast<size_t>(n), emit_stderr);
        }
        if (!drain) return true;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      RunState::close_fd(fd);  // EOF, or an error we cannot recover from
      return false;
    }
  };

  const bool has_deadline = spec.timeout_s > 0;
  const auto deadline =
      has_deadline ? t0 + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(spec.timeout_s))
                   : Clock::time_point::max();
  Clock::time_point kill_at = Clock::time_point::max();
  bool timed_out = false, interrupted = false, killed = false;
  const bool watch_interrupts = g_scopes > 0;

  for (;;) {
    // Has the child ended? WNOWAIT leaves it a zombie, so its pid (and process group id) cannot be
    // reused before we have cleaned up the group below.
    siginfo_t si;
    std::memset(&si, 0, sizeof si);
    int w = ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT);
    if (w == 0 && si.si_pid == pid) break;
    if (w < 0 && errno != EINTR) break;  // ECHILD: someone else reaped it; waitpid below reports

    const auto now = Clock::now();
    const bool stopping = timed_out || interrupted;
    if (!stopping && now >= deadline) timed_out = true;
    if (!stopping && !timed_out && watch_interrupts && g_signals > 0) interrupted = true;
    if (!stopping && (timed_out || interrupted)) {
      ::kill(-pid, SIGTERM);
      kill_at = now + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(kKillGraceSeconds));
    }
    // A second interrupt does not wait for the grace period (the handler already sent SIGKILL).
    const bool hurry = watch_interrupts && g_signals >= 2;
    if ((timed_out || interrupted) && !killed && (now >= kill_at || hurry)) {
      killed = true;
      ::kill(-pid, SIGKILL);
    }

    // Sleep until something is readable, the child ends, an interrupt, or the next watchdog step.
    Clock::time_point next = (timed_out || interrupted)
                                 ? (killed ? Clock::time_point::max() : kill_at)
                                 : deadline;
    const int tick_ms = pidfd >= 0 ? 500 : 10;
    int wait_ms = tick_ms;
    if (next != Clock::time_point::max()) {
      double left = std::chrono::duration<double, std::milli>(next - now).count();
      wait_ms = static_cast<int>(std::clamp(left + 1.0, 0.0, static_cast<double>(tick_ms)));
    }
    pollfd pfd[4];
    int n = 0;
    int i_res = -1, i_err = -1, i_wake = -1;
    if (res_r >= 0) { i_res = n; pfd[n++] = {res_r, POLLIN, 0}; }
    if (err_r >= 0) { i_err = n; pfd[n++] = {err_r, POLLIN, 0}; }
    if (pidfd >= 0) pfd[n++] = {pidfd, POLLIN, 0};
    if (watch_interrupts && g_wake[0] >= 0) { i_wake = n; pfd[n++] = {g_wake[0], POLLIN, 0}; }
    int pr = ::poll(pfd, static_cast<nfds_t>(n), wait_ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      ::usleep(1000);  // should not happen (EINVAL/ENOMEM); do not spin
      continue;
    }
    // Several run_child loops (parallel strategies) share the wake pipe: the one that drains it
    // wakes at once, the others see g_signals at their next tick (at most tick_ms later).
    if (i_wake >= 0 && pfd[i_wake].revents) {
      char drain[64];
      while (::read(g_wake[0], drain, sizeof drain) > 0) {
      }
    }
    if (i_res >= 0 && pfd[i_res].revents) read_some(res_r, false);
    if (i_err >= 0 && pfd[i_err].revents) read_some(err_r, false);
  }

  // The child has ended (still a zombie). Kill whatever it left in its group, take what is
  // already in the pipes without waiting for writers that may still hold them, then reap. The
  // handler forgets the group first: once reaped, its id may be reused.
  release_child_group(st.group_slot);
  ::kill(-pid, SIGKILL);
  if (res_r >= 0) read_some(res_r, true);
  if (err_r >= 0) read_some(err_r, true);
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  st.reaped = true;
  out.wall_ms = ms_between(t0, Clock::now());

  if (!err_lines.rest().empty()) emit_stderr(err_lines.rest());
  // An unterminated result line is a message cut short: dropped (see the protocol).
  if (tail.size() > kStderrTailBytes) {
    tail.erase(0, tail.size() - kStderrTailBytes);
    size_t nl = tail.find('\n');
    if (nl != std::string::npos && nl + 1 < tail.size()) tail.erase(0, nl + 1);
  }
  out.stderr_tail = std::move(tail);

  // A child that died of a termination signal after the parent got an interrupt was stopped by
  // the same event (a terminal hang-up, or a service manager signalling the whole group).
  const int sig = r == pid && WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  if (!timed_out && !interrupted && watch_interrupts && g_signals > 0 &&
      (sig == SIGINT || sig == SIGTERM || sig == SIGKILL || sig == SIGHUP)) {
    interrupted = true;
  }
  if (interrupted) out.interrupt_signal = static_cast<int>(g_first_signal);
  if (r != pid) {
    out.how = timed_out     ? ChildExit::How::kTimedOut
              : interrupted ? ChildExit::How::kInterrupted
                            : ChildExit::How::kExited;
    out.exit_code = -1;
    return out;
  }
  if (WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    out.signal = WTERMSIG(status);
    out.signal_name = signal_name(out.signal);
  }
  if (timed_out) {
    out.how = ChildExit::How::kTimedOut;
  } else if (interrupted) {
    out.how = ChildExit::How::kInterrupted;
  } else if (WIFSIGNALED(status)) {
    out.how = ChildExit::How::kSignaled;
  } else {
    out.how = ChildExit::How::kExited;
  }
  return out;
}

}  // namespace coldstart::isolate
