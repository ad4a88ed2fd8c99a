// coldstart: a bounded, deterministic mutation fuzzer for the scenario fuzz target, for builds
// without libFuzzer (GCC; clang without its fuzzer runtime). It takes libFuzzer's command line:
//
//   scenario_fuzz [-max_total_time=S] [-runs=N] [-seed=N] [-timeout=S] [-rss_limit_mb=M]
//                 [-max_len=N] [-dict=FILE] [-artifact_prefix=DIR/] CORPUS_DIR_OR_FILE...
//
// One self-contained program over 600 lines on purpose (a driver for builds without libFuzzer,
// nothing else links it): the mutators, the coverage map and the run loop share its state.
//
// Given only files, it runs each once (reproduce a finding); given a directory, it fuzzes. The
// seed corpus is every file of the directories (and the files) given. Each step picks a corpus
// entry, stacks 1-16 mutations on it (bit flips, byte sets, inserts, deletes, copies, splices
// with another entry, dictionary tokens, YAML-aware ones: anchors / aliases / merge keys,
// document markers, flow brackets, indentation, line copies and swaps, huge and boundary
// numbers, long digit strings, deep nesting) and loads the result in process. The PRNG is
// seeded by -seed (default 1): the same seed gives the same sequence of inputs.
//
// Coverage guidance: the loader library is compiled with -fsanitize-coverage=trace-pc in the
// fuzz build (harness/replay/fuzz/CMakeLists.txt); __sanitizer_cov_trace_pc below hashes each
// (previous, current) basic-block pair into an edge map, AFL-style, and an input that reaches an
// edge (or an edge's hit-count bucket) not seen before joins the corpus.
//
// Findings: an unexpected exception (see scenario_fuzz_target.cpp) is saved and counted and the
// run goes on; a signal, a sanitizer report (death callback), an input running past -timeout
// seconds or a resident size past -rss_limit_mb is saved and ends the run. Inputs are saved as
// <artifact_prefix><crash|timeout|oom|exception>-<fnv64 of the input><.yaml|.json|.set>. Exit
// status: 0 without findings, 1 with.
//
// Why one file of ~780 lines: it is a self-contained program (its own main, command line,
// mutators, watchdog and artifact writer) that mirrors libFuzzer's interface; nothing else links
// it, and it is replaced by libFuzzer where that exists.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness/replay/fuzz/scenario_fuzz_target.h"

using coldstart::fuzz::Kind;

// ---- coverage -----------------------------------------------------------------------------------

namespace {
constexpr size_t kMapSize = 1u << 16;
uint8_t g_map[kMapSize];
uintptr_t g_prev_pc = 0;
bool g_saw_coverage = false;
}  // namespace

extern "C" __attribute__((no_sanitize("address", "undefined"))) void __sanitizer_cov_trace_pc() {
  const uintptr_t pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  const uintptr_t h = (pc ^ (pc >> 17)) * 0x9E3779B97F4A7C15ull;
  uint8_t& slot = g_map[((h >> 48) ^ g_prev_pc) & (kMapSize - 1)];
  if (slot != 255) ++slot;
  g_prev_pc = (h >> 48) >> 1;
}

