// coldstart: Chrome trace-event timeline of each run's phases and compiles. Reads RunResults;
// measures nothing.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/render_util.h"
#include "reports/renderers.h"

namespace coldstart::reports {

namespace {

using nlohmann::json;

// Milliseconds -> microseconds, rounded to nanoseconds so the text is stable.
double us(double ms) { return std::round(ms * 1e6) / 1e3; }

double nonneg(double v) { return std::isfinite(v) && v > 0 ? v : 0; }

std::string category(int request) {
  if (request < 0) return "startup";
  return request == 0 ? "first_request" : "steady_request";
}

struct Slice {
  std::string name;
  int request;
  double start_ms, dur_ms;
  bool timed;
};

// Lays one run's compiles into their phase slices: each compile starts where the previous one in
// the same slice ended (from the slice's start), and is clamped to the slice.
void add_compiles(json& events, int pid, int tid, const std::vector<Slice>& slices,
                  const std::vector<CompileEvent>& compiles, bool hot_path) {
  std::vector<double> cursor(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) cursor[i] = slices[i].start_ms;
  for (const auto& c : compiles) {
    // Startup compiles belong to a startup phase; hot-path ones to the first request phase of
    // that name (a compile is cached after its first time).
    size_t k = slices.size();
    for (size_t i = 0; i < slices.size(); ++i) {
      bool startup_slice = slices[i].request < 0;
      if (slices[i].name == c.phase && startup_slice != hot_path) {
        k = i;
        break;
      }
    }
    if (k == slices.size()) continue;  // no slice for it (callers add one for a failed phase)
    const double end = slices[k].start_ms + slices[k].dur_ms;
    const double start = std::min(cursor[k], end);
    const double dur = std::min(nonneg(c.compile_ms), end - start);
    cursor[k] = start + dur;
    json args = {{"kernel", detail::clean_text(c.kernel)},
                 {"key", detail::clean_text(c.key)},
                 {"compile_ms", nonneg(c.compile_ms)},
                 {"source", detail::clean_text(c.source)},
                 {"hot_path", hot_path},
                 {"phase", detail::clean_text(c.phase)}};
    if (c.step.drafter_pass > 0) args["drafter"] = {{"pass", c.step.drafter_pass}, {"tokens", c.step.drafter_tokens}};
    events.push_back({{"name", "compile " + detail::clean_text(c.kernel)},
                      {"cat", hot_path ? "compile,hot_path" : "compile"},
                      {"ph", "X"},
                      {"pid", pid},
                      {"tid", tid},
                      {"ts", us(start)},
                      {"dur", us(dur)},
                      {"args", args}});
  }
}

}  // namespace

std::string render_trace(const std::vector<RunResults>& runs) {
  json events = json::array();
  for (size_t s = 0; s < runs.size(); ++s) {
    const RunResults& run = runs[s];
    const int pid = static_cast<int>(s) + 1;
    std::string scenario = run.scenario.name.empty() ? "(unnamed scenario)" : run.scenario.name;
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                      {"args", {{"name", detail::clean_text(scenario)}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                      {"args", {{"sort_index", pid}}}});

    std::vector<const StrategyResult*> rows = detail::grouped_rows(run);
    for (size_t t = 0; t < rows.size(); ++t) {
      const StrategyResult& r = *rows[t];
      const int tid = static_cast<int>(t) + 1;
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                        {"args", {{"name", detail::clean_text(detail::label(r))}}}});
      events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                        {"args", {{"sort_index", tid}}}});

      // Phases are sequential: lay them back to back in the order recorded.
      std::vector<Slice> slices;
      double clock = 0;
      for (const auto& p : r.phases) {
        slices.push_back({p.name, p.request, clock, nonneg(p.ms), true});
        clock += nonneg(p.ms);
      }
      // A failed phase is never timed. If kernels were compiled in it, give it a slice exactly as
      // long as those compiles so they stay visible and nested; args.timed says it is not a time.
      const bool failed = r.outcome != Outcome::kOk;
      if (failed && r.failed_phase && !r.failed_phase->empty()) {
        const bool startup_phase =
            std::find(detail::startup_phase_order().begin(), detail::startup_phase_order().end(),
                      *r.failed_phase) != detail::startup_phase_order().end();
        bool has_slice = false;
        for (const auto& sl : slices) {
          has_slice = has_slice || (sl.name == *r.failed_phase && (sl.request < 0) == startup_phase);
        }
        double compiled = 0;
        for (const auto& c : startup_phase ? r.startup_compile_list : r.hot_path_compiles) {
          if (c.phase == *r.failed_phase) compiled += nonneg(c.compile_ms);
        }
        if (!has_slice && compiled > 0) {
          int request = startup_phase ? -1 : (slices.empty() ? 0 : std::max(0, slices.back().request));
          slices.push_back({*r.failed_phase, request, clock, compiled, false});
          clock += compiled;
        }
      }
      for (const auto& sl : slices) {
        json args = {{"request", sl.request}, {"ms", sl.timed ? json(sl.dur_ms) : json(nullptr)}};
        if (!sl.timed) {
          args["timed"] = false;
          args["note"] = "phase failed before it was timed; slice spans its compiles only";
        }
        events.push_back({{"name", detail::clean_text(sl.name)},
                          {"cat", category(sl.request)},
                          {"ph", "X"},
                          {"pid", pid},
                          {"tid", tid},
                          {"ts", us(sl.start_ms)},
                          {"dur", us(sl.dur_ms)},
                          {"args", args}});
      }
      add_compiles(events, pid, tid, slices, r.startup_compile_list, false);
      add_compiles(events, pid, tid, slices, r.hot_path_compiles, true);

      // Where the run ended, and how.
      json args = {{"outcome", outcome_name(r.outcome)}};
      if (r.failed_phase) args["failed_phase"] = detail::clean_text(*r.failed_phase);
      if (r.error) args["error"] = detail::clean_text(*r.error);
      if (r.signal) args["signal"] = detail::clean_text(*r.signal);
      if (r.exit_code) args["exit_code"] = *r.exit_code;
      std::string name = outcome_name(r.outcome);
      if (failed && r.failed_phase && !r.failed_phase->empty()) name += " in " + detail::clean_text(*r.failed_phase);
      events.push_back({{"name", name},
                        {"cat", "outcome"},
                        {"ph", "i"},
                        {"s", "t"},
                        {"pid", pid},
                        {"tid", tid},
                        {"ts", us(clock)},
                        {"args", args}});
    }
  }
  // One event per line: readable, and golden-file diffs stay small.
  std::string out = "{\"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i) {
    out += events[i].dump(-1, ' ', false, json::error_handler_t::replace);
    out += i + 1 < events.size() ? ",\n" : "\n";
  }
  out += "], \"displayTimeUnit\": \"ms\"}\n";
  return out;
}

}  // namespace coldstart::reports
