// Tests of the JUnit, Markdown, HTML and trace renderers: golden files rendered from fixed
// results files in testdata/ (two real H200 runs, a compile-only run and hand-made edge cases),
// plus structural checks that do not depend on the exact text: XML well-formedness (a small
// checker below, and xmllint with testdata/junit.xsd when installed), JUnit counts, Markdown row
// order, HTML self-containment, trace nesting. Regenerate the golden files with
// COLDSTART_UPDATE_GOLDEN=1.
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/replay/result.h"
#include "reports/render_util.h"
#include "reports/golden_test_util.h"
#include "reports/renderers.h"
#include "reports/table.h"

namespace coldstart::reports {
namespace {

using nlohmann::json;

const std::string kData = CS_REPORTS_TESTDATA;

using testing::read_file;

// The fixed inputs every golden file is rendered from, in this order.
std::vector<RunResults> fixed_runs() {
  std::vector<RunResults> runs;
  for (const char* f : {"h200_basic.json", "h200_long.json", "compile_only_basic.json",
                        "synthetic_edge_cases.json"}) {
    runs.push_back(read_results_json(kData + "/" + f));
  }
  return runs;
}

const std::vector<RunResults>& runs() {
  static const std::vector<RunResults> r = fixed_runs();
  return r;
}

void check_golden(const std::string& name, const std::string& text) {
  testing::check_golden(kData + "/" + name, text);
}

// ---------------------------------------------------------------------------------------------
// A small, strict XML reader: enough to prove well-formedness (one root, matched tags, quoted
// attributes, known entities, no characters XML 1.0 forbids) and to walk the tree.

struct XmlNode {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<XmlNode> kids;
  std::string text;  // character data directly inside, entities decoded

  std::vector<const XmlNode*> all(const std::string& tag) const {
    std::vector<const XmlNode*> out;
    for (const auto& k : kids) {
      if (k.name == tag) out.push_back(&k);
    }
    return out;
  }
};

class XmlReader {
 public:
  explicit XmlReader(const std::string& s) : s_(s) {}

  // The root element, or nullopt with error() set.
  std::optional<XmlNode> parse() {
    try {
      for (unsigned char c : s_) {
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') fail("control character in document");
      }
      skip_misc();
      XmlNode root = element();
      skip_misc();
      if (i_ != s_.size()) fail("content after the root element");
      return root;
    } catch (const std::runtime_error& e) {
      error_ = e.what();
      return std::nullopt;
    }
  }
  const std::string& error() const { return error_; }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error(what + " at offset " + std::to_string(i_));
  }
  bool starts(const char* p) const { return s_.compare(i_, std::strlen(p), p) == 0; }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void skip_to(const char* end) {
    size_t k = s_.find(end, i_);
    if (k == std::string::npos) fail(std::string("missing ") + end);
    i_ = k + std::strlen(end);
  }
  // Prolog, doctype, comments and white space between elements.
  void skip_misc() {
    for (;;) {
      skip_ws();
      if (starts("<?")) skip_to("?>");
      else if (starts("<!--")) skip_to("-->");
      else if (starts("<!DOCTYPE")) skip_to(">");
      else return;
    }
  }
  std::string name() {
    size_t b = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' ||
                              s_[i_] == '_' || s_[i_] == ':' || s_[i_] == '.')) {
      ++i_;
    }
    if (b == i_) fail("expected a name");
    return s_.substr(b, i_ - b);
  }
  // Decodes character data up to `stop`; rejects a bare '<' or '&' and unknown entities.
  std::string chars(char stop) {
    std::string out;
    while (i_ < s_.size() && s_[i_] != stop) {
      char c = s_[i_];
      if (c == '<') fail("'<' in attribute value");
      if (c == '&') {
        size_t semi = s_.find(';', i_);
        if (semi == std::string::npos || semi - i_ > 10) fail("bare '&'");
        std::string ent = s_.substr(i_ + 1, semi - i_ - 1);
        static const std::map<std::string, std::string> known = {
            {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}};
        if (auto it = known.find(ent); it != known.end()) {
          out += it->second;
        } else if (ent.size() > 1 && ent[0] == '#') {
          long v = ent[1] == 'x' ? std::strtol(ent.c_str() + 2, nullptr, 16) : std::strtol(ent.c_str() + 1, nullptr, 10);
          if (v < 0x20 && v != 9 && v != 10 && v != 13) fail("reference to a forbidden character");
          out += v < 0x80 ? std::string(1, static_cast<char>(v)) : std::string("?");
        } else {
          fail("unknown entity &" + ent + ";");
        }
        i_ = semi + 1;
        continue;
      }
      out += c;
      ++i_;
    }
    return out;
  }
  XmlNode element() {
    if (!starts("<")) fail("expected '<'");
    ++i_;
    XmlNode n;
    n.name = name();
    for (;;) {
      skip_ws();
      if (starts("/>")) {
        i_ += 2;
        return n;
      }
      if (starts(">")) {
        ++i_;
        break;
      }
      std::string a = name();
      skip_ws();
      if (!starts("=")) fail("attribute " + a + " without value");
      ++i_;
      skip_ws();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) fail("unquoted attribute " + a);
      char q = s_[i_++];
      std::string v = chars(q);
      if (i_ >= s_.size()) fail("unterminated attribute " + a);
      ++i_;
      if (!n.attrs.emplace(a, v).second) fail("duplicate attribute " + a);
    }
    for (;;) {
      if (i_ >= s_.size()) fail("unclosed element <" + n.name + ">");
      if (starts("</")) {
        i_ += 2;
        std::string end = name();
        if (end != n.name) fail("</" + end + "> closes <" + n.name + ">");
        skip_ws();
        if (!starts(">")) fail("bad end tag");
        ++i_;
        return n;
      }
      if (starts("<!--")) {
        skip_to("-->");
      } else if (starts("<")) {
        n.kids.push_back(element());
      } else {
        size_t before = i_;
        std::string t;
        while (i_ < s_.size() && s_[i_] != '<') {
          size_t stop = s_.find_first_of("<&", i_);
          if (stop == std::string::npos) stop = s_.size();
          t += s_.substr(i_, stop - i_);
          i_ = stop;
          if (i_ < s_.size() && s_[i_] == '&') {
            size_t save = i_;
            // Reuse the attribute decoder for one entity.
            std::string one = s_.substr(save, s_.find(';', save) - save + 1);
            XmlReader sub(one);
            sub.i_ = 0;
            t += sub.chars('\0');
            i_ = save + one.size();
          }
        }
        if (i_ == before) fail("stuck");
        n.text += t;
      }
    }
  }

  const std::string& s_;
  size_t i_ = 0;
  std::string error_;
};

TEST(XmlReader, RejectsWhatXmlForbids) {
  EXPECT_TRUE(XmlReader("<a x=\"1\"><b/>t &amp; &#10;</a>").parse());
  for (const char* bad : {"<a><b></a></b>", "<a x=1/>", "<a>&nbsp;</a>", "<a>&</a>", "<a>\x01</a>",
                          "<a/><b/>", "<a x=\"<\"/>", "<a>"}) {
    EXPECT_FALSE(XmlReader(bad).parse()) << bad;
  }
}

bool have_xmllint() { return std::system("xmllint --version >/dev/null 2>&1") == 0; }

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "renderers_test." + std::to_string(::getpid()) + "." + name;
}

// ---------------------------------------------------------------------------------------------
// Helpers

