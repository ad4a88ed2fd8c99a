// coldstart compare: baseline against current results. See compare.h for the rules; merged
// files (read_any_results, merge) are merge.cpp, the table and Markdown renderings
// compare_render.cpp. This file only reads RunResults.
#include "harness/cli/compare.h"
#include "harness/cli/compare_internal.h"

#include "reports/render_util.h"
#include "harness/common/paths.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/common/target.h"

namespace coldstart::cli {
namespace compare_detail {

// "NVIDIA H200, sm_90": how tables and reasons name where a run ran.
std::string target_label(const std::string& target, int sm) {
  const std::string arch = sm_arch(sm);
  return target == arch ? arch : target + ", " + arch;
}

std::string fmt_ms(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f}", *v) : std::string("n/a");
}

std::string metric_label(const std::string& name) {
  if (name == "startup_ms") return "startup";
  if (name == "ttft_ms") return "TTFT";
  if (name == "steady_ttft_ms") return "steady TTFT";
  return "first decode";
}

}  // namespace compare_detail

using compare_detail::fmt_ms;
using compare_detail::metric_label;
using compare_detail::target_label;

namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Small helpers

std::string first_line(const std::string& text) {
  const auto nl = text.find('\n');
  return nl == std::string::npos ? text : text.substr(0, nl);
}


// The timings compare shows and gates, in the tables' column order (repeat_timings less
// steady_decode_ms).
const TimingField kComparedTimings[] = {{"startup_ms", &StrategyResult::startup_ms},
                                        {"ttft_ms", &StrategyResult::ttft_ms},
                                        {"steady_ttft_ms", &StrategyResult::steady_ttft_ms},
                                        {"first_decode_ms", &StrategyResult::first_decode_ms}};

// `<name>_max - <name>_min` from a result's extra fields; nullopt when either is missing.
std::optional<double> recorded_spread(const StrategyResult& r, const std::string& name) {
  const auto lo = r.extra.find(name + "_min");
  const auto hi = r.extra.find(name + "_max");
  if (lo == r.extra.end() || hi == r.extra.end() || !lo->is_number() || !hi->is_number()) {
    return std::nullopt;
  }
  return std::max(0.0, hi->get<double>() - lo->get<double>());
}

std::string failure_word(Outcome o) {
  switch (o) {
    case Outcome::kCrash: return "NEW CRASH";
    case Outcome::kTimeout: return "NEW TIMEOUT";
    case Outcome::kError: return "NEW ERROR";
    case Outcome::kSkipped: return "NEW SKIP";
    case Outcome::kOk:
    case Outcome::kInterrupted: break;
  }
  return "";
}

// One strategy result together with where it came from.
struct Entry {
  const RunResults* run;
  const StrategyResult* result;
};

// (scenario, target, variant, strategy); target is "" when the comparison ignores it.
using MatchKey = std::tuple<std::string, std::string, std::string, std::string>;

// Flattens runs into entries keyed for matching. A key seen twice keeps the later entry and
// adds a note naming the duplicate.
std::map<MatchKey, Entry> index_runs(const std::vector<RunResults>& runs,
                                     const std::set<std::string>& ignore_target_for,
                                     const char* side, std::vector<MatchKey>* order,
                                     std::vector<std::string>* notes) {
  std::map<MatchKey, Entry> out;
  for (const RunResults& run : runs) {
    for (const StrategyResult& r : run.results) {
      const std::string target =
          ignore_target_for.count(run.scenario.name) ? std::string() : run_target(run.meta);
      MatchKey k{run.scenario.name, target, r.variant, r.strategy};
      auto [it, inserted] = out.insert({k, Entry{&run, &r}});
      if (!inserted) {
        notes->push_back(fmt::format("{}: {} / {}{} ({}) appears twice; the later result is used",
                                     side, run.scenario.name, r.strategy,
                                     r.variant.empty() ? "" : " [" + r.variant + "]",
                                     target_label(run_target(run.meta), run.meta.sm)));
        it->second = Entry{&run, &r};
      } else {
        order->push_back(k);
      }
    }
  }
  return out;
}

