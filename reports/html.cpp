// coldstart: self-contained HTML report with inline SVG charts. Reads RunResults; measures
// nothing. No script and no external resource, so the file opens anywhere, offline.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "reports/render_util.h"
#include "reports/renderers.h"

namespace coldstart::reports {

namespace {

using detail::xml_escape;

std::string esc(const std::string& s) { return xml_escape(s, false); }
std::string esc_attr(const std::string& s) { return xml_escape(s, true); }

constexpr const char* kOtherPhaseColor = "#9c755f";
constexpr const char* kTtftColor = "#d1495b";
constexpr const char* kSteadyColor = "#8fb8de";

// One color per startup phase, in engine order.
const std::vector<std::pair<std::string, std::string>>& phase_colors() {
  static const std::vector<std::pair<std::string, std::string>> colors = {
      {"init", "#4e79a7"},          {"load_weights", "#f28e2b"},  {"profile_run", "#e15759"},
      {"kv_cache_alloc", "#76b7b2"}, {"kernel_warmup", "#59a14f"}, {"graph_capture", "#edc948"},
      {"workspace_lock", "#b07aa1"}};
  return colors;
}

std::string color_of(const std::string& phase) {
  for (const auto& [name, color] : phase_colors()) {
    if (name == phase) return color;
  }
  return kOtherPhaseColor;
}

std::string ms_text(double v) {
  if (v >= 100) return fmt::format("{:.0f} ms", v);
  if (v >= 1) return fmt::format("{:.1f} ms", v);
  return fmt::format("{:.3f} ms", v);
}

std::string ms_cell(const std::optional<double>& v) {
  auto f = detail::finite(v);
  return f ? ms_text(*f) : "–";
}

// A "round" axis step (1, 2 or 5 times a power of ten) giving about `ticks` intervals over [0, max].
double nice_step(double max, int ticks) {
  if (!(max > 0)) return 1;
  double raw = max / ticks;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

// Number printed on the axis.
std::string tick_label(double v) {
  if (v == std::floor(v)) return fmt::format("{:.0f}", v);
  return fmt::format("{:g}", v);
}

std::string badge(const StrategyResult& r) {
  std::string cls = outcome_name(r.outcome);
  std::string text = outcome_name(r.outcome);
  if (r.outcome != Outcome::kOk && r.failed_phase && !r.failed_phase->empty()) text += " @ " + *r.failed_phase;
  if (r.outcome == Outcome::kSkipped) {
    return fmt::format("<span class=\"badge skipped\" title=\"{}\">skipped</span>",
                       esc_attr(r.skipped.value_or("")));
  }
  std::string out = fmt::format("<span class=\"badge {}\">{}</span>", cls, esc(text));
  if (detail::disallowed_hot_path(r)) {
    out += " <span class=\"badge crash\">hot-path compiles not allowed</span>";
  }
  return out;
}

std::string null_reason(const RunResults& run, const StrategyResult& r) {
  if (run.meta.mode == "compile-only") return "not measured (compile-only)";
  if (r.outcome != Outcome::kOk) {
    std::string s = std::string("not reached (") + outcome_name(r.outcome);
    if (r.failed_phase && !r.failed_phase->empty()) s += " in " + *r.failed_phase;
    return s + ")";
  }
  return "not measured";
}

// Geometry shared by both charts.
constexpr int kWidth = 1000;
constexpr int kLabelW = 270;   // strategy names
constexpr int kRightW = 150;   // value labels after the bars
constexpr int kPlotW = kWidth - kLabelW - kRightW;
constexpr int kAxisH = 30;

// The opening <svg> of a chart `height` pixels high, kWidth wide, described by `label`.
std::string chart_open(int height, const char* label) {
  return fmt::format(
      "<svg class=\"chart\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" "
      "aria-label=\"{}\">",
      kWidth, height, kWidth, height, label);
}

// Vertical grid lines and the axis labels under the plot.
std::string axis(double max, int top, int plot_h, const char* unit) {
  std::string s;
  // A huge or infinite max (a results file's 1.7976e308 ms) made `v += step` stall at infinity:
  // count the ticks instead (nice_step gives at most about 10 over [0, max]).
  const bool usable = std::isfinite(max) && max > 0;
  double scale_max = usable ? max : 1;
  double step = nice_step(scale_max, 5);
  if (!std::isfinite(step) || step <= 0) step = scale_max;
  for (int i = 0; i <= 20; ++i) {
    const double v = i * step;
    if (!(v <= scale_max * 1.0001)) break;
    double x = kLabelW + v / scale_max * kPlotW;
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" class=\"grid\"/>", x, top, x,
                     top + plot_h);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">{}</text>", x,
                     top + plot_h + 16, esc(tick_label(v)));
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"tick\" text-anchor=\"start\">{}</text>",
                   kLabelW + kPlotW + 26, top + plot_h + 16, unit);
  return s;
}

// The left-hand strategy label with an outcome dot.
std::string row_label(const StrategyResult& r, double y_mid) {
  return fmt::format(
      "<circle cx=\"12\" cy=\"{:.1f}\" r=\"5\" class=\"dot {}\"/>"
      "<text x=\"24\" y=\"{:.1f}\" class=\"label\" dominant-baseline=\"middle\">{}</text>",
      y_mid, outcome_name(r.outcome), y_mid, esc(r.strategy.empty() ? "?" : r.strategy));
}

// Horizontal stacked bars: startup time of each strategy split by phase.
std::string startup_chart(const std::vector<const StrategyResult*>& rows) {
  constexpr int kRowH = 30, kBarH = 20, kTop = 8;
  double max = 0;
  for (const StrategyResult* r : rows) {
    max = std::max(max, detail::startup_phase_sum(*r));
    if (auto s = detail::finite(r->startup_ms)) max = std::max(max, *s);
  }
  const int plot_h = static_cast<int>(rows.size()) * kRowH;
  const int height = kTop + plot_h + kAxisH;
  const double scale = max > 0 ? kPlotW / (max * 1.0) : 0;
  std::string s = chart_open(height, "startup time by phase");
  s += axis(max, kTop, plot_h, "ms");
  for (size_t i = 0; i < rows.size(); ++i) {
    const StrategyResult& r = *rows[i];
    double y = kTop + i * kRowH + (kRowH - kBarH) / 2.0;
    s += row_label(r, y + kBarH / 2.0);
    double x = kLabelW;
    bool any = false;
    for (const auto& p : r.phases) {
      if (!detail::is_startup_phase(p) || !std::isfinite(p.ms) || p.ms <= 0) continue;
      double w = p.ms * scale;
      s += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"><title>{}: {}</title></rect>",
          x, y, w, kBarH, color_of(p.name), esc(p.name), esc(ms_text(p.ms)));
      x += w;
      any = true;
    }
    std::string total;
    if (auto st = detail::finite(r.startup_ms)) {
      total = ms_text(*st);
    } else if (any) {
      total = ms_text(detail::startup_phase_sum(r)) + " (partial)";
    } else {
      total = "no startup phase recorded";
    }
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"value\" dominant-baseline=\"middle\">{}</text>",
                     x + 6, y + kBarH / 2.0, esc(total));
  }
  s += "</svg>\n";
  return s;
}

