// coldstart: JUnit XML report. Reads RunResults; measures nothing.
#include <algorithm>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reports/render_util.h"
#include "reports/renderers.h"

namespace coldstart::reports {

namespace {

using detail::xml_escape;

// Seconds with millisecond precision, the way JUnit consumers expect ("1.703").
std::string seconds(double ms) {
  if (!std::isfinite(ms) || ms < 0) ms = 0;
  return fmt::format("{:.3f}", ms / 1000.0);
}

std::string ms_text(const std::optional<double>& v) {
  auto f = detail::finite(v);
  return f ? fmt::format("{:.3f} ms", *f) : "null";
}

// What one test case reports, decided before any XML is written so the suite totals and the
// elements always agree.
struct CaseVerdict {
  enum Kind { kPass, kFailure, kError, kSkipped } kind = kPass;
  std::string type;     // failure / error type attribute
  std::string message;  // one line
  std::string text;     // element content
};

bool rule_matches(const RuleCheck& rule, const StrategyResult& r) {
  return (rule.strategy == "*" || rule.strategy == r.strategy) &&
         (!rule.variant || *rule.variant == r.variant);
}

// The met rule of the run that checks `check` ("outcome", or a hot-path compile check) on `r`:
// what the scenario expected, so JUnit does not count it as a failure (as --check does not).
const RuleCheck* met_rule(const RunResults& run, const StrategyResult& r,
                          const std::vector<std::string>& checks) {
  for (const RuleCheck& rule : run.rules) {
    if (rule.status != "met" || !rule_matches(rule, r)) continue;
    for (const auto& c : checks)
      if (std::find(rule.checks.begin(), rule.checks.end(), c) != rule.checks.end()) return &rule;
  }
  return nullptr;
}

bool hot_path_is_failure(const StrategyResult& r, const JunitOptions& o) {
  if (hot_path_compiled(r).empty()) return false;  // loads from the disk cache are not compiles
  return o.hot_path_compiles_fail || detail::disallowed_hot_path(r);
}

std::string compile_lines(const std::vector<CompileEvent>& events) {
  std::string s;
  for (const auto& e : events) {
    s += fmt::format("kernel {} in phase {} ({:.3f} ms, {})\n  key: {}\n", e.kernel, detail::compile_where(e),
                     e.compile_ms, e.source.empty() ? "?" : e.source, e.key);
  }
  return s;
}

CaseVerdict verdict(const RunResults& run, const StrategyResult& r, const JunitOptions& o) {
  CaseVerdict v;
  const bool hot_fail =
      hot_path_is_failure(r, o) &&
      !met_rule(run, r, {"hot_path_compiles", "max_hot_path_compiles", "hot_path_kernels"});
  // A crash, timeout or error a met `outcome:` rule expected is what the scenario reproduces.
  if (r.outcome != Outcome::kOk && r.outcome != Outcome::kSkipped &&
      r.outcome != Outcome::kInterrupted && met_rule(run, r, {"outcome"}) && !hot_fail)
    return v;
  const std::string error = r.error.value_or("");
  std::string head = error.empty() ? std::string("(no error text)") : detail::first_line(error);
  if (r.failed_phase && !r.failed_phase->empty()) head = *r.failed_phase + ": " + head;

  if (r.outcome == Outcome::kCrash || r.outcome == Outcome::kTimeout) {
    v.kind = CaseVerdict::kFailure;
    v.type = outcome_name(r.outcome);
    v.message = head;
    v.text = error.empty() ? "(no error text)" : error;
    if (hot_fail) {
      v.text += fmt::format("\n\nAlso {} hot-path compile(s), which this strategy does not allow:\n",
                            hot_path_compiled(r).size());
      v.text += compile_lines(hot_path_compiled(r));
    }
  } else if (r.outcome == Outcome::kSkipped) {
    v.kind = CaseVerdict::kSkipped;
    v.message = r.skipped.value_or("skipped");
  } else if (r.outcome == Outcome::kInterrupted) {
    // The run was stopped from outside: the strategy neither passed nor failed.
    v.kind = CaseVerdict::kSkipped;
    v.message = "interrupted: " + head;
  } else if (r.outcome == Outcome::kError) {
    v.kind = CaseVerdict::kError;
    v.type = "error";
    v.message = head;
    v.text = error.empty() ? "(no error text)" : error;
  } else if (hot_fail) {
    v.kind = CaseVerdict::kFailure;
    v.type = "hot_path_compile";
    std::vector<std::string> kernels;
    const std::vector<CompileEvent> compiled = hot_path_compiled(r);
    for (const auto& e : compiled) kernels.push_back(e.kernel + " (" + detail::compile_where(e) + ")");
    v.message = fmt::format("{} hot-path compile(s) not allowed: {}", compiled.size(),
                            fmt::join(kernels, ", "));
    v.text = compile_lines(compiled);
  }
  return v;
}

// Per test case details for <system-out>: everything a CI reader needs without the JSON file.
std::string case_output(const RunResults& run, const StrategyResult& r) {
  std::string s;
  s += fmt::format("outcome: {}", outcome_name(r.outcome));
  if (r.failed_phase && !r.failed_phase->empty()) s += " in " + *r.failed_phase;
  if (const RuleCheck* rule = met_rule(run, r, {"outcome"}))
    s += fmt::format(" (as the rule at {} expects)", rule->where);
  s += "\n";
  s += fmt::format("warmers: {}\n", r.warmers.empty() ? "(none)" : fmt::format("{}", fmt::join(r.warmers, ", ")));
  s += fmt::format("startup: {}\n", ms_text(r.startup_ms));
  s += fmt::format("ttft: {}\nfirst_decode: {}\nsteady_ttft: {}\nsteady_decode: {}\n", ms_text(r.ttft_ms),
                   ms_text(r.first_decode_ms), ms_text(r.steady_ttft_ms), ms_text(r.steady_decode_ms));
  s += "phases:\n";
  for (const auto& p : r.phases) {
    std::string who = detail::is_startup_phase(p) ? "startup"
                      : p.request < 0            ? "after startup"
                                                 : fmt::format("request {}", p.request);
    s += fmt::format("  {} {}: {:.3f} ms", who, p.name, p.ms);
    if (auto g = detail::finite(p.gpu_ms)) s += fmt::format(" (gpu {:.3f} ms)", *g);
    s += "\n";
  }
  s += fmt::format("startup compiles: {}\n", r.startup_compiles);
  s += fmt::format("hot-path compiles: {}", hot_path_compiled(r).size());
  if (hot_path_loads(r) > 0) s += fmt::format(" (+{} loaded from the kernel cache)", hot_path_loads(r));
  s += "\n";
  for (const auto& e : r.hot_path_compiles) {
    s += fmt::format("  {} in {} ({:.3f} ms{}): {}\n", e.kernel, detail::compile_where(e), e.compile_ms,
                     e.source == "disk" ? ", loaded" : "", e.key);
  }
  const std::string locked = detail::locked_mb(r);
  s += fmt::format("workspace: {}, peak requested {} MB, {} slot(s)\n",
                   locked == "-" ? "never locked (workspace_policy " +
                                       detail::extra_string(r, "workspace_policy").value_or("lock") +
                                       ")"
                                 : "locked " + locked + " MB",
                   detail::mb(r.workspace.peak_requested_bytes), r.workspace.num_slots);
  if (r.exit_code) s += fmt::format("exit code: {}\n", *r.exit_code);
  if (r.signal) s += fmt::format("signal: {}\n", *r.signal);
  if (r.skipped) s += "skipped: " + *r.skipped + "\n";
  const auto ranks = r.extra.find("ranks");
  if (ranks != r.extra.end() && ranks->is_object())
    s += detail::ranks_summary(detail::label(r), *ranks);
  return s;
}

// JUnit's timestamp attribute has no zone designator: "2025-01-31T12:00:00".
std::optional<std::string> junit_timestamp(const std::string& iso) {
  static const std::regex re("^([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})");
  std::smatch m;
  if (std::regex_search(iso, m, re)) return m[1].str();
  return std::nullopt;
}

std::string attr(const char* name, const std::string& value) {
  return fmt::format(" {}=\"{}\"", name, xml_escape(value, true));
}

// What makes a merged report's names unique: "NVIDIA H200, sm_90, cuda" (run_target, the
// arch, the mode); "sm_90, compile-only" when compile-only mode had no --target profile.
std::string target_tag(const RunMeta& m) {
  std::vector<std::string> parts;
  const std::string target = run_target(m);
  const std::string arch = m.sm > 0 ? "sm_" + std::to_string(m.sm) : std::string();
  if (target != arch) parts.push_back(target);
  if (!arch.empty()) parts.push_back(arch);
  if (!m.mode.empty()) parts.push_back(m.mode);
  return parts.empty() ? std::string("unknown target") : fmt::format("{}", fmt::join(parts, ", "));
}

// One test case per expect: rule: met passes, unmet fails (type "expectation", one line per
// failed check), a rule not checked by this run is skipped with the reason.
CaseVerdict rule_verdict(const RuleCheck& rule) {
  CaseVerdict v;
  if (rule.status == "met") return v;
  if (rule.status == "unmet") {
    v.kind = CaseVerdict::kFailure;
    v.type = "expectation";
    v.message = rule.details.empty() ? "unmet" : rule.details.front();
    for (const auto& d : rule.details) v.text += d + "\n";
    return v;
  }
  v.kind = CaseVerdict::kSkipped;
  v.message = rule.status + (rule.details.empty() ? "" : ": " + rule.details.front());
  return v;
}

std::string rule_name(const RuleCheck& rule) {
  std::string who = rule.strategy == "*" ? "every strategy" : rule.strategy;
  if (rule.variant) who += " [" + *rule.variant + "]";
  return fmt::format("rule at {}: {}: {}", rule.where, who, rule.rule);
}

}  // namespace

std::string render_junit(const std::vector<RunResults>& runs, const JunitOptions& options) {
  struct Totals {
    size_t tests = 0, failures = 0, errors = 0, skipped = 0;
    double ms = 0;
  };
  Totals all;
  std::string suites;
  for (const RunResults& run : runs) {
    const std::string tag = target_tag(run.meta);
    const std::string scenario =
        (run.scenario.name.empty() ? "(unnamed scenario)" : run.scenario.name) + " (" + tag + ")";
    Totals t;
    std::string cases;
    // One test case per strategy run, then one per expect: rule.
    struct Case {
      std::string name;
      double ms;
      CaseVerdict v;
      std::string out;
    };
    std::vector<Case> all_cases;
    for (const StrategyResult* r : detail::grouped_rows(run)) {
      double ms = std::isfinite(r->wall_ms) && r->wall_ms > 0 ? r->wall_ms : 0;
      all_cases.push_back({detail::label(*r) + " (" + tag + ")", ms, verdict(run, *r, options),
                           case_output(run, *r)});
    }
    for (const RuleCheck& rule : run.rules) {
      std::string out = "status: " + rule.status + "\n";
      for (const auto& d : rule.details) out += d + "\n";
      all_cases.push_back({rule_name(rule) + " (" + tag + ")", 0, rule_verdict(rule), out});
    }
    for (const Case& c : all_cases) {
      const CaseVerdict& v = c.v;
      const double ms = c.ms;
      ++t.tests;
      t.ms += ms;
      cases += "    <testcase" + attr("classname", scenario) + attr("name", c.name) +
               attr("time", seconds(ms)) + ">\n";
      switch (v.kind) {
        case CaseVerdict::kFailure:
        case CaseVerdict::kError: {
          const char* tag = v.kind == CaseVerdict::kFailure ? "failure" : "error";
          (v.kind == CaseVerdict::kFailure ? t.failures : t.errors) += 1;
          cases += fmt::format("      <{}{}{}>{}</{}>\n", tag, attr("message", v.message),
                               attr("type", v.type), xml_escape(v.text), tag);
          break;
        }
        case CaseVerdict::kSkipped:
          ++t.skipped;
          cases += "      <skipped" + attr("message", v.message) + "/>\n";
          break;
        case CaseVerdict::kPass: break;
      }
      cases += "      <system-out>" + xml_escape(c.out) + "</system-out>\n";
      cases += "    </testcase>\n";
    }
    all.tests += t.tests;
    all.failures += t.failures;
    all.errors += t.errors;
    all.skipped += t.skipped;
    all.ms += t.ms;

    const RunMeta& m = run.meta;
    std::string head = "  <testsuite" + attr("name", scenario) + attr("tests", std::to_string(t.tests)) +
                       attr("failures", std::to_string(t.failures)) +
                       attr("errors", std::to_string(t.errors)) +
                       attr("skipped", std::to_string(t.skipped)) + attr("time", seconds(t.ms));
    if (auto ts = junit_timestamp(m.started_at)) head += attr("timestamp", *ts);
    if (!m.hostname.empty()) head += attr("hostname", m.hostname);
    suites += head + ">\n";
    suites += "    <properties>\n";
    auto prop = [&](const char* name, const std::string& value) {
      if (!value.empty()) suites += "      <property" + attr("name", name) + attr("value", value) + "/>\n";
    };
    prop("scenario_file", run.scenario.file);
    prop("device", m.device_name);
    prop("target", run_target(m));
    if (m.sm > 0) prop("sm", std::to_string(m.sm));
    if (m.sm_count > 0) prop("sm_count", std::to_string(m.sm_count));
    prop("mode", m.mode);
    prop("driver", m.driver);
    prop("cuda", m.cuda);
    prop("nvrtc", m.nvrtc);
    prop("torch", m.torch);
    prop("coldstart_version", m.coldstart_version);
    prop("git_sha", m.git_sha);
    prop("started_at", m.started_at);
    prop("command_line", m.command_line);
    suites += "    </properties>\n";
    suites += cases;
    suites += "  </testsuite>\n";
  }
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<testsuites" + attr("name", "coldstart") + attr("tests", std::to_string(all.tests)) +
         attr("failures", std::to_string(all.failures)) + attr("errors", std::to_string(all.errors)) +
         attr("skipped", std::to_string(all.skipped)) + attr("time", seconds(all.ms)) + ">\n";
  out += suites;
  out += "</testsuites>\n";
  return out;
}

}  // namespace coldstart::reports
