// coldstart: JSON form of the replay results and the atomic results-file writer.
#include "harness/replay/result.h"

#include "harness/common/paths.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <type_traits>

#include <fmt/format.h>

#include "harness/common/error.h"

namespace coldstart {

using nlohmann::json;

namespace {

// Optional value: JSON null when empty.
template <typename T>
json opt_to_json(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// Reads field `key` as T; a type error names the key, so a nested one reads as a path
// ("\"phases\": \"name\": type must be string, but is number").
template <typename T>
T get_field(const json& value, const char* key) {
  try {
    return value.get<T>();
  } catch (const json::type_error& e) {
    std::string text = e.what();
    if (text.rfind("[json.exception.", 0) == 0 && text.find("] ") != std::string::npos)
      text = text.substr(text.find("] ") + 2);
    throw json::type_error::create(e.id, fmt::format("\"{}\": {}", key, text), nullptr);
  }
}

// Optional field: missing or null reads as empty; any other type must convert.
template <typename T>
std::optional<T> opt_from(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return get_field<T>(*it, key);
}

// Field with a default when missing. A null number reads as NaN: the writer turns NaN into null.
template <typename T>
T value_or(const json& j, const char* key, T dflt) {
  auto it = j.find(key);
  if (it == j.end()) return dflt;
  if constexpr (std::is_floating_point_v<T>) {
    if (it->is_null()) return std::numeric_limits<T>::quiet_NaN();
  }
  return get_field<T>(*it, key);
}

// Required field: a missing one throws nlohmann's out_of_range error naming the key.
template <typename T>
T required(const json& j, const char* key) {
  return get_field<T>(j.at(key), key);
}

// Range checks of what a results file may hold (files are inputs too: `report`, `compare` and
// `merge` read files from other machines). A time in ms is finite and in [0, kMaxMs] (31 years;
// a 1.7976e308 startup made the HTML axis loop for ever); counts and SM numbers are integers in
// their range (`sm: 1e300` read as -2147483648).
constexpr double kMaxMs = 1e12;

[[noreturn]] void out_of_range(const json& j, const std::string& what) {
  throw json::other_error::create(501, what, &j);
}

double checked_ms(const json& j, const char* key, double v, bool allow_nan) {
  if (std::isnan(v) && allow_nan) return v;
  if (!(v >= 0 && v <= kMaxMs))
    out_of_range(j, fmt::format("\"{}\" is {}: a time in ms must be a number in [0, {:g}]", key, v, kMaxMs));
  return v;
}

// An optional time in ms (missing or null: empty).
std::optional<double> opt_ms(const json& j, const char* key) {
  const auto v = opt_from<double>(j, key);
  if (v) checked_ms(j, key, *v, false);
  return v;
}

// A time in ms with a default (null reads as NaN: the writer turns NaN into null).
double ms_or(const json& j, const char* key, double dflt) {
  return checked_ms(j, key, value_or<double>(j, key, dflt), true);
}

// An integer field in [lo, hi] with a default when missing.
long long int_in(const json& j, const char* key, long long dflt, long long lo, long long hi) {
  const auto it = j.find(key);
  if (it == j.end()) return dflt;
  if (!it->is_number_integer())
    out_of_range(j, fmt::format("\"{}\" is {}: expected an integer in [{}, {}]", key, it->dump(), lo, hi));
  const long long v = it->is_number_unsigned() && it->get<unsigned long long>() > 9223372036854775807ULL
                          ? hi + 1
                          : it->get<long long>();
  if (v < lo || v > hi)
    out_of_range(j, fmt::format("\"{}\" is {}: expected an integer in [{}, {}]", key, it->dump(), lo, hi));
  return v;
}

void require_object(const json& j, const char* what) {
  if (!j.is_object())
    throw json::type_error::create(302, fmt::format("{} must be an object, not {}", what, j.type_name()), &j);
}

// Doubles compare equal when both are NaN (a NaN round-trips as null and reads back as NaN).
bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }
bool same(const std::optional<double>& a, const std::optional<double>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || same(*a, *b);
}

// Keys StrategyResult owns; anything else in a result object lands in `extra`.
const std::set<std::string>& strategy_keys() {
  static const std::set<std::string> keys = {
      "strategy",      "variant",         "warmers",          "outcome",
      "error",         "failed_phase",    "startup_ms",       "phases",
      "ttft_ms",       "first_decode_ms", "steady_ttft_ms",   "steady_decode_ms",
      "startup_compiles", "hot_path_compiles", "startup_compile_list", "workspace",
      "exit_code",     "signal",          "wall_ms",          "skipped"};
  return keys;
}


}  // namespace

const std::vector<TimingField>& repeat_timings() {
  static const std::vector<TimingField> fields = {
      {"startup_ms", &StrategyResult::startup_ms},
      {"ttft_ms", &StrategyResult::ttft_ms},
      {"first_decode_ms", &StrategyResult::first_decode_ms},
      {"steady_ttft_ms", &StrategyResult::steady_ttft_ms},
      {"steady_decode_ms", &StrategyResult::steady_decode_ms}};
  return fields;
}

StrategyResult fold_repeats(std::vector<StrategyResult> runs) {
  StrategyResult out = runs.front();
  if (runs.size() == 1) return out;
  out.extra["repeats"] = runs.size();
  nlohmann::json outcomes = nlohmann::json::array();
  for (const auto& r : runs) outcomes.push_back(outcome_name(r.outcome));
  out.extra["repeat_outcomes"] = outcomes;
  for (const TimingField& t : repeat_timings()) {
    std::vector<double> v;
    for (const auto& r : runs)
      if (r.*t.field) v.push_back(*(r.*t.field));
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    out.*t.field = v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
    out.extra[std::string(t.name) + "_min"] = v.front();
    out.extra[std::string(t.name) + "_max"] = v.back();
  }
  return out;
}


void take_finished_times(StrategyResult& out, std::vector<StrategyResult> finished) {
  if (finished.empty()) return;
  const size_t n = finished.size();
  const StrategyResult f = fold_repeats(std::move(finished));
  for (const TimingField& t : repeat_timings()) {
    out.*t.field = f.*t.field;
    for (const char* end : {"_min", "_max"}) {
      const std::string k = std::string(t.name) + end;
      if (f.extra.contains(k))
        out.extra[k] = f.extra.at(k);
      else
        out.extra.erase(k);
    }
  }
  out.extra["times_from_runs"] = n;
}

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kOk: return "ok";
    case Outcome::kCrash: return "crash";
    case Outcome::kTimeout: return "timeout";
    case Outcome::kError: return "error";
    case Outcome::kInterrupted: return "interrupted";
    case Outcome::kSkipped: return "skipped";
  }
  return "error";
}

