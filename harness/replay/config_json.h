// coldstart: the text layer of reading an HF config.json (internal to harness/replay): the pass
// that makes a config's text acceptable to nlohmann::json (bare Infinity / -Infinity / NaN
// replaced, positions mapped back, duplicate keys, deep nesting and NUL bytes found) and the SAX
// builder that gives every parse failure a position and a key. hf_config.cpp reads the values.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace coldstart::scenario_detail {

using json = nlohmann::json;

// The config text made acceptable to nlohmann::json, with a map back to the original positions,
// the position of every object key and the problems only the text shows.
struct JsonSource {
  std::string text;
  struct Edit {
    size_t new_pos, new_len, old_len;
  };
  std::vector<Edit> edits;
  /// 1-based line and column of each object key's first occurrence, by dotted path
  /// ("rope_scaling.factor", "compress_ratios.3"; a top-level key is its own path).
  std::map<std::string, std::pair<int, int>> key_pos;
  struct Problem {
    int line, col;
    std::string key, text;
  };
  std::vector<Problem> problems;  ///< duplicate keys; nesting deeper than kMaxJsonDepth; NULs
  /// Where a bare NaN token stood (handed to nlohmann::json as null): the path of each, as
  /// object keys and array indices from the top.
  std::vector<std::vector<std::string>> nan_paths;

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

/// One pass over the config text `in`: copies it, replacing the bare tokens Infinity, -Infinity
/// and NaN outside strings (NaN by null; JsonSource::nan_paths says where, see restore_nans),
/// notes where each object key starts, and finds duplicate keys (nlohmann::json keeps the last
/// one silently), NUL bytes outside strings (nlohmann::json stops reading at one, so whatever
/// follows it was ignored) and nesting deeper than 64 levels (the pass stops there).
JsonSource prepare_json(const std::string& in);

/// Puts a quiet NaN back at every place of `cfg` where `src` read a bare NaN token (prepare_json
/// handed nlohmann::json a null there), so a reader that needs a number sees a NaN it refuses
/// rather than an absent key it would default (a NaN rope factor was read as no scaling).
void restore_nans(const JsonSource& src, json& cfg);

/// 1-based line and column of byte `off` of `text`.
std::pair<int, int> line_col(const std::string& text, size_t off);

// Builds the json value of a config through nlohmann's SAX interface, so that every parse
// failure, a number too large for a double included (which json::parse throws without a
// position), comes with its byte offset and the key it was read for.
class ConfigSax {
 public:
  json root;
  bool failed = false;
  size_t error_byte = 0;    // 1-based, as nlohmann counts
  std::string error_text;   // the library's message without its "[json.exception...]" tag
  std::string error_key;    // the dotted key being read, or ""

  bool null() { return add(json(nullptr)); }
  bool boolean(bool v) { return add(json(v)); }
  bool number_integer(json::number_integer_t v) { return add(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return add(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return add(json(v)); }
  bool string(json::string_t& v) { return add(json(std::move(v))); }
  bool binary(json::binary_t& v) { return add(json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool key(json::string_t& k) {
    keys_.back() = k;
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t position, const std::string&, const json::exception& e) {
    failed = true;
    error_byte = position;
    std::string what = e.what();
    const size_t column = what.find("column ");
    const size_t colon = what.find(": ", column == std::string::npos ? 0 : column);
    const size_t tag = what.find("] ");
    if (column != std::string::npos && colon != std::string::npos)
      error_text = what.substr(colon + 2);
    else
      error_text = tag == std::string::npos ? what : what.substr(tag + 2);
    for (size_t f = 0; f < stack_.size(); ++f) {
      error_key += error_key.empty() ? "" : ".";
      error_key += stack_[f]->is_object() ? keys_[f] : std::to_string(stack_[f]->size());
    }
    return false;
  }

 private:
  std::vector<json*> stack_;       // the open containers
  std::vector<std::string> keys_;  // per open container: the current key (objects)

  json* place(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[keys_.back()];  // a duplicate key is reported by prepare_json
    slot = std::move(v);
    return &slot;
  }
  bool add(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& v) {
    stack_.push_back(place(std::move(v)));
    keys_.emplace_back();
    return true;
  }
  bool close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
};

}  // namespace coldstart::scenario_detail
