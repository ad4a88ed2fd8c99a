#include "harness/kernels/source_util.h"

#include <cctype>
#include <cstring>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/common/error.h"

// Embedded by cs_embed_sources (harness/kernels/CMakeLists.txt).
extern const char* const kSource_device_common;

namespace coldstart::kernels {

const char* device_common_source() { return kSource_device_common; }

namespace {

// ---------------------------------------------------------------- signature scanner
// A small tokenizer for kernel files, enough to read an extern "C" signature: identifiers,
// literals and one-character punctuation, with comments dropped and each #directive (with its
// continuation lines) kept as one token so that nothing inside it is mistaken for code.

enum class Tok { kIdent, kNumber, kString, kChar, kPunct, kDirective };

struct Token {
  Tok kind;
  std::string_view text;
  int line;
};

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::vector<Token> tokenize(std::string_view s, const char* entry) {
  std::vector<Token> out;
  size_t i = 0;
  int line = 1;
  bool line_start = true;  // only blanks since the last newline: a '#' here opens a directive
  auto fail = [&](const char* what) {
    throw Error(fmt::format("kernel {}: {} at line {} of its source", entry, what, line));
  };
  // Skips a quoted literal opened at s[i] (quote char q), honouring backslash escapes.
  auto skip_quoted = [&](char q) {
    size_t j = i + 1;
    while (j < s.size() && s[j] != q) {
      if (s[j] == '\n') fail("unterminated literal");
      j += s[j] == '\\' ? 2 : 1;
    }
    if (j >= s.size()) fail("unterminated literal");
    return j + 1;
  };
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
      line_start = true;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      const size_t end = s.find("*/", i + 2);
      if (end == std::string_view::npos) fail("unterminated comment");
      for (size_t j = i; j < end; ++j) line += s[j] == '\n';
      i = end + 2;
      continue;
    }
    const size_t start = i;
    const int start_line = line;
    if (c == '#' && line_start) {
      // To the end of the line, following backslash continuations.
      while (i < s.size() && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\n') {
          ++line;
          ++i;
        }
        ++i;
      }
      out.push_back({Tok::kDirective, s.substr(start, i - start), start_line});
      continue;
    }
    line_start = false;
    if (is_ident_start(c)) {
      while (i < s.size() && is_ident_char(s[i])) ++i;
      const std::string_view id = s.substr(start, i - start);
      // A raw string literal: R"delim( ... )delim", with an optional encoding prefix.
      if (i < s.size() && s[i] == '"' && !id.empty() && id.back() == 'R' &&
          (id == "R" || id == "LR" || id == "uR" || id == "UR" || id == "u8R")) {
        const size_t open = s.find('(', i);
        if (open == std::string_view::npos) fail("malformed raw string literal");
        const std::string close = ")" + std::string(s.substr(i + 1, open - i - 1)) + "\"";
        const size_t end = s.find(close, open);
        if (end == std::string_view::npos) fail("unterminated raw string literal");
        for (size_t j = i; j < end; ++j) line += s[j] == '\n';
        i = end + close.size();
        out.push_back({Tok::kString, s.substr(start, i - start), start_line});
        continue;
      }
      // An encoding prefix of an ordinary literal (L"...", u8'x') belongs to that literal.
      if (i < s.size() && (s[i] == '"' || s[i] == '\'') &&
          (id == "L" || id == "u" || id == "U" || id == "u8")) {
        const char q = s[i];
        i = skip_quoted(q);
        out.push_back({q == '"' ? Tok::kString : Tok::kChar, s.substr(start, i - start), start_line});
        continue;
      }
      out.push_back({Tok::kIdent, id, start_line});
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      // A pp-number: digits, letters, '.', digit separators, and a sign after an exponent.
      ++i;
      while (i < s.size()) {
        const char d = s[i];
        if (is_ident_char(d) || d == '.' || d == '\'') {
          ++i;
        } else if ((d == '+' || d == '-') && (std::strchr("eEpP", s[i - 1]) != nullptr)) {
          ++i;
        } else {
          break;
        }
      }
      out.push_back({Tok::kNumber, s.substr(start, i - start), start_line});
      continue;
    }
    if (c == '"' || c == '\'') {
      i = skip_quoted(c);
      out.push_back({c == '"' ? Tok::kString : Tok::kChar, s.substr(start, i - start), start_line});
      continue;
    }
    ++i;
    out.push_back({Tok::kPunct, s.substr(start, 1), start_line});
  }
  return out;
}

