// End to end: the `coldstart` binary replays both TurboQuant scenarios in compile-only mode (NVRTC
// compiles for real, nothing launches), and the results file must show the outcomes the
// scenarios exist to reproduce, with workspace sizes equal to vLLM's formulas.
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

namespace coldstart {
namespace {

std::string source_dir() {
  const char* d = std::getenv("COLDSTART_SOURCE_DIR");
  return d ? d : "";
}

/// Runs the binary with `args` (from the source dir), returns its exit status; its stdout and
/// stderr go to `output` when given.
int run_coldstart(const std::string& args, const std::string& output = "") {
  const std::string cmd = "cd '" + source_dir() + "' && '" CS_COLDSTART_BIN "' " + args + " >" +
                          (output.empty() ? std::string("/dev/null") : "'" + output + "'") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Starts the binary with `args` from the source dir in the background, stdout and stderr to
/// `output`, `env` ("NAME=value ...") added to its environment. Returns its pid (the shell execs
/// the binary, so this is the coldstart process itself).
pid_t start_coldstart(const std::string& args, const std::string& output,
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
int wait_status(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 256 + WTERMSIG(status);
}

/// The children of `pid` now (Linux /proc/<pid>/task/<pid>/children).
std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (long p; in >> p;) out.push_back(static_cast<pid_t>(p));
  return out;
}

/// True when `pid` is gone or a zombie (it runs nothing).
bool gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!stat || !std::getline(stat, line)) return true;
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'Z' ||
         line[close + 2] == 'X';
}

/// Polls `done` every 10 ms for up to `seconds`; its last answer.
template <typename F>
bool within(double seconds, F done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

/// The names in directory `dir` (without "." and "..").
std::vector<std::string> names_in(const std::string& dir) {
  return paths::directory_entries(dir).value_or(std::vector<std::string>{});
}

/// The results in a JSON file being written by a run; none while it does not exist yet.
std::vector<StrategyResult> results_so_far(const std::string& json) {
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

std::string mb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

TEST_F(ReplayE2E, FirstDecodeCrashesWithoutWarmupAndTheWarmersFixIt) {
  auto by = replay("scenarios/qwen3-8b-turboquant.yaml");
  const std::string pw = " [cudagraph_mode=piecewise]";
  ASSERT_EQ(by.size(), 10u);
  const StrategyResult& none = by.at("none" + pw);
  EXPECT_EQ(none.outcome, Outcome::kCrash);
  EXPECT_EQ(none.failed_phase.value_or(""), "first_decode");
  ASSERT_TRUE(none.error.has_value());
  EXPECT_EQ(none.error->rfind("Workspace is locked but allocation from", 0), 0u) << *none.error;
  // Batch-1 decode scratch as vLLM sizes it: Hq 32, D 128, 32 splits.
  EXPECT_NE(none.error->find("requires " + mb(tq::decode_workspace_bytes(1, 32, 128)) +
                             " MB, current size is 0.00 MB"),
            std::string::npos)
      << *none.error;
  EXPECT_FALSE(none.hot_path_compiles.empty());
  EXPECT_FALSE(none.ttft_ms.has_value()) << "compile-only: no invented times";

  const StrategyResult& decode = by.at("tq-decode-warmup" + pw);
  EXPECT_EQ(decode.outcome, Outcome::kOk);
  EXPECT_TRUE(decode.hot_path_compiles.empty());
  EXPECT_GT(decode.startup_compiles, 0);

  const StrategyResult& reserve = by.at("tq-reserve-max" + pw);
  EXPECT_EQ(reserve.outcome, Outcome::kOk);
  std::map<std::string, int> kernels;
  for (const auto& c : reserve.hot_path_compiles) ++kernels[c.kernel];
  EXPECT_EQ(kernels.count("tq_cache_store"), 1u);
  EXPECT_EQ(kernels.count("tq_decode_stage1"), 1u);
  EXPECT_EQ(kernels.count("tq_decode_stage2"), 1u);
  EXPECT_EQ(reserve.startup_compiles, 0);

  for (const char* s : {"both", "all"}) {
    const StrategyResult& r = by.at(s + pw);
    EXPECT_EQ(r.outcome, Outcome::kOk) << s;
    EXPECT_TRUE(r.hot_path_compiles.empty()) << s;
  }
  // With decode graphs captured (attention inside), the capture itself compiles the decode path.
  EXPECT_EQ(by.at("none [cudagraph_mode=full_and_piecewise]").outcome, Outcome::kOk);
}

TEST_F(ReplayE2E, ContinuationPrefillOutgrowsTheDecodeWarmersWorkspace) {
  auto by = replay("scenarios/qwen3-8b-turboquant-long-prompt.yaml");
  const std::string pw = " [cudagraph_mode=piecewise]";
  // Continuation over 2048 cached tokens: two bf16 [Hk=8, 2048, D=128] buffers.
  const std::string required = "requires " +
                               mb(tq::continuation_workspace_bytes(8, 2048, 128)) + " MB";
  for (const char* s : {"none", "tq-decode-warmup"}) {
    const StrategyResult& r = by.at(s + pw);
    EXPECT_EQ(r.outcome, Outcome::kCrash) << s;
    EXPECT_EQ(r.failed_phase.value_or(""), "continuation_prefill") << s;
    ASSERT_TRUE(r.error.has_value());
    EXPECT_NE(r.error->find(required), std::string::npos) << *r.error;
  }
  // The decode warmer reserved only what a batch-1 decode needs.
  EXPECT_NE(by.at("tq-decode-warmup" + pw).error->find(
                "current size is " + mb(tq::decode_workspace_bytes(1, 32, 128)) + " MB"),
            std::string::npos);
  for (const char* s : {"tq-reserve-max", "both", "all"}) {
    EXPECT_EQ(by.at(s + pw).outcome, Outcome::kOk) << s;
  }
}

TEST_F(ReplayE2E, JitMonitorErrorTurnsAHotPathCompileIntoACrash) {
  auto by = replay("scenarios/qwen3-8b-turboquant.yaml",
                   "--strategy tq-reserve-max --strategy both --set cudagraph_mode=piecewise "
                   "--jit-monitor error");
  ASSERT_EQ(by.size(), 2u);
  const StrategyResult& reserve = by.begin()->second.strategy == "tq-reserve-max"
                                      ? by.begin()->second
                                      : std::next(by.begin())->second;
  EXPECT_EQ(reserve.outcome, Outcome::kCrash);
  EXPECT_EQ(reserve.failed_phase.value_or(""), "prefill");
  EXPECT_NE(reserve.error.value_or("").find("tq_cache_store"), std::string::npos);
}

TEST_F(ReplayE2E, AScenarioThatExcludesTheDeviceIsSkippedWithTheReason) {
  auto by = replay("scenarios/qwen3-8b-turboquant.yaml",
                   "--strategy none --set cudagraph_mode=piecewise --set 'archs=[sm_100]'");
  ASSERT_EQ(by.size(), 1u);
  const StrategyResult& r = by.begin()->second;
  EXPECT_EQ(r.outcome, Outcome::kSkipped);
  ASSERT_TRUE(r.skipped.has_value());
  EXPECT_NE(r.skipped->find("sm_90"), std::string::npos);
  EXPECT_TRUE(r.phases.empty()) << "nothing ran";
}

TEST_F(ReplayE2E, BadInputExitsTwoAndWritesNothing) {
  const std::string json = paths::join(dir_, "bad.json");
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --set engine.block_size=17 --json " + json), 2);
  EXPECT_EQ(run_coldstart("replay scenarios/does-not-exist.yaml --json " + json), 2);
  EXPECT_FALSE(paths::exists(json));
  // An output that is a directory, or one of the run's inputs, is refused before anything runs
  // (the input stays as it was).
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-bf16.yaml --device compile-only --json " + dir_), 2);
  const std::string before = read_text(source_dir() + "/fixtures/hf-configs/qwen3-8b.json");
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-bf16.yaml --device compile-only "
                          "--md fixtures/hf-configs/qwen3-8b.json"),
            2);
  EXPECT_EQ(read_text(source_dir() + "/fixtures/hf-configs/qwen3-8b.json"), before);
  // --host-split times CUDA calls: compile-only mode makes none. A symbolic link as an output
  // would be replaced by the rename: refused unless --force.
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-bf16.yaml --device compile-only --host-split"), 2);
  const std::string link = paths::join(dir_, "link.md");
  ASSERT_EQ(::symlink(json.c_str(), link.c_str()), 0);
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-bf16.yaml --device compile-only --md " + link), 2);
  EXPECT_FALSE(paths::exists(json));
  ::unlink(link.c_str());
  // A file name with terminal escapes is quoted escaped in the error, never sent raw.
  const std::string out = paths::join(dir_, "escaped.txt");
  EXPECT_EQ(run_coldstart("replay \"$(printf 'scenarios/\\033]0;title\\007.yaml')\"", out), 2);
  const std::string said = read_text(out);
  EXPECT_EQ(said.find('\x1b'), std::string::npos) << said;
  EXPECT_NE(said.find("\\x1B]0;title\\x07.yaml"), std::string::npos) << said;
  // std::regex recurses per nested group: a deep --filter is refused, not a stack overflow.
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-bf16.yaml --device compile-only --filter '" +
                          std::string(5000, '(') + std::string(5000, ')') + "'"),
            2);
}

