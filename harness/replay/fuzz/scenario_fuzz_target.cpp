// coldstart: the fuzz target of the scenario loader and the HF config reader, one input at a time,
// in process. Shared by both engines: libFuzzer (LLVMFuzzerTestOneInput, clang
// -fsanitize=fuzzer) and the bounded mutation driver of fuzz_driver.cpp (any compiler).
//
// What an input is, by its first byte that is not blank:
//   '{'        an HF config.json: loaded through a fixed scenario whose model.config names it
//   "#set"     --set overrides, one KEY=VALUE a line after the first, applied to
//              scenarios/qwen3-8b-turboquant.yaml as `coldstart replay --set` does
//   otherwise  a scenario YAML, written as <work>/scenarios/fuzz.yaml beside a link
//              <work>/fixtures -> the repository's fixtures/, so the seed scenarios'
//              `../fixtures/hf-configs/...` configs resolve as they do in the repository
// so the seed corpus is the repository's scenarios/*.yaml and fixtures/hf-configs/*.json as they
// are, and a saved finding is a file the loader reads as it is.
//
// A finding: anything but a clean result. Clean is a loaded scenario or InputError, the loader's
// only error for bad input (scenario.h, "Errors"). Any other exception (coldstart::Error from a
// CS_CHECK, std::out_of_range, YAML::Exception, std::bad_alloc, ...) is a finding. Signals,
// sanitizer reports, hangs and memory blow-ups are caught by the engine (libFuzzer or
// fuzz_driver.cpp).
#include "harness/replay/fuzz/scenario_fuzz_target.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "harness/common/error.h"
#include "harness/replay/scenario.h"

namespace coldstart::fuzz {
namespace {

namespace fs = std::filesystem;

// The scenario that reads a fuzzed config.json ('{' inputs).
const char* const kConfigScenario =
    "name: fuzz-config\n"
    "model:\n"
    "  config: fuzz-config.json\n"
    "engine:\n"
    "  max_num_seqs: 4\n"
    "  max_num_batched_tokens: 2048\n"
    "  block_size: 16\n"
    "  kv_cache_dtype: auto\n"
    "  cudagraph_mode: piecewise\n"
    "requests:\n"
    "  - {prompt_tokens: 512, decode_steps: 4}\n"
    "strategies:\n"
    "  none: []\n";

struct Work {
  std::string source_dir;     // the repository (COLDSTART_SOURCE_DIR)
  std::string dir;            // <tmp>/cs_fuzz_XXXXXX
  std::string scenario_path;  // <dir>/scenarios/fuzz.yaml
  std::string config_scenario_path;  // <dir>/scenarios/fuzz-config.yaml
  std::string config_path;    // <dir>/scenarios/fuzz-config.json
  std::string set_base;       // <source>/scenarios/qwen3-8b-turboquant.yaml
};

Work* g_work = nullptr;

void write_file(const std::string& path, const char* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "scenario_fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
}

std::string exception_text(const std::exception& e) {
  return std::string(typeid(e).name()) + ": " + e.what();
}

}  // namespace

std::string setup(const char* argv0) {
  if (g_work) return "";
  auto w = std::make_unique<Work>();
  const char* src = std::getenv("COLDSTART_SOURCE_DIR");
  if (src && *src) {
    w->source_dir = src;
  } else {
#ifdef COLDSTART_FUZZ_SOURCE_DIR
    w->source_dir = COLDSTART_FUZZ_SOURCE_DIR;
#endif
  }
  (void)argv0;
  if (w->source_dir.empty() || !fs::is_directory(fs::path(w->source_dir) / "fixtures")) {
    return "set COLDSTART_SOURCE_DIR to the repository (no fixtures/ under '" + w->source_dir +
           "')";
  }
  std::error_code ec;
  std::string templ = (fs::temp_directory_path(ec) / "cs_fuzz_XXXXXX").string();
  if (!mkdtemp(templ.data())) return "cannot create a temporary directory " + templ;
  w->dir = templ;
  fs::create_directories(fs::path(w->dir) / "scenarios", ec);
  fs::create_directory_symlink(fs::absolute(fs::path(w->source_dir) / "fixtures"),
                               fs::path(w->dir) / "fixtures", ec);
  if (ec) return "cannot link fixtures/ into " + w->dir + ": " + ec.message();
  w->scenario_path = (fs::path(w->dir) / "scenarios" / "fuzz.yaml").string();
  w->config_scenario_path = (fs::path(w->dir) / "scenarios" / "fuzz-config.yaml").string();
  w->config_path = (fs::path(w->dir) / "scenarios" / "fuzz-config.json").string();
  w->set_base = (fs::path(w->source_dir) / "scenarios" / "qwen3-8b-turboquant.yaml").string();
  std::string base = kConfigScenario;
  write_file(w->config_scenario_path, base.data(), base.size());
  g_work = w.release();
  return "";
}

void teardown() {
  if (!g_work) return;
  std::error_code ec;
  fs::remove_all(g_work->dir, ec);
  delete g_work;
  g_work = nullptr;
}

Kind kind_of(const uint8_t* data, size_t size) {
  size_t i = 0;
  while (i < size && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r')) ++i;
  if (i < size && data[i] == '{') return Kind::kConfig;
  if (size - i >= 4 && std::string(reinterpret_cast<const char*>(data) + i, 4) == "#set") {
    return Kind::kSet;
  }
  return Kind::kScenario;
}

const char* extension(Kind k) {
  switch (k) {
    case Kind::kConfig: return ".json";
    case Kind::kSet: return ".set";
    case Kind::kScenario: break;
  }
  return ".yaml";
}

Outcome run_one(const uint8_t* data, size_t size) {
  Outcome out;
  const Work& w = *g_work;
  const char* text = reinterpret_cast<const char*>(data);
  const Kind kind = kind_of(data, size);
  std::string path;
  std::vector<std::string> sets;
  switch (kind) {
    case Kind::kConfig:
      write_file(w.config_path, text, size);
      path = w.config_scenario_path;
      break;
    case Kind::kSet: {
      std::istringstream lines(std::string(text, size));
      std::string line;
      std::getline(lines, line);  // "#set ..."
      while (std::getline(lines, line) && sets.size() < 64) sets.push_back(line);
      path = w.set_base;
      break;
    }
    case Kind::kScenario:
      write_file(w.scenario_path, text, size);
      path = w.scenario_path;
      break;
  }
  Scenario s;
  try {
    s = load_scenario(path, sets);
  } catch (const InputError&) {
    out.clean_error = true;
    return out;
  } catch (const std::exception& e) {
    out.finding = "load_scenario threw " + exception_text(e);
    return out;
  } catch (...) {
    out.finding = "load_scenario threw a non-std exception";
    return out;
  }
  out.loaded = true;
  (void)s;  // load_scenario has already applied every variant of a matrix (scenario.cpp)
  return out;
}

}  // namespace coldstart::fuzz

#ifdef COLDSTART_LIBFUZZER
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  std::string why = coldstart::fuzz::setup((*argv)[0]);
  if (!why.empty()) {
    std::fprintf(stderr, "scenario_fuzz: %s\n", why.c_str());
    std::exit(2);
  }
  std::atexit(coldstart::fuzz::teardown);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  coldstart::fuzz::Outcome o = coldstart::fuzz::run_one(data, size);
  if (!o.finding.empty()) {
    std::fprintf(stderr, "scenario_fuzz: FINDING: %s\n", o.finding.c_str());
    std::abort();  // libFuzzer saves the input as crash-<sha1> under -artifact_prefix
  }
  return 0;
}
#endif
