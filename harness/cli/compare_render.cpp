// coldstart compare's renderings of a CompareReport: the plain table (render) and the Markdown
// summary for CI comments (render_markdown). The comparison itself is compare.cpp.
#include "harness/cli/compare.h"
#include "harness/cli/compare_internal.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/common/error.h"
#include "harness/common/paths.h"
#include "reports/render_util.h"

namespace coldstart::cli {

using compare_detail::fmt_ms;
using compare_detail::metric_label;
using compare_detail::target_label;

namespace {

std::string metric_cell(const MetricDelta& m) {
  if (!m.compared) {
    if (!m.baseline && !m.current) return "n/a";
    return fmt_ms(m.baseline) + " -> " + fmt_ms(m.current);
  }
  const double pct = m.delta_pct();
  const std::string pct_text =
      std::isinf(pct) ? std::string("new") : fmt::format("{:+.1f}%", pct);
  std::string cell = fmt::format("{} -> {} ({})", fmt_ms(m.baseline), fmt_ms(m.current), pct_text);
  if (m.regressed) cell += " !";
  if (m.improved) cell += " *";
  return cell;
}

// The hot-path compiles one kind of change was seen in, over the compared pairs.
struct ChangeSeen {
  size_t compiles = 0;
  std::set<std::string> pairs;
  std::string example;