Outcome parse_outcome(const std::string& text) {
  if (text == "ok") return Outcome::kOk;
  if (text == "crash") return Outcome::kCrash;
  if (text == "timeout") return Outcome::kTimeout;
  if (text == "error") return Outcome::kError;
  if (text == "interrupted") return Outcome::kInterrupted;
  if (text == "skipped") return Outcome::kSkipped;
  throw InputError(fmt::format(
      "unknown outcome '{}' (expected ok, crash, timeout, error, interrupted or skipped)", text));
}

// ---- equality ---------------------------------------------------------------------------------

bool operator==(const PhaseTiming& a, const PhaseTiming& b) {
  return a.name == b.name && same(a.ms, b.ms) && same(a.gpu_ms, b.gpu_ms) && a.request == b.request;
}

std::string run_target(const RunMeta& meta) {
  static const std::string kProfile = "compile-only: ";
  const std::string& d = meta.device_name;
  if (d.rfind(kProfile, 0) == 0 && d.size() > kProfile.size()) return d.substr(kProfile.size());
  if (d.empty() || d.rfind("compile-only", 0) == 0) return "sm_" + std::to_string(meta.sm);
  return d;
}

CompileKeyParts split_compile_key(const std::string& key) {
  CompileKeyParts p;
  const size_t at = key.rfind('@');
  if (at == std::string::npos) {
    p.identity = key;
    return p;
  }
  p.identity = key.substr(0, at);
  const size_t hash = key.find('#', at);
  p.target = key.substr(at + 1, hash == std::string::npos ? std::string::npos : hash - at - 1);
  if (hash != std::string::npos) p.source_hash = key.substr(hash + 1);
  return p;
}