namespace {

// ---- the input being run, for the fatal handlers ------------------------------------------------

std::string g_prefix = "./";
const char* volatile g_cur_data = nullptr;
volatile size_t g_cur_size = 0;
std::atomic<int64_t> g_exec_start_ms{0};
std::atomic<bool> g_saving{false};

uint64_t fnv64(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 1099511628211ull;
  return h;
}

// Async-signal-safe: builds <prefix><what>-<hash><ext> and writes the current input there.
void save_current(const char* what) {
  if (g_saving.exchange(true)) return;
  const char* data = g_cur_data;
  size_t size = g_cur_size;
  if (!data) return;
  char path[4096];
  size_t n = 0;
  auto put = [&](const char* s) {
    while (*s && n + 1 < sizeof(path)) path[n++] = *s++;
  };
  put(g_prefix.c_str());
  put(what);
  put("-");
  uint64_t h = fnv64(data, size);
  for (int i = 15; i >= 0; --i) {
    if (n + 1 < sizeof(path)) path[n++] = "0123456789abcdef"[(h >> (4 * i)) & 15];
  }
  put(coldstart::fuzz::extension(
      coldstart::fuzz::kind_of(reinterpret_cast<const uint8_t*>(data), size)));
  path[n] = 0;
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    size_t off = 0;
    while (off < size) {
      ssize_t w = ::write(fd, data + off, size - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    ::close(fd);
  }
  const char* msg1 = "scenario_fuzz: FINDING: the input is saved as ";
  ssize_t ignored = ::write(2, msg1, std::strlen(msg1));
  ignored = ::write(2, path, n);
  ignored = ::write(2, "\n", 1);
  (void)ignored;
}

void on_signal(int sig) {
  const char* msg = "\nscenario_fuzz: FINDING: a signal while loading an input\n";
  ssize_t ignored = ::write(2, msg, std::strlen(msg));
  (void)ignored;
  save_current("crash");
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void on_sanitizer_death() { save_current("crash"); }

extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

void install_handlers() {
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(on_sanitizer_death);
  std::vector<int> sigs = {SIGABRT};
  // Under ASan its own handler reports these (and the death callback saves the input).
  if (!kAsan) sigs.insert(sigs.end(), {SIGSEGV, SIGBUS, SIGFPE, SIGILL});
  for (int s : sigs) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_ONSTACK;
    sigaction(s, &sa, nullptr);
  }
  // A stack overflow needs an alternate stack to report.
  static std::vector<char> alt(1 << 16);
  stack_t st{};
  st.ss_sp = alt.data();
  st.ss_size = alt.size();
  if (!kAsan) sigaltstack(&st, nullptr);
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

long rss_mb() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long pages = 0, resident = 0;
  int got = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  if (got != 2) return 0;
  return resident * (sysconf(_SC_PAGESIZE) / 1024) / 1024;
}

// ---- PRNG (splitmix64) --------------------------------------------------------------------------

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? static_cast<size_t>(next() % n) : 0; }
  bool coin() { return next() & 1; }
};

// ---- mutations ----------------------------------------------------------------------------------

const char kInterestingBytes[] = "\0\xff\n\r\t :-#&*!|>'\"\\{}[],?%@`~.0123456789eE+";

const std::vector<std::string> kBuiltinTokens = {
    "&a ", "*a", "&b ", "*b", "<<: *a", "<<: ", "---\n", "...\n", "--- ", "{", "}", "[", "]",
    "{}", "[]", ": ", "- ", "? ", ", ", "|\n", ">-\n", "!!str ", "!!int ", "!!map ", "!!seq ",
    "!!binary ", "!!float ", "!<tag:yaml.org,2002:int> ", "%YAML 1.2\n", "%TAG ! tag:x,2000:\n",
    "~", "null", "true", "false", "yes", "no", ".inf", "-.inf", ".nan", "NaN", "Infinity",
    "-Infinity", "1e309", "-1e309", "1e-400", "4.9e-324", "0x7fffffff", "0o777", "0b1",
    "2147483647", "2147483648", "-2147483649", "4294967296", "9223372036854775807",
    "9223372036854775808", "-9223372036854775809", "18446744073709551616", "-0", "0", "1", "-1",
    "1.5", "\"\\u0000\"", "\"\\x00\"", "'", "\"", "#", "\t", "\r\n", "\xef\xbb\xbf", "\xc3\x28",
};

std::string long_digits(Rng& r) {
  std::string d(1 + r.below(r.coin() ? 40 : 5000), '9');
  for (char& c : d) c = static_cast<char>('0' + r.below(10));
  if (d[0] == '0') d[0] = '7';
  if (r.coin()) d = "-" + d;
  if (r.below(4) == 0) d += ".5";
  return d;
}

