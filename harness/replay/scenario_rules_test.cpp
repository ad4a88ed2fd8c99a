// Tests of what the loader checks for its caller and the request and expect formats: the
// check_replayable hook (each problem reported at the line of its key, of the enclosing key when
// defaulted, at the --set or the matrix value it came from), requests with arrival_step / steady
// and the compatibility rule, and the typed expect: rules.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/replay/scenario.h"
#include "harness/replay/scenario_test_util.h"

namespace coldstart {
namespace {

using namespace scenario_test;  // NOLINT: the shared fixture and helpers

// Rules flagging one engine key's value (the way a model layer would flag an unsupported
// KV cache format), and counting the scenarios they were asked about.
struct FlagValue {
  std::string key;    // dotted scenario key to report
  std::string value;  // the kv_cache_dtype that is "not supported"
  int calls = 0;
};

ScenarioRules flag_kv_dtype(FlagValue& f) {
  ScenarioRules r;
  r.check_replayable = [&f](const Scenario& s) {
    ++f.calls;
    std::vector<ScenarioProblem> out;
    if (s.engine.kv_cache_dtype == f.value)
      out.push_back({f.key, "'" + f.value + "' is not supported by this model"});
    return out;
  };
  return r;
}

// The rule the loader used to hard-code, now given by the caller.
ScenarioRules turboquant_head_dim() {
  ScenarioRules r;
  r.check_replayable = [](const Scenario& s) {
    std::vector<ScenarioProblem> out;
    const int hd = s.model.head_dim;
    if (s.engine.kv_cache_dtype.rfind("turboquant", 0) == 0 && (hd & (hd - 1)) != 0)
      out.push_back({"engine.kv_cache_dtype",
                     "needs a power-of-two head_dim, the model's is " + std::to_string(hd)});
    return out;
  };
  return r;
}

using ScenarioReplayableRules = ScenarioFiles;
using ScenarioRequests = ScenarioFiles;
using ScenarioExpectRules = ScenarioFiles;

// ---------------------------------------------------------------------------------------------
// check_replayable

TEST_F(ScenarioReplayableRules, PresentKeyIsReportedAtItsLine) {
  std::string text = replace(kBase, "  config: qwen3.json\n",
                             "  config: qwen3.json\n  overrides: {head_dim: 96}\n");
  // kv_cache_dtype moved from line 9 to 10.
  expect_at(error_of(text, {}, turboquant_head_dim()), 10, "engine.kv_cache_dtype",
            "needs a power-of-two head_dim, the model's is 96");
  EXPECT_EQ(load(kBase, {}, turboquant_head_dim()).model.head_dim, 128);
}

TEST_F(ScenarioReplayableRules, DefaultedKeyIsReportedAtTheEnclosingKey) {
  FlagValue f{"engine.kv_cache_dtype", "auto"};
  std::string text = replace(kBase, "  kv_cache_dtype: turboquant_4bit_nc\n", "");
  std::string err = error_of(text, {}, flag_kv_dtype(f));
  expect_at(err, 4, "engine.kv_cache_dtype", "'auto' is not supported by this model");
  // A defaulted key inside a list entry: the entry's line.
  FlagValue g{"requests.0.arrival_step", "turboquant_4bit_nc"};
  expect_at(error_of(kBase, {}, flag_kv_dtype(g)), 12, "requests.0.arrival_step");
  // A top-level key that is absent: the file's first line.
  FlagValue h{"timeout_s", "turboquant_4bit_nc"};
  expect_at(error_of(kBase, {}, flag_kv_dtype(h)), 1, "timeout_s");
}

TEST_F(ScenarioReplayableRules, SetKeyIsReportedAsTheSet) {
  FlagValue f{"engine.kv_cache_dtype", "fp8"};
  std::string err = error_of(kBase, {"kv_cache_dtype=fp8"}, flag_kv_dtype(f));
  EXPECT_NE(err.find("--set kv_cache_dtype: key 'engine.kv_cache_dtype': 'fp8' is not supported"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("s.yaml:"), std::string::npos) << err;
  // Defaulted inside a section that --set replaced: the --set too.
  FlagValue g{"engine.kv_cache_dtype", "auto"};
  err =
      error_of(kBase, {"engine={max_num_seqs: 4, max_num_batched_tokens: 2048}"}, flag_kv_dtype(g));
  EXPECT_NE(err.find("--set engine: key 'engine.kv_cache_dtype': 'auto' is not supported"),
            std::string::npos)
      << err;
}

TEST_F(ScenarioReplayableRules, HfConfigKeyIsReportedAtModelConfigOrItsOverride) {
  ScenarioRules r;
  r.check_replayable = [](const Scenario& s) {
    return std::vector<ScenarioProblem>{
        {"model.architectures", "no family for " + s.model.architecture},
        {"model.head_dim", "head_dim " + std::to_string(s.model.head_dim)}};
  };
  std::string err = error_of(kBase, {}, r);
  expect_at(err, 3, "model.architectures", "no family for Qwen3ForCausalLM");
  expect_at(err, 3, "model.head_dim", "head_dim 128");
  err = error_of(replace(kBase, "  config: qwen3.json\n",
                         "  config: qwen3.json\n  overrides:\n    head_dim: 64\n"),
                 {}, r);
  expect_at(err, 3, "model.architectures");
  expect_at(err, 5, "model.head_dim", "head_dim 64");
}

TEST_F(ScenarioReplayableRules, EveryMatrixVariantIsCheckedAtItsValue) {
  FlagValue f{"engine.kv_cache_dtype", "fp8"};
  std::string text = std::string(kBase) + "matrix:\n  kv_cache_dtype: [turboquant_4bit_nc, fp8]\n";
  std::string err = error_of(text, {}, flag_kv_dtype(f));
  expect_at(err, 17, "engine.kv_cache_dtype", "'fp8' is not supported");
  EXPECT_NE(err.find("[variant 'kv_cache_dtype=fp8']"), std::string::npos) << err;
  EXPECT_EQ(err.find("kv_cache_dtype=turboquant_4bit_nc"), std::string::npos) << err;
}

TEST_F(ScenarioReplayableRules, AProblemOutsideTheMatrixIsListedOnce) {
  FlagValue f{"engine.kv_cache_dtype", "turboquant_4bit_nc"};
  std::string err =
      error_of(std::string(kBase) + "matrix:\n  block_size: [16, 32]\n", {}, flag_kv_dtype(f));
  expect_at(err, 9, "engine.kv_cache_dtype");
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}

TEST_F(ScenarioReplayableRules, WithAMatrixOnlyTheVariantsAreChecked) {
  // The written value is replaced by every variant, so it is never replayed.
  FlagValue f{"engine.kv_cache_dtype", "turboquant_4bit_nc"};
  Scenario s =
      load(std::string(kBase) + "matrix:\n  kv_cache_dtype: [auto, fp8]\n", {}, flag_kv_dtype(f));
  EXPECT_EQ(f.calls, 2);
  EXPECT_EQ(s.variants.size(), 2u);
  // apply_variant checks again, with the rules given to load_scenario.
  apply_variant(s, s.variants[1]);
  EXPECT_EQ(f.calls, 3);
}

TEST_F(ScenarioReplayableRules, CalledOncePerLoadAndPerApplyVariantWithoutMatrix) {
  FlagValue f{"engine.kv_cache_dtype", "none-such"};
  Scenario s = load(kBase, {}, flag_kv_dtype(f));
  EXPECT_EQ(f.calls, 1);
  apply_variant(s, s.variants[0]);
  EXPECT_EQ(f.calls, 2);
}

TEST_F(ScenarioReplayableRules, NotCalledOnAnInvalidFile) {
  FlagValue f{"engine.kv_cache_dtype", "turboquant_4bit_nc"};
  std::string err =
      error_of(replace(kBase, "block_size: 16", "block_size: 12"), {}, flag_kv_dtype(f));
  EXPECT_EQ(f.calls, 0);
  EXPECT_EQ(err.find("not supported"), std::string::npos) << err;
}

TEST_F(ScenarioReplayableRules, EmptyKeyNamesTheFile) {
  FlagValue f{"", "turboquant_4bit_nc"};
  std::string err = error_of(kBase, {}, flag_kv_dtype(f));
  EXPECT_EQ(err, (fs::path(dir_) / "s.yaml").string() +
                     ": 'turboquant_4bit_nc' is not supported by this model");
}

TEST_F(ScenarioReplayableRules, WarmerNamesStillChecked) {
  ScenarioRules r;
  r.known_warmers = {"a", "c"};
  expect_at(error_of(kBase, {}, r), 15, "strategies.both.warmers.1", "unknown warmer 'b'");
}

// ---------------------------------------------------------------------------------------------
// Requests

const char* const kTwo =
    "  - {prompt_tokens: 512, decode_steps: 32}\n"
    "  - {prompt_tokens: 256, decode_steps: 8}\n";

std::string with_requests(const std::string& list) {
  return replace(kBase, "  - {prompt_tokens: 512, decode_steps: 32}\n", list);
}

TEST_F(ScenarioRequests, CompatibilityTwoEntriesMeanFirstAndSteady) {
  Scenario s = load(with_requests(kTwo));
  ASSERT_EQ(s.requests.size(), 2u);
  EXPECT_FALSE(s.requests[0].steady);
  EXPECT_TRUE(s.requests[1].steady);
  EXPECT_EQ(s.requests[0].arrival_step, 0);
  EXPECT_EQ(s.requests[1].arrival_step, 0);
  // One entry: no steady request.
  Scenario one = load(kBase);
  ASSERT_EQ(one.requests.size(), 1u);
  EXPECT_FALSE(one.requests[0].steady);
  // Three entries without roles: one first wave, all arriving at step 0.
  Scenario three =
      load(with_requests(std::string(kTwo) + "  - {prompt_tokens: 8, decode_steps: 1}\n"));
  ASSERT_EQ(three.requests.size(), 3u);
  for (const auto& r : three.requests) {
    EXPECT_FALSE(r.steady);
    EXPECT_EQ(r.arrival_step, 0);
  }
  // Appending a second request with --set gives the old meaning too.
  EXPECT_TRUE(load(kBase, {"requests.1={prompt_tokens: 8, decode_steps: 1}"}).requests[1].steady);
}

TEST_F(ScenarioRequests, AnyRoleKeyTurnsTheCompatibilityRuleOff) {
  Scenario s =
      load(with_requests("  - {prompt_tokens: 512, decode_steps: 32}\n"
                         "  - {prompt_tokens: 256, decode_steps: 8, arrival_step: 0}\n"));
  EXPECT_FALSE(s.requests[1].steady);
  s =
      load(with_requests("  - {prompt_tokens: 512, decode_steps: 32, steady: false}\n"
                         "  - {prompt_tokens: 256, decode_steps: 8}\n"));
  EXPECT_FALSE(s.requests[1].steady);
}

TEST_F(ScenarioRequests, ArrivalsAndSteady) {
  Scenario s = load(
      with_requests("  - {prompt_tokens: 512, decode_steps: 32}\n"
                    "  - {prompt_tokens: 100, decode_steps: 4, arrival_step: 3}\n"
                    "  - {prompt_tokens: 512, decode_steps: 32, steady: true}\n"
                    "  - {prompt_tokens: 64, decode_steps: 0, arrival_step: 1, steady: false}\n"));
  ASSERT_EQ(s.requests.size(), 4u);
  EXPECT_EQ(s.requests[1].arrival_step, 3);
  EXPECT_EQ(s.requests[1].prompt_tokens, 100);
  EXPECT_TRUE(s.requests[2].steady);
  EXPECT_FALSE(s.requests[3].steady);
  EXPECT_EQ(s.requests[3].arrival_step, 1);
  EXPECT_FALSE(s.requests[0].steady);
  EXPECT_FALSE(s.requests[1].steady);
}

TEST_F(ScenarioRequests, RoleErrors) {
  expect_at(error_of(with_requests("  - {prompt_tokens: 512, decode_steps: 32, steady: true}\n"
                                   "  - {prompt_tokens: 5, decode_steps: 3}\n"
                                   "  - {prompt_tokens: 512, decode_steps: 32, steady: true}\n")),
            14, "requests.2.steady", "at most one request is steady");
  expect_at(error_of(with_requests("  - {prompt_tokens: 512, decode_steps: 32, steady: true}\n")),
            12, "requests.0.steady", "at least one request must be in the first wave");
  expect_at(error_of(with_requests(
                "  - {prompt_tokens: 512, decode_steps: 32}\n"
                "  - {prompt_tokens: 5, decode_steps: 3, steady: true, arrival_step: 2}\n")),
            13, "requests.1.arrival_step", "takes no arrival_step");
  expect_at(error_of(with_requests("  - {prompt_tokens: 5, decode_steps: 3, arrival_step: -1}\n")),
            12, "requests.0.arrival_step", "must be in [0, 1048576]");
  // Past 2^20 idle steps the step indexes would outgrow what a results file holds.
  expect_at(error_of(with_requests(
                "  - {prompt_tokens: 5, decode_steps: 3, arrival_step: 2147483647}\n")),
            12, "requests.0.arrival_step", "must be in [0, 1048576], got 2147483647");
  expect_at(error_of(with_requests("  - {prompt_tokens: 5, decode_steps: 3, arrival_step: x}\n")),
            12, "requests.0.arrival_step", "expected an integer");
  expect_at(error_of(with_requests("  - {prompt_tokens: 5, decode_steps: 3, steady: 1}\n")), 12,
            "requests.0.steady", "expected true or false");
  expect_at(error_of(with_requests("  - {prompt_tokens: 5, decode_steps: 3, arival_step: 1}\n")),
            12, "requests.0.arival_step", "did you mean 'arrival_step'?");
  // Every request must fit max_model_len, not only the first two.
  expect_at(
      error_of(with_requests(std::string(kTwo) + "  - {prompt_tokens: 32768, decode_steps: 1}\n")),
      14, "requests.2", "exceeds max_model_len (32768)");
}

TEST_F(ScenarioRequests, SetArrivalStepAndSteady) {
  Scenario s = load(with_requests(kTwo), {"requests.1.arrival_step=5"});
  EXPECT_EQ(s.requests[1].arrival_step, 5);
  EXPECT_FALSE(s.requests[1].steady);  // a role key was given: no compatibility rule
  s = load(kBase, {"requests.1={prompt_tokens: 8, decode_steps: 1}", "requests.1.steady=true"});
  EXPECT_TRUE(s.requests[1].steady);
  std::string err = error_of(kBase, {"requests.0.arrival_step=-2"});
  EXPECT_NE(err.find("--set requests.0.arrival_step: key 'requests.0.arrival_step': must be in "
                     "[0, 1048576], got -2"),
            std::string::npos)
      << err;
  err = error_of(kBase, {"requests.0.arival_step=1"});
  EXPECT_NE(err.find("did you mean 'arrival_step'?"), std::string::npos) << err;
}

// ---------------------------------------------------------------------------------------------
// expect: rules (kBase ends at line 15: `expect:` is line 16, the first rule line 17)

std::string with_expect(const std::string& rules, const std::string& extra = "") {
  return std::string(kBase) + extra + "expect:\n" + rules;
}

TEST_F(ScenarioExpectRules, Parsed) {
  Scenario s = load(with_expect(
      "  - {strategy: none, variant: \"cudagraph_mode=piecewise\", mode: compile-only, outcome: "
      "crash, failed_phase: first_decode, error_prefix: \"Workspace is locked\", "
      "hot_path_compiles: 1, hot_path_kernels: [tq_b, tq_a, tq_b]}\n"
      "  - {strategy: \"*\", outcome: ok, max_hot_path_compiles: 0}\n",
      "matrix:\n  cudagraph_mode: [piecewise, full_and_piecewise]\n"));
  ASSERT_EQ(s.expectations.size(), 2u);
  const Expectation& a = s.expectations[0];
  EXPECT_EQ(a.strategy, "none");
  EXPECT_EQ(a.variant, "cudagraph_mode=piecewise");
  EXPECT_EQ(a.mode, "compile-only");
  EXPECT_EQ(a.outcome, "crash");
  EXPECT_EQ(a.failed_phase, "first_decode");
  EXPECT_EQ(a.error_prefix, "Workspace is locked");
  EXPECT_EQ(a.hot_path_compiles, 1);
  EXPECT_EQ(a.hot_path_kernels, (std::vector<std::string>{"tq_a", "tq_b"}));
  EXPECT_FALSE(a.max_hot_path_compiles.has_value());
  EXPECT_EQ(a.where, (fs::path(dir_) / "s.yaml").string() + ":19");
  const Expectation& b = s.expectations[1];
  EXPECT_EQ(b.strategy, "*");
  EXPECT_FALSE(b.variant.has_value());
  EXPECT_FALSE(b.mode.has_value());
  EXPECT_EQ(b.max_hot_path_compiles, 0);
  EXPECT_FALSE(b.hot_path_kernels.has_value());
  ASSERT_TRUE(s.expect.is_array());
  EXPECT_EQ(s.expect[0]["hot_path_compiles"], 1);
  // Variants keep the rules.
  EXPECT_EQ(apply_variant(s, s.variants[1]).expectations.size(), 2u);
}

TEST_F(ScenarioExpectRules, Errors) {
  expect_at(error_of(std::string(kBase) + "expect:\n  none: {outcome: crash}\n"), 17, "expect",
            "expected a list of rules");
  expect_at(error_of(with_expect("  - {strategy: none, outcom: ok}\n")), 17, "expect.0.outcom",
            "did you mean 'outcome'?");
  expect_at(error_of(with_expect("  - {outcome: ok}\n")), 17, "expect.0.strategy",
            "missing (required)");
  expect_at(error_of(with_expect("  - {strategy: nome, outcome: ok}\n")), 17, "expect.0.strategy",
            "unknown strategy 'nome' (did you mean 'none'?)");
  expect_at(error_of(with_expect("  - {strategy: none, outcome: ok}\n  - {strategy: both}\n")), 18,
            "expect.1", "a rule needs at least one check");
  expect_at(error_of(with_expect("  - {strategy: none, variant: \"block_size=32\", outcome: ok}\n")),
            17, "expect.0.variant",
            "the scenario has no matrix, so its results have no variant (leave 'variant' out)");
  expect_at(error_of(with_expect("  - {strategy: none, outcome: crashed}\n")), 17,
            "expect.0.outcome", "did you mean 'crash'?");
  expect_at(error_of(with_expect("  - {strategy: none, mode: gpu, outcome: ok}\n")), 17,
            "expect.0.mode", "unknown mode 'gpu'");
  expect_at(error_of(with_expect("  - {strategy: none, arch: sm_91, outcome: ok}\n")), 17,
            "expect.0.arch", "unknown arch 'sm_91'");
  expect_at(error_of(with_expect("  - {strategy: none, device: \"\", outcome: ok}\n")), 17,
            "expect.0.device", "unknown device ''");
  expect_at(error_of(with_expect("  - {strategy: none, device: h2000, outcome: ok}\n")), 17,
            "expect.0.device", "unknown device 'h2000' (did you mean 'h200'?)");
  expect_at(error_of(with_expect("  - {strategy: none, device: [H200], outcome: ok}\n")), 17,
            "expect.0.device");
  expect_at(error_of(with_expect("  - {strategy: none, rank: -1, outcome: ok}\n")), 17,
            "expect.0.rank", "must be in [0, 63], got -1");
  expect_at(error_of(with_expect("  - {strategy: none, rank: 64, outcome: ok}\n")), 17,
            "expect.0.rank", "must be in [0, 63], got 64");
  // The base scenario runs one rank (tensor_parallel_size 1): rank 1 cannot exist.
  expect_at(error_of(with_expect("  - {strategy: none, rank: 1, outcome: ok}\n")), 17,
            "expect.0.rank", "rank 1 is not a rank of this scenario: tensor_parallel_size is 1");
  EXPECT_EQ(load(with_expect("  - {strategy: none, rank: 0, outcome: ok}\n")).expectations[0].rank,
            0);
  expect_at(error_of(with_expect("  - {strategy: none, hot_path_compiles: -1}\n")), 17,
            "expect.0.hot_path_compiles", "must be at least 0");
  expect_at(error_of(with_expect("  - {strategy: none, max_hot_path_compiles: x}\n")), 17,
            "expect.0.max_hot_path_compiles", "expected an integer");
  expect_at(error_of(with_expect("  - {strategy: none, hot_path_kernels: tq}\n")), 17,
            "expect.0.hot_path_kernels", "expected a list of kernel names");
  expect_at(error_of(with_expect("  - {strategy: none, variant: \"x=1\", outcome: ok}\n")), 17,
            "expect.0.variant", "the scenario has no matrix");
  expect_at(
      error_of(with_expect("  - {strategy: none, variant: \"cudagraph_mode=ful\", outcome: ok}\n",
                           "matrix:\n  cudagraph_mode: [piecewise, full]\n")),
      19, "expect.0.variant", "did you mean 'cudagraph_mode=full'?");
  // Reported on a multi-line rule at the key's own line.
  expect_at(error_of(with_expect("  - strategy: none\n    outcome: ok\n    failed_phse: x\n")), 19,
            "expect.0.failed_phse", "did you mean 'failed_phase'?");
}

TEST_F(ScenarioExpectRules, NamesAsWrittenSurviveSet) {
  // --set pins the matrix axis (no variants left) and replaces the strategies: rules naming the
  // file's variants and strategies still load (they then match no result: check_expectations).
  std::string text = with_expect(
      "  - {strategy: both, variant: \"cudagraph_mode=piecewise\", "
      "outcome: ok}\n",
      "matrix:\n  cudagraph_mode: [piecewise, full]\n");
  Scenario s = load(text, {"cudagraph_mode=full", "strategies={x: []}"});
  ASSERT_EQ(s.expectations.size(), 1u);
  EXPECT_EQ(s.variants.size(), 1u);
  // A rule given by --set says so.
  s = load(kBase, {"expect=[{strategy: none, outcome: ok}]"});
  ASSERT_EQ(s.expectations.size(), 1u);
  EXPECT_EQ(s.expectations[0].where, "--set expect");
}

}  // namespace
}  // namespace coldstart