TEST(Escaping, XmlEscapeHandlesSpecialsControlsAndBadUtf8) {
  using detail::xml_escape;
  EXPECT_EQ(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(xml_escape("x\x1b[31my\x07"), "x\\x1B[31my\\x07");
  EXPECT_EQ(xml_escape("l1\nl2\t"), "l1\nl2\t");
  EXPECT_EQ(xml_escape("l1\nl2\t", true), "l1&#10;l2&#9;");
  EXPECT_EQ(xml_escape("bad \xff\xfe end"), "bad \xEF\xBF\xBD\xEF\xBF\xBD end");
  EXPECT_EQ(xml_escape("\xE2\x80\x93"), "\xE2\x80\x93");  // a valid en dash stays
  EXPECT_EQ(xml_escape("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong NUL is refused
  EXPECT_TRUE(XmlReader("<a>" + xml_escape(std::string("\0\x01\x1f", 3)) + "</a>").parse());
}

// ---------------------------------------------------------------------------------------------
// JUnit

TEST(Junit, MatchesGolden) { check_golden("junit_golden.xml", render_junit(runs(), {})); }

TEST(Junit, WellFormedAndCountsAgree) {
  std::string xml = render_junit(runs(), {});
  XmlReader reader(xml);
  auto root = reader.parse();
  ASSERT_TRUE(root) << reader.error();
  EXPECT_EQ(root->name, "testsuites");
  auto suites = root->all("testsuite");
  ASSERT_EQ(suites.size(), runs().size());
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  for (size_t s = 0; s < suites.size(); ++s) {
    const XmlNode& suite = *suites[s];
    // "<scenario> (<target>, sm_NN, <mode>)": merged runs of two machines never share a name.
    EXPECT_EQ(suite.attrs.at("name").rfind(runs()[s].scenario.name + " (", 0), 0u)
        << suite.attrs.at("name");
    auto cases = suite.all("testcase");
    EXPECT_EQ(cases.size(), runs()[s].results.size());
    int f = 0, e = 0, k = 0;
    double time = 0;
    for (const XmlNode* c : cases) {
      EXPECT_EQ(c->attrs.at("classname"), suite.attrs.at("name"));
      EXPECT_LE(c->all("failure").size() + c->all("error").size() + c->all("skipped").size(), 1u)
          << c->attrs.at("name");
      f += c->all("failure").size();
      e += c->all("error").size();
      k += c->all("skipped").size();
      time += std::stod(c->attrs.at("time"));
      EXPECT_EQ(c->all("system-out").size(), 1u);
    }
    EXPECT_EQ(std::stoi(suite.attrs.at("tests")), static_cast<int>(cases.size()));
    EXPECT_EQ(std::stoi(suite.attrs.at("failures")), f);
    EXPECT_EQ(std::stoi(suite.attrs.at("errors")), e);
    EXPECT_EQ(std::stoi(suite.attrs.at("skipped")), k);
    EXPECT_NEAR(std::stod(suite.attrs.at("time")), time, 0.002 * cases.size() + 0.001);
    tests += cases.size();
    failures += f;
    errors += e;
    skipped += k;
  }
  EXPECT_EQ(std::stoi(root->attrs.at("tests")), tests);
  EXPECT_EQ(std::stoi(root->attrs.at("failures")), failures);
  EXPECT_EQ(std::stoi(root->attrs.at("errors")), errors);
  EXPECT_EQ(std::stoi(root->attrs.at("skipped")), skipped);
  // Known content of the fixtures: basic has 1 crash, long 4 crashes, compile-only 1 crash; the
  // edge cases have a hot-path failure, a timeout, a crash, an error and a skip.
  EXPECT_EQ(std::stoi(suites[0]->attrs.at("failures")), 1);
  EXPECT_EQ(std::stoi(suites[1]->attrs.at("failures")), 4);
  EXPECT_EQ(std::stoi(suites[2]->attrs.at("failures")), 1);
  EXPECT_EQ(std::stoi(suites[3]->attrs.at("failures")), 3);
  EXPECT_EQ(std::stoi(suites[3]->attrs.at("errors")), 1);
  EXPECT_EQ(std::stoi(suites[3]->attrs.at("skipped")), 1);
}

// The test case of `suite` named `name` followed by its target tag, " (<target>, ...)".
const XmlNode* find_case(const XmlNode& root, size_t suite, const std::string& name) {
  for (const XmlNode* c : root.all("testsuite").at(suite)->all("testcase")) {
    if (c->attrs.at("name").rfind(name + " (", 0) == 0) return c;
  }
  return nullptr;
}

TEST(Junit, FailureKindsMessagesAndEscaping) {
  std::string xml = render_junit(runs(), {});
  auto root = XmlReader(xml).parse();
  ASSERT_TRUE(root);

  const XmlNode* crash = find_case(*root, 0, "none [cudagraph_mode=piecewise]");
  ASSERT_TRUE(crash);
  ASSERT_EQ(crash->all("failure").size(), 1u);
  const XmlNode& f = *crash->all("failure")[0];
  EXPECT_EQ(f.attrs.at("type"), "crash");
  EXPECT_EQ(f.attrs.at("message").rfind("first_decode: Workspace is locked but allocation from", 0), 0u);
  EXPECT_EQ(f.text, *runs()[0].results[0].error);
  EXPECT_NE(crash->all("system-out")[0]->text.find("request 0 prefill"), std::string::npos);

  const XmlNode* strict = find_case(*root, 3, "strict");
  ASSERT_TRUE(strict);
  ASSERT_EQ(strict->all("failure").size(), 1u);
  EXPECT_EQ(strict->all("failure")[0]->attrs.at("type"), "hot_path_compile");
  const std::string& listing = strict->all("failure")[0]->text;
  EXPECT_NE(listing.find("tq_cache_store"), std::string::npos);
  EXPECT_NE(listing.find("phase prefill"), std::string::npos);
  EXPECT_NE(listing.find("key: tq_cache_store[A=1]<x & y>@sm_90"), std::string::npos);  // decoded

  const XmlNode* hung = find_case(*root, 3, "hung \"warmer\" <&>");
  ASSERT_TRUE(hung);
  ASSERT_EQ(hung->all("failure").size(), 1u);
  EXPECT_EQ(hung->all("failure")[0]->attrs.at("type"), "timeout");
  EXPECT_EQ(hung->all("failure")[0]->attrs.at("message"), "graph_capture: no progress after 600 s (watchdog)");

  const XmlNode* spawn = find_case(*root, 3, "spawn-fail");
  ASSERT_TRUE(spawn);
  ASSERT_EQ(spawn->all("error").size(), 1u);
  EXPECT_NE(spawn->all("error")[0]->text.find("\\x1B[31mred"), std::string::npos);
  EXPECT_NE(spawn->all("error")[0]->text.find("bell \\x07"), std::string::npos);

  const XmlNode* skip = find_case(*root, 3, "sm100-only");
  ASSERT_TRUE(skip);
  ASSERT_EQ(skip->all("skipped").size(), 1u);
  EXPECT_EQ(skip->all("skipped")[0]->attrs.at("message"), "needs sm_100 (this device is sm_90)");
  EXPECT_TRUE(skip->all("error").empty());

  // A strategy that allows hot-path compiles passes with them (tq-reserve-max compiles 3).
  const XmlNode* reserve = find_case(*root, 0, "tq-reserve-max [cudagraph_mode=piecewise]");
  ASSERT_TRUE(reserve);
  EXPECT_TRUE(reserve->all("failure").empty());
}

TEST(Junit, JitMonitorErrorFailsEveryHotPathCompile) {
  JunitOptions strict;
  strict.hot_path_compiles_fail = true;
  auto root = XmlReader(render_junit(runs(), strict)).parse();
  ASSERT_TRUE(root);
  const XmlNode* reserve = find_case(*root, 0, "tq-reserve-max [cudagraph_mode=piecewise]");
  ASSERT_TRUE(reserve);
  ASSERT_EQ(reserve->all("failure").size(), 1u);
  EXPECT_EQ(reserve->all("failure")[0]->attrs.at("type"), "hot_path_compile");
  EXPECT_EQ(root->all("testsuite")[0]->attrs.at("failures"), "2");
  // A crash that also compiled on the hot path keeps one failure, its text lists the compiles.
  const XmlNode* crash = find_case(*root, 0, "none [cudagraph_mode=piecewise]");
  ASSERT_EQ(crash->all("failure").size(), 1u);
  EXPECT_EQ(crash->all("failure")[0]->attrs.at("type"), "crash");
  EXPECT_NE(crash->all("failure")[0]->text.find("hot-path compile(s)"), std::string::npos);
}

// One test case per expect: rule; a crash a met rule expects is not a failure (as --check says).
TEST(Junit, OneCasePerRuleAndAnExpectedCrashPasses) {
  RunResults run = fixed_runs()[0];  // none [piecewise] crashes in first_decode
  const std::string pw = "cudagraph_mode=piecewise";
  run.rules = {
      {"s.yaml:40", "none", pw, "outcome crash, failed_phase first_decode", {"outcome", "failed_phase"},
       "met", {}},
      {"s.yaml:41", "tq-reserve-max", std::nullopt, "outcome crash", {"outcome"}, "unmet",
       {"tq-reserve-max [" + pw + "]: outcome ok, expected crash (rule at s.yaml:41)"}},
      {"s.yaml:42", "gone", std::nullopt, "outcome ok", {"outcome"}, "not_checked",
       {"strategy 'gone' did not run (--strategy / --filter)"}},
      {"s.yaml:43", "*", std::nullopt, "arch sm_100, outcome ok", {"outcome"}, "not_applicable",
       {"a rule for arch sm_100; this run: cuda on sm_90"}}};
  // The rules survive the results file.
  EXPECT_EQ(nlohmann::json(run).get<RunResults>(), run);
  auto root = XmlReader(render_junit({run}, {})).parse();
  ASSERT_TRUE(root);
  const XmlNode& suite = *root->all("testsuite").at(0);
  EXPECT_EQ(suite.attrs.at("tests"), std::to_string(run.results.size() + 4));
  EXPECT_EQ(suite.attrs.at("failures"), "1");  // the unmet rule only
  EXPECT_EQ(suite.attrs.at("skipped"), "2");
  const XmlNode* crash = find_case(*root, 0, "none [" + pw + "]");
  ASSERT_TRUE(crash);
  EXPECT_TRUE(crash->all("failure").empty());
  EXPECT_NE(crash->all("system-out")[0]->text.find("(as the rule at s.yaml:40 expects)"),
            std::string::npos);
  const XmlNode* met = find_case(
      *root, 0, "rule at s.yaml:40: none [" + pw + "]: outcome crash, failed_phase first_decode");
  ASSERT_TRUE(met);
  EXPECT_TRUE(met->all("failure").empty() && met->all("skipped").empty());
  const XmlNode* unmet = find_case(*root, 0, "rule at s.yaml:41: tq-reserve-max: outcome crash");
  ASSERT_TRUE(unmet);
  ASSERT_EQ(unmet->all("failure").size(), 1u);
  EXPECT_EQ(unmet->all("failure")[0]->attrs.at("type"), "expectation");
  EXPECT_EQ(unmet->all("failure")[0]->attrs.at("message"), run.rules[1].details[0]);
  const XmlNode* na = find_case(*root, 0, "rule at s.yaml:43: every strategy: arch sm_100, outcome ok");
  ASSERT_TRUE(na);
  ASSERT_EQ(na->all("skipped").size(), 1u);
  EXPECT_EQ(na->all("skipped")[0]->attrs.at("message"),
            "not_applicable: a rule for arch sm_100; this run: cuda on sm_90");
  // Markdown sums the rules up and lists the unmet ones.
  const std::string md = render_markdown({run});
  EXPECT_NE(md.find("expect: rules: 1 met, 1 unmet, 1 for another mode, arch or device, 1 not "
                    "checked\n- ❌ tq-reserve-max"),
            std::string::npos)
      << md;
  // Without the rules the same crash is a failure again.
  run.rules.clear();
  auto bare = XmlReader(render_junit({run}, {})).parse();
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->all("testsuite").at(0)->attrs.at("failures"), "1");
  EXPECT_EQ(find_case(*bare, 0, "none [" + pw + "]")->all("failure").size(), 1u);
}

// A merged report of one scenario on two targets: no two suites and no two test cases share a
// name, and each names its target and arch.
TEST(Junit, MergedRunsOfTwoTargetsHaveDistinctNames) {
  RunResults h200 = fixed_runs()[0], b200 = h200, co = fixed_runs()[2];
  b200.meta.device_name = "NVIDIA B200";
  b200.meta.sm = 100;
  auto root = XmlReader(render_junit({h200, b200, co}, {})).parse();
  ASSERT_TRUE(root);
  std::set<std::string> suites, cases;
  for (const XmlNode* suite : root->all("testsuite")) {
    EXPECT_TRUE(suites.insert(suite->attrs.at("name")).second) << suite->attrs.at("name");
    for (const XmlNode* c : suite->all("testcase"))
      EXPECT_TRUE(cases.insert(c->attrs.at("classname") + "." + c->attrs.at("name")).second);
  }
  EXPECT_TRUE(suites.count("qwen3-8b-turboquant (NVIDIA H200, sm_90, cuda)")) << *suites.begin();
  EXPECT_TRUE(suites.count("qwen3-8b-turboquant (NVIDIA B200, sm_100, cuda)"));
  EXPECT_TRUE(suites.count("qwen3-8b-turboquant (sm_90, compile-only)"));
  EXPECT_TRUE(find_case(*root, 1, "none [cudagraph_mode=piecewise]"));
  EXPECT_EQ(find_case(*root, 1, "none [cudagraph_mode=piecewise]")->attrs.at("name"),
            "none [cudagraph_mode=piecewise] (NVIDIA B200, sm_100, cuda)");
}

TEST(Junit, XmllintAcceptsItAgainstTheSchema) {
  if (!have_xmllint()) GTEST_SKIP() << "xmllint not installed (apt-get install libxml2-utils)";
  std::string path = temp_path("junit.xml");
  std::ofstream(path) << render_junit(runs(), {});
  std::string cmd = "xmllint --noout --schema '" + kData + "/junit.xsd' '" + path + "'";
  EXPECT_EQ(std::system((cmd + " 2>&1").c_str()), 0) << cmd;
  // The schema is strict enough to reject a broken document.
  std::ofstream(path) << "<testsuites><testsuite name=\"x\"><testcase/></testsuite></testsuites>\n";
  EXPECT_NE(std::system((cmd + " >/dev/null 2>&1").c_str()), 0);
  std::remove(path.c_str());
}

TEST(Junit, EmptyInputIsStillValid) {
  std::string xml = render_junit({}, {});
  auto root = XmlReader(xml).parse();
  ASSERT_TRUE(root);
  EXPECT_EQ(root->attrs.at("tests"), "0");
  EXPECT_TRUE(root->all("testsuite").empty());
}

// ---------------------------------------------------------------------------------------------
// Verdict

StrategyResult verdict_row(const std::string& strategy, Outcome o, int compiles, double ttft,
                           double startup) {
  StrategyResult r;
  r.strategy = strategy;
  r.outcome = o;
  if (ttft > 0) r.ttft_ms = ttft;
  r.startup_ms = startup;
  for (int i = 0; i < compiles; ++i)
    r.hot_path_compiles.push_back(CompileEvent{"k" + std::to_string(i), "k", 10.0, "prefill", "nvrtc"});
  return r;
}

TEST(Verdict, FewestCompilesThenTtftWithinFivePercentThenStartup) {
  RunResults run;
  run.meta.mode = "cuda";
  run.results = {verdict_row("none", Outcome::kCrash, 1, 0, 100),
                 verdict_row("fast-but-compiles", Outcome::kOk, 1, 50, 100),
                 verdict_row("warm-slow-start", Outcome::kOk, 0, 80, 900),
                 verdict_row("warm-cheap", Outcome::kOk, 0, 83, 300),  // within 5% of 80
                 verdict_row("warm-slow", Outcome::kOk, 0, 90, 100)};
  const auto v = detail::verdicts(run);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].best, "warm-cheap");
  EXPECT_EQ(v[0].best_why, "ok, 0 hot-path compiles, first TTFT 83.00 ms, startup +200.0 ms vs none");
  ASSERT_GE(v[0].lines.size(), 5u);
  EXPECT_EQ(v[0].lines[0].first, "avoid the crash");
  EXPECT_EQ(v[0].lines[0].second,
            "fast-but-compiles, warm-slow-start, warm-cheap, warm-slow; failed: none (crash)");
  EXPECT_EQ(v[0].lines[1].second, "warm-slow-start, warm-cheap, warm-slow (0)");
  EXPECT_EQ(v[0].lines[2].second, "fast-but-compiles 50.00 ms");  // ok, but it compiled
  EXPECT_EQ(v[0].lines[3].second, "none 10.00 ms, fast-but-compiles 10.00 ms");
  // Nothing ended ok: no pick.
  for (auto& r : run.results) r.outcome = Outcome::kTimeout;
  EXPECT_EQ(detail::verdicts(run)[0].best, "");
  EXPECT_EQ(detail::verdicts(run)[0].lines[0].first, "avoid the failure");
  // Nothing finished: the outcome line says why rather than "no strategy ran".
  for (auto& r : run.results) r.outcome = Outcome::kInterrupted;
  run.results[4].outcome = Outcome::kSkipped;
  ASSERT_EQ(detail::verdicts(run)[0].lines.size(), 1u);
  EXPECT_EQ(detail::verdicts(run)[0].lines[0].second, "no strategy finished (4 interrupted, 1 skipped)");
}

