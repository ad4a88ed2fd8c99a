// Shared by the end-to-end tests (replay_e2e_test.cpp, families_e2e_test.cpp,
// process_e2e_test.cpp): run the `coldstart` binary built with them from the source tree,
// read what it wrote, and the ReplayE2E fixture (a temporary directory per test).
#pragma once

#include <gtest/gtest.h>
#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <optional>
#include <thread>
#include <vector>
#include <string>

#include "harness/cli/compare.h"
#include "harness/common/checksum.h"
#include "harness/common/paths.h"
#include "harness/jit/nvrtc_archs.h"
#include "harness/kernels/turboquant/turboquant_kernels.h"
#include "harness/replay/result.h"


extern char** environ;

namespace coldstart::e2e {

inline std::string source_dir() {
  const char* d = std::getenv("COLDSTART_SOURCE_DIR");
  return d ? d : "";
}

/// Runs the binary with `args` (from the source dir), returns its exit status; its stdout and
/// stderr go to `output` when given.
inline int run_coldstart(const std::string& args, const std::string& output = "") {
  const std::string cmd = "cd '" + source_dir() + "' && '" CS_COLDSTART_BIN "' " + args + " >" +
                          (output.empty() ? std::string("/dev/null") : "'" + output + "'") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Starts the binary with `args` from the source dir in the background, stdout and stderr to
/// `output`, `env` ("NAME=value ...") added to its environment. Returns its pid (the shell execs
/// the binary, so this is the coldstart process itself).
inline pid_t start_coldstart(const std::string& args, const std::string& output,
                      const std::string& env = "") {
  const std::string cmd = "cd '" + source_dir() + "' && exec env " + env + " '" CS_COLDSTART_BIN
                          "' " + args + " >'" + output + "' 2>&1";
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  pid_t pid = -1;
  if (::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0)
    return -1;
  return pid;
}

/// The exit status of `pid`; 256 + N when signal N ended it (it did not exit by itself).
inline int wait_status(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 256 + WTERMSIG(status);
}

/// The children of `pid` now (Linux /proc/<pid>/task/<pid>/children).
inline std::vector<pid_t> children_of(pid_t pid) {
  // Each thread lists the children it started (--jobs starts them from worker threads).
  std::vector<pid_t> out;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const std::string& t : paths::directory_entries(tasks).value_or(std::vector<std::string>{})) {
    std::ifstream in(tasks + "/" + t + "/children");
    for (long p; in >> p;) out.push_back(static_cast<pid_t>(p));
  }
  return out;
}

/// True when `pid` is gone or a zombie (it runs nothing).
inline bool gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!stat || !std::getline(stat, line)) return true;
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'Z' ||
         line[close + 2] == 'X';
}

/// Polls `done` every 10 ms for up to `seconds`; its last answer.
template <typename F>
inline bool within(double seconds, F done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

/// The names in directory `dir` (without "." and "..").
inline std::vector<std::string> names_in(const std::string& dir) {
  return paths::directory_entries(dir).value_or(std::vector<std::string>{});
}

/// The results in a JSON file being written by a run; none while it does not exist yet.
inline std::vector<StrategyResult> results_so_far(const std::string& json) {
  try {
    std::vector<StrategyResult> out;
    for (const auto& run : cli::read_any_results(json))
      out.insert(out.end(), run.results.begin(), run.results.end());
    return out;
  } catch (const std::exception&) {
    return {};
  }
}

class ReplayE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(source_dir().empty()) << "COLDSTART_SOURCE_DIR is not set";
    dir_ = paths::make_temp_dir("cs-e2e-");
  }
  void TearDown() override { paths::remove_tree(dir_); }

  /// Results by "strategy [variant]".
  std::map<std::string, StrategyResult> replay(const std::string& scenario,
                                               const std::string& extra = "") {
    const std::string json = paths::join(dir_, "r.json");
    const int rc = run_coldstart("replay " + scenario +
                                 " --device compile-only --arch sm_90 --json " + json + " " + extra);
    EXPECT_EQ(rc, 0) << "a reproduced crash is a result: exit status 0";
    std::map<std::string, StrategyResult> by;
    for (const auto& run : cli::read_any_results(json))
      for (const auto& r : run.results) by[r.strategy + " [" + r.variant + "]"] = r;
    return by;
  }

  /// Runs `coldstart replay <args> --device compile-only --json FILE` and returns FILE's JSON
  /// (null, with a test failure, when the exit status is not 0 or no file was written); the
  /// command's output is in last_output_.
  nlohmann::json replay_json(const std::string& args) {
    const std::string json = paths::join(dir_, "r.json"), out = paths::join(dir_, "out.txt");
    const int rc = run_coldstart("replay " + args + " --device compile-only --json " + json, out);
    last_output_ = read_text(out);
    EXPECT_EQ(rc, 0) << last_output_;
    if (rc != 0) return nullptr;
    try {
      return nlohmann::json::parse(read_text(json));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "results file: " << e.what();
      return nullptr;
    }
  }

  std::string dir_;
  std::string last_output_;  ///< the output of the last replay_json command
};

inline std::string mb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace coldstart::e2e