std::vector<CompileEvent> hot_path_compiled(const StrategyResult& r) {
  std::vector<CompileEvent> out;
  for (const auto& e : r.hot_path_compiles)
    if (e.source != "disk") out.push_back(e);
  return out;
}

std::vector<CompileEvent> steady_cold(const StrategyResult& r) {
  std::vector<CompileEvent> out;
  for (const CompileEvent& e : r.hot_path_compiles)
    if (e.step.wave == 1) out.push_back(e);
  return out;
}

int hot_path_loads(const StrategyResult& r) {
  int n = 0;
  for (const auto& e : r.hot_path_compiles) n += e.source == "disk";
  return n;
}

bool operator==(const CompileEvent& a, const CompileEvent& b) {
  return a.kernel == b.kernel && a.key == b.key && same(a.compile_ms, b.compile_ms) &&
         a.phase == b.phase && a.source == b.source && a.selector == b.selector &&
         a.tuning_key == b.tuning_key && a.config == b.config &&
         a.num_candidates == b.num_candidates && a.reused == b.reused && a.rank == b.rank &&
         a.step == b.step;
}

bool operator==(const WorkspaceStats& a, const WorkspaceStats& b) {
  return a.locked_bytes == b.locked_bytes && a.peak_requested_bytes == b.peak_requested_bytes &&
         a.num_slots == b.num_slots;
}

bool operator==(const StrategyResult& a, const StrategyResult& b) {
  return a.strategy == b.strategy && a.variant == b.variant && a.warmers == b.warmers &&
         a.outcome == b.outcome && a.error == b.error && a.skipped == b.skipped && a.failed_phase == b.failed_phase &&
         same(a.startup_ms, b.startup_ms) && a.phases == b.phases && same(a.ttft_ms, b.ttft_ms) &&
         same(a.first_decode_ms, b.first_decode_ms) && same(a.steady_ttft_ms, b.steady_ttft_ms) &&
         same(a.steady_decode_ms, b.steady_decode_ms) && a.startup_compiles == b.startup_compiles &&
         a.hot_path_compiles == b.hot_path_compiles &&
         a.startup_compile_list == b.startup_compile_list && a.workspace == b.workspace &&
         a.exit_code == b.exit_code && a.signal == b.signal && same(a.wall_ms, b.wall_ms) &&
         a.extra == b.extra;
}

bool operator==(const RunMeta& a, const RunMeta& b) {
  return a.coldstart_version == b.coldstart_version && a.git_sha == b.git_sha && a.mode == b.mode &&
         a.device_name == b.device_name && a.sm == b.sm && a.sm_count == b.sm_count &&
         a.driver == b.driver && a.cuda == b.cuda && a.nvrtc == b.nvrtc && a.torch == b.torch &&
         a.hostname == b.hostname && a.started_at == b.started_at &&
         a.command_line == b.command_line && a.sets == b.sets && a.inputs == b.inputs;
}

bool operator==(const InputFile& a, const InputFile& b) {
  return a.role == b.role && a.path == b.path && a.bytes == b.bytes && a.fnv1a64 == b.fnv1a64 &&
         a.files == b.files;
}

bool operator==(const ScenarioSummary& a, const ScenarioSummary& b) {
  return a.name == b.name && a.file == b.file && a.model == b.model && a.engine == b.engine;
}

bool operator==(const RuleCheck& a, const RuleCheck& b) {
  return a.where == b.where && a.strategy == b.strategy && a.variant == b.variant &&
         a.rule == b.rule && a.checks == b.checks && a.status == b.status &&
         a.details == b.details;
}

bool operator==(const RunResults& a, const RunResults& b) {
  return a.meta == b.meta && a.scenario == b.scenario && a.results == b.results &&
         a.rules == b.rules;
}

// ---- JSON -------------------------------------------------------------------------------------

