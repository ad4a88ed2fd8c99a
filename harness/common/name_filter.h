// coldstart: the --filter matcher of `replay` and `list`. A regular expression over scenario and
// strategy names, matched in time linear in the name's length (a Thompson NFA simulated state set
// by state set, no backtracking), so no pattern can hang or overflow the stack: std::regex
// backtracks (`^(a+)+$` against a 34-character name ran for minutes) and recurses per character
// (a 20,000-character name with `(.|\n)*` overflowed the stack).
#pragma once

#include <bitset>
#include <string>
#include <vector>

namespace coldstart {

/// A compiled --filter. The syntax is the common subset of ECMAScript and POSIX extended
/// regular expressions: literal characters; `.` (any byte); `[...]` and `[^...]` with ranges
/// (`[]` matches nothing, as in ECMAScript);
/// the escapes `\d \w \s \D \W \S` and `\` before any other non-alphanumeric character; groups
/// `(...)` and `(?:...)`; alternation `|`; the quantifiers `*`, `+`, `?`, `{m}`, `{m,}` and
/// `{m,n}` (m, n <= 100; a lazy `?` after a quantifier is accepted and changes nothing for a
/// yes/no search); the anchors `^` and `$`. Matching is a search, as std::regex_search: the
/// pattern may match anywhere in the text. Bytes are matched one by one (UTF-8 text is bytes).
class NameFilter {
 public:
  /// Compiles `pattern`. Throws InputError naming the pattern, the position (0-based byte
  /// offset) and what is wrong: an unbalanced group or class, a quantifier with nothing before
  /// it, a backreference or lookaround (not regular), a bound over 100, or a pattern that
  /// compiles to more than 100,000 states.
  explicit NameFilter(const std::string& pattern);

  /// Whether the pattern matches somewhere in `text`: O(text size x pattern states).
  bool search(const std::string& text) const;

 private:
  enum class Op { kByte, kSplit, kJump, kBegin, kEnd, kMatch };
  struct State {
    Op op = Op::kMatch;
    std::bitset<256> bytes;  ///< kByte: the bytes it accepts
    int next = -1;           ///< kByte, kJump, kBegin, kEnd: the following state
    int alt = -1;            ///< kSplit: the second branch (next is the first)
  };
  friend class NameFilterCompiler;
  std::vector<State> states_;
  int start_ = 0;
};

}  // namespace coldstart
