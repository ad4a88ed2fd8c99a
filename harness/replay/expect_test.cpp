// Tests of check_expectations: each check, which results a rule applies to (strategy, variant,
// mode), a rule that matches nothing, and skipped results.
#include "harness/replay/expect.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/replay/scenario_test_util.h"

namespace coldstart {
namespace {

StrategyResult result(const std::string& strategy, const std::string& variant, Outcome outcome,
                      std::vector<std::string> hot_kernels = {}) {
  StrategyResult r;
  r.strategy = strategy;
  r.variant = variant;
  r.outcome = outcome;
  for (auto& k : hot_kernels)
    r.hot_path_compiles.push_back(CompileEvent{k, k + "[key]", 1.0, "first_decode", "nvrtc"});
  return r;
}

StrategyResult crash(const std::string& strategy, const std::string& variant) {
  StrategyResult r = result(strategy, variant, Outcome::kCrash, {"tq_cache_store"});
  r.failed_phase = "first_decode";
  r.error = "Workspace is locked but allocation from 'x.py:1:f' requires 2.00 MB";
  return r;
}

StrategyResult skipped(const std::string& strategy, const std::string& variant) {
  StrategyResult r = result(strategy, variant, Outcome::kSkipped);
  r.skipped = "t runs on [sm_100]; this device is sm_90 (H200)";
  r.error = r.skipped;
  return r;
}

Expectation rule(const std::string& strategy, int line) {
  Expectation e;
  e.strategy = strategy;
  e.where = "s.yaml:" + std::to_string(line);
  return e;
}

Scenario with(std::vector<Expectation> rules) {
  Scenario s;
  s.name = "t";
  s.expectations = std::move(rules);
  return s;
}

const char* const kPw = "cudagraph_mode=piecewise";
const char* const kFull = "cudagraph_mode=full_and_piecewise";

TEST(CheckExpectations, EveryCheckCanPass) {
  Expectation e = rule("none", 17);
  e.variant = kPw;
  e.mode = "compile-only";
  e.outcome = "crash";
  e.failed_phase = "first_decode";
  e.error_prefix = "Workspace is locked";
  e.hot_path_compiles = 1;
  e.max_hot_path_compiles = 1;
  e.hot_path_kernels = std::vector<std::string>{"tq_cache_store"};
  Expectation ok = rule("*", 18);
  ok.variant = kFull;
  ok.outcome = "ok";
  ok.max_hot_path_compiles = 0;
  std::vector<StrategyResult> results = {crash("none", kPw), result("none", kFull, Outcome::kOk),
                                         result("both", kPw, Outcome::kOk),
                                         result("both", kFull, Outcome::kOk)};
  EXPECT_EQ(check_expectations(with({e, ok}), "compile-only", results), std::vector<std::string>{});
}

TEST(CheckExpectations, EachUnmetCheckIsOneLine) {
  Expectation e = rule("none", 17);
  e.outcome = "crash";
  e.failed_phase = "first_decode";
  e.error_prefix = "Workspace is locked";
  e.hot_path_compiles = 1;
  e.max_hot_path_compiles = 0;
  e.hot_path_kernels = std::vector<std::string>{"tq_cache_store"};
  auto out = check_expectations(with({e}), "cuda", {result("none", kPw, Outcome::kOk)});
  EXPECT_EQ(out,
            (std::vector<std::string>{
                "none [cudagraph_mode=piecewise]: outcome ok, expected crash (rule at s.yaml:17)",
                "none [cudagraph_mode=piecewise]: failed_phase none, expected 'first_decode' "
                "(rule at s.yaml:17)",
                "none [cudagraph_mode=piecewise]: error none, expected one starting with "
                "'Workspace is locked' (rule at s.yaml:17)",
                "none [cudagraph_mode=piecewise]: 0 hot-path compiles, expected 1 (rule at "
                "s.yaml:17)",
                "none [cudagraph_mode=piecewise]: hot-path kernels [], expected "
                "[tq_cache_store] (rule at s.yaml:17)"}));
}

TEST(CheckExpectations, NoVariantNoBrackets) {
  Expectation e = rule("none", 3);
  e.outcome = "ok";
  EXPECT_EQ(check_expectations(with({e}), "cuda", {crash("none", "")}),
            std::vector<std::string>{"none: outcome crash, expected ok (rule at s.yaml:3)"});
}

TEST(CheckExpectations, HotPathKernelsAreASetAndMaxIsABound) {
  Expectation e = rule("none", 5);
  e.hot_path_kernels = std::vector<std::string>{"a", "b"};
  e.max_hot_path_compiles = 2;
  auto out =
      check_expectations(with({e}), "cuda", {result("none", "", Outcome::kOk, {"b", "a", "b"})});
  EXPECT_EQ(out, std::vector<std::string>{
                     "none: 3 hot-path compiles, expected at most 2 (rule at s.yaml:5)"});
  out = check_expectations(with({e}), "cuda", {result("none", "", Outcome::kOk, {"a", "c"})});
  EXPECT_EQ(out, std::vector<std::string>{
                     "none: hot-path kernels [a, c], expected [a, b] (rule at s.yaml:5)"});
}

TEST(CheckExpectations, LoadsFromTheKernelCacheAreNotCompiles) {
  Expectation e = rule("none", 5);
  e.hot_path_compiles = 1;
  e.hot_path_kernels = std::vector<std::string>{"a"};
  StrategyResult r = result("none", "", Outcome::kOk, {"a"});
  r.hot_path_compiles.push_back(CompileEvent{"b", "b[key]", 0.2, "first_decode", "disk"});
  EXPECT_TRUE(check_expectations(with({e}), "cuda", {r}).empty());
  EXPECT_EQ(hot_path_compiled(r).size(), 1u);
  EXPECT_EQ(hot_path_loads(r), 1);
}

TEST(CheckExpectations, ErrorPrefixComparesTheStart) {
  Expectation e = rule("none", 5);
  e.error_prefix = "locked";
  auto out = check_expectations(with({e}), "cuda", {crash("none", "")});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].find("error 'Workspace is locked but"), std::string::npos) << out[0];
}