TEST_F(ReplayE2E, WhatTheHarnessCannotReplayExitsTwoBeforeAnythingRuns) {
  const std::string json = paths::join(dir_, "refused.json"), out = paths::join(dir_, "out.txt");
  struct Case {
    std::string args, key;
    std::string scenario = "scenarios/qwen3-8b-turboquant.yaml";
  };
  const std::string next = "scenarios/qwen3-next-gdn.yaml";
  const std::string nano = "scenarios/nemotron-3-nano.yaml";
  const std::string super = "scenarios/nemotron-3-super-turboquant.yaml";
  const std::string v4 = "scenarios/deepseek-v4-flash.yaml";
  const std::vector<Case> cases = {
      {"--set engine.kv_cache_dtype=fp8_e5m2", "key 'engine.kv_cache_dtype'"},
      {"--set cudagraph_mode=full", "key 'engine.cudagraph_mode'"},
      {"--set model.overrides.mlp_hidden_act=silu", "key 'model.mlp_hidden_act'", nano},
      // Mamba2 shapes the kernels lack, and caches the replay does not size, before anything runs.
      {"--set model.overrides.mamba_num_heads=-4", "key 'model.mamba_num_heads'", nano},
      {"--set model.overrides.chunk_size=1024", "key 'model.chunk_size'", nano},
      {"--set model.overrides.moe_intermediate_size=0", "key 'model.moe_intermediate_size'", nano},
      {"--set model.overrides.mamba_ssm_cache_dtype=float16", "key 'model.mamba_ssm_cache_dtype'",
       nano},
      {"--set \"model.overrides.hybrid_override_pattern='--------'\"",
       "key 'model.hybrid_override_pattern'", nano},
      // 8 groups neither split over 16 ranks nor are 1: vLLM's MambaMixer2 asserts.
      {"--set engine.tensor_parallel_size=16 --set model.overrides.mamba_num_heads=128",
       "key 'model.n_groups'", super},
      // Shapes the GDN / fused-MoE kernels lack are refused, each under its own key.
      {"--set model.overrides.linear_conv_kernel_dim=5", "key 'model.linear_conv_kernel_dim'", next},
      {"--set model.overrides.linear_value_head_dim=256", "key 'model.linear_value_head_dim'", next},
      {"--set model.overrides.num_experts_per_tok=600", "key 'model.num_experts_per_tok'", next},
      // Sizes the fused-MoE GEMMs cannot launch: a 32-bit expert stride, a grid past 2^31 - 1.
      {"--set model.overrides.moe_intermediate_size=2147483647",
       "key 'model.moe_intermediate_size'", next},
      {"--set model.overrides.moe_latent_size=2147483647", "key 'model.moe_latent_size'", super},
      {"--set engine.max_num_batched_tokens=4194304 --set engine.fused_moe_chunk_size=1048576 "
       "--set model.overrides.moe_intermediate_size=524287",
       "key 'engine.max_num_batched_tokens'", next},
      {"--set model.overrides.num_experts_per_tok=64", "key 'model.num_experts_per_tok'", nano},
      // DeepSeek V4: what the DeepGEMM kernels or the replay do not take.
      {"--set engine.block_size=16", "key 'engine.block_size'", v4},
      {"--set cudagraph_mode=full_and_piecewise", "key 'engine.cudagraph_mode'", v4},
      {"--set engine.tensor_parallel_size=2", "key 'engine.tensor_parallel_size'", v4},
      {"--set model.overrides.index_n_heads=48", "key 'model.index_n_heads'", v4},
      {"--set model.overrides.hc_mult=6", "key 'model.hc_mult'", v4},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(run_coldstart("replay " + c.scenario + " --device compile-only " + c.args +
                                " --json " + json,
                            out),
              2)
        << c.args;
    const std::string text = read_text(out);
    EXPECT_NE(text.find(c.key), std::string::npos) << c.args << "\n" << text;
    EXPECT_EQ(text.find("crash"), std::string::npos) << "refused, not run: " << text;
    EXPECT_FALSE(paths::exists(json)) << c.args;
  }  // A watchdog limit past 7 days used to overflow and time every strategy out at once.
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device compile-only "
                          "--timeout 1e10 --json " + json, out),
            2);
  EXPECT_NE(read_text(out).find("--timeout must be between 0"), std::string::npos) << read_text(out);
}

TEST_F(ReplayE2E, CompileOnlyTargetsSetArchAndSmCountAndKeepTheOutcomes) {
  auto outcomes = [](const std::map<std::string, StrategyResult>& by) {
    std::map<std::string, std::string> o;
    for (const auto& [k, r] : by) o[k] = outcome_name(r.outcome) + r.failed_phase.value_or("");
    return o;
  };
  const auto sm90 = outcomes(replay("scenarios/qwen3-8b-turboquant.yaml"));
  struct T {
    std::string name;
    int sm, sm_count;
  };
  for (const T& t : {T{"b200", 100, 148}, T{"rtx-a4000", 86, 48}}) {
    if (!jit::nvrtc_can_target("sm_" + std::to_string(t.sm))) {
      // An older toolkit (CUDA 11.8) has no sm_100: the target is refused (exit 2), as
      // NvrtcTargetsItCannotCompileForAreRefusedByName checks; the others are still compared.
      std::cout << "[ NOTE ] " << t.name << " not replayed: "
                << jit::nvrtc_cannot_target_text("sm_" + std::to_string(t.sm)) << "\n";
      continue;
    }
    const std::string json = paths::join(dir_, t.name + ".json");
    ASSERT_EQ(run_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device compile-only "
                            "--target " + t.name + " --json " + json),
              0)
        << t.name;
    std::map<std::string, StrategyResult> by;
    const auto runs = cli::read_any_results(json);
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].meta.sm, t.sm) << t.name;
    EXPECT_EQ(runs[0].meta.sm_count, t.sm_count) << t.name;
    for (const auto& r : runs[0].results) {
      by[r.strategy + " [" + r.variant + "]"] = r;
      for (const auto& c : r.hot_path_compiles)
        EXPECT_NE(c.key.find("@sm_" + std::to_string(t.sm)), std::string::npos) << c.key;
    }
    EXPECT_EQ(outcomes(by), sm90) << t.name;
  }
}