// The verdict lists each strategy's peak device memory (the largest phase peak) against none's,
// and leaves the line out for results written before phase_memory existed.
TEST(Verdict, PeakDeviceMemoryAgainstNone) {
  RunResults run;
  run.meta.mode = "compile-only";
  run.results = {verdict_row("none", Outcome::kOk, 0, 0, 100),
                 verdict_row("reserve", Outcome::kOk, 0, 0, 110)};
  auto line_of = [](const detail::VariantVerdict& v, const std::string& name) {
    for (const auto& [k, text] : v.lines)
      if (k == name) return text;
    return std::string("(none)");
  };
  EXPECT_EQ(line_of(detail::verdicts(run)[0], "peak device memory (vs none)"), "(none)");
  run.results[0].extra["phase_memory"] = {
      {"load_weights", {{"peak_allocated_bytes", 100 << 20}, {"allocated_bytes", 100 << 20}}},
      {"0.prefill", {{"peak_allocated_bytes", 300 << 20}, {"allocated_bytes", 200 << 20}}}};
  run.results[1].extra["phase_memory"] = {
      {"kernel_warmup", {{"peak_allocated_bytes", 428 << 20}, {"allocated_bytes", 428 << 20}}},
      {"0.prefill", {{"peak_allocated_bytes", 400 << 20}, {"allocated_bytes", 328 << 20}}}};
  EXPECT_EQ(line_of(detail::verdicts(run)[0], "peak device memory (vs none)"),
            "none 300.00 MB, reserve 428.00 MB (+128.00 MB)");
  EXPECT_EQ(detail::peak_device_bytes(run.results[1]), 428LL << 20);
  // A run that failed says its peak stops where it did.
  run.results[0].outcome = Outcome::kCrash;
  run.results[0].failed_phase = "prefill";
  EXPECT_EQ(line_of(detail::verdicts(run)[0], "peak device memory (vs none)"),
            "none 300.00 MB [until its crash in prefill], reserve 428.00 MB (+128.00 MB)");
  run.results[0].outcome = Outcome::kOk;
  run.results[0].failed_phase.reset();
  run.results[0].extra.erase("phase_memory");  // no baseline: no deltas
  EXPECT_EQ(line_of(detail::verdicts(run)[0], "peak device memory"), "reserve 428.00 MB");
}

