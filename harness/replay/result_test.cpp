// Tests of the result schema's JSON form and the results-file reader/writer.
#include "harness/replay/result.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "harness/common/error.h"

namespace coldstart {
namespace {

using nlohmann::json;

StrategyResult sample() {
  StrategyResult r;
  r.strategy = "none";
  r.variant = "cudagraph_mode=full_and_piecewise";
  r.warmers = {};
  r.outcome = Outcome::kCrash;
  r.error = "Workspace is locked but allocation from 'a.cu:1:f' requires 2.00 MB, current size is "
            "0.26 MB. Workspace growth is not allowed after locking.";
  r.failed_phase = "first_decode";
  r.startup_ms = 1234.5;
  r.phases = {{"init", 1.25, std::nullopt, -1}, {"prefill", 8.5, 7.75, 0}};
  r.hot_path_compiles = {{"tq_decode_stage1", "k1", 210.0, "first_decode", "nvrtc"},
                         {"ssd_chunk_scan", "k2", 80.0, "prefill", "nvrtc", "autotune",
                          "dstate=128", "BLOCK_M=64,warps=4", 6}};
  r.startup_compile_list = {{"tq_store", "k0", 150.0, "kernel_warmup", "disk"}};
  // The second was needed by a drafter pass of request 0's step 0.
  r.hot_path_compiles[1].step.request = 0;
  r.hot_path_compiles[1].step.wave = 0;
  r.hot_path_compiles[1].step.step = 0;
  r.hot_path_compiles[1].step.batch_tokens = 600;
  r.hot_path_compiles[1].step.batch_seqs = 1;
  r.hot_path_compiles[1].step.drafter_pass = 2;
  r.hot_path_compiles[1].step.drafter_tokens = 3;
  r.startup_compiles = 1;
  r.workspace = {270336, 2097152, 2};
  r.exit_code = 0;
  r.wall_ms = 4000.25;
  r.extra["lazy_module_load_ms"] = 3.5;
  return r;
}

// A skipped run is its own outcome with its reason in a typed field; files from before kSkipped
// (outcome "error" with a "skipped" reason beside it) read as skipped too.
TEST(Outcome, SkippedIsTypedAndOlderFilesReadAsSkipped) {
  const nlohmann::json now = nlohmann::json::parse(
      R"({"strategy":"s","outcome":"skipped","skipped":"runs on [sm_100]","error":"runs on [sm_100]"})");
  const StrategyResult a = now.get<StrategyResult>();
  EXPECT_EQ(a.outcome, Outcome::kSkipped);
  EXPECT_EQ(a.skipped.value_or(""), "runs on [sm_100]");
  EXPECT_FALSE(a.extra.contains("skipped"));
  const nlohmann::json back = a;
  EXPECT_EQ(back.at("outcome"), "skipped");
  EXPECT_EQ(back.at("skipped"), "runs on [sm_100]");
  const nlohmann::json old = nlohmann::json::parse(
      R"({"strategy":"s","outcome":"error","skipped":"runs on [sm_100]"})");
  EXPECT_EQ(old.get<StrategyResult>().outcome, Outcome::kSkipped);
  const nlohmann::json plain = nlohmann::json::parse(R"({"strategy":"s","outcome":"error"})");
  const StrategyResult e = plain.get<StrategyResult>();
  EXPECT_EQ(e.outcome, Outcome::kError);
  EXPECT_FALSE(e.skipped.has_value());
  EXPECT_FALSE(nlohmann::json(e).contains("skipped")) << "absent unless skipped";
}

TEST(Outcome, NamesRoundTrip) {
  for (Outcome o : {Outcome::kOk, Outcome::kCrash, Outcome::kTimeout, Outcome::kError,
                    Outcome::kInterrupted, Outcome::kSkipped}) {
    EXPECT_EQ(parse_outcome(outcome_name(o)), o);
  }
  EXPECT_STREQ(outcome_name(Outcome::kTimeout), "timeout");
  EXPECT_STREQ(outcome_name(Outcome::kInterrupted), "interrupted");
  EXPECT_THROW(parse_outcome("fine"), InputError);
}

// A run stopped by SIGINT / SIGTERM: the running strategy's outcome and phase survive a results
// file, and so do the run's input checksums.
TEST(ResultsFile, InterruptedOutcomeAndInputsRoundTrip) {
  RunResults run;
  run.scenario.name = "s";
  StrategyResult r = sample();
  r.outcome = Outcome::kInterrupted;
  r.error = "interrupted by SIGINT (the run was stopped)";
  r.failed_phase = "kernel_warmup";
  run.results = {r};
  run.meta.inputs = {{"scenario", "scenarios/s.yaml", 1234, "0123456789abcdef", -1},
                     {"tuned_config_dir", "fixtures/tuned-configs", 28000, "fedcba9876543210", 4}};
  const json j = run;
  EXPECT_EQ(j["results"][0]["outcome"], "interrupted");
  EXPECT_EQ(j["results"][0]["failed_phase"], "kernel_warmup");
  EXPECT_EQ(j["meta"]["inputs"][0],
            json::parse(R"({"role": "scenario", "path": "scenarios/s.yaml", "bytes": 1234,
                            "fnv1a64": "0123456789abcdef"})"));
  EXPECT_EQ(j["meta"]["inputs"][1]["files"], 4);
  const std::string path = ::testing::TempDir() + "interrupted." + std::to_string(::getpid()) + ".json";
  write_results_json(path, run);
  EXPECT_EQ(read_results_json(path), run);
  std::remove(path.c_str());
  // Files written before meta.inputs existed still read.
  json old = j;
  old["meta"].erase("inputs");
  EXPECT_TRUE(old.get<RunResults>().meta.inputs.empty());
}

TEST(StrategyResultJson, FieldNamesAndNulls) {
  json j = sample();
  for (const char* k : {"strategy", "variant", "warmers", "outcome", "error", "failed_phase",
                        "startup_ms", "phases", "ttft_ms", "first_decode_ms", "steady_ttft_ms",
                        "steady_decode_ms", "startup_compiles", "hot_path_compiles",
                        "startup_compile_list", "workspace", "exit_code", "signal", "wall_ms"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["outcome"], "crash");
  EXPECT_TRUE(j["ttft_ms"].is_null());
  EXPECT_TRUE(j["signal"].is_null());
  EXPECT_TRUE(j["startup_compiles"].is_number_integer());
  EXPECT_EQ(j["phases"][0]["name"], "init");
  EXPECT_TRUE(j["phases"][0]["gpu_ms"].is_null());
  EXPECT_EQ(j["hot_path_compiles"][0]["kernel"], "tq_decode_stage1");
  EXPECT_EQ(j["hot_path_compiles"][0]["compile_ms"], 210.0);
  EXPECT_EQ(j["workspace"]["locked_bytes"], 270336);
  EXPECT_EQ(j["workspace"]["peak_requested_bytes"], 2097152);
  EXPECT_EQ(j["lazy_module_load_ms"], 3.5);  // extra is merged in
}

TEST(StrategyResultJson, RoundTripKeepsEverything) {
  StrategyResult r = sample();
  StrategyResult back = json(r).get<StrategyResult>();
  EXPECT_EQ(back, r);
  EXPECT_EQ(back.extra, json({{"lazy_module_load_ms", 3.5}}));
  // A compile's config provenance is kept; a fixed config writes no selector fields.
  const json j = json(r);
  EXPECT_FALSE(j["hot_path_compiles"][0].contains("selector"));
  EXPECT_EQ(j["hot_path_compiles"][1]["selector"], "autotune");
  EXPECT_EQ(j["hot_path_compiles"][1]["num_candidates"], 6);
  EXPECT_EQ(back.hot_path_compiles[1].tuning_key, "dstate=128");
  EXPECT_EQ(j["hot_path_compiles"][1]["drafter"], json({{"pass", 2}, {"tokens", 3}}));
  EXPECT_FALSE(j["hot_path_compiles"][0].contains("drafter"));
  EXPECT_EQ(back.hot_path_compiles[1].step.drafter_pass, 2);
}

TEST(StrategyResultJson, ExtraNeverOverridesANamedField) {
  StrategyResult r = sample();
  r.extra["outcome"] = "ok";
  json j = r;
  EXPECT_EQ(j["outcome"], "crash");
}

TEST(StrategyResultJson, ReaderToleratesMissingOptionalsAndRejectsBadTypes) {
  auto r = json::parse(R"({"strategy":"x","outcome":"ok","new_field":[1]})").get<StrategyResult>();
  EXPECT_EQ(r.strategy, "x");
  EXPECT_FALSE(r.ttft_ms.has_value());
  EXPECT_EQ(r.extra["new_field"], json::array({1}));
  EXPECT_THROW(json::parse(R"({"outcome":"ok"})").get<StrategyResult>(), json::exception);
  EXPECT_THROW(json::parse(R"({"strategy":"x","outcome":"ok","ttft_ms":"fast"})").get<StrategyResult>(),
               json::exception);
}

TEST(StrategyResultJson, NanBecomesNullAndReadsBackAsNan) {
  StrategyResult r = sample();
  r.wall_ms = std::nan("");
  json j = json::parse(json(r).dump());
  EXPECT_TRUE(j["wall_ms"].is_null());
  EXPECT_TRUE(std::isnan(j.get<StrategyResult>().wall_ms));
}

RunResults sample_run() {
  RunResults run;
  run.meta.coldstart_version = "0.1.0";
  run.meta.mode = "compile-only";
  run.meta.sm = 90;
  run.meta.started_at = "2025-01-01T00:00:00Z";
  run.scenario.name = "qwen3-8b-turboquant";
  run.scenario.model = {{"hidden_size", 4096}};
  run.results = {sample()};
  return run;
}

std::string temp_path(const std::string& stem) {
  return ::testing::TempDir() + stem + "." + std::to_string(::getpid()) + ".json";
}

TEST(ResultsFile, WriteThenReadRoundTrips) {
  RunResults run = sample_run();
  std::string path = temp_path("roundtrip");
  write_results_json(path, run);
  RunResults back = read_results_json(path);
  EXPECT_EQ(back, run);
  std::ifstream in(path);
  json j = json::parse(in);
  EXPECT_EQ(j["schema"], "coldstart.replay/1");
  std::remove(path.c_str());
}

// A byte that is not UTF-8 (in a scenario name, an error text) must not make the write throw and
// lose the run's results: it is written as U+FFFD.
TEST(ResultsFile, InvalidUtf8IsReplacedNotFatal) {
  RunResults run = sample_run();
  run.scenario.name = std::string("bad\xff name");
  run.results.at(0).error = std::string("text \xc3 cut");
  std::string path = temp_path("utf8");
  ASSERT_NO_THROW(write_results_json(path, run));
  RunResults back = read_results_json(path);
  EXPECT_EQ(back.scenario.name, "bad\xef\xbf\xbd name");
  EXPECT_EQ(back.results.size(), run.results.size());
  std::remove(path.c_str());
}

TEST(ResultsFile, WriteReplacesAnExistingFileAndLeavesNoTemp) {
  std::string path = temp_path("replace");
  { std::ofstream(path) << "old"; }
  write_results_json(path, sample_run());
  EXPECT_NO_THROW(read_results_json(path));
  std::remove(path.c_str());
}

TEST(ResultsFile, WriteToMissingDirectoryThrows) {
  EXPECT_THROW(write_results_json("/nonexistent-dir-coldstart/x.json", sample_run()), Error);
}

void expect_input_error(const std::string& text, const std::string& needle) {
  std::string path = temp_path("bad");
  { std::ofstream(path) << text; }
  try {
    read_results_json(path);
    ADD_FAILURE() << "no error for: " << text;
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
  std::remove(path.c_str());
}

TEST(ResultsFile, ReadErrorsNameTheFileAndTheProblem) {
  expect_input_error("{ not json", "not valid JSON");
  expect_input_error("[]", "expected a JSON object");
  expect_input_error(R"({"results": []})", "no \"schema\"");
  expect_input_error(R"({"schema": "coldstart.replay/2", "results": []})", "coldstart.replay/2");
  expect_input_error(R"({"schema": "coldstart.replay/1"})", "bad results file: key 'results' not found");
  expect_input_error(R"({"schema": "coldstart.replay/1", "results": [{"strategy": 3, "outcome": "ok"}]})",
                     "type");
  expect_input_error(R"({"schema": "coldstart.replay/1", "results": [{"strategy": "x", "outcome": "meh"}]})",
                     "unknown outcome 'meh'");
  EXPECT_THROW(read_results_json("/nonexistent-dir-coldstart/x.json"), InputError);
}

// Results files given to report / compare / merge (issue 10 item): a FIFO hung the reader,
// /dev/zero was read until memory ran out, 1e400 escaped as the library's out_of_range (exit 1),
// and deep nesting is bounded before the json copies recurse.
TEST(ResultsFile, HostileFilesAreInputErrors) {
  const std::string fifo = temp_path("fifo");
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    try {
      read_results_json(path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(path + ": cannot open results file: is a "),
                std::string::npos)
          << e.what();
    }
  }
  std::remove(fifo.c_str());
  expect_input_error(R"({"schema": "coldstart.replay/1", "x": 1e400})",
                     "not valid JSON: number overflow parsing '1e400'");
  expect_input_error(std::string(200, '[') + std::string(200, ']'),
                     "not valid JSON: nests more than 128 levels deep");
}

// Values a results file may not hold are refused when it is read, naming the key, before any
// report renders them: a 1.7976e308 ms startup made the HTML axis loop for ever, `sm: 1e300`
// showed as sm_-2147483648, and a `meta` or `scenario.model` of the wrong type was dropped.
TEST(ResultsFile, OutOfRangeValuesAndWrongTypesAreInputErrors) {
  const std::string head = R"({"schema": "coldstart.replay/1", )";
  const std::string one = R"("results": [{"strategy": "x", "outcome": "ok")";
  expect_input_error(head + one + R"(, "startup_ms": 1.7976e308}]})", "\"startup_ms\" is 1.7976e+308");
  expect_input_error(head + one + R"(, "ttft_ms": -3}]})", "\"ttft_ms\" is -3");
  expect_input_error(head + one + R"(, "phases": [{"name": "init", "ms": 1e300}]}]})", "\"ms\" is 1e+300");
  expect_input_error(head + one + R"(, "hot_path_compiles": [{"kernel": "k", "compile_ms": 1e13}]}]})",
                     "\"compile_ms\"");
  expect_input_error(head + R"("meta": {"sm": 1e300}, "results": []})", "\"sm\" is 1e+300");
  expect_input_error(head + R"("meta": {"sm": -90}, "results": []})", "\"sm\" is -90");
  expect_input_error(head + R"("meta": 5, "results": []})", "\"meta\" must be an object");
  // Byte counts, step numbers and the mode are checked too (1e30 read as INT64_MIN before).
  expect_input_error(head + one + R"(, "workspace": {"locked_bytes": 1e30}}]})", "\"locked_bytes\" is 1e+30");
  expect_input_error(head + one + R"(, "workspace": {"peak_requested_bytes": 0.5}}]})",
                     "\"peak_requested_bytes\" is 0.5");
  expect_input_error(head + one + R"(, "workspace": "x"}]})", "\"workspace\" must be an object");
  expect_input_error(head + one + R"(, "hot_path_compiles": [{"kernel": "k", "request": 1180591620717411303424}]}]})",
                     "\"request\" is");
  expect_input_error(head + one + R"(, "hot_path_compiles": [{"kernel": "k", "request": 0, "batch": "x"}]}]})",
                     "\"batch\" must be an object");
  expect_input_error(head + R"("meta": {"mode": "quantum"}, "results": []})", "\"mode\" is \"quantum\"");
  // A value of the wrong type names its key, nested keys as a path.
  expect_input_error(head + one + R"(, "ttft_ms": "fast"}]})",
                     "\"results\": \"ttft_ms\": type must be number, but is string");
  expect_input_error(head + one + R"(, "phases": [{"name": 3, "ms": 1}]}]})",
                     "\"results\": \"phases\": \"name\": type must be string");
  expect_input_error(head + R"("scenario": {"model": "x"}, "results": []})",
                     "\"scenario.model\" must be an object");
  // The spread --repeat keeps beside a timing: both ends, in range, around the median; a
  // crafted one would have silenced compare's gate.
  expect_input_error(head + one + R"(, "ttft_ms": 10, "ttft_ms_min": -1e9, "ttft_ms_max": 11}]})",
                     "\"ttft_ms_min\" is -1000000000");
  expect_input_error(head + one + R"(, "ttft_ms": 10, "ttft_ms_min": 9}]})",
                     "\"ttft_ms_min\" without \"ttft_ms_max\"");
  expect_input_error(head + one + R"(, "steady_ttft_ms": 10, "steady_ttft_ms_min": 12, "steady_ttft_ms_max": 13}]})",
                     "is no spread around \"steady_ttft_ms\" 10");
  expect_input_error(head + one + R"(, "ttft_ms": 10, "ttft_ms_min": 11, "ttft_ms_max": 9}]})",
                     "min <= value <= max");
  expect_input_error(head + one + R"(, "ttft_ms": 10, "ttft_ms_min": "9", "ttft_ms_max": 11}]})",
                     "\"ttft_ms_min\": type must be number");
  {
    const std::string spread = temp_path("spread.json");
    std::ofstream(spread) << head + one + R"(, "ttft_ms": 10, "ttft_ms_min": 9, "ttft_ms_max": 11}]})";
    EXPECT_NO_THROW(read_results_json(spread));
    std::remove(spread.c_str());
  }
  // Null times stay null (not measured), and a phase's null ms reads as not measured too.
  const std::string ok = head + one + R"(, "ttft_ms": null, "phases": [{"name": "init", "ms": null}]}]})";
  const std::string path = temp_path("nulls.json");
  {
    std::ofstream(path) << ok;
  }
  EXPECT_NO_THROW(read_results_json(path));
  std::remove(path.c_str());
}

TEST(JsonErrorText, DropsTheLibraryTagOnly) {
  try {
    nlohmann::json::object().at("results");
    FAIL() << "at() on a missing key must throw";
  } catch (const nlohmann::json::exception& e) {
    EXPECT_EQ(json_error_text(e), "key 'results' not found");
  }
}

// --repeat: the folded figures are medians with their spread; a series an interrupt stopped
// keeps the finished runs' times, not the stopped run's partial ones.
TEST(Repeats, FoldAndInterruptedSeriesKeepFinishedRunsTimes) {
  auto run = [](double ttft, std::optional<double> steady) {
    StrategyResult r;
    r.strategy = "s";
    r.outcome = Outcome::kOk;
    r.ttft_ms = ttft;
    r.steady_ttft_ms = steady;
    return r;
  };
  const StrategyResult f = fold_repeats({run(30, 5), run(10, 7), run(20, std::nullopt)});
  EXPECT_EQ(f.ttft_ms, 20.0);
  EXPECT_EQ(f.extra.at("ttft_ms_min"), 10.0);
  EXPECT_EQ(f.extra.at("ttft_ms_max"), 30.0);
  EXPECT_EQ(f.steady_ttft_ms, 6.0) << "the median of the runs that have it";
  EXPECT_EQ(f.extra.at("repeats"), 3);

  StrategyResult stopped = run(999, std::nullopt);  // partial: stopped before its steady request
  stopped.outcome = Outcome::kInterrupted;
  stopped.startup_ms = 1.0;
  stopped.failed_phase = "prefill";
  take_finished_times(stopped, {run(12, 4), run(14, 6)});
  EXPECT_EQ(stopped.outcome, Outcome::kInterrupted);
  EXPECT_EQ(stopped.failed_phase, "prefill");
  EXPECT_EQ(stopped.ttft_ms, 13.0);
  EXPECT_EQ(stopped.steady_ttft_ms, 5.0);
  EXPECT_FALSE(stopped.startup_ms.has_value()) << "no finished run has it";
  EXPECT_EQ(stopped.extra.at("ttft_ms_min"), 12.0);
  EXPECT_EQ(stopped.extra.at("times_from_runs"), 2);
  StrategyResult alone = run(999, std::nullopt);
  take_finished_times(alone, {});
  EXPECT_EQ(alone.ttft_ms, 999.0) << "no finished run: nothing to take";
  EXPECT_FALSE(alone.extra.contains("times_from_runs"));
}

}  // namespace
}  // namespace coldstart
