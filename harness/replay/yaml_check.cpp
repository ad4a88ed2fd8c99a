// coldstart: typed reading of a YAML tree with error collection (see yaml_check.h).
#include "harness/replay/yaml_check.h"

#include <sstream>

#include <yaml-cpp/eventhandler.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <map>
#include <tuple>

#include "harness/common/error.h"

namespace coldstart::scenario_detail {

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

namespace {

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

}  // namespace

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

namespace {
// Event handler that only notes whether a document holds anything and where that starts.
class DocumentProbe : public YAML::EventHandler {
 public:
  std::optional<YAML::Mark> first;
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { note(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override {
    note(m);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    note(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    note(m);
  }
  void OnMapEnd() override {}

 private:
  void note(const YAML::Mark& m) {
    if (!first) first = m;
  }
};
}  // namespace

FirstDocument load_first_document(const std::string& text) {
  FirstDocument out;
  out.root = YAML::Load(text);
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentProbe skip;
  if (!parser.HandleNextDocument(skip)) return out;
  DocumentProbe second;
  if (parser.HandleNextDocument(second)) out.second = second.first;
  return out;
}

bool is_index(const std::string& s) {
  return !s.empty() && s.size() < 9 && std::all_of(s.begin(), s.end(), ::isdigit);
}

// ------------------------------------------------------------------------------------------
// YAML values, typed as YAML 1.2's core schema reads plain scalars; quoted scalars are strings.

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

namespace {

// YAML 1.2 core-schema numbers, scanned by hand: linear in the scalar's length (std::regex
// recursed once per character and overflowed the stack on a 40,000-digit scalar).
bool digits(const std::string& s, size_t& i) {
  const size_t start = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i > start;
}

// [-+]?[0-9]+
bool is_int_text(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  return digits(s, i) && i == s.size();
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? | [-+]?.inf | .nan (any of 3 casings)
bool is_float_text(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  const std::string rest = s.substr(i);
  if (rest == ".inf" || rest == ".Inf" || rest == ".INF") return true;
  if (i == 0 && (s == ".nan" || s == ".NaN" || s == ".NAN")) return true;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits(s, i)) return false;
  } else {
    if (!digits(s, i)) return false;
    if (i < s.size() && s[i] == '.') {
      ++i;
      digits(s, i);
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (!digits(s, i)) return false;
  }
  return i == s.size();
}

}  // namespace

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
  if (is_int_text(s)) return Kind::kInt;
  if (is_float_text(s)) return Kind::kFloat;
  return Kind::kString;
}

double scalar_double(const std::string& s) {
  std::string t = lower(s);
  if (t == ".inf" || t == "+.inf") return std::numeric_limits<double>::infinity();
  if (t == "-.inf") return -std::numeric_limits<double>::infinity();
  if (t == ".nan") return std::numeric_limits<double>::quiet_NaN();
  return std::strtod(s.c_str(), nullptr);
}

namespace {

// Deeper than any scenario or config needs; an alias that refers to itself (`&c [*c]`) is
// infinitely deep and would otherwise recurse until the stack overflows.
constexpr int kMaxDepth = 64;

json to_json_at(const YAML::Node& n, int depth) {
  if (depth > kMaxDepth) {
    throw InputError(fmt::format("a value at line {} column {} nests more than {} levels deep (an "
                                 "alias that refers to itself?)",
                                 n.Mark().line + 1, n.Mark().column + 1, kMaxDepth));
  }
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
      for (const auto& e : n) a.push_back(to_json_at(e, depth + 1));
      return a;
    }
    case Kind::kMap: {
      json o = json::object();
      for (auto it = n.begin(); it != n.end(); ++it) {
        const YAML::Mark at = it->first.Mark();
        if (!it->first.IsScalar()) {
          throw InputError(fmt::format("a key at line {} column {} is {}, not a name",
                                       at.line + 1, at.column + 1, kind_name(kind_of(it->first))));
        }
        if (o.contains(it->first.Scalar())) {  // json would keep the last one silently
          throw InputError(fmt::format("duplicate key '{}' at line {} column {}",
                                       it->first.Scalar(), at.line + 1, at.column + 1));
        }
        o[it->first.Scalar()] = to_json_at(it->second, depth + 1);
      }
      return o;
    }
  }
  return nullptr;
}

size_t expanded_size_at(const YAML::Node& n, int depth, size_t budget, size_t& count) {
  ++count;
  if (count > budget || depth >= kMaxDepth) return count;
  if (n.IsSequence()) {
    for (const auto& e : n) {
      expanded_size_at(e, depth + 1, budget, count);
      if (count > budget) break;
    }
  } else if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end() && count <= budget; ++it) {
      expanded_size_at(it->first, depth + 1, budget, count);
      if (count <= budget) expanded_size_at(it->second, depth + 1, budget, count);
    }
  }
  return count;
}

}  // namespace