// first TTFT - steady TTFT split into its measured parts; what no part explains is the rest.
TEST(TtftExcess, PartsAreFirstMinusSteadyOverTheTtftPhases) {
  StrategyResult r = verdict_row("none", Outcome::kOk, 0, 150, 1000);
  r.steady_ttft_ms = 40;
  auto compile = [](const char* phase, int wave, double ms, const char* source) {
    CompileEvent e{"k", "k", ms, phase, source};
    e.step.request = wave == 0 ? 0 : 1;
    e.step.wave = wave;
    e.step.step = 0;
    return e;
  };
  r.hot_path_compiles = {compile("prefill", 0, 60, "nvrtc"), compile("continuation_prefill", 0, 10, "nvrtc"),
                         compile("prefill", 0, 4, "disk"), compile("first_decode", 0, 30, "nvrtc"),  // not in TTFT
                         compile("prefill", 1, 5, "nvrtc")};  // the steady request paid 5
  r.extra["autotunes"] = nlohmann::json::array(
      {{{"hot_path", true}, {"wave", 0}, {"phase", "prefill"}, {"benchmark_ms", 12.0}},
       {{"hot_path", false}, {"phase", "profile_run"}, {"benchmark_ms", 99.0}}});
  r.extra["first_time_cost_ms"] = {{"prefill", 100.0},
                                   {"prefill.model_pieces_gpu_ms", 15.0},
                                   {"prefill.prefill_attention_gpu_ms", 3.0},
                                   {"prefill.sampling_ms", 0.5},
                                   {"first_decode.model_pieces_gpu_ms", 50.0}};  // not in TTFT
  const auto x = detail::ttft_excess(r);
  ASSERT_TRUE(x);
  EXPECT_DOUBLE_EQ(x->excess_ms, 110.0);
  ASSERT_EQ(x->parts.size(), 5u);
  EXPECT_DOUBLE_EQ(x->parts[0].ms, 65.0);  // 60 + 10 - 5
  EXPECT_DOUBLE_EQ(x->parts[1].ms, 4.0);
  EXPECT_DOUBLE_EQ(x->parts[2].ms, 12.0);
  EXPECT_DOUBLE_EQ(x->parts[3].ms, 18.0);  // no mixer spans in the file: pieces + attention
  EXPECT_DOUBLE_EQ(x->parts[4].ms, 0.5);
  EXPECT_DOUBLE_EQ(x->unexplained_ms, 110.0 - 65 - 4 - 12 - 18 - 0.5);
  // With the engine thread's TTFT window split (CUPTI): those parts replace GPU time and
  // sampling, and only what the JIT's windows held beyond its records stays unexplained.
  StrategyResult by_host = r;
  auto window = [](double jit, double alloc, double module, double launch, double wait, double model,
                   double engine) {
    return nlohmann::json{{"allocator", alloc}, {"module", module}, {"launch", launch},
                          {"graph_launch", 0.5}, {"wait", wait}, {"other_api", 1.0},
                          {"jit_timed", jit}, {"jit_launch", 0.25}, {"model_host", model},
                          {"engine_host", engine}, {"reporting", 3.0}};
  };
  by_host.extra["ttft_host_ms"] = {{"0", window(81, 3, 20, 5, 20, 11, 8.25)},
                                   {"1", window(5, 0, 0, 2, 27, 3, 1.25)}};
  const auto y = detail::ttft_excess(by_host);
  ASSERT_TRUE(y);
  ASSERT_EQ(y->parts.size(), 11u);
  EXPECT_EQ(y->parts[3].name, "CUDA allocator");
  EXPECT_DOUBLE_EQ(y->parts[3].ms, 3.0);
  EXPECT_DOUBLE_EQ(y->parts[4].ms, 23.0);  // module + launch
  EXPECT_DOUBLE_EQ(y->parts[5].ms, 0.0);   // graph launch: the same in both
  EXPECT_EQ(y->parts[7].name, "waiting for the GPU");
  EXPECT_DOUBLE_EQ(y->parts[7].ms, -7.0);  // the host waited less: its stalls hid GPU work
  EXPECT_DOUBLE_EQ(y->parts[9].ms, 8.0);
  EXPECT_DOUBLE_EQ(y->parts[10].ms, 7.0);
  // The parts add up to the window but the JIT's: its records name 81 ms, its windows held 76.
  EXPECT_DOUBLE_EQ(y->unexplained_ms, 110.0 - 81 - 3 - 23 + 7 - 8 - 7);
  // A run timed with --host-split says so under its tables (its TTFTs carry CUPTI's cost).
  by_host.extra["cuda_api_timing"] = "on while requests ran: CUPTI's callbacks add host time";
  {
    RunResults split;
    split.meta.mode = "cuda";
    split.results = {by_host};
    EXPECT_NE(render_markdown({split}).find("host split (--host-split): on while requests ran"),
              std::string::npos);
    EXPECT_NE(render_table(split, false).find("host split (--host-split): on while requests ran"),
              std::string::npos);
  }
  // A table with both kinds of split has every part as a column, "–" where a row lacks it.
  RunResults mixed;
  mixed.meta.mode = "cuda";
  mixed.results = {r, by_host};
  mixed.results[1].strategy = "warm";
  const std::string mixed_md = render_markdown({mixed});
  EXPECT_NE(mixed_md.find("| 18.0 | 0.5 | – | – | – | – | – | – | – | – | 10.5 ms (10%) |"), std::string::npos)
      << mixed_md;
  EXPECT_NE(mixed_md.find("| – | – | 3.0 | 23.0 | 0.0 | 0.0 | -7.0 | 0.0 | 8.0 | 7.0 |"), std::string::npos)
      << mixed_md;
  // Markdown shows it per strategy, folded.
  RunResults run;
  run.meta.mode = "cuda";
  run.results = {r};
  const std::string md = render_markdown({run});
  EXPECT_NE(md.find("First-request TTFT excess by part"), std::string::npos);
  EXPECT_NE(md.find("| none | – | 150.0 ms | 40.0 ms | 110.0 ms | 65.0 | 4.0 | 12.0 | 18.0 | 0.5 | 10.5 ms (10%) |"),
            std::string::npos)
      << md;
  // So does the HTML.
  const std::string html = render_html({run});
  EXPECT_NE(html.find("<h4>First-request TTFT excess by part</h4>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">65.0</td><td class=\"num\">4.0</td><td class=\"num\">12.0</td>"
                      "<td class=\"num\">18.0</td><td class=\"num\">0.5</td><td class=\"num\">10.5 ms (10%)</td>"),
            std::string::npos);
  // Nothing to split: compile-only (no TTFT), or a steady request of another length.
  StrategyResult pinned = r;
  pinned.extra["steady_not_comparable"] = "the steady request has 64 prompt tokens, the first request 512";
  EXPECT_FALSE(detail::ttft_excess(pinned));
  StrategyResult compile_only = r;
  compile_only.ttft_ms.reset();
  EXPECT_FALSE(detail::ttft_excess(compile_only));
  // An autotune record with fields of another type (a hand-edited results file) counts as
  // absent instead of throwing.
  StrategyResult odd = r;
  odd.extra["autotunes"] = nlohmann::json::array(
      {{{"hot_path", "yes"}, {"wave", 0}, {"phase", "prefill"}, {"benchmark_ms", 12.0}},
       {{"hot_path", true}, {"wave", "0"}, {"phase", "prefill"}, {"benchmark_ms", 12.0}},
       {{"hot_path", true}, {"wave", 0}, {"phase", 7}, {"benchmark_ms", 12.0}},
       {{"hot_path", true}, {"wave", 0}, {"phase", "prefill"}, {"benchmark_ms", 2.0}}});
  const auto z = detail::ttft_excess(odd);
  ASSERT_TRUE(z);
  EXPECT_DOUBLE_EQ(z->parts[2].ms, 2.0);
}

