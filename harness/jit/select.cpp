// The config selector: tuned tables, heuristics, and the scope that records which one chose the
// config of each compile (the autotuner: autotune.cpp). See select.h.
#include "harness/jit/select.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/common/paths.h"
#include "harness/jit/driver.h"
#include "harness/jit/jit_internal.h"

namespace coldstart::jit {
namespace {

// ---------------------------------------------------------------- selection scopes

struct ScopeEntry {
  const JitRuntime* rt;
  const Selection* selection;
};

// Per thread: the live scopes, innermost last.
thread_local std::vector<ScopeEntry> t_scopes;

// ---------------------------------------------------------------- tuned tables

// 1-based line of the first `"key"` followed by optional blanks and ':' at or after `from`
// (where the key is defined), and its offset; {0, npos} when not found. Good enough to point at
// the key of a table whose error is reported (the parsed JSON keeps no positions).
std::pair<int, size_t> line_of_key(const std::string& text, const std::string& key, size_t from) {
  const std::string quoted = "\"" + key + "\"";
  for (size_t at = text.find(quoted, from); at != std::string::npos;
       at = text.find(quoted, at + 1)) {
    size_t after = at + quoted.size();
    while (after < text.size() && (text[after] == ' ' || text[after] == '\t' ||
                                   text[after] == '\n' || text[after] == '\r')) {
      ++after;
    }
    if (after < text.size() && text[after] == ':') {
      return {1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n')), at};
    }
  }
  return {0, std::string::npos};
}

// "<path>:<line>" when the line is known, else "<path>".
std::string where(const std::string& path, int line) {
  return line > 0 ? fmt::format("{}:{}", path, line) : path;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Tables read so far in this process, by path (vLLM caches get_moe_configs with lru_cache).
std::mutex g_tables_mu;
std::unordered_map<std::string, std::shared_ptr<const TunedTable>> g_tables;

std::shared_ptr<const TunedTable> load_cached(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(g_tables_mu);
    auto it = g_tables.find(path);
    if (it != g_tables.end()) return it->second;
  }
  auto table = std::make_shared<const TunedTable>(load_tuned_table(path));
  std::lock_guard<std::mutex> lock(g_tables_mu);
  return g_tables.emplace(path, std::move(table)).first->second;
}

}  // namespace

// ---------------------------------------------------------------- configs and scopes

std::vector<Constexpr> KernelConfig::all_constexprs() const {
  std::vector<Constexpr> all = constexprs;
  all.push_back({"NUM_WARPS", num_warps});
  all.push_back({"NUM_STAGES", num_stages});
  return all;
}

std::string config_name(const std::vector<Constexpr>& constexprs, int num_warps, int num_stages) {
  std::string s;
  for (const Constexpr& c : constexprs) s += fmt::format("{}={},", c.name, c.value);
  return s + fmt::format("warps={},stages={}", num_warps, num_stages);
}

KernelConfig make_config(std::vector<Constexpr> constexprs, int num_warps, int num_stages) {
  KernelConfig c;
  c.name = config_name(constexprs, num_warps, num_stages);
  c.constexprs = std::move(constexprs);
  c.num_warps = num_warps;
  c.num_stages = num_stages;
  return c;
}

SelectionScope::SelectionScope(const JitRuntime& rt, const Selection& selection)
    : rt_(&rt), selection_(&selection) {
  t_scopes.push_back({rt_, selection_});
}

SelectionScope::~SelectionScope() {
  // Scopes are normally destroyed innermost first; tolerate any order.
  for (size_t i = t_scopes.size(); i-- > 0;) {
    if (t_scopes[i].rt == rt_ && t_scopes[i].selection == selection_) {
      t_scopes.erase(t_scopes.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

const Selection* current_selection(const JitRuntime& rt) {
  for (size_t i = t_scopes.size(); i-- > 0;) {
    if (t_scopes[i].rt == &rt) return t_scopes[i].selection;
  }
  return nullptr;
}

// ---------------------------------------------------------------- tuned tables

KernelConfig TunedEntry::config() const {
  KernelConfig c;
  for (const auto& [name, value] : values) {
    if (name == "num_warps") {
      c.num_warps = static_cast<int>(value);
    } else if (name == "num_stages") {
      c.num_stages = static_cast<int>(value);
    } else {
      c.constexprs.push_back({name, value});
    }
  }
  c.name = config_name(c.constexprs, c.num_warps, c.num_stages);
  return c;
}

TunedTable load_tuned_table(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError(fmt::format("{}: cannot read tuned config table: {}", path,
                                 std::strerror(errno)));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not a valid JSON tuned config table: {}", path, e.what()));
  }
  if (!doc.is_object()) {
    throw InputError(fmt::format(
        "{}: expected a JSON object mapping batch sizes to configs, got {}", path, doc.type_name()));
  }
  TunedTable table;
  table.file = path;
  std::unordered_map<int64_t, std::string> seen;  // batch size -> key that gave it
  for (const auto& item : doc.items()) {
    const std::string& key = item.key();
    const auto& value = item.value();
    const auto [line, at] = line_of_key(text, key, 0);
    if (key == "triton_version") {
      if (!value.is_string()) {
        throw InputError(fmt::format("{}: key \"triton_version\": expected a string, got {}",
                                     where(path, line), value.dump()));
      }
      table.triton_version = value.get<std::string>();
      continue;
    }
    if (!all_digits(key) || key.size() > 18) {
      throw InputError(fmt::format(
          "{}: key \"{}\": expected a batch size (a decimal integer such as \"16\") or "
          "\"triton_version\"",
          where(path, line), key));
    }
    TunedEntry entry;
    entry.batch = std::stoll(key);

    auto [dup, fresh] = seen.emplace(entry.batch, key);
    if (!fresh) {
      throw InputError(fmt::format("{}: key \"{}\": batch size {} is already given by key \"{}\"",
                                   where(path, line), key, entry.batch, dup->second));
    }
    if (!value.is_object()) {
      throw InputError(fmt::format("{}: key \"{}\": expected an object of integers, got {}",
                                   where(path, line), key, value.dump()));
    }
    for (const auto& field : value.items()) {
      const auto& v = field.value();
      const bool too_big = v.is_number_unsigned() &&
                           v.get<uint64_t>() > static_cast<uint64_t>(
                                                   std::numeric_limits<int64_t>::max());
      if (!v.is_number_integer() || too_big) {
        const auto [fline, fat] =
            line_of_key(text, field.key(), at == std::string::npos ? 0 : at);
        throw InputError(fmt::format("{}: key \"{}\" -> \"{}\": expected an integer, got {}",
                                     where(path, fline > 0 ? fline : line), key, field.key(),
                                     v.dump()));
      }
      const int64_t x = v.get<int64_t>();
      // Bounds of what the kernels can be launched with (see select.h); a BLOCK_SIZE_K of 1e9
      // reached the kernel launch and failed in the child.
      const std::string& f = field.key();
      const bool pow2 = x > 0 && (x & (x - 1)) == 0;
      std::string bad;
      if ((f == "BLOCK_SIZE_M" || f == "BLOCK_SIZE_N" || f == "BLOCK_SIZE_K") && !(pow2 && x <= 1024))
        bad = "a power of two in [1, 1024]";
      else if (f == "GROUP_SIZE_M" && !(x >= 1 && x <= 1024))
        bad = "in [1, 1024]";
      else if (f == "num_warps" && !(pow2 && x <= 32))
        bad = "a power of two in [1, 32]";
      else if (f == "num_stages" && !(x >= 1 && x <= 16))
        bad = "in [1, 16]";
      if (!bad.empty()) {
        const auto [fline, fat] = line_of_key(text, f, at == std::string::npos ? 0 : at);
        throw InputError(fmt::format("{}: key \"{}\" -> \"{}\": {} must be {}",
                                     where(path, fline > 0 ? fline : line), key, f, x, bad));
      }
      entry.values.emplace_back(f, x);
    }
    table.entries.push_back(std::move(entry));
  }
  if (table.entries.empty()) {
    throw InputError(fmt::format("{}: the tuned config table has no batch-size entry", path));
  }
  return table;
}

const TunedEntry& nearest(const TunedTable& table, int64_t M) {
  if (table.entries.empty()) {
    throw Error(fmt::format("nearest: tuned table {} has no entry", table.file));
  }
  const auto distance = [M](int64_t key) {
    return key > M ? static_cast<uint64_t>(key) - static_cast<uint64_t>(M)
                   : static_cast<uint64_t>(M) - static_cast<uint64_t>(key);
  };
  const TunedEntry* best = &table.entries.front();
  uint64_t best_distance = distance(best->batch);
  for (const TunedEntry& e : table.entries) {
    const uint64_t dist = distance(e.batch);
    if (dist < best_distance) {  // strict: the first minimal key in file order wins, as min()
      best = &e;
      best_distance = dist;
    }
  }
  return *best;
}

std::string tuned_file_name(const StemFields& stem_fields) {
  std::string name;
  for (size_t i = 0; i < stem_fields.size(); ++i) {
    name += fmt::format("{}{}={}", i ? "," : "", stem_fields[i].first, stem_fields[i].second);
  }
  return name + ".json";
}

std::optional<std::string> find_tuned_file(const std::string& dir, const StemFields& stem_fields) {
  const std::string path = paths::join(dir, tuned_file_name(stem_fields));
  if (paths::exists(path) && !paths::is_directory(path)) return path;
  return std::nullopt;
}

std::string vllm_device_name(const std::string& device_name) {
  std::string name = device_name;
  std::replace(name.begin(), name.end(), ' ', '_');
  size_t begin = 0;
  while (begin <= name.size()) {
    const size_t end = std::min(name.find('_', begin), name.size());
    if (name.compare(begin, end - begin, "H200") == 0 && end - begin == 4) return "NVIDIA_H200";
    begin = end + 1;
  }
  return name;
}

Selection select_from_table(const TunedTable& table, int64_t M) {
  const TunedEntry& entry = nearest(table, M);
  Selection sel;
  sel.config = entry.config();
  sel.selector = "table";
  sel.tuning_key = fmt::format("M={} -> {}", M, entry.batch);
  sel.candidates.reserve(table.entries.size());
  for (const TunedEntry& e : table.entries) sel.candidates.push_back(e.config().name);
  sel.table_file = table.file;
  return sel;
}

Selection select_from_table(const std::string& dir, const StemFields& stem_fields, int64_t M,
                            const KernelConfig& default_config) {
  if (std::optional<std::string> file = find_tuned_file(dir, stem_fields)) {
    return select_from_table(*load_cached(*file), M);
  }
  Selection sel;
  sel.config = default_config;
  sel.selector = "default";
  sel.tuning_key = fmt::format("M={}", M);
  sel.table_file = paths::join(dir, tuned_file_name(stem_fields));
  return sel;
}

// ---------------------------------------------------------------- heuristic

Selection select_by_heuristic(std::string tuning_key, KernelConfig config) {
  Selection sel;
  sel.config = std::move(config);
  sel.selector = "heuristic";
  sel.tuning_key = std::move(tuning_key);
  return sel;
}

}  // namespace coldstart::jit
