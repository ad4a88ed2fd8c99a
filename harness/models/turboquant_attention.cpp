#include "harness/models/turboquant_attention.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/version.h>

#include <cmath>

namespace coldstart {

namespace {

/// Causal attention of a prefill chunk: q [L, Hq, D] over k/v [C + L, Hk, D], where the chunk's
/// tokens sit after C earlier tokens. Libtorch's scaled-dot-product attention (an ahead-of-time
/// kernel in an engine, never a JIT compile). Returns [L, Hq * D] bf16.
at::Tensor chunk_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           int64_t context) {
  const int64_t L = q.size(0), Hq = q.size(1), D = q.size(2), Hk = k.size(1), T = k.size(0);
#if TORCH_VERSION_MAJOR >= 2
  const int64_t group = Hq / Hk;
  auto heads_first = [&](const at::Tensor& x) {  // [T, Hk, D] -> [1, Hq, T, D]
    return x.transpose(0, 1).unsqueeze(1).expand({Hk, group, T, D}).reshape({1, Hq, T, D});
  };
  at::Tensor qh = q.transpose(0, 1).unsqueeze(0);
  at::Tensor o;
  if (context == 0) {
    o = at::scaled_dot_product_attention(qh, heads_first(k), heads_first(v), {}, 0.0, true);
  } else {
    at::Tensor mask = at::ones({L, T}, at::TensorOptions().dtype(at::kBool).device(q.device()))
                          .tril(context);
    o = at::scaled_dot_product_attention(qh, heads_first(k), heads_first(v), mask);
  }
  return o.squeeze(0).transpose(0, 1).reshape({L, Hq * D});
#else
  // libtorch 1.x (Debian's CPU build) has no scaled_dot_product_attention; it only runs
  // compile-only mode, where tensors are meta and only shapes matter.
  TORCH_CHECK(q.is_meta(), "chunk_attention needs libtorch >= 2.0 on a real device");
  (void)T;
  (void)context;
  return at::empty({L, Hq * D}, q.options());
#endif
}

}  // namespace

TurboQuantAttention::TurboQuantAttention(const AttentionContext& ctx)
    : ctx_(ctx),
      layout_(tq::TqLayout::make(ctx.model->head_dim, ctx.engine->block_size,
                                 ctx.model->num_key_value_heads)),
      num_q_heads_(ctx.model->num_attention_heads),
      sm_scale_(static_cast<float>(1.0 / std::sqrt(static_cast<double>(ctx.model->head_dim)))) {}

void TurboQuantAttention::allocate_kv_cache(int num_layers, int64_t num_blocks) {
  std::vector<int64_t> shape = tq::cache_shape(layout_, num_blocks);
  shape.insert(shape.begin(), num_layers);
  cache_all_ = at::empty(shape, at::TensorOptions().dtype(at::kByte).device(ctx_.device));
  caches_.clear();
  for (int l = 0; l < num_layers; ++l) caches_.push_back(cache_all_[l]);
}

int64_t TurboQuantAttention::decode_workspace_bytes(int64_t batch) const {
  return tq::decode_workspace_bytes(batch, num_q_heads_, layout_.head_dim);
}

int64_t TurboQuantAttention::continuation_workspace_bytes(int64_t cached_tokens) const {
  return tq::continuation_workspace_bytes(
      layout_.num_kv_heads, tq::continuation_alloc_len(cached_tokens, layout_.block_size),
      layout_.head_dim);
}

std::string TurboQuantAttention::layer_compile_config(int layer) const {
  // Everything the layer's kernels are specialized on: the constexprs and the alignment of its
  // cache (the only per-layer pointer; every other argument is shared or from the workspace).
  const at::Tensor& c = caches_.at(layer);
  const uint64_t offset = static_cast<uint64_t>(c.storage_offset());
  return fmt::format("turboquant_4bit_nc D={} block={} Hq={} Hk={} slot={} cache_align16={}",
                     layout_.head_dim, layout_.block_size, num_q_heads_, layout_.num_kv_heads,
                     layout_.slot_bytes, offset % 16 == 0);
}