  void add(const CompareRow& r) {
    ++compiles;
    if (pairs.insert(r.label()).second && example.empty()) example = r.label();
  }
  /// "(<n> hot-path compiles in <m> pairs, e.g. <label>)".
  std::string suffix() const {
    return fmt::format("({} hot-path compile{} in {} pair{}, e.g. {})", compiles,
                       compiles == 1 ? "" : "s", pairs.size(), pairs.size() == 1 ? "" : "s",
                       example);
  }
};

// One line per (kernel, difference) of the rows' key_changed:
// "<kernel>: <what> (<n> hot-path compiles in <m> pairs, e.g. <label>)".
std::vector<std::string> key_change_lines(const std::vector<CompareRow>& rows) {
  std::map<std::pair<std::string, std::string>, ChangeSeen> by;
  for (const CompareRow& r : rows)
    for (const KeyChange& c : r.key_changed) by[{c.current.kernel, c.what}].add(r);
  std::vector<std::string> out;
  for (const auto& [k, s] : by) out.push_back(fmt::format("{}: {} {}", k.first, k.second, s.suffix()));
  return out;
}

// One line per (kernel, baseline source, current source) of the rows' kernel_source_changed:
// "<kernel>: source <old> -> <new> (<n> hot-path compiles in <m> pairs, e.g. <label>)".
std::vector<std::string> source_change_lines(const std::vector<CompareRow>& rows) {
  std::map<std::tuple<std::string, std::string, std::string>, ChangeSeen> by;
  for (const CompareRow& r : rows)
    for (const SourceChange& c : r.kernel_source_changed)
      by[{c.current.kernel, c.baseline_source_hash, split_compile_key(c.current.key).source_hash}]
          .add(r);
  std::vector<std::string> out;
  for (const auto& [k, s] : by)
    out.push_back(fmt::format("{}: source {} -> {} {}", std::get<0>(k), std::get<1>(k),
                              std::get<2>(k), s.suffix()));
  return out;
}

// "10 -> 8" hot-path compiles, "+1 new" when some have no baseline counterpart; "-" for an
// added or removed row.
std::string compiles_cell(const CompareRow& r) {
  if (r.presence != CompareRow::Presence::kBoth || r.not_comparable) return "-";
  std::string s = r.baseline_hot_path_compiles == r.current_hot_path_compiles
                      ? std::to_string(r.current_hot_path_compiles)
                      : fmt::format("{} -> {}", r.baseline_hot_path_compiles,
                                    r.current_hot_path_compiles);
  if (!r.new_hot_path_compiles.empty()) s += fmt::format(" ({} new)", r.new_hot_path_compiles.size());
  return s;
}

// What each verdict means, for the line under the tables.
constexpr const char* kVerdictLegend =
    "verdicts: REGRESSED = a new crash, timeout or error, a new hot-path compile or a gated "
    "timing regression; fixed = failed in the baseline, ok now; improved = fewer hot-path "
    "compiles or a gated timing faster; changed (not gated) = a timing moved past the threshold "
    "without a recorded spread; same = none of these; added / removed = in one file only; "
    "interrupted / not compared = a side was stopped before it measured (or one is an --envelope "
    "run, the other a request replay); differs (other target) = "
    "a new failure or hot-path compile against a baseline from another target, not gated unless "
    "--gate-cross-target";

std::string verdict(const CompareRow& r) {
  switch (r.presence) {
    case CompareRow::Presence::kAdded: return "added";
    case CompareRow::Presence::kRemoved: return "removed";
    case CompareRow::Presence::kBoth: break;
  }
  if (r.regressed) return "REGRESSED";
  if (r.not_comparable) return "not compared";
  if (r.current_outcome == Outcome::kInterrupted) return "interrupted";
  if (r.cross_target && (r.new_failure || !r.new_hot_path_compiles.empty()))
    return "differs (other target)";
  if (r.baseline_outcome == Outcome::kInterrupted) return "not compared";
  if (r.baseline_outcome != Outcome::kOk && r.current_outcome == Outcome::kOk) return "fixed";
  if (r.fewer_hot_path_compiles ||
      std::any_of(r.metrics.begin(), r.metrics.end(), [](const MetricDelta& m) {
        return m.improved;
      })) {
    return "improved";
  }
  return r.ungated_change ? "changed (not gated)" : "same";
}
}  // namespace

std::string CompareReport::render() const {
  const std::vector<std::string> header = {"STRATEGY", "VARIANT", "OUTCOME", "STARTUP ms",
                                           "TTFT ms", "STEADY TTFT ms", "FIRST DECODE ms", "HOT-PATH COMPILES",
                                           "VERDICT"};
  // Rows grouped under a "scenario (sm)" heading, in report order.
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::vector<std::string>>> cells;
  for (const CompareRow& r : rows) {
    const std::string group = fmt::format("{} ({})", r.scenario, target_label(r.target, r.sm));
    if (cells.find(group) == cells.end()) groups.push_back(group);
    std::string outcome;
    if (r.baseline_outcome && r.current_outcome && *r.baseline_outcome == *r.current_outcome) {
      outcome = outcome_name(*r.current_outcome);
    } else {
      outcome = std::string(r.baseline_outcome ? outcome_name(*r.baseline_outcome) : "-") +
                " -> " + (r.current_outcome ? outcome_name(*r.current_outcome) : "-");
    }
    std::vector<std::string> line = {r.strategy, r.variant.empty() ? "-" : r.variant, outcome};
    for (const MetricDelta& m : r.metrics) line.push_back(metric_cell(m));
    line.push_back(compiles_cell(r));
    line.push_back(verdict(r));
    cells[group].push_back(std::move(line));
  }
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& [g, lines] : cells)
    for (const auto& line : lines)
      for (size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());

  auto emit = [&](std::ostringstream& os, const std::vector<std::string>& line) {
    os << "  ";
    for (size_t i = 0; i < line.size(); ++i) {
      os << line[i];
      if (i + 1 < line.size()) os << std::string(width[i] - line[i].size() + 2, ' ');
    }
    os << "\n";
  };
  std::ostringstream os;
  if (rows.empty()) os << "no strategy results to compare\n";
  for (const std::string& g : groups) {
    os << g << "\n";
    emit(os, header);
    for (const auto& line : cells[g]) emit(os, line);
    os << "\n";
  }
  os << fmt::format("timings: baseline -> current; ! = slower by more than {:g}% and the "
                    "run-to-run spread, * = faster by as much; only timings with a recorded "
                    "spread (--repeat N) are gated\n",
                    max_regression_pct);
  os << "hot-path compiles: baseline -> current (disk-cache loads not counted)\n"
     << kVerdictLegend << "\n";
  for (const std::string& n : notes) os << "note: " << n << "\n";
  for (const CompareRow& r : rows) {
    if (!r.new_failure && !r.outcome_change.empty()) {
      os << "note: " << r.label() << ": " << r.outcome_change << "\n";
    }
  }
  for (const std::string& l : source_change_lines(rows))
    os << "note: kernel source changed (the same instances, not new compiles): " << l << "\n";
  for (const std::string& l : key_change_lines(rows))
    os << "note: compile key changed (the same kernel and phase, not new compiles): " << l << "\n";
  if (regressed) {
    os << "REGRESSED (" << reasons.size() << (reasons.size() == 1 ? " reason" : " reasons")
       << "):\n";
    for (const std::string& reason : reasons) os << "  - " << reason << "\n";
  } else {
    os << "no regressions\n";
  }
  return os.str();
}

