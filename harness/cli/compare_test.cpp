// Tests of `coldstart compare` / `coldstart merge` on results files made from a real H200 run
// (harness/cli/testdata/README.md says how each file differs from base.json).
#include "harness/cli/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <iterator>
#include <string>

#include "harness/common/error.h"
#include "harness/common/paths.h"

namespace coldstart::cli {
namespace {

std::string data(const std::string& name) { return std::string(CS_COMPARE_TESTDATA) + "/" + name; }

RunResults load(const std::string& name) { return read_results_json(data(name)); }

const CompareRow* find_row(const CompareReport& r, const std::string& strategy,
                           const std::string& variant) {
  for (const auto& row : r.rows)
    if (row.strategy == strategy && row.variant == variant) return &row;
  return nullptr;
}

const MetricDelta* metric(const CompareRow& row, const std::string& name) {
  for (const auto& m : row.metrics)
    if (m.name == name) return &m;
  return nullptr;
}

// A fresh directory for files a test writes.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/cs_compare_test.XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { (void)std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

constexpr const char* kPW = "cudagraph_mode=piecewise";
constexpr const char* kFP = "cudagraph_mode=full_and_piecewise";

TEST(Compare, SameFileIsNotRegressed) {
  const RunResults base = load("base.json");
  const CompareReport r = compare_results(base, base, CompareOptions{});
  EXPECT_FALSE(r.regressed) << r.render();
  EXPECT_TRUE(r.reasons.empty());
  ASSERT_EQ(r.rows.size(), base.results.size());
  for (const auto& row : r.rows) {
    EXPECT_EQ(row.presence, CompareRow::Presence::kBoth);
    EXPECT_FALSE(row.regressed) << row.label();
    // The crash in `none` [piecewise] is old: no outcome change.
    EXPECT_EQ(row.outcome_change, "") << row.label();
  }
  EXPECT_NE(r.render().find("no regressions"), std::string::npos);
}

TEST(Compare, SameFileExitsZero) {
  testing::internal::CaptureStdout();
  const int rc = compare_main(data("base.json"), data("base.json"), 10.0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0) << out;
}

TEST(Compare, NewCrashIsRegressedAndNamed) {
  const CompareReport r = compare_results(load("base.json"), load("crash.json"), CompareOptions{});
  ASSERT_TRUE(r.regressed);
  const CompareRow* row = find_row(r, "tq-decode-warmup", kPW);
  ASSERT_NE(row, nullptr);
  EXPECT_TRUE(row->new_failure);
  EXPECT_EQ(row->current_outcome, Outcome::kCrash);
  ASSERT_EQ(r.reasons.size(), 1u) << r.render();
  const std::string& reason = r.reasons[0];
  EXPECT_NE(reason.find("NEW CRASH"), std::string::npos) << reason;
  EXPECT_NE(reason.find("tq-decode-warmup"), std::string::npos) << reason;
  EXPECT_NE(reason.find(kPW), std::string::npos) << reason;
  EXPECT_NE(reason.find("in first_decode"), std::string::npos) << reason;
  EXPECT_NE(reason.find("Workspace is locked"), std::string::npos) << reason;
  // Only the error's first line is quoted.
  EXPECT_EQ(reason.find("at decode_attention"), std::string::npos) << reason;
  // The other tq-decode-warmup variant is untouched.
  EXPECT_FALSE(find_row(r, "tq-decode-warmup", kFP)->regressed);
}

TEST(Compare, NewCrashExitsOneAndPrintsReason) {
  testing::internal::CaptureStdout();
  const int rc = compare_main(data("base.json"), data("crash.json"), 10.0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("REGRESSED"), std::string::npos) << out;
  EXPECT_NE(out.find("NEW CRASH"), std::string::npos) << out;
}

TEST(Compare, CrashFixedIsNotARegression) {
  // Reversed: the crash goes away. That is "fixed", and TTFT etc. were null before.
  const CompareReport r = compare_results(load("crash.json"), load("base.json"), CompareOptions{});
  EXPECT_FALSE(r.regressed) << r.render();
  const CompareRow* row = find_row(r, "tq-decode-warmup", kPW);
  ASSERT_NE(row, nullptr);
  EXPECT_NE(row->outcome_change.find("FIXED"), std::string::npos);
  const MetricDelta* ttft = metric(*row, "ttft_ms");
  ASSERT_NE(ttft, nullptr);
  EXPECT_FALSE(ttft->compared);  // null baseline: not compared
}

TEST(Compare, NewHotPathCompileIsRegressed) {
  const CompareReport r =
      compare_results(load("base.json"), load("hotpath.json"), CompareOptions{});
  ASSERT_TRUE(r.regressed);
  const CompareRow* row = find_row(r, "both", kPW);
  ASSERT_NE(row, nullptr);
  ASSERT_EQ(row->new_hot_path_compiles.size(), 1u);
  EXPECT_EQ(row->new_hot_path_compiles[0].kernel, "tq_decode_stage1");
  ASSERT_EQ(r.reasons.size(), 1u);
  EXPECT_NE(r.reasons[0].find("NEW HOT-PATH COMPILE of tq_decode_stage1"), std::string::npos)
      << r.reasons[0];
  // The table shows the counts on both sides and how many are new; a legend says what each
  // verdict means.
  EXPECT_EQ(row->baseline_hot_path_compiles, 0);
  EXPECT_EQ(row->current_hot_path_compiles, 1);
  EXPECT_NE(r.render().find("0 -> 1 (1 new)     REGRESSED"), std::string::npos) << r.render();
  EXPECT_NE(r.render().find("verdicts: REGRESSED = a new crash"), std::string::npos);
  EXPECT_NE(r.render_markdown().find("| 0 -> 1 (1 new) | REGRESSED |"), std::string::npos)
      << r.render_markdown();
  // tq-reserve-max already compiled tq_decode_stage1 on the hot path in the baseline: not new.
  EXPECT_TRUE(find_row(r, "tq-reserve-max", kPW)->new_hot_path_compiles.empty());
}

TEST(Compare, RecompileForAnotherArchIsNotNew) {
  // sm100.json is base.json with "@sm_100/" keys: the same kernel instances, so nothing is new
  // and the SM difference is only noted.
  const CompareReport r = compare_results(load("base.json"), load("sm100.json"), CompareOptions{});
  EXPECT_FALSE(r.regressed) << r.render();
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("sm_100"), std::string::npos);
}

/// Rewrites the "#<hash>" of every compile key in `r` (a kernel source edit changes only that).
void change_source_hash(RunResults& r, const std::string& kernel) {
  for (StrategyResult& s : r.results)
    for (auto* list : {&s.hot_path_compiles, &s.startup_compile_list})
      for (CompileEvent& e : *list)
        if (e.kernel == kernel) e.key = e.key.substr(0, e.key.rfind('#') + 1) + "00000000deadbeef";
}

TEST(Compare, ASourceOnlyKernelChangeIsReportedNotRegressed) {
  const RunResults base = load("hotpath.json");
  RunResults cur = base;
  change_source_hash(cur, "tq_decode_stage1");
  const CompareReport r = compare_results(base, cur, CompareOptions{});
  EXPECT_FALSE(r.regressed) << r.render();
  size_t changed = 0;
  for (const CompareRow& row : r.rows) {
    EXPECT_TRUE(row.new_hot_path_compiles.empty()) << row.label();
    for (const SourceChange& c : row.kernel_source_changed) {
      EXPECT_EQ(c.current.kernel, "tq_decode_stage1");
      EXPECT_NE(c.baseline_source_hash, "00000000deadbeef");
      ++changed;
    }
  }
  EXPECT_GT(changed, 0u) << "hotpath.json compiles tq_decode_stage1 on the hot path";
  EXPECT_NE(r.render().find("kernel source changed (the same instances, not new compiles): "
                            "tq_decode_stage1: source "),
            std::string::npos)
      << r.render();
}

/// Replaces `from` with `to` in every compile key of `kernel` in `r`.
void edit_keys(RunResults& r, const std::string& kernel, const std::string& from,
               const std::string& to) {
  for (StrategyResult& s : r.results)
    for (CompileEvent& e : s.hot_path_compiles)
      if (e.kernel == kernel && e.key.find(from) != std::string::npos)
        e.key.replace(e.key.find(from), from.size(), to);
}

// A constexpr that follows the KV cache size (NUM_CACHE_LINES in the conv1d keys moved by 6
// blocks when CUPTI took memory first) changes the key of the same compile: reported as a key
// change naming the value, not as a new hot-path compile. One compile more of the kernel is new.
TEST(Compare, AKeyValueChangeIsReportedNotANewCompile) {
  const RunResults base = load("hotpath.json");
  RunResults cur = base;
  edit_keys(cur, "tq_decode_stage1", "NUM_KV_SPLITS=32", "NUM_KV_SPLITS=16");
  const CompareReport r = compare_results(base, cur, CompareOptions{});
  EXPECT_FALSE(r.regressed) << r.render();
  size_t changed = 0;
  for (const CompareRow& row : r.rows) {
    EXPECT_TRUE(row.new_hot_path_compiles.empty()) << row.label();
    for (const KeyChange& c : row.key_changed) {
      EXPECT_EQ(c.what, "NUM_KV_SPLITS 32 -> 16");
      EXPECT_NE(c.baseline_key.find("NUM_KV_SPLITS=32"), std::string::npos);
      ++changed;
    }
  }
  EXPECT_GT(changed, 0u);
  EXPECT_NE(r.render().find("note: compile key changed (the same kernel and phase, not new "
                            "compiles): tq_decode_stage1: NUM_KV_SPLITS 32 -> 16 ("),
            std::string::npos)
      << r.render();
  EXPECT_NE(r.render_markdown().find("compile key changed (1)"), std::string::npos);
  // Argument specializations are part of the key too.
  RunResults spec = base;
  edit_keys(spec, "tq_decode_stage1", "i32:16,fp32)", "i32,fp32)");
  const CompareReport rs = compare_results(base, spec, CompareOptions{});
  EXPECT_FALSE(rs.regressed) << rs.render();
  EXPECT_NE(rs.render().find("specializations (*bf16:16,"), std::string::npos) << rs.render();
  // A second compile of the kernel in the same phase has nothing to stand in for: new.
  RunResults more = base;
  for (StrategyResult& s : more.results) {
    std::vector<CompileEvent> extra;
    for (const CompileEvent& e : s.hot_path_compiles)
      if (e.kernel == "tq_decode_stage1") {
        CompileEvent twin = e;
        twin.key.replace(twin.key.find("NUM_KV_SPLITS=32"), 16, "NUM_KV_SPLITS=8");
        extra.push_back(twin);
      }
    for (CompileEvent& e : extra) s.hot_path_compiles.push_back(e);
  }
  const CompareReport rm = compare_results(base, more, CompareOptions{});
  EXPECT_TRUE(rm.regressed);
  EXPECT_NE(rm.render().find("NEW HOT-PATH COMPILE of tq_decode_stage1"), std::string::npos)
      << rm.render();
}

// CUPTI's callbacks (--host-split) slow every CUDA call: a run timed with them on one side only
// is noted and its timings are not compared.
TEST(Compare, AHostSplitRunOnOneSideIsNotedAndNotTimed) {
  const RunResults base = load("repeats_base.json");
  RunResults cur = load("repeats_beyond.json");
  ASSERT_TRUE(compare_results(base, cur, CompareOptions{}).regressed);  // a gated slowdown
  for (StrategyResult& r : cur.results)
    r.extra["cuda_api_timing"] = "on while requests ran: CUPTI's callbacks add host time";
  const CompareReport r = compare_results(base, cur, CompareOptions{});
  EXPECT_FALSE(r.regressed) << r.render();
  EXPECT_NE(r.render().find("the current file was timed with --host-split"), std::string::npos)
      << r.render();
  for (const CompareRow& row : r.rows)
    for (const MetricDelta& m : row.metrics) EXPECT_FALSE(m.compared) << row.label();
  // Both sides with it: compared as usual.
  RunResults base_split = base;
  for (StrategyResult& x : base_split.results) x.extra["cuda_api_timing"] = "on while requests ran";
  EXPECT_TRUE(compare_results(base_split, cur, CompareOptions{}).regressed);
}

TEST(Compare, AnotherTargetIsNotedAndItsTimingsAreNotGated) {
  const RunResults base = load("repeats_base.json");
  RunResults cur = load("repeats_beyond.json");  // regressed when compared on one target
  ASSERT_TRUE(compare_results(base, cur, CompareOptions{}).regressed);
  cur.meta.device_name = "NVIDIA H100 80GB HBM3";  // also sm_90
  const CompareReport r = compare_results(base, cur, CompareOptions{});
  EXPECT_FALSE(r.regressed) << r.render();
  bool noted = false;
  for (const std::string& n : r.notes) noted |= n.find("cross-target") != std::string::npos;
  EXPECT_TRUE(noted) << r.render();
  for (const CompareRow& row : r.rows)
    for (const MetricDelta& m : row.metrics) EXPECT_FALSE(m.compared) << row.label();
}

// A new crash or hot-path compile against another GPU's baseline is a difference (its tuned
// tables pick other tiles; a smaller card runs out of memory), listed but not gated unless asked.
TEST(Compare, AnotherTargetsNewCrashAndCompilesAreListedNotGatedUnlessAsked) {
  const RunResults base = load("base.json");
  RunResults cur = load("crash.json");  // a new crash on the same target
  ASSERT_TRUE(compare_results(base, cur, CompareOptions{}).regressed);
  CompileEvent extra;
  extra.kernel = "fused_moe_gemm";
  extra.phase = "continuation_prefill";
  extra.key = "fused_moe_gemm[BLOCK_SIZE_M=64](*bf16:16)@sm_90/nvrtc-13.0#00aa";
  cur.results.front().hot_path_compiles.push_back(extra);
  cur.meta.device_name = "NVIDIA H100 80GB HBM3";
  const CompareReport r = compare_results(base, cur, CompareOptions{});
  EXPECT_FALSE(r.regressed) << r.render();
  EXPECT_TRUE(r.reasons.empty()) << r.render();
  const std::string text = r.render();
  EXPECT_NE(text.find("differs (other target)"), std::string::npos) << text;
  EXPECT_NE(text.find("other target, not gated: NEW CRASH"), std::string::npos) << text;
  EXPECT_NE(text.find("other target, not gated: hot-path compile of fused_moe_gemm in "
                      "continuation_prefill"),
            std::string::npos)
      << text;
  CompareOptions gate;
  gate.gate_cross_target = true;
  const CompareReport g = compare_results(base, cur, gate);
  EXPECT_TRUE(g.regressed) << g.render();
  EXPECT_NE(g.render().find("NEW HOT-PATH COMPILE of fused_moe_gemm"), std::string::npos)
      << g.render();
}

// The shipped baselines still load with today's schema reader, each holds one target whose name
// the file is named for, and each compares clean against itself: a schema change that breaks
// them fails here, not in a nightly run.
TEST(Compare, ShippedBaselinesLoadAndEachHoldsTheGpuItIsNamedFor) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"h200-sm90.json", "NVIDIA H200"}, {"h100-sm90.json", "NVIDIA H100 80GB HBM3"}};
  for (const auto& [file, device] : files) {
    const std::vector<RunResults> runs = read_any_results(std::string(CS_BASELINES_DIR) + "/" + file);
    ASSERT_GE(runs.size(), 9u) << file;
    size_t results = 0;
    for (const RunResults& r : runs) {
      EXPECT_EQ(r.meta.device_name, device) << file << ": " << r.scenario.name;
      EXPECT_EQ(r.meta.sm, 90) << file << ": " << r.scenario.name;
      EXPECT_EQ(r.meta.mode, "cuda") << file << ": " << r.scenario.name;
      results += r.results.size();
    }
    EXPECT_GT(results, 60u) << file;
    const CompareReport self = compare_results(runs, runs, CompareOptions{});
    EXPECT_FALSE(self.regressed) << file << "\n" << self.render();
    EXPECT_EQ(self.rows.size(), results) << file;
  }
}

