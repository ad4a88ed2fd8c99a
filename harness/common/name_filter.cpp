// coldstart: the --filter matcher (see name_filter.h). A recursive-descent parser builds a small
// syntax tree; Thompson's construction turns it into an NFA; search() keeps the set of live
// states per input byte (a Pike VM without captures), so it never backtracks.
#include "harness/common/name_filter.h"

#include <fmt/format.h>

#include "harness/common/error.h"

namespace coldstart {

namespace {

constexpr int kMaxBound = 100;        // largest m or n in {m,n}
constexpr size_t kMaxStates = 100000;  // after {m,n} copies

struct Node {
  enum Kind { kBytes, kBegin, kEnd, kConcat, kAlt, kRepeat } kind = kConcat;
  std::bitset<256> bytes;
  std::vector<Node> kids;
  int min = 0, max = 0;  ///< kRepeat: max -1 = unbounded
};

std::bitset<256> class_of(char c) {
  std::bitset<256> b;
  for (int i = 0; i < 256; ++i) {
    const bool digit = i >= '0' && i <= '9';
    const bool word = digit || (i >= 'a' && i <= 'z') || (i >= 'A' && i <= 'Z') || i == '_';
    const bool space = i == ' ' || (i >= '\t' && i <= '\r');
    switch (c) {
      case 'd': b[i] = digit; break;
      case 'w': b[i] = word; break;
      case 's': b[i] = space; break;
      case 'D': b[i] = !digit; break;
      case 'W': b[i] = !word; break;
      case 'S': b[i] = !space; break;
      default: break;
    }
  }
  return b;
}

bool is_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

}  // namespace

class NameFilterCompiler {
 public:
  NameFilterCompiler(const std::string& pattern, NameFilter& f) : p_(pattern), f_(f) {}

  void run() {
    Node root = parse_alt();
    if (pos_ < p_.size()) fail("unmatched ')'");
    Frag frag = compile(root);
    NameFilter::State match;
    match.op = NameFilter::Op::kMatch;
    patch(frag.out, add(match));
    f_.start_ = frag.start;
  }

 private:
  using State = NameFilter::State;
  using Op = NameFilter::Op;
  struct Hole {
    int state;
    bool alt;
  };
  struct Frag {
    int start;
    std::vector<Hole> out;
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(fmt::format("--filter '{}': at offset {}: {}", p_, pos_, what));
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char peek() const { return p_[pos_]; }

  // ---- parser ----
  Node parse_alt() {
    Node alt;
    alt.kind = Node::kAlt;
    alt.kids.push_back(parse_concat());
    while (!at_end() && peek() == '|') {
      ++pos_;
      alt.kids.push_back(parse_concat());
    }
    return alt.kids.size() == 1 ? std::move(alt.kids.front()) : alt;
  }

  Node parse_concat() {
    Node cat;
    cat.kind = Node::kConcat;
    while (!at_end() && peek() != '|' && peek() != ')') cat.kids.push_back(parse_repeat());
    return cat;
  }