TEST_F(ReplayE2E, JitMonitorWarnLinesNameTheirStrategy) {
  const std::string out = paths::join(dir_, "warn.txt");
  ASSERT_EQ(run_coldstart("replay scenarios/qwen3-8b-bf16.yaml --device compile-only --strategy none "
                          "--set cudagraph_mode=piecewise --jit-monitor warn",
                          out),
            0);
  const std::string text = read_text(out);
  EXPECT_NE(text.find("  none: coldstart: hot-path compile of paged_prefill in phase prefill"),
            std::string::npos)
      << text;
}

/// --check after a --set that replaced the matrix axis: the rules about the replaced variants are
/// listed as not checked (they exited 3 as unmet before), and CI logs get one plain progress
/// line per strategy start and end.
TEST_F(ReplayE2E, CheckAfterASetOverTheAxisListsRulesNotCheckedAndPrintsPlainProgress) {
  const std::string out = paths::join(dir_, "out.txt"), json = paths::join(dir_, "r.json");
  const int rc = run_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device compile-only "
                               "--strategy none --set cudagraph_mode=piecewise --check --json " +
                                   json,
                               out);
  const std::string text = read_text(out);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_EQ(text.find("UNMET"), std::string::npos) << text;
  EXPECT_NE(text.find("not checked: rule at"), std::string::npos) << text;
  EXPECT_NE(text.find("[1/1] none: started"), std::string::npos) << text;
  EXPECT_NE(text.find("[1/1] none: crash in first_decode in "), std::string::npos) << text;
  // report prints the rules as the run recorded them.
  const std::string again = paths::join(dir_, "again.txt");
  EXPECT_EQ(run_coldstart("report " + json, again), 0);
  EXPECT_NE(read_text(again).find("expectations of qwen3-8b-turboquant (as the run checked them): "),
            std::string::npos)
      << read_text(again);
  EXPECT_NE(read_text(again).find(" 0 unmet, "), std::string::npos) << read_text(again);
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device compile-only "
                          "--strategy none --progress sometimes"),
            2);
}

/// Every hot-path compile names the request, wave, scheduler step and batch that paid for it,
/// phases are numbered by the scenario's request index, and a crash names its step.
TEST_F(ReplayE2E, HotPathCompilesAndCrashesNameTheirRequestStepAndBatch) {
  const nlohmann::json j = replay_json("scenarios/qwen3-8b-turboquant.yaml --strategy none "
                                        "--strategy tq-reserve-max --set cudagraph_mode=piecewise");
  ASSERT_FALSE(j.is_null());
  int stamped = 0;
  for (const auto& r : j.at("results")) {
    for (const auto& e : r.at("hot_path_compiles")) {
      ASSERT_TRUE(e.contains("request")) << e.dump();
      EXPECT_EQ(e.at("request"), 0) << e.dump();
      EXPECT_EQ(e.at("wave"), 0) << e.dump();
      EXPECT_GE(e.at("batch").at("tokens").get<int>(), 1) << e.dump();
      EXPECT_EQ(e.at("batch").at("seqs"), 1) << e.dump();
      ++stamped;
    }
    for (const auto& e : r.at("startup_compile_list")) EXPECT_FALSE(e.contains("request"));
    if (r.at("outcome") == "crash") {
      EXPECT_EQ(r.at("failed_step").at("request"), 0);
      EXPECT_EQ(r.at("failed_step").at("batch_tokens"), 1);  // the first decode step
    }
    // The steady request is the scenario's second request (index 1) and is numbered so.
    for (const auto& p : r.at("phases"))
      if (p.at("request").get<int>() >= 0) EXPECT_LE(p.at("request").get<int>(), 1);
  }
  EXPECT_GE(stamped, 2);
  EXPECT_NE(last_output_.find("crash in first_decode (request 0, step 1: 1 sequence, 1 token, "
                               "as graph piecewise@1)"),
            std::string::npos)
      << last_output_;
}

/// A workspace that grows after capture under workspace_policy grow: the first decode replays a
/// full decode graph that holds the released block, a crash that names the graph, the buffer, its
/// sizes and the step that moved it, before anything launches (compile-only mode launches
/// nothing even under --graph-replay-stale run); the result's ledger lists the move.
TEST_F(ReplayE2E, StaleGraphReplayIsACrashNamingGraphBufferAndMove) {
  const nlohmann::json j = replay_json("scenarios/qwen3-8b-turboquant-workspace-policies.yaml "
                                        "--strategy none --set workspace_policy=grow "
                                        "--graph-replay-stale run");
  ASSERT_FALSE(j.is_null());
  ASSERT_EQ(j.at("results").size(), 1u);
  const auto& r = j.at("results").at(0);
  EXPECT_EQ(r.at("outcome"), "crash");
  EXPECT_EQ(r.at("failed_phase"), "first_decode");
  const std::string error = r.at("error");
  EXPECT_NE(error.find("the full decode graph at capture size 1"), std::string::npos) << error;
  EXPECT_NE(error.find("continuation_prefill (request 0, step 1) reallocated it at 8.00 MB"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("not launched (compile-only mode)"), std::string::npos) << error;
  const auto& ledger = r.at("graph_ledger");
  EXPECT_GT(ledger.at("graphs").get<int>(), 1);
  ASSERT_EQ(ledger.at("stale_replays").size(), 1u);
  EXPECT_EQ(ledger.at("stale_replays").at(0).at("buffer"), "the workspace (slot 0)");
  EXPECT_EQ(ledger.at("stale_replays").at(0).at("new_bytes"), 8 << 20);
  // The workspace's last move is the continuation prefill's, the one that left the graph stale.
  bool moved = false;
  for (const auto& b : ledger.at("moved_buffers"))
    if (b.at("name") == "the workspace (slot 0)")
      moved = b.at("moves").back().at("in") == "continuation_prefill (request 0, step 1)";
  EXPECT_TRUE(moved) << ledger.dump();
  EXPECT_EQ(ledger.at("unmoved_buffers").at("count").get<int>() > 0, true) << ledger.dump();
}

/// The binary records the commit it was built from, read at build time (a stale configure-time
/// sha stamped results of later commits): --version names the source tree's HEAD, or "unknown"
/// where the tree has no git.
TEST_F(ReplayE2E, VersionNamesTheCommitTheBinaryWasBuiltFrom) {
  const std::string out = paths::join(dir_, "out.txt"), head = paths::join(dir_, "head.txt");
  ASSERT_EQ(run_coldstart("--version", out), 0) << read_text(out);
  const std::string version = read_text(out);
  const std::string cmd = "git -C '" + source_dir() + "' rev-parse --short=12 HEAD >'" + head +
                          "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    EXPECT_NE(version.find("(unknown)"), std::string::npos) << version;
    return;
  }
  std::string sha = read_text(head);
  while (!sha.empty() && std::isspace(static_cast<unsigned char>(sha.back()))) sha.pop_back();
  ASSERT_EQ(sha.size(), 12u) << sha;
  EXPECT_NE(version.find("(" + sha), std::string::npos)
      << version << " does not name HEAD " << sha << " (rebuild after committing)";
}