TEST(Compare, MarkdownCommentNamesTheRegressionAndOnlyChangedPairs) {
  TempDir dir;
  const std::string md = dir.file("comment.md");
  testing::internal::CaptureStdout();
  const int rc = compare_main(data("base.json"), data("crash.json"), 10.0, false, md);
  (void)testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 1);
  std::ifstream f(md);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("**REGRESSED** (1 reason)"), std::string::npos) << text;
  EXPECT_NE(text.find("- :x: "), std::string::npos) << text;
  EXPECT_NE(text.find("| tq-decode-warmup | cudagraph_mode=piecewise | ok -> crash"),
            std::string::npos) << text;
  EXPECT_NE(text.find("unchanged pairs)"), std::string::npos) << text;
  // The comment may not overwrite an input.
  testing::internal::CaptureStderr();
  EXPECT_EQ(compare_main(data("base.json"), data("crash.json"), 10.0, false, data("crash.json")), 2);
  (void)testing::internal::GetCapturedStderr();
}

// Names from results files are Markdown text in the comment (no raw HTML, emphasis or code), and
// a comment with thousands of regressions stays under GitHub's limit and says what it left out.
TEST(Compare, MarkdownCommentEscapesNamesAndFitsTheCommentLimit) {
  const RunResults base = load("base.json");
  RunResults cur = load("crash.json");
  for (StrategyResult& r : cur.results) r.strategy = "<b>x</b>*" + r.strategy + "`";
  RunResults base_named = base;
  for (StrategyResult& r : base_named.results) r.strategy = "<b>x</b>*" + r.strategy + "`";
  const std::string md = compare_results(base_named, cur, CompareOptions{}).render_markdown();
  EXPECT_EQ(md.find("<b>"), std::string::npos) << md;
  EXPECT_NE(md.find("&lt;b&gt;x&lt;/b&gt;\\*tq-decode-warmup\\`"), std::string::npos) << md;
  // Many pairs, each crashing anew: the full comment is far past the limit.
  std::vector<RunResults> bs, cs;
  for (int i = 0; i < 400; ++i) {
    RunResults b = base, c = cur;
    b.scenario.name = c.scenario.name = "scenario-" + std::to_string(i);
    bs.push_back(b);
    cs.push_back(c);
  }
  const CompareReport big = compare_results(bs, cs, CompareOptions{});
  ASSERT_TRUE(big.regressed);
  EXPECT_GT(big.render_markdown(0).size(), 65536u);
  const std::string cut = big.render_markdown();
  EXPECT_LE(cut.size(), 65536u);
  EXPECT_NE(cut.find("Shortened to fit 65536 bytes, left out: "), std::string::npos);
  EXPECT_NE(cut.find("### coldstart compare: **REGRESSED** ("), std::string::npos) << cut.substr(0, 200);
  EXPECT_NE(cut.find("<sub>verdicts: REGRESSED"), std::string::npos);  // the legend stays
}

