// DeepSeek V4's attention mixer (kind "mla_sparse", backend "deepseek_v4"): the latent-KV cache
// insert, the sparse indexer of C4 layers through DeepGEMM's MQA-logits kernels, and the attention
// over what each layer kind sees. Followed: TokenSpeed's DeepseekV4Attention / indexer
// (python/tokenspeed/runtime/models/deepseek_v4.py, f4d8ec6e) and vLLM's sparse_attn_indexer
// (vllm/model_executor/layers/sparse_attn_indexer.py, 006475fe):
// - C4 layers insert the FP8 index key (128 values + a float32 scale per token, the SM90 cache
//   layout: a block's values, then its scales) and select each query's top-512 keys:
//   prefill gathers the request's index keys into a contiguous workspace and runs the ragged
//   fp8_mqa_logits (each query sees keys [request start, its position]; clean_logits off, the
//   rest masked before the top-k, as both engines do); a decode-only batch
//   builds the schedule with get_paged_mqa_logits_metadata (keyed on the batch rounded up to 32)
//   and runs fp8_paged_mqa_logits straight from the paged cache (blocks of 64 tokens). Under
//   speculative decoding verify rows (1 + k tokens a request) are decodes too, and a step mixing
//   decodes and prefills runs its leading decodes through the paged path and the rest through
//   the ragged one (split_decodes below). The query
//   is quantized per (token, head) and its scale folded into the head weights, with
//   softmax_scale = index_head_dim^-0.5 and head_scale = index_n_heads^-0.5, as TokenSpeed's
//   q-prep kernel does;
// - attention: SWA layers see the last `window` tokens; C4 layers the window plus the indexer's
//   top-k; C128 layers the window plus one key per 128 tokens.
// Simplified: the latent KV is cached as bf16 (V4 stores 448 FP8 + 64 bf16 RoPE dims + scales,
// 584 bytes), every layer's pages carry the indexer rows (only C4 layers use them), the
// compressors' pooling is replaced by per-token keys (C4: every token is indexable; C128: every
// 128th token stands for a compressed row), and the attention itself (FlashMLA's sparse kernels,
// ahead-of-time compiled) is torch operations. Mixers run eagerly between piecewise graphs, as
// vLLM's deepseek_v4_attention splitting op and TokenSpeed's attention break point do.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "harness/kernels/deepgemm/deepgemm.h"
#include "harness/kernels/deepgemm/deepgemm_indexer.h"
#include "harness/models/deepseek_v4.h"
#include "harness/models/mixer.h"
#include "harness/runtime/host_upload.h"
#include "harness/runtime/workspace.h"

namespace coldstart {
namespace {

namespace dg = deepgemm;

class DeepseekV4Attention final : public Mixer {
 public:
  DeepseekV4Attention(const MixerSpec& spec, const MixerContext& ctx)
      : Mixer(spec, ctx),
        ratio_(spec.params.value("compress_ratio", 0)),
        window_(spec.params.value("window", int64_t{128})),
        topk_(spec.params.value("index_topk", int64_t{512})),
        index_heads_(spec.params.value("index_heads", int64_t{64})),
        index_dim_(spec.params.value("index_head_dim", int64_t{128})),
        bytes_per_token_(spec.params.value("bytes_per_token", int64_t{0})) {
    target_ = dg::gemm_target(ctx.target);
  }

  std::string backend() const override { return "deepseek_v4"; }

  CacheSpec cache_spec() const override {
    CacheSpec c;
    c.kind = CacheSpec::Kind::kPagedKv;
    c.bytes_per_token = bytes_per_token_;
    c.group = fmt::format("mla_sparse/deepseek_v4/token_bytes={}", bytes_per_token_);
    return c;
  }