std::string CompareReport::render_markdown(size_t max_bytes) const {
  // Written as blocks (the heading, each reason, each scenario's table, the details, the notes)
  // so that a comment past max_bytes can keep whole blocks in order and say what it left out.
  std::ostringstream os;
  std::vector<std::pair<std::string, std::string>> blocks;  // (kind, text)
  auto flush = [&](const char* kind) {
    if (!os.str().empty()) blocks.emplace_back(kind, os.str());
    os.str("");
  };
  size_t changed_source = 0;
  for (const CompareRow& r : rows) changed_source += r.kernel_source_changed.size();
  os << "### coldstart compare: "
     << (regressed ? fmt::format("**REGRESSED** ({} {})", reasons.size(),
                                 reasons.size() == 1 ? "reason" : "reasons")
                   : std::string("no regressions"))
     << fmt::format(" ({} pairs, threshold {:g}%)\n\n", rows.size(), max_regression_pct);
  flush("head");
  for (const std::string& reason : reasons) {
    os << "- :x: " << reports::detail::md_text(reason) << "\n";
    flush("reason");
  }
  if (!reasons.empty()) os << "\n";
  flush("gap");
  // Names and messages come from results files: escaped as Markdown text (pipes, HTML, emphasis).
  auto cell = [](const std::string& t) { return reports::detail::md_text(t); };
  std::vector<std::string> groups;
  std::map<std::string, std::vector<const CompareRow*>> shown;
  std::map<std::string, size_t> same;
  for (const CompareRow& r : rows) {
    const std::string group = fmt::format("{} ({})", r.scenario, target_label(r.target, r.sm));
    if (shown.find(group) == shown.end() && same.find(group) == same.end()) groups.push_back(group);
    const std::string v = verdict(r);
    if (v == "same" && r.kernel_source_changed.empty()) {
      ++same[group];
      shown[group];
    } else {
      shown[group].push_back(&r);
    }
  }
  for (const std::string& g : groups) {
    os << "**" << cell(g) << "**";
    if (same[g] > 0) os << fmt::format(" ({} unchanged pair{})", same[g], same[g] == 1 ? "" : "s");
    os << "\n\n";
    if (shown[g].empty()) { flush("scenario"); continue; }
    os << "| strategy | variant | outcome | startup ms | TTFT ms | steady TTFT ms | first decode "
          "ms | hot-path compiles | verdict |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const CompareRow* r : shown[g]) {
      std::string outcome;
      if (r->baseline_outcome && r->current_outcome && *r->baseline_outcome == *r->current_outcome) {
        outcome = outcome_name(*r->current_outcome);
      } else {
        outcome = std::string(r->baseline_outcome ? outcome_name(*r->baseline_outcome) : "-") +
                  " -> " + (r->current_outcome ? outcome_name(*r->current_outcome) : "-");
      }
      os << "| " << cell(r->strategy) << " | " << cell(r->variant.empty() ? "-" : r->variant)
         << " | " << outcome;
      for (const MetricDelta& m : r->metrics) os << " | " << metric_cell(m);
      os << " | " << compiles_cell(*r) << " | " << verdict(*r) << " |\n";
    }
    os << "\n";
    flush("scenario");
  }
  if (const std::vector<std::string> keys = key_change_lines(rows); !keys.empty()) {
    os << "<details><summary>compile key changed (" << keys.size()
       << "): the same kernel and phase compiled with other key values, not new compiles"
          "</summary>\n\n";
    for (const std::string& l : keys) os << "- " << cell(l) << "\n";
    os << "\n</details>\n\n";
  }
  if (changed_source > 0) {
    os << "<details><summary>kernel source changed (" << changed_source
       << "): the same instances compiled from new program text, not new compiles</summary>\n\n";
    for (const std::string& l : source_change_lines(rows)) os << "- " << cell(l) << "\n";
    os << "\n</details>\n\n";
  }
  flush("details");
  for (const std::string& n : notes) os << "> " << reports::detail::md_text(n) << "\n>\n";
  flush("notes");
  os << fmt::format("\nTimings are baseline -> current; ! = slower by more than {:g}% and the "
                    "run-to-run spread, * = faster by as much; only timings with a recorded "
                    "spread (--repeat N) are gated. Hot-path compiles are baseline -> current "
                    "(disk-cache loads not counted).\n\n<sub>{}</sub>\n",
                    max_regression_pct, kVerdictLegend);
  const std::string tail = os.str();
  size_t total = tail.size();
  for (const auto& b : blocks) total += b.second.size();
  std::string out;
  if (max_bytes == 0 || total <= max_bytes) {
    for (const auto& b : blocks) out += b.second;
    return out + tail;
  }
  // Too long for one comment: whole blocks in order while they fit, then a line counting what
  // was left out (the text report and the results files have everything).
  constexpr size_t kReserve = 512;
  std::map<std::string, size_t> left;
  for (const auto& b : blocks) {
    if (left.empty() && out.size() + b.second.size() + tail.size() + kReserve <= max_bytes)
      out += b.second;
    else if (b.first != "gap")
      ++left[b.first];
  }
  std::vector<std::string> parts;
  const std::map<std::string, std::string> names = {{"head", "heading"}, {"reason", "reasons"},
                                                    {"scenario", "scenario tables"},
                                                    {"details", "change lists"},
                                                    {"notes", "note blocks"}};
  for (const auto& [kind, n] : left) parts.push_back(fmt::format("{} {}", n, names.at(kind)));
  out += fmt::format("\n<sub>Shortened to fit {} bytes, left out: {}; `coldstart compare` "
                     "without --md prints everything.</sub>\n",
                     max_bytes, fmt::join(parts, ", "));
  return out + tail;
}