TEST(Compare, TtftChangeWithinSpreadIsNotFlagged) {
  const CompareReport r = compare_results(load("repeats_base.json"),
                                          load("repeats_within_spread.json"), CompareOptions{});
  const CompareRow* row = find_row(r, "both", kFP);
  ASSERT_NE(row, nullptr);
  const MetricDelta* ttft = metric(*row, "ttft_ms");
  ASSERT_NE(ttft, nullptr);
  ASSERT_TRUE(ttft->compared);
  EXPECT_GT(ttft->delta_pct(), 10.0);           // beyond the threshold...
  EXPECT_DOUBLE_EQ(ttft->spread_ms, 50.0);      // ...but the baseline spread is 50 ms
  EXPECT_LT(ttft->delta_ms(), ttft->spread_ms);
  EXPECT_FALSE(ttft->regressed);
  EXPECT_FALSE(r.regressed) << r.render();
}

TEST(Compare, TtftChangeBeyondThresholdAndSpreadIsFlagged) {
  const CompareReport r = compare_results(load("repeats_base.json"), load("repeats_beyond.json"),
                                          CompareOptions{});
  const CompareRow* row = find_row(r, "both", kFP);
  ASSERT_NE(row, nullptr);
  const MetricDelta* ttft = metric(*row, "ttft_ms");
  ASSERT_NE(ttft, nullptr);
  EXPECT_TRUE(ttft->regressed);
  EXPECT_FALSE(metric(*row, "startup_ms")->regressed);
  ASSERT_TRUE(r.regressed);
  ASSERT_EQ(r.reasons.size(), 1u);
  EXPECT_NE(r.reasons[0].find("TTFT REGRESSION"), std::string::npos) << r.reasons[0];
  EXPECT_NE(r.reasons[0].find("both"), std::string::npos);
  // A looser threshold (100%) lets the same change through.
  CompareOptions loose;
  loose.max_regression_pct = 100.0;
  EXPECT_FALSE(compare_results(load("repeats_base.json"), load("repeats_beyond.json"), loose)
                   .regressed);
}