/// max_cudagraph_capture_size 2 leaves a three-sequence decode without a graph: it runs eagerly
/// and asks the locked workspace for more, a crash whose failed step says it ran eagerly and
/// why; at 8 the same decode replays the size-4 graph and nothing fails.
TEST_F(ReplayE2E, DecodeAboveTheLargestCaptureSizeRunsEagerlyAndSaysSo) {
  const nlohmann::json j = replay_json("scenarios/qwen3-8b-turboquant-capture-size-limit.yaml "
                                        "--strategy none");
  ASSERT_FALSE(j.is_null());
  ASSERT_EQ(j.at("results").size(), 2u);
  for (const auto& r : j.at("results")) {
    const bool limited = r.at("variant") == "max_cudagraph_capture_size=2";
    EXPECT_EQ(r.at("capture_policy").at("largest_piecewise_size"), limited ? 2 : 8)
        << r.at("variant");
    EXPECT_EQ(r.at("capture_policy").at("largest_full_decode_size"), limited ? 2 : 4)
        << r.at("variant");
    const auto& schedule = r.at("schedule");
    ASSERT_GE(schedule.size(), 2u);
    EXPECT_EQ(schedule.at(1).at("phase"), "first_decode");
    EXPECT_EQ(schedule.at(1).at("num_tokens"), 3);
    EXPECT_EQ(schedule.at(1).at("graph"), limited ? "eager" : "full@4");
    if (!limited) {
      EXPECT_EQ(r.at("outcome"), "ok");
      continue;
    }
    EXPECT_EQ(r.at("outcome"), "crash");
    EXPECT_EQ(r.at("failed_step").at("graph"), "eager");
    const std::string error = r.at("error");
    EXPECT_EQ(error.rfind("Workspace is locked but allocation from", 0), 0u) << error;
  }
  EXPECT_NE(last_output_.find("crash in first_decode (request 0, step 1: 3 sequences, 3 tokens, "
                               "run eagerly: 3 tokens, more than the largest piecewise capture "
                               "size, 2)"),
            std::string::npos)
      << last_output_;
  // A prefill under full_decode_only runs eagerly because that mode never captures one, whatever
  // its size.
  const std::string out = paths::join(dir_, "out.txt");
  ASSERT_EQ(run_coldstart("replay scenarios/qwen3-8b-turboquant-long-prompt.yaml --device "
                          "compile-only --strategy none --set cudagraph_mode=full_decode_only",
                          out),
            0)
      << read_text(out);
  EXPECT_NE(read_text(out).find("run eagerly: a prefill or mixed step, which full_decode_only "
                                "never captures)"),
            std::string::npos)
      << read_text(out);
}

/// Lazy capture (TensorRT-LLM's): no full decode graph at startup; each size is captured on the
/// first decode step that needs it, recorded with its request and step; a graph captured early
/// goes stale when a later, larger step resizes the workspace. With a locking workspace it is
/// refused before anything runs.
TEST_F(ReplayE2E, LazyCaptureCapturesOnFirstUseAndIsRefusedWithALockingWorkspace) {
  const nlohmann::json j = replay_json("scenarios/qwen3-8b-turboquant-lazy-capture.yaml "
                                        "--strategy none");
  ASSERT_FALSE(j.is_null());
  ASSERT_EQ(j.at("results").size(), 2u);
  for (const auto& r : j.at("results")) {
    const auto& cp = r.at("capture_policy");
    if (r.at("variant") == "cudagraph_capture=startup") {
      EXPECT_EQ(r.at("outcome"), "ok");
      EXPECT_EQ(r.at("graphs_captured"), 3);
      EXPECT_FALSE(cp.contains("lazy_captures")) << cp.dump();
      continue;
    }
    EXPECT_EQ(cp.at("lazy_sizes"), nlohmann::json::array({1, 2, 4}));
    const auto& lazy = cp.at("lazy_captures");
    ASSERT_EQ(lazy.size(), 2u) << cp.dump();
    EXPECT_EQ(lazy.at(0).at("size"), 1);
    EXPECT_EQ(lazy.at(0).at("phase"), "first_decode");
    EXPECT_EQ(lazy.at(0).at("step"), 1);
    EXPECT_EQ(lazy.at(1).at("size"), 2);
    EXPECT_EQ(lazy.at(1).at("step"), 3);
    EXPECT_TRUE(lazy.at(0).at("ms").is_null());  // compile-only: no time is invented
    EXPECT_EQ(r.at("graphs_captured"), 2);
    EXPECT_EQ(r.at("outcome"), "crash");
    // Nothing was captured at startup, so the first decode compiled its kernels on the hot path.
    bool decode_compiled = false;
    for (const auto& c : r.at("hot_path_compiles"))
      decode_compiled |= c.at("kernel") == "tq_decode_stage1" && c.at("phase") == "first_decode";
    EXPECT_TRUE(decode_compiled) << r.at("hot_path_compiles").dump();
    const std::string error = r.at("error");
    EXPECT_EQ(error.rfind("Stale CUDA graph replay: the full decode graph at capture size 1", 0), 0u)
        << error;
  }
  const std::string out = paths::join(dir_, "out.txt");
  const int rc = run_coldstart("replay scenarios/qwen3-8b-turboquant-lazy-capture.yaml "
                               "--device compile-only --set workspace_policy=lock",
                               out);
  EXPECT_EQ(rc, 2) << read_text(out);
  EXPECT_NE(read_text(out).find("key 'engine.cudagraph_capture': lazy capture with "
                                "workspace_policy lock is no engine's combination"),
            std::string::npos)
      << read_text(out);
}

/// On a GPU, --graph-replay-stale run launches the stale graph, synchronizes and says whether
/// the device faulted; the default stops before the launch.
TEST_F(ReplayE2E, GpuStaleGraphReplayRunReportsWhetherTheDeviceFaulted) {
  const std::string json = paths::join(dir_, "r.json"), out = paths::join(dir_, "out.txt");
  const int rc = run_coldstart("replay scenarios/qwen3-8b-turboquant-workspace-policies.yaml "
                               "--device cuda --strategy none --set workspace_policy=resize "
                               "--graph-replay-stale run --json " + json,
                               out);
  if (rc == 2 && read_text(out).find("--device cuda") != std::string::npos)
    GTEST_SKIP() << "needs a CUDA GPU and a CUDA libtorch: " << read_text(out);
  ASSERT_EQ(rc, 0) << read_text(out);
  const auto j = nlohmann::json::parse(read_text(json));
  const auto& r = j.at("results").at(0);
  EXPECT_EQ(r.at("outcome"), "crash");
  EXPECT_EQ(r.at("failed_phase"), "first_decode");
  const std::string error = r.at("error");
  EXPECT_NE(error.find("resized it in place to 8.00 MB"), std::string::npos) << error;
  EXPECT_NE(error.find("launched under --graph-replay-stale run: the device"), std::string::npos)
      << error;
  const std::string device = r.at("graph_ledger").at("stale_replays").at(0).at("device");
  EXPECT_EQ(device.rfind("launched under --graph-replay-stale run", 0), 0u) << device;
}

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

TEST_F(ReplayE2E, OverlappingRequestsFormMixedBatchesListedPerStep) {
  auto by = replay("scenarios/qwen3-8b-overlapping-requests.yaml", "--strategy none");
  ASSERT_EQ(by.size(), 1u);
  const nlohmann::json& schedule = by.begin()->second.extra.at("schedule");
  int mixed = 0, max_reqs = 0;
  for (const auto& step : schedule) {
    if (step.at("wave").get<int>() != 0) continue;
    int prefill = 0, decode = 0;
    for (const auto& q : step.at("seqs")) (q.at("kind") == "decode" ? decode : prefill)++;
    EXPECT_EQ(step.at("mixed").get<bool>(), prefill > 0 && decode > 0) << step.dump();
    mixed += step.at("mixed").get<bool>();
    max_reqs = std::max(max_reqs, prefill + decode);
  }
  EXPECT_GE(mixed, 2) << "the second and third requests prefill beside running decodes";
  EXPECT_EQ(max_reqs, 3);
  // The steady request runs alone afterwards.
  for (const auto& step : schedule)
    if (step.at("wave").get<int>() == 1) EXPECT_EQ(step.at("seqs").size(), 1u);
}

