// Shared by the scenario loader's tests: a valid base scenario whose line numbers the tests use,
// and a fixture that writes scenarios into a temporary directory (with the Qwen3 8B HF config as
// qwen3.json), loads them and checks where an error points.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/replay/scenario.h"

namespace coldstart::scenario_test {

namespace fs = std::filesystem;

inline std::string source_dir() {
  const char* dir = std::getenv("COLDSTART_SOURCE_DIR");
  return dir ? dir : "";
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A valid scenario; its line numbers are used by the tests below.
inline const char* const kBase =
    "name: t\n"                                                     // 1
    "model:\n"                                                      // 2
    "  config: qwen3.json\n"                                        // 3
    "engine:\n"                                                     // 4
    "  max_num_seqs: 4\n"                                           // 5
    "  max_num_batched_tokens: 2048\n"                              // 6
    "  max_model_len: 32768\n"                                      // 7
    "  block_size: 16\n"                                            // 8
    "  kv_cache_dtype: turboquant_4bit_nc\n"                        // 9
    "  cudagraph_mode: piecewise\n"                                 // 10
    "requests:\n"                                                   // 11
    "  - {prompt_tokens: 512, decode_steps: 32}\n"                  // 12
    "strategies:\n"                                                 // 13
    "  none: []\n"                                                  // 14
    "  both: {warmers: [a, b], allow_hot_path_compiles: false}\n";  // 15

// Replaces the first occurrence of `from` (which must occur) with `to`.
inline std::string replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "test bug: '" << from << "' not in the text";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

class ScenarioFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(source_dir().empty()) << "COLDSTART_SOURCE_DIR is not set";
    std::string templ = (fs::temp_directory_path() / "cs_scenario_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    fs::copy_file(fs::path(source_dir()) / "fixtures/hf-configs/qwen3-8b.json",
                  fs::path(dir_) / "qwen3.json");
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  std::string write(const std::string& name, const std::string& text) {
    std::string path = (fs::path(dir_) / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // Loads `text` as a scenario and returns the InputError text (failing when none is thrown).
  std::string error_of(const std::string& text, const std::vector<std::string>& sets = {},
                       const std::vector<std::string>& warmers = {}) {
    ScenarioRules rules;
    rules.known_warmers = warmers;
    return error_of(text, sets, rules);
  }
  std::string error_of(const std::string& text, const std::vector<std::string>& sets,
                       const ScenarioRules& rules) {
    std::string path = write("s.yaml", text);
    try {
      load_scenario(path, sets, rules);
    } catch (const InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no InputError for:\n" << text;
    return "";
  }

  Scenario load(const std::string& text, const std::vector<std::string>& sets = {},
                const ScenarioRules& rules = {}) {
    return load_scenario(write("s.yaml", text), sets, rules);
  }

  // Asserts the error names the scenario file at `line` and the key.
  void expect_at(const std::string& err, int line, const std::string& key,
                 const std::string& what = "") {
    std::string loc = (fs::path(dir_) / "s.yaml").string() + ":" + std::to_string(line) + ":";
    EXPECT_NE(err.find(loc), std::string::npos) << "want " << loc << " in:\n" << err;
    EXPECT_NE(err.find("key '" + key + "'"), std::string::npos) << "want key " << key << " in:\n"
                                                                << err;
    if (!what.empty())
      EXPECT_NE(err.find(what), std::string::npos) << "want " << what << " in:\n" << err;
  }

  std::string dir_;
};

}  // namespace coldstart::scenario_test
