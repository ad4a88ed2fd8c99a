// Tests of the renderers: JSON round trip, the table against a golden file, results-file errors.
// Regenerate the golden file with COLDSTART_UPDATE_GOLDEN=1.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "harness/common/error.h"
#include "harness/replay/result.h"
#include "reports/golden_test_util.h"
#include "reports/render_util.h"
#include "reports/json_report.h"
#include "reports/renderers.h"
#include "reports/table.h"

namespace coldstart::reports {
namespace {

using nlohmann::json;

StrategyResult make(const std::string& strategy, std::vector<std::string> warmers, Outcome o) {
  StrategyResult r;
  r.strategy = strategy;
  r.warmers = std::move(warmers);
  r.outcome = o;
  r.exit_code = 0;
  return r;
}

// A fixed run: four strategies in compile-only mode (times null) plus one variant row on a GPU
// shape, covering ok, crash, timeout, error, null and measured values.
RunResults fixed_run() {
  RunResults run;
  run.meta.coldstart_version = "0.1.0";
  run.meta.git_sha = "3cb4a10deadb";
  run.meta.mode = "compile-only";
  run.meta.device_name = "compile-only";
  run.meta.sm = 90;
  run.meta.hostname = "ci-1";
  run.meta.started_at = "2025-01-31T12:00:00Z";
  run.meta.command_line = "coldstart replay scenarios/qwen3-8b-turboquant.yaml";
  run.scenario.name = "qwen3-8b-turboquant";
  run.scenario.file = "scenarios/qwen3-8b-turboquant.yaml";
  run.scenario.model = {{"hidden_size", 4096}, {"num_hidden_layers", 36}};
  run.scenario.engine = {{"max_num_seqs", 4}, {"cudagraph_mode", "piecewise"}};

  StrategyResult none = make("none", {}, Outcome::kCrash);
  none.failed_phase = "first_decode";
  none.error =
      "Workspace is locked but allocation from 'tq_decode.cpp:120:run_decode' requires 1.07 MB, "
      "current size is 0.00 MB. Workspace growth is not allowed after locking.";
  none.startup_ms = 812.25;
  none.phases = {{"init", 10.5, std::nullopt, -1}, {"graph_capture", 300.0, 280.5, -1}};
  none.hot_path_compiles = {{"tq_store", "a", 120.0, "prefill", "nvrtc"},
                            {"tq_decode_stage1", "b", 180.0, "first_decode", "nvrtc"}};
  none.workspace = {0, 1122304, 1};

  StrategyResult warm = make("tq-decode-warmup", {"tq-decode-warmup"}, Outcome::kOk);
  warm.startup_ms = 1290.5;
  warm.startup_compiles = 4;
  warm.workspace = {270336, 270336, 1};

  StrategyResult reserve = make("tq-reserve-max", {"tq-reserve-max"}, Outcome::kOk);
  reserve.startup_ms = 805.0;
  reserve.hot_path_compiles = {
      {"tq_store", "a", 120.0, "prefill", "nvrtc"},
      {"tq_store", "a2", 110.0, "prefill", "nvrtc"},
      {"tq_decode_stage1", "b", 180.0, "first_decode", "nvrtc"},
      {"tq_decode_stage2", "c", 90.0, "first_decode", "nvrtc"},
      {"tq_dequant_continuation", "d", 95.0, "continuation_prefill", "nvrtc"}};
  reserve.workspace = {4194304, 2097152, 1};

  StrategyResult both = make("tq-decode-warmup+tq-reserve-max",
                             {"tq-decode-warmup", "tq-reserve-max"}, Outcome::kTimeout);
  both.failed_phase = "graph_capture";
  both.error = "no progress after 600 s (watchdog)";
  both.exit_code = std::nullopt;
  both.signal = "SIGTERM";

  StrategyResult gpu = make("none", {}, Outcome::kOk);
  gpu.variant = "cudagraph_mode=full_and_piecewise";
  gpu.startup_ms = 15321.75;
  gpu.ttft_ms = 48.125;
  gpu.first_decode_ms = 9.5;
  gpu.steady_ttft_ms = 45.0;
  gpu.steady_decode_ms = 9.25;
  gpu.workspace = {1122304, 1122304, 2};

  StrategyResult broken = make("tq-reserve-max", {"tq-reserve-max"}, Outcome::kError);
  broken.variant = "cudagraph_mode=full_and_piecewise";
  broken.error = "child exited with code 3 before sending its final result\nsecond line";
  broken.exit_code = 3;

  // Out of variant order on purpose: the table groups by variant.
  run.results = {none, warm, gpu, reserve, both, broken};
  return run;
}

using testing::read_file;

TEST(JsonReport, RoundTripEqualsAndKeepsNulls) {
  RunResults run = fixed_run();
  std::string text = render_json(run);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  json j = json::parse(text);
  EXPECT_EQ(j["schema"], "coldstart.replay/1");
  ASSERT_EQ(j["results"].size(), 6u);
  const json& first = j["results"][0];
  EXPECT_TRUE(first.contains("ttft_ms"));
  EXPECT_TRUE(first["ttft_ms"].is_null());
  EXPECT_TRUE(first["steady_decode_ms"].is_null());
  EXPECT_TRUE(first["signal"].is_null());
  EXPECT_EQ(first["failed_phase"], "first_decode");
  EXPECT_EQ(j["results"][1]["error"], nullptr);
  EXPECT_EQ(j["meta"]["sm"], 90);
  EXPECT_EQ(j["scenario"]["model"]["hidden_size"], 4096);

  RunResults back = j.get<RunResults>();
  EXPECT_EQ(back, run);
  EXPECT_EQ(render_json(back), text);  // stable text
}

TEST(JsonReport, SameTextAsTheResultsFile) {
  RunResults run = fixed_run();
  std::string path = ::testing::TempDir() + "reports_test." + std::to_string(::getpid()) + ".json";
  write_results_json(path, run);
  EXPECT_EQ(read_file(path), render_json(run));
  EXPECT_EQ(read_results_json(path), run);
  std::remove(path.c_str());
}

TEST(Table, MatchesGolden) {
  testing::check_golden(std::string(CS_REPORTS_TESTDATA) + "/table_golden.txt",
                        render_table(fixed_run(), false));
}

TEST(Table, ColorOnlyAddsEscapes) {
  RunResults run = fixed_run();
  std::string plain = render_table(run, false);
  std::string colored = render_table(run, true);
  EXPECT_NE(plain, colored);
  EXPECT_EQ(plain.find('\033'), std::string::npos);
  std::string stripped = std::regex_replace(colored, std::regex("\033\\[[0-9;]*m"), "");
  EXPECT_EQ(stripped, plain);
}

TEST(Table, ShowsEveryRowAndEveryErrorInFull) {
  RunResults run = fixed_run();
  std::string text = render_table(run, false);
  for (const auto& r : run.results) {
    if (r.error) {
      std::string first_line = r.error->substr(0, r.error->find('\n'));
      EXPECT_NE(text.find(first_line), std::string::npos) << first_line;
    }
  }
  EXPECT_NE(text.find("crash @ first_decode"), std::string::npos);
  EXPECT_NE(text.find("timeout @ graph_capture"), std::string::npos);
  EXPECT_NE(text.find("  second line\n"), std::string::npos);
}

// Names and errors from a results file never reach the terminal as control characters: an ESC
// sequence, an OSC title, CR or a newline in a name are shown escaped, and the only escapes in a
// colored table are its own colors.
TEST(Table, ControlCharactersInNamesAndErrorsAreShownEscaped) {
  RunResults run = fixed_run();
  run.scenario.name = "evil\033]0;owned\007title";
  run.results[0].strategy = "none\r\nFAKE  ok";
  run.results[0].variant = "v\x9b" "2J";  // not valid UTF-8 alone: shown as U+FFFD
  run.results[0].error = "line one\033[2J\nline two\rover";
  run.results[1].extra["jit_warnings"] = nlohmann::json::array({"warn \u0085 \x7f"});
  for (bool color : {false, true}) {
    const std::string text = render_table(run, color);
    const std::string stripped = std::regex_replace(text, std::regex("\033\\[[0-9;]*m"), "");
    EXPECT_EQ(stripped.find('\033'), std::string::npos) << text;
    EXPECT_EQ(stripped.find('\r'), std::string::npos);
    EXPECT_EQ(stripped.find('\x07'), std::string::npos);
    EXPECT_EQ(stripped.find('\x7f'), std::string::npos);
    EXPECT_EQ(stripped.find("\nFAKE"), std::string::npos) << "a newline in a name made a line";
    EXPECT_NE(stripped.find("evil\\x1B]0;owned\\x07title"), std::string::npos) << stripped;
    EXPECT_NE(stripped.find("none\\x0D\\x0AFAKE  ok"), std::string::npos);
    EXPECT_NE(stripped.find("  line one\\x1B[2J\n  line two\\x0Dover\n"), std::string::npos)
        << "an error keeps its lines, indented";
    EXPECT_NE(stripped.find("warn \\u0085 \\x7F"), std::string::npos);
  }
  EXPECT_EQ(detail::terminal_text("a\tb\nc", true), "a\\x09b\nc");
  EXPECT_EQ(detail::terminal_text("a\nc"), "a\\x0Ac");
  // Bidirectional overrides and isolates and the Unicode line separator reorder or break a line.
  EXPECT_EQ(detail::terminal_text("a\u202Eb\u2066c\u2028d\u200Fe"),
            "a\\u202Eb\\u2066c\\u2028d\\u200Fe");
  EXPECT_EQ(detail::terminal_text("caf\u00e9 \u2192 ok"), "caf\u00e9 \u2192 ok");
}

// The table calls things what JUnit, Markdown and HTML call them: a strategy that compiled on the
// hot path although it forbids that is a failure, and an arch mismatch is "skipped" in the row and
// in the footer alike (not "error").
TEST(Table, DisallowedHotPathIsAFailureAndSkippedStaysSkipped) {
  RunResults run = fixed_run();
  StrategyResult strict = make("strict", {"tq-decode-warmup"}, Outcome::kOk);
  strict.extra["allow_hot_path_compiles"] = false;
  strict.hot_path_compiles = {{"tq_store", "a", 12.0, "prefill", "nvrtc"},
                              {"tq_store", "b", 11.0, "decode", "nvrtc"}};
  StrategyResult elsewhere = make("elsewhere", {}, Outcome::kSkipped);
  elsewhere.skipped = "scenario archs [sm_100] exclude sm_90";
  elsewhere.error = elsewhere.skipped;
  run.results.push_back(strict);
  run.results.push_back(elsewhere);
  const std::string text = render_table(run, false);
  EXPECT_NE(text.find("failed: hot-path compile"), std::string::npos) << text;
  EXPECT_NE(text.find("strict: failed: allow_hot_path_compiles is false\n  2 hot-path compile(s): "
                      "tq_store"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("elsewhere: skipped\n  scenario archs"), std::string::npos) << text;
  // Its row shows no counts: nothing ran.
  const size_t row = text.find("\nelsewhere ");
  ASSERT_NE(row, std::string::npos) << text;
  const std::string line = text.substr(row + 1, text.find('\n', row + 1) - row - 1);
  EXPECT_EQ(line.find("0.00 / 0.00"), std::string::npos) << line;
  EXPECT_EQ(line.rfind(" -"), line.size() - 2) << line;
  EXPECT_EQ(text.find("elsewhere: error"), std::string::npos) << text;
}

// One word for an arch mismatch everywhere: the JSON's outcome (read back as the same result), the
// Markdown cell and the HTML badge say "skipped", never "error".
TEST(Reports, SkippedIsSkippedInTheJsonMarkdownAndHtml) {
  RunResults run = fixed_run();
  StrategyResult elsewhere = make("elsewhere", {}, Outcome::kSkipped);
  elsewhere.skipped = "t runs on [sm_100]; this device is sm_90 (H200)";
  elsewhere.error = elsewhere.skipped;
  run.results.push_back(elsewhere);
  const nlohmann::json j = elsewhere;
  EXPECT_EQ(j.at("outcome"), "skipped");
  EXPECT_EQ(j.get<StrategyResult>(), elsewhere) << "reads back as the result it was";
  EXPECT_EQ(j.at("skipped"), *elsewhere.skipped);
  EXPECT_FALSE(j.get<StrategyResult>().extra.contains("skipped")) << "a typed field, not extra";
  StrategyResult failed = make("failed", {}, Outcome::kError);
  EXPECT_EQ(nlohmann::json(failed).at("outcome"), "error");
  const std::string md = render_markdown({run});
  EXPECT_NE(md.find("skipped (t runs on"), std::string::npos) << md;
  EXPECT_EQ(md.find("**elsewhere"), std::string::npos) << "not listed under Errors: " << md;
  EXPECT_EQ(md.find("**elsewhere**: error"), std::string::npos) << md;
  EXPECT_EQ(md.find("error (skipped"), std::string::npos) << md;
  const std::string html = render_html({run});
  EXPECT_NE(html.find("badge skipped"), std::string::npos);
  EXPECT_EQ(html.find("<span class=\"badge error\">error</span> <span class=\"badge skipped\""), std::string::npos);
}

TEST(Table, AWarmerThatDidNothingAndJitWarningsAreNamedUnderTheTable) {
  RunResults run = fixed_run();
  StrategyResult noop = make("ssd-on-dense", {"mamba-ssd-warmup"}, Outcome::kOk);
  noop.extra["warmers_skipped"]["mamba-ssd-warmup"] = "no Mamba2 layer, nothing to warm";
  noop.extra["jit_warnings"] = {"kernel cache entry x.cubin (k) is damaged: checksum mismatch"};
  run.results.push_back(noop);
  const std::string text = render_table(run, false);
  EXPECT_NE(text.find("ssd-on-dense: warning: kernel cache entry x.cubin (k) is damaged"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ssd-on-dense: warmer mamba-ssd-warmup did nothing: no Mamba2 layer"),
            std::string::npos)
      << text;
  EXPECT_EQ(render_table(fixed_run(), false).find("did nothing"), std::string::npos);
}

TEST(Table, AWarmerReportIsALineUnderTheTable) {
  RunResults run = fixed_run();
  StrategyResult dg = make("dense", {"deepgemm-warmup"}, Outcome::kOk);
  dg.extra["warmer_reports"]["deepgemm-warmup"] = {{"summary", "10 calls, 3 distinct kernels"}, {"wall_s", 1.5}};
  run.results.push_back(dg);
  const std::string text = render_table(run, false);
  EXPECT_NE(text.find("dense: deepgemm-warmup: 10 calls, 3 distinct kernels"), std::string::npos) << text;
  EXPECT_EQ(render_table(fixed_run(), false).find("distinct kernels"), std::string::npos);
}

TEST(Table, HotPathLoadsFromTheKernelCacheAreShownApartAndNeverFail) {
  RunResults run = fixed_run();
  StrategyResult warm = make("warm-cache", {"tq-decode-warmup"}, Outcome::kOk);
  warm.extra["allow_hot_path_compiles"] = false;
  warm.hot_path_compiles = {{"tq_store", "a", 0.3, "prefill", "disk"}};
  run.results.push_back(warm);
  const std::string text = render_table(run, false);
  EXPECT_NE(text.find("0 (+1 loaded)"), std::string::npos) << text;
  EXPECT_EQ(text.find("warm-cache: failed"), std::string::npos) << text;
}

TEST(Table, SetOverridesAreShownInTheHeader) {
  RunResults run = fixed_run();
  run.meta.sets = {"cudagraph_mode=piecewise", "requests.0.prompt_tokens=8192"};
  EXPECT_NE(render_table(run, false).find(
                "--set cudagraph_mode=piecewise  --set requests.0.prompt_tokens=8192\n"),
            std::string::npos);
  EXPECT_EQ(render_table(fixed_run(), false).find("--set"), std::string::npos);
}

TEST(Table, EmptyRun) {
  RunResults run;
  std::string text = render_table(run, false);
  EXPECT_NE(text.find("(no results)"), std::string::npos);
}

TEST(ReadResults, ErrorsNameTheFile) {
  std::string path = ::testing::TempDir() + "reports_bad." + std::to_string(::getpid()) + ".json";
  {
    std::ofstream(path) << R"({"schema": "something-else", "results": []})";
  }
  try {
    read_results_json(path);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("something-else"), std::string::npos) << msg;
  }
  {
    std::ofstream(path) << R"({"schema": "coldstart.replay/1", "results": [)";
  }
  try {
    read_results_json(path);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parse error"), std::string::npos) << msg;  // nlohmann's own message
  }
  std::remove(path.c_str());
  EXPECT_THROW(read_results_json(path), InputError);
}

}  // namespace
}  // namespace coldstart::reports
