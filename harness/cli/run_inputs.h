// coldstart: the input files of a `coldstart replay`, frozen when the run starts.
//
// The parent validates each scenario (its YAML text, the --set overrides, the HF config.json and
// tuned-config directory every variant names). Its strategies' children must replay exactly that:
// an edit of the scenario or of config.json while the run goes on (minutes to hours) must not
// change later strategies while the results file describes the file as it was. So the parent
// copies what it validated into a private directory it owns, and the children read only those
// copies:
//   * the scenario: the exact text the parent validated (Scenario::source.text), never re-read;
//   * each config.json and tuned-config directory: copied once, then the copy is validated again
//     in the parent and its merged model config compared with the user's, so the children load
//     what was validated (a file edited in between is an error: run again);
//   * paths: the copies keep the files' absolute layout under the private directory, so a path
//     the scenario gives relative to itself resolves to the copy; model.config and
//     each directory engine key (engine_keys.h: engine.tuned_config_dir) are also passed to the
//     child as --set overrides naming the copies
//     (after the run's own), which covers absolute paths and paths given on the command line.
// The same pass records meta.inputs: each file's role, path, size and FNV-1a 64 checksum.
//
// Limit: a matrix axis over model.config or engine.tuned_config_dir with absolute values still
// names the user's file (relative values resolve to the copies).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "harness/replay/result.h"
#include "harness/replay/scenario.h"

namespace coldstart::cli {

class RunInputs {
 public:
  /// Loads a scenario file with the run's rules and the given --set overrides (load_scenario with
  /// replay_rules in main.cpp). Throws InputError.
  using Loader =
      std::function<Scenario(const std::string& path, const std::vector<std::string>& sets)>;

  /// Copies the inputs of `scenarios` (validated by load_scenario, in run order, loaded with
  /// `sets`) into a new private directory under $TMPDIR, then validates the copies with `load`
  /// and compares them with `scenarios`. Throws InputError "<file>: changed while the run was
  /// starting ..." when a copy differs from what was validated, Error when a file cannot be read
  /// or copied (the directory is removed).
  RunInputs(const std::vector<Scenario>& scenarios, const std::vector<std::string>& sets,
            const Loader& load);
  /// Removes the private directory (best effort).
  ~RunInputs();
  RunInputs(const RunInputs&) = delete;
  RunInputs& operator=(const RunInputs&) = delete;

  /// Where a child loads scenario `i` from: the copy of the text the parent validated.
  const std::string& scenario_path(size_t i) const { return per_scenario_.at(i).path; }
  /// The --set overrides a child passes after the run's own (model.config, and
  /// each directory engine key the scenario sets, naming the copies).
  const std::vector<std::string>& child_sets(size_t i) const { return per_scenario_.at(i).sets; }
  /// meta.inputs of scenario `i`: the scenario file, then each config.json and tuned-config
  /// directory its variants read, each once.
  const std::vector<InputFile>& inputs(size_t i) const { return per_scenario_.at(i).inputs; }
  /// The private directory (for tests and messages).
  const std::string& dir() const { return dir_; }

 private:
  struct PerScenario {
    std::string path;
    std::vector<std::string> sets;
    std::vector<InputFile> inputs;
  };
  std::string dir_;
  std::vector<PerScenario> per_scenario_;
};

/// The absolute, lexically normalized form of `path` (relative to the working directory).
/// Throws Error when the working directory cannot be read.
std::string absolute_path(const std::string& path);

}  // namespace coldstart::cli
