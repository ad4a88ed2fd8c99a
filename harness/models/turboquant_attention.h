// TurboQuant attention mixer (kv_cache_dtype "turboquant_4bit_nc"): cache store, split-KV decode
// and continuation prefill over the 4-bit cache, with scratch memory from the workspace manager
// sized as vLLM's TurboQuant backend sizes it (vllm turboquant_attn.py, the code behind vLLM issue
// #41565 and PRs #40798 / #42215). One instance per attention layer.
#pragma once

#include "harness/kernels/turboquant/turboquant.h"
#include "harness/models/mixer.h"

namespace coldstart {

class TurboQuantAttention final : public Mixer {
 public:
  TurboQuantAttention(const MixerSpec& spec, const MixerContext& ctx);
  std::string backend() const override { return "turboquant_4bit_nc"; }
  CacheSpec cache_spec() const override;
  /// The TurboQuant cache is block-major already (a block's K and V in its page), so a hybrid
  /// binding needs no re-striding.
  void bind_cache(const CacheBinding& binding) override;
  /// in = {q [N, Hq*D], k [N, Hk*D], v [N, Hk*D]} bf16; out [N, Hq*D] bf16.
  void forward(const std::vector<at::Tensor>& in, at::Tensor& out,
               const ForwardBatch& batch) override;
  std::string compile_config() const override;
  int64_t max_workspace_bytes() const override;
  std::vector<ScratchDecl> declared_scratch() const override;

  const tq::TqLayout& layout() const { return layout_; }
  /// Decode scratch for a batch of `batch` sequences, bytes (vLLM's formula).
  int64_t decode_workspace_bytes(int64_t batch) const;
  /// Continuation-prefill K/V buffers over `cached_tokens` cached tokens, bytes.
  int64_t continuation_workspace_bytes(int64_t cached_tokens) const;

 private:
  /// Split-KV decode for `batch.num_reqs` sequences with one new token each: q [B, Hq*D].
  void decode_attention(const at::Tensor& q, at::Tensor& out, const ForwardBatch& batch);
  /// A prefill chunk of request `r` after `context_len` cached tokens: dequantizes the cached
  /// tokens into workspace buffers, then attends over them and the chunk's own K/V.
  void continuation_prefill(int r, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            at::Tensor& out, const ForwardBatch& batch);

  tq::TqLayout layout_;
  int num_q_heads_;
  float sm_scale_;
  at::Tensor cache_;
};

}  // namespace coldstart