  void bind_cache(const CacheBinding& c) override {
    block_ = c.page_bytes / bytes_per_token_;
    pages_ = c.num_pages;
    const int64_t pb = c.page_bytes;
    const int64_t latent_bytes = block_ * 2 * spec_.head_dim;
    latent_ = c.bytes.view(at::kBFloat16).as_strided({pages_, block_, spec_.head_dim}, {pb / 2, spec_.head_dim, 1});
    index_cache_ = c.bytes.as_strided({pages_, block_ * (index_dim_ + 4)}, {pb, 1}, latent_bytes);
    index_values_ = c.bytes.as_strided({pages_, block_, index_dim_}, {pb, index_dim_, 1}, latent_bytes);
    index_scales_ = c.bytes.view(at::kFloat).as_strided({pages_, block_}, {pb / 4, 1},
                                                         (latent_bytes + block_ * index_dim_) / 4);
  }

  std::vector<at::Tensor> cache_views() const override { return {latent_, index_cache_}; }

  std::string compile_config() const override {
    return fmt::format("mla_sparse(ratio={},heads={},dim={},index={}x{},block={})", ratio_, spec_.num_heads,
                       spec_.head_dim, index_heads_, index_dim_, block_);
  }

  /// vLLM's sparse_attn_indexer without attention metadata (the profile run): it reserves its
  /// prefill K-gather buffers from the workspace manager at their largest, so the lock at the end
  /// of graph capture never finds a long prompt's gather bigger than startup made it.
  void forward_no_metadata(const std::vector<at::Tensor>& in, at::Tensor& out,
                           const ForwardBatch& batch) override {
    (void)in;
    (void)out;
    (void)batch;
    if (ratio_ == 4) index_gather(max_prefill_gather_rows());
  }

  int64_t max_workspace_bytes() const override {
    if (ratio_ != 4) return 0;
    const int64_t rows = max_prefill_gather_rows();
    return round_up_256(rows * index_dim_) + round_up_256(rows * 4);
  }

  std::vector<ScratchDecl> declared_scratch() const override {
    if (ratio_ != 4) return {};
    ScratchDecl d;
    d.name = "indexer prefill K-gather";
    d.bytes = max_workspace_bytes();
    d.size_rule = fmt::format("40 x max_model_len rows of index_head_dim FP8 values + a 4-byte scale "
                              "({} B a row), reserved at its largest in the profile run",
                              index_dim_ + 4);
    d.config_key = "max_model_len";
    d.kind = "workspace manager";
    d.seen_by_profile_run = true;
    d.source = "vllm/model_executor/layers/sparse_attn_indexer.py, get_max_prefill_buffer_size";
    return {d};
  }

  void forward(const std::vector<at::Tensor>& in, at::Tensor& out, const ForwardBatch& batch) override {
    const int64_t N = batch.num_tokens;
    const bool meta = ctx_.device.is_meta();
    const at::Tensor q = in.at(0).narrow(0, 0, N), kv = in.at(1).narrow(0, 0, N);
    // Cache insert; padding rows (slot -1) go to the null block 0, which no request reads.
    at::Tensor blk, off;
    if (!meta) {
      const at::Tensor slot = batch.slot_mapping.narrow(0, 0, N).clamp_min(0);
      blk = slot.floor_divide(block_);
      off = slot - blk * block_;
      latent_.index_put_({blk, off}, kv.to(at::kBFloat16));
    }
    at::Tensor selected;  // C4: [N, k] key positions within each request (-1 = none)
    if (ratio_ == 4) selected = indexer(in.at(2).narrow(0, 0, N), in.at(3).narrow(0, 0, N), in.at(4).narrow(0, 0, N), blk, off, batch);
    if (meta) return;
    attend(q.view({N, spec_.num_heads, spec_.head_dim}), selected, out, batch);
  }