// Grouped horizontal bars: first-request TTFT next to steady TTFT for each strategy.
std::string ttft_chart(const RunResults& run, const std::vector<const StrategyResult*>& rows) {
  constexpr int kRowH = 40, kBarH = 14, kTop = 8;
  double max = 0;
  for (const StrategyResult* r : rows) {
    if (auto v = detail::finite(r->ttft_ms)) max = std::max(max, *v);
    if (auto v = detail::finite(r->steady_ttft_ms)) max = std::max(max, *v);
  }
  const int plot_h = static_cast<int>(rows.size()) * kRowH;
  const int height = kTop + plot_h + kAxisH;
  const double scale = max > 0 ? kPlotW / max : 0;
  std::string s = chart_open(height, "first-request TTFT against steady TTFT");
  if (max > 0) s += axis(max, kTop, plot_h, "ms");
  for (size_t i = 0; i < rows.size(); ++i) {
    const StrategyResult& r = *rows[i];
    double y0 = kTop + i * kRowH + (kRowH - 2 * kBarH - 2) / 2.0;
    s += row_label(r, kTop + i * kRowH + kRowH / 2.0);
    const std::pair<std::optional<double>, const char*> bars[] = {{r.ttft_ms, kTtftColor},
                                                                   {r.steady_ttft_ms, kSteadyColor}};
    for (int b = 0; b < 2; ++b) {
      double y = y0 + b * (kBarH + 2);
      const char* what = b == 0 ? "first-request TTFT" : "steady TTFT";
      if (auto v = detail::finite(bars[b].first)) {
        double w = std::max(*v * scale, 1.0);
        s += fmt::format(
            "<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"><title>{}: {}</title></rect>",
            kLabelW, y, w, kBarH, bars[b].second, what, esc(ms_text(*v)));
        s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"value\" dominant-baseline=\"middle\">{}</text>",
                         kLabelW + w + 6, y + kBarH / 2.0, esc(ms_text(*v)));
      } else {
        s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"na\" dominant-baseline=\"middle\">{}: {}</text>",
                         kLabelW + 4, y + kBarH / 2.0, what, esc(null_reason(run, r)));
      }
    }
  }
  s += "</svg>\n";
  return s;
}

