// Host-side pieces every model family shares: RMSNorm in the two flavours the families use, the
// RoPE table and its neox-style rotation, and the random bf16 weight maker. Libtorch operations
// (an engine's ahead-of-time kernels), never JIT compiles.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/jit/select.h"
#include "harness/replay/scenario.h"

namespace coldstart {

/// An HF config (ModelConfig::raw) as a model family reads the keys the typed fields do not
/// carry, through config_int / config_double / config_string / config_bool: a key that is absent
/// or null reads as the fallback; one of the wrong type, or an integer outside 32 bits, reads as
/// the fallback and is appended to `problems` (when not null) under model.<key>, naming the config
/// file, so check_replayable refuses it before anything runs.
struct ConfigView {
  const ModelConfig& model;
  std::vector<ScenarioProblem>* problems = nullptr;
  const nlohmann::json& raw() const { return model.raw; }
};

/// `key` as an integer in [lo, 2^31 - 1] (see ConfigView; lo defaults to -2^31): a size must
/// pass lo = 1 (or 0), else a negative one reaches the shapes.
int64_t config_int(const ConfigView& c, const char* key, int64_t fallback,
                   int64_t lo = INT32_MIN);
/// `key` as a number, an integer included (see ConfigView); a NaN is a problem too.
double config_double(const ConfigView& c, const char* key, double fallback);
/// `key` as a string (see ConfigView).
std::string config_string(const ConfigView& c, const char* key, const std::string& fallback);
/// `key` as true / false (see ConfigView).
bool config_bool(const ConfigView& c, const char* key, bool fallback);

/// RMSNorm over the last dimension, computed in float32: x / rms(x) * weight, in x's dtype.
/// x [..., H] (any float dtype), weight [H]. eps is added to mean(x^2).
struct MixerContext;

/// The all-reduce a tensor-parallel engine issues over `t` at `site` (vLLM's
/// tensor_model_parallel_all_reduce in RowParallelLinear with reduce_results, and after its fused
/// MoE), when the replay runs every rank (ctx.ranks set). The ranks meet in the collective; the
/// activations are not summed (every rank shares one device or none: rank_group.h). Inside a
/// graph capture nothing is issued: the engine meets the ranks once per graph replay instead
/// (Engine::execute). Throws dist::CollectiveTimeoutError when a rank does not arrive in time.
void tp_all_reduce(const MixerContext& ctx, const at::Tensor& t, int layer, const char* site);

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

/// The zero-centred RMSNorm (vLLM's GemmaRMSNorm, used by Qwen3-Next): x / rms(x) * (1 + weight).
at::Tensor gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

/// DeepSeek V4's clamped SwiGLU: gu bf16 [T, 2I] = [gate; up] -> bf16 [T, I] =
/// silu(min(gate, limit)) * clamp(up, -limit, limit), computed in float32 (no clamp when
/// limit <= 0). On the meta device only the shape.
at::Tensor clamped_swiglu(const at::Tensor& gu, double limit);

/// RoPE table [max_positions, rot] float32 on `device`: cos of the rot / 2 frequencies
/// theta^(-2i / rot) in the first half, sin in the second. On the meta device only the shape.
at::Tensor rope_table(int64_t max_positions, int64_t rot, double theta, c10::Device device);

/// Neox-style rotation of the first rot = cos_sin.size(-1) values of each head (halves rotated
/// against each other); the rest pass through. x [N, heads, D], cos_sin [N, 1, rot] float32
/// (rows of rope_table by position); returns x's dtype and shape.
at::Tensor neox_rope(const at::Tensor& x, const at::Tensor& cos_sin);

/// Makes a model's weights: bf16 on `device`, normal(0, std) with torch's global generator when
/// not on meta; counts the bytes made.
class WeightMaker {
 public:
  explicit WeightMaker(c10::Device device);
  /// normal(0, std) values (shape only on meta).
  at::Tensor normal(std::vector<int64_t> shape, double std);
  /// All ones (a plain RMSNorm scale).
  at::Tensor ones(int64_t n);
  /// All zeros (a (1 + w) RMSNorm scale).
  at::Tensor zeros(int64_t n);
  /// Bytes of everything made so far.
  int64_t bytes() const { return bytes_; }

 private:
  c10::Device device_;
  bool meta_;
  int64_t bytes_ = 0;
};

/// One rank's attention heads under tensor parallelism, as vLLM's QKVParallelLinear gives them:
/// query heads split evenly; KV heads split when there are at least as many as ranks, else
/// replicated (each rank keeps one).
struct AttentionShard {
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
};

/// The shard of `q_heads` / `kv_heads` on each of `tp` ranks. Appends a problem under
/// model.num_attention_heads / model.num_key_value_heads when vLLM would assert (heads not
/// divisible by tp; KV heads neither divisible by tp nor dividing it).
AttentionShard shard_attention(int64_t q_heads, int64_t kv_heads, int tp,
                               std::vector<ScenarioProblem>& problems);

/// `n / tp` for a dimension vLLM splits evenly over ranks (ColumnParallelLinear, FusedMoE's
/// intermediate); appends a problem under `key` when tp does not divide n (vLLM's divide()
/// asserts). Returns 0 then.
int64_t shard_evenly(int64_t n, int tp, const std::string& key,
                     std::vector<ScenarioProblem>& problems);

}  // namespace coldstart
