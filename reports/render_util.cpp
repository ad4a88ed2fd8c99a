// coldstart: helpers shared by the report renderers.
#include "reports/render_util.h"

#include <algorithm>
#include <numeric>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace coldstart::reports::detail {

namespace {

// Appends code point `cp` as UTF-8.
void put_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

constexpr unsigned kReplacement = 0xFFFD;

// Decodes `s` into code points, calling `emit(cp)` for each; a byte that does not start a valid,
// shortest-form UTF-8 sequence is reported as U+FFFD and skipped alone.
template <typename F>
void for_each_code_point(const std::string& s, F emit) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      emit(static_cast<unsigned>(c));
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned cp = 0;
    unsigned min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (!ok) {
      emit(kReplacement);
      ++i;
    } else {
      emit(cp);
      i += len;
    }
  }
}

}  // namespace

const std::vector<std::string>& startup_phase_order() {
  static const std::vector<std::string> order = {"init",           "load_weights",  "profile_run",
                                                 "kv_cache_alloc", "kernel_warmup", "graph_capture",
                                                 "workspace_lock"};
  return order;
}

std::string xml_escape(const std::string& text, bool attribute) {
  std::string out;
  out.reserve(text.size() + 16);
  for_each_code_point(text, [&](unsigned cp) {
    switch (cp) {
      case '&': out += "&amp;"; return;
      case '<': out += "&lt;"; return;
      case '>': out += "&gt;"; return;
      case '"': out += "&quot;"; return;
      case '\'': out += "&apos;"; return;
      case '\t': out += attribute ? "&#9;" : "\t"; return;
      case '\n': out += attribute ? "&#10;" : "\n"; return;
      case '\r': out += attribute ? "&#13;" : "\r"; return;
      default: break;
    }
    if (cp < 0x20) {
      out += fmt::format("\\x{:02X}", cp);
    } else if (cp == 0xFFFE || cp == 0xFFFF) {
      put_utf8(out, kReplacement);
    } else {
      put_utf8(out, cp);
    }
  });
  return out;
}

std::string clean_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for_each_code_point(text, [&](unsigned cp) {
    if (cp < 0x20 && cp != '\t' && cp != '\n') {
      out += fmt::format("\\x{:02X}", cp);
    } else {
      put_utf8(out, cp);
    }
  });
  return out;
}

std::string md_text(const std::string& raw) {
  std::string out;
  for (char c : clean_text(raw)) {
    switch (c) {
      case '|': out += "\\|"; break;
      case '\n': out += ' '; break;
      case '\t': out += ' '; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      // '_' stays: GitHub does not emphasize inside words, and kernel names are full of it.
      case '*': case '`': case '[': case ']': case '\\':
        out += '\\';
        out += c;
        break;
      default: out += c;
    }
  }
  return out;
}

std::string terminal_text(const std::string& text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for_each_code_point(text, [&](unsigned cp) {
    if ((cp < 0x20 && !(keep_newlines && cp == '\n')) || cp == 0x7F) {
      out += fmt::format("\\x{:02X}", cp);
    } else if ((cp >= 0x80 && cp <= 0x9F) || cp == 0x200E || cp == 0x200F ||
               (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069)) {
      // C1 controls, and the bidirectional marks, embeddings, overrides and isolates and line /
      // paragraph separators, which reorder or break what the terminal shows.
      out += fmt::format("\\u{:04X}", cp);
    } else {
      put_utf8(out, cp);
    }
  });
  return out;
}

namespace {
void make_terminal_safe(nlohmann::json& j, bool keep_newlines) {
  if (j.is_string()) {
    j = terminal_text(j.get_ref<const std::string&>(), keep_newlines);
  } else if (j.is_array()) {
    for (auto& e : j) make_terminal_safe(e, false);
  } else if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto& [key, value] : j.items()) {
      nlohmann::json v = value;
      make_terminal_safe(v, key == "error");
      out[terminal_text(key)] = std::move(v);
    }
    j = std::move(out);
  }
}
}  // namespace

RunResults terminal_safe(const RunResults& run) {
  nlohmann::json j = run;
  make_terminal_safe(j, false);
  return j.get<RunResults>();
}

std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

std::string label(const StrategyResult& r) {
  std::string name = r.strategy.empty() ? "?" : r.strategy;
  return r.variant.empty() ? name : name + " [" + r.variant + "]";
}

std::vector<std::string> variants_of(const RunResults& run) {
  std::vector<std::string> variants;
  for (const auto& r : run.results) {
    if (std::find(variants.begin(), variants.end(), r.variant) == variants.end()) {
      variants.push_back(r.variant);
    }
  }
  return variants;
}

std::vector<const StrategyResult*> grouped_rows(const RunResults& run) {
  std::vector<const StrategyResult*> rows;
  for (const auto& v : variants_of(run)) {
    for (const auto& r : run.results) {
      if (r.variant == v) rows.push_back(&r);
    }
  }
  return rows;
}

