// The model side of a replay: one forward batch's attention metadata, the attention backend
// interface (one per KV-cache format / kernel family), and the model interface, split into the
// pieces between attention layers so the runner can capture them as piecewise CUDA graphs
// (vLLM V1's piecewise mode) or capture everything as one full graph.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/replay/scenario.h"
#include "harness/runtime/device.h"
#include "harness/runtime/graph.h"
#include "harness/runtime/workspace.h"

namespace coldstart {

/// One step's batch as the model runner builds it (vLLM's input batch + attention metadata).
/// Tokens of all requests are packed back to back: request r owns rows
/// [query_start[r], query_start[r] + query_lens[r]).
struct ForwardBatch {
  int num_tokens = 0;                 ///< N rows in the tensors below (may include padding)
  int num_reqs = 0;                   ///< B requests
  std::vector<int> query_lens;        ///< host, per request: new tokens this step
  std::vector<int> context_lens;      ///< host, per request: tokens already in the KV cache
  std::vector<int> query_start;       ///< host, per request: first row
  at::Tensor input_ids;               ///< [N] int64
  at::Tensor positions;               ///< [N] int64
  at::Tensor slot_mapping;            ///< [N] int64, KV-cache slot of each token, -1 = padding
  at::Tensor block_table;             ///< [B, max_blocks_per_req] int32 (rows of the engine's table)
  at::Tensor seq_lens;                ///< [B] int32, context + query tokens
  bool skip_attention = false;        ///< no attention metadata (profile run, piecewise capture)

  /// Every request has one new token (a decode step).
  bool uniform_decode() const;
};

/// Everything an attention backend needs to know about the engine.
struct AttentionContext {
  DeviceMode mode;
  c10::Device device;
  jit::JitRuntime* jit;
  WorkspaceManager* workspace;
  const ModelConfig* model;
  const EngineConfig* engine;
  GpuSpans* prefill_attention_spans = nullptr;  ///< times libtorch SDPA calls when set
};

/// Attention over a paged KV cache for every layer of one model. A kernel family (TurboQuant,
/// ...) provides one implementation; see harness/models/turboquant_attention.cpp.
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual std::string name() const = 0;
  /// Bytes one KV-cache block takes in one layer.
  virtual int64_t kv_bytes_per_block() const = 0;
  /// Creates the per-layer caches: [num_layers] tensors carved from one allocation.
  virtual void allocate_kv_cache(int num_layers, int64_t num_blocks) = 0;
  /// Attention for `layer`: q [N, Hq*D], k and v [N, Hk*D] (bf16 views, row stride may be larger),
  /// writes out [N, Hq*D] bf16 for the first `batch.num_tokens` rows. Stores k/v into the cache
  /// first. May JIT-compile kernels and ask the workspace for scratch memory.
  virtual void forward(int layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       at::Tensor& out, const ForwardBatch& batch) = 0;
  /// What makes this layer's kernels distinct (head dims, block size, dtypes, cache strides):
  /// layers with equal keys share every compiled kernel. Used by warmers to de-duplicate.
  virtual std::string layer_compile_config(int layer) const = 0;
};

/// Activations flowing between pieces of a forward pass. The runner owns them; under graph
/// capture they are the graphs' static tensors.
struct ForwardState {
  at::Tensor hidden;    ///< [N, H] bf16
  at::Tensor residual;  ///< [N, H] bf16
  at::Tensor q, k, v;   ///< views of the fused QKV projection, after norm and RoPE
  at::Tensor attn_out;  ///< [N, Hq*D] bf16, written by the attention backend
  at::Tensor logits;    ///< [rows, V] float32
};

/// A decoder-only model over real shapes with random bf16 weights. Pieces: piece 0 = embedding +
/// layer 0 up to attention; piece i = rest of layer i-1 + layer i up to attention; the last piece =
/// rest of the last layer + final norm + LM head. Attention runs between pieces.
class Model {
 public:
  virtual ~Model() = default;
  virtual std::string name() const = 0;
  virtual int num_layers() const = 0;
  /// Allocates and fills the weights (normal, seeded); on meta only shapes are made. Returns bytes.
  virtual int64_t load_weights(uint64_t seed) = 0;
  /// Runs piece `i` in [0, num_layers()] on `st`. `logit_rows` (last piece only): rows whose
  /// logits to compute ([rows] int64), or undefined for all rows.
  virtual void piece(int i, ForwardState& st, const ForwardBatch& batch,
                     const at::Tensor& logit_rows) = 0;
};

/// Builds the model for `config.architecture` (Qwen3ForCausalLM, LlamaForCausalLM, ...).
/// Throws InputError naming the architecture when no implementation exists.
std::unique_ptr<Model> make_model(const ModelConfig& config, c10::Device device);

/// Builds the attention backend registered for `engine.kv_cache_dtype`. Throws InputError naming
/// the dtype and the registered ones when none fits.
std::unique_ptr<AttentionBackend> make_attention_backend(const AttentionContext& ctx);

using AttentionBackendFactory =
    std::function<std::unique_ptr<AttentionBackend>(const AttentionContext&)>;
/// Registers the backend for one kv_cache_dtype (static registration from the backend's file).
bool register_attention_backend(const std::string& kv_cache_dtype, AttentionBackendFactory f);

}  // namespace coldstart
