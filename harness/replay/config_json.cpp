// coldstart: the text layer of reading an HF config.json (see config_json.h).
#include "harness/replay/config_json.h"

#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <limits>

namespace coldstart::scenario_detail {
namespace {

// What a bare Infinity in a config.json is read as.
constexpr const char* kInfText = "1.7976931348623157e308";

// Deeper than any HF config nests; a deeper one (e.g. 16 MiB of '[') would overflow the stack of
// the recursive json copies and comparisons later.
constexpr size_t kMaxJsonDepth = 64;

bool ident_char(char ch) {
  return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.';
}

// A key as written between its quotes, with escapes decoded ("\u0061" is "a").
std::string decode_key(const std::string& raw) {
  if (raw.find('\\') == std::string::npos) return raw;
  try {
    return json::parse("\"" + raw + "\"").get<std::string>();
  } catch (const json::exception&) {
    return raw;  // the parse proper reports the bad escape
  }
}

}  // namespace

JsonSource prepare_json(const std::string& in) {
  JsonSource out;
  out.text.reserve(in.size() + 32);
  struct Frame {
    char open;                              // '{' or '['
    std::string key;                        // '{': the current key
    long index = 0;                         // '[': the current element
    std::map<std::string, int> first_line;  // '{': the keys seen and their lines
  };
  std::vector<Frame> stack;
  // The dotted path of the value the first `depth` frames lead to, then `key` when given.
  auto path_of = [&](size_t depth, const std::string& key) {
    std::string p;
    for (size_t f = 0; f < depth; ++f) {
      p += p.empty() ? "" : ".";
      p += stack[f].open == '{' ? stack[f].key : std::to_string(stack[f].index);
    }
    return key.empty() ? p : (p.empty() ? key : p + "." + key);
  };
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
      const std::string raw = in.substr(start, i - start);
      advance(1);  // closing quote
      if (!stack.empty() && stack.back().open == '{') {
        size_t j = i;
        while (j < in.size() && std::isspace(static_cast<unsigned char>(in[j]))) ++j;
        if (j < in.size() && in[j] == ':') {
          Frame& f = stack.back();
          f.key = decode_key(raw);
          const std::string path = path_of(stack.size() - 1, f.key);
          auto [seen, first] = f.first_line.emplace(f.key, kline);
          if (!first) {
            out.problems.push_back(
                {kline, kcol, path,
                 fmt::format("duplicate key (first at line {}); a JSON reader keeps one of them "
                             "silently",
                             seen->second)});
          } else {
            out.key_pos.emplace(path, std::make_pair(kline, kcol));
          }
        }
      }
      continue;
    }
    if (ch == '{' || ch == '[') {
      if (stack.size() >= kMaxJsonDepth) {
        out.problems.push_back({line, col, path_of(stack.size(), ""),
                                fmt::format("nests more than {} levels deep", kMaxJsonDepth)});
        return out;
      }
      stack.push_back(Frame{ch, "", 0, {}});
    } else if ((ch == '}' || ch == ']') && !stack.empty()) {
      stack.pop_back();
    } else if (ch == ',' && !stack.empty() && stack.back().open == '[') {
      ++stack.back().index;
    }
    if (ch == '-' && token_at("-Infinity")) {
      replace("-Infinity", std::string("-") + kInfText);
    } else if (ch == 'I' && token_at("Infinity")) {
      replace("Infinity", kInfText);
    } else if (ch == 'N' && token_at("NaN")) {
      std::vector<std::string> where;
      for (const Frame& f : stack)
        where.push_back(f.open == '{' ? f.key : std::to_string(f.index));
      out.nan_paths.push_back(std::move(where));
      replace("NaN", "null");
    } else if (ch == '\0') {
      // nlohmann::json's lexer takes a NUL for the end of the input: whatever follows it (a
      // second object, the rest of the file) was ignored without a word.
      out.problems.push_back({line, col, path_of(stack.size(), ""),
                              "a NUL byte; JSON text has none (a reader stops at it and ignores "
                              "the rest of the file)"});
      return out;
    } else {
      advance(1);
    }
  }
  return out;
}

void restore_nans(const JsonSource& src, json& cfg) {
  for (const auto& where : src.nan_paths) {
    json* at = &cfg;
    for (const std::string& part : where) {
      if (at->is_object() && at->contains(part)) {
        at = &(*at)[part];
      } else if (at->is_array() && !part.empty() &&
                 part.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(part) < at->size()) {
        at = &(*at)[std::stoul(part)];
      } else {
        at = nullptr;
        break;
      }
    }
    if (at != nullptr && at->is_null()) *at = std::numeric_limits<double>::quiet_NaN();
  }
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

}  // namespace coldstart::scenario_detail