 private:
  /// Top-k key positions per query row (within its request), from the MQA-logits kernels.
  at::Tensor indexer(const at::Tensor& iq, const at::Tensor& iw, const at::Tensor& ik, const at::Tensor& blk,
                     const at::Tensor& off, const ForwardBatch& batch) {
    const int64_t N = iq.size(0), H = index_heads_, D = index_dim_;
    const bool meta = ctx_.device.is_meta();
    const auto opt = iq.options();
    // Index keys: FP8 per token with a float32 scale, into the paged cache.
    const dg::Fp8Activation kq = dg::quantize_fp8(ik.contiguous());
    const dg::Fp8Activation qq = dg::quantize_fp8(iq.reshape({N * H, D}));
    at::Tensor weights = at::empty({N, H}, opt.dtype(at::kFloat));
    if (!meta) {
      index_values_.index_put_({blk, off}, kq.data);
      index_scales_.index_put_({blk, off}, kq.sf.select(0, 0).narrow(0, 0, N));
      const at::Tensor q_scale = qq.sf.select(0, 0).narrow(0, 0, N * H).view({N, H});
      weights = iw.to(at::kFloat) * q_scale * (1.0 / std::sqrt(static_cast<double>(D * H)));
    }
    const at::Tensor qbytes = qq.data.view({N, H, D});
    // vLLM's split: the leading decode requests through the paged path, the rest (rows
    // decode_tokens..N) through the ragged one; each part keys its rows' top-k by position.
    const DecodeSplit sp = split_decodes(batch);
    std::vector<at::Tensor> parts;
    if (sp.num_decodes > 0) {
      parts.push_back(decode_keys(qbytes.narrow(0, 0, sp.decode_tokens), weights.narrow(0, 0, sp.decode_tokens), batch, sp));
    }
    if (sp.num_decodes == batch.num_reqs && sp.decode_tokens < N) {
      // Padding rows after an all-decode batch select nothing.
      if (!meta) parts.push_back(at::full({N - sp.decode_tokens, 1}, -1, qbytes.options().dtype(at::kLong)));
    } else if (sp.decode_tokens < N) {
      parts.push_back(prefill_keys(qbytes.narrow(0, sp.decode_tokens, N - sp.decode_tokens),
                                   weights.narrow(0, sp.decode_tokens, N - sp.decode_tokens), batch, sp));
    }
    if (meta) return at::Tensor();
    if (parts.size() == 1) return parts[0];
    for (at::Tensor& t : parts) t = at::constant_pad_nd(t, {0, topk_ - t.size(1)}, -1);
    return at::cat(parts, 0);
  }

  /// How vLLM's indexer splits a step (split_decodes_and_prefills, vllm/v1/attention/backends/
  /// utils.py @ 00bd1493, called from the indexer's metadata builder,
  /// vllm/v1/attention/backends/mla/indexer.py @ 0023368d): decodes are the leading requests of at
  /// most decode_threshold = 1 + num_speculative_tokens new tokens (the scheduler puts running
  /// requests first). Where the paged kernel takes 1 + k rows natively the decodes must also be
  /// uniform (require_uniform: the leading run of requests as long as the first); otherwise
  /// (use_flattening) any such request is a decode and every decode query becomes a row of its own.
  struct DecodeSplit {
    int num_decodes = 0;     ///< leading requests served by the paged path
    int64_t decode_tokens = 0;  ///< their rows (the first rows of the batch)
    int next_n = 1;          ///< query rows a request in the paged launch (1: flattened or plain decode)
  };

  static DecodeSplit split_decodes(const ForwardBatch& batch) {
    DecodeSplit sp;
    const int threshold = std::max(1, batch.spec_query_len);
    if (batch.num_reqs == 0 || batch.query_lens[0] < 1 || batch.query_lens[0] > threshold) return sp;
    const bool uniform = deepseek_v4::paged_logits_native_next_n(threshold);
    const int q0 = batch.query_lens[0];
    int d = 0;
    while (d < batch.num_reqs && batch.query_lens[d] >= 1 &&
           (uniform ? batch.query_lens[d] == q0 : batch.query_lens[d] <= threshold)) {
      sp.decode_tokens += batch.query_lens[d];
      ++d;
    }
    sp.num_decodes = d;
    sp.next_n = uniform && deepseek_v4::paged_logits_native_next_n(q0) ? q0 : 1;
    return sp;
  }