constexpr const char* kCompileColor = "#7b6fb0";

// Horizontal bars: hot-path compile time of each strategy (what compile-only mode measures of
// the first requests), with the number of compiles.
std::string compile_time_chart(const std::vector<const StrategyResult*>& rows) {
  constexpr int kRowH = 30, kBarH = 20, kTop = 8;
  double max = 0;
  for (const StrategyResult* r : rows) max = std::max(max, detail::hot_path_compile_ms(*r));
  const int plot_h = static_cast<int>(rows.size()) * kRowH;
  const int height = kTop + plot_h + kAxisH;
  const double scale = max > 0 ? kPlotW / max : 0;
  std::string s = chart_open(height, "hot-path compile time per strategy");
  if (max > 0) s += axis(max, kTop, plot_h, "ms");
  for (size_t i = 0; i < rows.size(); ++i) {
    const StrategyResult& r = *rows[i];
    const double y = kTop + i * kRowH + (kRowH - kBarH) / 2.0;
    s += row_label(r, kTop + i * kRowH + kRowH / 2.0);
    const double ms = detail::hot_path_compile_ms(r);
    const size_t n = hot_path_compiled(r).size();
    const std::string text = fmt::format("{} ({} compile{})", ms_text(ms), n, n == 1 ? "" : "s");
    const double w = ms > 0 ? std::max(ms * scale, 1.0) : 0;
    if (w > 0)
      s += fmt::format(
          "<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>",
          kLabelW, y, w, kBarH, kCompileColor, esc(text));
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"value\" dominant-baseline=\"middle\">{}</text>",
                     kLabelW + w + 6, y + kBarH / 2.0, esc(text));
  }
  s += "</svg>\n";
  return s;
}