TEST(Compare, SingleRunTimingsAreShownButNotGated) {
  // No repeat fields: a single run records no noise level, so even a +50% TTFT is shown (with
  // its delta) but not flagged; two single runs of one build must not fail the gate.
  RunResults base = load("base.json");
  RunResults cur = base;
  for (auto& s : cur.results)
    if (s.strategy == "both" && s.variant == kFP) *s.ttft_ms *= 1.5;
  const CompareReport r = compare_results(base, cur, CompareOptions{});
  EXPECT_FALSE(r.regressed) << r.render();
  bool seen = false;
  for (const auto& row : r.rows) {
    if (row.strategy != "both" || row.variant != kFP) continue;
    for (const auto& m : row.metrics) {
      if (m.name != "ttft_ms") continue;
      seen = true;
      EXPECT_TRUE(m.compared);
      EXPECT_FALSE(m.gated);
      EXPECT_NEAR(m.delta_pct(), 50.0, 1e-6);
    }
  }
  EXPECT_TRUE(seen);
  // The same growth with a recorded spread (as --repeat writes) smaller than it is flagged.
  for (auto* run : {&base, &cur})
    for (auto& s : run->results)
      if (s.strategy == "both" && s.variant == kFP) {
        s.extra["ttft_ms_min"] = *s.ttft_ms - 0.5;
        s.extra["ttft_ms_max"] = *s.ttft_ms + 0.5;
      }
  EXPECT_TRUE(compare_results(base, cur, CompareOptions{}).regressed);
}

