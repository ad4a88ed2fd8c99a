// coldstart: terminal comparison table. Reads a RunResults; measures nothing.
#include "reports/table.h"
#include "reports/render_util.h"

#include <algorithm>
#include <unordered_set>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace coldstart::reports {

namespace {


constexpr const char* kReset = "\033[0m";
constexpr const char* kBold = "\033[1m";
constexpr const char* kRed = "\033[1;31m";
constexpr const char* kGreen = "\033[32m";
constexpr const char* kYellow = "\033[33m";
constexpr const char* kMagenta = "\033[35m";
constexpr size_t kMaxKernelText = 40;  // characters of kernel names in the compiles column

// Display width of UTF-8 text: one column per code point (good enough for names and numbers).
size_t width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string pad(const std::string& s, size_t w, bool right) {
  size_t have = width(s);
  if (have >= w) return s;
  std::string fill(w - have, ' ');
  return right ? fill + s : s + fill;
}

std::string ms(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return "-";
  return fmt::format("{:.2f}", *v);
}

bool skipped(const StrategyResult& r) { return r.outcome == Outcome::kSkipped; }

std::string outcome_cell(const StrategyResult& r) {
  if (skipped(r)) return "skipped";  // could not run on this device
  // As JUnit, Markdown and HTML count it: a failure although the replay itself ran.
  if (detail::disallowed_hot_path(r)) return "failed: hot-path compile";
  std::string s = outcome_name(r.outcome);
  if (r.outcome != Outcome::kOk && r.failed_phase && !r.failed_phase->empty()) {
    s += " @ " + *r.failed_phase;
  }
  return s;
}

const char* outcome_color(Outcome o) {
  switch (o) {
    case Outcome::kOk: return kGreen;
    case Outcome::kCrash: return kRed;
    case Outcome::kTimeout: return kYellow;
    case Outcome::kError: return kMagenta;
    case Outcome::kInterrupted: return kYellow;
    case Outcome::kSkipped: return kMagenta;
  }
  return "";
}

// Distinct kernel names of `events` in first-seen order (a set: a file with 100,000 compiles
// made a linear search per name take 20 s).
std::vector<std::string> distinct_kernels(const std::vector<CompileEvent>& events) {
  std::vector<std::string> names;
  std::unordered_set<std::string> seen;
  for (const auto& e : events)
    if (seen.insert(e.kernel).second) names.push_back(e.kernel);
  return names;
}

// "0", or "3: tq_store, tq_decode_stage1, +1 more": distinct kernel names in first-seen order,
// cut to kMaxKernelText characters.
std::string compiles_cell(const std::vector<CompileEvent>& events) {
  if (events.empty()) return "0";
  const std::vector<std::string> names = distinct_kernels(events);
  std::string text;
  size_t shown = 0;
  for (const auto& n : names) {
    std::string next = text.empty() ? n : text + ", " + n;
    if (shown > 0 && width(next) > kMaxKernelText) break;
    text = std::move(next);
    ++shown;
  }
  if (shown < names.size()) text += fmt::format(", +{} more", names.size() - shown);
  return fmt::format("{}: {}", events.size(), text);
}

std::string label(const StrategyResult& r) {
  return r.variant.empty() ? r.strategy : fmt::format("{} [{}]", r.strategy, r.variant);
}

}  // namespace