// ---------------------------------------------------------------------------------------------
// Markdown

TEST(Markdown, MatchesGolden) { check_golden("markdown_golden.md", render_markdown(runs())); }

// Table rows of the Markdown section of `scenario` (lines starting with "| " after the header).
std::vector<std::string> table_rows(const std::string& md, const std::string& scenario) {
  size_t at = md.find("### " + scenario);
  EXPECT_NE(at, std::string::npos) << scenario;
  std::vector<std::string> rows;
  std::istringstream in(md.substr(at));
  std::string line;
  bool header = false, seen = false;
  while (std::getline(in, line)) {
    if (line.rfind("| strategy", 0) == 0) {
      if (seen) break;
      header = seen = true;
      continue;
    }
    if (line.rfind("|---", 0) == 0) continue;
    if (line.rfind("| ", 0) == 0 && header) {
      rows.push_back(line);
    } else if (header) {
      break;
    }
  }
  return rows;
}

size_t unescaped_pipes(const std::string& line) {
  size_t n = 0;
  for (size_t i = 0; i < line.size(); ++i) n += line[i] == '|' && (i == 0 || line[i - 1] != '\\');
  return n;
}

// A steady request that was cold or pinned another length: first/steady is not comparable.
// A workspace_policy that never locks (grow, fixed, resize) shows "-" where the locked size goes,
// in every report; lock (and results from before the key) keep the number.
TEST(Reports, LockedWorkspaceIsADashUnderAPolicyThatNeverLocks) {
  std::vector<RunResults> r = {fixed_runs()[0]};
  StrategyResult& grow = r[0].results[1];
  grow.extra["workspace_policy"] = "grow";
  grow.workspace.locked_bytes = 0;
  grow.workspace.peak_requested_bytes = 8 << 20;
  r[0].results[2].extra["workspace_policy"] = "lock";
  r[0].results[2].workspace.locked_bytes = 2 << 20;
  EXPECT_EQ(detail::locked_mb(grow), "-");
  EXPECT_EQ(detail::locked_mb(r[0].results[2]), "2.00");
  StrategyResult uncaptured = r[0].results[2];  // lock, but no graph capture reached the lock
  uncaptured.extra["workspace_locked"] = false;
  EXPECT_EQ(detail::locked_mb(uncaptured), "-");
  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("| - / 8.00 MB |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2.00 / "), std::string::npos) << md;
  const std::string table = render_table(r[0], false);
  EXPECT_NE(table.find("- / 8.00"), std::string::npos) << table;
  EXPECT_NE(table.find("locked -: never locked"), std::string::npos) << table;
  EXPECT_NE(render_html(r).find("- / 8.00 MB</td>"), std::string::npos);
  EXPECT_NE(render_junit(r, {}).find("workspace: never locked (workspace_policy grow), peak "
                                     "requested 8.00 MB"),
            std::string::npos);
}

TEST(Markdown, FirstOverSteadyIsNotComparableWhenTheSteadyRequestWasNotItsWarmTwin) {
  std::vector<RunResults> r = {fixed_runs()[0]};
  StrategyResult& pinned = r[0].results[1];  // tq-decode-warmup [piecewise], ok
  StrategyResult& cold = r[0].results[2];    // tq-reserve-max [piecewise], ok
  pinned.extra["steady_not_comparable"] = "the steady request has 2048 prompt tokens, the first request 4096";
  cold.extra["steady_cold"] = 2;
  cold.hot_path_compiles[0].step.request = 0;  // first wave, its first step
  cold.hot_path_compiles[0].step.wave = 0;
  cold.hot_path_compiles[0].step.step = 0;
  cold.hot_path_compiles[1].step.request = 1;  // the steady request paid for this one
  cold.hot_path_compiles[1].step.wave = 1;
  cold.hot_path_compiles[1].step.step = 2;
  const std::string md = render_markdown(r);
  size_t nc = 0;
  for (size_t at = md.find("| n/c |"); at != std::string::npos; at = md.find("| n/c |", at + 1)) ++nc;
  EXPECT_EQ(nc, 2u) << md;
  EXPECT_NE(md.find("n/c: not comparable (tq-decode-warmup \\[cudagraph_mode=piecewise\\]: the "
                    "steady request has 2048 prompt tokens, the first request 4096; tq-reserve-max "
                    "\\[cudagraph_mode=piecewise\\]: the steady request was not warm (2 hot-path "
                    "compiles, loads or autotunings))"),
            std::string::npos)
      << md;
  const std::string html = render_html(r);
  EXPECT_NE(html.find("<span title=\"the steady request was not warm (2 hot-path compiles, loads or "
                      "autotunings)\">not comparable</span>"),
            std::string::npos);
  // The compile list says which wave and step paid for each hot-path compile.
  EXPECT_NE(html.find("<td>first wave, request 0, step 0</td><td>tq_cache_store</td>"), std::string::npos);
  EXPECT_NE(html.find("<td>steady request 1, step 2</td><td>tq_decode_stage1</td>"), std::string::npos);
}

