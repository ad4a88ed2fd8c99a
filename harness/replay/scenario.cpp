// coldstart: scenario loading and validation. The file format is described in scenario.h.
//
// How it works: the scenario is read into a YAML tree, --set overrides (and, for a variant, the
// matrix values) are written into that tree, and then one pass walks the tree, checks every key
// and value, and fills a Scenario. Each problem is recorded with the place it came from and the
// walk goes on, so one load reports everything it can. Where a value came from is decided by its
// dotted path: a path at or below an override's path belongs to that override.
#include "harness/common/paths.h"
#include "harness/replay/scenario.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <tuple>

#include "harness/common/error.h"

namespace coldstart {
namespace {

using Path = std::vector<std::string>;
using json = nlohmann::json;

// ------------------------------------------------------------------------------------------
// The schema

const std::vector<std::string> kTopKeys = {"name",   "description", "model",
                                           "engine", "requests",    "strategies",
                                           "matrix", "timeout_s",   "expect",
                                           "archs"};
const std::vector<std::string> kModelKeys = {"config", "overrides"};
const std::vector<std::string> kEngineKeys = {
    "max_num_seqs",   "max_num_batched_tokens", "max_model_len",           "block_size",
    "kv_cache_dtype", "cudagraph_mode",         "cudagraph_capture_sizes", "gpu_memory_utilization",
    "num_gpu_blocks", "enable_chunked_prefill", "allow_long_max_model_len"};
const std::vector<std::string> kRequestKeys = {"prompt_tokens", "decode_steps"};
const std::vector<std::string> kStrategyKeys = {"warmers", "allow_hot_path_compiles"};
// vLLM's CacheConfig.block_size choices.
const std::vector<int> kBlockSizes = {1, 8, 16, 32, 64, 128, 256};
const std::vector<std::string> kKvCacheDtypes = {"auto", "bfloat16", "fp8", "fp8_e4m3",
                                                 "turboquant_4bit_nc"};
// Length keys vLLM considers when deriving a model's max length (the smallest one wins).
const std::vector<std::string> kLengthKeys = {
    "max_position_embeddings", "n_positions",         "max_seq_len",    "seq_length",
    "model_max_length",        "max_sequence_length", "max_seq_length", "seq_len"};
constexpr int kMaxRequests = 2;
constexpr size_t kMaxVariants = 1024;
// What a bare Infinity in a config.json is read as.
constexpr const char* kInfText = "1.7976931348623157e308";

// ------------------------------------------------------------------------------------------
// Small helpers

std::string join(const Path& p) {
  std::string s;
  for (size_t i = 0; i < p.size(); ++i) {
    if (i) s += '.';
    s += p[i];
  }
  return s;
}

Path child(const Path& p, const std::string& k) {
  Path c = p;
  c.push_back(k);
  return c;
}

bool is_prefix(const Path& a, const Path& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" for the closest known name, or "" when nothing is close.
std::string suggest(const std::string& got, const std::vector<std::string>& known) {
  const std::string* best = nullptr;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& k : known) {
    size_t d = edit_distance(lower(got), lower(k));
    if (d < best_d) {
      best_d = d;
      best = &k;
    }
  }
  if (!best) return "";
  size_t limit = std::max<size_t>(2, got.size() / 3);
  if (best_d > limit) return "";
  return fmt::format(" (did you mean '{}'?)", *best);
}

std::string names(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

std::string mark_str(const std::string& file, const YAML::Mark& m) {
  if (m.is_null()) return file;
  return fmt::format("{}:{}:{}", file, m.line + 1, m.column + 1);
}

bool is_index(const std::string& s) {
  return !s.empty() && s.size() < 9 && std::all_of(s.begin(), s.end(), ::isdigit);
}

// ------------------------------------------------------------------------------------------
// YAML values, typed as YAML 1.2's core schema reads plain scalars; quoted scalars are strings.

enum class Kind { kNull, kBool, kInt, kFloat, kString, kList, kMap };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "a boolean";
    case Kind::kInt:
      return "an integer";
    case Kind::kFloat:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kList:
      return "a list";
    case Kind::kMap:
      return "a mapping";
  }
  return "?";
}

const std::regex& int_re() {
  static const std::regex re("[-+]?[0-9]+");
  return re;
}
const std::regex& float_re() {
  static const std::regex re(
      "[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|"
      "NAN)");
  return re;
}

bool is_quoted(const YAML::Node& n) { return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str"; }

Kind kind_of(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return Kind::kNull;
  if (n.IsSequence()) return Kind::kList;
  if (n.IsMap()) return Kind::kMap;
  if (is_quoted(n)) return Kind::kString;
  const std::string& s = n.Scalar();
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return Kind::kNull;
  if (s == "true" || s == "True" || s == "TRUE" || s == "false" || s == "False" || s == "FALSE")
    return Kind::kBool;
  if (std::regex_match(s, int_re())) return Kind::kInt;
  if (std::regex_match(s, float_re())) return Kind::kFloat;
  return Kind::kString;
}

double scalar_double(const std::string& s) {
  std::string t = lower(s);
  if (t == ".inf" || t == "+.inf") return std::numeric_limits<double>::infinity();
  if (t == "-.inf") return -std::numeric_limits<double>::infinity();
  if (t == ".nan") return std::numeric_limits<double>::quiet_NaN();
  return std::strtod(s.c_str(), nullptr);
}

// The node as JSON, using the same typing as kind_of. Integers too large for 64 bits become
// doubles.
json to_json(const YAML::Node& n) {
  switch (kind_of(n)) {
    case Kind::kNull:
      return nullptr;
    case Kind::kBool:
      return lower(n.Scalar()) == "true";
    case Kind::kInt: {
      errno = 0;
      long long v = std::strtoll(n.Scalar().c_str(), nullptr, 10);
      if (errno == ERANGE) return scalar_double(n.Scalar());
      return v;
    }
    case Kind::kFloat:
      return scalar_double(n.Scalar());
    case Kind::kString:
      return n.Scalar();
    case Kind::kList: {
      json a = json::array();
      for (const auto& e : n) a.push_back(to_json(e));
      return a;
    }
    case Kind::kMap: {
      json o = json::object();
      for (auto it = n.begin(); it != n.end(); ++it) o[it->first.Scalar()] = to_json(it->second);
      return o;
    }
  }
  return nullptr;
}

// A value as one line of YAML: plain scalars as written, quoted ones quoted, collections in flow
// style. Used for variant names and variant overrides.
std::string flow_text(const YAML::Node& n) {
  if (n.IsScalar() && !is_quoted(n)) return n.Scalar();
  YAML::Emitter e;
  e.SetStringFormat(YAML::DoubleQuoted);
  e << YAML::Flow << n;
  return e.c_str();
}

// ------------------------------------------------------------------------------------------
// Problem collection

// An override written into the tree before validation.
struct OverrideRec {
  Path path;
  std::string label;      // "--set KEY" or "variant 'NAME'": where problems are reported
  bool file_marks;        // the value is a node of the scenario file (a matrix value)
  YAML::Mark value_mark;  // its position in the file, when file_marks
  std::string variant;    // the variant name, for matrix values
};

class Checker {
 public:
  explicit Checker(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  size_t error_count() const { return errors_.size(); }
  void add_override(OverrideRec o) { overrides_.push_back(std::move(o)); }
  const std::vector<OverrideRec>& overrides() const { return overrides_; }

  // The override that produced the value at `p` (the deepest one covering it; the later one on a
  // tie), or null when the value comes from the file as written.
  const OverrideRec* origin(const Path& p) const {
    const OverrideRec* best = nullptr;
    for (const auto& o : overrides_) {
      if (is_prefix(o.path, p) && (!best || o.path.size() >= best->path.size())) best = &o;
    }
    return best;
  }

  bool from_command_line(const Path& p) const {
    const OverrideRec* o = origin(p);
    return o && !o->file_marks;
  }

  void fail(const Path& p, const YAML::Mark& m, const std::string& msg) {
    const OverrideRec* o = origin(p);
    std::string where;
    if (o && !o->file_marks) {
      where = o->label;
    } else {
      // A key that the override itself created has no position of its own; use the value's.
      where = mark_str(file_, (o && p == o->path) ? o->value_mark : m);
    }
    std::string text = fmt::format("{}: key '{}': {}", where, join(p), msg);
    if (o && o->file_marks && !o->variant.empty())
      text += fmt::format(" [variant '{}']", o->variant);
    if (o && !o->file_marks) {
      fail_raw(std::move(text));
    } else {
      const YAML::Mark& mk = (o && p == o->path) ? o->value_mark : m;
      fail_raw(std::move(text), 0, mk.line, mk.column);
    }
  }

  // A problem with a ready-made text. `group` orders the report: 0 the scenario file (by line),
  // 1 the HF config (by line), 2 command-line and other sources (in the order found).
  void fail_raw(std::string text, int group = 2, int line = 0, int col = 0) {
    errors_.push_back(Problem{group, line, col, std::move(text)});
  }

  void throw_if_failed() {
    if (errors_.empty()) return;
    std::stable_sort(errors_.begin(), errors_.end(), [](const Problem& a, const Problem& b) {
      return std::tie(a.group, a.line, a.col) < std::tie(b.group, b.line, b.col);
    });
    std::string all;
    for (const auto& e : errors_) {
      if (all.find(e.text) != std::string::npos) continue;  // the same problem seen twice
      if (!all.empty()) all += '\n';
      all += e.text;
    }
    throw InputError(all);
  }

 private:
  std::string file_;
  struct Problem {
    int group, line, col;
    std::string text;
  };
  std::vector<OverrideRec> overrides_;
  std::vector<Problem> errors_;
};

// One key of a mapping, with its path.
struct Entry {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
  Path path;
};

// A mapping's entries, after reporting unknown keys (when `allowed` is given), duplicate keys and
// keys that are not plain names. `at` is where to point for a missing key: the line of the
// mapping's own key.
class MapView {
 public:
  MapView(Checker& c, const YAML::Node& node, Path path, YAML::Mark at,
          const std::vector<std::string>* allowed)
      : c_(c), path_(std::move(path)), at_(at) {
    if (!node.IsMap()) {
      c_.fail(path_, node.IsDefined() ? node.Mark() : at_,
              fmt::format("expected a mapping, got {}", kind_name(kind_of(node))));
      return;
    }
    ok_ = true;
    std::map<std::string, YAML::Mark> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node& k = it->first;
      if (!k.IsScalar()) {
        c_.fail(path_, k.Mark(), "a key must be a name, not " + std::string(kind_name(kind_of(k))));
        continue;
      }
      std::string key = k.Scalar();
      Path kp = child(path_, key);
      auto prev = seen.find(key);
      if (prev != seen.end()) {
        c_.fail(kp, k.Mark(),
                fmt::format("duplicate key (first at line {})", prev->second.line + 1));
        continue;
      }
      seen.emplace(key, k.Mark());
      if (allowed && !contains(*allowed, key)) {
        c_.fail(kp, k.Mark(),
                fmt::format("unknown key{}; known keys here: {}", suggest(key, *allowed),
                            names(*allowed)));
        continue;
      }
      entries_.push_back(Entry{key, k, it->second, kp});
    }
  }

  bool ok() const { return ok_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const Path& path() const { return path_; }
  YAML::Mark at() const { return at_; }

  const Entry* get(const std::string& key) const {
    for (const auto& e : entries_)
      if (e.key == key) return &e;
    return nullptr;
  }

  const Entry* require(const std::string& key) const {
    const Entry* e = get(key);
    if (!e && ok_) c_.fail(child(path_, key), at_, "missing (required)");
    return e;
  }

 private:
  Checker& c_;
  Path path_;
  YAML::Mark at_;
  bool ok_ = false;
  std::vector<Entry> entries_;
};

// --- typed readers: each reports a wrong type and returns nullopt

std::optional<long long> read_int(Checker& c, const Path& p, const YAML::Node& n) {
  Kind k = kind_of(n);
  if (k != Kind::kInt) {
    std::string got = kind_name(k);
    if (n.IsScalar()) got += fmt::format(" ({})", flow_text(n));
    c.fail(p, n.Mark(), "expected an integer, got " + got);
    return std::nullopt;
  }
  errno = 0;
  long long v = std::strtoll(n.Scalar().c_str(), nullptr, 10);
  if (errno == ERANGE) {
    c.fail(p, n.Mark(), fmt::format("{} is out of range", n.Scalar()));
    return std::nullopt;
  }
  return v;
}

// An int that must lie in [lo, hi].
std::optional<int> read_int_in(Checker& c, const Path& p, const YAML::Node& n, long long lo,
                               long long hi = std::numeric_limits<int>::max()) {
  auto v = read_int(c, p, n);
  if (!v) return std::nullopt;
  if (*v < lo || *v > hi) {
    if (hi == std::numeric_limits<int>::max())
      c.fail(p, n.Mark(), fmt::format("must be at least {}, got {}", lo, *v));
    else
      c.fail(p, n.Mark(), fmt::format("must be in [{}, {}], got {}", lo, hi, *v));
    return std::nullopt;
  }
  return static_cast<int>(*v);
}

std::optional<double> read_number(Checker& c, const Path& p, const YAML::Node& n) {
  Kind k = kind_of(n);
  if (k != Kind::kInt && k != Kind::kFloat) {
    std::string got = kind_name(k);
    if (n.IsScalar()) got += fmt::format(" ({})", flow_text(n));
    c.fail(p, n.Mark(), "expected a number, got " + got);
    return std::nullopt;
  }
  return scalar_double(n.Scalar());
}

std::optional<bool> read_bool(Checker& c, const Path& p, const YAML::Node& n) {
  Kind k = kind_of(n);
  if (k != Kind::kBool) {
    std::string got = kind_name(k);
    if (n.IsScalar()) got += fmt::format(" ({})", flow_text(n));
    c.fail(p, n.Mark(), "expected true or false, got " + got);
    return std::nullopt;
  }
  return lower(n.Scalar()) == "true";
}

// Any scalar but null reads as its text (so `name: 42` is the name "42").
std::optional<std::string> read_string(Checker& c, const Path& p, const YAML::Node& n) {
  if (!n.IsScalar() || kind_of(n) == Kind::kNull) {
    c.fail(p, n.IsDefined() ? n.Mark() : YAML::Mark::null_mark(),
           fmt::format("expected a string, got {}", kind_name(kind_of(n))));
    return std::nullopt;
  }
  return n.Scalar();
}

// ------------------------------------------------------------------------------------------
// Keys given on the command line or as matrix axes

struct Resolved {
  Path path;
  std::string error;  // empty when resolved
};

// Turns KEY (dotted, or a bare engine / top-level name) into a full path, checking each part
// against the schema as far as it is fixed (HF keys and strategy names are checked later).
Resolved resolve_key(const std::string& key) {
  Path parts;
  {
    std::string cur;
    for (char ch : key) {
      if (ch == '.') {
        parts.push_back(cur);
        cur.clear();
      } else {
        cur += ch;
      }
    }
    parts.push_back(cur);
  }
  for (const auto& part : parts)
    if (part.empty()) return {{}, "empty key, or an empty part between dots"};

  const std::string& first = parts[0];
  if (parts.size() == 1) {
    if (contains(kTopKeys, first)) return {{first}, ""};
    if (contains(kEngineKeys, first)) return {{"engine", first}, ""};
    std::vector<std::string> all = kTopKeys;
    all.insert(all.end(), kEngineKeys.begin(), kEngineKeys.end());
    return {{},
            "unknown key" + suggest(first, all) +
                "; a bare key must be an engine key or a top-level key, else write the dotted "
                "path (e.g. model.overrides.num_hidden_layers)"};
  }
  if (!contains(kTopKeys, first)) {
    if (contains(kEngineKeys, first))
      return {{}, fmt::format("unknown key '{}' (did you mean 'engine.{}'?)", first, first)};
    return {{}, fmt::format("unknown key '{}'{}", first, suggest(first, kTopKeys))};
  }
  if (first == "matrix")
    return {{},
            "matrix axes cannot be set one by one: set the axis's own key (which removes the "
            "axis) or replace 'matrix' as a whole"};
  if (first == "name" || first == "description" || first == "timeout_s")
    return {{}, fmt::format("'{}' has no sub-keys", first)};
  const std::string& second = parts[1];
  if (first == "engine") {
    if (!contains(kEngineKeys, second))
      return {{}, fmt::format("unknown key 'engine.{}'{}", second, suggest(second, kEngineKeys))};
    if (parts.size() > 3 ||
        (parts.size() == 3 && (second != "cudagraph_capture_sizes" || !is_index(parts[2]))))
      return {{}, fmt::format("'engine.{}' has no sub-key '{}'", second, parts[2])};
  } else if (first == "model") {
    if (!contains(kModelKeys, second))
      return {{}, fmt::format("unknown key 'model.{}'{}", second, suggest(second, kModelKeys))};
    if (second == "config" && parts.size() > 2) return {{}, "'model.config' has no sub-keys"};
    if (second == "overrides" && parts.size() > 3)
      return {{},
              "model.overrides replaces whole top-level keys of the HF config; write "
              "model.overrides.KEY with the whole value"};
  } else if (first == "requests") {
    if (!is_index(second)) return {{}, fmt::format("'{}' is not a list index", second)};
    if (parts.size() > 3) return {{}, "too many parts after 'requests.N'"};
    if (parts.size() == 3 && !contains(kRequestKeys, parts[2]))
      return {{},
              fmt::format("unknown key 'requests.{}.{}'{}", second, parts[2],
                          suggest(parts[2], kRequestKeys))};
  }
  // strategies.* and expect.* are free-form here; validation checks them.
  return {parts, ""};
}

// Writes `value` at `path` in the tree, creating missing mapping keys; a list index may equal the
// list's length to append. Returns an error text, or "" on success.
std::string set_path(YAML::Node root, const Path& path, const YAML::Node& value) {
  YAML::Node cur = root;  // copies of a Node share its data; reset() moves the handle
  for (size_t i = 0; i < path.size(); ++i) {
    const std::string& part = path[i];
    const bool last = i + 1 == path.size();
    Path here(path.begin(), path.begin() + static_cast<long>(i));
    if (cur.IsSequence()) {
      if (!is_index(part))
        return fmt::format("'{}' is a list; '{}' is not an index", join(here), part);
      size_t idx = std::stoul(part);
      if (idx > cur.size())
        return fmt::format("index {} is past the end of '{}' ({} entries)", idx, join(here),
                           cur.size());
      if (idx == cur.size()) {
        cur.push_back(last ? value : YAML::Node(YAML::NodeType::Map));
        if (last) return "";
      } else if (last) {
        cur[idx] = value;
        return "";
      }
      YAML::Node next = cur[idx];
      cur.reset(next);
    } else if (cur.IsMap() || cur.IsNull() || !cur.IsDefined()) {
      if (last) {
        cur[part] = value;
        return "";
      }
      YAML::Node next = cur[part];
      if (next.IsScalar())
        return fmt::format("'{}' is {}, not a mapping or list", join(child(here, part)),
                           kind_name(kind_of(next)));
      cur.reset(next);
    } else {
      return fmt::format("'{}' is {}, not a mapping or list", join(here), kind_name(kind_of(cur)));
    }
  }
  return "";
}

// The value of `key` in a mapping, or a null node. (operator[] would insert the key, and its
// const form returns a node that throws when inspected.)
YAML::Node lookup(const YAML::Node& map, const std::string& key) {
  if (map.IsMap()) {
    for (auto it = map.begin(); it != map.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  }
  return YAML::Node();
}

// Removes the matrix axes that an override covers (the override pins that key).
void drop_overridden_axes(YAML::Node root, const std::vector<Path>& pinned) {
  YAML::Node matrix = lookup(root, "matrix");
  if (!matrix.IsMap()) return;
  std::vector<YAML::Node> drop;
  for (auto it = matrix.begin(); it != matrix.end(); ++it) {
    if (!it->first.IsScalar()) continue;
    Resolved r = resolve_key(it->first.Scalar());
    if (!r.error.empty()) continue;
    for (const auto& p : pinned) {
      if (is_prefix(p, r.path) || is_prefix(r.path, p)) {
        drop.push_back(it->first);
        break;
      }
    }
  }
  for (const auto& k : drop) matrix.remove(k);
}

// Applies `--set KEY=VALUE` strings to the tree, recording each as an override.
void apply_set_overrides(Checker& c, YAML::Node root, const std::vector<std::string>& sets) {
  std::vector<Path> pinned;
  for (const auto& arg : sets) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      c.fail_raw(fmt::format("--set {}: expected KEY=VALUE", arg));
      continue;
    }
    std::string key = arg.substr(0, eq);
    std::string text = arg.substr(eq + 1);
    std::string label = "--set " + key;
    Resolved r = resolve_key(key);
    if (!r.error.empty()) {
      c.fail_raw(fmt::format("{}: key '{}': {}", label, key, r.error));
      continue;
    }
    YAML::Node value;
    if (text.empty()) {
      value = YAML::Node(std::string());
      value.SetTag("!");
    } else {
      try {
        value = YAML::Load(text);
      } catch (const YAML::Exception& e) {
        c.fail_raw(fmt::format("{}: key '{}': value '{}' is not valid YAML: {}", label,
                               join(r.path), text, e.msg));
        continue;
      }
    }
    std::string err = set_path(root, r.path, value);
    if (!err.empty()) {
      c.fail_raw(fmt::format("{}: key '{}': {}", label, join(r.path), err));
      continue;
    }
    c.add_override(OverrideRec{r.path, label, false, YAML::Mark::null_mark(), ""});
    if (r.path[0] != "matrix") pinned.push_back(r.path);
  }
  drop_overridden_axes(root, pinned);
}

// ------------------------------------------------------------------------------------------
// The HF config.json

// The config text made acceptable to nlohmann::json, with a map back to the original positions
// and the position of every top-level key.
struct JsonSource {
  std::string text;
  struct Edit {
    size_t new_pos, new_len, old_len;
  };
  std::vector<Edit> edits;
  std::map<std::string, std::pair<int, int>> key_pos;  // 1-based line and column

  size_t to_original(size_t off) const {
    long delta = 0;
    for (const auto& e : edits) {
      if (off >= e.new_pos + e.new_len) {
        delta += static_cast<long>(e.new_len) - static_cast<long>(e.old_len);
      } else if (off >= e.new_pos) {
        return e.new_pos - delta;  // inside a replacement: its start
      } else {
        break;
      }
    }
    return off - delta;
  }
};

bool ident_char(char ch) {
  return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.';
}

// One pass over the text: copies it, replacing the bare tokens Infinity, -Infinity and NaN outside
// strings, and notes where each top-level object key starts.
JsonSource prepare_json(const std::string& in) {
  JsonSource out;
  out.text.reserve(in.size() + 32);
  std::vector<char> stack;  // open '{' / '['
  int line = 1, col = 1;
  size_t i = 0;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n && i < in.size(); ++k, ++i) {
      out.text += in[i];
      if (in[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  };
  auto token_at = [&](const char* tok) {
    size_t n = std::strlen(tok);
    if (in.compare(i, n, tok) != 0) return false;
    if (i > 0 && ident_char(in[i - 1])) return false;
    if (i + n < in.size() && ident_char(in[i + n])) return false;
    return true;
  };
  auto replace = [&](const char* tok, const std::string& with) {
    size_t n = std::strlen(tok);
    out.edits.push_back({out.text.size(), with.size(), n});
    out.text += with;
    i += n;
    col += static_cast<int>(n);
  };
  while (i < in.size()) {
    char ch = in[i];
    if (ch == '"') {
      int kline = line, kcol = col;
      size_t start = i + 1;
      advance(1);
      while (i < in.size() && in[i] != '"') advance(in[i] == '\\' ? 2 : 1);
      std::string raw = in.substr(start, i - start);
      advance(1);  // closing quote
      if (stack.size() == 1 && stack.back() == '{') {
        size_t j = i;
        while (j < in.size() && std::isspace(static_cast<unsigned char>(in[j]))) ++j;
        if (j < in.size() && in[j] == ':') out.key_pos.emplace(raw, std::make_pair(kline, kcol));
      }
      continue;
    }
    if (ch == '{' || ch == '[') {
      stack.push_back(ch);
    } else if ((ch == '}' || ch == ']') && !stack.empty()) {
      stack.pop_back();
    }
    if (ch == '-' && token_at("-Infinity")) {
      replace("-Infinity", std::string("-") + kInfText);
    } else if (ch == 'I' && token_at("Infinity")) {
      replace("Infinity", kInfText);
    } else if (ch == 'N' && token_at("NaN")) {
      replace("NaN", "null");
    } else {
      advance(1);
    }
  }
  return out;
}

std::pair<int, int> line_col(const std::string& text, size_t off) {
  int line = 1, col = 1;
  for (size_t k = 0; k < off && k < text.size(); ++k) {
    if (text[k] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

const char* json_kind(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  return "a mapping";
}

// Whether an override value may replace a config value: same JSON type, with an integer allowed
// for a float and anything allowed for null.
bool same_type(const json& cfg, const json& v) {
  if (cfg.is_null()) return true;
  if (cfg.is_number_float()) return v.is_number();
  if (cfg.is_number_integer()) return v.is_number_integer();
  return cfg.type() == v.type();
}

// The model's derived length limit, as vLLM derives it, and how it was derived.
struct LengthLimit {
  long long tokens = 0;
  std::string why;
};

// Reads the HF config named by model.config, applies model.overrides, and fills `m` and `limit`.
// Returns false when a problem was recorded.
bool load_model(Checker& c, const MapView& model, ModelConfig& m, LengthLimit& limit) {
  const Entry* cfg_entry = model.require("config");
  if (!cfg_entry) return false;
  auto cfg_name = read_string(c, cfg_entry->path, cfg_entry->value);
  if (!cfg_name) return false;

  // A path from the file is relative to the file; one typed on the command line to the cwd.
  std::string cfg_path = *cfg_name;
  if (!cfg_path.empty() && cfg_path[0] != '/' && !c.from_command_line(cfg_entry->path))
    cfg_path = paths::join(paths::parent(c.file()), cfg_path);
  cfg_path = paths::normalize(cfg_path);
  m.config_file = cfg_path;
  const Path& cfg_key = cfg_entry->path;
  const YAML::Mark cfg_mark = cfg_entry->value.Mark();

  if (paths::is_directory(cfg_path)) {
    c.fail(cfg_key, cfg_mark, fmt::format("'{}' is a directory, not a config.json", m.config_file));
    return false;
  }
  std::ifstream f(cfg_path, std::ios::binary);
  if (!f) {
    c.fail(cfg_key, cfg_mark,
           fmt::format("cannot read HF config '{}': {}", m.config_file, std::strerror(errno)));
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string original = ss.str();
  const JsonSource src = prepare_json(original);

  json cfg;
  try {
    cfg = json::parse(src.text);
  } catch (const json::parse_error& e) {
    size_t off = src.to_original(e.byte > 0 ? e.byte - 1 : 0);
    auto [line, col] = line_col(original, off);
    std::string what = e.what();
    size_t colon = what.find(": ", what.find("column"));
    std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    c.fail(cfg_key, cfg_mark,
           fmt::format("invalid JSON in HF config {}:{}:{} (byte {}): {}", m.config_file, line, col,
                       off + 1, detail));
    return false;
  }
  if (!cfg.is_object()) {
    c.fail(cfg_key, cfg_mark,
           fmt::format("HF config '{}' is {}, not a JSON object", m.config_file, json_kind(cfg)));
    return false;
  }

  const size_t errors_before = c.error_count();
  std::vector<std::string> cfg_keys;
  for (auto it = cfg.begin(); it != cfg.end(); ++it) cfg_keys.push_back(it.key());

  // model.overrides: replace top-level keys, same type only.
  std::optional<MapView> ovs;
  std::map<std::string, const Entry*> overridden;
  if (const Entry* ov = model.get("overrides")) {
    ovs.emplace(c, ov->value, ov->path, ov->key_node.Mark(), nullptr);
    for (const auto& e : ovs->entries()) {
      if (!cfg.contains(e.key)) {
        c.fail(e.path, e.key_node.Mark(),
               fmt::format("no such key in HF config '{}'{}", m.config_file,
                           suggest(e.key, cfg_keys)));
        continue;
      }
      json v = to_json(e.value);
      if (!same_type(cfg[e.key], v)) {
        c.fail(e.path, e.value.Mark(),
               fmt::format("expected {} (as in {}), got {}", json_kind(cfg[e.key]),
                           paths::filename(cfg_path), json_kind(v)));
        continue;
      }
      if (cfg[e.key].is_number_float()) v = v.get<double>();
      cfg[e.key] = v;
      overridden[e.key] = &e;
    }
  }

  // A problem with a config value points at the override that set it, else at the config file.
  auto fail_key = [&](const std::string& key, const std::string& msg) {
    auto o = overridden.find(key);
    if (o != overridden.end()) {
      c.fail(o->second->path, o->second->value.Mark(), msg);
      return;
    }
    auto pos = src.key_pos.find(key);
    if (pos != src.key_pos.end())
      c.fail_raw(fmt::format("{}:{}:{}: key '{}': {}", m.config_file, pos->second.first,
                             pos->second.second, key, msg),
                 1, pos->second.first, pos->second.second);
    else
      c.fail_raw(fmt::format("{}: key '{}': {}", m.config_file, key, msg), 1);
  };
  auto missing = [&](const std::string& what) {
    c.fail(cfg_key, cfg_mark, fmt::format("HF config '{}' has no {}", m.config_file, what));
  };
  // A key that is absent or null reads as absent.
  auto find = [&](const std::string& key) -> const json* {
    auto it = cfg.find(key);
    return (it == cfg.end() || it->is_null()) ? nullptr : &*it;
  };
  auto get_int = [&](const std::string& key, bool required, long long lo) -> std::optional<int> {
    const json* v = find(key);
    if (!v) {
      if (required) missing("'" + key + "'");
      return std::nullopt;
    }
    if (!v->is_number_integer()) {
      fail_key(key, fmt::format("expected an integer, got {}", json_kind(*v)));
      return std::nullopt;
    }
    long long x = v->is_number_unsigned()
                      ? static_cast<long long>(std::min<uint64_t>(
                            v->get<uint64_t>(), std::numeric_limits<int>::max() + 1ULL))
                      : v->get<long long>();
    if (x < lo || x > std::numeric_limits<int>::max()) {
      fail_key(key,
               fmt::format("must be in [{}, {}], got {}", lo, std::numeric_limits<int>::max(), x));
      return std::nullopt;
    }
    return static_cast<int>(x);
  };
  auto get_double = [&](const std::string& key) -> std::optional<double> {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) {
      fail_key(key, fmt::format("expected a number, got {}", json_kind(*v)));
      return std::nullopt;
    }
    return v->get<double>();
  };
  auto get_string = [&](const std::string& key) -> std::optional<std::string> {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) {
      fail_key(key, fmt::format("expected a string, got {}", json_kind(*v)));
      return std::nullopt;
    }
    return v->get<std::string>();
  };

  // Identity.
  if (const json* a = find("architectures")) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string())
      fail_key("architectures", "expected a non-empty list of class names");
    else
      m.architecture = (*a)[0].get<std::string>();
  }
  if (auto t = get_string("model_type"))
    m.model_type = *t;
  else if (!find("model_type"))
    missing("'model_type'");
  if (m.architecture.empty() && !find("architectures")) m.architecture = m.model_type;

  // Shape.
  auto hidden = get_int("hidden_size", true, 1);
  auto layers = get_int("num_hidden_layers", true, 1);
  auto heads = get_int("num_attention_heads", true, 1);
  auto vocab = get_int("vocab_size", true, 1);
  std::optional<int> kv_heads =
      find("num_key_value_heads") ? get_int("num_key_value_heads", true, 1) : heads;
  std::optional<int> inter =
      find("intermediate_size") ? get_int("intermediate_size", true, 1) : std::optional<int>(0);
  std::optional<int> head_dim;
  if (find("head_dim")) {
    head_dim = get_int("head_dim", true, 1);
  } else if (find("attention_head_dim")) {
    head_dim = get_int("attention_head_dim", true, 1);
  } else if (hidden && heads) {
    if (*hidden % *heads != 0)
      fail_key("num_attention_heads",
               fmt::format("hidden_size {} is not divisible by num_attention_heads {}, and the "
                           "config has no head_dim",
                           *hidden, *heads));
    else
      head_dim = *hidden / *heads;
  }
  if (heads && kv_heads && *heads % *kv_heads != 0)
    fail_key(find("num_key_value_heads") ? "num_key_value_heads" : "num_attention_heads",
             fmt::format("num_attention_heads {} is not divisible by num_key_value_heads {}",
                         *heads, *kv_heads));

  // Numerics.
  std::optional<double> eps =
      find("rms_norm_eps") ? get_double("rms_norm_eps") : get_double("layer_norm_epsilon");
  if (eps && !(*eps > 0))
    fail_key(find("rms_norm_eps") ? "rms_norm_eps" : "layer_norm_epsilon",
             fmt::format("must be positive, got {}", *eps));
  std::optional<double> theta = get_double("rope_theta");
  if (theta && !(*theta > 0))
    fail_key("rope_theta", fmt::format("must be positive, got {}", *theta));
  std::optional<std::string> dtype =
      find("torch_dtype") ? get_string("torch_dtype") : get_string("dtype");
  bool tie = true;
  if (const json* t = find("tie_word_embeddings")) {
    if (!t->is_boolean())
      fail_key("tie_word_embeddings", fmt::format("expected true or false, got {}", json_kind(*t)));
    else
      tie = t->get<bool>();
  }

  // Length limit: the smallest length key, times a RoPE scaling factor (vLLM's derivation).
  long long len = 0;
  std::string len_key;
  for (const auto& k : kLengthKeys) {
    if (!find(k)) continue;
    auto v = get_int(k, true, 1);
    if (v && (len == 0 || *v < len)) {
      len = *v;
      len_key = k;
    }
  }
  if (len_key.empty()) missing("length key (" + names(kLengthKeys) + ")");
  limit.tokens = len;
  limit.why = fmt::format("{} in {}", len_key, paths::filename(cfg_path));
  if (const json* rs = find("rope_scaling"); rs && rs->is_object() && len > 0) {
    std::string type = rs->value("rope_type", rs->value("type", std::string()));
    auto factor = rs->find("factor");
    if (factor != rs->end() && factor->is_number() && type != "su" && type != "longrope" &&
        type != "llama3") {
      if (type == "yarn") {
        auto orig = rs->find("original_max_position_embeddings");
        if (orig != rs->end() && orig->is_number_integer()) limit.tokens = orig->get<long long>();
      }
      limit.tokens =
          static_cast<long long>(static_cast<double>(limit.tokens) * factor->get<double>());
      limit.why += fmt::format(" x rope_scaling.factor {}", factor->get<double>());
    }
  }

  if (c.error_count() != errors_before) return false;
  m.hidden_size = *hidden;
  m.num_hidden_layers = *layers;
  m.num_attention_heads = *heads;
  m.num_key_value_heads = *kv_heads;
  m.head_dim = *head_dim;
  m.intermediate_size = *inter;
  m.vocab_size = *vocab;
  m.max_position_embeddings = static_cast<int>(len);
  m.rms_norm_eps = eps.value_or(1e-6);
  m.rope_theta = theta.value_or(10000.0);
  m.torch_dtype = dtype.value_or("bfloat16");
  m.tie_word_embeddings = tie;
  m.raw = std::move(cfg);
  return true;
}

bool is_power_of_two(long long v) { return v > 0 && (v & (v - 1)) == 0; }

// Reads `engine:`. `model` is null when the model could not be read (cross checks are skipped).
void load_engine(Checker& c, const MapView& ev, const ModelConfig* model, const LengthLimit& limit,
                 EngineConfig& e) {
  auto int_key = [&](const char* key, bool required, long long lo) -> std::optional<int> {
    const Entry* x = required ? ev.require(key) : ev.get(key);
    return x ? read_int_in(c, x->path, x->value, lo) : std::nullopt;
  };
  auto mns = int_key("max_num_seqs", true, 1);
  auto mnbt = int_key("max_num_batched_tokens", true, 1);
  auto mml = int_key("max_model_len", false, 1);
  if (mns) e.max_num_seqs = *mns;
  if (mnbt) e.max_num_batched_tokens = *mnbt;

  if (const Entry* x = ev.get("enable_chunked_prefill"))
    if (auto v = read_bool(c, x->path, x->value)) e.enable_chunked_prefill = *v;
  if (const Entry* x = ev.get("allow_long_max_model_len"))
    if (auto v = read_bool(c, x->path, x->value)) e.allow_long_max_model_len = *v;

  // max_model_len: default and ceiling from the model.
  const Entry* mml_entry = ev.get("max_model_len");
  if (mml) {
    e.max_model_len = *mml;
    if (model && *mml > limit.tokens && !e.allow_long_max_model_len)
      c.fail(mml_entry->path, mml_entry->value.Mark(),
             fmt::format("{} is longer than the model allows ({}, from {}); vLLM refuses this "
                         "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: set "
                         "engine.allow_long_max_model_len: true for that",
                         *mml, limit.tokens, limit.why));
  } else if (!mml_entry && model) {
    e.max_model_len =
        static_cast<int>(std::min<long long>(limit.tokens, std::numeric_limits<int>::max()));
  }

  if (mns && mnbt && *mnbt < *mns) {
    const Entry* x = ev.get("max_num_batched_tokens");
    c.fail(x->path, x->value.Mark(),
           fmt::format("{} is smaller than max_num_seqs ({}); vLLM requires "
                       "max_num_batched_tokens >= max_num_seqs",
                       *mnbt, *mns));
  }
  if (mnbt && e.max_model_len > 0 && !e.enable_chunked_prefill && *mnbt < e.max_model_len) {
    const Entry* x = ev.get("max_num_batched_tokens");
    c.fail(x->path, x->value.Mark(),
           fmt::format("{} is smaller than max_model_len ({}) with chunked prefill disabled, so "
                       "a long prompt could never be scheduled",
                       *mnbt, e.max_model_len));
  }

  if (const Entry* x = ev.get("block_size")) {
    if (auto v = read_int(c, x->path, x->value)) {
      if (std::find(kBlockSizes.begin(), kBlockSizes.end(), *v) == kBlockSizes.end())
        c.fail(x->path, x->value.Mark(),
               fmt::format("{} is not a block size vLLM accepts (1, 8, 16, 32, 64, 128, 256)", *v));
      else
        e.block_size = static_cast<int>(*v);
    }
  }

  const Entry* dtype_entry = ev.get("kv_cache_dtype");
  if (dtype_entry) {
    if (auto v = read_string(c, dtype_entry->path, dtype_entry->value)) {
      if (!contains(kKvCacheDtypes, *v))
        c.fail(dtype_entry->path, dtype_entry->value.Mark(),
               fmt::format("unknown kv_cache_dtype '{}'{}; known: {}", *v,
                           suggest(*v, kKvCacheDtypes), names(kKvCacheDtypes)));
      else
        e.kv_cache_dtype = *v;
    }
  }
  if (model && e.kv_cache_dtype.rfind("turboquant", 0) == 0 && !is_power_of_two(model->head_dim))
    c.fail(dtype_entry->path, dtype_entry->value.Mark(),
           fmt::format("{} needs a power-of-two head_dim (Hadamard rotation), but the model's "
                       "head_dim is {}",
                       e.kv_cache_dtype, model->head_dim));

  if (const Entry* x = ev.get("cudagraph_mode")) {
    if (auto v = read_string(c, x->path, x->value)) {
      if (auto mode = parse_cudagraph_mode(*v)) {
        e.cudagraph_mode = *mode;
      } else {
        std::vector<std::string> modes = {"none", "piecewise", "full", "full_decode_only",
                                          "full_and_piecewise"};
        c.fail(x->path, x->value.Mark(),
               fmt::format("unknown cudagraph_mode '{}'{}; known: {}", *v,
                           suggest(lower(*v), modes), names(modes)));
      }
    }
  }

  if (const Entry* x = ev.get("gpu_memory_utilization")) {
    if (auto v = read_number(c, x->path, x->value)) {
      if (!(*v > 0.0 && *v <= 1.0))
        c.fail(x->path, x->value.Mark(), fmt::format("must be in (0, 1], got {}", *v));
      else
        e.gpu_memory_utilization = *v;
    }
  }

  if (const Entry* x = ev.get("num_gpu_blocks")) {
    if (auto v = read_int(c, x->path, x->value)) {
      if (*v < 1) {
        c.fail(x->path, x->value.Mark(), fmt::format("must be at least 1, got {}", *v));
      } else {
        e.num_gpu_blocks = *v;
        if (e.max_model_len > 0 && *v * e.block_size < e.max_model_len)
          c.fail(
              x->path, x->value.Mark(),
              fmt::format("{} blocks of {} tokens hold {} tokens, fewer than max_model_len ({}); "
                          "vLLM refuses to start",
                          *v, e.block_size, *v * e.block_size, e.max_model_len));
      }
    }
  }

  if (const Entry* x = ev.get("cudagraph_capture_sizes")) {
    e.capture_sizes_listed = true;
    if (!x->value.IsSequence()) {
      c.fail(x->path, x->value.Mark(),
             fmt::format("expected a list of batch sizes, got {}", kind_name(kind_of(x->value))));
    } else if (x->value.size() == 0 && e.cudagraph_mode != CudaGraphMode::kNone) {
      c.fail(x->path, x->value.Mark(), "empty list; to capture no graphs set cudagraph_mode: none");
    } else {
      for (size_t i = 0; i < x->value.size(); ++i) {
        const YAML::Node& n = x->value[i];
        Path p = child(x->path, std::to_string(i));
        auto v = read_int(c, p, n);
        if (!v) continue;
        if (*v < 1) {
          c.fail(p, n.Mark(), fmt::format("capture sizes must be positive, got {}", *v));
        } else if (!e.cudagraph_capture_sizes.empty() && *v <= e.cudagraph_capture_sizes.back()) {
          c.fail(p, n.Mark(),
                 fmt::format("capture sizes must be strictly ascending: {} follows {}", *v,
                             e.cudagraph_capture_sizes.back()));
        } else if (mnbt && *v > *mnbt) {
          c.fail(p, n.Mark(),
                 fmt::format("capture size {} is above max_num_batched_tokens ({})", *v, *mnbt));
        } else {
          e.cudagraph_capture_sizes.push_back(static_cast<int>(*v));
        }
      }
    }
  } else if (mns && mnbt) {
    e.cudagraph_capture_sizes = default_capture_sizes(*mns, *mnbt);
  }
  if (e.cudagraph_mode == CudaGraphMode::kNone) e.cudagraph_capture_sizes.clear();
}

void load_requests(Checker& c, const Entry& rq, int max_model_len, std::vector<RequestSpec>& out) {
  if (!rq.value.IsSequence()) {
    c.fail(rq.path, rq.value.Mark(),
           fmt::format("expected a list of requests, got {}", kind_name(kind_of(rq.value))));
    return;
  }
  if (rq.value.size() == 0) {
    c.fail(rq.path, rq.value.Mark(), "empty: list at least the first request");
    return;
  }
  for (size_t i = 0; i < rq.value.size(); ++i) {
    const YAML::Node& n = rq.value[i];
    Path p = child(rq.path, std::to_string(i));
    if (i >= static_cast<size_t>(kMaxRequests)) {
      c.fail(p, n.Mark(),
             "at most two requests: the first request and (optionally) the steady-state one");
      break;
    }
    MapView mv(c, n, p, n.Mark(), &kRequestKeys);
    if (!mv.ok()) continue;
    RequestSpec r;
    std::optional<int> prompt, decode;
    if (const Entry* x = mv.require("prompt_tokens")) prompt = read_int_in(c, x->path, x->value, 1);
    if (const Entry* x = mv.require("decode_steps")) decode = read_int_in(c, x->path, x->value, 0);
    if (!prompt || !decode) continue;
    if (max_model_len > 0 && static_cast<long long>(*prompt) + *decode > max_model_len)
      c.fail(
          p, n.Mark(),
          fmt::format("prompt_tokens {} + decode_steps {} = {} exceeds max_model_len ({})", *prompt,
                      *decode, static_cast<long long>(*prompt) + *decode, max_model_len));
    out.push_back(RequestSpec{*prompt, *decode});
  }
}

void load_strategies(Checker& c, const Entry& st, const std::vector<std::string>& known_warmers,
                     std::vector<StrategySpec>& out) {
  MapView sv(c, st.value, st.path, st.key_node.Mark(), nullptr);
  if (!sv.ok()) return;
  if (sv.entries().empty()) {
    c.fail(st.path, st.value.Mark(), "no strategies: list at least one (e.g. `none: []`)");
    return;
  }
  static const std::regex name_re("[A-Za-z0-9_.+-]+");
  for (const auto& e : sv.entries()) {
    if (!std::regex_match(e.key, name_re)) {
      c.fail(e.path, e.key_node.Mark(),
             "a strategy name may hold only letters, digits and _ . + -");
      continue;
    }
    StrategySpec s;
    s.name = e.key;
    YAML::Node list;
    Path list_path;
    if (e.value.IsSequence()) {
      list = e.value;
      list_path = e.path;
    } else if (e.value.IsMap()) {
      MapView mv(c, e.value, e.path, e.key_node.Mark(), &kStrategyKeys);
      if (const Entry* w = mv.require("warmers")) {
        list = w->value;
        list_path = w->path;
        if (!list.IsSequence()) {
          c.fail(w->path, w->value.Mark(),
                 fmt::format("expected a list of warmer names, got {}", kind_name(kind_of(list))));
          list = YAML::Node();
        }
      }
      if (const Entry* a = mv.get("allow_hot_path_compiles"))
        if (auto v = read_bool(c, a->path, a->value)) s.allow_hot_path_compiles = *v;
    } else {
      c.fail(e.path, e.value.IsDefined() ? e.value.Mark() : e.key_node.Mark(),
             fmt::format("expected a list of warmer names or {{warmers: [...], "
                         "allow_hot_path_compiles: ...}}, got {}",
                         kind_name(kind_of(e.value))));
      continue;
    }
    if (list.IsSequence()) {
      for (size_t i = 0; i < list.size(); ++i) {
        Path p = child(list_path, std::to_string(i));
        auto w = read_string(c, p, list[i]);
        if (!w) continue;
        if (contains(s.warmers, *w)) {
          c.fail(p, list[i].Mark(), fmt::format("warmer '{}' is listed twice", *w));
          continue;
        }
        if (!known_warmers.empty() && !contains(known_warmers, *w)) {
          c.fail(p, list[i].Mark(),
                 fmt::format("unknown warmer '{}'{}; known warmers: {}", *w,
                             suggest(*w, known_warmers), names(known_warmers)));
          continue;
        }
        s.warmers.push_back(*w);
      }
    }
    out.push_back(std::move(s));
  }
}

// Reads `matrix:` into variants (their cross product, first axis slowest).
void load_matrix(Checker& c, const Entry& mx, std::vector<Variant>& out) {
  MapView mv(c, mx.value, mx.path, mx.key_node.Mark(), nullptr);
  if (!mv.ok()) return;
  struct Axis {
    Path path;
    std::vector<std::string> values;
  };
  std::vector<Axis> axes;
  for (const auto& e : mv.entries()) {
    Resolved r = resolve_key(e.key);
    if (!r.error.empty()) {
      c.fail(e.path, e.key_node.Mark(), r.error);
      continue;
    }
    bool clash = false;
    for (const auto& a : axes) {
      if (is_prefix(a.path, r.path) || is_prefix(r.path, a.path)) {
        c.fail(e.path, e.key_node.Mark(), fmt::format("overlaps the axis '{}'", join(a.path)));
        clash = true;
      }
    }
    if (clash) continue;
    if (!e.value.IsSequence() || e.value.size() == 0) {
      c.fail(e.path, e.value.IsDefined() ? e.value.Mark() : e.key_node.Mark(),
             "expected a non-empty list of values for this axis");
      continue;
    }
    Axis axis{r.path, {}};
    for (size_t i = 0; i < e.value.size(); ++i) {
      std::string text = flow_text(e.value[i]);
      if (contains(axis.values, text)) {
        c.fail(child(e.path, std::to_string(i)), e.value[i].Mark(),
               fmt::format("value {} is listed twice", text));
        continue;
      }
      axis.values.push_back(text);
    }
    axes.push_back(std::move(axis));
  }
  if (axes.empty()) return;

  // An axis is named by its last key part when that is unique among the axes.
  std::vector<std::string> labels;
  for (const auto& a : axes) {
    size_t same = std::count_if(axes.begin(), axes.end(),
                                [&](const Axis& b) { return b.path.back() == a.path.back(); });
    labels.push_back(same == 1 ? a.path.back() : join(a.path));
  }
  size_t total = 1;
  for (const auto& a : axes) {
    total *= a.values.size();
    if (total > kMaxVariants) {
      c.fail(mx.path, mx.key_node.Mark(),
             fmt::format("the matrix has more than {} variants", kMaxVariants));
      return;
    }
  }
  for (size_t k = 0; k < total; ++k) {
    Variant v;
    size_t rest = k;
    std::vector<size_t> idx(axes.size());
    for (size_t a = axes.size(); a-- > 0;) {
      idx[a] = rest % axes[a].values.size();
      rest /= axes[a].values.size();
    }
    for (size_t a = 0; a < axes.size(); ++a) {
      const std::string& value = axes[a].values[idx[a]];
      v.name += fmt::format("{}{}={}", a ? "," : "", labels[a], value);
      v.overrides.emplace_back(join(axes[a].path), value);
    }
    out.push_back(std::move(v));
  }
}

// Validates the (overridden) tree and fills a Scenario; problems are left in `c`.
Scenario build(Checker& c, const YAML::Node& root, const std::vector<std::string>& known_warmers) {
  Scenario s;
  s.name = paths::stem(c.file());
  MapView top(c, root, {}, YAML::Mark(), &kTopKeys);
  if (!top.ok()) return s;

  if (const Entry* x = top.get("name")) {
    if (auto v = read_string(c, x->path, x->value)) {
      if (v->empty())
        c.fail(x->path, x->value.Mark(), "must not be empty");
      else
        s.name = *v;
    }
  }
  if (const Entry* x = top.get("description"))
    if (auto v = read_string(c, x->path, x->value)) s.description = *v;

  bool model_ok = false;
  LengthLimit limit;
  if (const Entry* x = top.require("model")) {
    MapView mv(c, x->value, x->path, x->key_node.Mark(), &kModelKeys);
    if (mv.ok()) model_ok = load_model(c, mv, s.model, limit);
  }
  if (const Entry* x = top.require("engine")) {
    MapView ev(c, x->value, x->path, x->key_node.Mark(), &kEngineKeys);
    if (ev.ok()) load_engine(c, ev, model_ok ? &s.model : nullptr, limit, s.engine);
  }
  if (const Entry* x = top.require("requests"))
    load_requests(c, *x, s.engine.max_model_len, s.requests);
  if (const Entry* x = top.require("strategies"))
    load_strategies(c, *x, known_warmers, s.strategies);
  if (const Entry* x = top.get("matrix")) load_matrix(c, *x, s.variants);
  if (s.variants.empty()) s.variants.push_back(Variant{});
  if (const Entry* x = top.get("timeout_s")) {
    if (auto v = read_number(c, x->path, x->value)) {
      if (!(*v > 0) || std::isinf(*v))
        c.fail(x->path, x->value.Mark(),
               fmt::format("must be a positive number of seconds, got {}", *v));
      else
        s.timeout_s = *v;
    }
  }
  if (const Entry* x = top.get("archs")) {
    if (!x->value.IsSequence()) {
      c.fail(x->path, x->value.IsDefined() ? x->value.Mark() : x->key_node.Mark(),
             fmt::format("expected a list of archs like [sm_90, sm_100], got {}",
                         kind_name(kind_of(x->value))));
    } else {
      for (size_t i = 0; i < x->value.size(); ++i) {
        Path p = child(x->path, std::to_string(i));
        auto a = read_string(c, p, x->value[i]);
        if (!a) continue;
        const bool ok = a->size() > 3 && a->compare(0, 3, "sm_") == 0 &&
                        a->find_first_not_of("0123456789", 3) == std::string::npos;
        if (!ok) {
          c.fail(p, x->value[i].Mark(), fmt::format("'{}' is not an arch like sm_90", *a));
        } else {
          s.archs.push_back(*a);
        }
      }
    }
  }
  if (const Entry* x = top.get("expect")) {
    if (!x->value.IsMap())
      c.fail(x->path, x->value.IsDefined() ? x->value.Mark() : x->key_node.Mark(),
             fmt::format("expected a mapping, got {}", kind_name(kind_of(x->value))));
    else
      s.expect = to_json(x->value);
  }
  return s;
}

// Parses the scenario text, applies --set overrides and, when `variant` is given, that variant's
// overrides (dropping the matrix), then validates. Throws InputError.
Scenario build_from_text(const std::string& file, const std::string& text,
                         const std::vector<std::string>& sets,
                         const std::vector<std::string>& known_warmers, const Variant* variant) {
  Checker c(file);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}: invalid YAML: {}", mark_str(file, e.mark), e.msg));
  }
  if (!root.IsDefined() || root.IsNull())
    throw InputError(fmt::format("{}: the scenario is empty", file));
  if (!root.IsMap())
    throw InputError(
        fmt::format("{}:1:1: the scenario must be a mapping (name, model, engine, "
                    "requests, strategies, ...), not {}",
                    file, kind_name(kind_of(root))));

  apply_set_overrides(c, root, sets);

  if (variant) {
    const YAML::Node matrix = lookup(root, "matrix");
    const std::string label = fmt::format("variant '{}'", variant->name);
    for (const auto& [key, text_value] : variant->overrides) {
      Resolved r = resolve_key(key);
      if (!r.error.empty()) {
        c.fail_raw(fmt::format("{}: key '{}': {}", label, key, r.error));
        continue;
      }
      // Prefer the matrix's own node, so problems point into the file.
      YAML::Node value;
      bool from_file = false;
      if (matrix.IsMap()) {
        for (auto it = matrix.begin(); it != matrix.end() && !from_file; ++it) {
          if (!it->first.IsScalar() || resolve_key(it->first.Scalar()).path != r.path) continue;
          if (!it->second.IsSequence()) continue;
          for (const auto& candidate : it->second) {
            if (flow_text(candidate) == text_value) {
              value = static_cast<const YAML::Node&>(candidate);
              from_file = true;
              break;
            }
          }
        }
      }
      if (!from_file) {
        try {
          value = YAML::Load(text_value);
        } catch (const YAML::Exception& e) {
          c.fail_raw(fmt::format("{}: key '{}': value '{}' is not valid YAML: {}", label,
                                 join(r.path), text_value, e.msg));
          continue;
        }
      }
      std::string err = set_path(root, r.path, value);
      if (!err.empty()) {
        c.fail_raw(fmt::format("{}: key '{}': {}", label, join(r.path), err));
        continue;
      }
      c.add_override(OverrideRec{r.path, label, from_file,
                                 from_file ? value.Mark() : YAML::Mark::null_mark(),
                                 variant->name});
    }
    root.remove("matrix");
  }

  Scenario s = build(c, root, known_warmers);
  c.throw_if_failed();
  s.file = file;
  return s;
}

}  // namespace

