// coldstart: reading the HF config.json a scenario names (see hf_config.h).
#include "harness/replay/hf_config.h"
#include "harness/replay/config_json.h"

#include "harness/common/error.h"
#include "harness/common/checksum.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "harness/common/paths.h"

namespace coldstart::scenario_detail {
namespace {

// The most decoder layers a config may have. A harness bound, not an engine one (vLLM has none):
// the loader and every family build per-layer plans before anything runs, and 2^31 - 1 layers
// took the parent to 21 GB during validation. The deepest published decoders have about 126
// layers (Llama 3.1 405B), so this leaves room for stress shapes.
constexpr int kMaxLayers = 4096;

// The names torch_dtype (or dtype) may hold: transformers reads the value as an attribute of the
// torch module (getattr(torch, name), PretrainedConfig), so any other name fails there; these are
// torch's floating-point dtypes, the ones a checkpoint's weights are stored in.
const std::vector<std::string> kTorchDtypes = {
    "bfloat16", "float16", "half", "float32", "float", "float64", "double",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"};

// Whether `v` holds a NaN at any depth.
bool has_nan(const json& v) {
  if (v.is_number_float()) return std::isnan(v.get<double>());
  if (v.is_structured())
    for (const auto& x : v)
      if (has_nan(x)) return true;
  return false;
}

// Length keys vLLM considers when deriving a model's max length (the smallest one wins).
const std::vector<std::string> kLengthKeys = {
    "max_position_embeddings", "n_positions",         "max_seq_len",    "seq_length",
    "model_max_length",        "max_sequence_length", "max_seq_length", "seq_len"};

}  // namespace

const char* json_kind(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  return "a mapping";
}

namespace {

// Whether an override value may replace a config value: same JSON type, with an integer allowed
// for a float and anything allowed for null.
bool same_type(const json& cfg, const json& v) {
  if (cfg.is_null()) return true;
  if (cfg.is_number_float()) return v.is_number();
  if (cfg.is_number_integer()) return v.is_number_integer();
  return cfg.type() == v.type();
}

}  // namespace

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
  std::string original;
  const std::string why = paths::read_input_file(cfg_path, paths::kMaxScenarioBytes, original);
  if (!why.empty()) {
    c.fail(cfg_key, cfg_mark, fmt::format("cannot read HF config '{}': {}", m.config_file, why));
    return false;
  }
  // What a replay's parent compares its private copy of the file with (cli/run_inputs.h).
  m.config_fnv1a64 = checksum::fnv1a64_hex(original);
  const JsonSource src = prepare_json(original);
  if (!src.problems.empty()) {
    for (const auto& pr : src.problems) {
      c.fail_raw(fmt::format("{}:{}:{}: key '{}': {}", m.config_file, pr.line, pr.col,
                             pr.key.empty() ? "(top level)" : pr.key, pr.text),
                 1, pr.line, pr.col);
    }
    return false;
  }