// First TTFT minus steady TTFT of each strategy split into its measured parts (GPU runs);
// "" when no strategy has a split.
std::string excess_table(const std::vector<const StrategyResult*>& rows) {
  std::vector<std::pair<const StrategyResult*, detail::TtftExcess>> split;
  for (const StrategyResult* r : rows)
    if (auto x = detail::ttft_excess(*r)) split.emplace_back(r, *x);
  if (split.empty()) return "";
  std::vector<detail::TtftExcess> splits;
  for (const auto& e : split) splits.push_back(e.second);
  const std::vector<detail::ExcessPart> cols = detail::excess_columns(splits);
  std::string s = "<table class=\"results\"><thead><tr><th>strategy</th><th>first TTFT</th>"
                  "<th>steady TTFT</th><th>excess</th>";
  for (const auto& c : cols) s += "<th title=\"" + esc_attr(c.source) + "\">" + esc(c.name) + " (ms)</th>";
  s += "<th>unexplained</th></tr></thead><tbody>\n";
  for (const auto& [r, x] : split) {
    s += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
                     esc(r->strategy), esc(fmt::format("{:.1f} ms", x.first_ms)),
                     esc(fmt::format("{:.1f} ms", x.steady_ms)), esc(fmt::format("{:.1f} ms", x.excess_ms)));
    for (const auto& c : cols) {
      const detail::ExcessPart* p = detail::excess_part(x, c.name);
      s += "<td class=\"num\">" + (p ? esc(detail::tenths(p->ms)) : std::string("–")) + "</td>";
    }
    s += "<td class=\"num\">" + esc(detail::tenths(x.unexplained_ms) + " ms" + detail::share_of(x)) +
         "</td></tr>\n";
  }
  return s + "</tbody></table>\n<p class=\"meta\">First request minus steady request, ms (JIT "
             "records over prefill and continuation prefill, the rest over the TTFT window); hover "
             "a part's title for how it was measured; a negative part: the steady request spent more "
             "there (the host waits less for the GPU when its own stalls already hid GPU work); "
             "– : not measured in that result.</p>\n";
}

// The verdict of one variant: the pick and what each strategy costs.
std::string verdict_block(const detail::VariantVerdict& v) {
  std::string s = "<div class=\"verdict\"><b>Verdict:</b> ";
  s += v.best.empty() ? std::string("no strategy ended ok")
                      : "best <b>" + esc(v.best) + "</b> (" + esc(v.best_why) + ")";
  s += "<ul>";
  for (const auto& [what, text] : v.lines) s += "<li>" + esc(what) + ": " + esc(text) + "</li>";
  return s + "</ul></div>\n";
}

std::string legend(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string s = "<div class=\"legend\">";
  for (const auto& [name, color] : items) {
    s += fmt::format("<span><i style=\"background:{}\"></i>{}</span>", color, esc(name));
  }
  return s + "</div>\n";
}

std::string results_table(const std::vector<const StrategyResult*>& rows) {
  std::string s =
      "<table class=\"results\"><thead><tr><th>strategy</th><th>warmers</th><th>outcome</th>"
      "<th>startup</th><th>TTFT</th><th>first decode</th><th>steady TTFT</th><th>first/steady</th>"
      "<th>hot-path compiles</th><th>workspace locked / requested</th></tr></thead><tbody>\n";
  for (const StrategyResult* r : rows) {
    std::string ratio = "–";
    auto a = detail::finite(r->ttft_ms), b = detail::finite(r->steady_ttft_ms);
    if (a && b && *b > 0) ratio = fmt::format("{:.2f}×", *a / *b);
    if (auto why = detail::steady_not_comparable(*r))
      ratio = "<span title=\"" + esc_attr(*why) + "\">not comparable</span>";
    std::string warmers;
    for (const auto& w : r->warmers) warmers += (warmers.empty() ? "" : ", ") + w;
    s += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{} / {} MB</td></tr>\n",
        esc(r->strategy.empty() ? "?" : r->strategy), esc(warmers.empty() ? "(none)" : warmers), badge(*r),
        ms_cell(r->startup_ms), ms_cell(r->ttft_ms), ms_cell(r->first_decode_ms), ms_cell(r->steady_ttft_ms),
        ratio, hot_path_compiled(*r).size(), detail::locked_mb(*r),
        detail::mb(r->workspace.peak_requested_bytes));
  }
  return s + "</tbody></table>\n";
}

