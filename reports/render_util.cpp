// coldstart: helpers shared by the report renderers.
#include "reports/render_util.h"

#include <algorithm>
#include <cmath>

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

bool disallowed_hot_path(const StrategyResult& r) {
  if (hot_path_compiled(r).empty()) return false;  // a load from the disk cache is not a compile
  auto allow = extra_bool(r, "allow_hot_path_compiles");
  return allow && !*allow;
}

std::string mb(long long bytes) { return fmt::format("{:.2f}", static_cast<double>(bytes) / 1048576.0); }

}  // namespace coldstart::reports::detail
