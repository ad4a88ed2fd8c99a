// coldstart: run one strategy in a child process, watch it, and turn how it ended into an outcome.
//
// Why a child per strategy: a replay can abort (workspace-lock assertion), segfault, leave a
// sticky CUDA error or hang. None of that may take the other strategies with it, so each strategy
// runs in its own process and the parent only reads what the child reported.
//
// ---- Protocol between parent and child --------------------------------------------------------
//  * Spawn: the parent starts argv[0] (a path; PATH is not searched) with argv, its own environment
//    plus ChildSpec::env, plus COLDSTART_RESULT_FD=3. The child is the leader of a new process
//    group (pgid = its pid), so the watchdog can signal it and everything it started at once.
//    stdin and stdout are inherited; stderr is a pipe read by the parent.
//  * Result channel: fd 3 is the write end of a pipe. The child writes one message per line
//    ('\n'-terminated, no '\n' inside), each with a single write() (ResultChannel::send). The
//    parent delivers complete lines in order; a trailing line without '\n' (the child died while
//    writing it) is dropped.
//  * Messages: each line is a full StrategyResult JSON object (result.h), a *snapshot* of
//    everything recorded so far, never a delta, plus two protocol fields:
//      "current_phase": the phase running (or about to run) when the line was sent, or null;
//      "final":         true only on the last snapshot, sent after the run is complete.
//    The child sends a snapshot when each phase starts and ends, and one final snapshot. If the
//    replay itself caught an error (e.g. the workspace-lock assertion), the final snapshot carries
//    outcome "crash", the error text and failed_phase, and the child still exits 0.
//    Lines that are not such a snapshot are kept in ChildExit::messages but ignored by classify.
//  * End: when the child ends, anything left in its process group is killed with SIGKILL and the
//    child is reaped; no zombie is left. After ChildSpec::timeout_s the watchdog sends SIGTERM to
//    the group, and SIGKILL 2 s later if the child is still there.
//  * Interrupts: while an InterruptScope lives, SIGINT / SIGTERM to the parent stop the running
//    child the same way (SIGTERM, SIGKILL 2 s later; at once on a second signal), and the child's
//    end is reported as How::kInterrupted. Children lead their own process groups, so a Ctrl-C at
//    the terminal reaches only the parent, which decides.
//  * Temporary files: with ChildSpec::private_tmpdir the child's TMPDIR is a fresh directory that
//    the parent removes once the child and its group are gone, whatever the child left in it (a
//    child stopped by the watchdog or killed by a signal cleans up nothing itself).
//  * Limits: a process that leaves the group (setsid/setpgid) escapes the watchdog; nothing
//    coldstart starts does that.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/replay/result.h"