void to_json(json& j, const PhaseTiming& v) {
  j = json{{"name", v.name}, {"ms", v.ms}, {"gpu_ms", opt_to_json(v.gpu_ms)}, {"request", v.request}};
}

void from_json(const json& j, PhaseTiming& v) {
  require_object(j, "a phase");
  v.name = required<std::string>(j, "name");
  v.ms = ms_or(j, "ms", 0.0);
  v.gpu_ms = opt_ms(j, "gpu_ms");
  v.request = static_cast<int>(int_in(j, "request", -1, -1, 1 << 30));
}

void to_json(json& j, const CompileEvent& v) {
  j = json{{"kernel", v.kernel},         {"key", v.key},     {"compile_ms", v.compile_ms},
           {"phase", v.phase},           {"source", v.source}};
  if (!v.selector.empty()) {
    j["selector"] = v.selector;
    j["tuning_key"] = v.tuning_key;
    j["config"] = v.config;
    j["num_candidates"] = v.num_candidates;
  }
  if (v.reused) j["reused"] = true;
  if (v.rank >= 0) j["rank"] = v.rank;
  if (v.step.request >= 0) {
    j["request"] = v.step.request;
    j["wave"] = v.step.wave;
    j["step"] = v.step.step;
    j["batch"] = {{"tokens", v.step.batch_tokens},
                  {"seqs", v.step.batch_seqs},
                  {"mixed", v.step.batch_mixed}};
    if (v.step.drafter_pass > 0)
      j["drafter"] = {{"pass", v.step.drafter_pass}, {"tokens", v.step.drafter_tokens}};
  }
}

void from_json(const json& j, CompileEvent& v) {
  require_object(j, "a compile record");
  v.kernel = required<std::string>(j, "kernel");
  v.key = value_or<std::string>(j, "key", "");
  v.compile_ms = ms_or(j, "compile_ms", 0.0);
  v.phase = value_or<std::string>(j, "phase", "");
  v.source = value_or<std::string>(j, "source", "");
  v.selector = value_or<std::string>(j, "selector", "");
  v.tuning_key = value_or<std::string>(j, "tuning_key", "");
  v.config = value_or<std::string>(j, "config", "");
  constexpr long long kMaxCount = 1LL << 30;
  v.num_candidates = static_cast<int>(int_in(j, "num_candidates", 0, 0, kMaxCount));
  v.reused = value_or<bool>(j, "reused", false);
  v.rank = static_cast<int>(int_in(j, "rank", -1, -1, 1 << 16));
  v.step = StepContext{};
  v.step.request = static_cast<int>(int_in(j, "request", -1, -1, kMaxCount));
  if (v.step.request >= 0) {
    v.step.wave = static_cast<int>(int_in(j, "wave", -1, -1, kMaxCount));
    v.step.step = static_cast<int>(int_in(j, "step", -1, -1, kMaxCount));
    const auto b = j.find("batch");
    if (b != j.end() && !b->is_null()) {
      require_object(*b, "\"batch\"");
      v.step.batch_tokens = static_cast<int>(int_in(*b, "tokens", 0, 0, std::numeric_limits<int32_t>::max()));
      v.step.batch_seqs = static_cast<int>(int_in(*b, "seqs", 0, 0, std::numeric_limits<int32_t>::max()));
      v.step.batch_mixed = value_or<bool>(*b, "mixed", false);
    }
    const auto d = j.find("drafter");
    if (d != j.end() && !d->is_null()) {
      require_object(*d, "\"drafter\"");
      v.step.drafter_pass = static_cast<int>(int_in(*d, "pass", 0, 0, kMaxCount));
      v.step.drafter_tokens =
          static_cast<int>(int_in(*d, "tokens", 0, 0, std::numeric_limits<int32_t>::max()));
    }
  }
}

void to_json(json& j, const WorkspaceStats& v) {
  j = json{{"locked_bytes", v.locked_bytes},
           {"peak_requested_bytes", v.peak_requested_bytes},
           {"num_slots", v.num_slots}};
}