  /// The paged path over the decode rows (qbytes [Td, H, D], weights [Td, H]): schedule metadata
  /// (keyed on the launch's batch rounded up to 32) and the paged logits. Token j of a decode
  /// request of q tokens sees its first L - q + j + 1 keys (L = its sequence length), as vLLM's
  /// indexer builds the per-token context lengths. Returns [Td, <= index_topk] key positions.
  at::Tensor decode_keys(const at::Tensor& qbytes, const at::Tensor& weights, const ForwardBatch& batch,
                         const DecodeSplit& sp) {
    const int64_t Td = sp.decode_tokens, H = index_heads_, D = index_dim_, B = sp.num_decodes;
    const int next_n = sp.next_n;
    const int64_t rows = Td / next_n;  // requests, or every query on its own when flattened
    const auto opt = qbytes.options();
    int64_t max_len = 1;
    std::vector<int32_t> lens_h;
    std::vector<int64_t> req_of_row;
    for (int r = 0; r < B; ++r) {
      const int64_t L = batch.context_lens[r] + batch.query_lens[r];
      max_len = std::max(max_len, L);
      for (int j = 0; j < batch.query_lens[r]; ++j) {
        lens_h.push_back(static_cast<int32_t>(batch.context_lens[r] + j + 1));
        req_of_row.push_back(r);
      }
    }
    const bool meta = ctx_.device.is_meta();
    const at::Tensor lens = upload(lens_h, at::kInt, ctx_.device).view({rows, next_n});
    at::Tensor table = batch.block_table.narrow(0, 0, B);
    if (rows != B) {  // flattened: each query row takes its request's block-table row
      table = meta ? at::empty({rows, table.size(1)}, table.options())
                   : table.index({upload(req_of_row, at::kLong, ctx_.device)});
    }
    at::Tensor sched = at::empty({target_.num_sms + 1, 2}, opt.dtype(at::kInt));
    dg::get_paged_mqa_logits_metadata(*ctx_.jit, target_, lens, block_, sched);
    const int64_t stride = (max_len + 255) / 256 * 256;
    at::Tensor logits = at::empty({Td, stride}, opt.dtype(at::kFloat));
    dg::fp8_paged_mqa_logits(*ctx_.jit, target_, qbytes.view({rows, next_n, H, D}), index_cache_, weights, lens,
                             table, sched, logits);
    if (meta) return at::Tensor();
    const at::Tensor pos = at::arange(stride, opt.dtype(at::kLong)).unsqueeze(0);
    logits = logits.masked_fill(pos >= lens.reshape({Td, 1}).to(at::kLong), -INFINITY);
    return top_keys(logits, stride);
  }