// The steady request's TTFT (what a kernel's speed moves, with no compile in it) is a compared
// column of its own, gated like TTFT against a recorded spread, and named in the tables.
TEST(Compare, SteadyTtftIsComparedAndGatedAgainstItsSpread) {
  RunResults base = load("base.json");
  for (auto& s : base.results) s.steady_ttft_ms = 20.0;
  RunResults cur = base;
  for (auto& s : cur.results) s.steady_ttft_ms = 30.0;
  const CompareReport single = compare_results(base, cur, CompareOptions{});
  EXPECT_FALSE(single.regressed) << "one run per side: shown, not gated\n" << single.render();
  ASSERT_FALSE(single.rows.empty());
  const MetricDelta* m = metric(single.rows.front(), "steady_ttft_ms");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->compared);
  EXPECT_NEAR(m->delta_pct(), 50.0, 1e-9);
  EXPECT_NE(single.render().find("STEADY TTFT ms"), std::string::npos) << single.render();
  EXPECT_NE(single.render().find("20.0 -> 30.0 (+50.0%)"), std::string::npos) << single.render();
  EXPECT_NE(single.render_markdown().find("| steady TTFT ms |"), std::string::npos);
  // A steady TTFT the current ok run lost is a change, not "same".
  {
    RunResults lost = cur;
    for (auto& s : lost.results) s.steady_ttft_ms.reset();
    const CompareReport r = compare_results(base, lost, CompareOptions{});
    EXPECT_FALSE(r.regressed);
    for (const CompareRow& row : r.rows)
      EXPECT_EQ(row.ungated_change, row.current_outcome == Outcome::kOk) << row.label() << "\n" << r.render();
    EXPECT_NE(r.render().find("20.0 -> n/a"), std::string::npos) << r.render();
  }
  // A spread in the baseline alone gates nothing: the current single run's noise is unknown.
  for (auto& s : base.results) {
    s.extra["steady_ttft_ms_min"] = *s.steady_ttft_ms - 1.0;
    s.extra["steady_ttft_ms_max"] = *s.steady_ttft_ms + 1.0;
  }
  EXPECT_FALSE(compare_results(base, cur, CompareOptions{}).regressed);
  for (auto& s : cur.results) {
    s.extra["steady_ttft_ms_min"] = *s.steady_ttft_ms - 1.0;
    s.extra["steady_ttft_ms_max"] = *s.steady_ttft_ms + 1.0;
  }
  const CompareReport gated = compare_results(base, cur, CompareOptions{});
  EXPECT_TRUE(gated.regressed) << gated.render();
  bool named = false;
  for (const std::string& reason : gated.reasons) named |= reason.find("steady TTFT") != std::string::npos;
  EXPECT_TRUE(named) << fmt::format("{}", fmt::join(gated.reasons, "\n"));
}

