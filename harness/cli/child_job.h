// coldstart: the job a replay's parent hands each child (`coldstart _child --job FILE`).
//
// The parent loads and validates every scenario once (load_scenario with the run's rules, every
// variant included), copies the files the scenario reads into the run's private directory
// (run_inputs.h), and then, for each (variant, strategy, repeat), writes one ChildJob: the
// scenario of that variant as validated, with its paths naming the private copies, the strategy,
// and the run's options. The child reads it back (JSON, scenario_json.cpp) and runs the engine:
// it parses no YAML and no config.json, and checks nothing the parent already checked. The child
// reports back on the result channel (isolate.h: typed snapshots, the phase running included).
#pragma once

#include <cstdint>
#include <string>

#include "harness/replay/scenario.h"

namespace coldstart::cli {

/// One strategy run of one variant, as the parent validated it.
struct ChildJob {
  /// The variant's scenario (apply_variant: `variants` holds that one variant), its paths naming
  /// the run's private copies of the inputs. `expect` / `source` are not carried.
  Scenario scenario;
  StrategySpec strategy;   ///< the strategy to run (one of scenario.strategies)
  std::string device = "auto";  ///< --device: auto, cuda or compile-only
  std::string arch;        ///< --arch ("sm_90"), "" for the default
  std::string target;      ///< --target profile name, "" for none
  int sm_count = 0;        ///< --sm-count, 0 for the target's
  std::string cache_dir;   ///< the kernel cache directory this run uses, "" for a private one
  std::string compile_memo;  ///< the run's compile memo directory, "" for none
  std::string jit_monitor = "record";  ///< --jit-monitor: record, warn or error
  uint64_t seed = 1234;    ///< --seed
  bool verbose = false;    ///< -v: the engine's log lines go to stderr
  bool host_split = false;  ///< --host-split: EngineOptions::host_split
  std::string graph_replay_stale = "stop";  ///< --graph-replay-stale: stop or run
  bool envelope = false;    ///< `coldstart coverage`: EngineOptions::envelope
  /// engine.ranks: all (ranks_run.h): this process's rank; 0 starts the others.
  int rank = 0;
  int rendezvous_port = 0;  ///< ranks > 0: the port of rank 0's c10d TCPStore
  std::string rank_dir;     ///< ranks > 0: the run's rank directory (jobs, published states)
};

void to_json(nlohmann::json& j, const ChildJob& job);
void from_json(const nlohmann::json& j, ChildJob& job);

/// Writes `job` to `path` (JSON, atomically). Throws Error when the file cannot be written.
void write_child_job(const std::string& path, const ChildJob& job);

/// Reads a job written by write_child_job. Throws Error naming `path` when the file cannot be
/// read or is not a job of this binary's format (a missing field, a wrong type).
ChildJob read_child_job(const std::string& path);

}  // namespace coldstart::cli
