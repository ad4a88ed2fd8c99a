// Test helpers shared by the renderer tests: read a file, compare with a golden file.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace coldstart::reports::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Expects `text` to equal the golden file at `golden`; with COLDSTART_UPDATE_GOLDEN=1 rewrites
/// the golden file instead and skips (so an update is never counted as a pass).
inline void check_golden(const std::string& golden, const std::string& text) {
  const char* update = std::getenv("COLDSTART_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(golden, std::ios::binary) << text;
    GTEST_SKIP() << "golden file rewritten: " << golden;
  }
  const std::string want = read_file(golden);
  ASSERT_FALSE(want.empty()) << "missing golden file " << golden
                             << " (run with COLDSTART_UPDATE_GOLDEN=1 to create it)";
  EXPECT_EQ(text, want) << "output differs from " << golden << ":\n" << text;
}

}  // namespace coldstart::reports::testing