TEST(Compare, AddedAndRemovedStrategiesAreListedAndRemovedOnesFailUnlessAllowed) {
  RunResults base = load("base.json");
  RunResults cur = base;
  cur.results.erase(cur.results.begin());   // `none` [piecewise] removed
  cur.results.back().strategy = "new-one";  // `both` [full_and_piecewise] renamed: added+removed
  const CompareReport strict = compare_results(base, cur, CompareOptions{});
  ASSERT_TRUE(strict.regressed) << strict.render();
  ASSERT_EQ(strict.reasons.size(), 1u);
  EXPECT_NE(strict.reasons[0].find("2 baseline result(s) missing from the current file"),
            std::string::npos)
      << strict.reasons[0];
  CompareOptions allow;
  allow.allow_removed = true;
  const CompareReport r = compare_results(base, cur, allow);
  EXPECT_FALSE(r.regressed) << r.render();
  int added = 0, removed = 0;
  for (const auto& row : r.rows) {
    added += row.presence == CompareRow::Presence::kAdded;
    removed += row.presence == CompareRow::Presence::kRemoved;
  }
  EXPECT_EQ(added, 1);
  EXPECT_EQ(removed, 2);
  EXPECT_NE(r.render().find("added"), std::string::npos);
}

// An interrupted run measured nothing: its pairs are not compared. One interrupted in the current
// file fails the comparison like a missing one (unless --allow-removed); one interrupted in the
// baseline is only listed.
TEST(Compare, InterruptedResultsAreNotComparedAndCurrentOnesFailUnlessAllowed) {
  const RunResults base = load("base.json");
  RunResults cur = base;
  StrategyResult& stopped = cur.results.front();
  stopped.outcome = Outcome::kInterrupted;
  stopped.error = "interrupted by SIGINT (the run was stopped)";
  stopped.failed_phase = "kernel_warmup";
  stopped.startup_ms = std::nullopt;
  const CompareReport strict = compare_results(base, cur, CompareOptions{});
  ASSERT_TRUE(strict.regressed) << strict.render();
  ASSERT_EQ(strict.reasons.size(), 1u) << strict.render();
  EXPECT_NE(strict.reasons[0].find("1 result(s) interrupted in the current file"),
            std::string::npos)
      << strict.reasons[0];
  const CompareRow* row = find_row(strict, stopped.strategy, stopped.variant);
  ASSERT_NE(row, nullptr);
  EXPECT_TRUE(row->interrupted);
  EXPECT_FALSE(row->new_failure) << "an interrupt is not a new crash";
  EXPECT_EQ(row->outcome_change, "INTERRUPTED in kernel_warmup: not compared");
  for (const MetricDelta& m : row->metrics) EXPECT_FALSE(m.compared) << m.name;
  EXPECT_NE(strict.render().find("interrupted"), std::string::npos);
  CompareOptions allow;
  allow.allow_removed = true;
  EXPECT_FALSE(compare_results(base, cur, allow).regressed);
  // Interrupted in the baseline: nothing to compare against, never a failure.
  const CompareReport back = compare_results(cur, base, CompareOptions{});
  EXPECT_FALSE(back.regressed) << back.render();
  const CompareRow* b = find_row(back, stopped.strategy, stopped.variant);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->outcome_change, "baseline interrupted in kernel_warmup: not compared");
  EXPECT_NE(back.render().find("not compared"), std::string::npos);
}

TEST(Compare, NegativeThresholdIsInputError) {
  const RunResults base = load("base.json");
  CompareOptions o;
  o.max_regression_pct = -1;
  EXPECT_THROW(compare_results(base, base, o), InputError);
  o.max_regression_pct = std::numeric_limits<double>::infinity();
  EXPECT_THROW(compare_results(base, base, o), InputError) << "an infinite threshold gates nothing";
}

