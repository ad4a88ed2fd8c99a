// TurboQuant attention backend (kv_cache_dtype "turboquant_4bit_nc"): cache store, split-KV decode
// and continuation prefill over the 4-bit cache, with scratch memory from the workspace manager
// sized as vLLM's TurboQuant backend sizes it (vllm turboquant_attn.py, the code behind vLLM issue
// #41565 and PRs #40798 / #42215).
#pragma once

#include "harness/kernels/turboquant/turboquant.h"
#include "harness/models/model.h"

namespace coldstart {

class TurboQuantAttention final : public AttentionBackend {
 public:
  explicit TurboQuantAttention(const AttentionContext& ctx);
  std::string name() const override { return "turboquant"; }
  int64_t kv_bytes_per_block() const override { return layout_.block_bytes(); }
  void allocate_kv_cache(int num_layers, int64_t num_blocks) override;
  void forward(int layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
               at::Tensor& out, const ForwardBatch& batch) override;
  std::string layer_compile_config(int layer) const override;

  const tq::TqLayout& layout() const { return layout_; }
  int num_layers() const { return static_cast<int>(caches_.size()); }
  int num_q_heads() const { return num_q_heads_; }
  /// Decode scratch for a batch of `batch` sequences, bytes (vLLM's formula).
  int64_t decode_workspace_bytes(int64_t batch) const;
  /// Continuation-prefill K/V buffers over `cached_tokens` cached tokens, bytes.
  int64_t continuation_workspace_bytes(int64_t cached_tokens) const;

  /// Split-KV decode for `batch.num_reqs` sequences with one new token each: q [B, Hq*D].
  void decode_attention(int layer, const at::Tensor& q, at::Tensor& out, const ForwardBatch& batch);
  /// A prefill chunk of request `r` after `context_len` cached tokens: dequantizes the cached
  /// tokens into workspace buffers, then attends over them and the chunk's own K/V.
  void continuation_prefill(int layer, int r, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, at::Tensor& out, const ForwardBatch& batch);

 private:
  AttentionContext ctx_;
  tq::TqLayout layout_;
  int num_q_heads_;
  float sm_scale_;
  at::Tensor cache_all_;
  std::vector<at::Tensor> caches_;
};

}  // namespace coldstart
