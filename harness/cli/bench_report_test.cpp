// Tests of `coldstart bench-report`: reading Google Benchmark JSON reports (aggregates folded,
// units, skipped programs), the table, and the baseline's speed-up column.
#include "harness/cli/bench_report.h"

#include <gtest/gtest.h>

#include <fstream>

#include "harness/common/error.h"
#include "harness/common/paths.h"

namespace coldstart::cli {
namespace {

const std::string kDir = std::string(CS_COMPARE_TESTDATA) + "/bench";

TEST(BenchReport, ReadsRowsFoldingRepetitionsIntoTheirMean) {
  const BenchFile f = read_bench_file(kDir + "/fused_moe_bench.json");
  EXPECT_EQ(f.bench, "fused_moe_bench");
  EXPECT_EQ(f.device, "NVIDIA H200 (sm_90, 132 SMs)");
  ASSERT_EQ(f.rows.size(), 2u);
  EXPECT_EQ(f.rows[0].name, "BM_FusedMoe/qwen3-next/M:4096/manual_time");
  EXPECT_DOUBLE_EQ(f.rows[0].time_us, 1500.0) << "the mean, not a repetition or the median";
  EXPECT_DOUBLE_EQ(*f.rows[0].pct_tflops, 10.9);
  EXPECT_FALSE(f.rows[0].gbps.has_value());
  EXPECT_DOUBLE_EQ(f.rows[1].time_us, 35.5);
  EXPECT_DOUBLE_EQ(*f.rows[1].gbps, 2400.0);
  EXPECT_EQ(read_bench_file(kDir + "/gdn_chunk_bench.json").skipped, "no CUDA device");
}

TEST(BenchReport, TableWithAndWithoutABaseline) {
  const std::vector<std::string> files = bench_files({kDir});
  ASSERT_EQ(files.size(), 2u);
  std::vector<BenchFile> cur;
  for (const auto& p : files) cur.push_back(read_bench_file(p));
  const std::string alone = render_bench_report(cur, {});
  EXPECT_NE(alone.find("| BM_FusedMoe/qwen3-next/M:4096/manual_time | 1500.0 | 107.6 | 10.9% | – | – |"),
            std::string::npos) << alone;
  EXPECT_NE(alone.find("| BM_FusedMoe/nano/M:16/manual_time | 35.5 | – | – | 2400 | 50.0% |"),
            std::string::npos) << alone;
  EXPECT_NE(alone.find("## gdn_chunk_bench\n\nskipped: no CUDA device"), std::string::npos) << alone;
  // Against a baseline twice as slow on the first row (the second is not in it).
  BenchFile before = cur[0];
  before.rows.resize(1);
  before.rows[0].time_us = 3000.0;
  const std::string vs = render_bench_report({cur[0]}, {before});
  EXPECT_NE(vs.find("| 10.9% | – | – | 3000.0 | 2.00x |"), std::string::npos) << vs;
  EXPECT_NE(vs.find("| 50.0% | – | – |\n"), std::string::npos) << vs;
  EXPECT_EQ(vs.find("In the baseline only"), std::string::npos) << vs;
  EXPECT_EQ(vs.find("baseline device"), std::string::npos) << "same device: no warning\n" << vs;
  // A baseline from another GPU is named next to the table.
  BenchFile h100 = before;
  h100.device = "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)";
  const std::string cross = render_bench_report({cur[0]}, {h100});
  EXPECT_NE(cross.find("baseline device: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs) (another device"),
            std::string::npos) << cross;
  // Rows of the baseline this run lacks are listed after the tables.
  const std::string fewer = render_bench_report({before}, {cur[0]});
  EXPECT_NE(fewer.find("## In the baseline only (1 rows)\n\n- fused_moe_bench/"
                       "BM_FusedMoe/nano/M:16/manual_time (35.5 us)"),
            std::string::npos) << fewer;
  // A file named twice, directly and through its directory, is read once.
  EXPECT_EQ(bench_files({kDir, kDir + "/fused_moe_bench.json", kDir + "/./gdn_chunk_bench.json"}).size(), 2u);
}

TEST(BenchReport, BadInputNamesTheFile) {
  const paths::ScopedTempDir dir("cs-bench-report-");
  const std::string bad = paths::join(dir.path, "x_bench.json");
  std::ofstream(bad) << "{\"benchmarks\": [{\"name\": \"a\", \"real_time\": \"fast\"}]}";
  try {
    read_bench_file(bad);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ": benchmarks[0]:"), std::string::npos) << e.what();
  }
  std::ofstream(bad) << "{\"benchmarks\": [{\"name\": \"a\", \"real_time\": -3, \"time_unit\": \"us\"}]}";
  try {
    read_bench_file(bad);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'real_time' must be a number >= 0, got -3"),
              std::string::npos) << e.what();
  }
  std::ofstream(bad) << "{\"benchmarks\": [{\"name\": \"a\", \"real_time\": 3, \"time_unit\": \"ps\"}]}";
  EXPECT_THROW(read_bench_file(bad), InputError);
  // A benchmark that reported an error is a row saying so, not dropped.
  std::ofstream(bad) << "{\"benchmarks\": [{\"name\": \"a\", \"error_occurred\": true, "
                        "\"error_message\": \"CUDA out of memory\"}]}";
  const BenchFile f = read_bench_file(bad);
  ASSERT_EQ(f.rows.size(), 1u);
  EXPECT_EQ(f.rows[0].error, "CUDA out of memory");
  EXPECT_NE(render_bench_report({f}, {}).find("| a | error: CUDA out of memory |"), std::string::npos);
  // A '|' in the message would split the Markdown row: escaped.
  std::ofstream(bad) << "{\"benchmarks\": [{\"name\": \"a\", \"error_occurred\": true, "
                        "\"error_message\": \"x | y\\nz\"}]}";
  EXPECT_NE(render_bench_report({read_bench_file(bad)}, {}).find("| a | error: x \\| y z |"),
            std::string::npos)
      << render_bench_report({read_bench_file(bad)}, {});
  // --md naming one of the files read (an input or the baseline) is refused before anything is
  // written, and the file is left as it was.
  std::ofstream(bad) << "{\"benchmarks\": [{\"name\": \"a\", \"real_time\": 101, \"time_unit\": \"ns\"}]}";
  testing::internal::CaptureStdout();
  EXPECT_THROW(bench_report_main({bad}, {}, bad), InputError);
  EXPECT_THROW(bench_report_main({kDir}, {dir.path}, bad), InputError);
  (void)testing::internal::GetCapturedStdout();
  const BenchFile kept = read_bench_file(bad);
  ASSERT_EQ(kept.rows.size(), 1u);
  // A launch-path time of 101 ns keeps three digits, not "0.1".
  EXPECT_NE(render_bench_report({kept}, {}).find("| a | 0.101 |"), std::string::npos)
      << render_bench_report({kept}, {});
  std::ofstream(bad) << "not json";
  EXPECT_THROW(read_bench_file(bad), InputError);
  EXPECT_THROW(bench_files({paths::join(dir.path, "nothing-here")}), InputError);
  const std::string empty = paths::join(dir.path, "empty");
  paths::make_dirs(empty);
  EXPECT_THROW(bench_files({empty}), InputError);
}

}  // namespace
}  // namespace coldstart::cli
