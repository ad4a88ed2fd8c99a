// coldstart: helpers shared by the report renderers: text escaping, row grouping and the
// per-result cells. The TTFT excess split and the per-variant verdicts are verdicts.cpp.
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

bool is_startup_phase(const PhaseTiming& p) { return p.request < 0 && p.name != "envelope"; }

double startup_phase_sum(const StrategyResult& r) {
  double sum = 0;
  for (const auto& p : r.phases) {
    if (is_startup_phase(p) && std::isfinite(p.ms) && p.ms > 0) sum += p.ms;
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

std::string compile_where(const CompileEvent& e) {
  std::string where = e.phase;
  if (e.step.drafter_pass > 0)
    where += fmt::format(", drafter pass {} ({} rows)", e.step.drafter_pass, e.step.drafter_tokens);
  if (e.rank >= 0) where += fmt::format(", rank {}", e.rank);
  return where;
}

// The `ranks` block of a multi-rank result (harness/cli/ranks_run.h) as a few lines: a row per
// rank, then the step with the largest stall and who arrived last, and why.
static std::string ranks_lines(const std::string& who, const nlohmann::json& ranks) {
  if (ranks.value("stopped", false)) {
    // The watchdog or an interrupt stopped rank 0 before it merged: what each rank last said.
    std::string out = fmt::format(
        "ranks of {}: {} ranks, stopped before their results were merged; each rank's last state:\n",
        who, ranks.value("world", 0));
    for (const auto& st : ranks.value("per_rank", nlohmann::json::array())) {
      out += fmt::format("  rank {}: ", st.value("rank", -1));
      if (!st.value("published", false)) {
        out += "no state published\n";
        continue;
      }
      const long long seq = st.value("arrived_seq", -1LL);
      out += fmt::format("in {}, ", st.value("phase", std::string("?")));
      out += seq < 0 ? std::string("before its first collective")
                     : fmt::format("last collective #{} at '{}'", seq, st.value("site", std::string()));
      if (st.contains("compiling"))
        out += fmt::format("; compiling {} for {:.0f} ms",
                           st["compiling"].value("what", std::string("?")),
                           st["compiling"].value("for_ms", 0.0));
      out += "\n";
    }
    return out;
  }
  std::string out = fmt::format("ranks of {}: {} ranks, {} backend, collective timeout {} ms\n", who,
                                ranks.value("world", 0), ranks.value("backend", std::string("?")),
                                ranks.value("collective_timeout_ms", 0LL));
  out += "  rank  outcome  hot-path compiles  collectives  wait ms (host)  arrived last\n";
  const nlohmann::json per_rank = ranks.value("per_rank", nlohmann::json::array());
  for (const auto& pr : per_rank)
    out += fmt::format("  {:>4}  {:<7}  {:>17}  {:>11}  {:>14.1f}  {:>12}\n", pr.value("rank", -1),
                       pr.value("outcome", std::string("?")), pr.value("hot_path_compiles", 0),
                       pr.value("collectives", 0), pr.value("wait_ms", 0.0),
                       pr.value("last_arrivals", 0));
  for (const auto& pr : per_rank) {
    const std::string err = pr.value("error", std::string());
    if (!err.empty())
      out += fmt::format("  rank {}: {}\n", pr.value("rank", -1), err.substr(0, err.find('\n')));
  }
  // The largest stall of startup, of the request steps and of an envelope sweep (coverage:
  // its steps are classes, stamped with the class's index where a request's number goes), each
  // with who arrived last and what it compiled there (kernel x count, total ms).
  const nlohmann::json steps = ranks.value("steps", nlohmann::json::array());
  auto part_of = [](const nlohmann::json& st) {
    if (st.value("request", -1) < 0) return 0;
    return st.value("phase", std::string()) == "envelope" ? 2 : 1;
  };
  for (int part : {0, 1, 2}) {
    const nlohmann::json* worst = nullptr;
    for (const auto& st : steps) {
      if (part_of(st) != part) continue;
      if (worst == nullptr || st.value("stall_ms", 0.0) > worst->value("stall_ms", 0.0)) worst = &st;
    }
    if (worst == nullptr) continue;
    const int request = worst->value("request", -1);
    std::string where = worst->value("phase", std::string("?"));
    if (part == 1) where += fmt::format(" (request {}, step {})", request, worst->value("step", -1));
    if (part == 2) where += fmt::format(" (after class {} of the sweep)", request);
    // Its compiles no other rank ran there (the divergence) by kernel, then a count of those
    // every rank ran too (same keys: they explain the stall only by their time spread).
    std::vector<std::pair<std::string, std::pair<int, double>>> kernels;
    int shared = 0;
    double shared_ms = 0;
    for (const auto& c : worst->value("why", nlohmann::json::array())) {
      if (c.value("every_rank", false)) {
        ++shared;
        shared_ms += c.value("compile_ms", 0.0);
        continue;
      }
      const std::string k = c.value("kernel", std::string("?")) +
                            (c.value("source", std::string("nvrtc")) == "disk" ? " (loaded)" : "");
      auto it = std::find_if(kernels.begin(), kernels.end(), [&](const auto& e) { return e.first == k; });
      if (it == kernels.end()) it = kernels.insert(kernels.end(), {k, {0, 0.0}});
      it->second.first += 1;
      it->second.second += c.value("compile_ms", 0.0);
    }
    std::string why;
    for (const auto& [k, n] : kernels)
      why += fmt::format("{}{}{} {:.0f} ms", why.empty() ? "" : ", ", k,
                         n.first > 1 ? fmt::format(" x{}", n.first) : "", n.second);
    const std::string shared_text =
        shared == 0 ? std::string()
                    : fmt::format("{} compile{} every rank ran too ({:.0f} ms here)", shared,
                                  shared == 1 ? "" : "s", shared_ms);
    std::string tail;
    if (!why.empty())
      tail = " after compiling " + why + (shared_text.empty() ? "" : "; " + shared_text);
    else if (!shared_text.empty())
      tail = " after " + shared_text + ", none of its own";
    else
      tail = " (it compiled nothing there)";
    static const char* const kPart[] = {"startup", "request-step", "envelope-sweep"};
    out += fmt::format("  largest {} stall: {}: {:.1f} ms over {} collectives; rank {} arrived last{}\n",
                       kPart[part], where, worst->value("stall_ms", 0.0),
                       worst->value("collectives", 0), worst->value("last_rank", -1), tail);
  }
  return out;
}

std::string ranks_summary(const std::string& who, const nlohmann::json& ranks) {
  try {
    return ranks_lines(who, ranks);
  } catch (const nlohmann::json::exception& e) {
    // A results file from elsewhere may carry a field of another type.
    return fmt::format("ranks of {}: the ranks block cannot be read ({})\n", who, e.what());
  }
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

std::string rule_tally(const RunResults& run) {
  size_t met = 0, unmet = 0, other_mode = 0, not_run = 0;
  for (const RuleCheck& r : run.rules) {
    if (r.status == "met") ++met;
    else if (r.status == "unmet") ++unmet;
    else if (r.status == "not_applicable") ++other_mode;
    else ++not_run;
  }
  std::string s = fmt::format("{} met, {} unmet", met, unmet);
  if (other_mode) s += fmt::format(", {} for another mode, arch or device", other_mode);
  if (not_run) s += fmt::format(", {} not checked", not_run);
  return s;
}

double hot_path_compile_ms(const StrategyResult& r) {
  // An envelope sweep records its cold keys without compiling them (compile_ms 0) and times
  // each once afterwards: its hot-path compile time is that measured total.
  if (const auto it = r.extra.find("envelope"); it != r.extra.end() && it->is_object()) {
    const auto c = it->find("cold_compile_ms");
    if (c != it->end() && c->is_number()) return c->get<double>();
  }
  double sum = 0;
  for (const CompileEvent& e : hot_path_compiled(r))
    if (std::isfinite(e.compile_ms) && e.compile_ms > 0) sum += e.compile_ms;
  return sum;
}

std::string cold_count_text(const CoverageRow& c) {
  std::string s = fmt::format("{} key{}", c.cold, c.cold == 1 ? "" : "s");
  if (c.ranks > 0) s += fmt::format(", counted per rank over {} ranks", c.ranks);
  return s;
}

std::string partial_sweep_caveat(const CoverageRow& c) {
  if (c.stopped_at.empty()) return "";
  return fmt::format(" (what the first {} of {} classes found: the sweep stopped, so more may be "
                     "cold)",
                     c.classes_run, c.classes);
}

std::vector<CoverageRow> coverage_rows(const RunResults& run) {
  std::vector<CoverageRow> rows;
  for (const StrategyResult& r : run.results) {
    const auto it = r.extra.find("envelope");
    if (it == r.extra.end() || !it->is_object()) continue;
    const nlohmann::json& e = *it;
    CoverageRow row;
    row.result = &r;
    row.classes = e.value("classes", 0);
    row.classes_run = e.value("classes_run", 0);
    row.reached = e.value("reached_keys", 0);
    row.at_startup = e.value("covered_at_startup", 0);
    row.on_disk = e.value("loaded_keys", 0);
    row.cold = e.value("cold_keys", 0);
    if (e.contains("cold_compile_ms") && e["cold_compile_ms"].is_number())
      row.cold_compile_ms = e["cold_compile_ms"].get<double>();
    row.stopped_at = e.value("stopped_at_class", "");
    row.unfinished = e.value("sweep_unfinished", false);
    if (e.value("keys_counted", "") == "per rank")
      row.ranks = static_cast<int>(e.value("per_rank", nlohmann::json::array()).size());
    const std::vector<std::string> warm = e.value("warmup_classes", std::vector<std::string>{});
    row.warmup_classes = fmt::format("{}", fmt::join(warm, ", "));
    for (const auto& c : e.value("cold", nlohmann::json::array())) {
      const std::string kernel = c.value("kernel", "?"), cls = c.value("class", "?");
      auto k = std::find_if(row.cold_kernels.begin(), row.cold_kernels.end(),
                            [&](const ColdKernel& x) { return x.kernel == kernel; });
      if (k == row.cold_kernels.end()) {
        row.cold_kernels.push_back({kernel, 0, 0, {}});
        k = row.cold_kernels.end() - 1;
      }
      ++k->keys;
      if (c.contains("compile_ms") && c["compile_ms"].is_number())
        k->compile_ms += c["compile_ms"].get<double>();
      auto cl = std::find_if(k->classes.begin(), k->classes.end(),
                             [&](const auto& x) { return x.first == cls; });
      if (cl == k->classes.end())
        k->classes.emplace_back(cls, 1);
      else
        ++cl->second;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

bool is_envelope_run(const RunResults& run) {
  for (const StrategyResult& r : run.results) {
    const auto it = r.extra.find("envelope");
    if (it != r.extra.end() && it->is_object()) return true;
  }
  return false;
}

namespace {
std::string title_text(bool coverage) { return coverage ? "coldstart coverage" : "coldstart replay"; }
}  // namespace

std::string report_title(const RunResults& run) { return title_text(is_envelope_run(run)); }

std::string report_title(const std::vector<RunResults>& runs) {
  return title_text(!runs.empty() && std::all_of(runs.begin(), runs.end(), is_envelope_run));
}

std::string cold_kernel_text(const ColdKernel& k) {
  std::vector<std::string> cls;
  for (const auto& [name, n] : k.classes)
    cls.push_back(n > 1 ? fmt::format("{} x{}", name, n) : name);
  // A long list of classes (a family whose key follows every token count) is cut to its start.
  constexpr size_t kShown = 6;
  std::string more;
  if (cls.size() > kShown) {
    more = fmt::format(", +{} more", cls.size() - kShown);
    cls.resize(kShown);
  }
  return fmt::format("{} {} ({}{})", k.kernel, k.keys, fmt::join(cls, ", "), more);
}

}  // namespace coldstart::reports::detail