  /// The ragged path over the rows after the decodes (qbytes [Np, H, D], weights [Np, H]): each
  /// request's index keys gathered into the workspace, then fp8_mqa_logits. Returns [Np,
  /// <= index_topk] key positions within each row's request.
  at::Tensor prefill_keys(const at::Tensor& qbytes, const at::Tensor& weights, const ForwardBatch& batch,
                          const DecodeSplit& sp) {
    const int64_t N = qbytes.size(0), B = batch.num_reqs, first = sp.decode_tokens;
    const auto opt = qbytes.options();
    const bool meta = ctx_.device.is_meta();
    std::vector<int32_t> ks(N), ke(N);
    int64_t total = 0;
    for (int r = sp.num_decodes; r < B; ++r) {
      const int64_t S = batch.context_lens[r] + batch.query_lens[r];
      for (int t = 0; t < batch.query_lens[r]; ++t) {
        const int64_t row = batch.query_start[r] + t - first;
        ks[row] = static_cast<int32_t>(total);
        ke[row] = static_cast<int32_t>(total + batch.context_lens[r] + t + 1);
      }
      total += S;
    }
    for (int64_t row = 0; row < N; ++row) {
      if (ke[row] == 0) ke[row] = ks[row];  // padding rows see nothing
    }
    auto [kv_vals, kv_sf] = index_gather(std::max<int64_t>(total, 1));
    if (!meta) {
      for (int r = sp.num_decodes, base = 0; r < B; ++r) {
        const int64_t S = batch.context_lens[r] + batch.query_lens[r];
        const at::Tensor p = at::arange(S, opt.dtype(at::kLong));
        const at::Tensor b = batch.block_table[r].to(at::kLong).index({p.floor_divide(block_)});
        const at::Tensor o = p - p.floor_divide(block_) * block_;
        kv_vals.narrow(0, base, S).copy_(index_values_.index({b, o}));
        kv_sf.narrow(0, base, S).copy_(index_scales_.index({b, o}));
        base += static_cast<int>(S);
      }
    }
    const at::Tensor ks_t = upload(ks, at::kInt, ctx_.device), ke_t = upload(ke, at::kInt, ctx_.device);
    at::Tensor logits = at::empty({N, std::max<int64_t>(total, 1)}, opt.dtype(at::kFloat));
    // clean_logits False, as vLLM's sparse_attn_indexer and TokenSpeed call it: the columns
    // outside each row's range are masked before the top-k (here with torch operations).
    dg::fp8_mqa_logits(*ctx_.jit, target_, qbytes, kv_vals, kv_sf, weights, ks_t, ke_t, logits, /*clean_logits=*/false);
    if (meta) return at::Tensor();
    const at::Tensor col = at::arange(std::max<int64_t>(total, 1), opt.dtype(at::kInt)).unsqueeze(0);
    logits = logits.masked_fill((col < ks_t.unsqueeze(1)) | (col >= ke_t.unsqueeze(1)), -INFINITY);
    at::Tensor idx = top_keys(logits, total);
    // Concatenated numbering -> position within the request.
    const at::Tensor start = ks_t.to(at::kLong).unsqueeze(1);
    return at::where(idx >= 0, idx - start, idx);
  }

  /// Rows of the indexer's prefill K-gather at their largest: vLLM's get_max_prefill_buffer_size,
  /// 40 * max_model_len (vllm/model_executor/layers/sparse_attn_indexer.py, read in the vLLM fork
  /// 1CatAI/1Cat-vLLM ae13773a; vLLM splits a prefill whose gather would exceed it into chunks,
  /// which the replay does not: a batch past it grows the workspace).
  int64_t max_prefill_gather_rows() const { return 40 * static_cast<int64_t>(ctx_.engine->max_model_len); }

  /// The prefill K-gather of `rows` index keys from the workspace manager, as vLLM's indexer takes
  /// it (current_workspace_manager().get_simultaneous): FP8 values [rows, index_head_dim] and one
  /// float32 scale per row (vLLM: [rows, 4] uint8). Throws the workspace-lock error when it must
  /// grow after capture.
  std::pair<at::Tensor, at::Tensor> index_gather(int64_t rows) {
    auto ws = ctx_.workspace->get_simultaneous({{{rows, index_dim_}, at::kByte}, {{rows}, at::kFloat}},
                                               CS_HERE);
    return {ws.at(0), ws.at(1)};
  }

  /// The top-k columns of each row; -1 where fewer than k are finite.
  at::Tensor top_keys(const at::Tensor& logits, int64_t cols) const {
    const int64_t k = std::min<int64_t>(topk_, cols);
    auto [vals, idx] = at::topk(logits.narrow(1, 0, cols), k, 1);
    return at::where(at::isfinite(vals), idx, at::full_like(idx, -1));
  }

