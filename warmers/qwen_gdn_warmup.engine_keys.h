// The engine key the qwen-gdn-warmup warmer reads (engine_keys.h): vLLM's
// speculative_config.num_speculative_tokens, which decides the MTP decode kernels it warms.
#pragma once

#include <vector>

#include "harness/replay/engine_keys.h"
#include "harness/replay/scenario.h"

namespace coldstart {

inline std::vector<EngineKeySpec> engine_keys_qwen_gdn_warmup() {
  EngineKeySpec k;
  k.name = "num_speculative_tokens";
  k.owner = "qwen-gdn-warmup";
  k.type = EngineKeyType::kInt;
  k.min = 0;
  k.max = 16;
  k.unit = "draft tokens";
  k.default_value = "0";
  k.doc = "vLLM's speculative_config.num_speculative_tokens as warmers see it (draft tokens "
          "themselves are not replayed: decode steps carry one token per request)";
  return {k};
}

/// engine.num_speculative_tokens: draft tokens per step (0..16).
inline int num_speculative_tokens(const EngineConfig& e) {
  return static_cast<int>(e.int_key("num_speculative_tokens"));
}

}  // namespace coldstart