// A pull-request comment has a size limit: past it the comment drops detail step by step, then
// whole scenarios from the end, and says so; repeated kernels are listed once with a count.
TEST(Markdown, ShortensToTheCommentLimitAndSaysWhat) {
  std::vector<RunResults> many;
  for (int i = 0; i < 40; ++i) {
    RunResults run;
    run.meta.mode = "cuda";
    run.scenario.name = fmt::format("scenario-{}", i);
    StrategyResult crash = verdict_row("none", Outcome::kCrash, 3, 0, 100);
    for (auto& e : crash.hot_path_compiles) e.kernel = "fp8_gemm_nt";
    std::string error;
    for (int line = 0; line < 100; ++line) error += fmt::format("frame {} of a long trace\n", line);
    crash.error = error;
    run.results = {crash, verdict_row("warm", Outcome::kOk, 0, 50, 200)};
    many.push_back(run);
  }
  const std::string full = render_markdown(many, 0);
  EXPECT_GT(full.size(), kCommentLimitBytes);
  EXPECT_NE(full.find("**3**: fp8_gemm_nt (prefill) ×3"), std::string::npos);
  EXPECT_NE(full.find("frame 99 of a long trace"), std::string::npos);
  const std::string cut = render_markdown(many);
  EXPECT_LE(cut.size(), kCommentLimitBytes);
  EXPECT_NE(cut.find("Shortened to fit 65536 bytes"), std::string::npos) << cut.substr(cut.size() - 300);
  EXPECT_EQ(cut.find("frame 99 of a long trace"), std::string::npos);
  EXPECT_NE(cut.find("### scenario-39"), std::string::npos);  // all 40 fit once errors are cut
  EXPECT_NE(cut.find("more lines in the results file"), std::string::npos);
  // A tighter limit leaves scenarios out and names them.
  const std::string tight = render_markdown(many, 8000);
  EXPECT_LE(tight.size(), 8000u);
  EXPECT_NE(tight.find("### scenario-0"), std::string::npos);
  EXPECT_EQ(tight.find("### scenario-39"), std::string::npos);
  EXPECT_NE(tight.find("scenario-39"), std::string::npos);  // named in the closing line
  EXPECT_NE(tight.find("scenario(s) left out"), std::string::npos);
}

// A backtick in a file name or --set value cannot end its code span early.
TEST(Markdown, CodeSpansHoldBackticks) {
  RunResults run;
  run.meta.mode = "cuda";
  run.scenario.name = "s";
  run.scenario.file = "scenarios/a`b.yaml";
  run.meta.sets = {"model.overrides.x=``y"};
  run.results = {verdict_row("none", Outcome::kOk, 0, 50, 100)};
  const std::string md = render_markdown({run});
  EXPECT_NE(md.find("(``scenarios/a`b.yaml``)"), std::string::npos) << md;
  EXPECT_NE(md.find("```model.overrides.x=``y```"), std::string::npos) << md;
}

// An MTP drafter's compiles say which pass of which step paid for them, in every report that
// lists compiles; the target's own compiles read as before.
TEST(Reports, DrafterCompilesSayWhichPass) {
  RunResults run;
  run.meta.mode = "cuda";
  run.scenario.name = "s";
  StrategyResult r = verdict_row("none", Outcome::kOk, 2, 50, 100);
  r.hot_path_compiles[1].step.request = 0;
  r.hot_path_compiles[1].step.drafter_pass = 1;
  r.hot_path_compiles[1].step.drafter_tokens = 300;
  run.results = {r};
  const std::string where = "prefill, drafter pass 1 (300 rows)";
  const std::string md = render_markdown({run});
  EXPECT_NE(md.find("k0 (prefill)"), std::string::npos) << md;
  EXPECT_NE(md.find("k1 (" + where + ")"), std::string::npos) << md;
  EXPECT_NE(render_html({run}).find(where), std::string::npos);
  JunitOptions fail;
  fail.hot_path_compiles_fail = true;
  EXPECT_NE(render_junit({run}, fail).find("k1 (" + where + ")"), std::string::npos);
  // The trace gives the pass as an argument of the compile's slice (when its phase has a slice).
  run.results[0].phases = {{"prefill", 40.0, std::nullopt, 0}};
  const nlohmann::json trace = nlohmann::json::parse(render_trace({run}));
  int drafter = 0;
  for (const auto& ev : trace.at("traceEvents")) {
    if (!ev.contains("args") || !ev.at("args").contains("drafter")) continue;
    ++drafter;
    EXPECT_EQ(ev.at("name"), "compile k1");
    EXPECT_EQ(ev.at("args").at("drafter").at("pass"), 1);
    EXPECT_EQ(ev.at("args").at("drafter").at("tokens"), 300);
  }
  EXPECT_EQ(drafter, 1);
}

// A multi-rank result: each compile says its rank, and every report shows the ranks block (a row
// per rank, its error, the largest stall and who arrived last after compiling what).
TEST(Reports, MultiRankResultsShowEachRankAndTheLargestStall) {
  RunResults run;
  run.meta.mode = "compile-only";
  run.scenario.name = "s";
  StrategyResult r = verdict_row("mamba", Outcome::kCrash, 1, 50, 100);
  r.error = "collective timed out";
  r.hot_path_compiles[0].rank = 3;
  r.extra["ranks"] = nlohmann::json::parse(R"({
    "world": 2, "backend": "store", "collective_timeout_ms": 150,
    "per_rank": [
      {"rank": 0, "outcome": "crash", "error": "collective all_reduce #4 timed out\nmore",
       "hot_path_compiles": 0, "collectives": 5, "wait_ms": 151.5, "last_arrivals": 1},
      {"rank": 3, "outcome": "ok", "hot_path_compiles": 1, "collectives": 4, "wait_ms": 2.0,
       "last_arrivals": 3}],
    "steps": [{"phase": "prefill", "request": 0, "step": 0, "stall_ms": 149.0, "collectives": 2,
               "last_rank": 3, "why": [{"kernel": "fused_moe_gemm", "compile_ms": 148.0},
                                       {"kernel": "conv1d", "compile_ms": 20.0, "every_rank": true},
                                       {"kernel": "conv1d", "compile_ms": 30.0, "every_rank": true}]},
              {"phase": "profile_run", "request": -1, "step": -1, "stall_ms": 12.0,
               "collectives": 1, "last_rank": 0,
               "why": [{"kernel": "ssd", "compile_ms": 900.0, "every_rank": true}]},
              {"phase": "envelope", "request": 138, "step": 0, "stall_ms": 400.0,
               "collectives": 1, "last_rank": 3, "why": []}]})");
  run.results = {r};
  // A coverage sweep's collective is no request step: named apart, by the class it followed.
  EXPECT_NE(render_table(run, false).find("largest envelope-sweep stall: envelope (after class "
                                          "138 of the sweep): 400.0 ms over 1 collectives"),
            std::string::npos) << render_table(run, false);
  const std::string stall =
      "largest request-step stall: prefill (request 0, step 0): 149.0 ms over 2 collectives; "
      "rank 3 arrived last after compiling fused_moe_gemm 148 ms; 2 compiles every rank ran too "
      "(50 ms here)";
  EXPECT_NE(render_table(run, false).find("largest startup stall: profile_run: 12.0 ms over 1 "
                                          "collectives; rank 0 arrived last after 1 compile every "
                                          "rank ran too (900 ms here), none of its own"),
            std::string::npos) << render_table(run, false);
  const std::string table = render_table(run, false);
  EXPECT_NE(table.find("ranks of mamba: 2 ranks, store backend, collective timeout 150 ms"),
            std::string::npos) << table;
  EXPECT_NE(table.find(stall), std::string::npos) << table;
  EXPECT_NE(table.find("rank 0: collective all_reduce #4 timed out\n"), std::string::npos) << table;
  const std::string md = render_markdown({run});
  EXPECT_NE(md.find("<summary>Ranks of mamba</summary>"), std::string::npos) << md;
  EXPECT_NE(md.find(stall), std::string::npos) << md;
  const std::string html = render_html({run});
  EXPECT_NE(html.find("<h4>Ranks of mamba</h4>"), std::string::npos);
  EXPECT_NE(html.find(stall), std::string::npos);
  EXPECT_NE(html.find("prefill, rank 3"), std::string::npos);
  const std::string junit = render_junit({run}, {});
  EXPECT_NE(junit.find(stall), std::string::npos) << junit;
  EXPECT_NE(junit.find("prefill, rank 3"), std::string::npos) << junit;
  // A block of the wrong shape is said, not thrown.
  run.results[0].extra["ranks"]["world"] = "two";
  EXPECT_NE(render_table(run, false).find("the ranks block cannot be read"), std::string::npos);
}