  ConfigSax sax;
  json::sax_parse(src.text, &sax);
  if (sax.failed) {
    const size_t off = src.to_original(sax.error_byte > 0 ? sax.error_byte - 1 : 0);
    auto [line, col] = line_col(original, off);
    // The parser's message ends with "; last read: '<bytes>'", the file's own content: a config
    // path that names the wrong file (a secrets file) would put it in CI logs. Position only.
    std::string text = sax.error_text;
    if (const size_t at = text.find("; last read:"); at != std::string::npos) text.erase(at);
    c.fail(cfg_key, cfg_mark,
           fmt::format("invalid JSON in HF config {}:{}:{} (byte {}{}): {}", m.config_file, line,
                       col, off + 1,
                       sax.error_key.empty() ? "" : fmt::format(", key '{}'", sax.error_key),
                       text));
    return false;
  }
  json cfg = std::move(sax.root);
  if (!cfg.is_object()) {
    c.fail(cfg_key, cfg_mark,
           fmt::format("HF config '{}' is {}, not a JSON object", m.config_file, json_kind(cfg)));
    return false;
  }
  restore_nans(src, cfg);

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
      json v;
      try {
        v = to_json(e.value);
      } catch (const coldstart::InputError& err) {  // e.g. an alias that contains itself
        c.fail(e.path, e.value.Mark(), err.what());
        continue;
      }
      if (has_nan(v)) {
        // A config value is a size, a rate or a switch: a NaN is none of them, and JSON has no
        // NaN to hand the child (its scenario travels as JSON, where a NaN becomes null).
        c.fail(e.path, e.value.Mark(),
               "NaN is not a value an HF config key can take (use null to unset a key)");
        continue;
      }
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
    auto o = overridden.find(key.substr(0, key.find('.')));  // overrides replace top-level keys
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
  auto get_int = [&](const std::string& key, bool required, long long lo,
                     long long hi = std::numeric_limits<int>::max()) -> std::optional<int> {
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
    if (x < lo || x > hi) {
      fail_key(key, fmt::format("must be in [{}, {}], got {}", lo, hi, x));
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
  auto layers = get_int("num_hidden_layers", true, 1, kMaxLayers);
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
  if (dtype && std::find(kTorchDtypes.begin(), kTorchDtypes.end(), *dtype) == kTorchDtypes.end())
    fail_key(find("torch_dtype") ? "torch_dtype" : "dtype",
             fmt::format("'{}' is not a torch floating-point dtype (transformers reads it as "
                         "getattr(torch, name)); known: {}{}",
                         *dtype, names(kTorchDtypes), suggest(*dtype, kTorchDtypes)));
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
  const json* rs = find("rope_scaling");
  if (rs && !rs->is_object()) {
    fail_key("rope_scaling", fmt::format("expected a mapping or null, got {}", json_kind(*rs)));
  } else if (rs && len > 0) {
    // Read by hand: json::value() throws on a wrong type, and a huge or negative factor must not
    // reach a double-to-integer conversion (a wrapped limit was printed).
    auto text_of = [&](const char* key) {
      auto it = rs->find(key);
      if (it == rs->end() || it->is_null()) return std::string();
      if (!it->is_string()) {
        fail_key(fmt::format("rope_scaling.{}", key),
                 fmt::format("expected a string, got {}", json_kind(*it)));
        return std::string();
      }
      return it->get<std::string>();
    };
    std::string type = text_of("rope_type");
    if (type.empty()) type = text_of("type");
    // The values read, of the type they are read as (a wrong one was skipped silently).
    auto value_of = [&](const char* key, bool integer) -> const json* {
      auto it = rs->find(key);
      if (it == rs->end() || it->is_null()) return nullptr;
      if (integer ? !it->is_number_integer() : !it->is_number()) {
        fail_key(fmt::format("rope_scaling.{}", key),
                 fmt::format("expected {}, got {}", integer ? "an integer" : "a number",
                             json_kind(*it)));
        return nullptr;
      }
      return &*it;
    };
    const json* factor = value_of("factor", false);
    // A factor must be a positive number for every rope type, those whose length limit vLLM
    // leaves alone (su, longrope, llama3) included: transformers' rope validation expects a
    // float >= 1 (it only warns otherwise), and a NaN one gives no scaling at all.
    if (factor && !(factor->get<double>() > 0 && std::isfinite(factor->get<double>()))) {
      fail_key("rope_scaling.factor",
               fmt::format("must be a positive number, got {}", factor->get<double>()));
      factor = nullptr;
    }
    if (factor && type != "su" && type != "longrope" && type != "llama3") {
      const double f = factor->get<double>();
      double base = static_cast<double>(limit.tokens);
      std::string base_key = len_key;
      if (type == "yarn") {
        if (const json* orig = value_of("original_max_position_embeddings", true)) {
          base = orig->get<double>();
          base_key = "rope_scaling.original_max_position_embeddings";
        }
      }
      const double tokens = base * f;
      if (!(f > 0) || !std::isfinite(f)) {
        fail_key("rope_scaling.factor", fmt::format("must be a positive number, got {}", f));
      } else if (!(tokens >= 1)) {
        fail_key("rope_scaling.factor",
                 fmt::format("{} x {} {} gives a length limit below one token", f, base_key, base));
      } else {
        // Beyond an int the limit is no limit: max_model_len is an int.
        limit.tokens = tokens >= std::numeric_limits<int>::max()
                           ? std::numeric_limits<int>::max()
                           : static_cast<long long>(tokens);
        limit.why += fmt::format(" x rope_scaling.factor {}", f);
      }
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

}  // namespace coldstart::scenario_detail
