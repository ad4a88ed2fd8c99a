// coldstart bench-report (see bench_report.h).
#include "harness/cli/bench_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "harness/common/error.h"
#include "harness/common/paths.h"

namespace coldstart::cli {
namespace {

constexpr size_t kMaxBenchBytes = 64u << 20;

// A problem with one benchmark entry: reported with the file and the entry's index.
struct EntryError {
  std::string what;
};

// Google Benchmark's time units, per microsecond.
double to_us(double t, const std::string& unit) {
  if (unit == "ns") return t / 1e3;
  if (unit == "us") return t;
  if (unit == "ms") return t * 1e3;
  if (unit == "s") return t * 1e6;
  throw EntryError{fmt::format("unknown time_unit '{}' (ns, us, ms or s)", unit)};
}

// A field that must be a finite number >= 0 (times, rates and percents all are).
double number(const nlohmann::json& b, const char* key) {
  if (!b.contains(key)) throw EntryError{fmt::format("no '{}'", key)};
  const nlohmann::json& v = b.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
    throw EntryError{fmt::format("'{}' must be a number >= 0, got {}", key, v.dump())};
  return v.get<double>();
}

std::string text(const nlohmann::json& b, const char* key, const std::string& otherwise) {
  if (!b.contains(key)) return otherwise;
  if (!b.at(key).is_string()) throw EntryError{fmt::format("'{}' must be a string", key)};
  return b.at(key).get<std::string>();
}

std::optional<double> counter(const nlohmann::json& b, const char* key) {
  if (!b.contains(key)) return std::nullopt;
  return number(b, key);
}

std::string opt(const std::optional<double>& v, const char* format) {
  return v ? fmt::format(fmt::runtime(format), *v) : std::string("–");
}

}  // namespace

BenchFile read_bench_file(const std::string& path) {
  std::string data;
  if (const std::string why = paths::read_input_file(path, kMaxBenchBytes, data); !why.empty())
    throw InputError(fmt::format("{}: {}", path, why));
  const nlohmann::json j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    throw InputError(fmt::format("{}: not JSON (a Google Benchmark --benchmark_out report is)", path));
  if (!j.is_object() || !j.contains("benchmarks") || !j.at("benchmarks").is_array())
    throw InputError(fmt::format("{}: no 'benchmarks' list: not a Google Benchmark JSON report", path));
  BenchFile f;
  f.path = path;
  f.bench = std::filesystem::path(path).stem().string();
  const nlohmann::json ctx = j.value("context", nlohmann::json::object());
  if (ctx.is_object()) {
    if (ctx.contains("device") && ctx["device"].is_string()) f.device = ctx["device"];
    if (ctx.contains("skipped") && ctx["skipped"].is_string()) f.skipped = ctx["skipped"];
  }
  // Rows by run name, in file order; a "mean" aggregate replaces the repetitions it sums up.
  std::vector<std::string> order;
  std::map<std::string, BenchRow> rows;
  const nlohmann::json& list = j.at("benchmarks");
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& b = list[i];
    try {
      if (!b.is_object()) throw EntryError{"not an object"};
      const std::string run = text(b, "run_name", text(b, "name", ""));
      if (run.empty()) throw EntryError{"no 'name'"};
      const std::string type = text(b, "run_type", "iteration");
      const bool mean = type == "aggregate" && text(b, "aggregate_name", "") == "mean";
      if (type == "aggregate" && !mean) continue;  // median, stddev, cv
      BenchRow r;
      r.bench = f.bench;
      r.name = run;
      if (b.contains("error_occurred") && b.at("error_occurred").is_boolean() &&
          b.at("error_occurred").get<bool>()) {
        r.error = text(b, "error_message", "(no message)");  // shown, not dropped
      } else {
        r.time_us = to_us(number(b, "real_time"), text(b, "time_unit", "ns"));
        r.tflops = counter(b, "TFLOP/s");
        r.pct_tflops = counter(b, "%peak_TFLOP/s");
        r.gbps = counter(b, "GB/s");
        r.pct_gbps = counter(b, "%peak_GB/s");
      }
      if (!rows.count(run)) order.push_back(run);
      if (mean || !rows.count(run)) rows[run] = r;  // the first repetition until a mean comes
    } catch (const EntryError& e) {
      throw InputError(fmt::format("{}: benchmarks[{}]: {}", path, i, e.what));
    }
  }
  for (const auto& run : order) f.rows.push_back(rows.at(run));
  return f;
}

std::vector<std::string> bench_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  for (const auto& in : inputs) {
    std::error_code ec;  // a path that cannot be examined is reported as missing, not thrown
    if (!std::filesystem::is_directory(in, ec)) {
      if (!std::filesystem::exists(in, ec))
        throw InputError(fmt::format("{}: no such file or directory", in));
      out.push_back(in);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : std::filesystem::directory_iterator(in)) {
      const std::string name = e.path().filename().string();
      if (name.size() > 11 && name.compare(name.size() - 11, 11, "_bench.json") == 0)
        found.push_back(e.path().string());
    }
    if (found.empty()) throw InputError(fmt::format("{}: no *_bench.json files in this directory", in));
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  // A file named twice (directly and through its directory, or as two spellings) is read once.
  std::vector<std::string> unique;
  std::vector<std::filesystem::path> seen;
  for (const auto& p : out) {
    std::error_code ec;
    std::filesystem::path canon = std::filesystem::weakly_canonical(p, ec);
    if (ec) canon = p;
    if (std::find(seen.begin(), seen.end(), canon) != seen.end()) continue;
    seen.push_back(canon);
    unique.push_back(p);
  }
  return unique;
}