TEST(CheckExpectations, AStarRuleAppliesToEveryMatchingResult) {
  Expectation e = rule("*", 9);
  e.variant = kFull;
  e.outcome = "ok";
  auto out = check_expectations(
      with({e}), "cuda",
      {crash("none", kPw), crash("none", kFull), result("both", kFull, Outcome::kOk),
       result("all", kFull, Outcome::kTimeout)});
  EXPECT_EQ(out, (std::vector<std::string>{
                     "none [cudagraph_mode=full_and_piecewise]: outcome crash, expected ok (rule "
                     "at s.yaml:9)",
                     "all [cudagraph_mode=full_and_piecewise]: outcome timeout, expected ok (rule "
                     "at s.yaml:9)"}));
}

TEST(CheckExpectations, ARuleThatMatchesNothingFails) {
  Expectation e = rule("nonee", 4);
  e.outcome = "ok";
  auto out = check_expectations(with({e}), "cuda", {result("none", "", Outcome::kOk)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], "rule at s.yaml:4 (strategy 'nonee') matches no result of this cuda run");
  // A variant that did not run.
  Expectation v = rule("none", 6);
  v.variant = kFull;
  v.outcome = "ok";
  out = check_expectations(with({v}), "cuda", {result("none", kPw, Outcome::kOk)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].find("variant \"cudagraph_mode=full_and_piecewise\""), std::string::npos)
      << out[0];
  // No results at all.
  EXPECT_EQ(check_expectations(with({v}), "cuda", {}).size(), 1u);
}