MetricDelta compare_metric(const std::string& name, const std::optional<double>& base,
                           const std::optional<double>& cur, const StrategyResult& b,
                           const StrategyResult& c, double threshold_pct, bool comparable) {
  MetricDelta m;
  m.name = name;
  m.baseline = base;
  m.current = cur;
  const auto sb = recorded_spread(b, name);
  const auto sc = recorded_spread(c, name);
  m.spread_ms = std::max(sb.value_or(0.0), sc.value_or(0.0));
  if (!base || !cur || !comparable) return m;
  m.compared = true;
  const double d = m.delta_ms();
  const double pct = std::fabs(m.delta_pct());
  // A timing is gated only when the current file recorded a run-to-run spread (--repeat): a
  // single current run says nothing about its own noise, so its change is shown but never
  // flagged, even against a baseline that has a spread.
  m.gated = sc.has_value();
  const bool beyond = m.gated && pct > threshold_pct && std::fabs(d) > m.spread_ms;
  m.regressed = beyond && d > 0;
  m.improved = beyond && d < 0;
  return m;
}

// A compile identity "name[A=1,B=2](i32,*bf16)" split into its constexprs (in order) and its
// argument specializations; an identity in another form is all "signature".
struct IdentityParts {
  std::vector<std::pair<std::string, std::string>> constexprs;
  std::string signature;
};