std::string compile_list(const std::vector<const StrategyResult*>& rows) {
  size_t n = 0;
  for (const StrategyResult* r : rows) n += r->hot_path_compiles.size();
  if (n == 0) return "<p class=\"none\">No hot-path compiles.</p>\n";
  std::string s =
      "<table class=\"compiles\"><thead><tr><th>strategy</th><th>request</th><th>kernel</th>"
      "<th>phase</th><th>compile</th><th>key</th></tr></thead><tbody>\n";
  for (const StrategyResult* r : rows) {
    // A coverage run's "hot-path compiles" are the keys its envelope classes found cold: each
    // with the class that first reached it and the time its one compile after the sweep took
    // (the key-only records themselves carry no time, and their step is the class's index).
    const auto env = r->extra.find("envelope");
    if (env != r->extra.end() && env->is_object() && env->contains("cold")) {
      for (const nlohmann::json& c : env->at("cold")) {
        const auto ms = c.find("compile_ms");
        s += fmt::format(
            "<tr><td>{}</td><td>class {}</td><td>{}</td><td>envelope</td><td class=\"num\">{}</td>"
            "<td><code>{}</code></td></tr>\n",
            esc(r->strategy), esc(c.value("class", std::string("?"))),
            esc(c.value("kernel", std::string("?"))),
            esc(ms != c.end() && ms->is_number() ? ms_text(ms->get<double>()) : std::string("–")),
            esc(c.value("key", std::string("?"))));
      }
      continue;
    }
    for (const auto& e : r->hot_path_compiles) {
      // First wave or steady request, and the scheduler step that paid for it.
      std::string who = "–";
      if (e.step.request >= 0)
        who = fmt::format("{} {}, step {}", e.step.wave == 1 ? "steady request" : "first wave, request",
                          e.step.request, e.step.step);
      s += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td><code>{}</code></td></tr>\n",
          esc(r->strategy), esc(who), esc(e.kernel), esc(detail::compile_where(e)),
          esc(ms_text(e.compile_ms) + (e.source == "disk" ? " (loaded)" : "")), esc(e.key));
    }
  }
  return s + "</tbody></table>\n";
}

// Envelope coverage (`coldstart coverage`): per strategy the classes swept, reachable keys, those
// startup covered or the disk cache holds, the cold ones and their compile time; then each
// strategy's cold keys by kernel with the classes that first reach them. "" for other runs.
std::string coverage_block(const RunResults& run) {
  const std::vector<detail::CoverageRow> cov = detail::coverage_rows(run);
  if (cov.empty()) return "";
  std::string s =
      "<h3>Serving envelope coverage</h3>\n<table class=\"results\"><thead><tr><th>strategy</th>"
      "<th>classes</th><th>reachable keys</th><th>at startup</th><th>on disk</th><th>cold</th>"
      "<th>cold compile</th></tr></thead><tbody>\n";
  for (const detail::CoverageRow& c : cov) {
    const std::string classes =
        c.stopped_at.empty() ? std::to_string(c.classes)
                             : fmt::format("{} of {} (stopped in {}{})", c.classes_run, c.classes,
                                           c.stopped_at, c.unfinished ? ", unfinished" : "");
    s += fmt::format(
        "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
        esc(detail::label(*c.result)), esc(classes), c.reached, c.at_startup, c.on_disk, c.cold,
        c.cold_compile_ms ? esc(fmt::format("{:.1f} s", *c.cold_compile_ms / 1000.0)) : "–");
  }
  s += "</tbody></table>\n<p class=\"meta\">One key-only step per class; the keys startup left "
       "cold then compiled once each to time them.</p>\n";
  for (const detail::CoverageRow& c : cov) {
    if (c.cold_kernels.empty()) continue;
    s += fmt::format("<details><summary>Cold after {} ({})</summary><ul>\n",
                     esc(detail::label(*c.result)), esc(detail::cold_count_text(c)));
    for (const detail::ColdKernel& k : c.cold_kernels)
      s += "<li>" + esc(detail::cold_kernel_text(k)) + "</li>\n";
    s += "</ul>\n";
    if (!c.warmup_classes.empty())
      s += "<p>Warm them at startup" + esc(detail::partial_sweep_caveat(c)) +
           ": <code>envelope-warmup</code> (last in the strategy) with "
           "<code>engine.envelope_warmup_classes: " + esc(c.warmup_classes) + "</code></p>\n";
    s += "</details>\n";
  }
  return s;
}