TEST(Markdown, FailuresFirstAndEveryRowComplete) {
  std::string md = render_markdown(runs());
  EXPECT_NE(md.find("NVIDIA H200 (sm_90, 132 SMs)**"), std::string::npos);
  EXPECT_NE(md.find("CUDA 13.0"), std::string::npos);
  for (const RunResults& run : runs()) {
    auto rows = table_rows(md, run.scenario.name == "synthetic & edge cases" ? "synthetic &amp; edge cases"
                                                                               : run.scenario.name);
    ASSERT_EQ(rows.size(), run.results.size()) << run.scenario.name;
    bool seen_ok = false;
    for (const auto& row : rows) {
      EXPECT_EQ(unescaped_pipes(row), 10u) << row;  // 9 columns
      bool ok = row.find("✅ ok") != std::string::npos;
      if (ok) seen_ok = true;
      else EXPECT_FALSE(seen_ok) << "failed row after an ok row: " << row;
    }
  }
  // Units on numbers, the null note in compile-only mode, full errors folded.
  EXPECT_NE(md.find("1988.7 ms"), std::string::npos);
  EXPECT_NE(md.find("0.00 / 0.51 MB"), std::string::npos);
  EXPECT_NE(md.find("–: compile-only: no kernel times"), std::string::npos);
  EXPECT_NE(md.find("<details><summary>Errors (4)</summary>"), std::string::npos);
  // An error text holding ``` is fenced with a longer fence.
  EXPECT_NE(md.find("````text\nWorkspace is locked"), std::string::npos);
  // Ratio first/steady: 85.566778 / 25.007783.
  EXPECT_NE(md.find("3.42×"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// HTML

TEST(Reports, SetOverridesAreShownInMarkdownAndHtml) {
  std::vector<RunResults> with_sets = fixed_runs();
  with_sets.front().meta.sets = {"cudagraph_mode=piecewise", "requests.0.prompt_tokens=8192"};
  EXPECT_NE(render_markdown(with_sets).find("Settings: --set `cudagraph_mode=piecewise`, "
                                            "`requests.0.prompt_tokens=8192`"),
            std::string::npos);
  EXPECT_NE(render_html(with_sets).find("--set <code>requests.0.prompt_tokens=8192</code>"),
            std::string::npos);
  EXPECT_EQ(render_markdown(fixed_runs()).find("Settings:"), std::string::npos);
}

TEST(Html, MatchesGolden) { check_golden("html_golden.html", render_html(runs())); }

TEST(Html, SelfContainedWellFormedAndHasBothChartsPerVariant) {
  std::string html = render_html(runs());
  for (const char* banned : {"<script", "http://", "https://", " src=", "<link", "@import", "url("}) {
    EXPECT_EQ(html.find(banned), std::string::npos) << banned;
  }
  XmlReader reader(html);
  ASSERT_TRUE(reader.parse()) << reader.error();

  size_t variants = 0;
  for (const RunResults& run : runs()) variants += detail::variants_of(run).size();
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = html.find(needle); at != std::string::npos; at = html.find(needle, at + 1)) ++n;
    return n;
  };
  const size_t compile_only_variants = detail::variants_of(runs()[2]).size();
  EXPECT_EQ(count("aria-label=\"startup time by phase\""), variants);
  EXPECT_EQ(count("aria-label=\"first-request TTFT against steady TTFT\""),
            variants - compile_only_variants);
  // Compile-only mode times no kernel: its TTFT chart is replaced by the hot-path compile time.
  EXPECT_EQ(count("aria-label=\"hot-path compile time per strategy\""), compile_only_variants);
  EXPECT_NE(html.find("429 ms (3 compiles)"), std::string::npos);  // tq-reserve-max, compile-only
  // A verdict per variant.
  EXPECT_EQ(count("<div class=\"verdict\">"), variants);
  EXPECT_NE(html.find("<b>Verdict:</b> best <b>both</b> (ok, 0 hot-path compiles, first TTFT 85.05 ms"),
            std::string::npos);
  EXPECT_GE(count("class=\"badge crash\""), 6u);
  EXPECT_GE(count("class=\"badge ok\""), 10u);
  EXPECT_EQ(count("class=\"badge timeout\""), 2u);  // table + error block
  EXPECT_GE(count("class=\"badge error\""), 2u);
  // No section of "not measured" lines for the compile-only run; only its verdict says so.
  EXPECT_EQ(count("not measured (compile-only)"), compile_only_variants);
  // Hot-path compile keys are shown in <code>, escaped.
  EXPECT_NE(html.find("<code>tq_cache_store[A=1]&lt;x &amp; y&gt;@sm_90</code>"), std::string::npos);
  for (const char* phase : {"init", "load_weights", "profile_run", "kv_cache_alloc", "kernel_warmup",
                            "graph_capture", "workspace_lock"}) {
    EXPECT_NE(html.find(std::string("</i>") + phase + "</span>"), std::string::npos) << phase;
  }
}

// ---------------------------------------------------------------------------------------------
// Trace

TEST(Trace, MatchesGolden) { check_golden("trace_golden.json", render_trace(runs())); }

TEST(Trace, EveryPhasePresentInOrderAndCompilesNested) {
  json doc = json::parse(render_trace(runs()));
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  const json& events = doc["traceEvents"];
  ASSERT_TRUE(events.is_array());

  struct Track {
    std::string name;
    std::vector<json> phases, compiles, instants;
  };
  std::map<std::pair<int, int>, Track> tracks;
  std::map<int, std::string> processes;
  for (const json& e : events) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid")) << e.dump();
    auto key = std::make_pair(e["pid"].get<int>(), e["tid"].get<int>());
    std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "thread_name") tracks[key].name = e["args"]["name"];
      if (e["name"] == "process_name") processes[key.first] = e["args"]["name"];
    } else if (ph == "X") {
      ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number()) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
      std::string cat = e["cat"];
      (cat.rfind("compile", 0) == 0 ? tracks[key].compiles : tracks[key].phases).push_back(e);
    } else if (ph == "i") {
      tracks[key].instants.push_back(e);
    } else {
      ADD_FAILURE() << "unexpected phase type " << e.dump();
    }
  }
  ASSERT_EQ(processes.size(), runs().size());
  for (size_t s = 0; s < runs().size(); ++s) {
    const int pid = static_cast<int>(s) + 1;
    EXPECT_EQ(processes[pid], runs()[s].scenario.name);
    auto rows = detail::grouped_rows(runs()[s]);
    for (size_t t = 0; t < rows.size(); ++t) {
      const StrategyResult& r = *rows[t];
      const Track& tr = tracks[{pid, static_cast<int>(t) + 1}];
      SCOPED_TRACE(detail::label(r));
      EXPECT_EQ(tr.name, detail::label(r));
      // Every recorded phase, in order, back to back from 0, never overlapping.
      ASSERT_GE(tr.phases.size(), r.phases.size());
      double end = 0;
      for (size_t p = 0; p < tr.phases.size(); ++p) {
        const json& e = tr.phases[p];
        if (p < r.phases.size()) {
          EXPECT_EQ(e["name"], r.phases[p].name);
          EXPECT_EQ(e["args"]["request"], r.phases[p].request);
          EXPECT_NEAR(e["dur"].get<double>(), r.phases[p].ms * 1000, 0.001);
        } else {
          // Only a failed, untimed phase may follow the recorded ones.
          EXPECT_EQ(e["name"], r.failed_phase.value_or("?"));
          EXPECT_EQ(e["args"]["timed"], false);
        }
        EXPECT_NEAR(e["ts"].get<double>(), end, 0.002) << "phases must be back to back";
        end = e["ts"].get<double>() + e["dur"].get<double>();
      }
      // Every compile placed, inside a slice of its own phase, not overlapping the previous.
      EXPECT_EQ(tr.compiles.size(), r.startup_compile_list.size() + r.hot_path_compiles.size());
      for (const json& c : tr.compiles) {
        double b = c["ts"], d = c["dur"];
        bool inside = false;
        for (const json& p : tr.phases) {
          double pb = p["ts"], pd = p["dur"];
          if (p["name"] == c["args"]["phase"] && b >= pb - 1e-6 && b + d <= pb + pd + 1e-6) inside = true;
        }
        EXPECT_TRUE(inside) << c.dump();
        for (const char* k : {"kernel", "key", "compile_ms", "source", "hot_path"}) {
          EXPECT_TRUE(c["args"].contains(k)) << k;
        }
      }
      for (size_t a = 0; a < tr.compiles.size(); ++a) {
        for (size_t b = a + 1; b < tr.compiles.size(); ++b) {
          double a0 = tr.compiles[a]["ts"], a1 = a0 + tr.compiles[a]["dur"].get<double>();
          double b0 = tr.compiles[b]["ts"], b1 = b0 + tr.compiles[b]["dur"].get<double>();
          EXPECT_TRUE(a1 <= b0 + 1e-6 || b1 <= a0 + 1e-6) << "compiles overlap";
        }
      }
      // One outcome marker at the end of the track.
      ASSERT_EQ(tr.instants.size(), 1u);
      EXPECT_EQ(tr.instants[0]["args"]["outcome"], outcome_name(r.outcome));
      EXPECT_NEAR(tr.instants[0]["ts"].get<double>(), end, 0.002);
    }
  }
}