std::string deep_nesting(Rng& r) {
  size_t depth = 1 + r.below(r.coin() ? 80 : 3000);
  std::string open, close;
  switch (r.below(4)) {
    case 0: open = "["; close = "]"; break;
    case 1: open = "{a: "; close = "}"; break;
    case 2: open = "[{a: "; close = "}]"; break;
    default: open = "- "; close = ""; break;  // block sequence of sequences: "- - - x"
  }
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += open;
  s += "1";
  for (size_t i = 0; i < depth; ++i) s += close;
  return s;
}

// An alias bomb of `levels` levels, `fan` aliases each (billion laughs), as a flow value.
std::string alias_bomb(Rng& r) {
  size_t levels = 2 + r.below(8), fan = 2 + r.below(9);
  std::string s = "[&l0 x";
  for (size_t l = 1; l < levels; ++l) {
    s += ", &l" + std::to_string(l) + " [";
    for (size_t f = 0; f < fan; ++f) s += (f ? ", *l" : "*l") + std::to_string(l - 1);
    s += "]";
  }
  return s + "]";
}

class Mutator {
 public:
  Mutator(Rng& r, const std::vector<std::string>& dict, size_t max_len)
      : r_(r), dict_(dict), max_len_(max_len) {}

  void mutate(std::string& s, const std::vector<std::string>& corpus) {
    size_t n = 1 + r_.below(r_.coin() ? 4 : 16);
    for (size_t i = 0; i < n; ++i) one(s, corpus);
    if (s.size() > max_len_) s.resize(max_len_);
  }

 private:
  size_t pos(const std::string& s) { return r_.below(s.size() + 1); }

  // A position at a token boundary: after ": ", "- ", "[", "{", ", " or at a line start.
  size_t value_pos(const std::string& s) {
    if (s.empty()) return 0;
    for (int tries = 0; tries < 8; ++tries) {
      size_t p = r_.below(s.size());
      if (s[p] == '\n' || s[p] == '[' || s[p] == '{') return p + 1;
      if (p + 1 < s.size() && (s[p] == ':' || s[p] == '-' || s[p] == ',') && s[p + 1] == ' ') {
        return p + 2;
      }
    }
    return pos(s);
  }

  // [begin, end) of a run of word characters (key, number, name) around a random position.
  std::pair<size_t, size_t> word(const std::string& s) {
    auto wordch = [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
    };
    size_t p = r_.below(s.size());
    size_t b = p, e = p;
    while (b > 0 && wordch(s[b - 1])) --b;
    while (e < s.size() && wordch(s[e])) ++e;
    return {b, e};
  }

  std::string token() {
    size_t n = dict_.size() + kBuiltinTokens.size();
    size_t i = r_.below(n);
    return i < dict_.size() ? dict_[i] : kBuiltinTokens[i - dict_.size()];
  }

  std::string number() {
    switch (r_.below(4)) {
      case 0: return long_digits(r_);
      case 1: return std::to_string(static_cast<int64_t>(r_.next()) >> r_.below(64));
      default: {
        static const char* nums[] = {"0", "-1", "1", "2", "3", "7", "8", "15", "16", "17", "64",
                                     "65", "255", "256", "1023", "1024", "4096", "65536",
                                     "2147483647", "2147483648", "4294967295", "-2147483648",
                                     "9223372036854775807", "-9223372036854775808",
                                     "9223372036854775808", "1e308", "1e309", "0.0", "-0.0",
                                     "0.5", "1.0000001", ".inf", ".nan"};
        return nums[r_.below(sizeof(nums) / sizeof(nums[0]))];
      }
    }
  }

  std::vector<std::pair<size_t, size_t>> lines(const std::string& s) {
    std::vector<std::pair<size_t, size_t>> out;
    size_t b = 0;
    while (b < s.size()) {
      size_t e = s.find('\n', b);
      e = (e == std::string::npos) ? s.size() : e + 1;
      out.push_back({b, e});
      b = e;
    }
    return out;
  }