json to_json(const YAML::Node& n) { return to_json_at(n, 0); }

std::string too_many_values_text() {
  return fmt::format("expands to more than {} values, aliases counted at every use (an alias "
                     "bomb?); a scenario may hold at most {}",
                     kMaxYamlValues, kMaxYamlValues);
}

size_t expanded_size(const YAML::Node& n, size_t budget) {
  size_t count = 0;
  return expanded_size_at(n, 0, budget, count);
}

std::string flow_text(const YAML::Node& n) {
  if (n.IsScalar() && !is_quoted(n)) return n.Scalar();
  YAML::Emitter e;
  e.SetStringFormat(YAML::DoubleQuoted);
  e << YAML::Flow << n;
  return e.c_str();
}

YAML::Node lookup(const YAML::Node& map, const std::string& key) {
  if (map.IsMap()) {
    for (auto it = map.begin(); it != map.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  }
  return YAML::Node();
}

// ------------------------------------------------------------------------------------------
// Problem collection

const OverrideRec* Checker::origin(const Path& p) const {
  const OverrideRec* best = nullptr;
  for (const auto& o : overrides_) {
    if (is_prefix(o.path, p) && (!best || o.path.size() >= best->path.size())) best = &o;
  }
  return best;
}

bool Checker::from_command_line(const Path& p) const {
  const OverrideRec* o = origin(p);
  return o && !o->file_marks;
}

void Checker::fail_as(const Path& p, const std::string& key, const YAML::Mark& m,
                      const std::string& msg) {
  const OverrideRec* o = origin(p);
  std::string where;
  if (o && !o->file_marks) {
    where = o->label;
  } else {
    // A key that the override itself created has no position of its own; use the value's.
    where = mark_str(file_, (o && p == o->path) ? o->value_mark : m);
  }
  std::string text = fmt::format("{}: key '{}': {}", where, key, msg);
  if (o && o->file_marks && !o->variant.empty()) text += fmt::format(" [variant '{}']", o->variant);
  if (o && !o->file_marks) {
    fail_raw(std::move(text));
  } else {
    const YAML::Mark& mk = (o && p == o->path) ? o->value_mark : m;
    fail_raw(std::move(text), 0, mk.line, mk.column);
  }
}

void Checker::throw_if_failed() {
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

MapView::MapView(Checker& c, const YAML::Node& node, Path path, YAML::Mark at,
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
    // A copy: the iterator's value is a temporary proxy, so a reference to its member dangles
    // (ASan: stack-use-after-scope).
    const YAML::Node k = it->first;
    if (!k.IsScalar()) {
      c_.fail(path_, k.Mark(), "a key must be a name, not " + std::string(kind_name(kind_of(k))));
      continue;
    }
    std::string key = k.Scalar();
    Path kp = child(path_, key);
    auto prev = seen.find(key);
    if (prev != seen.end()) {
      c_.fail(kp, k.Mark(), fmt::format("duplicate key (first at line {})", prev->second.line + 1));
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

const Entry* MapView::get(const std::string& key) const {
  for (const auto& e : entries_)
    if (e.key == key) return &e;
  return nullptr;
}

const Entry* MapView::require(const std::string& key) const {
  const Entry* e = get(key);
  if (!e && ok_) c_.fail(child(path_, key), at_, "missing (required)");
  return e;
}

bool refuse_alias_bomb(Checker& c, const YAML::Node& map, const Path& path, size_t budget) {
  if (!map.IsMap() || budget < 1) return false;
  size_t used = 1;  // the mapping itself, as expanded_size counts it
  for (auto it = map.begin(); it != map.end(); ++it) {
    const size_t room = budget - used;
    const size_t key = expanded_size(it->first, room);
    const size_t value = key > room ? 0 : expanded_size(it->second, room - key);
    if (key + value > room) {
      const Path p = child(path, it->first.IsScalar() ? it->first.Scalar() : "?");
      // Into a mapping value for the deeper key; a few levels only (an alias cycle is endless).
      const bool deeper = key <= room && it->second.IsMap() && p.size() < 8 &&
                          refuse_alias_bomb(c, it->second, p, room - key);
      if (!deeper) c.fail(p, it->second.Mark(), too_many_values_text());
      return true;
    }
    used += key + value;
  }
  return false;
}

namespace {

// The tag of a node the readers take as written: none ("?" for a plain scalar or a collection,
// "!" for a quoted scalar) or !!str.
bool tag_is_read(const std::string& tag) {
  return tag.empty() || tag == "?" || tag == "!" || tag == "tag:yaml.org,2002:str";
}

// The tag as its author wrote it, for messages ("!!binary" rather than its expanded form).
std::string tag_text(const std::string& tag) {
  const std::string core = "tag:yaml.org,2002:";
  return tag.compare(0, core.size(), core) == 0 ? "!!" + tag.substr(core.size()) : tag;
}

bool refuse_tags_at(Checker& c, const YAML::Node& n, const Path& path, int depth, size_t& left) {
  if (!n.IsDefined() || left == 0 || depth > 64) return false;
  --left;
  bool found = false;
  if (!tag_is_read(n.Tag())) {
    c.fail(path, n.Mark(),
           fmt::format("YAML tag '{}': coldstart reads no tags but !!str (the value would be read "
                       "as if untagged); remove it",
                       tag_text(n.Tag())));
    found = true;
  }
  if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      const Path p = child(path, it->first.IsScalar() ? it->first.Scalar() : "?");
      found = refuse_tags_at(c, it->first, p, depth + 1, left) || found;
      found = refuse_tags_at(c, it->second, p, depth + 1, left) || found;
    }
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      found = refuse_tags_at(c, n[i], child(path, std::to_string(i)), depth + 1, left) || found;
  }
  return found;
}

}  // namespace

bool refuse_tags(Checker& c, const YAML::Node& n, const Path& path) {
  size_t left = kMaxYamlValues;
  return refuse_tags_at(c, n, path, 0, left);
}

// ------------------------------------------------------------------------------------------
// Typed readers

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

std::optional<int> read_int_in(Checker& c, const Path& p, const YAML::Node& n, long long lo,
                               long long hi) {
  auto v = read_int(c, p, n);
  if (!v) return std::nullopt;
  if (*v < lo || *v > hi) {
    if (hi == std::numeric_limits<int>::max() && *v > hi)
      c.fail(p, n.Mark(), fmt::format("must be at most {}, got {}", hi, *v));
    else if (hi == std::numeric_limits<int>::max())
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

std::optional<std::string> read_string(Checker& c, const Path& p, const YAML::Node& n) {
  if (!n.IsScalar() || kind_of(n) == Kind::kNull) {
    c.fail(p, n.IsDefined() ? n.Mark() : YAML::Mark::null_mark(),
           fmt::format("expected a string, got {}", kind_name(kind_of(n))));
    return std::nullopt;
  }
  return n.Scalar();
}

}  // namespace coldstart::scenario_detail