// A big single-run change is not a regression, but the verdict must not read "same"; fewer
// hot-path compiles than the baseline is an improvement.
TEST(Compare, UngatedChangesAndFewerHotPathCompilesHaveTheirOwnVerdicts) {
  const RunResults base = load("base.json");
  RunResults cur = base;
  for (auto& s : cur.results)
    if (s.strategy == "both" && s.variant == kFP) *s.ttft_ms *= 10;
  CompareReport r = compare_results(base, cur, CompareOptions{});
  EXPECT_FALSE(r.regressed);
  const CompareRow* row = find_row(r, "both", kFP);
  ASSERT_NE(row, nullptr);
  EXPECT_TRUE(row->ungated_change);
  EXPECT_NE(r.render().find("changed (not gated)"), std::string::npos) << r.render();

  // hotpath.json has one more hot-path compile than base.json: compared the other way round,
  // the current run compiles less.
  r = compare_results(load("hotpath.json"), base, CompareOptions{});
  row = find_row(r, "both", kPW);
  ASSERT_NE(row, nullptr);
  EXPECT_TRUE(row->fewer_hot_path_compiles);
  EXPECT_FALSE(r.regressed);
  EXPECT_NE(r.render().find("improved"), std::string::npos) << r.render();
}

// A baseline without a single strategy result would pass anything: refused.
TEST(Compare, EmptyBaselineExitsTwo) {
  TempDir dir;
  const std::string empty = dir.file("empty.json");
  paths::write_file_atomic(empty, R"({"schema":"coldstart.merged/1","runs":[]})");
  testing::internal::CaptureStderr();
  const int rc = compare_main(empty, data("base.json"), 10.0);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("holds no strategy results"), std::string::npos) << err;
}

TEST(Compare, CompileOnlyNullsAreNotCompared) {
  RunResults base = load("base.json");
  for (auto& s : base.results) s.ttft_ms.reset();
  RunResults cur = load("base.json");
  for (auto& s : cur.results) s.ttft_ms.reset();
  const CompareReport r = compare_results(base, cur, CompareOptions{});
  for (const auto& row : r.rows) EXPECT_FALSE(metric(row, "ttft_ms")->compared);
  EXPECT_FALSE(r.regressed);
}

TEST(Compare, TimingsOfDifferentModesAreNotCompared) {
  // A compile-only run is much "faster" at startup than the GPU run; that is no improvement and
  // a slower one no regression. Outcomes and hot-path compiles are still compared.
  RunResults base = load("base.json");
  RunResults cur = base;
  cur.meta.mode = "compile-only";
  for (auto& s : cur.results) *s.startup_ms *= 3;
  const CompareReport r = compare_results(base, cur, CompareOptions{});
  EXPECT_FALSE(r.regressed) << r.render();
  for (const auto& row : r.rows) EXPECT_FALSE(metric(row, "startup_ms")->compared);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("compile-only"), std::string::npos) << r.notes[0];
  RunResults crashed = load("crash.json");
  crashed.meta.mode = "compile-only";
  EXPECT_TRUE(compare_results(base, crashed, CompareOptions{}).regressed);
}

TEST(Compare, UnreadableInputExitsTwo) {
  testing::internal::CaptureStderr();
  const int rc = compare_main(data("base.json"), data("bad.json"), 10.0);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("bad.json"), std::string::npos) << err;
}

TEST(ReadAnyResults, BadFileThrowsInputErrorWithPath) {
  for (const char* name : {"bad.json", "wrong_schema.json", "does_not_exist.json"}) {
    try {
      read_any_results(data(name));
      FAIL() << name << ": no exception";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(data(name)), std::string::npos) << e.what();
    }
  }
}

TEST(ReadAnyResults, MalformedRunInMergedFileNamesIndex) {
  TempDir dir;
  std::ofstream(dir.file("m.json")) << R"({"schema": "coldstart.merged/1", "runs": [{"x": 1}]})";
  try {
    read_any_results(dir.file("m.json"));
    FAIL() << "no exception";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("runs[0]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.file("m.json")), std::string::npos) << e.what();
  }
}

TEST(Merge, TwoSmsAreBothKept) {
  TempDir dir;
  const std::string out = dir.file("merged.json");
  testing::internal::CaptureStderr();
  const int rc = merge_main({data("base.json"), data("sm100.json")}, out);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(err.find("warning"), std::string::npos) << err;
  const auto runs = read_any_results(out);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].meta.sm, 90);
  EXPECT_EQ(runs[1].meta.sm, 100);
  EXPECT_EQ(runs[0].results.size(), 8u);
  EXPECT_EQ(runs[1].results.size(), 8u);
  EXPECT_EQ(runs[0], load("base.json"));  // nothing lost in the round trip
}

