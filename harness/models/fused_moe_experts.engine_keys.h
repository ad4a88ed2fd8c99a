// The engine key the fused_moe_triton MoE backend reads (engine_keys.h): vLLM's
// VLLM_FUSED_MOE_CHUNK_SIZE (vllm/envs.py, default 16 * 1024), the most tokens one pass of
// fused_experts_impl takes (vllm/model_executor/layers/fused_moe/fused_moe.py: the config is
// looked up for min(num_tokens, CHUNK_SIZE), and again for a shorter last chunk).
#pragma once

#include <vector>

#include "harness/replay/engine_keys.h"
#include "harness/replay/scenario.h"

namespace coldstart {

inline std::vector<EngineKeySpec> engine_keys_fused_moe_experts() {
  EngineKeySpec k;
  k.name = "fused_moe_chunk_size";
  k.owner = "fused_moe_triton";
  k.type = EngineKeyType::kInt;
  k.min = 1;
  k.max = 1 << 20;
  k.unit = "tokens";
  k.default_value = "16384";
  k.doc = "vLLM's VLLM_FUSED_MOE_CHUNK_SIZE: the fused-MoE experts run over at most this many "
          "tokens at a time, each chunk with the tuned config for its own token count";
  k.in_result = EngineKeyInResult::kWhenSet;  // added after results existed
  return {k};
}

/// engine.fused_moe_chunk_size: tokens per fused_experts pass.
inline int64_t fused_moe_chunk_size(const EngineConfig& e) {
  return e.int_key("fused_moe_chunk_size");
}

}  // namespace coldstart
