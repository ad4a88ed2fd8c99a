// coldstart: what the scenario loader's files share (scenario.cpp, scenario_set.cpp,
// scenario_expect.cpp). Internal to harness/replay; the file format is described in scenario.h.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "harness/replay/hf_config.h"
#include "harness/replay/scenario.h"
#include "harness/replay/yaml_check.h"

namespace coldstart::scenario_detail {

// ------------------------------------------------------------------------------------------
// The schema: the keys accepted at each level.

inline const std::vector<std::string> kTopKeys = {"name",     "description", "model",  "engine",
                                                  "requests", "strategies",  "matrix", "timeout_s",
                                                  "expect",   "archs"};
inline const std::vector<std::string> kModelKeys = {"config", "overrides"};
/// The engine keys every replay reads; the keys a family, backend or warmer reads are declared by
/// their owners (engine_keys.h).
inline const std::vector<std::string> kCoreEngineKeys = {
    "max_num_seqs",   "max_num_batched_tokens", "max_model_len",           "block_size",
    "kv_cache_dtype", "cudagraph_mode",         "cudagraph_capture_sizes", "gpu_memory_utilization",
    "num_gpu_blocks", "enable_chunked_prefill", "allow_long_max_model_len",
    "tensor_parallel_size", "max_cudagraph_capture_size"};
/// kCoreEngineKeys, then every declared key (engine_keys.h): what `engine:` accepts.
const std::vector<std::string>& engine_key_names();
inline const std::vector<std::string> kRequestKeys = {"prompt_tokens", "decode_steps",
                                                      "arrival_step", "steady"};
inline const std::vector<std::string> kStrategyKeys = {"warmers", "allow_hot_path_compiles"};

// ------------------------------------------------------------------------------------------
// --set overrides and matrix variants (scenario_set.cpp)

/// A KEY resolved to a full path in the tree.
struct Resolved {
  Path path;
  std::string error;  // empty when resolved
};

/// Turns KEY (dotted, or a bare engine / top-level name) into a full path, checking each part
/// against the schema as far as it is fixed (HF keys and strategy names are checked later).
Resolved resolve_key(const std::string& key);

/// Writes `value` at `path` in the tree, creating missing mapping keys; a list index may equal the
/// list's length to append. Returns an error text, or "" on success.
std::string set_path(YAML::Node root, const Path& path, const YAML::Node& value);

/// Applies `--set KEY=VALUE` strings to the tree, recording each as an override, and removes the
/// matrix axes they pin.
void apply_set_overrides(Checker& c, YAML::Node root, const std::vector<std::string>& sets);

/// Writes a variant's overrides into the tree (taking the matrix's own value nodes, so problems
/// point into the file), recording each as an override, and removes `matrix`.
void apply_variant_overrides(Checker& c, YAML::Node root, const Variant& variant);

/// Reads `matrix:` into variants (their cross product, first axis slowest).
void load_matrix(Checker& c, const Entry& mx, std::vector<Variant>& out);

/// Every variant is validated on its own, from the text: records a problem at `matrix:` when
/// `variants` times the scenario's `bytes` or its expanded values (root, after --set) is more
/// than loading may cost (64 MiB, 1,000,000 values: a few seconds).
void check_variant_work(Checker& c, const YAML::Node& root, size_t bytes, size_t variants);

// ------------------------------------------------------------------------------------------
// engine: (scenario_engine.cpp)

/// Reads `engine:` into `e`: vLLM's engine arguments (max_num_seqs, block_size, cudagraph mode
/// and capture sizes, ...) checked against their ranges and the model (`model` is null when the
/// model could not be read: its cross checks are skipped; `limit` is the model's longest length),
/// and the keys their owners declare (engine_keys.h) into e.owned. Problems go to `c`.
void load_engine(Checker& c, const MapView& ev, const ModelConfig* model, const LengthLimit& limit,
                 EngineConfig& e);

// ------------------------------------------------------------------------------------------
// expect: rules (scenario_expect.cpp)

/// Reads the `expect:` list into `out`. `strategies` and `variants` are the names a rule may
/// name (besides "*" for a strategy).
void load_expectations(Checker& c, const Entry& ex, const std::vector<std::string>& strategies,
                       const std::vector<std::string>& variants, std::vector<Expectation>& out,
                       int world = 0);

}  // namespace coldstart::scenario_detail