  void one(std::string& s, const std::vector<std::string>& corpus) {
    switch (r_.below(18)) {
      case 0:  // bit flip
        if (!s.empty()) s[r_.below(s.size())] ^= static_cast<char>(1u << r_.below(8));
        break;
      case 1:  // interesting byte
        if (!s.empty()) {
          s[r_.below(s.size())] = kInterestingBytes[r_.below(sizeof(kInterestingBytes) - 1)];
        }
        break;
      case 2: {  // insert random bytes
        size_t n = 1 + r_.below(8);
        std::string b;
        for (size_t i = 0; i < n; ++i) b += static_cast<char>(r_.below(256));
        s.insert(pos(s), b);
        break;
      }
      case 3: {  // delete a range
        if (s.empty()) break;
        size_t p = r_.below(s.size());
        size_t n = 1 + r_.below(r_.coin() ? 8 : std::max<size_t>(1, s.size() / 4));
        s.erase(p, n);
        break;
      }
      case 4: {  // copy a range elsewhere
        if (s.empty()) break;
        size_t p = r_.below(s.size());
        size_t n = 1 + r_.below(std::min<size_t>(s.size() - p, 256));
        std::string chunk = s.substr(p, n);
        s.insert(pos(s), chunk);
        break;
      }
      case 5:
      case 6:  // a dictionary token at a value position
        s.insert(value_pos(s), token());
        break;
      case 7: {  // a word (key, value, number) replaced by a token or a number
        if (s.empty()) break;
        auto [b, e] = word(s);
        s.replace(b, e - b, r_.coin() ? token() : number());
        break;
      }
      case 8: {  // a digit run replaced by an interesting number
        if (s.empty()) break;
        size_t p = r_.below(s.size());
        size_t d = s.find_first_of("0123456789", p);
        if (d == std::string::npos) d = s.find_first_of("0123456789");
        if (d == std::string::npos) break;
        size_t e = d;
        while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
        s.replace(d, e - d, number());
        break;
      }
      case 9: {  // splice a chunk of another input in
        const std::string& o = corpus[r_.below(corpus.size())];
        if (o.empty()) break;
        size_t p = r_.below(o.size());
        size_t n = 1 + r_.below(std::min<size_t>(o.size() - p, 512));
        s.insert(pos(s), o.substr(p, n));
        break;
      }
      case 10: {  // crossover: our head, their tail
        const std::string& o = corpus[r_.below(corpus.size())];
        s = s.substr(0, pos(s)) + o.substr(r_.below(o.size() + 1));
        break;
      }
      case 11: {  // line ops: copy, delete, swap
        auto ls = lines(s);
        if (ls.empty()) break;
        auto a = ls[r_.below(ls.size())], b = ls[r_.below(ls.size())];
        std::string la = s.substr(a.first, a.second - a.first);
        switch (r_.below(3)) {
          case 0: s.insert(b.first, la); break;
          case 1: s.erase(a.first, a.second - a.first); break;
          default:
            if (a.first < b.first && a.second <= b.first) {
              std::string lb = s.substr(b.first, b.second - b.first);
              s.replace(b.first, b.second - b.first, la);
              s.replace(a.first, a.second - a.first, lb);
            }
        }
        break;
      }
      case 12: {  // indentation of a line
        auto ls = lines(s);
        if (ls.empty()) break;
        size_t b = ls[r_.below(ls.size())].first;
        if (r_.coin()) {
          s.insert(b, r_.coin() ? "  " : " ");
        } else if (b < s.size() && s[b] == ' ') {
          s.erase(b, (b + 1 < s.size() && s[b + 1] == ' ') ? 2 : 1);
        }
        break;
      }
      case 13: {  // an anchor on one value, an alias (or a merge) of it at another
        size_t a = value_pos(s);
        std::string name = std::string(1, static_cast<char>('a' + r_.below(3)));
        s.insert(a, "&" + name + " ");
        size_t b = value_pos(s);
        s.insert(b, r_.below(4) ? "*" + name : "<<: *" + name + "\n");
        break;
      }
      case 14:
        s.insert(value_pos(s), long_digits(r_));
        break;
      case 15:
        s.insert(value_pos(s), deep_nesting(r_));
        break;
      case 16:
        s.insert(value_pos(s), r_.below(4) ? token() : alias_bomb(r_));
        break;
      default: {  // a second document, or a document marker somewhere
        const char* m[] = {"---\n", "\n---\n", "...\n", "--- |\n", "\n--- !!map\n"};
        s.insert(r_.coin() ? s.size() : pos(s), m[r_.below(5)]);
        break;
      }
    }
  }

