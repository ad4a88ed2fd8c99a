// coldstart: the report renderers' diagnosis of a run: where a first request's TTFT excess went
// (ttft_excess, excess_columns) and the per-variant verdict lines (verdicts). Declared in
// render_util.h with the other renderer helpers.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reports/render_util.h"

namespace coldstart::reports::detail {

namespace {

bool ran(const StrategyResult& r) {
  return r.outcome != Outcome::kSkipped && r.outcome != Outcome::kInterrupted;
}

bool good(const StrategyResult& r) { return r.outcome == Outcome::kOk && !disallowed_hot_path(r); }

/// "crash in prefill": the outcome and, when known, the phase it ended in.
std::string outcome_where(const StrategyResult& r) {
  std::string s = outcome_name(r.outcome);
  if (r.failed_phase && !r.failed_phase->empty()) s += " in " + *r.failed_phase;
  return s;
}

std::string failure_text(const StrategyResult& r) {
  if (r.outcome == Outcome::kOk) return r.strategy + " (hot-path compiles not allowed)";
  return fmt::format("{} ({})", r.strategy, outcome_where(r));
}

std::string ms_text(double v) { return fmt::format("{:.2f} ms", v); }

std::string signed_ms(double v) { return fmt::format("{}{:.1f} ms", v >= 0 ? "+" : "", v); }

}  // namespace

std::optional<TtftExcess> ttft_excess(const StrategyResult& r) {
  const auto first = finite(r.ttft_ms), steady = finite(r.steady_ttft_ms);
  if (!first || !steady || !r.extra.is_object() || extra_string(r, "steady_not_comparable"))
    return std::nullopt;
  // The engine thread's TTFT window by part, first request ("0") and steady request ("1").
  const auto host = r.extra.find("ttft_host_ms");
  const bool by_host = host != r.extra.end() && host->is_object() && host->contains("0") &&
                       host->contains("1") && (*host)["0"].is_object() && (*host)["1"].is_object();
  const auto costs = r.extra.find("first_time_cost_ms");
  if (!by_host && (costs == r.extra.end() || !costs->is_object())) return std::nullopt;
  static const char* const kTtftPhases[] = {"prefill", "continuation_prefill"};
  auto in_ttft = [](const std::string& phase) {
    return phase == kTtftPhases[0] || phase == kTtftPhases[1];
  };
  // Wave 0 adds, wave 1 (the steady request) takes away.
  auto sign = [](int wave) { return wave == 0 ? 1.0 : wave == 1 ? -1.0 : 0.0; };
  double compile = 0, cache = 0, tune = 0;
  for (const CompileEvent& e : r.hot_path_compiles) {
    if (e.step.request < 0 || !in_ttft(e.phase) || !std::isfinite(e.compile_ms)) continue;
    (e.source == "disk" ? cache : compile) += sign(e.step.wave) * e.compile_ms;
  }
  const auto tunes = r.extra.find("autotunes");
  if (tunes != r.extra.end() && tunes->is_array()) {
    // A results file is the user's input: a field of another type counts as absent (json's
    // value() would throw on it).
    for (const auto& a : *tunes) {
      if (!a.is_object()) continue;
      const auto hot = a.find("hot_path"), wave = a.find("wave"), phase = a.find("phase");
      const auto bench = a.find("benchmark_ms");
      if (hot == a.end() || !hot->is_boolean() || !hot->get<bool>() || wave == a.end() ||
          !wave->is_number_integer() || phase == a.end() || !phase->is_string() ||
          !in_ttft(phase->get<std::string>()) || bench == a.end() || !bench->is_number() ||
          !std::isfinite(bench->get<double>()))
        continue;
      tune += sign(static_cast<int>(std::clamp<long long>(wave->get<long long>(), -1, 2))) *
              bench->get<double>();
    }
  }
  TtftExcess x;
  x.first_ms = *first;
  x.steady_ms = *steady;
  x.excess_ms = *first - *steady;
  x.parts = {{"JIT compile + module load", compile, "host wall time (JIT monitor, NVRTC and cuModuleLoadData)"},
             {"kernel cache load", cache, "host wall time (JIT monitor, on-disk cache)"},
             {"autotune benchmarking", tune, "host wall time (autotuner, timed candidate runs)"}};
  if (by_host) {
    // First minus steady of each part of the thread's time; the JIT's own windows are named by
    // the monitor's records above (what they leave out stays unexplained).
    auto diff = [&](std::initializer_list<const char*> parts) {
      double d = 0;
      for (const char* p : parts) {
        const auto& a = (*host)["0"];
        const auto& b = (*host)["1"];
        if (a.contains(p) && a[p].is_number()) d += a[p].get<double>();
        if (b.contains(p) && b[p].is_number()) d -= b[p].get<double>();
      }
      return d;
    };
    const std::string cupti = "CUPTI callback API: engine thread's time inside ";
    const std::string frames = "host wall time of the engine thread ";
    x.parts.insert(x.parts.end(), {
        {"CUDA allocator", diff({"allocator"}), cupti + "cudaMalloc / cudaFree / cuMem* calls"},
        {"launch + lazy module load", diff({"module", "launch"}),
         cupti + "kernel launches (a first launch under lazy loading loads its module) and module calls"},
        {"graph launch", diff({"graph_launch"}), cupti + "graph launches (a first launch uploads the graph)"},
        {"other CUDA API", diff({"other_api"}), cupti + "other calls (streams, events, queries)"},
        {"waiting for the GPU", diff({"wait"}),
         cupti + "synchronize and copy calls: GPU time the host waited for (less when host stalls hid it)"},
        {"JIT launch path", diff({"jit_launch"}), frames + "in coldstart's JIT launch outside compiles and API calls"},
        {"model host work", diff({"model_host"}),
         frames + "in the forward pass outside the JIT and API calls (libtorch dispatch, library heuristics)"},
        {"engine host work", diff({"engine_host"}),
         frames + "outside the forward pass (scheduler, batch preparation, bookkeeping)"}});
    // The parts add up to the thread's TTFT window, so what remains is what the JIT's timed
    // windows held that no compile or autotune record names, and clock reads apart.
    const double parts_sum = std::accumulate(x.parts.begin(), x.parts.end(), 0.0,
                                             [](double s, const ExcessPart& p) { return s + p.ms; });
    x.unexplained_ms = x.excess_ms - parts_sum;
    return x;
  }
  double gpu = 0, sampling = 0;
  bool mixers_measured = false;
  for (const char* phase : kTtftPhases) {
    auto part = [&](const std::string& what, bool* present = nullptr) {
      const auto it = costs->find(std::string(phase) + "." + what);
      const bool found = it != costs->end() && it->is_number();
      if (present && found) *present = true;
      return found ? it->get<double>() : 0.0;
    };
    gpu += part("model_pieces_gpu_ms");
    sampling += part("sampling_ms");
    // Libtorch's attention runs inside the mixers: count the mixers' spans when the run has
    // them, else (older files) the attention's own.
    const double mixers = part("mixers_gpu_ms", &mixers_measured);
    gpu += mixers_measured ? mixers : part("prefill_attention_gpu_ms");
  }
  x.parts.insert(x.parts.end(),
                 {{"GPU time", gpu,
                   "CUDA events around the model's pieces and attention, less the JIT's host stalls inside"},
                  {"sampling", sampling, "host wall time (sampling and copy to host)"}});
  x.unexplained_ms = x.excess_ms;
  for (const ExcessPart& p : x.parts) x.unexplained_ms -= p.ms;
  return x;
}

std::vector<ExcessPart> excess_columns(const std::vector<TtftExcess>& splits) {
  std::vector<ExcessPart> cols;
  for (const TtftExcess& x : splits)
    for (const ExcessPart& p : x.parts)
      if (std::none_of(cols.begin(), cols.end(), [&](const ExcessPart& c) { return c.name == p.name; }))
        cols.push_back({p.name, 0.0, p.source});
  return cols;
}

const ExcessPart* excess_part(const TtftExcess& x, const std::string& name) {
  for (const ExcessPart& p : x.parts)
    if (p.name == name) return &p;
  return nullptr;
}

std::string tenths(double ms) {
  const std::string s = fmt::format("{:.1f}", ms);
  return s == "-0.0" ? std::string("0.0") : s;
}

std::string share_of(const TtftExcess& x) {
  if (!(x.excess_ms >= 1.0)) return "";
  return fmt::format(" ({:.0f}%)", 100.0 * x.unexplained_ms / x.excess_ms);
}

std::vector<VariantVerdict> verdicts(const RunResults& run) {
  std::vector<VariantVerdict> out;
  for (const std::string& variant : variants_of(run)) {
    std::vector<const StrategyResult*> rows;
    for (const auto& r : run.results)
      if (r.variant == variant && ran(r)) rows.push_back(&r);
    VariantVerdict v;
    v.variant = variant;
    if (rows.empty()) {
      // Skipped and interrupted strategies only: say which, so an interrupted run does not read
      // as one that never started.
      size_t interrupted = 0, skipped = 0;
      for (const auto& r : run.results) {
        if (r.variant != variant) continue;
        interrupted += r.outcome == Outcome::kInterrupted;
        skipped += r.outcome == Outcome::kSkipped;
      }
      std::vector<std::string> parts;
      if (interrupted > 0) parts.push_back(fmt::format("{} interrupted", interrupted));
      if (skipped > 0) parts.push_back(fmt::format("{} skipped", skipped));
      v.lines.emplace_back("outcome", parts.empty() ? std::string("no strategy ran")
                                                    : fmt::format("no strategy finished ({})",
                                                                  fmt::join(parts, ", ")));
      out.push_back(std::move(v));
      continue;
    }
    std::vector<std::string> ok, failed;
    for (const StrategyResult* r : rows) (good(*r) ? ok : failed).push_back(good(*r) ? r->strategy : failure_text(*r));
    bool crashed = false;
    for (const StrategyResult* r : rows) crashed = crashed || r->outcome == Outcome::kCrash;
    if (failed.empty()) {
      v.lines.emplace_back("outcome", fmt::format("every strategy ended ok ({})", rows.size()));
    } else {
      v.lines.emplace_back(crashed ? "avoid the crash" : "avoid the failure",
                           fmt::format("{}; failed: {}",
                                       ok.empty() ? "no strategy" : fmt::format("{}", fmt::join(ok, ", ")),
                                       fmt::join(failed, ", ")));
    }
    // Among the strategies that ended ok: a crash stops a run before it compiles the rest.
    std::vector<const StrategyResult*> good_rows;
    for (const StrategyResult* r : rows)
      if (good(*r)) good_rows.push_back(r);
    const bool compile_only = run.meta.mode == "compile-only";
    if (good_rows.empty()) {
      v.lines.emplace_back("fewest hot-path compiles", "no strategy ended ok");
    } else {
      size_t fewest = SIZE_MAX;
      for (const StrategyResult* r : good_rows) fewest = std::min(fewest, hot_path_compiled(*r).size());
      std::vector<std::string> names;
      for (const StrategyResult* r : good_rows)
        if (hot_path_compiled(*r).size() == fewest) names.push_back(r->strategy);
      v.lines.emplace_back("fewest hot-path compiles",
                           fmt::format("{} ({})", fmt::join(names, ", "), fewest));
      const StrategyResult* fastest = nullptr;
      for (const StrategyResult* r : good_rows)
        if (auto t = finite(r->ttft_ms); t && (!fastest || *t < *fastest->ttft_ms)) fastest = r;
      if (fastest) {
        std::string text = fmt::format("{} {}", fastest->strategy, ms_text(*fastest->ttft_ms));
        if (auto st = finite(fastest->steady_ttft_ms)) text += fmt::format(" (steady {})", ms_text(*st));
        v.lines.emplace_back("lowest first TTFT", text);
      } else {
        v.lines.emplace_back("lowest first TTFT",
                             compile_only ? "not measured (compile-only)" : "not measured");
      }
      // The pick: the fewest compiles; among those, a first TTFT within kTtftTie of the lowest
      // (one run's TTFT differs by a few percent from the next: closer is a tie); then the
      // shortest startup.
      constexpr double kTtftTie = 0.05;
      const double inf = std::numeric_limits<double>::infinity();
      std::vector<const StrategyResult*> pool;
      for (const StrategyResult* r : good_rows)
        if (hot_path_compiled(*r).size() == fewest) pool.push_back(r);
      double lowest = inf;
      for (const StrategyResult* r : pool) lowest = std::min(lowest, finite(r->ttft_ms).value_or(inf));
      std::vector<const StrategyResult*> fast;
      for (const StrategyResult* r : pool)
        if (lowest == inf || finite(r->ttft_ms).value_or(inf) <= lowest * (1 + kTtftTie)) fast.push_back(r);
      // Then the shortest startup; startups within 5% of it are a tie too, won by the fewest
      // warmers (a reservation or a warmup that buys nothing measurable is not the pick).
      double shortest = inf;
      for (const StrategyResult* r : fast) shortest = std::min(shortest, finite(r->startup_ms).value_or(inf));
      const StrategyResult* best = nullptr;
      for (const StrategyResult* r : fast) {
        const double s = finite(r->startup_ms).value_or(inf);
        if (shortest < inf && s > shortest * (1 + kTtftTie)) continue;
        if (!best || r->warmers.size() < best->warmers.size() ||
            (r->warmers.size() == best->warmers.size() && s < finite(best->startup_ms).value_or(inf)))
          best = r;
      }
      v.best = best->strategy;
      v.best_why = fmt::format("ok, {} hot-path compile{}", hot_path_compiled(*best).size(),
                               hot_path_compiled(*best).size() == 1 ? "" : "s");
      if (auto t = finite(best->ttft_ms)) v.best_why += ", first TTFT " + ms_text(*t);
    }
    // What each strategy paid on the hot path and at startup.
    std::vector<std::string> compile_time;
    // A strategy that failed paid nothing on a hot path it may never have reached: named, so
    // "0" does not read as a warm start.
    std::vector<std::string> failed_early;
    for (const StrategyResult* r : rows) {
      if (const double c = hot_path_compile_ms(*r); c > 0)
        compile_time.push_back(fmt::format("{} {}", r->strategy, ms_text(c)));
      else if (r->outcome != Outcome::kOk)
        failed_early.push_back(r->strategy);
    }
    const std::string unfinished =
        failed_early.empty()
            ? std::string()
            : fmt::format(" ({} failed having compiled nothing on the hot path: {})",
                          failed_early.size(), fmt::join(failed_early, ", "));
    v.lines.emplace_back("hot-path compile time",
                         compile_time.empty()
                             ? "0 for every strategy" + unfinished
                             : fmt::format("{}{}", fmt::join(compile_time, ", "), unfinished));
    const StrategyResult* none = nullptr;
    for (const StrategyResult* r : rows)
      if (r->strategy == "none" && finite(r->startup_ms)) none = r;
    std::vector<std::string> startup;
    for (const StrategyResult* r : rows) {
      auto s = finite(r->startup_ms);
      if (!s) continue;
      std::string text = fmt::format("{} {}", r->strategy, ms_text(*s));
      if (none && r != none) text += fmt::format(" ({})", signed_ms(*s - *none->startup_ms));
      startup.push_back(text);
    }
    if (!startup.empty())
      v.lines.emplace_back(none ? "startup (vs none)" : "startup", fmt::format("{}", fmt::join(startup, ", ")));
    // The most device memory each strategy held at once (the largest phase_memory peak of any
    // phase), so what a warmer reserves shows next to what its startup costs.
    std::vector<std::string> memory;
    const std::optional<long long> none_peak = none ? peak_device_bytes(*none) : std::nullopt;
    for (const StrategyResult* r : rows) {
      const std::optional<long long> p = peak_device_bytes(*r);
      if (!p) continue;
      std::string text = fmt::format("{} {} MB", r->strategy, mb(*p));
      if (none_peak && r != none) {
        const long long d = *p - *none_peak;
        text += fmt::format(" ({}{} MB)", d < 0 ? "-" : "+", mb(d < 0 ? -d : d));
      }
      // A run that failed held memory only up to where it stopped: its peak (and a difference
      // against it) covers less than a whole run.
      if (r->outcome != Outcome::kOk) text += fmt::format(" [until its {}]", outcome_where(*r));
      memory.push_back(text);
    }
    if (!memory.empty())
      v.lines.emplace_back(none_peak ? "peak device memory (vs none)" : "peak device memory",
                           fmt::format("{}", fmt::join(memory, ", ")));
    if (!v.best.empty() && none && v.best != "none") {
      for (const StrategyResult* r : rows)
        if (r->strategy == v.best && finite(r->startup_ms))
          v.best_why += fmt::format(", startup {} vs none", signed_ms(*r->startup_ms - *none->startup_ms));
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace coldstart::reports::detail