IdentityParts identity_parts(const std::string& identity) {
  IdentityParts p;
  const size_t open = identity.find('['), paren = identity.find('(');
  const size_t close = open == std::string::npos ? std::string::npos : identity.find(']', open);
  if (open == std::string::npos || close == std::string::npos || (paren != std::string::npos && paren < open)) {
    p.signature = paren == std::string::npos ? identity : identity.substr(paren);
    return p;
  }
  const std::string list = identity.substr(open + 1, close - open - 1);
  size_t start = 0;
  while (start <= list.size() && !list.empty()) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = item.find('=');
    p.constexprs.emplace_back(item.substr(0, eq), eq == std::string::npos ? "" : item.substr(eq + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  p.signature = identity.substr(close + 1);
  return p;
}

// What differs between two identities of one kernel: "NUM_CACHE_LINES 58008 -> 58002",
// "BLOCK_M (none) -> 64", "specializations (i32) -> (i32:16)".
std::string key_difference(const std::string& baseline, const std::string& current) {
  const IdentityParts b = identity_parts(baseline), c = identity_parts(current);
  std::vector<std::string> diffs;
  auto value_in = [](const IdentityParts& p, const std::string& name) -> std::string {
    for (const auto& [n, v] : p.constexprs)
      if (n == name) return v;
    return "(none)";
  };
  std::set<std::string> seen;
  for (const auto& [n, v] : b.constexprs)
    if (seen.insert(n).second && value_in(c, n) != v)
      diffs.push_back(fmt::format("{} {} -> {}", n, v, value_in(c, n)));
  for (const auto& [n, v] : c.constexprs)
    if (seen.insert(n).second) diffs.push_back(fmt::format("{} (none) -> {}", n, v));
  if (b.signature != c.signature)
    diffs.push_back(fmt::format("specializations {} -> {}", b.signature, c.signature));
  return diffs.empty() ? std::string("same key") : fmt::format("{}", fmt::join(diffs, ", "));
}

// Whether the result was timed under --host-split (CUPTI's callbacks on while requests ran).
bool host_split_on(const StrategyResult& r) {
  const auto it = r.extra.is_object() ? r.extra.find("cuda_api_timing") : r.extra.end();
  return it != r.extra.end() && it->is_string() && it->get<std::string>().rfind("on ", 0) == 0;
}

CompareRow compare_pair(const Entry& b, const Entry& c, double threshold_pct,
                        bool gate_cross_target) {
  const StrategyResult& br = *b.result;
  const StrategyResult& cr = *c.result;
  CompareRow row;
  row.scenario = c.run->scenario.name;
  row.sm = c.run->meta.sm;
  row.target = run_target(c.run->meta);
  row.variant = cr.variant;
  row.strategy = cr.strategy;
  row.baseline_outcome = br.outcome;
  row.current_outcome = cr.outcome;
  row.cross_target = run_target(b.run->meta) != row.target;

  // An --envelope run replays the envelope, not the requests: against a request replay neither
  // its compiles nor its (null) timings compare.
  const bool envelope_b = br.extra.is_object() && br.extra.contains("envelope");
  const bool envelope_c = cr.extra.is_object() && cr.extra.contains("envelope");
  if (envelope_b != envelope_c) {
    row.not_comparable = true;
    row.outcome_change = fmt::format("not compared: the {} is an --envelope run, the other a "
                                     "request replay", envelope_c ? "current" : "baseline");
    for (const TimingField& t : kComparedTimings) {
      MetricDelta m;  // neither side shown
      m.name = t.name;
      row.metrics.push_back(m);
    }
    return row;
  }
  // An interrupted run was stopped from outside: it measured nothing to compare, on either side.
  if (cr.outcome == Outcome::kInterrupted || br.outcome == Outcome::kInterrupted) {
    const bool current = cr.outcome == Outcome::kInterrupted;
    const StrategyResult& stopped = current ? cr : br;
    row.interrupted = current;
    row.outcome_change =
        fmt::format("{} in {}: not compared", current ? "INTERRUPTED" : "baseline interrupted",
                    stopped.failed_phase.value_or("unknown phase"));
    for (const TimingField& t : kComparedTimings) {
      MetricDelta m;  // compared = false: shown, never gated
      m.name = t.name;
      m.baseline = br.*t.field;
      m.current = cr.*t.field;
      row.metrics.push_back(m);
    }
    return row;
  }

  const std::string cur_phase = cr.failed_phase.value_or("unknown phase");
  if (cr.outcome != Outcome::kOk && cr.outcome != br.outcome) {
    row.new_failure = true;
    row.outcome_change = fmt::format("{}: {} -> {} in {}", failure_word(cr.outcome),
                                     outcome_name(br.outcome), outcome_name(cr.outcome), cur_phase);
    if (cr.error) row.outcome_change += ": " + first_line(*cr.error);
  } else if (cr.outcome == Outcome::kOk && br.outcome != Outcome::kOk) {
    row.outcome_change = fmt::format("FIXED (was {} in {})", outcome_name(br.outcome),
                                     br.failed_phase.value_or("unknown phase"));
  } else if (cr.outcome != Outcome::kOk && br.failed_phase != cr.failed_phase) {
    row.outcome_change = fmt::format("still {}, now in {} (was {})", outcome_name(cr.outcome),
                                     cur_phase, br.failed_phase.value_or("unknown phase"));
  }

  // A GPU run and a compile-only run measure different things, and so do two targets (an H100
  // and an H200): their times are shown, never gated.
  // CUPTI's callbacks (--host-split) add host time to every CUDA call: a result measured with
  // them is not timed like one without.
  const bool comparable = b.run->meta.mode == c.run->meta.mode &&
                          run_target(b.run->meta) == row.target &&
                          host_split_on(br) == host_split_on(cr);
  for (const TimingField& t : kComparedTimings)
    row.metrics.push_back(
        compare_metric(t.name, br.*t.field, cr.*t.field, br, cr, threshold_pct, comparable));

  // A compile is identified by kernel, constexprs (the config among them) and argument
  // specializations: the same instance built for another arch or NVRTC is a rebuild, and one
  // whose program text changed (source hash) is "kernel source changed", not a new compile.
  std::map<std::pair<std::string, std::string>, std::string> known;  // id -> baseline hash
  for (const CompileEvent& e : br.hot_path_compiles) {
    const CompileKeyParts k = split_compile_key(e.key);
    known.emplace(std::make_pair(e.kernel, k.identity), k.source_hash);
  }
  std::set<std::pair<std::string, std::string>> reported, current_ids;
  const std::vector<CompileEvent> current_compiles = hot_path_compiled(cr);  // disk loads excluded
  for (const CompileEvent& e : current_compiles)
    current_ids.emplace(e.kernel, split_compile_key(e.key).identity);
  // Baseline compiles the current run did not repeat, by kernel and phase: a current compile of
  // the same kernel in the same phase with another key takes one of them (first come).
  std::map<std::pair<std::string, std::string>, std::vector<const CompileEvent*>> unrepeated;
  for (const CompileEvent& e : br.hot_path_compiles) {
    if (e.source == "disk" || current_ids.count({e.kernel, split_compile_key(e.key).identity}))
      continue;
    auto& list = unrepeated[{e.kernel, e.phase}];
    const std::string id = split_compile_key(e.key).identity;
    if (std::none_of(list.begin(), list.end(), [&](const CompileEvent* o) {
          return split_compile_key(o->key).identity == id;
        }))
      list.push_back(&e);
  }
  for (const CompileEvent& e : current_compiles) {
    const CompileKeyParts k = split_compile_key(e.key);
    const std::pair<std::string, std::string> id{e.kernel, k.identity};
    if (!reported.insert(id).second) continue;
    const auto it = known.find(id);
    if (it == known.end()) {
      auto& spare = unrepeated[{e.kernel, e.phase}];
      if (spare.empty()) {
        row.new_hot_path_compiles.push_back(e);
      } else {
        row.key_changed.push_back({e, spare.front()->key,
                                   key_difference(split_compile_key(spare.front()->key).identity,
                                                  k.identity)});
        spare.erase(spare.begin());
      }
    } else if (it->second != k.source_hash) {
      row.kernel_source_changed.push_back({e, it->second});
    }
  }

  row.baseline_hot_path_compiles = static_cast<int>(hot_path_compiled(br).size());
  row.current_hot_path_compiles = static_cast<int>(current_compiles.size());
  row.fewer_hot_path_compiles = row.current_hot_path_compiles < row.baseline_hot_path_compiles;
  for (const MetricDelta& m : row.metrics)
    if (m.compared && !m.gated && std::fabs(m.delta_pct()) > threshold_pct) row.ungated_change = true;
  // A timing the baseline measured and a run that ended ok no longer has (a steady request
  // dropped from the scenario, a field lost on the way) is a change to see, not "same".
  if (cr.outcome == Outcome::kOk && br.outcome == Outcome::kOk)
    for (const MetricDelta& m : row.metrics)
      if (m.baseline && !m.current) row.ungated_change = true;

  // Another GPU is not a regression: its own tuned tables pick other tiles, and a smaller card
  // runs out of memory where a larger one does not. Those differences are shown, and gated only
  // on request.
  const bool gate_differences = !row.cross_target || gate_cross_target;
  row.regressed = (gate_differences && (row.new_failure || !row.new_hot_path_compiles.empty())) ||
                  std::any_of(row.metrics.begin(), row.metrics.end(),
                              [](const MetricDelta& m) { return m.regressed; });
  return row;
}

CompareRow one_sided(const Entry& e, CompareRow::Presence presence) {
  CompareRow row;
  row.scenario = e.run->scenario.name;
  row.sm = e.run->meta.sm;
  row.target = run_target(e.run->meta);
  row.variant = e.result->variant;
  row.strategy = e.result->strategy;
  row.presence = presence;
  const bool added = presence == CompareRow::Presence::kAdded;
  (added ? row.current_outcome : row.baseline_outcome) = e.result->outcome;
  for (const TimingField& t : kComparedTimings) {
    MetricDelta m;
    m.name = t.name;
    (added ? m.current : m.baseline) = e.result->*t.field;
    row.metrics.push_back(m);
  }
  return row;
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// MetricDelta / CompareRow

double MetricDelta::delta_ms() const {
  return compared ? *current - *baseline : 0.0;
}

double MetricDelta::delta_pct() const {
  if (!compared) return 0.0;
  const double d = *current - *baseline;
  if (*baseline == 0.0) {
    return d > 0 ? std::numeric_limits<double>::infinity()
                 : d < 0 ? -std::numeric_limits<double>::infinity() : 0.0;
  }
  return 100.0 * d / std::fabs(*baseline);
}

std::string CompareRow::label() const {
  return fmt::format("{} / {}{} ({})", scenario, strategy,
                     variant.empty() ? "" : " [" + variant + "]", target_label(target, sm));
}

// ---------------------------------------------------------------------------------------------
// compare

CompareReport compare_results(const std::vector<RunResults>& baseline,
                              const std::vector<RunResults>& current,
                              const CompareOptions& options) {
  if (!(options.max_regression_pct >= 0) || !std::isfinite(options.max_regression_pct)) {
    throw InputError(fmt::format("--max-regression {}: must be a percentage >= 0",
                                 options.max_regression_pct));
  }
  CompareReport report;
  report.max_regression_pct = options.max_regression_pct;

  // Which scenarios ran on exactly one target on both sides: for those, the target is not
  // matched (a before/after comparison); when the two targets differ, outcomes and compiles are
  // compared but timings are not gated (another GPU is not a regression).
  std::map<std::string, std::set<std::pair<std::string, int>>> targets_b, targets_c;
  for (const auto& r : baseline) targets_b[r.scenario.name].insert({run_target(r.meta), r.meta.sm});
  for (const auto& r : current) targets_c[r.scenario.name].insert({run_target(r.meta), r.meta.sm});
  std::set<std::string> ignore_target;
  for (const auto& [name, targets] : targets_b) {
    auto it = targets_c.find(name);
    if (it == targets_c.end() || targets.size() != 1 || it->second.size() != 1) continue;
    ignore_target.insert(name);
    const auto& [tb, smb] = *targets.begin();
    const auto& [tc, smc] = *it->second.begin();
    if (tb != tc) {
      report.notes.push_back(fmt::format(
          "{}: baseline ran on {}, current on {}: a cross-target comparison; timings are shown "
          "but not gated, and new failures and hot-path compiles are {}",
          name, target_label(tb, smb), target_label(tc, smc),
          options.gate_cross_target
              ? "gated (--gate-cross-target)"
              : "listed as differences, not gated (compare with a baseline of the same target, "
                "or pass --gate-cross-target)"));
    }
  }

  // Results timed under --host-split on one side only: their timings are shown, not gated.
  {
    std::map<std::string, std::pair<bool, bool>> split;  // scenario -> (baseline, current) any on
    for (const auto& r : baseline)
      for (const StrategyResult& x : r.results) split[r.scenario.name].first |= host_split_on(x);
    for (const auto& r : current)
      for (const StrategyResult& x : r.results) split[r.scenario.name].second |= host_split_on(x);
    for (const auto& [name, on] : split)
      if (on.first != on.second)
        report.notes.push_back(fmt::format(
            "{}: the {} file was timed with --host-split (CUPTI callbacks add host time to every "
            "CUDA call) and the {} without; those timings are shown but not compared",
            name, on.first ? "baseline" : "current", on.first ? "current" : "baseline"));
  }

  // Modes that differ per scenario (cuda vs compile-only): timings of those pairs are skipped.
  std::map<std::string, std::set<std::string>> modes_b, modes_c;
  for (const auto& r : baseline) modes_b[r.scenario.name].insert(r.meta.mode);
  for (const auto& r : current) modes_c[r.scenario.name].insert(r.meta.mode);
  for (const auto& [name, modes] : modes_b) {
    auto it = modes_c.find(name);
    if (it == modes_c.end() || modes == it->second) continue;
    std::string from, to;
    for (const auto& m : modes) from += (from.empty() ? "" : "+") + m;
    for (const auto& m : it->second) to += (to.empty() ? "" : "+") + m;
    report.notes.push_back(fmt::format("{}: baseline mode {}, current mode {}; timings of runs in "
                                       "different modes are not compared",
                                       name, from, to));
  }

  std::vector<MatchKey> order_b, order_c;
  const auto idx_b = index_runs(baseline, ignore_target, "baseline", &order_b, &report.notes);
  const auto idx_c = index_runs(current, ignore_target, "current", &order_c, &report.notes);

  for (const MatchKey& k : order_b) {
    auto it = idx_c.find(k);
    if (it == idx_c.end()) {
      report.rows.push_back(one_sided(idx_b.at(k), CompareRow::Presence::kRemoved));
    } else {
      report.rows.push_back(compare_pair(idx_b.at(k), it->second, options.max_regression_pct,
                                         options.gate_cross_target));
    }
  }
  for (const MatchKey& k : order_c) {
    if (idx_b.count(k) == 0) {
      report.rows.push_back(one_sided(idx_c.at(k), CompareRow::Presence::kAdded));
    }
  }

  // The same scenario name with another model or engine: the pairs are not like for like.
  std::map<std::string, const RunResults*> first_b;
  for (const auto& r : baseline) first_b.emplace(r.scenario.name, &r);
  std::set<std::string> noted;
  for (const auto& r : current) {
    auto it = first_b.find(r.scenario.name);
    if (it == first_b.end() || !noted.insert(r.scenario.name).second) continue;
    auto note_if_differs = [&](const char* part, const nlohmann::json& bj, const nlohmann::json& cj) {
      if (!bj.is_null() && !cj.is_null() && bj != cj) {
        report.notes.push_back(fmt::format("{}: the {} differs between the files (baseline {}, "
                                           "current {}); its pairs are not like for like",
                                           r.scenario.name, part, bj.dump(), cj.dump()));
      }
    };
    note_if_differs("model", it->second->scenario.model, r.scenario.model);
    note_if_differs("engine", it->second->scenario.engine, r.scenario.engine);
  }

  size_t removed = 0;
  std::string first_removed;
  for (const CompareRow& row : report.rows) {
    if (row.presence != CompareRow::Presence::kRemoved) continue;
    if (removed++ == 0) first_removed = row.label();
  }
  if (removed > 0 && !options.allow_removed) {
    report.regressed = true;
    report.reasons.push_back(fmt::format(
        "{} baseline result(s) missing from the current file (first: {}); --allow-removed "
        "accepts that",
        removed, first_removed));
  }
  size_t interrupted = 0;
  std::string first_interrupted;
  for (const CompareRow& row : report.rows) {
    if (!row.interrupted) continue;
    if (interrupted++ == 0) first_interrupted = row.label();
  }
  if (interrupted > 0 && !options.allow_removed) {
    report.regressed = true;
    report.reasons.push_back(fmt::format(
        "{} result(s) interrupted in the current file, so not measured (first: {}); "
        "--allow-removed accepts that",
        interrupted, first_interrupted));
  }

  // Differences against another target's baseline that are not gated: named, so a reviewer
  // sees what the other GPU does differently.
  for (const CompareRow& row : report.rows) {
    if (row.regressed || !row.cross_target) continue;
    if (row.new_failure)
      report.notes.push_back(row.label() + ": other target, not gated: " + row.outcome_change);
    for (const CompileEvent& e : row.new_hot_path_compiles) {
      report.notes.push_back(fmt::format("{}: other target, not gated: hot-path compile of {} in "
                                         "{} that the baseline lacks (key {})",
                                         row.label(), e.kernel, e.phase, e.key));
    }
  }

  for (const CompareRow& row : report.rows) {
    if (!row.regressed) continue;
    report.regressed = true;
    if (row.new_failure) report.reasons.push_back(row.label() + ": " + row.outcome_change);
    for (const CompileEvent& e : row.new_hot_path_compiles) {
      report.reasons.push_back(fmt::format("{}: NEW HOT-PATH COMPILE of {} in {} (key {})",
                                           row.label(), e.kernel, e.phase, e.key));
    }
    for (const MetricDelta& m : row.metrics) {
      if (!m.regressed) continue;
      const double pct = m.delta_pct();
      report.reasons.push_back(fmt::format(
          "{}: {} REGRESSION: {} -> {} ms ({:+.1f} ms, {}; threshold {:g}%, spread {:.1f} ms)",
          row.label(), metric_label(m.name), fmt_ms(m.baseline), fmt_ms(m.current), m.delta_ms(),
          std::isinf(pct) ? std::string("from 0") : fmt::format("{:+.1f}%", pct),
          options.max_regression_pct, m.spread_ms));
    }
  }
  return report;
}

CompareReport compare_results(const RunResults& baseline, const RunResults& current,
                              const CompareOptions& options) {
  return compare_results(std::vector<RunResults>{baseline}, std::vector<RunResults>{current},
                         options);
}

}  // namespace coldstart::cli