Scenario load_scenario(const std::string& path, const std::vector<std::string>& set_overrides,
                       const std::vector<std::string>& known_warmers) {
  std::ifstream f(path, std::ios::binary);
  if (!f || paths::is_directory(path))
    throw InputError(
        fmt::format("{}: cannot read the scenario: {}", path,
                    paths::is_directory(path) ? "is a directory" : std::strerror(errno)));
  std::stringstream ss;
  ss << f.rdbuf();
  Scenario s = build_from_text(path, ss.str(), set_overrides, known_warmers, nullptr);
  s.source = Scenario::Source{ss.str(), set_overrides, known_warmers};

  // Check every variant now, so a bad matrix value is reported at load time.
  if (s.variants.size() > 1 || !s.variants[0].overrides.empty()) {
    std::string all;
    for (const auto& v : s.variants) {
      try {
        apply_variant(s, v);
      } catch (const InputError& e) {
        if (!all.empty()) all += '\n';
        all += e.what();
      }
    }
    if (!all.empty()) throw InputError(all);
  }
  return s;
}

Scenario apply_variant(const Scenario& s, const Variant& v) {
  Scenario out =
      build_from_text(s.file, s.source.text, s.source.set_overrides, s.source.known_warmers, &v);
  out.source = s.source;
  out.variants = {v};
  return out;
}