TEST(Merge, TwoTargetsOfOneSmAreBothKept) {
  RunResults h100 = load("base.json");
  h100.meta.device_name = "NVIDIA H100 80GB HBM3";
  std::vector<std::string> warnings;
  const auto merged = merge_results({load("base.json"), h100}, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(run_target(merged[0].meta), "NVIDIA H200");
  EXPECT_EQ(run_target(merged[1].meta), "NVIDIA H100 80GB HBM3");
  // A compile-only run with --target h200 is the same target as the H200 (its mode differs).
  RunMeta m;
  m.device_name = "compile-only: NVIDIA H200";
  m.sm = 90;
  EXPECT_EQ(run_target(m), "NVIDIA H200");
  m.device_name = "compile-only (sm_86)";
  m.sm = 86;
  EXPECT_EQ(run_target(m), "sm_86");
}

TEST(Merge, DuplicateLaterWinsWithWarning) {
  RunResults first = load("base.json");
  RunResults second = load("crash.json");
  second.results = {second.results[1]};  // only the re-run tq-decode-warmup [piecewise]
  second.meta.hostname = "rerun-host";
  std::vector<std::string> warnings;
  const auto merged = merge_results({first, second}, &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("tq-decode-warmup"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("rerun-host"), std::string::npos) << warnings[0];
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].results.size(), 7u);
  ASSERT_EQ(merged[1].results.size(), 1u);
  EXPECT_EQ(merged[1].results[0].outcome, Outcome::kCrash);
  // A run whose every result was superseded disappears.
  EXPECT_EQ(merge_results({first, first}).size(), 1u);
}

TEST(Merge, CompareAcceptsMergedFilesAndMatchesBySm) {
  TempDir dir;
  testing::internal::CaptureStderr();
  ASSERT_EQ(merge_main({data("base.json"), data("sm100.json")}, dir.file("a.json")), 0);
  ASSERT_EQ(merge_main({data("crash.json"), data("sm100.json")}, dir.file("b.json")), 0);
  (void)testing::internal::GetCapturedStderr();
  const CompareReport same = compare_results(read_any_results(dir.file("a.json")),
                                             read_any_results(dir.file("a.json")), {});
  EXPECT_FALSE(same.regressed);
  EXPECT_EQ(same.rows.size(), 16u);
  const CompareReport r = compare_results(read_any_results(dir.file("a.json")),
                                          read_any_results(dir.file("b.json")), {});
  ASSERT_TRUE(r.regressed) << r.render();
  ASSERT_EQ(r.reasons.size(), 1u);
  EXPECT_NE(r.reasons[0].find("(NVIDIA H200, sm_90)"), std::string::npos) << r.reasons[0];
  // The merged file against a single-run one: sm_100 rows are removed, sm_90 matched.
  EXPECT_TRUE(compare_results(read_any_results(dir.file("a.json")), {load("base.json")}, {})
                  .regressed)
      << "sm_100 results went missing";
  CompareOptions allow;
  allow.allow_removed = true;
  const CompareReport mixed =
      compare_results(read_any_results(dir.file("a.json")), {load("base.json")}, allow);
  EXPECT_FALSE(mixed.regressed);
  int removed = 0;
  for (const auto& row : mixed.rows) removed += row.presence == CompareRow::Presence::kRemoved;
  EXPECT_EQ(removed, 8);
}

TEST(Compare, ADifferentModelForTheSameScenarioIsNoted) {
  RunResults base = load("base.json");
  RunResults cur = base;
  cur.scenario.model["num_hidden_layers"] = 4;
  const CompareReport r = compare_results(base, cur, CompareOptions{});
  bool noted = false;
  for (const auto& n : r.notes) noted |= n.find("the model differs between the files") != std::string::npos;
  EXPECT_TRUE(noted) << r.render();
  for (const auto& n : compare_results(base, base, CompareOptions{}).notes)
    EXPECT_EQ(n.find("differs"), std::string::npos) << n;
}

TEST(Merge, UnreadableInputExitsTwo) {
  TempDir dir;
  testing::internal::CaptureStderr();
  const int rc = merge_main({data("base.json"), data("bad.json")}, dir.file("o.json"));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("bad.json"), std::string::npos);
  EXPECT_NE(::access(dir.file("o.json").c_str(), F_OK), 0);  // nothing written
}

// merge -o onto one of its inputs would destroy it: refused, the input left as it was.
TEST(Merge, OutputThatIsAnInputExitsTwoAndKeepsIt) {
  TempDir dir;
  const std::string in = dir.file("in.json");
  ASSERT_EQ(merge_main({data("base.json")}, in), 0);
  std::ifstream f0(in);
  const std::string before((std::istreambuf_iterator<char>(f0)), std::istreambuf_iterator<char>());
  testing::internal::CaptureStderr();
  const int rc = merge_main({in, data("sm100.json")}, in);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("is an input of this run"), std::string::npos) << err;
  std::ifstream f1(in);
  const std::string after((std::istreambuf_iterator<char>(f1)), std::istreambuf_iterator<char>());
  EXPECT_EQ(after, before);
}

}  // namespace
}  // namespace coldstart::cli
