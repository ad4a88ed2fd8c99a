// coldstart: reading the HF config.json a scenario's model.config names, for the scenario loader.
// Internal to harness/replay; the keys read and their defaults are described in scenario.h.
//
// The config is read (paths::read_input_file: a regular file of at most 16 MiB) and parsed with
// nlohmann::json's SAX interface after bare Infinity / -Infinity / NaN tokens (outside strings)
// are replaced; every parse failure (a number past a double's range included) points at the
// original line and column and names the key being read. Keys repeated at any level and nesting
// deeper than 64 levels are refused. A problem with a config value points at the model.overrides
// entry that set it, else at the config file's line of that key.
#pragma once

#include <string>

#include "harness/replay/scenario.h"
#include "harness/replay/yaml_check.h"

namespace coldstart::scenario_detail {

/// The model's derived length limit, as vLLM derives it, and how it was derived.
struct LengthLimit {
  long long tokens = 0;
  std::string why;  ///< e.g. "max_position_embeddings in qwen3-8b.json x rope_scaling.factor 4"
};

/// Reads the HF config named by `model`'s `config` key (relative to the scenario file, or to the
/// working directory when it came from --set), applies `overrides`, and fills `m` and `limit`.
/// Returns false when a problem was recorded in `c`.
bool load_model(Checker& c, const MapView& model, ModelConfig& m, LengthLimit& limit);

/// What a JSON value is, for messages: "null", "a boolean", "an integer", "a number", "a string",
/// "a list" or "a mapping".
const char* json_kind(const nlohmann::json& v);

}  // namespace coldstart::scenario_detail
