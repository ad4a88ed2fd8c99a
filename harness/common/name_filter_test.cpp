// Tests of the --filter matcher: what std::regex_search answers for the supported syntax, in
// linear time for the patterns that made std::regex hang or overflow its stack.
#include "harness/common/name_filter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "harness/common/error.h"

namespace coldstart {
namespace {

// The same answer as std::regex_search (ECMAScript) on inputs small enough for it.
TEST(NameFilter, AgreesWithStdRegexSearch) {
  const std::vector<std::string> patterns = {
      "",           "none",        "^none$",       "deepgemm|tq",  "^tq-.*max$",  "warm(up)?$",
      "^(a|b)*c",   "a{2,3}",      "a{2}b",        "a{2,}$",       "[a-c]+x",     "[^a-z]",
      "\\d+",       "\\w+-\\w+",   "\\.",          "x\\+y",        "(?:ab)+$",    "^$",
      "a*?b",       "[]a]",        "[a\\-z]",      "\\s",          "(a|)+b",      "((a*)*)*c",
      "^.{3}$",     "[\\d.]+",     "b{0,2}c",      "^(x|y|z){1,2}$"};
  const std::vector<std::string> texts = {
      "",           "none",        "xnone",        "deepgemm-warmup", "tq-reserve-max",
      "warmup",     "warm",        "aabc",         "aaab",            "abcx",
      "ABC",        "a1",          "x-y",          "1.5",             "x+y",
      "ababab",     "]",           "-",            "a b",             "bbbc",
      "xyz",        "xy",          "cc"};
  for (const auto& p : patterns) {
    const NameFilter f(p);
    const std::regex re(p);
    for (const auto& t : texts)
      EXPECT_EQ(f.search(t), std::regex_search(t, re)) << "pattern '" << p << "' text '" << t << "'";
  }
}

// Patterns std::regex backtracks on exponentially, and a 20,000-character name that overflowed
// its recursion: answered at once.
TEST(NameFilter, LinearOnWhatMadeStdRegexHangOrCrash) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(NameFilter("^(a+)+$").search(std::string(34, 'a') + "!"));
  EXPECT_TRUE(NameFilter("^(a+)+$").search(std::string(34, 'a')));
  EXPECT_FALSE(NameFilter("(a|aa)*b").search(std::string(5000, 'a')));
  const std::string name(20000, 'x');
  EXPECT_TRUE(NameFilter("^(.|\\n)*$").search(name));
  EXPECT_FALSE(NameFilter("(a|b)*c").search(std::string(20000, 'a')));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0) << "linear-time search took " << s << " s";  // generous: sanitizer builds
}

TEST(NameFilter, RefusesWhatItCannotMatchNamingTheOffset) {
  auto error_of = [](const std::string& p) {
    try {
      NameFilter f(p);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(error_of("(ab"), "--filter '(ab': at offset 3: unmatched '('");
  EXPECT_EQ(error_of("ab)"), "--filter 'ab)': at offset 2: unmatched ')'");
  EXPECT_EQ(error_of("*a"), "--filter '*a': at offset 0: nothing to repeat");
  EXPECT_EQ(error_of("a**"), "--filter 'a**': at offset 2: nothing to repeat (a quantifier after a quantifier)");
  EXPECT_EQ(error_of("[ab"), "--filter '[ab': at offset 3: unterminated '['");
  EXPECT_EQ(error_of("(a)\\1"), "--filter '(a)\\1': at offset 5: backreferences are not supported");
  EXPECT_EQ(error_of("(?=a)"), "--filter '(?=a)': at offset 1: lookaround and other (?...) groups are not supported");
  EXPECT_EQ(error_of("a{101}"), "--filter 'a{101}': at offset 4: a bound over 100");
  EXPECT_EQ(error_of("a{3,2}"), "--filter 'a{3,2}': at offset 6: {m,n} with n < m");
  EXPECT_EQ(error_of("[z-a]"), "--filter '[z-a]': at offset 4: a range out of order");
  EXPECT_EQ(error_of("\\q"), "--filter '\\q': at offset 2: unknown escape '\\q'");
  EXPECT_EQ(error_of("^*"), "--filter '^*': at offset 2: nothing to repeat (an anchor)");
  // Copies of {m,n} are bounded: 100 x 100 x 100 states would be a million.
  EXPECT_NE(error_of("((a{100}){100}){100}").find("more than 100000 states"), std::string::npos);
}

}  // namespace
}  // namespace coldstart