void from_json(const json& j, WorkspaceStats& v) {
  require_object(j, "\"workspace\"");
  constexpr long long kMaxBytes = 1LL << 62;  // 4 EiB: past any device
  v.locked_bytes = int_in(j, "locked_bytes", 0, 0, kMaxBytes);
  v.peak_requested_bytes = int_in(j, "peak_requested_bytes", 0, 0, kMaxBytes);
  v.num_slots = static_cast<int>(int_in(j, "num_slots", 1, 0, 1 << 20));
}

void to_json(json& j, const StrategyResult& v) {
  j = json::object();
  j["strategy"] = v.strategy;
  j["variant"] = v.variant;
  j["warmers"] = v.warmers;
  j["outcome"] = outcome_name(v.outcome);
  j["error"] = opt_to_json(v.error);
  if (v.skipped) j["skipped"] = *v.skipped;
  j["failed_phase"] = opt_to_json(v.failed_phase);
  j["startup_ms"] = opt_to_json(v.startup_ms);
  j["phases"] = v.phases;
  j["ttft_ms"] = opt_to_json(v.ttft_ms);
  j["first_decode_ms"] = opt_to_json(v.first_decode_ms);
  j["steady_ttft_ms"] = opt_to_json(v.steady_ttft_ms);
  j["steady_decode_ms"] = opt_to_json(v.steady_decode_ms);
  j["startup_compiles"] = v.startup_compiles;
  j["hot_path_compiles"] = v.hot_path_compiles;
  j["startup_compile_list"] = v.startup_compile_list;
  j["workspace"] = v.workspace;
  j["exit_code"] = opt_to_json(v.exit_code);
  j["signal"] = opt_to_json(v.signal);
  j["wall_ms"] = v.wall_ms;
  if (v.extra.is_object()) {
    for (auto it = v.extra.begin(); it != v.extra.end(); ++it) {
      // A named field always wins: extra can add meaning, never change it.
      if (!j.contains(it.key())) j[it.key()] = it.value();
    }
  }
}

void from_json(const json& j, StrategyResult& v) {
  if (!j.is_object()) {
    throw json::type_error::create(302, "a strategy result must be an object, not " +
                                            std::string(j.type_name()), &j);
  }
  v = StrategyResult{};
  v.strategy = required<std::string>(j, "strategy");
  v.variant = value_or<std::string>(j, "variant", "");
  v.warmers = value_or<std::vector<std::string>>(j, "warmers", {});
  const std::string outcome = required<std::string>(j, "outcome");
  v.outcome = parse_outcome(outcome);
  v.error = opt_from<std::string>(j, "error");
  v.skipped = opt_from<std::string>(j, "skipped");
  // Files written before kSkipped existed kept a skipped run as "error" with a "skipped" reason.
  if (v.outcome == Outcome::kError && v.skipped) v.outcome = Outcome::kSkipped;
  v.failed_phase = opt_from<std::string>(j, "failed_phase");
  v.startup_ms = opt_ms(j, "startup_ms");
  v.phases = value_or<std::vector<PhaseTiming>>(j, "phases", {});
  v.ttft_ms = opt_ms(j, "ttft_ms");
  v.first_decode_ms = opt_ms(j, "first_decode_ms");
  v.steady_ttft_ms = opt_ms(j, "steady_ttft_ms");
  v.steady_decode_ms = opt_ms(j, "steady_decode_ms");
  // The spread --repeat keeps beside each folded timing (`<name>_min` / `<name>_max`, what
  // compare gates against): both or neither, times in range, min <= the median <= max. A crafted
  // or damaged pair (a min of -1e9) would otherwise turn the gate off without a word.
  for (const TimingField& t : repeat_timings()) {
    const char* name = t.name;
    const std::optional<double>* value = &(v.*t.field);
    const std::string lo_key = std::string(name) + "_min", hi_key = std::string(name) + "_max";
    const bool has_lo = j.contains(lo_key), has_hi = j.contains(hi_key);
    if (!has_lo && !has_hi) continue;
    if (has_lo != has_hi)
      out_of_range(j, fmt::format("\"{}\" without \"{}\": a spread needs both", has_lo ? lo_key : hi_key,
                                  has_lo ? hi_key : lo_key));
    const auto lo = opt_ms(j, lo_key.c_str()), hi = opt_ms(j, hi_key.c_str());
    if (!lo || !hi) continue;  // null: no spread recorded
    const double tol = 1e-9 * std::max(1.0, *hi);
    if (*lo > *hi + tol || (*value && (**value < *lo - tol || **value > *hi + tol)))
      out_of_range(j, fmt::format("\"{}\" {} .. \"{}\" {} is no spread around \"{}\" {}: "
                                  "min <= value <= max",
                                  lo_key, *lo, hi_key, *hi, name,
                                  *value ? fmt::format("{}", **value) : std::string("null")));
  }
  v.startup_compiles = static_cast<int>(int_in(j, "startup_compiles", 0, 0, 1 << 30));
  v.hot_path_compiles = value_or<std::vector<CompileEvent>>(j, "hot_path_compiles", {});
  v.startup_compile_list = value_or<std::vector<CompileEvent>>(j, "startup_compile_list", {});
  v.workspace = value_or<WorkspaceStats>(j, "workspace", WorkspaceStats{});
  v.exit_code = opt_from<int>(j, "exit_code");
  v.signal = opt_from<std::string>(j, "signal");
  v.wall_ms = ms_or(j, "wall_ms", 0.0);
  v.extra = json::object();
  const auto& known = strategy_keys();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!known.count(it.key())) v.extra[it.key()] = it.value();
  }
}

