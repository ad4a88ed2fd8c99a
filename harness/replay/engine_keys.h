// Engine keys owned by whoever reads them. The scenario loader knows the engine settings every
// replay uses (max_num_seqs, block_size, cudagraph_mode, ...); a setting that only one model
// family, backend or warmer reads is declared by that owner instead, in a file next to it named
// `<owner>.engine_keys.h` that defines
//
//     inline std::vector<coldstart::EngineKeySpec> engine_keys_<owner>() { return {...}; }
//
// (<owner> is the file name before ".engine_keys.h"). CMake collects every such file under
// harness/ and warmers/ into the registry declared_engine_keys() returns, so adding a key edits
// no shared file, and the registry is complete in every binary that links the scenario loader
// (no static initializers to lose). The loader validates each declared key with the file, line
// and key of a bad value, fills in defaults, and the owner reads it with the typed accessor its
// file defines on top of EngineConfig::int_key / string_key.
//
// No torch, no CUDA: these files are compiled into the scenario loader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace coldstart {

/// The value types an owned engine key can have.
enum class EngineKeyType {
  kInt,        ///< an integer in [min, max]
  kChoice,     ///< one of `choices`
  kText,       ///< a string matching `pattern` (e.g. a list in one line)
  kDirectory,  ///< a directory of input files (*.json) the replay reads: relative to the scenario
               ///< file, checked readable at load, copied into the run's inputs snapshot
};

/// When a result's scenario.engine summary lists a declared key.
enum class EngineKeyInResult {
  kAlways,   ///< always, its default when the scenario leaves it out
  kWhenSet,  ///< only when the scenario (or --set) gives it: results of runs at the default
             ///< stay comparable with files written before the key existed
  kNever,    ///< never (e.g. a directory: the run's inputs record it with a checksum)
};

/// One declared engine key.
struct EngineKeySpec {
  std::string name;                  ///< the key under `engine:`
  std::string owner;                 ///< who reads it ("nemotron-h", "fused_moe_triton", ...)
  EngineKeyType type = EngineKeyType::kInt;
  int64_t min = 0;                   ///< kInt: the smallest value
  int64_t max = 0;                   ///< kInt: the largest value
  std::string unit;                  ///< kInt: what the number counts, for messages ("draft tokens")
  std::vector<std::string> choices;  ///< kChoice: the accepted values
  std::string pattern;               ///< kText: an ECMAScript regex the whole value must match
  std::string pattern_doc;           ///< kText: the form in words, for messages and `list`
  /// kText lists (items joined by ", "): one item's regex. The value is then checked item by
  /// item (`pattern` documents the whole), so any number of items can be given and a bad one is
  /// named with its place; empty for a text key that is no list.
  std::string item_pattern;
  std::string default_value;         ///< the value when the scenario leaves the key out ("" for a
                                     ///< kDirectory means none given); kInt as decimal text
  std::string doc;                   ///< one line for `coldstart list` and the README
  EngineKeyInResult in_result = EngineKeyInResult::kAlways;  ///< in scenario.engine of results
};

/// Every declared key, in the order of the declaring files' names, then as declared. Generated
/// (engine_keys_declared.cpp); throws nothing.
const std::vector<EngineKeySpec>& declared_engine_keys();

/// The declared key `name`, or nullptr.
const EngineKeySpec* find_engine_key(const std::string& name);

/// The items of a list key's value (EngineKeySpec::item_pattern: items joined by ", "): none for
/// "", else every piece between separators, an empty one kept (a stray separator shows as an
/// empty item).
inline std::vector<std::string> split_list_items(const std::string& v) {
  std::vector<std::string> out;
  if (v.empty()) return out;
  for (size_t start = 0;;) {
    const size_t comma = v.find(", ", start);
    out.push_back(v.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 2;
  }
}

}  // namespace coldstart