std::vector<int> default_capture_sizes(int max_num_seqs, int max_num_batched_tokens) {
  std::vector<int> sizes;
  if (max_num_seqs < 1 || max_num_batched_tokens < 1) return sizes;
  const long long cap = std::min<long long>(
      {2LL * max_num_seqs, 512LL, static_cast<long long>(max_num_batched_tokens)});
  for (int v : {1, 2, 4})
    if (v <= cap) sizes.push_back(v);
  for (int v = 8; v < 256 && v <= cap; v += 8) sizes.push_back(v);
  for (int v = 256; v <= cap; v += 16) sizes.push_back(v);
  return sizes;
}

const char* cudagraph_mode_name(CudaGraphMode mode) {
  switch (mode) {
    case CudaGraphMode::kNone:
      return "none";
    case CudaGraphMode::kPiecewise:
      return "piecewise";
    case CudaGraphMode::kFull:
      return "full";
    case CudaGraphMode::kFullDecodeOnly:
      return "full_decode_only";
    case CudaGraphMode::kFullAndPiecewise:
      return "full_and_piecewise";
  }
  return "?";
}

std::optional<CudaGraphMode> parse_cudagraph_mode(const std::string& name) {
  const std::string n = lower(name);
  for (auto m : {CudaGraphMode::kNone, CudaGraphMode::kPiecewise, CudaGraphMode::kFull,
                 CudaGraphMode::kFullDecodeOnly, CudaGraphMode::kFullAndPiecewise}) {
    if (n == cudagraph_mode_name(m)) return m;
  }
  return std::nullopt;
}

}  // namespace coldstart
