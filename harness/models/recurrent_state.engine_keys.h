// The engine key of the recurrent-state mixers' SSM state dtype (engine_keys.h): read by the GDN
// mixer (gdn_mixer.cpp) and by NemotronH's Mamba2 layers (nemotron_h.cpp), as vLLM's
// CacheConfig.mamba_ssm_cache_dtype.
#pragma once

#include <string>
#include <vector>

#include "harness/replay/engine_keys.h"
#include "harness/replay/scenario.h"

namespace coldstart {

inline std::vector<EngineKeySpec> engine_keys_recurrent_state() {
  EngineKeySpec k;
  k.name = "mamba_ssm_cache_dtype";
  k.owner = "recurrent-state mixers (gdn, mamba2)";
  k.type = EngineKeyType::kChoice;
  k.choices = {"auto", "bfloat16", "float32"};
  k.default_value = "auto";
  k.doc = "the recurrent SSM state dtype of GDN / Mamba2 layers (auto: what vLLM resolves for "
          "the model: bf16 for Qwen3-Next, the HF config's mamba_ssm_cache_dtype, else float32, "
          "for NemotronH)";
  return {k};
}

/// engine.mamba_ssm_cache_dtype: "auto" | "bfloat16" | "float32".
inline const std::string& mamba_ssm_cache_dtype(const EngineConfig& e) {
  return e.string_key("mamba_ssm_cache_dtype");
}

}  // namespace coldstart