  /// Masked attention per request over the cached latent keys (values = keys, MQA).
  void attend(const at::Tensor& q, const at::Tensor& selected, at::Tensor& out, const ForwardBatch& batch) const {
    const double scale = 1.0 / std::sqrt(static_cast<double>(spec_.head_dim));
    const auto opt = q.options();
    for (int r = 0; r < batch.num_reqs; ++r) {
      const int64_t ctx = batch.context_lens[r], ql = batch.query_lens[r], S = ctx + ql, q0 = batch.query_start[r];
      const at::Tensor p = at::arange(S, opt.dtype(at::kLong));
      const at::Tensor b = batch.block_table[r].to(at::kLong).index({p.floor_divide(block_)});
      const at::Tensor keys = latent_.index({b, p - p.floor_divide(block_) * block_}).to(at::kFloat);  // [S, D]
      for (int64_t c0 = 0; c0 < ql; c0 += 256) {
        const int64_t c = std::min<int64_t>(256, ql - c0);
        const at::Tensor qpos = at::arange(ctx + c0, ctx + c0 + c, opt.dtype(at::kLong)).unsqueeze(1);  // [c, 1]
        const at::Tensor kpos = p.unsqueeze(0);                                                         // [1, S]
        at::Tensor see = (kpos <= qpos) & (qpos - kpos < window_);
        if (ratio_ == 128) see = see | ((kpos <= qpos) & (kpos % 128 == 127));
        if (ratio_ == 4 && selected.defined()) {
          const at::Tensor sel = selected.narrow(0, q0 + c0, c);
          at::Tensor hit = at::zeros({c, S + 1}, opt.dtype(at::kBool));
          hit.scatter_(1, at::where(sel >= 0, sel, at::full_like(sel, S)), true);
          see = see | (hit.narrow(1, 0, S) & (kpos <= qpos));
        }
        const at::Tensor qs = q.narrow(0, q0 + c0, c).to(at::kFloat);              // [c, H, D]
        at::Tensor scores = at::einsum("chd,sd->chs", {qs, keys}) * scale;        // [c, H, S]
        scores = scores.masked_fill(see.logical_not().unsqueeze(1), -INFINITY);
        const at::Tensor o = at::einsum("chs,sd->chd", {at::softmax(scores, -1), keys});
        out.narrow(0, q0 + c0, c).copy_(o.reshape({c, -1}).to(at::kBFloat16));
      }
    }
  }

  int ratio_;
  int64_t window_, topk_, index_heads_, index_dim_, bytes_per_token_;
  int64_t block_ = 0, pages_ = 0;
  dg::GemmTarget target_;
  at::Tensor latent_, index_cache_, index_values_, index_scales_;
};

MixerBackendInfo deepseek_v4_attention_backend() {
  MixerBackendInfo b;
  b.kind = "mla_sparse";
  b.name = "deepseek_v4";
  b.kv_cache_dtypes = {"auto"};
  b.description = "DeepSeek V4 attention: latent KV cache, sparse indexer through DeepGEMM's MQA-logits kernels "
                  "(ragged prefill, paged decode + schedule metadata), SWA / C4 / C128 key sets";
  b.make = [](const MixerSpec& s, const MixerContext& c) -> std::unique_ptr<Mixer> {
    return std::make_unique<DeepseekV4Attention>(s, c);
  };
  b.kernels = dg::all_kernels();  // the model's FP8 GEMMs and the indexer kernels
  // Verify rows (1 + k tokens a request) take the indexer's paged path (split_decodes) and the
  // same masked attention as any other row.
  b.verify_steps = true;
  b.check = [](const MixerSpec&, const ModelConfig&, const EngineConfig& e) {
    std::vector<ScenarioProblem> out;
    if (e.cudagraph_mode == CudaGraphMode::kFull || e.cudagraph_mode == CudaGraphMode::kFullDecodeOnly ||
        e.cudagraph_mode == CudaGraphMode::kFullAndPiecewise) {
      out.push_back({"engine.cudagraph_mode",
                     "V4's attention runs eagerly between piecewise graphs (vLLM's deepseek_v4_attention splitting "
                     "op, TokenSpeed's attention break point); the replay has no full-graph path for it: use "
                     "piecewise or none"});
    }
    return out;
  };
  return b;
}

}  // namespace

CS_REGISTER_MIXER_BACKEND(deepseek_v4_attention_backend());

}  // namespace coldstart
