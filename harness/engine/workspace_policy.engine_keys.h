// The engine keys of the workspace policy (engine_keys.h), read by the engine when it builds its
// WorkspaceManager (engine.cpp, do_init). What each policy mirrors (stored sources read with the
// search tools; facts, not code):
//   lock    vLLM V1's WorkspaceManager (vllm/v1/worker/workspace.py at 4ff865c38): the buffer grows
//           on demand (the old tensor dropped, empty_cache(), a new one allocated) until
//           GPUModelRunner.capture_model() ends with lock_workspace(); growth after that raises
//           "Workspace is locked but allocation from ... Workspace growth is not allowed after
//           locking." The default.
//   grow    the same manager in vLLM's Model Runner V2 (vllm/v1/worker/gpu/), which never calls
//           lock_workspace() at 4ff865c38: growth after capture reallocates, and graphs captured
//           before it keep the released block
//   fixed   FlashInfer's workspace buffers, allocated once and never grown (vLLM's
//           VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE, default 394 MiB since PR #28269; SGLang's
//           global_workspace_buffer, 384 MiB): a plan that needs more raises AlignedAllocator's
//           "Buffer overflow when allocating memory for ..." (include/flashinfer/allocator.h)
//   resize  a shared buffer grown with resize_() when a larger request arrives: vLLM's
//           SM100Workspace.ensure_size (v1/attention/backends/mla/cutlass_mla.py), TensorRT-LLM's
//           attention op (cpp/tensorrt_llm/thop/attentionOp.cpp, after "Attention workspace size
//           is not enough"), FlashInfer's cuDNN GEMM workspace (gemm_base.py; open PRs #4553 and
//           #4399 call it a use-after-free under CUDA graphs). New storage, the old block
//           released; every view of the tensor follows, a captured graph does not.
#pragma once

#include <string>
#include <vector>

#include "harness/replay/engine_keys.h"
#include "harness/replay/scenario.h"

namespace coldstart {

inline std::vector<EngineKeySpec> engine_keys_workspace_policy() {
  EngineKeySpec policy;
  policy.name = "workspace_policy";
  policy.owner = "engine (workspace)";
  policy.type = EngineKeyType::kChoice;
  policy.choices = {"lock", "grow", "fixed", "resize"};
  policy.default_value = "lock";
  policy.doc = "what the shared scratch workspace does when a request needs more: lock (vLLM V1: "
               "growth after graph capture raises), grow (reallocates; earlier graphs keep the "
               "old block), fixed (workspace_fixed_mb up front; overflow raises), resize "
               "(resize_ in place; earlier graphs keep the old block)";
  policy.in_result = EngineKeyInResult::kWhenSet;  // added after results existed

  EngineKeySpec fixed;
  fixed.name = "workspace_fixed_mb";
  fixed.owner = "engine (workspace)";
  fixed.type = EngineKeyType::kInt;
  fixed.min = 1;
  fixed.max = 1 << 20;
  fixed.unit = "MiB";
  fixed.default_value = "394";  // vLLM's VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE
  fixed.doc = "workspace_policy fixed: the workspace's size, allocated on first use (MiB)";
  fixed.in_result = EngineKeyInResult::kWhenSet;
  return {policy, fixed};
}

/// engine.workspace_policy: "lock" | "grow" | "fixed" | "resize" (workspace_policy_from_name in
/// workspace.h turns it into a WorkspacePolicy; this file stays torch-free for the loader).
inline const std::string& workspace_policy_key(const EngineConfig& e) {
  return e.string_key("workspace_policy");
}

/// engine.workspace_fixed_mb in bytes.
inline int64_t workspace_fixed_bytes(const EngineConfig& e) {
  return e.int_key("workspace_fixed_mb") * (int64_t{1} << 20);
}

}  // namespace coldstart