/// Qwen3-Next: the hybrid cache layout, which tuned-table entry each token count used and where
/// it first compiled, and the compile keys that separate serving from the GDN warmer.
TEST_F(ReplayE2E, QwenNextHybridLayoutMoeConfigsAndGdnKeys) {
  // With speculative decoding configured the warmer also compiles the fused MTP decode kernel
  // (draft tokens are not replayed, so nothing else changes).
  // (The run's compile memo serves the second strategy's keys, which halves the NVRTC time.)
  auto by = replay("scenarios/qwen3-next-gdn.yaml", "--set engine.num_speculative_tokens=3");
  ASSERT_EQ(by.size(), 2u);
  const StrategyResult& none = by.at("none []");
  const StrategyResult& warm = by.at("qwen-gdn-warmup []");
  // vLLM's hybrid rule: a 544-token attention page (2 * 544 * 2 KV heads * 256 * 2 B) holds one
  // request's GDN state (conv 3 x 8192 bf16 + SSM 32 x 128 x 128 bf16).
  EXPECT_EQ(none.extra.at("block_size_raised").at("to").get<int>(), 544);
  EXPECT_EQ(none.extra.at("kv_cache_plan").at("page_bytes").get<int64_t>(), 2 * 544 * 2 * 256 * 2);
  // Grouped as vLLM's KV cache manager does: group_size 2 (the attention layers), so the six GDN
  // layers form three groups of two, sharing 2 tensors with the attention group.
  EXPECT_EQ(none.extra.at("cache_groups").size(), 4u);
  EXPECT_EQ(none.extra.at("kv_cache_plan").at("tensors").get<int>(), 2);
  // Fused MoE: M = 2048 (the profile run) and the decode capture sizes use their own table
  // entries; the second chunk (952 tokens) takes entry 1024, first used on the hot path.
  std::map<int, nlohmann::json> used;
  for (const auto& u : none.extra.at("model").at("fused_moe_configs")) used[u.at("M").get<int>()] = u;
  ASSERT_TRUE(used.count(2048) && used.count(952) && used.count(1));
  EXPECT_EQ(used[2048].at("first_phase"), "profile_run");
  EXPECT_EQ(used[2048].at("tuning_key"), "M=2048 -> 2048");
  EXPECT_EQ(used[952].at("tuning_key"), "M=952 -> 1024");
  EXPECT_EQ(used[952].at("first_phase"), "continuation_prefill");
  EXPECT_EQ(used[1].at("first_phase"), "graph_capture");
  // The mixed batch (one decode, then a prefill) gathers states through index / mask slices at
  // num_decodes = 1: unaligned pointers, a key of its own, which the warmer compiled at startup.
  std::string mixed_gather;
  for (const auto& c : none.hot_path_compiles)
    if (c.kernel == "mamba_gather_initial_states" && c.phase == "decode") mixed_gather = c.key;
  ASSERT_FALSE(mixed_gather.empty());
  EXPECT_NE(mixed_gather.find(",*i32,*u8,"), std::string::npos) << mixed_gather;
  bool warmed = false;
  for (const auto& c : warm.startup_compile_list)
    warmed |= c.key == mixed_gather && c.phase == "kernel_warmup";
  EXPECT_TRUE(warmed) << "the warmer's unaligned case compiles the mixed batch's key";
  // The warmer's conv1d call has one token: its key differs from serving's in that
  // specialization only, so serving prefills still compile conv1d.
  int conv_hot = 0;
  for (const auto& c : warm.hot_path_compiles) conv_hot += c.kernel == "mamba_causal_conv1d_fwd";
  EXPECT_EQ(conv_hot, 2) << "2048- and 952-token prefills";
  // The seed's MTP request counts on 132 SMs and 32 value heads are 1, 5 and 17; 17 exceeds
  // max_num_seqs (16) and is skipped: two value tiles (32 and 64), two keys, at startup only.
  std::set<std::string> mtp_keys;
  for (const auto& c : warm.startup_compile_list)
    if (c.kernel == "gdn_decode_mtp" && c.phase == "kernel_warmup") mtp_keys.insert(c.key);
  EXPECT_EQ(mtp_keys.size(), 2u);
  for (const auto& c : none.startup_compile_list) EXPECT_NE(c.kernel, "gdn_decode_mtp");
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Nemotron-3-Super at one rank of TP 8 with a TurboQuant KV cache: rank shapes, vLLM's hybrid
/// block size, and the continuation prefill's workspace growth at that block size.
TEST_F(ReplayE2E, NemotronSuperRankShapesBlockSizeAndTurboQuantWorkspace) {
  auto by = replay("scenarios/nemotron-3-super-turboquant.yaml",
                   "--strategy none --strategy tq-decode-warmup "
                   "--set requests.0.prompt_tokens=16384");
  ASSERT_EQ(by.size(), 2u);
  const StrategyResult& none = by.at("none []");
  const nlohmann::json& shapes = none.extra.at("model").at("rank_shapes");
  // 32 query heads / 8, 2 KV heads replicated to 1 per rank; 128 Mamba heads / 8, 8 groups / 8;
  // expert intermediate 2688 / 8.
  EXPECT_EQ(shapes.at("attention").at("q_heads"), 4);
  EXPECT_EQ(shapes.at("attention").at("kv_heads"), 1);
  EXPECT_EQ(shapes.at("mamba2").at("heads"), 16);
  EXPECT_EQ(shapes.at("mamba2").at("groups"), 1);
  const int64_t conv_dim = 16 * 64 + 2 * 1 * 128;
  EXPECT_EQ(shapes.at("mamba2").at("conv_dim"), conv_dim);
  EXPECT_EQ(shapes.at("moe").at("intermediate"), 336);
  // vLLM's hybrid rule: the attention block grows until a page holds one Mamba state page
  // (bf16 conv state (4 - 1) x conv_dim + float32 SSM state 16 x 64 x 128), in multiples of 16;
  // a TurboQuant 4-bit token of one KV head at D 128 takes 134 bytes.
  const int64_t state_page = 3 * conv_dim * 2 + 16 * 64 * 128 * 4;
  const int64_t block = ceil_div(ceil_div(state_page, 134), 16) * 16;
  EXPECT_EQ(block, 3984);
  EXPECT_EQ(none.extra.at("block_size_raised").at("to").get<int64_t>(), block);
  // Capture locked the batch-4 decode scratch (4 query heads on this rank); the first
  // continuation chunk (2048 cached tokens) needs one block's K and V.
  EXPECT_EQ(none.workspace.locked_bytes, tq::decode_workspace_bytes(4, 4, 128));
  EXPECT_EQ(none.outcome, Outcome::kCrash);
  EXPECT_NE(none.error.value_or("").find(
                "requires " + mb(tq::continuation_workspace_bytes(1, block, 128)) + " MB"),
            std::string::npos)
      << none.error.value_or("");
  // The decode warmer's reservation covers that one block; the second continuation chunk (4096
  // cached tokens) needs two.
  const StrategyResult& dec = by.at("tq-decode-warmup []");
  EXPECT_EQ(dec.outcome, Outcome::kCrash);
  EXPECT_EQ(dec.failed_phase.value_or(""), "continuation_prefill");
  EXPECT_NE(dec.error.value_or("").find(
                "requires " + mb(tq::continuation_workspace_bytes(1, 2 * block, 128)) +
                " MB, current size is " + mb(tq::continuation_workspace_bytes(1, block, 128))),
            std::string::npos)
      << dec.error.value_or("");
}

/// Nemotron-3-Nano: the continuation chunk's SSD chain is a second specialization
/// (HAS_INITSTATES), the conv1d warmer's one-token call never reaches the prefill's keys, and the
/// run's compile memo serves the second strategy's compiles with the first's measured times.
TEST_F(ReplayE2E, NemotronNanoSsdSpecializationsConvWarmerAndCompileMemo) {
  // This run's own memo: the suite's shared one would serve the first strategy too.
  unsetenv("COLDSTART_COMPILE_MEMO_DIR");
  auto by = replay("scenarios/nemotron-3-nano.yaml",
                   "--strategy none --strategy mamba-conv1d-warmup");
  ASSERT_EQ(by.size(), 2u);
  const StrategyResult& none = by.at("none []");
  const StrategyResult& conv = by.at("mamba-conv1d-warmup []");
  // bf16 conv state 3 x 6144 + float32 SSM state 64 x 64 x 128 over a bf16 token of 2 KV heads.
  const int64_t state_page = 3 * 6144 * 2 + 64 * 64 * 128 * 4;
  EXPECT_EQ(none.extra.at("block_size_raised").at("to").get<int64_t>(),
            ceil_div(ceil_div(state_page, 2 * 128 * 2 * 2), 16) * 16);
  int with_init = 0, without_init = 0;
  for (const auto& c : none.hot_path_compiles) {
    if (c.kernel != "mamba_ssd_chunk_scan") continue;
    const bool init = c.key.find("HAS_INITSTATES=1") != std::string::npos;
    EXPECT_EQ(c.phase, init ? "continuation_prefill" : "prefill") << c.key;
    (init ? with_init : without_init)++;
  }
  EXPECT_GT(with_init, 0);
  EXPECT_EQ(with_init, without_init) << "the same autotune candidates for both";
  std::set<std::string> served;
  for (const auto& c : none.hot_path_compiles)
    if (c.kernel == "mamba_causal_conv1d_fwd") served.insert(c.key);
  int warmed = 0;
  for (const auto& c : conv.startup_compile_list) {
    if (c.kernel != "mamba_causal_conv1d_fwd" || c.phase != "kernel_warmup") continue;
    ++warmed;
    EXPECT_EQ(served.count(c.key), 0u) << "warmed a key serving never uses: " << c.key;
  }
  EXPECT_GT(warmed, 0);
  // Each first-request autotuning is listed with its candidates, and its compile time is that of
  // the candidates' compile records; nothing is benchmarked in compile-only mode.
  ASSERT_TRUE(none.extra.contains("autotunes"));
  std::set<std::string> tuned;
  for (const auto& a : none.extra.at("autotunes")) {
    const std::string kernel = a.at("kernel"), key = a.at("tuning_key"), phase = a.at("phase");
    tuned.insert(kernel);
    EXPECT_TRUE(a.at("hot_path").get<bool>()) << kernel;
    EXPECT_TRUE(a.at("benchmark_ms").is_null()) << kernel;
    int n = 0;
    double ms = 0;
    for (const auto& c : none.hot_path_compiles) {
      if (c.kernel == kernel && c.tuning_key == key && c.phase == phase) {
        ++n;
        ms += c.compile_ms;
      }
    }
    EXPECT_EQ(a.at("num_candidates").get<int>(), n) << kernel << " " << phase;
    EXPECT_EQ(a.at("candidate_ms").size(), static_cast<size_t>(n)) << kernel;
    EXPECT_NEAR(a.at("compile_ms").get<double>(), ms, 1e-3) << kernel;
    EXPECT_GE(a.at("tune_ms").get<double>(), a.at("compile_ms").get<double>()) << kernel;
  }
  EXPECT_EQ(tuned, (std::set<std::string>{"mamba_ssd_cumsum", "mamba_ssd_chunk_state",
                                          "mamba_ssd_state_passing", "mamba_ssd_bmm",
                                          "mamba_ssd_chunk_scan"}));
  // Compile memo: every key the second strategy compiles after startup, none compiled first.
  std::map<std::string, double> first_ms;
  for (const auto& c : none.hot_path_compiles) {
    EXPECT_FALSE(c.reused);
    first_ms[c.key] = c.compile_ms;
  }
  ASSERT_EQ(conv.hot_path_compiles.size(), none.hot_path_compiles.size());
  for (const auto& c : conv.hot_path_compiles) {
    EXPECT_TRUE(c.reused) << c.key;
    ASSERT_TRUE(first_ms.count(c.key)) << c.key;
    EXPECT_NEAR(c.compile_ms, first_ms[c.key], 1e-3) << c.key;
  }
}

/// The H100 and the H200 are both sm_90, but vLLM picks fused_moe tiles from a tuned table named
/// for the device: with every Mamba warmer, the H100's table leaves two more MoE GEMMs cold than
/// the H200's (measured on both GPUs at 42c08e7). The scenario's `device:` rules hold for the
/// --target profile's device name in compile-only mode, and only there.
TEST_F(ReplayE2E, NemotronNanoDeviceRulesFollowTheTargetsTunedTable) {
  struct Case {
    const char* target;
    size_t compiles, moe_tiles;  // conv1d twice, the paged prefill, then w13 + w2 per MoE tile
    const char* met;             // the device of the rule that applies
  };
  for (const Case& c : {Case{"h100", 7, 2, "h100"}, Case{"h200", 5, 1, "h200"}}) {
    SCOPED_TRACE(c.target);
    const std::string out = paths::join(dir_, std::string(c.target) + ".txt"),
                      json = paths::join(dir_, std::string(c.target) + ".json");
    const int rc = run_coldstart("replay scenarios/nemotron-3-nano.yaml --device compile-only "
                                 "--target " + std::string(c.target) +
                                     " --strategy all-mamba --check --json " + json,
                                 out);
    ASSERT_EQ(rc, 0) << read_text(out);
    const auto j = nlohmann::json::parse(read_text(json));
    const auto& r = j.at("results").at(0);
    EXPECT_EQ(r.at("hot_path_compiles").size(), c.compiles);
    std::set<std::string> moe_tiles;
    for (const auto& h : r.at("hot_path_compiles"))
      if (h.at("kernel") == "fused_moe_gemm") moe_tiles.insert(h.at("config").get<std::string>());
    EXPECT_EQ(moe_tiles.size(), c.moe_tiles) << "one tile per M class the table tells apart";
    int device_rules = 0;
    for (const auto& rule : j.at("rules")) {
      const std::string text = rule.at("rule");
      if (text.rfind("device ", 0) != 0) continue;
      ++device_rules;
      const bool mine = text.rfind(std::string("device ") + c.met, 0) == 0;
      EXPECT_EQ(rule.at("status"), mine ? "met" : "not_applicable") << text;
    }
    EXPECT_EQ(device_rules, 5);
  }
}

/// NemotronH's dense relu2 MLP layers ('-', Nemotron-H 56B) replay in compile-only mode too; a
/// warmer that cannot run its batch under max_num_seqs 1 says so in the result.
TEST_F(ReplayE2E, NemotronHDenseMlpLayersReplayAndASkippedWarmerSaysSo) {
  auto by = replay("scenarios/nemotron-3-nano.yaml",
                   "--strategy mamba-cached-prefill-warmup --set max_num_seqs=1 "
                   "--set model.config=fixtures/hf-configs/nemotron-h-56b-base-8k.json");
  ASSERT_EQ(by.size(), 1u);
  const StrategyResult& r = by.begin()->second;
  EXPECT_EQ(r.outcome, Outcome::kOk) << r.error.value_or("");
  EXPECT_EQ(r.extra.at("model").at("hybrid_override_pattern"), "M-M-M-M*");
  ASSERT_TRUE(r.extra.contains("warmers_skipped"));
  EXPECT_NE(r.extra.at("warmers_skipped").at("mamba-cached-prefill-warmup").get<std::string>().find(
                "max_num_seqs"),
            std::string::npos);
}

/// DeepSeek V4 on a B200 (SM100's DeepGEMM heuristic, its own expect: rules): the first 300-token
/// prompt without a DeepGEMM warmup compiles the FP8 GEMMs its M selects, the grouped output
/// projection among them, each record naming the heuristic's tile for M = 300; the seed's dense
/// sampling leaves nothing; and an sm_86 target skips the scenario (archs: [sm_90, sm_100]).
// What this NVRTC cannot compile for is refused before anything runs (exit 2) with the toolkit's
// version; what it can is accepted. With CUDA 12.8+ the B200 is replayable and sm_999 is not; with
// a distribution's CUDA 11.8 the B200 is refused, and so is DeepSeek V4 on an H200 (its DeepGEMM
// kernels need sm_90a).
TEST_F(ReplayE2E, NvrtcTargetsItCannotCompileForAreRefusedByName) {
  const std::string out = paths::join(dir_, "nvrtc.txt"), json = paths::join(dir_, "nvrtc.json");
  EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device compile-only --arch sm_999 "
                          "--json " + json, out),
            2);
  EXPECT_NE(read_text(out).find("cannot compile for sm_999"), std::string::npos) << read_text(out);
  if (!jit::nvrtc_can_target("sm_100")) {
    EXPECT_EQ(run_coldstart("replay scenarios/qwen3-8b-turboquant.yaml --device compile-only --target b200 "
                            "--json " + json, out),
              2);
    EXPECT_NE(read_text(out).find("sm_100 needs CUDA 12.8 or newer"), std::string::npos) << read_text(out);
  }
  if (!jit::nvrtc_can_target("sm_90a")) {
    EXPECT_EQ(run_coldstart("replay scenarios/deepseek-v4-flash.yaml --device compile-only --target h200 "
                            "--json " + json, out),
              2);
    EXPECT_NE(read_text(out).find("cannot compile for sm_90a"), std::string::npos) << read_text(out);
  }
  EXPECT_FALSE(paths::exists(json));
}