TEST(CheckExpectations, ARuleForTheOtherModeDoesNotApply) {
  Expectation e = rule("none", 4);
  e.mode = "cuda";
  e.outcome = "ok";
  // It would fail in a cuda run ...
  EXPECT_EQ(check_expectations(with({e}), "cuda", {crash("none", "")}).size(), 1u);
  // ... and neither fails nor counts as matching nothing in a compile-only run.
  EXPECT_TRUE(check_expectations(with({e}), "compile-only", {crash("none", "")}).empty());
  EXPECT_TRUE(check_expectations(with({e}), "compile-only", {}).empty());
}

TEST(CheckExpectations, ARuleForAnotherArchDoesNotApply) {
  Expectation e = rule("none", 5);
  e.arch = "sm_100";
  e.hot_path_kernels = std::vector<std::string>{"fp8_einsum_bhr_hdr_bhd"};
  const StrategyResult r = result("none", "", Outcome::kOk, {"fp8_gemm_nt"});
  EXPECT_EQ(check_expectations(with({e}), "compile-only", {r}, 100).size(), 1u);  // its arch: checked
  EXPECT_TRUE(check_expectations(with({e}), "compile-only", {r}, 90).empty());    // another: not
  EXPECT_TRUE(check_expectations(with({e}), "compile-only", {}, 90).empty());     // nor "matches nothing"
  EXPECT_TRUE(check_expectations(with({e}), "compile-only", {r}).empty());        // arch unknown
}

// A device rule holds where the run's device name contains its fragment, ignoring case: the H100
// and the H200 are both sm_90 but pick fused_moe tiles from different tuned tables.
TEST(CheckExpectations, ARuleForAnotherDeviceDoesNotApply) {
  Expectation e = rule("none", 5);
  e.device = "h200";
  e.max_hot_path_compiles = 0;
  StrategyResult r = result("none", "", Outcome::kOk);
  r.hot_path_compiles.push_back(CompileEvent{"a", "a[key]", 1.0, "prefill", "nvrtc"});
  EXPECT_EQ(check_expectations(with({e}), "cuda", {r}, 90, "NVIDIA H200").size(), 1u);
  EXPECT_EQ(check_expectations(with({e}), "compile-only", {r}, 90, "compile-only: NVIDIA H200").size(),
            1u);
  EXPECT_TRUE(check_expectations(with({e}), "cuda", {r}, 90, "NVIDIA H100 80GB HBM3").empty());
  EXPECT_TRUE(check_expectations(with({e}), "cuda", {}, 90, "NVIDIA H100 80GB HBM3").empty());
  EXPECT_TRUE(check_expectations(with({e}), "compile-only", {r}, 90, "compile-only (sm_90)").empty());
  EXPECT_TRUE(check_expectations(with({e}), "cuda", {r}, 90).empty());  // device unknown

  RunResults run;
  run.meta.sm = 90;
  run.meta.device_name = "NVIDIA H100 80GB HBM3";
  run.results = {r};
  RunExpectations x = check_run_expectations(with({e}), run);
  EXPECT_EQ(x.checked, 0u);
  EXPECT_EQ(x.not_applicable, 1u);
  ASSERT_EQ(x.rules.size(), 1u);
  EXPECT_EQ(x.rules[0].rule, "device h200, max_hot_path_compiles 0");
  EXPECT_EQ(x.rules[0].details,
            std::vector<std::string>{"a rule for device h200; this run: compile-only on sm_90 "
                                     "(NVIDIA H100 80GB HBM3)"});
  run.meta.device_name = "NVIDIA H200";
  x = check_run_expectations(with({e}), run);
  EXPECT_EQ(x.checked, 1u);
  EXPECT_EQ(x.unmet.size(), 1u);
}