bool is_punct(const Token& t, char c) { return t.kind == Tok::kPunct && t.text[0] == c; }

// Brackets: (), [], {}, and with `angles` also <> (only inside a parameter, where '<' opens
// template arguments; elsewhere it may be a comparison).
bool is_open(const Token& t, bool angles) {
  return is_punct(t, '(') || is_punct(t, '[') || is_punct(t, '{') || (angles && is_punct(t, '<'));
}
bool is_close(const Token& t, bool angles) {
  return is_punct(t, ')') || is_punct(t, ']') || is_punct(t, '}') || (angles && is_punct(t, '>'));
}

constexpr size_t kNotClosed = static_cast<size_t>(-1);

// Index one past the group opened at toks[open], counting brackets of every kind (see is_open);
// `end` bounds the search. Returns kNotClosed when the group is not closed before `end`.
size_t skip_group(const std::vector<Token>& toks, size_t open, size_t end, bool angles) {
  int depth = 0;
  for (size_t i = open; i < end; ++i) {
    if (is_open(toks[i], angles)) ++depth;
    if (is_close(toks[i], angles) && --depth == 0) return i + 1;
  }
  return kNotClosed;
}

// Words that qualify a parameter's type or the parameter itself and are never its name.
bool is_qualifier(std::string_view w) {
  static const char* const kWords[] = {"const",    "volatile",          "__restrict__", "__restrict",
                                       "restrict", "__grid_constant__", "register",     "typename",
                                       "struct",   "union",             "enum",         "class"};
  for (const char* k : kWords) {
    if (w == k) return true;
  }
  return false;
}

// Built-in type words: a parameter whose last word is one of these has no name.
bool is_builtin_type(std::string_view w) {
  static const char* const kWords[] = {"void",  "bool",   "char",     "short",    "int",
                                       "long",  "float",  "double",   "signed",   "unsigned",
                                       "__int128", "wchar_t", "char16_t", "char32_t", "auto"};
  for (const char* k : kWords) {
    if (w == k) return true;
  }
  return false;
}

// Words that take a parenthesized argument and are not part of the type (skipped with it).
bool is_attribute(std::string_view w) {
  return w == "__attribute__" || w == "__align__" || w == "alignas" || w == "__declspec";
}