void to_json(json& j, const RunMeta& v) {
  j = json{{"coldstart_version", v.coldstart_version},
           {"git_sha", v.git_sha},
           {"mode", v.mode},
           {"device_name", v.device_name},
           {"sm", v.sm},
           {"sm_count", v.sm_count},
           {"driver", v.driver},
           {"cuda", v.cuda},
           {"nvrtc", v.nvrtc},
           {"torch", v.torch},
           {"hostname", v.hostname},
           {"started_at", v.started_at},
           {"command_line", v.command_line},
           {"sets", v.sets},
           {"inputs", v.inputs}};
}

void to_json(json& j, const InputFile& v) {
  j = json{{"role", v.role}, {"path", v.path}, {"bytes", v.bytes}, {"fnv1a64", v.fnv1a64}};
  if (v.files >= 0) j["files"] = v.files;
}

void from_json(const json& j, InputFile& v) {
  v.role = value_or<std::string>(j, "role", "");
  v.path = required<std::string>(j, "path");
  v.bytes = value_or<long long>(j, "bytes", 0);
  v.fnv1a64 = value_or<std::string>(j, "fnv1a64", "");
  v.files = value_or<int>(j, "files", -1);
}

void from_json(const json& j, RunMeta& v) {
  require_object(j, "\"meta\"");
  v.coldstart_version = value_or<std::string>(j, "coldstart_version", "");
  v.git_sha = value_or<std::string>(j, "git_sha", "");
  v.mode = value_or<std::string>(j, "mode", "");
  if (!v.mode.empty() && v.mode != "cuda" && v.mode != "compile-only")
    out_of_range(j, fmt::format("\"mode\" is \"{}\": expected \"cuda\" or \"compile-only\"", v.mode));
  v.device_name = value_or<std::string>(j, "device_name", "");
  v.sm = static_cast<int>(int_in(j, "sm", 0, 0, 10000));
  v.sm_count = static_cast<int>(int_in(j, "sm_count", 0, 0, 100000));
  v.driver = value_or<std::string>(j, "driver", "");
  v.cuda = value_or<std::string>(j, "cuda", "");
  v.nvrtc = value_or<std::string>(j, "nvrtc", "");
  v.torch = value_or<std::string>(j, "torch", "");
  v.hostname = value_or<std::string>(j, "hostname", "");
  v.started_at = value_or<std::string>(j, "started_at", "");
  v.command_line = value_or<std::string>(j, "command_line", "");
  v.sets = value_or<std::vector<std::string>>(j, "sets", {});
  v.inputs = value_or<std::vector<InputFile>>(j, "inputs", {});
}