  Rng& r_;
  const std::vector<std::string>& dict_;
  size_t max_len_;
};

// ---- options, corpus, dictionary ----------------------------------------------------------------

struct Options {
  double max_total_time = 0;  // 0 with runs 0: 60 s
  long long runs = 0;
  uint64_t seed = 1;
  double timeout = 10;
  long rss_limit_mb = 2048;
  size_t max_len = 0;  // 0: from the seeds
  std::string dict;
  std::vector<std::string> inputs;
};

bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Regular files of `dir` (not recursive), sorted so the seed order does not depend on the
// filesystem.
std::vector<std::string> files_of(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string p = dir + "/" + e->d_name;
      struct stat st {};
      if (e->d_name[0] != '.' && ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        out.push_back(p);
      }
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// libFuzzer's dictionary format: one `name="value"` or `"value"` a line; \\, \" and \xNN escapes.
std::vector<std::string> read_dict(const std::string& path) {
  std::vector<std::string> out;
  std::string text;
  if (!read_file(path, text)) {
    std::fprintf(stderr, "scenario_fuzz: cannot read the dictionary %s\n", path.c_str());
    std::exit(2);
  }
  size_t b = 0;
  while (b < text.size()) {
    size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    std::string line = text.substr(b, e - b);
    b = e + 1;
    size_t q = line.find('"');
    if (line.empty() || line[0] == '#' || q == std::string::npos) continue;
    size_t last = line.rfind('"');
    if (last <= q) continue;
    std::string v;
    for (size_t i = q + 1; i < last; ++i) {
      if (line[i] == '\\' && i + 1 < last) {
        char c = line[++i];
        if (c == 'x' && i + 2 < last) {
          v += static_cast<char>(std::stoi(line.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          v += c;
        }
      } else {
        v += line[i];
      }
    }
    out.push_back(v);
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* name) -> const char* {
      size_t n = std::strlen(name);
      return a.compare(0, n, name) == 0 ? a.c_str() + n : nullptr;
    };
    if (const char* v = val("-max_total_time=")) o.max_total_time = std::atof(v);
    else if (const char* v = val("-runs=")) o.runs = std::atoll(v);
    else if (const char* v = val("-seed=")) o.seed = std::strtoull(v, nullptr, 10);
    else if (const char* v = val("-timeout=")) o.timeout = std::atof(v);
    else if (const char* v = val("-rss_limit_mb=")) o.rss_limit_mb = std::atol(v);
    else if (const char* v = val("-max_len=")) o.max_len = std::strtoull(v, nullptr, 10);
    else if (const char* v = val("-dict=")) o.dict = v;
    else if (const char* v = val("-artifact_prefix=")) g_prefix = v;
    else if (val("-print_final_stats=")) {
      // the final statistics are always printed
    } else if (a == "-h" || a == "-help=1" || a == "--help") {
      std::fprintf(stderr,
                   "usage: %s [-max_total_time=S] [-runs=N] [-seed=N] [-timeout=S] "
                   "[-rss_limit_mb=M] [-max_len=N] [-dict=FILE] [-artifact_prefix=DIR/] "
                   "CORPUS_DIR_OR_FILE...\n",
                   argv[0]);
      std::exit(0);
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "scenario_fuzz: ignoring %s (a libFuzzer flag this driver lacks)\n",
                   a.c_str());
    } else {
      o.inputs.push_back(a);
    }
  }
  return o;
}

// ---- running one input --------------------------------------------------------------------------

struct Stats {
  long long execs = 0, loaded = 0, clean = 0, findings = 0;
};

size_t edges_seen(const uint8_t* virgin) {
  size_t n = 0;
  for (size_t i = 0; i < kMapSize; ++i) n += virgin[i] != 0;
  return n;
}

uint8_t bucket(uint8_t c) {
  if (c <= 3) return c == 3 ? 4 : c;  // 1 -> 1, 2 -> 2, 3 -> 4
  if (c < 8) return 8;
  if (c < 16) return 16;
  if (c < 32) return 32;
  if (c < 128) return 64;
  return 128;
}

class Runner {
 public:
  explicit Runner(Stats& st) : st_(st) {}

  // Runs `in`; returns true when it reached new coverage. Records a non-fatal finding.
  bool run(const std::string& in) {
    std::memset(g_map, 0, sizeof(g_map));
    g_prev_pc = 0;
    g_cur_data = in.data();
    g_cur_size = in.size();
    g_exec_start_ms.store(now_ms());
    coldstart::fuzz::Outcome o =
        coldstart::fuzz::run_one(reinterpret_cast<const uint8_t*>(in.data()), in.size());
    g_exec_start_ms.store(0);
    ++st_.execs;
    st_.loaded += o.loaded;
    st_.clean += o.clean_error;
    if (!o.finding.empty()) record(in, o.finding);
    g_cur_data = nullptr;
    return novel();
  }

  size_t edges() const { return edges_seen(virgin_); }

 private:
  bool novel() {
    bool any = false;
    const uint64_t* w = reinterpret_cast<const uint64_t*>(g_map);
    for (size_t i = 0; i < kMapSize / 8; ++i) {
      if (!w[i]) continue;
      for (size_t j = i * 8; j < i * 8 + 8; ++j) {
        if (!g_map[j]) continue;
        g_saw_coverage = true;
        uint8_t b = bucket(g_map[j]);
        if (!(virgin_[j] & b)) {
          virgin_[j] |= b;
          any = true;
        }
      }
    }
    return any;
  }

  void record(const std::string& in, const std::string& finding) {
    ++st_.findings;
    // One saved input per distinct message (its first 120 characters, digits dropped).
    std::string sig;
    for (char c : finding.substr(0, 120)) {
      if (!std::isdigit(static_cast<unsigned char>(c))) sig += c;
    }
    if (!seen_.insert(sig).second || seen_.size() > 50) return;
    g_cur_data = in.data();
    g_cur_size = in.size();
    std::fprintf(stderr, "scenario_fuzz: FINDING: %s\n", finding.c_str());
    g_saving.store(false);
    save_current("exception");
    g_saving.store(false);
  }

  Stats& st_;
  uint8_t virgin_[kMapSize] = {};
  std::set<std::string> seen_;
};

void watchdog(const Options* o) {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int64_t start = g_exec_start_ms.load();
    if (start && o->timeout > 0 && now_ms() - start > static_cast<int64_t>(o->timeout * 1000)) {
      std::fprintf(stderr, "\nscenario_fuzz: FINDING: an input ran past -timeout=%g s\n",
                   o->timeout);
      save_current("timeout");
      std::_Exit(71);
    }
    long rss = rss_mb();
    if (o->rss_limit_mb > 0 && rss > o->rss_limit_mb) {
      std::fprintf(stderr,
                   "\nscenario_fuzz: FINDING: resident size %ld MB past -rss_limit_mb=%ld\n", rss,
                   o->rss_limit_mb);
      save_current("oom");
      std::_Exit(72);
    }
  }
}