TEST_F(ReplayE2E, DeepSeekV4OnB200AndSkippedOnSm86) {
  if (!jit::nvrtc_can_target("sm_100a")) GTEST_SKIP() << jit::nvrtc_cannot_target_text("sm_100a");
  const std::string out = paths::join(dir_, "b200.txt"), json = paths::join(dir_, "b200.json");
  ASSERT_EQ(run_coldstart("replay scenarios/deepseek-v4-flash.yaml --device compile-only --target b200 --check "
                          "--set 'matrix=requests.0.prompt_tokens: [300]' --strategy none --strategy deepgemm-warmup "
                          "--json " + json,
                          out),
            0)
      << read_text(out);
  std::map<std::string, StrategyResult> by;
  for (const auto& run : cli::read_any_results(json))
    for (const auto& r : run.results) by[r.strategy] = r;
  ASSERT_EQ(by.size(), 2u);
  std::set<std::string> kernels;
  for (const CompileEvent& c : hot_path_compiled(by["none"])) {
    kernels.insert(c.kernel);
    if (c.kernel == "fp8_gemm_nt" && c.phase == "prefill") {
      EXPECT_NE(c.tuning_key.find("M=300 "), std::string::npos) << c.tuning_key;
      EXPECT_EQ(c.selector, "heuristic");
      EXPECT_NE(c.key.find("@sm_100a/"), std::string::npos) << c.key;
    }
  }
  EXPECT_TRUE(kernels.count("fp8_einsum_bhr_hdr_bhd")) << "SM100's heuristic changes the einsum tile at M = 300";
  EXPECT_TRUE(hot_path_compiled(by["deepgemm-warmup"]).empty());
  // The warmer's cost is in the result: its sampled calls, its distinct kernels, compile and wall time.
  const nlohmann::json& rep = by["deepgemm-warmup"].extra.at("warmer_reports").at("deepgemm-warmup");
  EXPECT_EQ(rep.at("m_values").get<int>(), 2432);  // 1..2048, then every 16th to 8192
  EXPECT_GT(rep.at("distinct_kernels").get<int>(), 50);
  EXPECT_LE(rep.at("compiled_or_loaded").get<int>(), rep.at("distinct_kernels").get<int>());
  EXPECT_GT(rep.at("compile_s").get<double>(), 0.0);
  EXPECT_EQ(run_coldstart("replay scenarios/deepseek-v4-flash.yaml --device compile-only --target rtx-a4000 --strategy none",
                          out),
            0)
      << read_text(out);
  EXPECT_NE(read_text(out).find("skipped"), std::string::npos) << read_text(out);
}