// The one filter `coldstart replay` applies before checking: rules for strategies that did not
// run are left out, rules for another mode or arch are counted apart, the rest are checked.
TEST(CheckRunExpectations, FiltersByWhatRanAndCountsOtherModesAndArchs) {
  Expectation crashed = rule("none", 10);
  crashed.outcome = "crash";
  Expectation other_strategy = rule("both", 11);  // not run (--strategy none)
  other_strategy.outcome = "ok";
  Expectation gpu_only = rule("none", 12);
  gpu_only.mode = "cuda";
  gpu_only.outcome = "ok";
  Expectation sm100 = rule("*", 13);
  sm100.arch = "sm_100";
  sm100.outcome = "ok";
  const Scenario s = with({crashed, other_strategy, gpu_only, sm100});
  RunResults run;
  run.meta.sm = 90;
  run.results = {crash("none", "")};

  RunExpectations x = check_run_expectations(s, run);
  EXPECT_EQ(x.mode, "compile-only") << "no device_mode recorded";
  EXPECT_EQ(x.checked, 1u);
  EXPECT_EQ(x.not_applicable, 2u);
  EXPECT_TRUE(x.unmet.empty()) << x.unmet.front();

  // The same run on the GPU: the cuda rule applies and fails; sm_100 still does not.
  run.results.front().extra["device_mode"] = "cuda";
  x = check_run_expectations(s, run);
  EXPECT_EQ(x.mode, "cuda");
  EXPECT_EQ(x.checked, 2u);
  EXPECT_EQ(x.not_applicable, 1u);
  ASSERT_EQ(x.unmet.size(), 1u);
  EXPECT_NE(x.unmet[0].find("outcome crash, expected ok (rule at s.yaml:12)"), std::string::npos)
      << x.unmet[0];

  // On sm_100 the star rule applies to the crash too.
  run.meta.sm = 100;
  x = check_run_expectations(s, run);
  EXPECT_EQ(x.not_applicable, 0u);
  EXPECT_EQ(x.unmet.size(), 2u);
}

TEST(CheckRunExpectations, RulesAboutResultsNotProducedAreListedNotUnmet) {
  Expectation other_strategy = rule("both", 11);  // --strategy none ran only `none`
  other_strategy.outcome = "ok";
  Expectation replaced_variant = rule("none", 12);  // --set cudagraph_mode=... replaced the axis
  replaced_variant.variant = kPw;
  replaced_variant.outcome = "crash";
  Expectation checked = rule("none", 13);
  checked.outcome = "ok";
  RunResults run;
  run.results = {result("none", "", Outcome::kOk)};
  const RunExpectations x = check_run_expectations(with({other_strategy, replaced_variant, checked}), run);
  EXPECT_EQ(x.checked, 1u);
  EXPECT_TRUE(x.unmet.empty()) << x.unmet.front();
  EXPECT_EQ(x.strategy_not_run, 1u);  // `both`
  ASSERT_EQ(x.not_checked.size(), 1u);
  EXPECT_NE(x.not_checked[0].find("rule at s.yaml:12 (strategy 'none', variant "
                                  "\"cudagraph_mode=piecewise\")"),
            std::string::npos)
      << x.not_checked[0];
  // Every rule has its verdict, in rule order, for the results file and JUnit.
  ASSERT_EQ(x.rules.size(), 3u);
  EXPECT_EQ(x.rules[0].status, "not_checked");
  EXPECT_EQ(x.rules[0].details, std::vector<std::string>{"strategy 'both' did not run (--strategy / --filter)"});
  EXPECT_EQ(x.rules[1].status, "not_checked");
  EXPECT_EQ(x.rules[1].variant, std::optional<std::string>(kPw));
  EXPECT_EQ(x.rules[2].status, "met");
  EXPECT_EQ(x.rules[2].where, "s.yaml:13");
  EXPECT_EQ(x.rules[2].rule, "outcome ok");
  EXPECT_EQ(x.rules[2].checks, std::vector<std::string>{"outcome"});
}

