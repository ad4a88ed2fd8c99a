// The engine keys of routed experts under expert parallelism (engine_keys.h), read by the MoE
// families (nemotron_h.cpp) and moe_layer_forward_ep (moe.cpp). What the engine does (stored
// sources read with the search tools; facts, not code):
//   enable_expert_parallel  vLLM's --enable-expert-parallel: the MoE layers' experts are split
//                           over the EP group (TP x DP ranks; here the tensor-parallel ranks)
//                           instead of each expert's intermediate width; every rank keeps
//                           num_experts / ep whole experts.
//   moe_routing_simulation  vLLM's VLLM_MOE_ROUTING_SIMULATION_STRATEGY
//                           (vllm/model_executor/layers/fused_moe/routing_simulator.py @
//                           2780145f): instead of the router's top-k, "uniform_random" draws each
//                           token's top_k expert ids uniformly (with repeats, weights 1) and
//                           "normal_routing" maps N(0, 1) samples through a sigmoid onto the
//                           experts (weights |N(0, 1)| normalized per token), so the load leans
//                           on the middle experts. coldstart draws them on the host from the run's
//                           seed (same ids in compile-only mode and on the GPU, so each rank's
//                           token counts and compile keys are exact in both); vLLM draws them
//                           with torch on the device.
#pragma once

#include <string>
#include <vector>

#include "harness/replay/engine_keys.h"
#include "harness/replay/scenario.h"

namespace coldstart {

inline std::vector<EngineKeySpec> engine_keys_moe() {
  EngineKeySpec ep;
  ep.name = "enable_expert_parallel";
  ep.owner = "moe";
  ep.type = EngineKeyType::kChoice;
  ep.choices = {"false", "true"};
  ep.default_value = "false";
  ep.doc = "vLLM's --enable-expert-parallel: the experts are split over the tensor-parallel ranks "
           "(num_experts / tensor_parallel_size whole experts each), tokens dispatched to the "
           "ranks that own their experts";
  ep.in_result = EngineKeyInResult::kWhenSet;

  EngineKeySpec sim;
  sim.name = "moe_routing_simulation";
  sim.owner = "moe";
  sim.type = EngineKeyType::kChoice;
  sim.choices = {"none", "uniform_random", "normal_routing"};
  sim.default_value = "none";
  sim.doc = "vLLM's VLLM_MOE_ROUTING_SIMULATION_STRATEGY under expert parallelism: none (the "
            "router), uniform_random or normal_routing (drawn from the run's seed, so compile-only "
            "mode routes as the GPU does)";
  sim.in_result = EngineKeyInResult::kWhenSet;
  return {ep, sim};
}

/// engine.enable_expert_parallel with more than one rank.
inline bool expert_parallel(const EngineConfig& e) {
  return e.string_key("enable_expert_parallel") == "true" && e.tensor_parallel_size > 1;
}

/// engine.moe_routing_simulation ("none" when the router routes).
inline const std::string& moe_routing_simulation(const EngineConfig& e) {
  return e.string_key("moe_routing_simulation");
}

}  // namespace coldstart