void TurboQuantAttention::forward(int layer, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, at::Tensor& out, const ForwardBatch& batch) {
  const int64_t N = q.size(0), D = layout_.head_dim, Hk = layout_.num_kv_heads;
  // 1. Quantize the new tokens' K/V into the cache (padding rows have slot -1 and are skipped).
  tq::store(*ctx_.jit, layout_, k.view({N, Hk, D}), v.view({N, Hk, D}),
            batch.slot_mapping.narrow(0, 0, N), caches_.at(layer));
  // 2. Attention: a decode batch goes through the split-KV kernels; prefill chunks per request.
  if (batch.uniform_decode()) {
    decode_attention(layer, q, out, batch);
    return;
  }
  for (int r = 0; r < batch.num_reqs; ++r) {
    const int64_t start = batch.query_start[r], len = batch.query_lens[r];
    at::Tensor qr = q.narrow(0, start, len), kr = k.narrow(0, start, len),
               vr = v.narrow(0, start, len);
    at::Tensor outr = out.narrow(0, start, len);
    if (batch.context_lens[r] == 0) {
      if (ctx_.prefill_attention_spans) ctx_.prefill_attention_spans->begin();
      outr.copy_(chunk_attention(qr.view({len, num_q_heads_, D}), kr.view({len, Hk, D}),
                                 vr.view({len, Hk, D}), 0));
      if (ctx_.prefill_attention_spans) ctx_.prefill_attention_spans->end();
    } else {
      continuation_prefill(layer, r, qr, kr, vr, outr, batch);
    }
  }
}

void TurboQuantAttention::decode_attention(int layer, const at::Tensor& q, at::Tensor& out,
                                           const ForwardBatch& batch) {
  const int64_t B = batch.num_reqs, Hq = num_q_heads_, D = layout_.head_dim;
  auto ws = ctx_.workspace->get_simultaneous({{{B, Hq, tq::kNumKvSplits, D + 1}, at::kFloat},
                                              {{B, Hq, D}, at::kBFloat16},
                                              {{B, Hq}, at::kFloat}},
                                             CS_HERE);
  tq::decode(*ctx_.jit, layout_, q.view({B, Hq, D}), caches_.at(layer), batch.block_table,
             batch.seq_lens, sm_scale_, tq::DecodeWorkspace{ws[0], ws[1], ws[2]});
  out.narrow(0, 0, B).copy_(ws[1].view({B, Hq * D}));
}

void TurboQuantAttention::continuation_prefill(int layer, int r, const at::Tensor& q,
                                               const at::Tensor& k, const at::Tensor& v,
                                               at::Tensor& out, const ForwardBatch& batch) {
  const int64_t context = batch.context_lens[r], L = q.size(0), D = layout_.head_dim,
                Hk = layout_.num_kv_heads;
  const int64_t alloc_len = tq::continuation_alloc_len(context, layout_.block_size);
  auto ws = ctx_.workspace->get_simultaneous(
      {{{Hk, alloc_len, D}, at::kBFloat16}, {{Hk, alloc_len, D}, at::kBFloat16}}, CS_HERE);
  tq::dequant_kv(*ctx_.jit, layout_, caches_.at(layer), batch.block_table[r], context, ws[0], ws[1]);
  // Cached tokens (dequantized) followed by the chunk's own tokens, [context + L, Hk, D].
  at::Tensor k_all = at::cat({ws[0].narrow(1, 0, context).transpose(0, 1), k.view({L, Hk, D})}, 0);
  at::Tensor v_all = at::cat({ws[1].narrow(1, 0, context).transpose(0, 1), v.view({L, Hk, D})}, 0);
  if (ctx_.prefill_attention_spans) ctx_.prefill_attention_spans->begin();
  out.copy_(chunk_attention(q.view({L, num_q_heads_, D}), k_all, v_all, context));
  if (ctx_.prefill_attention_spans) ctx_.prefill_attention_spans->end();
}

static const bool kRegistered = register_attention_backend(
    "turboquant_4bit_nc",
    [](const AttentionContext& ctx) { return std::make_unique<TurboQuantAttention>(ctx); });

}  // namespace coldstart