std::string render_table(const RunResults& raw_run, bool color) {
  // Names and errors come from results and scenario files: nothing in them reaches the terminal
  // as a control character.
  const RunResults run = detail::terminal_safe(raw_run);
  auto paint = [&](const std::string& text, const char* code) {
    return color && code && *code ? std::string(code) + text + kReset : text;
  };

  // Rows grouped by variant, variants in order of first appearance, strategies in run order.
  std::vector<std::string> variants;
  for (const auto& r : run.results) {
    if (std::find(variants.begin(), variants.end(), r.variant) == variants.end()) {
      variants.push_back(r.variant);
    }
  }
  std::vector<const StrategyResult*> rows;
  for (const auto& v : variants) {
    for (const auto& r : run.results) {
      if (r.variant == v) rows.push_back(&r);
    }
  }

  struct Column {
    std::string title;
    bool right;
  };
  const std::vector<Column> cols = {
      {"strategy", false},      {"variant", false},       {"outcome", false},
      {"startup ms", true},     {"TTFT ms", true},        {"1st decode ms", true},
      {"steady TTFT ms", true}, {"hot-path compiles", false}, {"workspace MB", true}};
  constexpr size_t kOutcomeCol = 2;

  std::vector<std::vector<std::string>> cells;
  bool any_null = false;
  for (const StrategyResult* r : rows) {
    std::vector<std::string> c = {
        r->strategy.empty() ? "?" : r->strategy,
        r->variant.empty() ? "-" : r->variant,
        outcome_cell(*r),
        ms(r->startup_ms),
        ms(r->ttft_ms),
        ms(r->first_decode_ms),
        ms(r->steady_ttft_ms),
        // A skipped strategy measured nothing: no counts to show.
        skipped(*r) ? "-" : compiles_cell(hot_path_compiled(*r)) + detail::loaded_suffix(*r),
        skipped(*r) ? "-"
                    : fmt::format("{} / {}", detail::locked_mb(*r),
                                  detail::mb(r->workspace.peak_requested_bytes)),
    };
    for (size_t i = 3; i <= 6; ++i) any_null = any_null || c[i] == "-";
    cells.push_back(std::move(c));
  }

  std::vector<size_t> w(cols.size());
  for (size_t i = 0; i < cols.size(); ++i) {
    w[i] = width(cols[i].title);
    for (const auto& row : cells) w[i] = std::max(w[i], width(row[i]));
  }

  std::string out;
  const RunMeta& m = run.meta;
  std::string scenario = run.scenario.name.empty() ? "(unnamed scenario)" : run.scenario.name;
  if (!run.scenario.file.empty()) scenario += " (" + run.scenario.file + ")";
  out += paint(detail::report_title(run) + ": " + scenario, kBold) + "\n";
  const std::string device = detail::device_text(m);
  out += fmt::format("device: {}  mode: {}  coldstart {}{}\n", device,
                     m.mode.empty() ? "?" : m.mode, m.coldstart_version.empty() ? "?" : m.coldstart_version,
                     m.git_sha.empty() ? "" : " (" + m.git_sha + ")");
  if (!m.sets.empty()) out += fmt::format("--set {}\n", fmt::join(m.sets, "  --set "));
  out += "\n";

  auto join_row = [&](const std::vector<std::string>& row, const std::vector<std::string>& paints) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i) line += "  ";
      // The last column is not padded on the right, so lines carry no trailing blanks.
      bool last = i + 1 == row.size();
      std::string cell = (last && !cols[i].right) ? row[i] : pad(row[i], w[i], cols[i].right);
      line += paints.empty() ? cell : paint(cell, paints[i].c_str());
    }
    return line + "\n";
  };
  std::vector<std::string> titles;
  for (const auto& c : cols) titles.push_back(c.title);
  out += join_row(titles, std::vector<std::string>(cols.size(), color ? kBold : ""));
  size_t total = 0;
  for (size_t x : w) total += x;
  total += 2 * (w.size() - 1);
  out += std::string(total, '-') + "\n";
  for (size_t k = 0; k < rows.size(); ++k) {
    std::vector<std::string> paints(cols.size());
    paints[kOutcomeCol] = skipped(*rows[k])                     ? kYellow
                          : detail::disallowed_hot_path(*rows[k]) ? kRed
                                                                  : outcome_color(rows[k]->outcome);
    out += join_row(cells[k], paints);
  }
  if (rows.empty()) out += "(no results)\n";
  out += "workspace MB: locked / peak requested per slot (MB = 2^20 bytes)";
  if (std::any_of(rows.begin(), rows.end(),
                  [](const StrategyResult* r) { return detail::locked_mb(*r) == "-"; }))
    out += "; locked -: never locked (a workspace_policy that never locks, or no graph capture)";
  out += any_null ? "; -: not measured (compile-only mode) or not reached\n" : "\n";
  // A run with --host-split: its TTFTs carry CUPTI's callback cost (say so once per run).
  for (const StrategyResult* r : rows)
    if (auto how = detail::extra_string(*r, "cuda_api_timing")) {
      out += "host split (--host-split): " + *how + "\n";
      break;
    }

  // Which strategy to pick, per variant, and what each one costs.
  for (const detail::VariantVerdict& v : detail::verdicts(run)) {
    const std::string which = v.variant.empty() ? "" : " [" + v.variant + "]";
    out += "\n" + paint(v.best.empty() ? fmt::format("verdict{}: no strategy ended ok", which)
                                       : fmt::format("verdict{}: best {} ({})", which, v.best,
                                                     v.best_why),
                        kBold) +
           "\n";
    for (const auto& [what, text] : v.lines) out += fmt::format("  {}: {}\n", what, text);
  }

  // Multi-rank runs (engine.ranks: all): each rank's compiles and waits, and the worst stall.
  for (const StrategyResult* r : rows) {
    const auto it = r->extra.find("ranks");
    if (it == r->extra.end() || !it->is_object()) continue;
    out += "\n" + detail::ranks_summary(label(*r), *it);
  }

  // Warmers that found nothing to do (the strategy may equal `none` without saying so
  // otherwise), and what the JIT runtime worked around (damaged or unwritable kernel cache).
  bool first_note = true;
  auto note = [&](const std::string& line) {
    if (first_note) out += "\n";
    first_note = false;
    out += paint(line, kYellow) + "\n";
  };
  for (const StrategyResult* r : rows) {
    if (r->extra.contains("warmers_skipped") && r->extra["warmers_skipped"].is_object()) {
      for (const auto& [warmer, reason] : r->extra["warmers_skipped"].items()) {
        note(fmt::format("{}: warmer {} did nothing: {}", label(*r), warmer,
                         reason.is_string() ? reason.get<std::string>() : reason.dump()));
      }
    }
    if (r->extra.contains("warmer_reports") && r->extra["warmer_reports"].is_object()) {
      for (const auto& [warmer, rep] : r->extra["warmer_reports"].items()) {
        if (rep.is_object() && rep.contains("summary") && rep["summary"].is_string()) {
          note(fmt::format("{}: {}: {}", label(*r), warmer, rep["summary"].get<std::string>()));
        }
      }
    }
    if (r->extra.contains("jit_warnings") && r->extra["jit_warnings"].is_array()) {
      for (const auto& w : r->extra["jit_warnings"]) {
        note(fmt::format("{}: warning: {}", label(*r), w.is_string() ? w.get<std::string>() : w.dump()));
      }
    }
  }

  // Full error text of every result that did not end ok.
  bool first = true;
  for (const StrategyResult* r : rows) {
    const bool hot = r->outcome == Outcome::kOk && detail::disallowed_hot_path(*r);
    if (r->outcome == Outcome::kOk && !hot) continue;
    if (first) out += "\n";
    first = false;
    std::string where = r->failed_phase ? " in " + *r->failed_phase : "";
    const auto fs = r->extra.find("failed_step");
    if (fs != r->extra.end() && fs->is_object() && fs->value("request", -1) >= 0) {
      const int seqs = fs->value("batch_seqs", 0), tokens = fs->value("batch_tokens", 0);
      where += fmt::format(" (request {}, step {}: {} sequence{}, {} token{}{}{})",
                           fs->value("request", -1), fs->value("step", -1), seqs,
                           seqs == 1 ? "" : "s", tokens, tokens == 1 ? "" : "s",
                           fs->value("batch_mixed", false) ? ", mixed prefill and decode" : "",
                           detail::step_graph_text(fs->value("graph", std::string()),
                                                   fs->value("eager_reason", std::string())));
    }
    std::string text = r->error.value_or("(no error text)");
    if (skipped(*r)) {
      out += paint(fmt::format("{}: skipped", label(*r)), kYellow) + "\n";
    } else if (hot) {
      out += paint(fmt::format("{}: failed: allow_hot_path_compiles is false", label(*r)), kRed) +
             "\n";
      const std::vector<CompileEvent> compiled = hot_path_compiled(*r);
      const std::vector<std::string> names = distinct_kernels(compiled);
      text = fmt::format("{} hot-path compile(s): {}", compiled.size(),
                         fmt::join(names, ", "));
    } else {
      out += paint(fmt::format("{}: {}{}", label(*r), outcome_name(r->outcome), where),
                   outcome_color(r->outcome)) + "\n";
    }
    size_t start = 0;
    while (start <= text.size()) {
      size_t nl = text.find('\n', start);
      std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      out += "  " + line + "\n";
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  }
  // Envelope coverage (`coldstart coverage`, `replay --envelope`): per strategy, the kernel keys
  // the envelope's classes reach, how many startup compiled, how many it left cold and what
  // compiling those costs a cold process; then each strategy's cold keys by kernel, with the
  // smallest classes that reach them.
  using detail::ColdKernel;
  using detail::CoverageRow;
  const std::vector<CoverageRow> cov = detail::coverage_rows(run);
  if (!cov.empty()) {
    out += "\nserving envelope coverage (one key-only step per class; cold keys then compiled "
           "once each to time them):\n";
    size_t w = 8;
    for (const CoverageRow& c : cov) w = std::max(w, label(*c.result).size());
    out += fmt::format("  {:<{}}  {:>7}  {:>9}  {:>10}  {:>7}  {:>5}  {:>14}\n", "strategy", w,
                       "classes", "reachable", "at startup", "on disk", "cold", "cold compile s");
    for (const CoverageRow& c : cov) {
      const std::string classes =
          c.stopped_at.empty() ? std::to_string(c.classes)
                               : fmt::format("{}/{}", c.classes_run, c.classes);
      out += fmt::format("  {:<{}}  {:>7}  {:>9}  {:>10}  {:>7}  {:>5}  {:>14}\n", label(*c.result),
                         w, classes, c.reached, c.at_startup, c.on_disk, c.cold,
                         c.cold_compile_ms ? fmt::format("{:.1f}", *c.cold_compile_ms / 1000.0)
                                           : std::string("-"));
    }
    for (const CoverageRow& c : cov) {
      if (c.ranks > 0)
        out += fmt::format("  {}: keys counted once per rank that reaches them (the sweeps of {} "
                           "ranks, each its own process)\n",
                           label(*c.result), c.ranks);
      if (!c.stopped_at.empty())
        out += fmt::format(c.unfinished ? "  {}: the run was stopped after class '{}' (its last "
                                          "report; {} of {} classes run)\n"
                                        : "  {}: the sweep stopped in class '{}' ({} of {} run)\n",
                           label(*c.result), c.stopped_at, c.classes_run, c.classes);
      if (c.cold_kernels.empty()) continue;
      out += fmt::format("  cold after {} (kernel, keys, first reached by):\n", label(*c.result));
      for (const ColdKernel& k : c.cold_kernels) out += "    " + detail::cold_kernel_text(k) + "\n";
      if (!c.warmup_classes.empty())
        out += fmt::format("    warm them at startup{}: envelope-warmup (last in the strategy) "
                           "with --set engine.envelope_warmup_classes='{}'\n",
                           detail::partial_sweep_caveat(c), c.warmup_classes);
    }
  }
  return out;
}

}  // namespace coldstart::reports