/// Compile-only time accounting (issue 23): identical work costs the same in every variant
/// whether NVRTC ran or the run's compile memo served it; a warmer's pool of N threads is
/// charged as N threads, not as one; warmer_ms agrees with the kernel_warmup phase.
TEST_F(ReplayE2E, CompileOnlyChargesIdenticalWorkAlikeAndOnTheWarmersThreads) {
  auto by = replay("scenarios/deepseek-v4-flash.yaml",
                   "--filter deepgemm --set max_num_batched_tokens=64 "
                   "--set 'matrix=requests.0.prompt_tokens: [1, 48]'");
  ASSERT_EQ(by.size(), 4u);
  auto warmup_ms = [](const StrategyResult& r) {
    for (const auto& p : r.phases)
      if (p.name == "kernel_warmup") return p.ms;
    return -1.0;
  };
  for (const auto& [name, r] : by) {
    ASSERT_EQ(r.outcome, Outcome::kOk) << name << ": " << r.error.value_or("");
    double warmers = 0;
    for (const auto& [w, ms] : r.extra.at("warmer_ms").items()) warmers += ms.get<double>();
    EXPECT_NEAR(warmers, warmup_ms(r), 0.02 * warmup_ms(r) + 20) << name;
  }
  for (const std::string s : {"deepgemm-warmup", "deepgemm-warmup-serial"}) {
    const double a = warmup_ms(by[s + " [prompt_tokens=1]"]), b = warmup_ms(by[s + " [prompt_tokens=48]"]);
    EXPECT_LT(std::max(a, b), 1.25 * std::min(a, b)) << s << ": " << a << " vs " << b << " ms";
  }
  const int threads = by["deepgemm-warmup [prompt_tokens=1]"]
                          .extra.at("warmer_reports").at("deepgemm-warmup").at("threads").get<int>();
  if (threads >= 2) {
    for (const char* v : {" [prompt_tokens=1]", " [prompt_tokens=48]"})
      EXPECT_LT(warmup_ms(by[std::string("deepgemm-warmup") + v]),
                0.8 * warmup_ms(by[std::string("deepgemm-warmup-serial") + v]))
          << v << ": the pool's " << threads << " threads compile side by side";
  }
}

/// The steady request follows a matrix axis over the first request's prompt length, so it is a
/// warm twin of the first request (issue 23): with one prompt token the steady request compiles
/// nothing (a fixed 300-token one compiled its own tiles); a steady request that pins another
/// length is marked not comparable, and Markdown shows first/steady as n/c.
TEST_F(ReplayE2E, SteadyRequestFollowsTheFirstRequestsShapeUnlessPinned) {
  auto by = replay("scenarios/deepseek-v4-flash.yaml",
                   "--strategy none --set 'matrix=requests.0.prompt_tokens: [1, 2048]'");
  ASSERT_EQ(by.size(), 2u);
  for (const auto& [label, prompt] : std::map<std::string, int>{
           {"none [prompt_tokens=1]", 1}, {"none [prompt_tokens=2048]", 2048}}) {
    const StrategyResult& r = by.at(label);
    ASSERT_EQ(r.outcome, Outcome::kOk) << label << ": " << r.error.value_or("");
    int steady_tokens = 0;
    for (const auto& step : r.extra.at("schedule"))
      if (step.at("wave") == 1) steady_tokens += step.at("num_tokens").get<int>();
    EXPECT_EQ(steady_tokens, prompt + 8) << label << ": prefill plus 8 decode steps";
    EXPECT_FALSE(r.extra.contains("steady_not_comparable")) << label;
    EXPECT_TRUE(steady_cold(r).empty()) << label << ": " << steady_cold(r).front().key;
  }
  const std::string md = paths::join(dir_, "r.md");
  auto pinned = replay("scenarios/nemotron-3-super-turboquant.yaml",
                       "--strategy tq-reserve-max --set requests.0.prompt_tokens=4096 --md " + md);
  ASSERT_EQ(pinned.size(), 1u);
  const StrategyResult& r = pinned.begin()->second;
  ASSERT_EQ(r.outcome, Outcome::kOk) << r.error.value_or("");
  EXPECT_EQ(r.extra.value("steady_not_comparable", ""),
            "the steady request has 2048 prompt tokens, the first request 4096");
  EXPECT_FALSE(r.extra.contains("first_time_cost_ms"));
  EXPECT_NE(read_text(md).find("| n/c |"), std::string::npos) << read_text(md);
}

