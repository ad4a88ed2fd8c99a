// coldstart: the scenario loader / HF config reader fuzz target (see scenario_fuzz_target.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace coldstart::fuzz {

/// What an input is fed to (by its first non-blank byte; scenario_fuzz_target.cpp).
enum class Kind { kScenario, kConfig, kSet };

Kind kind_of(const uint8_t* data, size_t size);
/// ".yaml", ".json" or ".set": the extension a saved input of that kind gets.
const char* extension(Kind k);

struct Outcome {
  bool loaded = false;       ///< load_scenario returned a scenario
  bool clean_error = false;  ///< it threw InputError
  std::string finding;       ///< non-empty: what went wrong (an unexpected exception, ...)
};

/// Creates the work directory (a temporary directory with a link to the repository's fixtures,
/// found through $COLDSTART_SOURCE_DIR). Returns "" or why it could not.
std::string setup(const char* argv0);
/// Removes the work directory.
void teardown();
/// Loads one input; never throws.
Outcome run_one(const uint8_t* data, size_t size);

}  // namespace coldstart::fuzz