  Node parse_repeat() {
    Node atom = parse_atom();
    if (at_end()) return atom;
    int min = -2, max = -2;
    const char c = peek();
    if (c == '*') min = 0, max = -1;
    if (c == '+') min = 1, max = -1;
    if (c == '?') min = 0, max = 1;
    if (c == '{') parse_bounds(min, max);
    else if (min != -2) ++pos_;
    if (min == -2) return atom;
    if (atom.kind == Node::kBegin || atom.kind == Node::kEnd) fail("nothing to repeat (an anchor)");
    if (!at_end() && peek() == '?') ++pos_;  // lazy: the same yes / no for a search
    if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{'))
      fail("nothing to repeat (a quantifier after a quantifier)");
    Node rep;
    rep.kind = Node::kRepeat;
    rep.min = min;
    rep.max = max;
    rep.kids.push_back(std::move(atom));
    return rep;
  }

  // {m}, {m,}, {m,n} at pos_ (which is '{').
  void parse_bounds(int& min, int& max) {
    ++pos_;
    auto number = [&]() {
      if (at_end() || peek() < '0' || peek() > '9') fail("expected a number in {m,n}");
      long v = 0;
      while (!at_end() && peek() >= '0' && peek() <= '9') {
        v = v * 10 + (peek() - '0');
        if (v > kMaxBound) fail(fmt::format("a bound over {}", kMaxBound));
        ++pos_;
      }
      return static_cast<int>(v);
    };
    min = number();
    max = min;
    if (!at_end() && peek() == ',') {
      ++pos_;
      max = (!at_end() && peek() == '}') ? -1 : number();
    }
    if (at_end() || peek() != '}') fail("unterminated {m,n}");
    ++pos_;
    if (max != -1 && max < min) fail("{m,n} with n < m");
  }

  Node bytes_node(const std::bitset<256>& b) {
    Node n;
    n.kind = Node::kBytes;
    n.bytes = b;
    return n;
  }

  Node parse_atom() {
    const char c = peek();
    ++pos_;
    switch (c) {
      case '(': {
        if (!at_end() && peek() == '?') {
          if (pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
            pos_ += 2;
          } else {
            fail("lookaround and other (?...) groups are not supported");
          }
        }
        Node inner = parse_alt();
        if (at_end() || peek() != ')') fail("unmatched '('");
        ++pos_;
        return inner;
      }
      case '[': return bytes_node(parse_class());
      case '.': return bytes_node(std::bitset<256>().set());
      case '^': { Node n; n.kind = Node::kBegin; return n; }
      case '$': { Node n; n.kind = Node::kEnd; return n; }
      case '\\': return bytes_node(parse_escape(false));
      case '*': case '+': case '?': case '{':
        --pos_;
        fail("nothing to repeat");
      default: {
        std::bitset<256> b;
        b.set(static_cast<unsigned char>(c));
        return bytes_node(b);
      }
    }
  }

  // The escape after a '\' (pos_ is on the escaped character).
  std::bitset<256> parse_escape(bool in_class) {
    if (at_end()) fail("a pattern cannot end with '\\'");
    const char c = peek();
    ++pos_;
    std::bitset<256> b;
    switch (c) {
      case 'd': case 'w': case 's': case 'D': case 'W': case 'S': return class_of(c);
      case 'n': b.set('\n'); return b;
      case 't': b.set('\t'); return b;
      case 'r': b.set('\r'); return b;
      case 'f': b.set('\f'); return b;
      case 'v': b.set('\v'); return b;
      default: break;
    }
    if (c >= '1' && c <= '9') fail("backreferences are not supported");
    if (c == 'b' && in_class) { b.set('\b'); return b; }
    if (is_alnum(c)) fail(fmt::format("unknown escape '\\{}'", c));
    b.set(static_cast<unsigned char>(c));
    return b;
  }

  // [...] after the '['.
  std::bitset<256> parse_class() {
    std::bitset<256> b;
    bool negate = false;
    if (!at_end() && peek() == '^') negate = true, ++pos_;
    for (;;) {
      if (at_end()) fail("unterminated '['");
      char c = peek();
      if (c == ']') {  // as ECMAScript: "[]" matches nothing, "[^]" any byte
        ++pos_;
        break;
      }
      ++pos_;
      std::bitset<256> item;
      int lo = static_cast<unsigned char>(c);
      if (c == '\\') {
        item = parse_escape(true);
        lo = item.count() == 1 ? -1 : -2;  // a single byte may start a range
        if (lo == -1)
          for (int i = 0; i < 256; ++i)
            if (item[i]) lo = i;
      } else {
        item.set(static_cast<unsigned char>(c));
      }
      if (lo >= 0 && pos_ + 1 < p_.size() && peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;  // a range lo-hi
        int hi = static_cast<unsigned char>(peek());
        ++pos_;
        if (hi == '\\') {
          const std::bitset<256> e = parse_escape(true);
          if (e.count() != 1) fail("a class escape cannot end a range");
          for (int i = 0; i < 256; ++i)
            if (e[i]) hi = i;
        }
        if (hi < lo) fail("a range out of order");
        for (int i = lo; i <= hi; ++i) item.set(static_cast<size_t>(i));
      }
      b |= item;
    }
    return negate ? ~b : b;
  }

  // ---- Thompson construction ----
  int add(const State& s) {
    if (f_.states_.size() >= kMaxStates)
      fail(fmt::format("the pattern needs more than {} states (lower its {{m,n}} bounds)", kMaxStates));
    f_.states_.push_back(s);
    return static_cast<int>(f_.states_.size()) - 1;
  }
  void patch(const std::vector<Hole>& out, int to) {
    for (const Hole& h : out) (h.alt ? f_.states_[h.state].alt : f_.states_[h.state].next) = to;
  }
  Frag empty() {
    State s;
    s.op = Op::kJump;
    const int i = add(s);
    return {i, {{i, false}}};
  }

  Frag compile(const Node& n) {
    switch (n.kind) {
      case Node::kBytes: {
        State s;
        s.op = Op::kByte;
        s.bytes = n.bytes;
        const int i = add(s);
        return {i, {{i, false}}};
      }
      case Node::kBegin:
      case Node::kEnd: {
        State s;
        s.op = n.kind == Node::kBegin ? Op::kBegin : Op::kEnd;
        const int i = add(s);
        return {i, {{i, false}}};
      }
      case Node::kConcat: {
        if (n.kids.empty()) return empty();
        Frag all = compile(n.kids.front());
        for (size_t k = 1; k < n.kids.size(); ++k) {
          Frag next = compile(n.kids[k]);
          patch(all.out, next.start);
          all.out = std::move(next.out);
        }
        return all;
      }
      case Node::kAlt: {
        Frag all = compile(n.kids.front());
        for (size_t k = 1; k < n.kids.size(); ++k) {
          Frag other = compile(n.kids[k]);
          State s;
          s.op = Op::kSplit;
          s.next = all.start;
          s.alt = other.start;
          const int i = add(s);
          all.start = i;
          all.out.insert(all.out.end(), other.out.begin(), other.out.end());
        }
        return all;
      }
      case Node::kRepeat: {
        const Node& kid = n.kids.front();
        Frag all = empty();
        // The required copies, then the optional ones (or a loop when unbounded).
        for (int k = 0; k < n.min; ++k) {
          Frag copy = compile(kid);
          patch(all.out, copy.start);
          all.out = std::move(copy.out);
        }
        if (n.max == -1) {
          State s;
          s.op = Op::kSplit;
          const int split = add(s);
          Frag body = compile(kid);
          f_.states_[split].next = body.start;
          patch(body.out, split);
          patch(all.out, split);
          all.out = {{split, true}};
        } else {
          std::vector<Hole> skips;
          for (int k = n.min; k < n.max; ++k) {
            State s;
            s.op = Op::kSplit;
            const int split = add(s);
            patch(all.out, split);
            Frag copy = compile(kid);
            f_.states_[split].next = copy.start;
            skips.push_back({split, true});
            all.out = std::move(copy.out);
          }
          all.out.insert(all.out.end(), skips.begin(), skips.end());
        }
        return all;
      }
    }
    fail("internal: unknown node");
  }

  const std::string& p_;
  NameFilter& f_;
  size_t pos_ = 0;
};

NameFilter::NameFilter(const std::string& pattern) { NameFilterCompiler(pattern, *this).run(); }

bool NameFilter::search(const std::string& text) const {
  const size_t n = text.size();
  std::vector<int> cur, next, stack;
  std::vector<size_t> seen(states_.size(), 0);  // the position + 1 a state was last added at
  bool matched = false;
  // Adds state `s` and everything reachable from it without reading a byte, at position `pos`.
  auto close = [&](std::vector<int>& list, int s, size_t pos) {
    stack.push_back(s);
    while (!stack.empty() && !matched) {
      const int i = stack.back();
      stack.pop_back();
      if (i < 0 || seen[i] == pos + 1) continue;
      seen[i] = pos + 1;
      const State& st = states_[i];
      switch (st.op) {
        case Op::kByte: list.push_back(i); break;
        case Op::kJump: stack.push_back(st.next); break;
        case Op::kSplit:
          stack.push_back(st.alt);
          stack.push_back(st.next);
          break;
        case Op::kBegin:
          if (pos == 0) stack.push_back(st.next);
          break;
        case Op::kEnd:
          if (pos == n) stack.push_back(st.next);
          break;
        case Op::kMatch: matched = true; break;
      }
    }
    stack.clear();
  };
  for (size_t pos = 0;; ++pos) {
    close(cur, start_, pos);  // a search: a match may begin at every position
    if (matched) return true;
    if (pos == n) break;
    next.clear();
    const unsigned char byte = static_cast<unsigned char>(text[pos]);
    for (int i : cur)
      if (states_[i].bytes[byte]) close(next, states_[i].next, pos + 1);
    if (matched) return true;
    cur.swap(next);
  }
  return false;
}

}  // namespace coldstart