namespace {

// A time per call in microseconds: one decimal, or three significant digits under 10 us (a
// launch-path bench of ~100 ns would read 0.1).
std::string time_cell(double us) {
  return us >= 10.0 ? fmt::format("{:.1f}", us) : fmt::format("{:.3g}", us);
}

// Text for a Markdown table cell: '|' escaped, line breaks as spaces.
std::string md_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

}  // namespace

std::string render_bench_report(const std::vector<BenchFile>& current,
                                const std::vector<BenchFile>& baseline) {
  std::map<std::string, const BenchRow*> before;  // "bench/name" -> baseline row
  std::map<std::string, std::string> before_device;  // bench -> the baseline's device
  for (const auto& f : baseline) {
    for (const auto& r : f.rows) before[r.bench + "/" + r.name] = &r;
    if (!f.device.empty()) before_device[f.bench] = f.device;
  }
  const bool compare = !baseline.empty();
  std::string out = "# Kernel benchmarks\n";
  for (const auto& f : current) {
    out += fmt::format("\n## {}\n\n", f.bench);
    if (!f.skipped.empty()) {
      out += fmt::format("skipped: {}\n", f.skipped);
      continue;
    }
    if (!f.device.empty()) out += fmt::format("device: {}\n\n", f.device);
    // A speed-up across two GPUs measures the GPUs as much as the kernels: say so next to it.
    const auto bd = before_device.find(f.bench);
    if (compare && bd != before_device.end() && bd->second != f.device)
      out += fmt::format("baseline device: {} (another device: the speed-up compares devices "
                         "as well as kernels)\n\n", bd->second);
    if (f.rows.empty()) {
      out += "(no benchmark rows)\n";
      continue;
    }
    out += "| benchmark | time/call (us) | TFLOP/s | % peak | GB/s | % HBM |";
    out += compare ? " baseline (us) | speed-up |\n" : "\n";
    out += compare ? "|---|--:|--:|--:|--:|--:|--:|--:|\n" : "|---|--:|--:|--:|--:|--:|\n";
    for (const auto& r : f.rows) {
      if (!r.error.empty()) {
        out += fmt::format("| {} | error: {} | – | – | – | – |{}\n", r.name, md_cell(r.error),
                           compare ? " – | – |" : "");
        continue;
      }
      out += fmt::format("| {} | {} | {} | {} | {} | {} |", r.name, time_cell(r.time_us),
                         opt(r.tflops, "{:.1f}"), opt(r.pct_tflops, "{:.1f}%"),
                         opt(r.gbps, "{:.0f}"), opt(r.pct_gbps, "{:.1f}%"));
      if (compare) {
        const auto it = before.find(r.bench + "/" + r.name);
        if (it == before.end() || it->second->time_us <= 0 || r.time_us <= 0)
          out += " – | – |";
        else
          out += fmt::format(" {} | {:.2f}x |", time_cell(it->second->time_us),
                             it->second->time_us / r.time_us);
      }
      out += "\n";
    }
  }
  if (compare) {
    // Rows the baseline has and this run lacks: a benchmark dropped or renamed, or a program
    // that did not run, which a speed-up table alone would hide.
    std::set<std::string> now;
    for (const auto& f : current)
      for (const auto& r : f.rows) now.insert(r.bench + "/" + r.name);
    std::vector<std::string> gone;
    for (const auto& [key, row] : before)
      if (!now.count(key)) gone.push_back(fmt::format("- {} ({:.1f} us)", key, row->time_us));
    if (!gone.empty())
      out += fmt::format("\n## In the baseline only ({} rows)\n\n{}\n", gone.size(),
                         fmt::join(gone, "\n"));
  }
  return out;
}

int bench_report_main(const std::vector<std::string>& inputs,
                      const std::vector<std::string>& baseline, const std::string& md_out) {
  // Before anything is printed: the report must not replace one of the files it reads.
  const std::vector<std::string> cur_files = bench_files(inputs);
  const std::vector<std::string> base_files =
      baseline.empty() ? std::vector<std::string>{} : bench_files(baseline);
  if (!md_out.empty()) {
    std::vector<std::string> read = cur_files;
    read.insert(read.end(), base_files.begin(), base_files.end());
    paths::check_output_paths({md_out}, read);
  }
  std::vector<BenchFile> cur, base;
  for (const auto& p : cur_files) cur.push_back(read_bench_file(p));
  for (const auto& p : base_files) base.push_back(read_bench_file(p));
  const std::string md = render_bench_report(cur, base);
  std::cout << md;
  if (!md_out.empty()) paths::write_file_atomic(md_out, md);
  return 0;
}

}  // namespace coldstart::cli