// What a parameter's type words (qualifiers dropped, name excluded) and pointer depth declare,
// for jit::check_launch_args. Knows the builtin types, <cstdint>'s, CUDA's and device_common.cuh's
// typedefs (cs_u8 .. cs_u64); anything else (a family's macro or template type) is not checked.
jit::ParamType param_type(const std::vector<std::string_view>& type_words, int stars,
                          bool templated) {
  using K = jit::ParamType::Kind;
  using E = jit::ParamType::Elem;
  jit::ParamType t;
  std::string base;
  for (std::string_view w : type_words) {
    if (!base.empty()) base += ' ';
    base += w;
  }
  // One spelling per type: a trailing "int" after long / unsigned long adds nothing.
  if (base == "long int" || base == "long long int") base.resize(base.size() - 4);
  if (base == "unsigned long int" || base == "unsigned long long int") base.resize(base.size() - 4);
  if (base == "signed int" || base == "signed") base = "int";
  t.text = base + std::string(static_cast<size_t>(stars), '*');
  if (templated || stars > 1) return t;
  struct Entry {
    const char* name;
    K scalar;           // the kind a by-value parameter takes (kUnchecked: none)
    uint8_t bytes;      // element bytes behind a pointer (0: not checked)
    E elem;
  };
  static const Entry kTypes[] = {
      {"float", K::kF32, 4, E::kFloat},
      {"double", K::kUnchecked, 8, E::kFloat},
      {"__nv_bfloat16", K::kUnchecked, 2, E::kFloat},
      {"nv_bfloat16", K::kUnchecked, 2, E::kFloat},
      {"__half", K::kUnchecked, 2, E::kFloat},
      {"half", K::kUnchecked, 2, E::kFloat},
      {"__nv_fp8_e4m3", K::kUnchecked, 1, E::kFloat},
      {"char", K::kUnchecked, 1, E::kAny},
      {"signed char", K::kUnchecked, 1, E::kAny},
      {"unsigned char", K::kUnchecked, 1, E::kAny},
      {"int8_t", K::kUnchecked, 1, E::kAny},
      {"uint8_t", K::kUnchecked, 1, E::kAny},
      {"cs_u8", K::kUnchecked, 1, E::kAny},
      {"short", K::kUnchecked, 2, E::kAny},
      {"unsigned short", K::kUnchecked, 2, E::kAny},
      {"int16_t", K::kUnchecked, 2, E::kAny},
      {"uint16_t", K::kUnchecked, 2, E::kAny},
      {"cs_u16", K::kUnchecked, 2, E::kAny},
      {"int", K::kI32, 4, E::kInt},
      {"int32_t", K::kI32, 4, E::kInt},
      {"cs_i32", K::kI32, 4, E::kInt},
      {"unsigned", K::kI32, 4, E::kAny},
      {"unsigned int", K::kI32, 4, E::kAny},
      {"uint32_t", K::kI32, 4, E::kAny},
      {"cs_u32", K::kI32, 4, E::kAny},
      {"long", K::kI64, 8, E::kInt},
      {"unsigned long", K::kU64, 8, E::kAny},
      {"size_t", K::kU64, 8, E::kAny},
      {"long long", K::kI64, 8, E::kInt},
      {"int64_t", K::kI64, 8, E::kInt},
      {"cs_i64", K::kI64, 8, E::kInt},
      {"unsigned long long", K::kU64, 8, E::kAny},
      {"uint64_t", K::kU64, 8, E::kAny},
      {"cs_u64", K::kU64, 8, E::kAny},
      {"CUtensorMap", K::kTensorMap, 0, E::kAny},
  };
  for (const Entry& e : kTypes) {
    if (base != e.name) continue;
    if (stars == 1) {
      t.kind = K::kPointer;
      t.elem_bytes = e.bytes;
      t.elem = e.elem;
    } else {
      t.kind = e.scalar;
    }
    return t;
  }
  if (stars == 1) t.kind = K::kPointer;  // void* or a macro type: a pointer of any element
  return t;
}

struct Param {
  std::string name;
  jit::ParamType type;
};

// One parameter, toks[begin, end) (no top-level comma), the `index`th of the list: its name and
// declared type.
Param read_param(const std::vector<Token>& toks, size_t begin, size_t end, size_t index,
                       const char* entry) {
  auto fail = [&](const std::string& why) -> std::string {
    throw Error(fmt::format("kernel {}: parameter {} (line {}) {}", entry, index + 1,
                            toks[begin < end ? begin : begin - 1].line, why));
  };
  if (begin == end) fail("is empty");
  // Past the group opened at toks[i], which must close within the parameter.
  auto past_group = [&](size_t i) {
    const size_t next = skip_group(toks, i, end, true);
    if (next == kNotClosed) fail(fmt::format("has an unclosed '{}'", toks[i].text));
    return next;
  };
  std::vector<std::string_view> words;  // type and name words at top level, qualifiers left out
  bool after_name_suffix = false;       // an array suffix '[..]' has been seen
  int stars = 0;                        // pointer declarators ('*', and '&' / '[]' count too)
  bool templated = false;               // the type has template arguments or a scope (X::T)
  for (size_t i = begin; i < end;) {
    const Token& t = toks[i];
    if (t.kind == Tok::kIdent) {
      if (after_name_suffix) fail("has a word after its array suffix");
      if (is_attribute(t.text)) {
        if (i + 1 >= end || !is_punct(toks[i + 1], '(')) fail(fmt::format("has {} without (", t.text));
        i = past_group(i + 1);
        continue;
      }
      if (!is_qualifier(t.text)) words.push_back(t.text);
      ++i;
      continue;
    }
    if (is_punct(t, '<')) {  // template arguments of a type: not the name
      if (after_name_suffix) fail("has '<' after its array suffix");
      templated = true;
      i = past_group(i);
      continue;
    }
    if (is_punct(t, '[')) {  // an array suffix follows the name
      after_name_suffix = true;
      ++stars;
      i = past_group(i);
      continue;
    }
    if (is_punct(t, '*') || is_punct(t, '&') || is_punct(t, ':')) {
      if (after_name_suffix) fail("has a declarator after its array suffix");
      if (is_punct(t, ':')) templated = true;
      if (is_punct(t, '*') || is_punct(t, '&')) ++stars;
      ++i;
      continue;
    }
    if (is_punct(t, '.')) fail("is '...' (a variadic entry has no fixed arguments)");
    if (is_punct(t, '=')) fail("has a default argument");
    if (is_punct(t, '(')) fail("has an unsupported form (a function pointer or a macro call)");
    if (t.kind == Tok::kDirective) fail("has a preprocessor directive in it");
    fail(fmt::format("has an unexpected '{}'", t.text));
  }
  if (words.empty()) fail("has no type or name");
  if (words.size() == 1 || is_builtin_type(words.back())) fail("has no name");
  Param p;
  p.name = std::string(words.back());
  words.pop_back();
  p.type = param_type(words, stars, templated);
  return p;
}

