// coldstart: the input files of a `coldstart replay`, frozen when the run starts.
//
// The parent validates each scenario once (its YAML text, the --set overrides, the HF
// config.json and tuned-config directory every variant names) and hands each child the scenario
// it validated (child_job.h): the children read neither the scenario file nor config.json. While
// they run they do read every tuned-config directory (the JIT reads its tables when it selects a
// kernel's config). An edit of those while the run goes on (minutes to hours) must not change
// later strategies while the results file describes the files as they were, so the parent copies
// each directory engine key's folder (engine_keys.h: engine.tuned_config_dir) into a private
// directory it owns, under the files' absolute layout, and the children's scenarios name only the
// copies. Each config.json is read once more to record it, and must still hold the bytes the
// loader parsed (ModelConfig::config_fnv1a64); one edited in between is an error: run again.
// The same pass records meta.inputs: each file's role, path, size and FNV-1a 64 checksum (the
// scenario's is that of the text the loader validated).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harness/replay/result.h"
#include "harness/replay/scenario.h"

namespace coldstart::cli {

class RunInputs {
 public:
  /// Copies the inputs of `scenarios` (as load_scenario validated them, every variant) into a
  /// new private directory under $TMPDIR and builds the scenario each variant's children run.
  /// Throws InputError "<scenario>: changed while the run was starting ..." when a config.json
  /// is no longer what was validated, InputError / Error when a file cannot be read or copied
  /// (the directory is removed).
  explicit RunInputs(const std::vector<Scenario>& scenarios);
  /// Removes the private directory (best effort).
  ~RunInputs();
  RunInputs(const RunInputs&) = delete;
  RunInputs& operator=(const RunInputs&) = delete;

  /// The scenario the children of variant `v` of scenario `i` run: apply_variant of what the
  /// parent validated, its directory keys naming the private copies.
  const Scenario& child_scenario(size_t i, size_t v) const {
    return per_scenario_.at(i).variants.at(v);
  }
  /// meta.inputs of scenario `i`: the scenario file, then each config.json and tuned-config
  /// directory its variants read, each once.
  const std::vector<InputFile>& inputs(size_t i) const { return per_scenario_.at(i).inputs; }
  /// The private directory (for tests and messages).
  const std::string& dir() const { return dir_; }
  /// Replaces every mention of a private copy in `r` (its error text and every string below
  /// `extra`, e.g. the tuned table a kernel read) by the user's file it copies, so results never
  /// name a directory that is gone when the run ends.
  void name_originals(StrategyResult& r) const;

 private:
  struct PerScenario {
    std::vector<Scenario> variants;
    std::vector<InputFile> inputs;
  };
  std::string dir_;
  std::vector<PerScenario> per_scenario_;
};

/// The absolute, lexically normalized form of `path` (relative to the working directory).
/// Throws Error when the working directory cannot be read.
std::string absolute_path(const std::string& path);

/// Replaces the value of every directory engine key (engine_keys.h, EngineKeyType::kDirectory)
/// that `s` sets by `to(value)`: where the children read it from (an absolute path, a copy).
void rewrite_directory_keys(Scenario& s, const std::function<std::string(const std::string&)>& to);

/// The compile memo directory COLDSTART_COMPILE_MEMO_DIR names ("" when unset or empty): one kept
/// across runs, which replay and `_job` use instead of a private one in compile-only mode.
std::string shared_compile_memo_dir();

}  // namespace coldstart::cli