TEST(CheckRunExpectations, EachRuleCarriesItsStatusChecksAndUnmetLines) {
  Expectation crash_rule = rule("none", 20);
  crash_rule.outcome = "crash";
  crash_rule.failed_phase = "first_decode";
  crash_rule.max_hot_path_compiles = 0;
  Expectation gpu_only = rule("*", 21);
  gpu_only.mode = "cuda";
  gpu_only.outcome = "ok";
  RunResults run;
  run.meta.sm = 90;
  StrategyResult r = result("none", "", Outcome::kOk);
  r.hot_path_compiles.push_back(CompileEvent{"a", "a[key]", 1.0, "prefill", "nvrtc"});
  run.results = {r};
  const RunExpectations x = check_run_expectations(with({crash_rule, gpu_only}), run);
  ASSERT_EQ(x.rules.size(), 2u);
  const RuleCheck& c = x.rules[0];
  EXPECT_EQ(c.status, "unmet");
  EXPECT_EQ(c.rule, "outcome crash, failed_phase first_decode, max_hot_path_compiles 0");
  EXPECT_EQ(c.checks, (std::vector<std::string>{"outcome", "failed_phase", "max_hot_path_compiles"}));
  EXPECT_EQ(c.details, x.unmet);  // the same lines --check prints, this rule's only
  EXPECT_EQ(c.details.size(), 3u);
  EXPECT_EQ(x.rules[1].status, "not_applicable");
  EXPECT_EQ(x.rules[1].rule, "mode cuda, outcome ok");
  EXPECT_EQ(x.rules[1].details,
            std::vector<std::string>{"a rule for mode cuda; this run: compile-only on sm_90"});
}

TEST(CheckExpectations, AKernelRuleSaysWhatAWarmCacheLoaded) {
  Expectation e = rule("none", 5);
  e.hot_path_kernels = std::vector<std::string>{"a", "b"};
  StrategyResult r = result("none", "", Outcome::kOk);
  r.hot_path_compiles.push_back(CompileEvent{"a", "a[key]", 0.2, "first_decode", "disk"});
  r.hot_path_compiles.push_back(CompileEvent{"b", "b[key]", 0.2, "first_decode", "disk"});
  const auto lines = check_expectations(with({e}), "cuda", {r});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("hot-path kernels [], expected [a, b] (2 more loaded from the on-disk "
                          "kernel cache"),
            std::string::npos)
      << lines[0];
}

TEST(CheckExpectations, SkippedResultsAreExemptButForOutcomeSkipped) {
  Expectation e = rule("*", 4);
  e.outcome = "ok";
  e.hot_path_compiles = 0;
  e.failed_phase = "x";
  // A rule that matches only skipped results has matched: nothing fails.
  EXPECT_TRUE(
      check_expectations(with({e}), "cuda", {skipped("none", ""), skipped("both", "")}).empty());
  Expectation s = rule("none", 5);
  s.outcome = "skipped";
  EXPECT_TRUE(check_expectations(with({s}), "cuda", {skipped("none", "")}).empty());
  EXPECT_EQ(check_expectations(with({s}), "cuda", {result("none", "", Outcome::kOk)}),
            std::vector<std::string>{"none: outcome ok, expected skipped (rule at s.yaml:5)"});
}

// A two-rank result as merge_rank_results leaves it: rank 1 compiled fused_moe_gemm twice on the
// hot path and timed out; rank 0 compiled nothing and was ok.
StrategyResult two_ranks() {
  StrategyResult r = result("mamba", "", Outcome::kCrash);
  for (int i = 0; i < 2; ++i) {
    CompileEvent c{"fused_moe_gemm", "fused_moe_gemm[M=" + std::to_string(i) + "]", 1.0,
                   "prefill", "nvrtc"};
    c.rank = 1;
    r.hot_path_compiles.push_back(c);
  }
  CompileEvent disk{"paged_prefill", "paged_prefill[k]", 0.1, "prefill", "disk"};
  disk.rank = 0;
  r.hot_path_compiles.push_back(disk);
  r.error = "collective all_reduce timed out";
  r.extra["ranks"] = {{"world", 2},
                      {"per_rank",
                       {{{"rank", 0}, {"outcome", "ok"}},
                        {{"rank", 1},
                         {"outcome", "crash"},
                         {"failed_phase", "prefill"},
                         {"error", "collective all_reduce timed out"}}}}};
  return r;
}