TEST(Trace, FailedPhaseWithCompilesGetsAnUntimedSlice) {
  json doc = json::parse(render_trace({runs()[3]}));
  bool found = false;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "continuation_prefill") {
      found = true;
      EXPECT_EQ(e["args"]["timed"], false);
      EXPECT_TRUE(e["args"]["ms"].is_null());
      EXPECT_NEAR(e["dur"].get<double>(), 7500, 0.001);  // its one compile, 7.5 ms
    }
  }
  EXPECT_TRUE(found);
}

// ---------------------------------------------------------------------------------------------
// Files

TEST(ReportFiles, WritesEachRequestedFileAtomically) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(::testing::TempDir()) / ("renderers_files." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ReportFiles files;
  files.junit = (dir / "r.xml").string();
  files.html = (dir / "r.html").string();
  files.trace = (dir / "r.trace.json").string();
  files.hot_path_compiles_fail = true;  // markdown left empty: not written
  write_report_files(runs(), files);
  JunitOptions strict;
  strict.hot_path_compiles_fail = true;
  EXPECT_EQ(read_file(files.junit), render_junit(runs(), strict));
  EXPECT_EQ(read_file(files.html), render_html(runs()));
  EXPECT_EQ(read_file(files.trace), render_trace(runs()));
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    ++n;
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
  EXPECT_EQ(n, 3u);
  struct stat st {};
  ASSERT_EQ(::stat(files.html.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);

  ReportFiles bad;
  bad.markdown = (dir / "missing-dir" / "r.md").string();
  try {
    write_report_files(runs(), bad);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad.markdown), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// A coverage run's envelope sweep (phase "envelope", request -1) runs after startup in place of
// the requests: not a startup phase in the startup sum, the HTML startup bar or JUnit.
TEST(Reports, EnvelopeSweepIsNoStartupPhase) {
  StrategyResult r;
  r.phases = {{"load_weights", 30.0, std::nullopt, -1}, {"graph_capture", 11.0, std::nullopt, -1},
              {"envelope", 2500.0, std::nullopt, -1}};
  EXPECT_TRUE(detail::is_startup_phase(r.phases[0]));
  EXPECT_FALSE(detail::is_startup_phase(r.phases[2]));
  EXPECT_DOUBLE_EQ(detail::startup_phase_sum(r), 41.0);
  std::vector<RunResults> runs_ = {fixed_runs()[0]};
  runs_[0].results[0].phases = r.phases;
  const std::string xml = render_junit(runs_, {});
  EXPECT_NE(xml.find("after startup envelope: 2500.000 ms"), std::string::npos);
  EXPECT_EQ(xml.find("  startup envelope:"), std::string::npos);
  const std::string html = render_html(runs_);
  EXPECT_EQ(html.find("<title>envelope: "), std::string::npos);  // no bar segment for it
  EXPECT_NE(html.find("<title>load_weights: 30.0 ms</title>"), std::string::npos);
}

// A coverage run's compile list names the envelope class that first reached each cold key and
// the time its compile after the sweep took, not the class's index as a request with 0 ms.
TEST(Html, CoverageCompileListNamesTheClassAndTheMeasuredCompileTime) {
  std::vector<RunResults> r = {fixed_runs()[0]};
  StrategyResult& s = r[0].results[2];  // tq-reserve-max [piecewise], ok, with hot-path compiles
  s.extra["envelope"] = {
      {"classes", 4103}, {"reached_keys", 3}, {"covered_at_startup", 1}, {"cold_keys", 2},
      {"cold", nlohmann::json::array(
                   {{{"kernel", "tq_dequant_kv"}, {"key", "tq_dequant_kv[A](i32:1)"},
                     {"class", "decode 1 + prefill 2"}, {"compile_ms", 88.5}},
                    {{"kernel", "tq_dequant_kv"}, {"key", "tq_dequant_kv[A](i32)"},
                     {"class", "decode 1 after 17 + prefill 2"}}})}};
  const std::string html = render_html(r);
  EXPECT_NE(html.find("<td>class decode 1 + prefill 2</td><td>tq_dequant_kv</td><td>envelope</td>"
                      "<td class=\"num\">88.5 ms</td>"),
            std::string::npos) << html;
  // no time measured (the compile pass did not run): a dash, not 0
  EXPECT_NE(html.find("<td>class decode 1 after 17 + prefill 2</td><td>tq_dequant_kv</td>"
                      "<td>envelope</td><td class=\"num\">–</td>"),
            std::string::npos);
  // the strategy's request-replay records are not listed beside its envelope
  EXPECT_EQ(html.find("first wave, request"), std::string::npos);
}

// A sweep of every rank (engine.ranks: all) counts keys per rank: each report says so.
TEST(Reports, RanksCoverageSaysKeysAreCountedPerRank) {
  std::vector<RunResults> r = {fixed_runs()[0]};
  StrategyResult& s = r[0].results[2];
  s.extra["envelope"] = {
      {"classes", 40}, {"reached_keys", 8}, {"covered_at_startup", 6}, {"cold_keys", 2},
      {"keys_counted", "per rank"},
      {"per_rank", nlohmann::json::array({{{"rank", 0}}, {{"rank", 1}}})},
      {"warmup_classes", {"prefill 10"}},
      {"cold", nlohmann::json::array(
                   {{{"kernel", "fused_moe_gemm"}, {"key", "a"}, {"class", "prefill 10"}, {"rank", 0}},
                    {{"kernel", "fused_moe_gemm"}, {"key", "a"}, {"class", "prefill 10"}, {"rank", 1}}})}};
  const std::string table = render_table(r[0], false);
  EXPECT_NE(table.find("keys counted once per rank that reaches them (the sweeps of 2 ranks"),
            std::string::npos) << table;
  EXPECT_NE(render_markdown(r).find("(2 keys, counted per rank over 2 ranks)"), std::string::npos);
  EXPECT_NE(render_html(r).find("(2 keys, counted per rank over 2 ranks)"), std::string::npos);
  s.extra["envelope"].erase("keys_counted");  // one process: no such note
  EXPECT_EQ(render_markdown(r).find("counted per rank"), std::string::npos);
}

}  // namespace
}  // namespace coldstart::reports
