#include "harness/models/turboquant_attention.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>

#include "harness/models/attention_common.h"

namespace coldstart {

TurboQuantAttention::TurboQuantAttention(const MixerSpec& spec, const MixerContext& ctx)
    : Mixer(spec, ctx),
      layout_(tq::TqLayout::make(static_cast<int>(spec.head_dim), ctx.engine->block_size,
                                 static_cast<int>(spec.num_kv_heads))),
      num_q_heads_(static_cast<int>(spec.num_heads)),
      sm_scale_(attention_scale(spec.head_dim)) {}

CacheSpec TurboQuantAttention::cache_spec() const {
  CacheSpec c;
  c.kind = CacheSpec::Kind::kPagedKv;
  c.bytes_per_token = layout_.block_bytes() / layout_.block_size;
  c.group = fmt::format("attention/{}/token_bytes={}", backend(), c.bytes_per_token);
  return c;
}

void TurboQuantAttention::bind_cache(const CacheBinding& c) {
  CS_CHECK(c.page_bytes == layout_.block_bytes(), "TurboQuant page size differs from its block");
  cache_ = c.bytes.view(tq::cache_shape(layout_, c.num_pages));
}

int64_t TurboQuantAttention::decode_workspace_bytes(int64_t batch) const {
  return tq::decode_workspace_bytes(batch, num_q_heads_, layout_.head_dim);
}

int64_t TurboQuantAttention::continuation_workspace_bytes(int64_t cached_tokens) const {
  return tq::continuation_workspace_bytes(
      layout_.num_kv_heads, tq::continuation_alloc_len(cached_tokens, layout_.block_size),
      layout_.head_dim);
}

int64_t TurboQuantAttention::max_workspace_bytes() const {
  // vLLM PR #40798's reservation: decode at max_num_seqs sequences, and a continuation prefill
  // over max_model_len - 1 cached tokens.
  return std::max(decode_workspace_bytes(ctx_.engine->max_num_seqs),
                  continuation_workspace_bytes(ctx_.engine->max_model_len - 1));
}

std::string TurboQuantAttention::compile_config() const {
  // Everything the layer's kernels are specialized on: the constexprs and the alignment of its
  // cache (the only per-layer pointer; every other argument is shared or from the workspace).
  const uint64_t offset = static_cast<uint64_t>(cache_.storage_offset());
  return fmt::format("turboquant_4bit_nc D={} block={} Hq={} Hk={} slot={} cache_align16={}",
                     layout_.head_dim, layout_.block_size, num_q_heads_, layout_.num_kv_heads,
                     layout_.slot_bytes, offset % 16 == 0);
}

void TurboQuantAttention::forward(const std::vector<at::Tensor>& in, at::Tensor& out,
                                  const ForwardBatch& batch) {
  const at::Tensor &q = in.at(0), &k = in.at(1), &v = in.at(2);
  const int64_t N = q.size(0), D = layout_.head_dim, Hk = layout_.num_kv_heads;
  // 1. Quantize the new tokens' K/V into the cache (padding rows have slot -1 and are skipped).
  tq::store(*ctx_.jit, layout_, k.view({N, Hk, D}), v.view({N, Hk, D}),
            batch.slot_mapping.narrow(0, 0, N), cache_);
  // 2. Attention: a decode batch goes through the split-KV kernels; prefill chunks per request.
  if (batch.uniform_decode()) {
    decode_attention(q, out, batch);
    return;
  }
  for (int r = 0; r < batch.num_reqs; ++r) {
    const int64_t start = batch.query_start[r], len = batch.query_lens[r];
    at::Tensor qr = q.narrow(0, start, len), kr = k.narrow(0, start, len),
               vr = v.narrow(0, start, len);
    at::Tensor outr = out.narrow(0, start, len);
    if (batch.context_lens[r] == 0) {
      outr.copy_(chunk_attention(qr.view({len, num_q_heads_, D}), kr.view({len, Hk, D}),
                                 vr.view({len, Hk, D}), 0, ctx_.prefill_attention_spans));
    } else {
      continuation_prefill(r, qr, kr, vr, outr, batch);
    }
  }
}

void TurboQuantAttention::decode_attention(const at::Tensor& q, at::Tensor& out,
                                           const ForwardBatch& batch) {
  const int64_t B = batch.num_reqs, Hq = num_q_heads_, D = layout_.head_dim;
  auto ws = ctx_.workspace->get_simultaneous({{{B, Hq, tq::kNumKvSplits, D + 1}, at::kFloat},
                                              {{B, Hq, D}, at::kBFloat16},
                                              {{B, Hq}, at::kFloat}},
                                             CS_HERE);
  tq::decode(*ctx_.jit, layout_, q.view({B, Hq, D}), cache_, batch.block_table, batch.seq_lens,
             sm_scale_, tq::DecodeWorkspace{ws[0], ws[1], ws[2]});
  out.narrow(0, 0, B).copy_(ws[1].view({B, Hq * D}));
}

void TurboQuantAttention::continuation_prefill(int r, const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v, at::Tensor& out,
                                               const ForwardBatch& batch) {
  const int64_t context = batch.context_lens[r], L = q.size(0), D = layout_.head_dim,
                Hk = layout_.num_kv_heads;
  const int64_t alloc_len = tq::continuation_alloc_len(context, layout_.block_size);
  auto ws = ctx_.workspace->get_simultaneous(
      {{{Hk, alloc_len, D}, at::kBFloat16}, {{Hk, alloc_len, D}, at::kBFloat16}}, CS_HERE);
  tq::dequant_kv(*ctx_.jit, layout_, cache_, batch.block_table[r], context, ws[0], ws[1]);
  // Cached tokens (dequantized) followed by the chunk's own tokens, [context + L, Hk, D].
  at::Tensor k_all = at::cat({ws[0].narrow(1, 0, context).transpose(0, 1), k.view({L, Hk, D})}, 0);
  at::Tensor v_all = at::cat({ws[1].narrow(1, 0, context).transpose(0, 1), v.view({L, Hk, D})}, 0);
  out.copy_(chunk_attention(q.view({L, num_q_heads_, D}), k_all, v_all, context,
                            ctx_.prefill_attention_spans));
}

namespace {
bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

MixerBackendInfo turboquant_backend() {
  MixerBackendInfo b;
  b.kind = "attention";
  b.name = "turboquant_4bit_nc";
  b.kv_cache_dtypes = {"turboquant_4bit_nc"};
  b.description = "4-bit TurboQuant KV cache: store, split-KV decode, dequant + continuation "
                  "prefill (vLLM turboquant_attn.py)";
  b.make = [](const MixerSpec& s, const MixerContext& c) -> std::unique_ptr<Mixer> {
    return std::make_unique<TurboQuantAttention>(s, c);
  };
  b.kernels = tq::all_kernels();
  b.check = [](const MixerSpec& s, const ModelConfig&, const EngineConfig&) {
    std::vector<ScenarioProblem> out;
    if (!is_power_of_two(s.head_dim) || s.head_dim < 16 || s.head_dim > 256) {
      out.push_back({"model.head_dim",
                     fmt::format("turboquant_4bit_nc needs a power-of-two head_dim in [16, 256] "
                                 "(Hadamard rotation, the kernels' tiles), but the model's "
                                 "head_dim is {}",
                                 s.head_dim)});
    }
    return out;
  };
  return b;
}
}  // namespace

CS_REGISTER_MIXER_BACKEND(turboquant_backend());

std::vector<ScratchDecl> TurboQuantAttention::declared_scratch() const {
  // Both come from vLLM's WorkspaceManager (vllm/v1/worker/workspace.py), which grows on demand
  // until graph capture locks it: what the capture warmups asked for is all later steps get.
  ScratchDecl decode;
  decode.name = "split-KV decode partials";
  decode.bytes = decode_workspace_bytes(ctx_.engine->max_num_seqs);
  decode.size_rule = "float32 partials [B, Hq, splits, head_dim + 1] + LSE [B, Hq] for a decode "
                     "batch of B sequences; shown at B = max_num_seqs";
  decode.config_key = "max_num_seqs";
  decode.kind = "workspace manager";
  decode.source = "vLLM TurboQuant attention backend (turboquant_attn.py), its decode path";
  ScratchDecl cont;
  cont.name = "continuation-prefill dequantized K/V";
  cont.bytes = continuation_workspace_bytes(ctx_.engine->max_model_len - 1);
  cont.size_rule = "bf16 K and V [Hk, cached tokens rounded up to block_size, head_dim] of the "
                   "context a prefill chunk continues; shown at max_model_len - 1 cached tokens";
  cont.config_key = "max_model_len";
  cont.kind = "workspace manager";
  cont.source = "turboquant_attn.py _continuation_prefill; vLLM PR #40798 reserves both maxima";
  return {decode, cont};
}

}  // namespace coldstart
