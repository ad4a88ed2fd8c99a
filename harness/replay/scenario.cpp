// coldstart: scenario loading and validation. The file format is described in scenario.h.
//
// How it works: the scenario is read into a YAML tree, --set overrides (and, for a variant, the
// matrix values) are written into that tree (scenario_set.cpp), and then one pass walks the tree,
// checks every key and value, and fills a Scenario. Each problem is recorded in a Checker
// (yaml_check.h) with the place it came from and the walk goes on, so one load reports everything
// it can. The HF config is read by hf_config.cpp, the expect: rules by scenario_expect.cpp. Last,
// the caller's check_replayable looks at the finished scenario; its problems are mapped back to
// the lines of their keys here.
#include "harness/replay/scenario.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <regex>
#include <sstream>

#include "harness/common/error.h"
#include "harness/common/paths.h"
#include "harness/replay/engine_keys.h"
#include "harness/replay/hf_config.h"
#include "harness/replay/scenario_internal.h"

namespace coldstart {
namespace {

using namespace scenario_detail;  // NOLINT: this file is the loader those helpers exist for

constexpr size_t kMaxRequests = 64;

// Reads `requests:` (roles and arrivals as described in scenario.h).
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
  const size_t errors_before = c.error_count();
  bool roles_given = false;        // some entry has arrival_step or steady
  std::optional<Entry> steady_at;  // the `steady: true` of the steady request, once seen
  std::string steady_request;      // and that request's key, e.g. "requests.1"
  // Entries that left out prompt_tokens / decode_steps (allowed for the steady request only,
  // which then takes the first request's): index in `out`, path and mark for the error.
  struct Inherits {
    size_t index;
    Path path;
    YAML::Mark mark;
    bool prompt, decode;
  };
  std::vector<Inherits> inherits;
  for (size_t i = 0; i < rq.value.size(); ++i) {
    const YAML::Node& n = rq.value[i];
    Path p = child(rq.path, std::to_string(i));
    if (i >= kMaxRequests) {
      c.fail(p, n.Mark(), fmt::format("at most {} requests", kMaxRequests));
      break;
    }
    MapView mv(c, n, p, n.Mark(), &kRequestKeys);
    if (!mv.ok()) continue;
    std::optional<int> prompt, decode, arrival = 0;
    std::optional<bool> steady = false;
    // An entry may leave its shape out when it is the steady request (checked once the roles
    // are known: it then takes the first first-wave request's).
    const Entry* prompt_at = mv.get("prompt_tokens");
    const Entry* decode_at = mv.get("decode_steps");
    if (prompt_at) prompt = read_int_in(c, prompt_at->path, prompt_at->value, 1);
    if (decode_at) decode = read_int_in(c, decode_at->path, decode_at->value, 0);
    const bool partial = !prompt_at || !decode_at;
    if (partial) {
      inherits.push_back({out.size(), p, n.Mark(), !prompt_at, !decode_at});
      if (!prompt_at) prompt = 0;
      if (!decode_at) decode = 0;
    }
    const Entry* arrival_at = mv.get("arrival_step");
    // Bounded so every scheduler step index stays far inside what a results file holds (2^30):
    // an arrival past 2^20 idle steps is no startup behaviour anyway.
    if (arrival_at) arrival = read_int_in(c, arrival_at->path, arrival_at->value, 0, 1 << 20);
    const Entry* steady_here = mv.get("steady");
    if (steady_here) steady = read_bool(c, steady_here->path, steady_here->value);
    roles_given = roles_given || arrival_at || steady_here;
    if (steady && *steady) {
      if (steady_at) {
        c.fail(steady_here->path, steady_here->value.Mark(),
               fmt::format("a second steady request ({} is one); at most one request is steady",
                           steady_request));
      } else {
        steady_at = *steady_here;
        steady_request = join(p);
      }
      if (arrival && *arrival != 0)
        c.fail(arrival_at->path, arrival_at->value.Mark(),
               "a steady request runs alone once the first wave has finished; it takes no "
               "arrival_step");
    }
    if (!prompt || !decode || !arrival || !steady) {
      if (!inherits.empty() && inherits.back().index == out.size()) inherits.pop_back();
      continue;
    }
    // (A shape taken in part from the first request is checked once it is complete.)
    // The request emits 1 + decode_steps tokens (the first sampled token, then one per decode
    // step). vLLM's scheduler finishes a request once prompt + output tokens reach max_model_len
    // (check_stop, vllm/v1/core/sched/utils.py: FINISHED_LENGTH_CAPPED), so a longer one would
    // stop before its last decode steps: not replayable as written.
    const long long total = static_cast<long long>(*prompt) + 1 + *decode;
    if (!partial && max_model_len > 0 && total > max_model_len)
      c.fail(p, n.Mark(),
             fmt::format("prompt_tokens {} + 1 + decode_steps {} = {} tokens exceeds "
                         "max_model_len ({}): vLLM stops a request at max_model_len tokens "
                         "(the first sampled token and each decode step add one)",
                         *prompt, *decode, total, max_model_len));
    out.push_back(RequestSpec{*prompt, *decode, *arrival, *steady});
  }
  if (c.error_count() != errors_before) return;
  if (!roles_given) {
    // The one-or-two-request format: [first request, steady request].
    if (out.size() == 2) out[1].steady = true;
  } else if (steady_at && out.size() == 1) {
    c.fail(steady_at->path, steady_at->value.Mark(),
           "the only request is steady; at least one request must be in the first wave (steady: "
           "false), the first of which gives TTFT");
  }
  // The steady request measures the first request's work once warm: what it leaves out it takes
  // from the first request as the matrix and --set left it, so an axis over the first request's
  // shape moves the steady one with it. A steady request that states a shape pins it.
  const RequestSpec* first = nullptr;  // the first first-wave request: it states its shape
  for (const RequestSpec& r : out)
    if (!first && !r.steady) first = &r;
  for (const Inherits& h : inherits) {
    RequestSpec& r = out[h.index];
    if (!r.steady) {
      const std::string key = h.prompt ? "prompt_tokens" : "decode_steps";
      c.fail(child(h.path, key), h.mark,
             "missing (required: only the steady request may leave its shape out; it then takes "
             "the first request's)");
      continue;
    }
    if (!first) continue;  // reported above: no first-wave request
    if (h.prompt) r.prompt_tokens = first->prompt_tokens;
    if (h.decode) r.decode_steps = first->decode_steps;
    const long long total = static_cast<long long>(r.prompt_tokens) + 1 + r.decode_steps;
    if (max_model_len > 0 && total > max_model_len)  // as for a complete shape (above)
      c.fail(h.path, h.mark,
             fmt::format("prompt_tokens {} + 1 + decode_steps {} ({} taken from the first "
                         "request) = {} tokens exceeds max_model_len ({}): vLLM stops a request "
                         "at max_model_len tokens",
                         r.prompt_tokens, r.decode_steps,
                         h.prompt && h.decode ? "both" : h.prompt ? "prompt_tokens" : "decode_steps",
                         total, max_model_len));
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

// Reports the problems check_replayable found, each at the line of its key (see "Rules" in
// scenario.h): a key of the HF config at its model.overrides entry, else at model.config; a key
// the tree holds at its value; an absent key at the nearest enclosing key the tree holds.
void report_replay_problems(Checker& c, const YAML::Node& root,
                            const std::vector<ScenarioProblem>& problems) {
  for (const auto& pr : problems) {
    if (pr.key.empty()) {
      c.fail_raw(fmt::format("{}: {}", c.file(), pr.message), 0);
      continue;
    }
    Path key;
    {
      std::string cur;
      for (char ch : pr.key) {
        if (ch == '.') {
          key.push_back(cur);
          cur.clear();
        } else {
          cur += ch;
        }
      }
      key.push_back(cur);
    }
    Path at = key;  // the tree path the problem points at
    if (key.size() >= 2 && key[0] == "model" && key[1] != "config" && key[1] != "overrides") {
      const YAML::Node ov = lookup(lookup(lookup(root, "model"), "overrides"), key[1]);
      at = (ov.IsDefined() && !ov.IsNull()) ? Path{"model", "overrides", key[1]}
                                            : Path{"model", "config"};
    }
    // Walk the tree as far as `at` goes.
    YAML::Node cur = root;
    YAML::Mark mark = root.Mark();  // the value's position, or the enclosing key's
    Path reached;
    for (const auto& part : at) {
      YAML::Node next;
      YAML::Mark next_mark;
      bool found = false;
      if (cur.IsMap()) {
        for (auto it = cur.begin(); it != cur.end(); ++it) {
          if (it->first.IsScalar() && it->first.Scalar() == part) {
            next.reset(it->second);
            next_mark = it->first.Mark();
            found = true;
            break;
          }
        }
      } else if (cur.IsSequence() && is_index(part) && std::stoul(part) < cur.size()) {
        next.reset(cur[std::stoul(part)]);
        next_mark = next.Mark();
        found = true;
      }
      if (!found) break;
      reached.push_back(part);
      cur.reset(next);
      mark = reached.size() == at.size() ? cur.Mark() : next_mark;
    }
    c.fail_as(at, pr.key, mark, pr.message);
  }
}

// Validates the (overridden) tree and fills a Scenario; problems are left in `c`.
// `written_strategies` and `written_variants` are the names an expect rule may use besides the
// final ones: those of the file as written, before --set changed strategies or dropped axes.
Scenario build(Checker& c, const YAML::Node& root, const ScenarioRules& rules,
               const std::vector<std::string>& written_strategies,
               const std::vector<std::string>& written_variants) {
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
    MapView ev(c, x->value, x->path, x->key_node.Mark(), &engine_key_names());
    if (ev.ok()) load_engine(c, ev, model_ok ? &s.model : nullptr, limit, s.engine);
  }
  if (const Entry* x = top.require("requests"))
    load_requests(c, *x, s.engine.max_model_len, s.requests);
  if (const Entry* x = top.require("strategies"))
    load_strategies(c, *x, rules.known_warmers, s.strategies);
  if (const Entry* x = top.get("matrix")) load_matrix(c, *x, s.variants);
  if (s.variants.empty()) s.variants.push_back(Variant{});
  if (const Entry* x = top.get("timeout_s")) {
    if (auto v = read_number(c, x->path, x->value)) {
      if (!(*v > 0) || std::isinf(*v) || *v > kMaxTimeoutS)
        c.fail(x->path, x->value.Mark(),
               fmt::format("must be a positive number of seconds, at most {:g} (7 days), got {}",
                           kMaxTimeoutS, *v));
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
    std::vector<std::string> strategies = written_strategies, variants = written_variants;
    for (const auto& st : s.strategies)
      if (!contains(strategies, st.name)) strategies.push_back(st.name);
    for (const auto& v : s.variants)
      if (!contains(variants, v.name)) variants.push_back(v.name);
    // The largest world size any variant runs (a matrix may vary tensor_parallel_size: then the
    // rules' ranks are not checked here).
    int world = s.engine.tensor_parallel_size;
    for (const auto& v : s.variants)
      if (v.name.find("tensor_parallel_size=") != std::string::npos) world = 0;
    load_expectations(c, *x, strategies, variants, s.expectations, world);
    if (x->value.IsSequence()) {
      try {
        s.expect = to_json(x->value);
      } catch (const InputError& e) {  // e.g. an alias that contains itself
        c.fail({"expect"}, x->value.Mark(), e.what());
      }
    }
  }
  return s;
}

// Parses the scenario text, applies --set overrides and, when `variant` is given, that variant's

// The names an expect rule may use from the file as written: its strategies and matrix variants.
void written_names(const YAML::Node& root, std::vector<std::string>& strategies,
                   std::vector<std::string>& variants) {
  const YAML::Node st = lookup(root, "strategies");
  if (st.IsMap())
    for (auto it = st.begin(); it != st.end(); ++it)
      if (it->first.IsScalar()) strategies.push_back(it->first.Scalar());
  const YAML::Node mx = lookup(root, "matrix");
  if (mx.IsMap()) {
    Checker ignored("");  // problems in the matrix are reported by the real load
    std::vector<Variant> vs;
    load_matrix(ignored, Entry{"matrix", YAML::Node(), mx, {"matrix"}}, vs);
    for (const auto& v : vs) variants.push_back(v.name);
  }
}

// Parses the scenario text, applies --set overrides and, when `variant` is given, that variant's
// overrides (dropping the matrix), then validates, and runs check_replayable on a scenario that
// can be replayed as it is (one without matrix variants, or a variant). Throws InputError.
Scenario build_from_text(const std::string& file, const std::string& text,
                         const std::vector<std::string>& sets, const ScenarioRules& rules,
                         const Variant* variant) {
  Checker c(file);
  FirstDocument doc;
  try {
    doc = load_first_document(text);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}: invalid YAML: {}", mark_str(file, e.mark), e.msg));
  }
  YAML::Node root = doc.root;
  if (doc.second) {
    throw InputError(fmt::format("{}: a second YAML document starts here (after a '---' line); a "
                                 "scenario is one document, and YAML readers ignore the rest",
                                 mark_str(file, *doc.second)));
  }
  if (!root.IsDefined() || root.IsNull())
    throw InputError(fmt::format("{}: the scenario is empty", file));
  if (!root.IsMap())
    throw InputError(
        fmt::format("{}:1:1: the scenario must be a mapping (name, model, engine, "
                    "requests, strategies, ...), not {}",
                    file, kind_name(kind_of(root))));
  // An alias bomb is refused before any walk expands it.
  if (refuse_alias_bomb(c, root)) c.throw_if_failed();

  std::vector<std::string> written_strategies, written_variants;
  written_names(root, written_strategies, written_variants);
  apply_set_overrides(c, root, sets);
  if (variant) apply_variant_overrides(c, root, *variant);
  // A tag would be read as if it were not there (after the overrides: a --set value is YAML too).
  if (refuse_tags(c, root)) c.throw_if_failed();

  Scenario s = build(c, root, rules, written_strategies, written_variants);
  s.file = file;
  if (variant) s.variants = {*variant};
  if (!variant && s.variants.size() > 1) check_variant_work(c, root, text.size(), s.variants.size());
  const bool replayable_as_is =
      variant || (s.variants.size() == 1 && s.variants[0].overrides.empty());
  if (rules.check_replayable && replayable_as_is && c.error_count() == 0)
    report_replay_problems(c, root, rules.check_replayable(s));
  c.throw_if_failed();
  return s;
}

}  // namespace

namespace {

// load_scenario without the note on --set.
Scenario load_and_check(const std::string& path, const std::vector<std::string>& set_overrides,
                        const ScenarioRules& rules) {
  std::string text;
  const std::string why = paths::read_input_file(path, paths::kMaxScenarioBytes, text);
  if (!why.empty()) throw InputError(fmt::format("{}: cannot read the scenario: {}", path, why));
  Scenario s = build_from_text(path, text, set_overrides, rules, nullptr);
  s.source = Scenario::Source{std::move(text), set_overrides, rules};

  // Check every variant now, so a bad matrix value is reported at load time. A problem outside
  // the matrix values reads the same in every variant: it is listed once.
  if (s.variants.size() > 1 || !s.variants[0].overrides.empty()) {
    std::vector<std::string> lines;
    for (const auto& v : s.variants) {
      try {
        apply_variant(s, v);
      } catch (const InputError& e) {
        std::istringstream text(e.what());
        for (std::string line; std::getline(text, line);)
          if (!contains(lines, line)) lines.push_back(line);
      }
    }
    if (!lines.empty()) {
      std::string all;
      for (const auto& line : lines) all += (all.empty() ? "" : "\n") + line;
      throw InputError(all);
    }
  }
  return s;
}

// A refusal at a line of the file may come from a value --set gave another key (a request longer
// than the max_model_len --set lowered): say which overrides the checks saw, unless every line of
// the message already names its --set.
[[noreturn]] void rethrow_naming_overrides(const InputError& e,
                                          const std::vector<std::string>& set_overrides) {
  const std::string what = e.what();
  bool all_name_set = true;
  std::istringstream lines(what);
  for (std::string line; std::getline(lines, line);)
    all_name_set = all_name_set && line.find("--set ") != std::string::npos;
  if (set_overrides.empty() || all_name_set) throw;  // as it was
  std::string sets;
  for (const std::string& o : set_overrides) sets += (sets.empty() ? "--set " : ", --set ") + o;
  throw InputError(what + "\n(checked with " + sets + " applied)");
}

}  // namespace

Scenario load_scenario(const std::string& path, const std::vector<std::string>& set_overrides,
                       const ScenarioRules& rules) {
  try {
    return load_and_check(path, set_overrides, rules);
  } catch (const InputError& e) {
    rethrow_naming_overrides(e, set_overrides);
  }
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& set_overrides,
                       const std::vector<std::string>& known_warmers) {
  ScenarioRules rules;
  rules.known_warmers = known_warmers;
  return load_scenario(path, set_overrides, rules);
}

Scenario apply_variant(const Scenario& s, const Variant& v) {
  Scenario out = build_from_text(s.file, s.source.text, s.source.set_overrides, s.source.rules, &v);
  out.source = s.source;
  return out;
}

}  // namespace coldstart
