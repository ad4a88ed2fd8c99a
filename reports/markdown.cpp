// coldstart: Markdown summary for pull-request comments. Reads RunResults; measures nothing.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reports/render_util.h"
#include "reports/renderers.h"

namespace coldstart::reports {

namespace {

constexpr const char* kNull = "–";  // en dash: a value that was not measured or not reached

std::string cell(const std::string& raw) { return detail::md_text(raw); }

std::string md_ms(const std::optional<double>& v) {
  auto f = detail::finite(v);
  return f ? fmt::format("{:.1f} ms", *f) : kNull;
}

std::string ratio(const StrategyResult& r) {
  if (detail::steady_not_comparable(r)) return "n/c";
  auto a = detail::finite(r.ttft_ms), b = detail::finite(r.steady_ttft_ms);
  if (!a || !b || *b <= 0) return kNull;
  return fmt::format("{:.2f}×", *a / *b);
}

std::string md_outcome_cell(const StrategyResult& r) {
  std::string icon;
  switch (r.outcome) {
    case Outcome::kOk: icon = "✅"; break;
    case Outcome::kCrash: icon = "❌"; break;
    case Outcome::kTimeout: icon = "⏱️"; break;
    case Outcome::kError: icon = "⚠️"; break;
    case Outcome::kInterrupted: icon = "⏹️"; break;
    case Outcome::kSkipped: return "⏭️ skipped (" + cell(r.skipped.value_or("")) + ")";
  }
  std::string s = icon + " " + outcome_name(r.outcome);
  if (r.outcome != Outcome::kOk && r.failed_phase && !r.failed_phase->empty()) {
    s += " in " + cell(*r.failed_phase);
  }
  if (detail::disallowed_hot_path(r)) s = "❌ ok, but hot-path compiles are not allowed";
  return s;
}

std::string compiles_cell(const StrategyResult& r) {
  const std::vector<CompileEvent> compiled = hot_path_compiled(r);  // disk loads listed apart
  const std::string loaded = detail::loaded_suffix(r);
  if (compiled.empty()) return "0" + loaded;
  // One entry per kernel and phase, in first-compile order, with a count when it repeats (a
  // DeepGEMM prefill compiles fp8_gemm_nt once per GEMM shape): a pull-request comment has a
  // size limit, and the full list is in the table and the results file.
  std::vector<std::pair<std::string, int>> parts;
  for (const auto& e : compiled) {
    const std::string key = cell(e.kernel) + " (" + cell(detail::compile_where(e)) + ")";
    auto it = std::find_if(parts.begin(), parts.end(), [&](const auto& p) { return p.first == key; });
    if (it == parts.end()) parts.emplace_back(key, 1);
    else ++it->second;
  }
  std::vector<std::string> texts;
  for (const auto& [key, n] : parts) texts.push_back(n > 1 ? fmt::format("{} ×{}", key, n) : key);
  return fmt::format("**{}**: {}{}", compiled.size(), fmt::join(texts, ", "), loaded);
}

// A fence longer than any run of backticks in `text`, so error text cannot close it early.
std::string fence_for(const std::string& text) {
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return std::string(std::max<size_t>(3, longest + 1), '`');
}

// `text` as a Markdown code span: fenced by one backtick more than its longest run of them, with
// a space inside when it starts or ends with one (CommonMark strips one such space), so a file
// name or --set value with backticks cannot end the span early. Newlines become spaces.
std::string code_span(const std::string& raw) {
  std::string text = detail::clean_text(raw);
  std::replace(text.begin(), text.end(), '\n', ' ');
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(longest + 1, '`');
  const bool pad = !text.empty() && (text.front() == '`' || text.back() == '`');
  return fence + (pad ? " " : "") + text + (pad ? " " : "") + fence;
}

std::string device_line(const RunMeta& m) {
  std::string device = detail::device_text(m);
  std::vector<std::string> parts = {"**" + cell(device) + "**"};
  parts.push_back("mode " + cell(m.mode.empty() ? "?" : m.mode));
  auto add = [&](const char* what, const std::string& v) {
    if (!v.empty()) parts.push_back(std::string(what) + " " + cell(v));
  };
  add("driver", m.driver);
  add("CUDA", m.cuda);
  add("NVRTC", m.nvrtc);
  add("torch", m.torch);
  std::string version = "coldstart " + cell(m.coldstart_version.empty() ? "?" : m.coldstart_version);
  if (!m.git_sha.empty()) version += " (" + cell(m.git_sha) + ")";
  parts.push_back(version);
  return fmt::format("{}", fmt::join(parts, " · "));
}

bool failed(const StrategyResult& r) {
  return r.outcome != Outcome::kOk || detail::disallowed_hot_path(r);
}

// How much of each scenario the comment holds: kFull everything; kNoExcess drops the excess
// tables and keeps the first lines of each error; kBrief keeps the table, the verdict headlines
// and the rules summary.
enum class Detail { kFull, kNoExcess, kBrief };

// The first `n` lines of `text`, with a line saying how many were left out.
std::string first_lines(const std::string& text, size_t n) {
  size_t pos = 0;
  for (size_t i = 0; i < n && pos != std::string::npos; ++i) {
    pos = text.find('\n', pos);
    if (pos != std::string::npos) ++pos;
  }
  if (pos == std::string::npos || pos >= text.size()) return text;
  const size_t rest = static_cast<size_t>(std::count(text.begin() + pos, text.end(), '\n')) +
                      (text.back() != '\n');
  return text.substr(0, pos) + fmt::format("... ({} more lines in the results file)\n", rest);
}

// One scenario's section of the comment.
std::string render_scenario(const RunResults& run, const std::string& first_device, Detail detail) {
  std::string out;
  {
    std::string name = run.scenario.name.empty() ? "(unnamed scenario)" : run.scenario.name;
    out += "\n### " + cell(name);
    if (!run.scenario.file.empty()) out += " (" + code_span(run.scenario.file) + ")";
    out += "\n\n";
    // A merged file may hold scenarios from different machines: name the device when it differs.
    std::string device = device_line(run.meta);
    if (device != first_device) out += device + "\n\n";
    if (!run.meta.sets.empty()) {
      std::vector<std::string> sets;
      for (const auto& kv : run.meta.sets) sets.push_back(code_span(kv));
      out += fmt::format("Settings: --set {}\n\n", fmt::join(sets, ", "));
    }

    std::vector<const StrategyResult*> rows = detail::grouped_rows(run);
    std::stable_partition(rows.begin(), rows.end(), [](const StrategyResult* r) { return failed(*r); });
    if (rows.empty()) return out + "(no results)\n";

    out += "| strategy | variant | outcome | startup | TTFT | first decode | first/steady TTFT | "
           "hot-path compiles | workspace locked / requested |\n";
    out += "|---|---|---|--:|--:|--:|--:|---|--:|\n";
    bool any_null = false;
    for (const StrategyResult* r : rows) {
      std::vector<std::string> c = {
          cell(r->strategy.empty() ? "?" : r->strategy),
          r->variant.empty() ? kNull : cell(r->variant),
          md_outcome_cell(*r),
          md_ms(r->startup_ms),
          md_ms(r->ttft_ms),
          md_ms(r->first_decode_ms),
          ratio(*r),
          compiles_cell(*r),
          fmt::format("{} / {} MB", detail::locked_mb(*r),
                      detail::mb(r->workspace.peak_requested_bytes)),
      };
      for (size_t i = 3; i <= 6; ++i) any_null = any_null || c[i] == kNull;
      out += fmt::format("| {} |\n", fmt::join(c, " | "));
    }
    out += "\n";
    std::vector<std::string> notes = {"MB = 2^20 bytes, per slot",
                                      "first/steady TTFT: first request's TTFT over a second, identical request's"};
    std::vector<std::string> not_comparable;
    for (const StrategyResult* r : rows)
      if (auto why = detail::steady_not_comparable(*r))
        not_comparable.push_back(cell(detail::label(*r)) + ": " + cell(*why));
    if (!not_comparable.empty())
      notes.push_back(fmt::format("n/c: not comparable ({})", fmt::join(not_comparable, "; ")));
    for (const StrategyResult* r : rows)
      if (auto how = detail::extra_string(*r, "cuda_api_timing")) {
        notes.push_back("host split (--host-split): " + cell(*how));
        break;
      }
    if (any_null) {
      notes.push_back(run.meta.mode == "compile-only"
                          ? std::string(kNull) + ": compile-only: no kernel times"
                          : std::string(kNull) + ": not measured or not reached (the run failed first)");
    }
    out += fmt::format("<sub>{}</sub>\n", fmt::join(notes, "; "));

    // The verdict per variant: which strategy to pick and what each costs.
    out += "\n";
    for (const detail::VariantVerdict& v : detail::verdicts(run)) {
      const std::string which = v.variant.empty() ? "" : " " + code_span(v.variant);
      out += v.best.empty() ? fmt::format("**Verdict**{}: no strategy ended ok\n", which)
                            : fmt::format("**Verdict**{}: best **{}** ({})\n", which,
                                          cell(v.best), cell(v.best_why));
      if (detail != Detail::kBrief)
        for (const auto& [what, text] : v.lines) out += fmt::format("- {}: {}\n", what, cell(text));
      out += "\n";
    }
    // Where the first request's extra time went (GPU runs): first minus steady TTFT by part.
    std::vector<std::pair<const StrategyResult*, detail::TtftExcess>> excess;
    for (const StrategyResult* r : detail::grouped_rows(run))
      if (auto x = detail::ttft_excess(*r)) excess.emplace_back(r, *x);
    if (!excess.empty() && detail == Detail::kFull) {
      std::vector<detail::TtftExcess> splits;
      for (const auto& e : excess) splits.push_back(e.second);
      const std::vector<detail::ExcessPart> cols = detail::excess_columns(splits);
      out += "<details><summary>First-request TTFT excess by part</summary>\n\n";
      out += "| strategy | variant | first TTFT | steady TTFT | excess |";
      for (const auto& c : cols) out += " " + cell(c.name) + " (ms) |";
      out += " unexplained |\n|---|---|--:|--:|--:|";
      for (size_t i = 0; i < cols.size(); ++i) out += "--:|";
      out += "--:|\n";
      for (const auto& [r, x] : excess) {
        out += fmt::format("| {} | {} | {:.1f} ms | {:.1f} ms | {:.1f} ms |", cell(r->strategy),
                           r->variant.empty() ? kNull : cell(r->variant), x.first_ms, x.steady_ms,
                           x.excess_ms);
        for (const auto& c : cols) {
          const detail::ExcessPart* p = detail::excess_part(x, c.name);
          out += " " + (p ? detail::tenths(p->ms) : std::string(kNull)) + " |";
        }
        out += " " + detail::tenths(x.unexplained_ms) + " ms" + detail::share_of(x) + " |\n";
      }
      std::vector<std::string> sources;
      for (const auto& c : cols) sources.push_back(cell(c.name) + ": " + cell(c.source));
      out += fmt::format("\n<sub>ms, first request minus steady request (JIT records: over prefill "
                         "and continuation prefill; the rest: over the TTFT window); {}; a negative "
                         "part: the steady request spent more there (the host waits less for the "
                         "GPU when its own stalls already hid GPU work); {}: not measured in this "
                         "result; unexplained: the rest</sub>\n\n</details>\n\n",
                         fmt::join(sources, "; "), kNull);
    }
    // The scenario's expect: rules as the run checked them.
    if (!run.rules.empty()) {
      out += "expect: rules: " + detail::rule_tally(run) + "\n";
      for (const RuleCheck& rule : run.rules)
        if (rule.status == "unmet")
          for (const auto& d : rule.details) out += "- ❌ " + cell(d) + "\n";
    }

    // Envelope coverage (`coldstart coverage`): reachable / startup / cold keys per strategy, the
    // cold keys by kernel folded (a brief report keeps the table).
    const std::vector<detail::CoverageRow> cov = detail::coverage_rows(run);
    if (!cov.empty()) {
      out += "**Serving envelope coverage** (one key-only step per class; cold keys compiled once "
             "each to time them)\n\n| strategy | classes | reachable keys | at startup | on disk | "
             "cold | cold compile |\n|---|--:|--:|--:|--:|--:|--:|\n";
      for (const detail::CoverageRow& c : cov)
        out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", cell(detail::label(*c.result)),
                           c.stopped_at.empty() ? std::to_string(c.classes)
                                                : fmt::format("{} of {} (stopped in {})",
                                                              c.classes_run, c.classes,
                                                              cell(c.stopped_at)),
                           c.reached, c.at_startup, c.on_disk, c.cold,
                           c.cold_compile_ms ? fmt::format("{:.1f} s", *c.cold_compile_ms / 1000.0)
                                             : std::string(kNull));
      out += "\n";
      if (detail != Detail::kBrief) {
        for (const detail::CoverageRow& c : cov) {
          if (c.cold_kernels.empty()) continue;
          out += fmt::format("<details><summary>Cold after {} ({})</summary>\n\n",
                             cell(detail::label(*c.result)), detail::cold_count_text(c));
          for (const detail::ColdKernel& k : c.cold_kernels)
            out += "- " + cell(detail::cold_kernel_text(k)) + "\n";
          if (!c.warmup_classes.empty())
            out += "\nWarm them at startup" + detail::partial_sweep_caveat(c) +
                   ": `envelope-warmup` (last in the strategy) with "
                   "`engine.envelope_warmup_classes: " + cell(c.warmup_classes) + "`\n";
          out += "\n</details>\n\n";
        }
      }
    }

    // Multi-rank runs (engine.ranks: all): each rank's compiles and waits, and the worst stall.
    if (detail != Detail::kBrief) {
      for (const StrategyResult* r : rows) {
        const auto it = r->extra.find("ranks");
        if (it == r->extra.end() || !it->is_object()) continue;
        const std::string text = detail::clean_text(detail::ranks_summary(detail::label(*r), *it));
        const std::string fence = fence_for(text);
        out += fmt::format("\n<details><summary>Ranks of {}</summary>\n\n{}text\n{}{}\n\n</details>\n",
                           cell(detail::label(*r)), fence, text, fence);
      }
    }

    // Full error texts, folded so a long comment stays readable.
    std::vector<const StrategyResult*> errs;
    for (const StrategyResult* r : rows) {
      // Rows with error text; a skipped strategy did not fail (its reason is in its cell).
      if (r->outcome != Outcome::kOk && r->outcome != Outcome::kSkipped) errs.push_back(r);
    }
    if (!errs.empty() && detail != Detail::kBrief) {
      out += fmt::format("\n<details><summary>Errors ({})</summary>\n\n", errs.size());
      for (const StrategyResult* r : errs) {
        out += fmt::format("**{}**: {}", cell(detail::label(*r)), outcome_name(r->outcome));
        if (r->failed_phase && !r->failed_phase->empty()) out += " in " + cell(*r->failed_phase);
        out += "\n\n";
        std::string text = detail::clean_text(r->error.value_or("(no error text)"));
        if (detail != Detail::kFull) text = first_lines(text, 12);
        std::string fence = fence_for(text);
        out += fence + "text\n" + text + (text.empty() || text.back() != '\n' ? "\n" : "") + fence + "\n\n";
      }
      out += "</details>\n";
    }
  }
  return out;
}

}  // namespace