const char* kind_name(const std::string& s) {
  switch (coldstart::fuzz::kind_of(reinterpret_cast<const uint8_t*>(s.data()), s.size())) {
    case Kind::kConfig: return "config";
    case Kind::kSet: return "set";
    case Kind::kScenario: break;
  }
  return "scenario";
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (std::string why = coldstart::fuzz::setup(argv[0]); !why.empty()) {
    std::fprintf(stderr, "scenario_fuzz: %s\n", why.c_str());
    return 2;
  }
  install_handlers();
  std::thread(watchdog, &o).detach();

  bool only_files = !o.inputs.empty();
  std::vector<std::string> files;
  for (const std::string& in : o.inputs) {
    if (is_dir(in)) {
      only_files = false;
      for (auto& f : files_of(in)) files.push_back(f);
    } else {
      files.push_back(in);
    }
  }
  std::vector<std::string> corpus;
  for (const std::string& f : files) {
    std::string text;
    if (!read_file(f, text)) {
      std::fprintf(stderr, "scenario_fuzz: cannot read %s\n", f.c_str());
      return 2;
    }
    corpus.push_back(std::move(text));
  }

  Stats st;
  Runner runner(st);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  if (only_files) {  // reproduce
    for (size_t i = 0; i < corpus.size(); ++i) {
      long long before = st.findings;
      runner.run(corpus[i]);
      std::fprintf(stderr, "scenario_fuzz: %s (%s): %s\n", files[i].c_str(), kind_name(corpus[i]),
                   st.findings > before ? "FINDING" : "ok");
    }
    coldstart::fuzz::teardown();
    return st.findings ? 1 : 0;
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "scenario_fuzz: no seed inputs in %zu paths\n", o.inputs.size());
    return 2;
  }

  std::vector<std::string> dict;
  if (!o.dict.empty()) dict = read_dict(o.dict);
  size_t max_len = o.max_len;
  if (!max_len) {
    for (auto& c : corpus) max_len = std::max(max_len, c.size());
    max_len = std::max<size_t>(2 * max_len, 16384);
  }
  if (o.max_total_time <= 0 && o.runs <= 0) o.max_total_time = 60;
  const size_t seeds = corpus.size();
  std::fprintf(stderr,
               "scenario_fuzz: mutation driver, seed %llu, %zu seed inputs, %zu dictionary tokens "
               "(+%zu built in), max_len %zu, -timeout=%g s, -rss_limit_mb=%ld, %s\n",
               static_cast<unsigned long long>(o.seed), seeds, dict.size(),
               kBuiltinTokens.size(), max_len, o.timeout, o.rss_limit_mb,
               o.runs > 0 ? ("-runs=" + std::to_string(o.runs)).c_str()
                          : ("-max_total_time=" + std::to_string(o.max_total_time) + " s").c_str());
  for (auto& c : corpus) runner.run(c);
  if (!g_saw_coverage) {
    std::fprintf(stderr, "scenario_fuzz: no coverage feedback (the loader is not compiled with "
                         "-fsanitize-coverage=trace-pc): blind mutation\n");
  }

  Rng rng{o.seed};
  Mutator mut(rng, dict, max_len);
  double next_report = 10;
  std::string in;
  while (true) {
    if (o.runs > 0 && st.execs >= o.runs) break;
    if (o.max_total_time > 0 && (st.execs & 15) == 0 && elapsed() >= o.max_total_time) break;
    // Newer entries (what found coverage) a little more often than the seeds.
    size_t pick = rng.coin() && corpus.size() > seeds
                      ? seeds + rng.below(corpus.size() - seeds)
                      : rng.below(corpus.size());
    in = corpus[pick];
    mut.mutate(in, corpus);
    if (runner.run(in) && corpus.size() < 20000) corpus.push_back(in);
    if ((st.execs & 63) == 0 && elapsed() >= next_report) {
      std::fprintf(stderr, "scenario_fuzz: #%lld  %.0f s  %.0f exec/s  corpus %zu  edges %zu  "
                           "rss %ld MB  findings %lld\n",
                   st.execs, elapsed(), st.execs / elapsed(), corpus.size(), runner.edges(),
                   rss_mb(), st.findings);
      next_report += 10;
    }
  }
  const double t = elapsed();
  std::fprintf(stderr,
               "scenario_fuzz: done: %lld executions in %.1f s (%.0f exec/s); loaded %lld, "
               "InputError %lld; corpus %zu (%zu seeds); edges %zu; findings %lld%s\n",
               st.execs, t, st.execs / t, st.loaded, st.clean, corpus.size(), seeds,
               runner.edges(), st.findings,
               st.findings ? (" (saved under " + g_prefix + ")").c_str() : "");
  std::fprintf(stderr, "stat::number_of_executed_units: %lld\nstat::average_exec_per_sec: %.0f\n",
               st.execs, st.execs / t);
  coldstart::fuzz::teardown();
  return st.findings ? 1 : 0;
}
