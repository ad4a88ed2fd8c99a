// The engine key of vLLM-style tuned kernel-config tables (engine_keys.h): read by every kernel
// config lookup that goes through jit::select_from_table (the fused-MoE backend's
// <dir>/fused_moe/E=..,N=..,device_name=...json, Mamba2's selective_state_update tables).
#pragma once

#include <string>
#include <vector>

#include "harness/replay/engine_keys.h"
#include "harness/replay/scenario.h"

namespace coldstart {

inline std::vector<EngineKeySpec> engine_keys_tuned_tables() {
  EngineKeySpec k;
  k.name = "tuned_config_dir";
  k.owner = "tuned tables (fused_moe_triton, mamba2)";
  k.type = EngineKeyType::kDirectory;
  k.doc = "vLLM-style tuned kernel-config tables (fused_moe/E=..,N=..,device_name=...json), "
          "relative to the scenario file; needed by MoE models (vLLM reads its packaged folder "
          "or VLLM_TUNED_CONFIG_FOLDER)";
  k.in_result = EngineKeyInResult::kNever;  // the run's inputs record it (with a checksum)
  return {k};
}

/// engine.tuned_config_dir: the tables' directory (normalized), "" when the scenario gives none.
inline const std::string& tuned_config_dir(const EngineConfig& e) {
  return e.string_key("tuned_config_dir");
}

}  // namespace coldstart