namespace coldstart::isolate {

/// Name of the environment variable that tells the child its result-channel fd.
inline constexpr const char* kResultFdEnv = "COLDSTART_RESULT_FD";
/// The fd number the parent uses for the result channel.
inline constexpr int kResultFd = 3;
/// Name of the environment variable that tells the child the pid of the parent that started it
/// (die_with_parent).
inline constexpr const char* kParentPidEnv = "COLDSTART_PARENT_PID";
/// Seconds between the watchdog's SIGTERM and its SIGKILL.
inline constexpr double kKillGraceSeconds = 2.0;
/// Bytes of stderr kept in ChildExit::stderr_tail.
inline constexpr size_t kStderrTailBytes = 8192;

/// What to run.
struct ChildSpec {
  std::vector<std::string> argv;  ///< argv[0] is the executable's path
  double timeout_s = 0;           ///< wall-clock limit in seconds from spawn; <= 0 means none
  std::vector<std::pair<std::string, std::string>> env;  ///< added to / replacing the parent's; an entry for COLDSTART_RESULT_FD is ignored
  /// Give the child TMPDIR = a new private directory under the parent's $TMPDIR (or /tmp), removed
  /// with everything in it when run_child returns (also after a timeout, a signal or an
  /// interrupt). Replaces any TMPDIR in `env`. A directory that cannot be made is a spawn failure.
  bool private_tmpdir = false;
};

/// How the child ended, and what it said.
struct ChildExit {
  /// kInterrupted: the parent received SIGINT / SIGTERM under an InterruptScope and stopped the
  /// child (or the child died of a termination signal after the parent received one).
  enum class How { kExited, kSignaled, kTimedOut, kSpawnFailed, kInterrupted };
  How how = How::kSpawnFailed;
  int exit_code = -1;          ///< exit status when how == kExited (or a timed-out child exited)
  int signal = 0;              ///< signal number that ended it (kSignaled, usually kTimedOut)
  std::string signal_name;     ///< e.g. "SIGSEGV"; empty when no signal ended it
  std::vector<std::string> messages;  ///< complete result-channel lines, in order, without '\n'
  std::string stderr_tail;     ///< last ~kStderrTailBytes bytes of the child's stderr
  double wall_ms = 0;          ///< spawn to reap, milliseconds
  double timeout_s = 0;        ///< the limit it ran under (ChildSpec::timeout_s)
  std::string spawn_error;     ///< why the spawn failed (kSpawnFailed), e.g. "execve(/x): No such file..."
  int interrupt_signal = 0;    ///< the parent's signal (SIGINT, SIGTERM) when how == kInterrupted
};

/// SIGINT / SIGTERM / SIGHUP handling for a parent that runs children (`coldstart replay`; SIGHUP:
/// the terminal or ssh session closed). While one lives, the first of them does not end the
/// process: it is recorded
/// (interrupt_signal()), and run_child stops its child as the watchdog would (SIGTERM to the
/// group, SIGKILL kKillGraceSeconds later) and returns How::kInterrupted, so the caller can keep
/// what finished, record the running strategy as interrupted and exit 128 + signal. A second
/// signal kills the running children's groups (run_child may run in several threads at once)
/// with SIGKILL at once; a third one ends the process by
/// the signal's default action. The destructor restores the handlers found at construction. One
/// scope at a time per process (nested scopes share the first one's state).
class InterruptScope {
 public:
  /// Installs the handlers (sigaction without SA_RESTART) and clears any earlier interrupt.
  /// Throws Error when the wake-up pipe cannot be made.
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

/// Child side: from now on the calling process is killed (SIGKILL) when the parent that ran it
/// (the pid in kParentPidEnv, which run_child sets) ends, even by SIGKILL, so no child outlives
/// `coldstart replay` (Linux PR_SET_PDEATHSIG). When that parent is already gone, exits with
/// status 1 at once. Without kParentPidEnv (a child started by hand), or off Linux, does nothing.
void die_with_parent();

/// The first SIGINT / SIGTERM / SIGHUP received while an InterruptScope lived (e.g. SIGINT = 2), or 0.
/// Stays set after the scope ends, until the next scope begins.
int interrupt_signal();

/// Name of a signal, "SIGSEGV" for 11; "SIG<n>" for numbers without a name.
std::string signal_name(int sig);

/// Runs one child to completion (see the protocol above) and returns how it ended.
///  - `on_message` is called on this thread for every complete result-channel line, in order, as it
///    arrives (the lines are also returned in ChildExit::messages);
///  - `on_stderr_line` is called for every stderr line (without '\n'; a last unterminated line is
///    passed too), e.g. to forward it to our own stderr with a prefix.
/// Under an InterruptScope, an interrupt (before or during the run) stops the child; a child is
/// still started when the interrupt came before the call (the caller checks interrupt_signal()
/// before starting work it does not want). The child never blocks on a full pipe: both pipes are
/// drained in a poll() loop. Never throws
/// for a child failure: an exec failure or resource shortage (pipe, spawn) is reported as
/// How::kSpawnFailed with spawn_error. Exceptions thrown by the callbacks propagate after the child
/// is killed and reaped.
ChildExit run_child(const ChildSpec& spec,
                    std::function<void(const std::string& line)> on_message = {},
                    std::function<void(const std::string& line)> on_stderr_line = {});

/// Child side of the result channel.
class ResultChannel {
 public:
  /// A channel on `fd`; -1 gives an inactive channel whose send() does nothing.
  explicit ResultChannel(int fd = -1) : fd_(fd) {}

