// The engine keys of CUDA graph capture policy (engine_keys.h), read by the engine's capture
// (engine_graphs.cpp, do_graph_capture). What the engines do (stored sources read with the search
// tools; facts, not code):
//   order    vLLM V1 (CudagraphDispatcher.get_capture_descs, vllm/v1/cudagraph_dispatcher.py;
//            GPUModelRunner.capture_model: "capture the large shapes first so that the smaller
//            shapes can reuse the memory pool"), SGLang (CudaGraphRunner.capture:
//            reversed(capture_bs)) and TensorRT-LLM (PR #3116) all capture largest first.
//            Ascending is what a runner does that walks its size list as written.
//   warmups  eager runs before each capture: vLLM's cudagraph_num_of_warmups (field default 0 in
//            vllm/config/compilation.py, set to 1 whenever graphs are on, vllm/config/vllm.py);
//            SGLang's capture_one_batch_size and TensorRT-LLM's WARMUP_STEPS run 2. With 0, a
//            kernel that no startup step compiled is first needed inside the capture, where its
//            module load is refused (jit::CaptureUnsupportedError).
//   capture  when full decode graphs are captured: at startup (vLLM, SGLang: every size in
//            capture_model / CudaGraphRunner.__init__; vLLM's comments call lazy capture future
//            work), or lazily (TensorRT-LLM's PyTorch backend: PyTorchModelEngine.forward
//            captures a batch size's graph on the first forward that needs it, then replays it,
//            tensorrt_llm/_torch/pyexecutor/model_engine.py; DecodingCUDAGraphRunner.capture runs
//            the forward eagerly twice before capturing, cuda_graph_runner.py at 000a01de).
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "harness/engine/workspace_policy.engine_keys.h"
#include "harness/models/spec_decode.engine_keys.h"
#include "harness/replay/engine_keys.h"
#include "harness/replay/scenario.h"

namespace coldstart {

inline std::vector<EngineKeySpec> engine_keys_capture_policy() {
  EngineKeySpec order;
  order.name = "cudagraph_capture_order";
  order.owner = "engine (graph capture)";
  order.type = EngineKeyType::kChoice;
  order.choices = {"largest_first", "ascending"};
  order.default_value = "largest_first";
  order.doc = "the order capture sizes are captured in (piecewise sizes, then full decode sizes): "
              "largest_first as vLLM, SGLang and TensorRT-LLM, or ascending";
  order.in_result = EngineKeyInResult::kWhenSet;

  EngineKeySpec warmups;
  warmups.name = "cudagraph_num_of_warmups";
  warmups.owner = "engine (graph capture)";
  warmups.type = EngineKeyType::kInt;
  warmups.min = 0;
  warmups.max = 8;
  warmups.unit = "eager runs";
  warmups.default_value = "1";
  warmups.doc = "eager runs of each capture size before its capture (vLLM 1 when graphs are on, "
                "SGLang and TensorRT-LLM 2; 0 compiles and loads kernels inside the capture, "
                "which CUDA refuses)";
  warmups.in_result = EngineKeyInResult::kWhenSet;

  EngineKeySpec when;
  when.name = "cudagraph_capture";
  when.owner = "engine (graph capture)";
  when.type = EngineKeyType::kChoice;
  when.choices = {"startup", "lazy"};
  when.default_value = "startup";
  when.doc = "when full decode graphs are captured: at startup (vLLM, SGLang) or lazily, each "
             "size on the first decode step that needs it (TensorRT-LLM's PyTorch backend), "
             "after cudagraph_num_of_warmups eager runs of that step's static batch";
  when.in_result = EngineKeyInResult::kWhenSet;
  return {order, warmups, when};
}

/// engine.cudagraph_capture == "lazy": full decode graphs are captured on first use.
inline bool capture_lazily(const EngineConfig& e) {
  return e.string_key("cudagraph_capture") == "lazy";
}

/// Capture policies the replay refuses before anything runs: lazy capture with speculative
/// decoding (not replayed), with a workspace that locks (vLLM locks at the end of its startup
/// capture and never captures lazily; TensorRT-LLM, which does, never locks), or with a
/// cudagraph_mode that captures no full decode graphs.
inline std::vector<ScenarioProblem> check_capture_policy(const EngineConfig& e) {
  std::vector<ScenarioProblem> out;
  if (!capture_lazily(e)) return out;
  if (num_speculative_tokens(e) > 0)
    out.push_back({"engine.cudagraph_capture",
                   "lazy capture with num_speculative_tokens > 0 is not replayed"});
  if (workspace_policy_key(e) == "lock")
    out.push_back({"engine.cudagraph_capture",
                   "lazy capture with workspace_policy lock is no engine's combination (vLLM "
                   "locks after its startup capture and never captures lazily; TensorRT-LLM "
                   "captures lazily and never locks): set workspace_policy grow, resize or "
                   "fixed"});
  if (e.cudagraph_mode != CudaGraphMode::kFullDecodeOnly &&
      e.cudagraph_mode != CudaGraphMode::kFullAndPiecewise)
    out.push_back({"engine.cudagraph_capture",
                   fmt::format("lazy capture defers full decode graphs, and cudagraph_mode {} "
                               "captures none: use full_decode_only or full_and_piecewise",
                               cudagraph_mode_name(e.cudagraph_mode))});
  return out;
}

/// engine.cudagraph_capture_order == "ascending".
inline bool capture_ascending(const EngineConfig& e) {
  return e.string_key("cudagraph_capture_order") == "ascending";
}

/// engine.cudagraph_num_of_warmups: eager runs before each capture.
inline int capture_warmups(const EngineConfig& e) {
  return static_cast<int>(e.int_key("cudagraph_num_of_warmups"));
}

}  // namespace coldstart