void to_json(json& j, const ScenarioSummary& v) {
  j = json{{"name", v.name}, {"file", v.file}, {"model", v.model}, {"engine", v.engine}};
}

void from_json(const json& j, ScenarioSummary& v) {
  require_object(j, "\"scenario\"");
  v.name = value_or<std::string>(j, "name", "");
  v.file = value_or<std::string>(j, "file", "");
  v.model = value_or<json>(j, "model", json::object());
  v.engine = value_or<json>(j, "engine", json::object());
  require_object(v.model, "\"scenario.model\"");
  require_object(v.engine, "\"scenario.engine\"");
}

void to_json(json& j, const RuleCheck& v) {
  j = json{{"where", v.where},   {"strategy", v.strategy}, {"variant", opt_to_json(v.variant)},
           {"rule", v.rule},     {"checks", v.checks},     {"status", v.status},
           {"details", v.details}};
}

void from_json(const json& j, RuleCheck& v) {
  v.where = value_or<std::string>(j, "where", "");
  v.strategy = required<std::string>(j, "strategy");
  v.variant = opt_from<std::string>(j, "variant");
  v.rule = value_or<std::string>(j, "rule", "");
  v.checks = value_or<std::vector<std::string>>(j, "checks", {});
  v.status = required<std::string>(j, "status");
  v.details = value_or<std::vector<std::string>>(j, "details", {});
}

void to_json(json& j, const RunResults& v) {
  j = json::object();
  j["schema"] = kResultSchema;
  j["meta"] = v.meta;
  j["scenario"] = v.scenario;
  j["results"] = v.results;
  j["rules"] = v.rules;
}

void from_json(const json& j, RunResults& v) {
  if (!j.is_object()) {
    throw InputError(fmt::format("expected a JSON object with schema \"{}\", found {}",
                                 kResultSchema, j.type_name()));
  }
  auto it = j.find("schema");
  if (it == j.end()) {
    throw InputError(fmt::format("no \"schema\" field (expected \"{}\")", kResultSchema));
  }
  if (!it->is_string() || it->get<std::string>() != kResultSchema) {
    throw InputError(fmt::format("schema is {}, expected \"{}\"", it->dump(), kResultSchema));
  }
  v.meta = value_or<RunMeta>(j, "meta", RunMeta{});
  v.scenario = value_or<ScenarioSummary>(j, "scenario", ScenarioSummary{});
  v.results = required<std::vector<StrategyResult>>(j, "results");
  v.rules = value_or<std::vector<RuleCheck>>(j, "rules", {});
}

// ---- files ------------------------------------------------------------------------------------

void write_results_json(const std::string& path, const RunResults& results) {
  // Invalid UTF-8 (e.g. a byte in a scenario name) is written as U+FFFD instead of throwing and
  // losing the run's results.
  paths::write_file_atomic(
      path, json(results).dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

nlohmann::json read_results_file_json(const std::string& path) {
  std::string text;
  const std::string why = paths::read_input_file(path, paths::kMaxResultsBytes, text);
  if (!why.empty()) throw InputError(fmt::format("{}: cannot open results file: {}", path, why));
  // Deeper than any results file nests; copies of a deeper value (an `extra` field) recursed
  // until the stack overflowed. Counted by a linear scan before parsing: nlohmann's callback
  // parser (3.11.2) walks every sibling at each object's end, which made 300,000 phases take
  // 30 s to read.
  constexpr int kMaxDepth = 128;
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  if (deepest - 1 > kMaxDepth)
    throw InputError(fmt::format("{}: not valid JSON: nests more than {} levels deep", path, kMaxDepth));
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", path, json_error_text(e)));
  }
}

RunResults read_results_json(const std::string& path) {
  const json j = read_results_file_json(path);
  try {
    return j.get<RunResults>();
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", path, e.what()));
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: bad results file: {}", path, json_error_text(e)));
  }
}

std::string json_error_text(const nlohmann::json::exception& e) {
  std::string what = e.what();
  const auto tag_end = what.find("] ");
  if (what.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos) {
    what = what.substr(tag_end + 2);
  }
  return what;
}

}  // namespace coldstart