  /// The channel announced by COLDSTART_RESULT_FD, or an inactive one when the variable is unset,
  /// not a number, or names a closed fd (e.g. the binary was started by hand).
  static ResultChannel from_env();

  bool active() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  /// Writes `line` plus '\n' with one write() call (looping only on EINTR / a partial write), so
  /// the parent sees it whole. Thread-safe. Throws Error when `line` holds '\n' or the write fails
  /// (e.g. EPIPE: the parent is gone; ignore SIGPIPE to get the error instead of the signal).
  void send(const std::string& line) const;

 private:
  int fd_;
};

/// The protocol line for a snapshot: `r` as compact JSON with "current_phase" (null when empty)
/// and "final" set. Never holds a raw '\n'.
std::string snapshot_line(const StrategyResult& r, const std::optional<std::string>& current_phase,
                          bool final);

/// Convenience for the child: channel.send(snapshot_line(r, current_phase, final)); a no-op on an
/// inactive channel.
void send_snapshot(const ResultChannel& channel, const StrategyResult& r,
                   const std::optional<std::string>& current_phase, bool final);

/// One result-channel message, parsed: the child's result so far and the protocol's own fields,
/// typed (they never appear in result.extra).
struct Snapshot {
  Snapshot(StrategyResult r = {}, std::optional<std::string> phase = std::nullopt, bool fin = false)
      : result(std::move(r)), current_phase(std::move(phase)), final(fin) {}
  StrategyResult result;                     ///< everything recorded so far
  std::optional<std::string> current_phase;  ///< the phase running when it was sent, if any
  bool final = false;                        ///< true on the last one, sent after the run ended
};

/// Parses one message line as a snapshot; nullopt when it is not a StrategyResult JSON object.
/// "current_phase" (a string, else none) and "final" (true, else false) go to their fields.
std::optional<Snapshot> parse_snapshot(const std::string& line);

/// The last message that parses as a snapshot; `fallback` (e.g. a fresh result carrying the
/// strategy name and warmers; no phase, not final) when none does.
Snapshot last_snapshot(const std::vector<std::string>& messages, StrategyResult fallback);

/// Decides a strategy's outcome from how its child ended and the last snapshot it sent (or a
/// fresh result when it sent none). Every phase, compile and extra field in the snapshot is kept;
/// this sets outcome, error, failed_phase, exit_code, signal and wall_ms (the running phase is
/// the snapshot's current_phase, else its failed_phase, else "teardown" after the final one):
///  - spawn failed                          -> error, "cannot start child: <spawn_error>"
///  - watchdog fired                        -> timeout, "wall-clock limit of N s reached (watchdog)",
///                                             failed_phase = running phase
///  - killed by a signal                    -> crash, "child killed by SIGSEGV (signal 11)" plus the
///                                             last stderr line; failed_phase = running phase
///                                             ("teardown" if the final snapshot had been sent)
///  - interrupted (InterruptScope)          -> interrupted, "interrupted by SIGINT (the run was
///                                             stopped)", failed_phase = running phase; a child
///                                             that had sent its final snapshot and exited 0
///                                             keeps its own verdict
///  - exit 0 with a final snapshot          -> the snapshot's own outcome (ok, or crash set by the
///                                             child when the replay caught an error)
///  - exit N != 0 with a final snapshot     -> the snapshot's outcome if it is not ok, else error
///  - any exit without a final snapshot     -> error, "child exited with code N before its final
///                                             result" plus the last stderr line
/// For every outcome other than ok the stderr tail is kept in extra["stderr_tail"].
StrategyResult classify(const ChildExit& exit, Snapshot last_snapshot);

}  // namespace coldstart::isolate