bool same_names(const std::vector<Param>& a, const std::vector<Param>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].type.text != b[i].type.text) return false;
  }
  return true;
}

std::string params_text(const std::vector<Param>& ps) {
  std::string s;
  for (const Param& p : ps) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

// The parameters of the list whose '(' is toks[open]. Throws when it is not closed.
std::vector<Param> param_list(const std::vector<Token>& toks, size_t open, const char* entry) {
  const size_t close = skip_group(toks, open, toks.size(), false);
  if (close == kNotClosed) {
    throw Error(fmt::format("kernel {}: the parameter list at line {} is not closed", entry,
                            toks[open].line));
  }
  const size_t begin = open + 1, end = close - 1;  // between the parentheses
  for (size_t i = begin; i < end; ++i) {
    if (toks[i].kind == Tok::kDirective) {
      throw Error(fmt::format(
          "kernel {}: preprocessor directive at line {} inside its parameter list ({})", entry,
          toks[i].line, toks[i].text));
    }
  }
  std::vector<Param> names;
  if (begin == end) return names;                                              // ()
  if (end == begin + 1 && toks[begin].kind == Tok::kIdent && toks[begin].text == "void") {
    return names;                                                              // (void)
  }
  size_t start = begin;
  for (size_t i = begin; i <= end;) {
    if (i == end || is_punct(toks[i], ',')) {
      names.push_back(read_param(toks, start, i, names.size(), entry));
      start = ++i;
      continue;
    }
    // Skip brackets whole: a comma inside <...>, [...] or (...) does not end the parameter.
    if (!is_open(toks[i], true)) {
      ++i;
      continue;
    }
    i = skip_group(toks, i, end, true);
    if (i == kNotClosed) {
      throw Error(fmt::format("kernel {}: parameter {} (line {}) has an unclosed bracket", entry,
                              names.size() + 1, toks[start].line));
    }
  }
  return names;
}

std::vector<Param> kernel_params(const char* text, const char* entry) {
  const std::vector<Token> toks = tokenize(text, entry);
  const std::string_view want(entry);
  std::vector<std::vector<Param>> found;
  std::vector<int> found_lines;
  // Reads every `entry (` at brace depth 0 of toks[begin, end), outside any parentheses.
  auto scan = [&](size_t begin, size_t end) {
    int parens = 0, braces = 0;
    for (size_t i = begin; i < end; ++i) {
      const Token& t = toks[i];
      if (is_punct(t, '(')) ++parens;
      if (is_punct(t, ')')) --parens;
      if (is_punct(t, '{')) ++braces;
      if (is_punct(t, '}')) --braces;
      if (parens == 0 && braces == 0 && t.kind == Tok::kIdent && t.text == want &&
          i + 1 < toks.size() && is_punct(toks[i + 1], '(')) {
        found.push_back(param_list(toks, i + 1, entry));
        found_lines.push_back(t.line);
      }
    }
  };
  for (size_t i = 0; i + 1 < toks.size(); ++i) {
    if (!(toks[i].kind == Tok::kIdent && toks[i].text == "extern" &&
          toks[i + 1].kind == Tok::kString && toks[i + 1].text == "\"C\"")) {
      continue;
    }
    const size_t first = i + 2;
    if (first < toks.size() && is_punct(toks[first], '{')) {
      // extern "C" { ... }: every declaration at the block's top level.
      const size_t close = skip_group(toks, first, toks.size(), false);
      if (close == kNotClosed) {
        throw Error(fmt::format("kernel {}: the extern \"C\" block at line {} is not closed",
                                entry, toks[first].line));
      }
      scan(first + 1, close - 1);
      i = close - 1;
      continue;
    }
    // extern "C" <one declaration>: up to its body '{' or its ';' (outside parentheses).
    size_t end = first;
    int parens = 0;
    for (; end < toks.size(); ++end) {
      if (is_punct(toks[end], '(')) ++parens;
      if (is_punct(toks[end], ')')) --parens;
      if (parens == 0 && (is_punct(toks[end], '{') || is_punct(toks[end], ';'))) break;
    }
    scan(first, end);
  }
  if (found.empty()) {
    throw Error(fmt::format("kernel {}: no extern \"C\" function named {} in its source", entry,
                            entry));
  }
  for (size_t k = 1; k < found.size(); ++k) {
    if (!same_names(found[k], found[0])) {
      throw Error(fmt::format(
          "kernel {}: its extern \"C\" declarations at lines {} and {} disagree: ({}) vs ({})",
          entry, found_lines[0], found_lines[k], params_text(found[0]), params_text(found[k])));
    }
  }
  return found[0];
}

}  // namespace