std::optional<double> finite(const std::optional<double>& v) {
  if (v && std::isfinite(*v)) return v;
  return std::nullopt;
}

std::optional<bool> extra_bool(const StrategyResult& r, const char* key) {
  if (!r.extra.is_object()) return std::nullopt;
  auto it = r.extra.find(key);
  if (it == r.extra.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

std::optional<std::string> extra_string(const StrategyResult& r, const char* key) {
  if (!r.extra.is_object()) return std::nullopt;
  auto it = r.extra.find(key);
  if (it == r.extra.end() || !it->is_string()) return std::nullopt;
  std::string s = it->get<std::string>();
  if (s.empty()) return std::nullopt;
  return s;
}

double startup_phase_sum(const StrategyResult& r) {
  double sum = 0;
  for (const auto& p : r.phases) {
    if (p.request < 0 && std::isfinite(p.ms) && p.ms > 0) sum += p.ms;
  }
  return sum;
}

std::string device_text(const RunMeta& m) {
  std::string device = m.device_name.empty() ? "unknown device" : m.device_name;
  std::vector<std::string> parts;
  if (m.sm > 0 && device.find(fmt::format("sm_{}", m.sm)) == std::string::npos) {
    parts.push_back(fmt::format("sm_{}", m.sm));
  }
  if (m.sm_count > 0) parts.push_back(fmt::format("{} SMs", m.sm_count));
  if (!parts.empty()) device += fmt::format(" ({})", fmt::join(parts, ", "));
  return device;
}

std::string loaded_suffix(const StrategyResult& r) {
  std::string s;
  size_t steady = 0;
  for (const CompileEvent& e : steady_cold(r)) steady += e.source != "disk";
  if (steady > 0) s += fmt::format(" ({} in the steady request)", steady);
  const int loads = hot_path_loads(r);
  if (loads > 0) s += fmt::format(" (+{} loaded)", loads);
  return s;
}

std::optional<std::string> steady_not_comparable(const StrategyResult& r) {
  if (auto why = extra_string(r, "steady_not_comparable")) return why;
  const auto it = r.extra.is_object() ? r.extra.find("steady_cold") : r.extra.end();
  if (it != r.extra.end() && it->is_number_integer() && it->get<long long>() > 0)
    return fmt::format("the steady request was not warm ({} hot-path compiles, loads or autotunings)",
                       it->get<long long>());
  return std::nullopt;
}

bool disallowed_hot_path(const StrategyResult& r) {
  if (hot_path_compiled(r).empty()) return false;  // a load from the disk cache is not a compile
  auto allow = extra_bool(r, "allow_hot_path_compiles");
  return allow && !*allow;
}

std::string mb(long long bytes) { return fmt::format("{:.2f}", static_cast<double>(bytes) / 1048576.0); }

std::optional<long long> peak_device_bytes(const StrategyResult& r) {
  const auto it = r.extra.find("phase_memory");
  if (it == r.extra.end() || !it->is_object()) return std::nullopt;
  std::optional<long long> peak;
  for (const auto& entry : it->items()) {
    const nlohmann::json& v = entry.value();
    if (!v.is_object() || !v.contains("peak_allocated_bytes") ||
        !v.at("peak_allocated_bytes").is_number_integer())
      continue;
    const long long b = v.at("peak_allocated_bytes").get<long long>();
    if (!peak || b > *peak) peak = b;
  }
  return peak;
}

std::string locked_mb(const StrategyResult& r) {
  const auto policy = r.extra.find("workspace_policy");
  if (policy != r.extra.end() && policy->is_string() && policy->get<std::string>() != "lock")
    return "-";
  // Under lock, a run that never reached the lock (no graph capture, or a crash before it).
  const auto locked = r.extra.find("workspace_locked");
  if (locked != r.extra.end() && locked->is_boolean() && !locked->get<bool>()) return "-";
  return mb(r.workspace.locked_bytes);
}

std::string step_graph_text(const std::string& graph, const std::string& eager_reason) {
  if (graph.empty()) return "";
  if (graph != "eager") return ", as graph " + graph;
  return eager_reason.empty() ? ", run eagerly" : ", run eagerly: " + eager_reason;
}

double hot_path_compile_ms(const StrategyResult& r) {
  double sum = 0;
  for (const CompileEvent& e : hot_path_compiled(r))
    if (std::isfinite(e.compile_ms) && e.compile_ms > 0) sum += e.compile_ms;
  return sum;
}

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
      v.lines.emplace_back("outcome", "no strategy ran");
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
    for (const StrategyResult* r : rows)
      if (const double c = hot_path_compile_ms(*r); c > 0)
        compile_time.push_back(fmt::format("{} {}", r->strategy, ms_text(c)));
    v.lines.emplace_back("hot-path compile time",
                         compile_time.empty() ? std::string("0 for every strategy")
                                              : fmt::format("{}", fmt::join(compile_time, ", ")));
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