/// `list` prints the registries and the scenarios' strategies; --filter narrows them and, like
/// grep, exits 1 when it matches nothing.
TEST_F(ReplayE2E, ListFiltersAndSaysWhenNothingMatches) {
  const std::string out = paths::join(dir_, "list.txt");
  ASSERT_EQ(run_coldstart("list --filter deepgemm", out), 0) << read_text(out);
  const std::string text = read_text(out);
  EXPECT_NE(text.find("warmers:\n  deepgemm-warmup"), std::string::npos) << text;
  EXPECT_NE(text.find("scenario deepseek-v4-flash (scenarios/deepseek-v4-flash.yaml):\n"
                      "  deepgemm-warmup [prompt_tokens=1]: [deepgemm-warmup]"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("tq-decode-warmup"), std::string::npos) << "filtered out";
  EXPECT_EQ(run_coldstart("list --filter no-such-thing", out), 1);
  EXPECT_EQ(read_text(out), "coldstart list: nothing matches --filter 'no-such-thing'\n");
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
                                    out, "COLDSTART_STALL_IN_PHASE=kernel_warmup");
  ASSERT_GT(pid, 0);
  std::vector<pid_t> kids;
  ASSERT_TRUE(within(120, [&] { return !(kids = children_of(pid)).empty(); })) << read_text(out);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // well into the stall
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_EQ(wait_status(pid), 256 + SIGKILL);
  for (pid_t k : kids) {
    const bool ended = within(1.0, [&] { return gone(k); });
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
  EXPECT_NE(read_text(out).find("every strategy run (1) timed out"), std::string::npos)
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

/// Every scenario under scenarios/ meets its own expect: rules in compile-only mode.
class ScenarioExpectations : public ReplayE2E, public ::testing::WithParamInterface<std::string> {};

TEST_P(ScenarioExpectations, MetInCompileOnlyMode) {
  const std::string out = paths::join(dir_, "out.txt");
  const std::string junit = paths::join(dir_, "j.xml"), json = paths::join(dir_, "r.json");
  const int rc = run_coldstart("replay " + GetParam() + " --device compile-only --check --junit " +
                                   junit + " --json " + json,
                               out);
  const std::string text = read_text(out);
  // An older toolkit (a distribution's CUDA 11.8) cannot compile some scenarios' kernels (sm_90a
  // for DeepSeek V4): refused by name, which NvrtcTargetsItCannotCompileForAreRefusedByName checks.
  if (rc == 2 && text.find("(the CUDA toolkit this build uses) cannot compile for") != std::string::npos)
    GTEST_SKIP() << text;
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(read_text(out).find("rule(s) met"), std::string::npos) << "no expect: rules checked";
  EXPECT_NE(text.find("\nverdict"), std::string::npos) << "no verdict under the table";
  // The results file keeps each rule's verdict and JUnit agrees with --check: one test case per
  // rule, no failure (an expected crash passes), no error.
  size_t rules = 0;
  for (const auto& run : cli::read_any_results(json))
    for (const auto& rule : run.rules) {
      ++rules;
      EXPECT_NE(rule.status, "unmet") << rule.where;
    }
  EXPECT_GT(rules, 0u);
  const std::string xml = read_text(junit);
  EXPECT_NE(xml.find("<testsuites name=\"coldstart\""), std::string::npos);
  EXPECT_NE(xml.find(" failures=\"0\" errors=\"0\""), std::string::npos) << xml.substr(0, 300);
  EXPECT_EQ(xml.find("<failure"), std::string::npos);
  size_t rule_cases = 0;
  for (size_t at = xml.find("name=\"rule at "); at != std::string::npos;
       at = xml.find("name=\"rule at ", at + 1))
    ++rule_cases;
  EXPECT_EQ(rule_cases, rules);
}

/// scenarios/*.yaml of the source tree this test was built from (listed at build time too, when
/// CTest discovers the tests without COLDSTART_SOURCE_DIR).
std::vector<std::string> scenario_files() {
  std::vector<std::string> out;
  const std::string dir = std::string(CS_SOURCE_DIR) + "/scenarios";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string f = e->d_name;
      if (f.size() > 5 && f.compare(f.size() - 5, 5, ".yaml") == 0) out.push_back("scenarios/" + f);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllScenarios, ScenarioExpectations, ::testing::ValuesIn(scenario_files()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param.substr(10, i.param.size() - 15);
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace coldstart

namespace coldstart {
namespace {

// Compile-only mode counts the meta device's storages (harness/runtime/meta_memory.h): every
// phase has its memory, and the profile run's peak agrees with what an H100 measured for the same
// scenario (baselines/h100-sm90.json, recorded with torch's caching allocator).
TEST_F(ReplayE2E, CompileOnlyPhaseMemoryMatchesTheGpusProfilePeak) {
  const nlohmann::json j = replay_json("scenarios/qwen3-8b-bf16.yaml --strategy none");
  ASSERT_FALSE(j.is_null());
  ASSERT_GE(j.at("results").size(), 1u);
  const auto& r = j.at("results").at(0);  // every variant runs the same profile run
  const auto& mem = r.at("phase_memory");
  for (const char* phase : {"init", "load_weights", "profile_run", "kv_cache_alloc",
                            "kernel_warmup", "graph_capture", "workspace_lock", "sampler_warmup",
                            "0.prefill", "0.first_decode", "0.decode", "1.prefill",
                            "1.first_decode", "1.decode"}) {
    ASSERT_TRUE(mem.contains(phase)) << phase << " in " << mem.dump();
    EXPECT_GE(mem.at(phase).at("peak_allocated_bytes").get<int64_t>(),
              mem.at(phase).at("allocated_bytes").get<int64_t>())
        << phase;
  }
  const int64_t weights = r.at("weights_bytes");
  const int64_t kv = r.at("kv_cache_bytes");
  const int64_t after_load = mem.at("load_weights").at("allocated_bytes");
  EXPECT_GE(after_load, weights);
  EXPECT_LT(after_load, weights + (64 << 20));  // rotary tables, block table: tens of MB
  const int64_t peak = r.at("profile_peak_bytes");
  EXPECT_EQ(mem.at("profile_run").at("peak_allocated_bytes").get<int64_t>(), peak);
  EXPECT_GT(peak, after_load);  // the profile run's activations
  EXPECT_GE(mem.at("kv_cache_alloc").at("allocated_bytes").get<int64_t>(), after_load + kv);
  // The H100's measurement of the same profile run.
  const std::vector<RunResults> h100 =
      cli::read_any_results(source_dir() + "/baselines/h100-sm90.json");
  std::optional<double> measured;
  for (const RunResults& run : h100) {
    if (run.scenario.name != "qwen3-8b-bf16") continue;
    for (const StrategyResult& s : run.results) {
      if (s.strategy == "none" && s.extra.contains("profile_peak_bytes"))
        measured = s.extra.at("profile_peak_bytes").get<double>();
    }
  }
  ASSERT_TRUE(measured.has_value()) << "baselines/h100-sm90.json has no qwen3-8b-bf16 run";
  EXPECT_NEAR(static_cast<double>(peak) / *measured, 1.0, 0.05)
      << "compile-only " << peak << " bytes, H100 " << *measured;
}

}  // namespace
}  // namespace coldstart