std::string render_markdown(const std::vector<RunResults>& runs, size_t max_bytes) {
  std::string head = "## " + detail::report_title(runs) + "\n\n";
  if (runs.empty()) return head + "(no results)\n";
  const std::string first_device = device_line(runs.front().meta);
  head += first_device + "\n";
  // Less detail until the comment fits; then, if even the brief form does not, the scenarios
  // that fit and a line naming the rest.
  constexpr size_t kReserve = 1024;  // for the closing lines below
  std::vector<std::string> sections;
  size_t total = head.size();
  for (Detail d : {Detail::kFull, Detail::kNoExcess, Detail::kBrief}) {
    sections.clear();
    total = head.size();
    for (const RunResults& run : runs) {
      sections.push_back(render_scenario(run, first_device, d));
      total += sections.back().size();
    }
    if (max_bytes == 0 || total <= max_bytes) {
      std::string out = head;
      for (const std::string& s : sections) out += s;
      if (d != Detail::kFull)
        out += fmt::format("\n<sub>Shortened to fit {} bytes ({}): the full report is in "
                           "`coldstart report --html` of the results file.</sub>\n",
                           max_bytes, d == Detail::kNoExcess
                                          ? "TTFT excess tables left out, errors cut to 12 lines"
                                          : "verdict details, excess tables and errors left out");
      return out;
    }
  }
  std::string out = head;
  std::vector<std::string> left_out;
  for (size_t i = 0; i < sections.size(); ++i) {
    if (left_out.empty() && out.size() + sections[i].size() + kReserve <= max_bytes) {
      out += sections[i];
    } else {
      left_out.push_back(cell(runs[i].scenario.name.empty() ? "(unnamed scenario)"
                                                            : runs[i].scenario.name));
    }
  }
  std::string names = fmt::format("{}", fmt::join(left_out, ", "));
  if (names.size() > kReserve / 2) names = names.substr(0, kReserve / 2) + "...";
  out += fmt::format("\n<sub>Shortened to fit {} bytes: {} scenario(s) left out ({}); the full "
                     "report is in `coldstart report --html` of the results file.</sub>\n",
                     max_bytes, left_out.size(), names);
  return out;
}

}  // namespace coldstart::reports