TEST(CheckExpectations, ARankRuleChecksThatRankAlone) {
  Expectation r0 = rule("mamba", 4);
  r0.rank = 0;
  r0.outcome = "ok";
  r0.hot_path_compiles = 0;
  Expectation r1 = rule("mamba", 5);
  r1.rank = 1;
  r1.outcome = "crash";
  r1.failed_phase = "prefill";
  r1.error_prefix = "collective";
  r1.hot_path_kernels = std::vector<std::string>{"fused_moe_gemm"};
  EXPECT_EQ(check_expectations(with({r0, r1}), "cuda", {two_ranks()}), std::vector<std::string>{});
  // The same rules on the wrong ranks: every check fails, each line names the rank, and rank 0's
  // kernel-cache load is said beside its count.
  r0.rank = 1;
  r1.rank = 0;
  EXPECT_EQ(check_expectations(with({r0, r1}), "cuda", {two_ranks()}),
            (std::vector<std::string>{
                "mamba: rank 1: outcome crash, expected ok (rule at s.yaml:4)",
                "mamba: rank 1: 2 hot-path compiles, expected 0 (rule at s.yaml:4)",
                "mamba: rank 0: outcome ok, expected crash (rule at s.yaml:5)",
                "mamba: rank 0: failed_phase none, expected 'prefill' (rule at s.yaml:5)",
                "mamba: rank 0: error none, expected one starting with 'collective' (rule at "
                "s.yaml:5)",
                "mamba: rank 0: hot-path kernels [], expected [fused_moe_gemm] (1 more loaded "
                "from the on-disk kernel cache: a warm --cache-dir served them) (rule at "
                "s.yaml:5)"}));
}

TEST(CheckExpectations, ARankRuleFailsWithoutThatRank) {
  Expectation e = rule("mamba", 7);
  e.rank = 2;
  e.outcome = "ok";
  EXPECT_EQ(check_expectations(with({e}), "cuda", {two_ranks()}),
            std::vector<std::string>{"mamba: rank 2: the run had 2 ranks (rule at s.yaml:7)"});
  EXPECT_EQ(check_expectations(with({e}), "cuda", {result("mamba", "", Outcome::kOk)}),
            std::vector<std::string>{"mamba: rank 2: the result has no per-rank results (only a "
                                     "run with engine.ranks: all and tensor_parallel_size > 1 "
                                     "has them) (rule at s.yaml:7)"});
}

// End to end: rules read from a scenario file, checked against results.
using ExpectFromFile = scenario_test::ScenarioFiles;

TEST_F(ExpectFromFile, RulesFromTheFile) {
  Scenario s = load(std::string(scenario_test::kBase) +
                    "matrix:\n"
                    "  cudagraph_mode: [piecewise, full_and_piecewise]\n"
                    "expect:\n"
                    "  - {strategy: none, variant: \"cudagraph_mode=piecewise\", mode: "
                    "compile-only, outcome: crash, failed_phase: first_decode, error_prefix: "
                    "\"Workspace is locked\", hot_path_compiles: 1, hot_path_kernels: "
                    "[tq_cache_store]}\n"
                    "  - {strategy: both, outcome: ok}\n");
  EXPECT_FALSE(s.expectations[0].rank.has_value());
  std::vector<StrategyResult> results = {crash("none", kPw), result("none", kFull, Outcome::kOk),
                                         result("both", kPw, Outcome::kOk), crash("both", kFull)};
  auto out = check_expectations(s, "compile-only", results);
  const std::string file = (scenario_test::fs::path(dir_) / "s.yaml").string();
  EXPECT_EQ(out, std::vector<std::string>{"both [cudagraph_mode=full_and_piecewise]: outcome "
                                          "crash, expected ok (rule at " +
                                          file + ":20)"});
  // In a cuda run the first rule does not apply.
  EXPECT_EQ(check_expectations(s, "cuda", results).size(), 1u);
}

}  // namespace
}  // namespace coldstart
