// coldstart: the child side of the result channel (ResultChannel, snapshots) and the parent's
// reading of what a child left: its last snapshot and how it ended (classify). See isolate.h.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "harness/common/error.h"
#include "harness/isolate/isolate.h"

namespace coldstart::isolate {
namespace {

// The last non-blank line of `text`, cut to 500 characters.
std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  start = (start == std::string::npos) ? 0 : start + 1;
  std::string line = text.substr(start, end - start + 1);
  constexpr size_t kMax = 500;
  if (line.size() > kMax) line = line.substr(0, kMax) + "...";
  return line;
}

}  // namespace

// ---- child side -------------------------------------------------------------------------------

ResultChannel ResultChannel::from_env() {
  const char* text = std::getenv(kResultFdEnv);
  if (!text || !*text) return ResultChannel(-1);
  char* end = nullptr;
  errno = 0;
  long fd = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || fd < 0 || fd > 1 << 20) return ResultChannel(-1);
  int flags = ::fcntl(static_cast<int>(fd), F_GETFD);
  if (flags < 0) return ResultChannel(-1);
  // Programs this child starts (compilers, helpers) do not inherit the channel, so they cannot
  // keep it open or write into it.
  ::fcntl(static_cast<int>(fd), F_SETFD, flags | FD_CLOEXEC);
  return ResultChannel(static_cast<int>(fd));
}

void ResultChannel::send(const std::string& line) const {
  if (fd_ < 0) return;
  if (line.find('\n') != std::string::npos) {
    throw Error("result channel: a message must be one line (it holds a '\\n')");
  }
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("result channel: write to fd {} failed: {}", fd_, std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
}

std::string snapshot_line(const StrategyResult& r, const std::optional<std::string>& current_phase,
                          bool final) {
  nlohmann::json j = r;
  j["current_phase"] = current_phase ? nlohmann::json(*current_phase) : nlohmann::json(nullptr);
  j["final"] = final;
  // dump() escapes control characters, so the text never holds a raw newline; invalid UTF-8 in
  // an error text is replaced rather than thrown on.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void send_snapshot(const ResultChannel& channel, const StrategyResult& r,
                   const std::optional<std::string>& current_phase, bool final) {
  if (!channel.active()) return;
  channel.send(snapshot_line(r, current_phase, final));
}

std::optional<Snapshot> parse_snapshot(const std::string& line) {
  try {
    auto j = nlohmann::json::parse(line);
    if (!j.is_object()) return std::nullopt;
    Snapshot s(j.get<StrategyResult>());
    nlohmann::json& extra = s.result.extra;
    if (const auto cur = extra.find("current_phase"); cur != extra.end() && cur->is_string())
      s.current_phase = cur->get<std::string>();
    if (const auto fin = extra.find("final"); fin != extra.end() && fin->is_boolean())
      s.final = fin->get<bool>();
    extra.erase("current_phase");
    extra.erase("final");
    return s;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  } catch (const Error&) {  // e.g. an unknown outcome name
    return std::nullopt;
  }
}

Snapshot last_snapshot(const std::vector<std::string>& messages, StrategyResult fallback) {
  for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
    if (auto s = parse_snapshot(*it)) return std::move(*s);
  }
  return Snapshot(std::move(fallback));
}

StrategyResult classify(const ChildExit& ex, Snapshot last) {
  StrategyResult r = std::move(last.result);
  if (!r.extra.is_object()) r.extra = nlohmann::json::object();
  const bool final = last.final;
  std::optional<std::string> running = last.current_phase;
  if (!running && r.failed_phase) running = r.failed_phase;
  if (!running && final) running = "teardown";

  r.wall_ms = ex.wall_ms;
  r.exit_code = std::nullopt;
  r.signal = std::nullopt;
  if (ex.how != ChildExit::How::kSpawnFailed && ex.exit_code >= 0 && ex.signal == 0) {
    r.exit_code = ex.exit_code;
  }
  if (ex.signal != 0) r.signal = ex.signal_name.empty() ? signal_name(ex.signal) : ex.signal_name;

  const std::string err_line = last_line(ex.stderr_tail);
  const std::string with_stderr = err_line.empty() ? "" : "; last stderr line: " + err_line;

  switch (ex.how) {
    case ChildExit::How::kSpawnFailed:
      r.outcome = Outcome::kError;
      r.error = "cannot start child: " + ex.spawn_error;
      r.failed_phase = std::nullopt;
      break;
    case ChildExit::How::kTimedOut: {
      r.outcome = Outcome::kTimeout;
      std::string how_killed;
      if (ex.signal == SIGKILL) {
        how_killed = fmt::format(", killed with SIGKILL {:g} s after SIGTERM", kKillGraceSeconds);
      }
      r.error = fmt::format("wall-clock limit of {:g} s reached (watchdog){}", ex.timeout_s, how_killed);
      r.failed_phase = running;
      break;
    }
    case ChildExit::How::kInterrupted: {
      if (final && ex.exit_code == 0 && ex.signal == 0) break;  // it finished first: its verdict
      r.outcome = Outcome::kInterrupted;
      const std::string how_killed =
          ex.signal == SIGKILL ? std::string(", child killed with SIGKILL") : std::string();
      r.error = fmt::format("interrupted by {} (the run was stopped){}",
                            ex.interrupt_signal ? signal_name(ex.interrupt_signal) : "a signal",
                            how_killed);
      r.failed_phase = running;
      break;
    }
    case ChildExit::How::kSignaled:
      r.outcome = Outcome::kCrash;
      r.error = fmt::format("child killed by {} (signal {}){}{}", r.signal.value_or("?"), ex.signal,
                            final ? " after sending its final result" : "", with_stderr);
      r.failed_phase = running;
      break;
    case ChildExit::How::kExited:
      if (!final) {
        r.outcome = Outcome::kError;
        r.error = fmt::format("child exited with code {} before sending its final result{}",
                              ex.exit_code, with_stderr);
        r.failed_phase = running;
      } else if (ex.exit_code != 0 && r.outcome == Outcome::kOk) {
        r.outcome = Outcome::kError;
        r.error = fmt::format("child exited with code {} after sending its final result{}",
                              ex.exit_code, with_stderr);
        r.failed_phase = "teardown";
      }
      // Otherwise the child's own verdict stands (ok, or the crash it caught and reported).
      break;
  }
  if (r.outcome != Outcome::kOk && !ex.stderr_tail.empty()) r.extra["stderr_tail"] = ex.stderr_tail;
  return r;
}

}  // namespace coldstart::isolate