std::vector<std::string> kernel_param_names(const char* text, const char* entry) {
  std::vector<std::string> names;
  for (Param& p : kernel_params(text, entry)) names.push_back(std::move(p.name));
  return names;
}

std::vector<jit::ParamType> kernel_param_types(const char* text, const char* entry) {
  std::vector<jit::ParamType> types;
  for (Param& p : kernel_params(text, entry)) types.push_back(std::move(p.type));
  return types;
}

jit::KernelSource make_kernel_source(const char* common, const char* name, const char* text,
                                     std::string& storage, const char* entry) {
  if (entry == nullptr) entry = name;
  jit::KernelSource k;
  for (Param& p : kernel_params(text, entry)) {
    k.arg_names.push_back(std::move(p.name));
    k.arg_types.push_back(std::move(p.type));
  }
  k.name = name;
  k.entry = entry;
  storage = std::string(kSource_device_common) + "\n" + common + "\n#line 1 \"" + name + ".cu\"\n" +
            text;
  k.source = storage.c_str();
  return k;
}

std::string compile_case_label(const jit::KernelSource& k, const std::vector<jit::Constexpr>& cs) {
  std::string s = k.name + "[";
  for (size_t i = 0; i < cs.size(); ++i) {
    s += fmt::format("{}{}={}", i ? "," : "", cs[i].name, cs[i].value);
  }
  return s + "]";
}

KernelCompileCase make_compile_case(const char* family, const jit::KernelSource& k,
                                    std::vector<jit::Constexpr> cs,
                                    std::vector<jit::KernelArg> args) {
  KernelCompileCase c;
  c.family = family;
  c.label = compile_case_label(k, cs);
  if (args.size() != k.arg_names.size()) {
    throw Error(fmt::format("{}: compile case {} gives {} arguments, but kernel {} takes {} ({})",
                            family, c.label, args.size(), k.entry, k.arg_names.size(),
                            fmt::join(k.arg_names, ", ")));
  }
  jit::check_launch_args(k, args);
  c.kernel = &k;
  c.constexprs = std::move(cs);
  c.args = std::move(args);
  return c;
}

int kv_group(const char* family, int num_q_heads, int num_kv_heads) {
  if (num_q_heads <= 0 || num_q_heads % num_kv_heads != 0) {
    throw InputError(fmt::format("{}: {} query heads is not a positive multiple of {} KV heads",
                                 family, num_q_heads, num_kv_heads));
  }
  return num_q_heads / num_kv_heads;
}

void require_positive(const char* family, const char* what, int value) {
  if (value <= 0) throw InputError(fmt::format("{}: {} {} must be positive", family, what, value));
}

}  // namespace coldstart::kernels