int compare_main(const std::string& baseline, const std::string& current,
                 double max_regression_pct, bool allow_removed, const std::string& md_path,
                 bool force, bool gate_cross_target) {
  CompareReport report;
  try {
    if (!md_path.empty()) paths::check_output_paths({md_path}, {baseline, current}, force);
    // Names from the files reach the terminal (and the Markdown) as text, never as control
    // characters.
    std::vector<RunResults> b = read_any_results(baseline);
    for (RunResults& run : b) run = reports::detail::terminal_safe(run);
    size_t baseline_results = 0;
    for (const RunResults& r : b) baseline_results += r.results.size();
    if (baseline_results == 0)
      throw InputError(baseline + ": holds no strategy results: nothing to compare against");
    std::vector<RunResults> c = read_any_results(current);
    for (RunResults& run : c) run = reports::detail::terminal_safe(run);
    CompareOptions options;
    options.max_regression_pct = max_regression_pct;
    options.allow_removed = allow_removed;
    options.gate_cross_target = gate_cross_target;
    report = compare_results(b, c, options);
  } catch (const InputError& e) {
    std::cerr << "coldstart compare: " << reports::detail::terminal_text(e.what(), true) << "\n";
    return 2;
  }
  std::cout << report.render() << std::flush;
  if (!md_path.empty()) {
    try {
      paths::write_file_atomic(md_path, report.render_markdown());
    } catch (const Error& e) {
      std::cerr << "coldstart compare: " << reports::detail::terminal_text(e.what(), true) << "\n";
      return 1;
    }
  }
  return report.regressed ? 1 : 0;
}

}  // namespace coldstart::cli