std::string errors_block(const std::vector<const StrategyResult*>& rows) {
  std::string s;
  for (const StrategyResult* r : rows) {
    if (r->outcome == Outcome::kOk) continue;
    s += fmt::format("<div class=\"error\">{} {}<pre>{}</pre></div>\n", esc(r->strategy.empty() ? "?" : r->strategy),
                     badge(*r), esc(r->error.value_or("(no error text)")));
  }
  return s;
}

std::string meta_line(const RunMeta& m) {
  std::string device = detail::device_text(m);
  std::string s = "<b>" + esc(device) + "</b> · mode " + esc(m.mode.empty() ? "?" : m.mode);
  auto add = [&](const char* what, const std::string& v) {
    if (!v.empty()) s += std::string(" · ") + what + " " + esc(v);
  };
  add("driver", m.driver);
  add("CUDA", m.cuda);
  add("NVRTC", m.nvrtc);
  add("torch", m.torch);
  add("coldstart", m.coldstart_version + (m.git_sha.empty() ? "" : " (" + m.git_sha + ")"));
  add("host", m.hostname);
  add("started", m.started_at);
  for (const auto& kv : m.sets) s += " · --set <code>" + esc(kv) + "</code>";
  return s;
}

constexpr const char* kStyle = R"css(
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222;
       max-width: 1240px; margin: 24px auto; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 19px; margin-top: 36px; border-bottom: 2px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 16px; margin-top: 26px; }
