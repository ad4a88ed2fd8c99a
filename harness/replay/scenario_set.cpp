// coldstart: `--set KEY=VALUE` overrides and `matrix:` variants of a scenario (see
// scenario_internal.h). Both are written into the YAML tree before validation, so their values are
// checked exactly as the file's are; each is recorded in the Checker so a problem in it points at
// the --set argument or at the matrix value.
#include <fmt/format.h>

#include <algorithm>

#include "harness/common/paths.h"
#include "harness/replay/scenario_internal.h"

namespace coldstart::scenario_detail {
namespace {

constexpr size_t kMaxVariants = 1024;
// What the variants of one scenario may cost to validate in all (check_variant_work): each is
// validated from the text on its own, so a 1 MiB file with 1024 variants took 49 s to load.
constexpr size_t kMaxVariantBytes = 64u << 20;
constexpr size_t kMaxVariantValues = 1000000;

}  // namespace

// ------------------------------------------------------------------------------------------
// Keys given on the command line or as matrix axes

namespace {
// The error line of a key resolve_key refused, after `label` (the --set argument or the
// variant): "unknown key 'K'..." names the key already, so it is not named a third time.
std::string resolve_error_text(const std::string& label, const std::string& key,
                               const std::string& error) {
  return error.rfind("unknown key '", 0) == 0 ? fmt::format("{}: {}", label, error)
                                              : fmt::format("{}: key '{}': {}", label, key, error);
}
}  // namespace

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
    if (contains(engine_key_names(), first)) return {{"engine", first}, ""};
    std::vector<std::string> all = kTopKeys;
    all.insert(all.end(), engine_key_names().begin(), engine_key_names().end());
    return {{},
            "unknown key" + suggest(first, all) +
                "; a bare key must be an engine key or a top-level key, else write the dotted "
                "path (e.g. model.overrides.num_hidden_layers)"};
  }
  if (!contains(kTopKeys, first)) {
    if (contains(engine_key_names(), first))
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
    if (!contains(engine_key_names(), second))
      return {{}, fmt::format("unknown key 'engine.{}'{}", second, suggest(second, engine_key_names()))};
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
      // A key the file leaves out, set through a list index (engine.cudagraph_capture_sizes.0):
      // it starts as an empty list, so the index is checked against it, not read as a map key.
      if ((!next.IsDefined() || next.IsNull()) && is_index(path[i + 1])) {
        cur[part] = YAML::Node(YAML::NodeType::Sequence);
        next = cur[part];
      }
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

namespace {

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

}  // namespace

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
      c.fail_raw(resolve_error_text(label, key, r.error));
      continue;
    }
    YAML::Node value;
    if (text.empty()) {
      value = YAML::Node(std::string());
      value.SetTag("!");
    } else {
      FirstDocument doc;
      try {
        doc = load_first_document(text);
      } catch (const YAML::Exception& e) {
        c.fail_raw(fmt::format("{}: key '{}': value '{}' is not valid YAML: {}", label,
                               join(r.path), text, e.msg));
        continue;
      }
      value = doc.root;
      if (doc.second) {
        c.fail_raw(fmt::format("{}: key '{}': the value holds a second YAML document (after a "
                               "'---' line); it must be one value",
                               label, join(r.path)));
        continue;
      }
      if (expanded_size(value) > kMaxYamlValues) {
        c.fail_raw(fmt::format("{}: key '{}': {}", label, join(r.path), too_many_values_text()));
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

void apply_variant_overrides(Checker& c, YAML::Node root, const Variant& variant) {
  const YAML::Node matrix = lookup(root, "matrix");
  // A matrix given by `--set matrix=...` has no place in the file: its values are blamed on the
  // command line, not on a line of the scenario.
  const bool matrix_from_cli = c.from_command_line({"matrix"});
  const std::string label = matrix_from_cli ? fmt::format("--set matrix, variant '{}'", variant.name)
                                            : fmt::format("variant '{}'", variant.name);
  for (const auto& [key, text_value] : variant.overrides) {
    Resolved r = resolve_key(key);
    if (!r.error.empty()) {
      c.fail_raw(resolve_error_text(label, key, r.error));
      continue;
    }
    // Prefer the matrix's own node, so problems point into the file.
    YAML::Node value;
    bool from_file = false;
    if (matrix.IsMap() && !matrix_from_cli) {
      for (auto it = matrix.begin(); it != matrix.end() && !from_file; ++it) {
        if (!it->first.IsScalar() || resolve_key(it->first.Scalar()).path != r.path) continue;
        if (!it->second.IsSequence()) continue;
        const YAML::Node candidates = it->second;  // a copy: the proxy's member is a temporary
        for (const auto& candidate : candidates) {
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
                               from_file ? value.Mark() : YAML::Mark::null_mark(), variant.name});
  }
  root.remove("matrix");
}

// ------------------------------------------------------------------------------------------
// The matrix

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

void check_variant_work(Checker& c, const YAML::Node& root, size_t bytes, size_t variants) {
  const size_t values = expanded_size(root);
  if (bytes * variants <= kMaxVariantBytes && values * variants <= kMaxVariantValues) return;
  YAML::Mark at;
  for (auto it = root.begin(); it != root.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == "matrix") at = it->first.Mark();
  c.fail({"matrix"}, at,
         fmt::format("{} variants of a scenario of {} bytes and {} values: each variant is "
                     "validated on its own, so variants x bytes may be at most {} and variants x "
                     "values at most {}; use fewer variants or a smaller file",
                     variants, bytes, values, paths::size_text(kMaxVariantBytes),
                     kMaxVariantValues));
}

}  // namespace coldstart::scenario_detail
