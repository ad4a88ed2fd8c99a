// coldstart bench-report: one table of every kernel benchmark's achieved rate against the device's
// ceilings, from the Google Benchmark JSON files the bench/ programs write (bench/bench_util.h sets
// the counters), optionally beside a baseline set of the same files (before / after).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace coldstart::cli {

/// One benchmark row of one bench program's JSON report.
struct BenchRow {
  std::string bench;  ///< the program, from the file's name ("fused_moe_bench")
  std::string name;   ///< the benchmark's name ("BM_FusedMoe/qwen3-next/M:4096/manual_time")
  double time_us = 0;  ///< real_time per call, microseconds
  std::optional<double> tflops, pct_tflops;  ///< "TFLOP/s" and "%peak_TFLOP/s" counters
  std::optional<double> gbps, pct_gbps;      ///< "GB/s" and "%peak_GB/s" counters
  std::string error;  ///< the benchmark's error_message when it reported one (no time then)
};

/// A bench program's report: its rows (aggregate rows "_mean"/"_median"/... folded: the mean is
/// kept when repetitions ran) and its context (device, ceilings; or why it was skipped).
struct BenchFile {
  std::string path;
  std::string bench;
  std::string device;   ///< context.device, "" when absent
  std::string skipped;  ///< context.skipped: the program found no usable GPU
  std::vector<BenchRow> rows;
};

/// Reads one Google Benchmark JSON report. Throws InputError naming the file (and the JSON
/// error) when it cannot be read or is not such a report.
BenchFile read_bench_file(const std::string& path);

/// The files of `inputs`: each a JSON file, or a directory whose *_bench.json files are taken
/// (sorted by name). Throws InputError for a path that is neither, or a directory without any.
std::vector<std::string> bench_files(const std::vector<std::string>& inputs);

/// The report as Markdown: per bench program a table of its rows (time per call, TFLOP/s and %
/// of the dense peak, GB/s and % of HBM bandwidth) and, with a baseline, the baseline's time and
/// the speed-up (baseline time / current time) of each row the baseline has by name. Skipped
/// programs get one line saying why.
std::string render_bench_report(const std::vector<BenchFile>& current,
                                const std::vector<BenchFile>& baseline);

/// `coldstart bench-report INPUTS... [--baseline INPUTS...] [--md FILE]`: prints the report
/// (and writes it to `md_out` when given). Returns the exit status: 0, or 2 on bad input.
int bench_report_main(const std::vector<std::string>& inputs,
                      const std::vector<std::string>& baseline, const std::string& md_out);

}  // namespace coldstart::cli