h4 { font-size: 14px; margin: 18px 0 6px; color: #444; }
.meta { color: #555; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; font-weight: 600; }
td.num { text-align: right; white-space: nowrap; }
code { font: 12px ui-monospace, Menlo, Consolas, monospace; word-break: break-all; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff; font-size: 12px;
         font-weight: 600; white-space: nowrap; }
.badge.ok { background: #2e7d32; } .badge.crash { background: #c62828; }
.badge.timeout { background: #ef6c00; } .badge.error { background: #757575; }
.badge.skipped { background: #9e9e9e; } .badge.interrupted { background: #5c6bc0; }
.chart { display: block; margin: 4px 0; }
.chart .grid { stroke: #e6e6e6; stroke-width: 1; }
.chart .tick { font-size: 11px; fill: #777; }
.chart .label { font-size: 13px; fill: #222; }
.chart .value { font-size: 12px; fill: #333; }
.chart .na { font-size: 12px; fill: #888; font-style: italic; }
.dot.ok { fill: #2e7d32; } .dot.crash { fill: #c62828; } .dot.timeout { fill: #ef6c00; }
.dot.error { fill: #757575; } .dot.skipped { fill: #9e9e9e; } .dot.interrupted { fill: #5c6bc0; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; margin: 2px 0 8px; font-size: 12px; color: #444; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 5px; vertical-align: -1px; }
.error { margin: 8px 0; }
pre { background: #fbf3f3; border-left: 3px solid #c62828; padding: 8px; white-space: pre-wrap;
      word-break: break-word; margin: 4px 0; }
.none { color: #666; font-style: italic; }
.verdict { margin: 6px 0 10px; padding: 6px 12px; background: #f3f8f3; border-left: 3px solid #2e7d32; }
.verdict ul { margin: 4px 0; padding-left: 20px; }
)css";

}  // namespace

std::string render_html(const std::vector<RunResults>& runs) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";
  const std::string title = detail::report_title(runs) + " report";
  out += "<title>" + esc(title) + "</title>\n<style>" + std::string(kStyle) + "</style>\n</head>\n<body>\n";
  out += "<h1>" + esc(title) + "</h1>\n";
  if (runs.empty()) return out + "<p class=\"none\">No results.</p>\n</body>\n</html>\n";
  out += "<p class=\"meta\">" + meta_line(runs.front().meta) + "</p>\n";

  std::vector<std::pair<std::string, std::string>> phase_legend = phase_colors();
  for (const RunResults& run : runs) {
    std::string name = run.scenario.name.empty() ? "(unnamed scenario)" : run.scenario.name;
    out += "<section class=\"scenario\">\n<h2>" + esc(name);
    if (!run.scenario.file.empty()) out += " <small><code>" + esc(run.scenario.file) + "</code></small>";
    out += "</h2>\n";
    if (meta_line(run.meta) != meta_line(runs.front().meta)) {
      out += "<p class=\"meta\">" + meta_line(run.meta) + "</p>\n";
    }
    if (run.results.empty()) out += "<p class=\"none\">No results.</p>\n";
    const std::vector<detail::VariantVerdict> verdicts = detail::verdicts(run);
    const bool compile_only = run.meta.mode == "compile-only";
    for (const std::string& variant : detail::variants_of(run)) {
      std::vector<const StrategyResult*> rows;
      for (const auto& r : run.results) {
        if (r.variant == variant) rows.push_back(&r);
      }
      out += "<h3>" + (variant.empty() ? std::string("default settings") : "variant " + esc(variant)) + "</h3>\n";
      for (const auto& v : verdicts)
        if (v.variant == variant) out += verdict_block(v);
      out += results_table(rows);

      // Legend lists only the phases that occur, plus "other" when an unknown one does.
      std::vector<std::pair<std::string, std::string>> used;
      bool other = false;
      for (const auto& [phase, color] : phase_legend) {
        bool seen = false;
        for (const StrategyResult* r : rows) {
          for (const auto& p : r->phases) seen = seen || (detail::is_startup_phase(p) && p.name == phase);
        }
        if (seen) used.emplace_back(phase, color);
      }
      for (const StrategyResult* r : rows) {
        for (const auto& p : r->phases) other = other || (detail::is_startup_phase(p) && color_of(p.name) == kOtherPhaseColor);
      }
      if (other) used.emplace_back("other", kOtherPhaseColor);

      out += "<h4>Startup time by phase</h4>\n";
      out += legend(used);
      out += startup_chart(rows);
      if (compile_only) {
        // Compile-only mode times no kernel: show what it does measure of the first requests.
        out += "<h4>Hot-path compile time per strategy</h4>\n";
        out += compile_time_chart(rows);
      } else {
        out += "<h4>First-request TTFT vs steady TTFT</h4>\n";
        out += legend({{"first request", kTtftColor}, {"steady (second request)", kSteadyColor}});
        out += ttft_chart(run, rows);
        const std::string excess = excess_table(rows);
        if (!excess.empty()) out += "<h4>First-request TTFT excess by part</h4>\n" + excess;
      }
      out += "<h4>Hot-path compiles</h4>\n";
      out += compile_list(rows);
      for (const StrategyResult* r : rows) {  // multi-rank runs: per rank, and the worst stall
        const auto it = r->extra.find("ranks");
        if (it == r->extra.end() || !it->is_object()) continue;
        out += "<h4>Ranks of " + esc(detail::label(*r)) + "</h4>\n<pre>" +
               esc(detail::ranks_summary(detail::label(*r), *it)) + "</pre>\n";
      }
      std::string errors = errors_block(rows);
      if (!errors.empty()) out += "<h4>Errors</h4>\n" + errors;
    }
    out += coverage_block(run);
    out += "</section>\n";
  }
  out += "<p class=\"meta\">Times in milliseconds; MB = 2^20 bytes per workspace slot; – = not measured or "
         "not reached.</p>\n";
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace coldstart::reports
