// coldstart: typed reading of a YAML tree with error collection, for the scenario loader.
// Internal to harness/replay (scenario*.cpp, hf_config.cpp); not part of the public API.
//
// Values are typed as YAML 1.2's core schema reads plain scalars; quoted scalars are strings.
// Every problem is recorded in a Checker with the place it came from (a file position, a --set
// argument or a matrix value) and the walk goes on, so one load reports everything it can. Where
// a value came from is decided by its dotted path: a path at or below an override's path belongs
// to that override.
#pragma once

#include <yaml-cpp/yaml.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace coldstart::scenario_detail {

using Path = std::vector<std::string>;
using json = nlohmann::json;

// --- small helpers

std::string join(const Path& p);                  // "a.b.c"
Path child(const Path& p, const std::string& k);  // p + k
bool is_prefix(const Path& a, const Path& b);     // a is b or an ancestor of b
bool contains(const std::vector<std::string>& v, const std::string& s);
std::string lower(std::string s);
/// " (did you mean 'x'?)" for the closest known name, or "" when nothing is close.
std::string suggest(const std::string& got, const std::vector<std::string>& known);
std::string names(const std::vector<std::string>& v);  // "a, b, c"
/// "<file>:<line>:<col>" (1-based), or just the file for a null mark.
std::string mark_str(const std::string& file, const YAML::Mark& m);

/// The first YAML document of `text`, and where a second non-empty one starts (nullopt when there
/// is none; a trailing '---' with nothing after it is empty). Reads at most two documents: yaml-cpp
/// 0.7's LoadAll never ends on some inputs (a document starting with ',' yields documents forever;
/// yaml-cpp issue #1040, fixed after 0.8.0). Throws YAML::Exception for invalid YAML.
struct FirstDocument {
  YAML::Node root;
  std::optional<YAML::Mark> second;
};
FirstDocument load_first_document(const std::string& text);
bool is_index(const std::string& s);  // a short run of digits

// --- YAML values

enum class Kind { kNull, kBool, kInt, kFloat, kString, kList, kMap };

const char* kind_name(Kind k);  // "an integer", "a mapping", ...
bool is_quoted(const YAML::Node& n);
Kind kind_of(const YAML::Node& n);
double scalar_double(const std::string& s);
/// The node as JSON, typed as kind_of types it. Integers too large for 64 bits become doubles.
/// Throws InputError (naming the line) for nesting deeper than 64 levels, a mapping key that is
/// not a scalar, or a key repeated in one mapping (JSON would keep the last one silently).
json to_json(const YAML::Node& n);
/// A value as one line of YAML: plain scalars as written, quoted ones quoted, collections in flow
/// style. Used for variant names and variant overrides.
std::string flow_text(const YAML::Node& n);
/// The value of `key` in a mapping, or a null node. (operator[] would insert the key, and
/// its const form returns a node that throws when inspected.)
YAML::Node lookup(const YAML::Node& map, const std::string& key);

/// The most YAML values (scalars, lists, mappings) a scenario or a --set value may expand to,
/// aliases counted at every use: far above any real scenario, far below an alias bomb
/// ("billion laughs": 9 levels of `&a [*b, *b, ...]`), whose expansion every later walk of the
/// tree (typing, flow text, JSON) would otherwise pay for.
constexpr size_t kMaxYamlValues = 100000;

/// How many values `n` expands to, aliases counted at every use and nesting past 64 levels not
/// descended into (to_json reports that); stops counting once past `budget`, so it takes time
/// proportional to min(expanded size, budget).
size_t expanded_size(const YAML::Node& n, size_t budget = kMaxYamlValues);

/// The problem text of a value past kMaxYamlValues.
std::string too_many_values_text();

// --- problem collection

/// An override written into the tree before validation.
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

  /// The override that produced the value at `p` (the deepest one covering it; the later one on
  /// a tie), or null when the value comes from the file as written.
  const OverrideRec* origin(const Path& p) const;
  bool from_command_line(const Path& p) const;

  /// Records "<where>: key '<p>': <msg>", where <where> is the --set argument that produced `p`,
  /// else the file position `m` (or the matrix value's, for a key a variant created).
  void fail(const Path& p, const YAML::Mark& m, const std::string& msg) {
    fail_as(p, join(p), m, msg);
  }
  /// As fail, but the message names `key` while `p` (a path in the tree) decides where it points.
  void fail_as(const Path& p, const std::string& key, const YAML::Mark& m, const std::string& msg);

  /// A problem with a ready-made text. `group` orders the report: 0 the scenario file (by line),
  /// 1 the HF config (by line), 2 command-line and other sources (in the order found).
  void fail_raw(std::string text, int group = 2, int line = 0, int col = 0) {
    errors_.push_back(Problem{group, line, col, std::move(text)});
  }

  /// Throws InputError with every problem, one per line, sorted and without repeats.
  void throw_if_failed();

 private:
  std::string file_;
  struct Problem {
    int group, line, col;
    std::string text;
  };
  std::vector<OverrideRec> overrides_;
  std::vector<Problem> errors_;
};

/// One key of a mapping, with its path.
struct Entry {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
  Path path;
};

/// A mapping's entries, after reporting unknown keys (when `allowed` is given), duplicate keys and
/// keys that are not plain names. `at` is where to point for a missing key: the line of the
/// mapping's own key.
class MapView {
 public:
  MapView(Checker& c, const YAML::Node& node, Path path, YAML::Mark at,
          const std::vector<std::string>* allowed);

  bool ok() const { return ok_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const Path& path() const { return path_; }
  YAML::Mark at() const { return at_; }

  const Entry* get(const std::string& key) const;
  /// As get, reporting "missing (required)" at `at` when absent.
  const Entry* require(const std::string& key) const;

 private:
  Checker& c_;
  Path path_;
  YAML::Mark at_;
  bool ok_ = false;
  std::vector<Entry> entries_;
};

/// Records a problem at every node below `n` (at `path`; map keys included) that carries a YAML
/// tag the loader does not read: any but the non-specific ones and !!str, which the readers
/// honour (is_quoted). A tagged value (`!foo 4`, `!!binary ...`) was read as if untagged, so what
/// its author meant never reached the run. Visits at most kMaxYamlValues nodes and 64 levels (an
/// alias bomb is refuse_alias_bomb's to report). Returns true when it recorded one.
bool refuse_tags(Checker& c, const YAML::Node& n, const Path& path = {});

/// When the mapping `map` (at `path`) expands to more than `budget` values (expanded_size),
/// records the problem at the deepest mapping key whose value alone passes what is left (e.g.
/// model.overrides.x), so no later walk has to expand it, and returns true; else returns false.
/// Time: O(budget).
bool refuse_alias_bomb(Checker& c, const YAML::Node& map, const Path& path = {},
                       size_t budget = kMaxYamlValues);

// --- typed readers: each reports a wrong type and returns nullopt

std::optional<long long> read_int(Checker& c, const Path& p, const YAML::Node& n);
/// An int that must lie in [lo, hi].
std::optional<int> read_int_in(Checker& c, const Path& p, const YAML::Node& n, long long lo,
                               long long hi = std::numeric_limits<int>::max());
std::optional<double> read_number(Checker& c, const Path& p, const YAML::Node& n);
std::optional<bool> read_bool(Checker& c, const Path& p, const YAML::Node& n);
/// Any scalar but null reads as its text (so `name: 42` is the name "42").
std::optional<std::string> read_string(Checker& c, const Path& p, const YAML::Node& n);

}  // namespace coldstart::scenario_detail
