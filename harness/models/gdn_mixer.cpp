// Gated-delta-net (GDN) mixer: the core of Qwen3-Next's linear-attention layers, as vLLM runs it
// with the Triton/FLA prefill backend (vllm/model_executor/layers/mamba/gdn/
// qwen_gdn_linear_attn.py, QwenGatedDeltaNetAttention._forward_core, vllm-project/vllm 00545a8a;
// the replay takes gdn_prefill_backend "triton": on SM90 vLLM's default would be FlashInfer's own
// JIT-compiled prefill kernel, which is not replayed).
//
// Per step (non-speculative):
// - any prefill in the batch: causal_conv1d_fwd over every token (decodes included), with
//   has_initial_state = context > 0 and the requests' conv-state pages;
//   decode-only: causal_conv1d_update;
// - decodes (the leading requests of one token) go through fused_sigmoid_gating_delta_rule_update
//   on contiguous q / k / v copies; when prefills share the batch, the decode rows are split off
//   first (vLLM's split_non_spec);
// - prefills: fused_post_conv_prep on the prefill rows (a slice after the decodes), the initial
//   states gathered from the SSM-state pages (gather_initial_states, zero where there is no
//   context), chunk_gated_delta_rule (chunk 64), and the final states scattered back
//   (scatter_states). The index / mask slices start at num_decodes, so in mixed batches their
//   pointers are not 16-byte aligned: the gather / scatter kernels specialize on that.
// Verify steps (speculative decoding, spec_decode.engine_keys.h; the same file at 00545a8a):
// the leading num_spec_reqs requests carry drafts; their rows (the whole batch when nothing
// else runs, else an index_select copy) go through causal_conv1d_update with query_start_loc and
// num_accepted_tokens (varlen, IS_SPEC_DECODING) on the conv state of their first state page,
// then fused_sigmoid_gating_delta_rule_update with the [B, 1 + k] state pages and
// num_accepted_tokens; the other rows take the non-speculative path below, and the outputs are
// merged. Without drafts in the metadata (vLLM's build() in a FULL capture's eager warmups)
// rows of 1 + k tokens are prefills. The conv state has conv_kernel - 1 + k rows.
// - without attention metadata (profile run, capture warmups): the first call runs vLLM's
//   _warmup_prefill_kernels: fused_post_conv_prep + chunk_gated_delta_rule at T = 64 on random
//   inputs, which compiles (and on a GPU autotunes) the chunk chain before the KV cache exists.
// The layer's own parameters (conv1d weight, A_log, dt_bias) live here; projections, the gated
// RMSNorm and out_proj are the model's.
//
// State page of a request (vLLM MambaSpec: conv state then SSM state; vLLM's default "SD" conv
// layout, mamba_utils.get_conv_state_layout):
//   conv state [conv_kernel - 1, conv_dim] bf16, then SSM state [Hv, V, K] in the SSM dtype.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>

#include "harness/models/recurrent_state.engine_keys.h"
#include "harness/models/spec_decode.engine_keys.h"
#include "harness/kernels/gdn_chunk/gdn_chunk.h"
#include "harness/kernels/gdn_decode/gdn_decode.h"
#include "harness/kernels/mamba_ops/mamba_ops.h"
#include "harness/models/mixer.h"
#include "harness/runtime/host_upload.h"

namespace coldstart {
namespace {

/// vLLM's FLA chunk size (FLA_CHUNK_SIZE), the length of the profile-run prefill warmup.
constexpr int64_t kChunk = 64;

at::ScalarType ssm_dtype(const EngineConfig& e) {
  return mamba_ssm_cache_dtype(e) == "float32" ? at::kFloat : at::kBFloat16;
}

class GdnMixer final : public Mixer {
 public:
  GdnMixer(const MixerSpec& spec, const MixerContext& ctx)
      : Mixer(spec, ctx),
        hk_(spec.num_kv_heads),
        hv_(spec.num_heads),
        dk_(spec.params.value("head_k_dim", int64_t{128})),
        dv_(spec.head_dim),
        width_(spec.params.value("conv_kernel", int64_t{4})),
        conv_rows_(width_ - 1 + num_speculative_tokens(*ctx.engine)),
        state_dtype_(ssm_dtype(*ctx.engine)) {
    conv_dim_ = 2 * hk_ * dk_ + hv_ * dv_;
    // The layer's parameters: random (seeded by layer) on a GPU, shapes only on meta.
    const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(ctx.device);
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(ctx.device);
    conv_weight_ = at::empty({conv_dim_, width_}, bf16);
    a_log_ = at::empty({hv_}, f32);
    dt_bias_ = at::empty({hv_}, bf16);  // vLLM creates dt_bias in the model dtype
    if (ctx.mode == DeviceMode::kCuda) {
      at::Generator gen = at::detail::createCPUGenerator(1000 + spec.layer);
      conv_weight_.copy_(at::randn({conv_dim_, width_}, gen, at::kFloat).mul_(0.5));
      a_log_.copy_(at::rand({hv_}, gen, at::kFloat).mul_(2.0).sub_(1.0));
      dt_bias_.copy_(at::rand({hv_}, gen, at::kFloat).mul_(0.5));
    }
  }

  std::string backend() const override { return "gdn_triton"; }

  int64_t conv_state_bytes() const { return conv_dim_ * conv_rows_ * 2; }
  int64_t ssm_state_bytes() const {
    return hv_ * dv_ * dk_ * static_cast<int64_t>(c10::elementSize(state_dtype_));
  }

  CacheSpec cache_spec() const override {
    CacheSpec c;
    c.kind = CacheSpec::Kind::kState;
    c.bytes_per_request = conv_state_bytes() + ssm_state_bytes();
    c.group = fmt::format("gdn/conv={}x{}/ssm={}x{}x{}/{}", conv_dim_, conv_rows_, hv_, dv_, dk_,
                          c10::toString(state_dtype_));
    return c;
  }

  void bind_cache(const CacheBinding& c) override {
    CS_CHECK(c.page_bytes >= conv_state_bytes() + ssm_state_bytes(),
             "GDN state page smaller than one request's state");
    const int64_t conv_page = c.page_bytes / 2;
    conv_state_ = c.bytes.view(at::kBFloat16)
                      .as_strided({c.num_pages, conv_rows_, conv_dim_}, {conv_page, conv_dim_, 1});
    const int64_t es = static_cast<int64_t>(c10::elementSize(state_dtype_));
    CS_CHECK(c.page_bytes % es == 0 && conv_state_bytes() % es == 0,
             "GDN state page not aligned to the SSM dtype");
    ssm_state_ = c.bytes.view(state_dtype_)
                     .as_strided({c.num_pages, hv_, dv_, dk_},
                                 {c.page_bytes / es, dv_ * dk_, dk_, 1}, conv_state_bytes() / es);
  }

  void forward_no_metadata(const std::vector<at::Tensor>& in, at::Tensor& out,
                           const ForwardBatch& batch) override {
    (void)in;
    (void)out;
    (void)batch;
    if (prefill_warmed_up_) return;
    prefill_warmed_up_ = true;
    // vLLM _warmup_prefill_kernels: T = 64 random tokens of one sequence, zero initial state.
    const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(ctx_.device);
    at::Tensor mixed = at::empty({kChunk, conv_dim_}, bf16);
    at::Tensor a = at::empty({kChunk, hv_}, bf16), b = at::empty({kChunk, hv_}, bf16);
    if (ctx_.mode == DeviceMode::kCuda) {
      mixed.normal_();
      a.normal_();
      b.normal_();
    }
    const gdn_chunk::PostConvOut pc = post_conv(mixed, a, b);
    at::Tensor state = zeros_f32({1, hv_, dv_, dk_});
    at::Tensor o = at::empty({kChunk, hv_, dv_}, bf16);
    at::Tensor final_state = at::empty({1, hv_, dv_, dk_}, state.options());
    const at::Tensor cu_seqlens =
        upload(std::vector<int32_t>{0, static_cast<int32_t>(kChunk)}, at::kInt, ctx_.device);
    chunk(pc, cu_seqlens, {static_cast<int>(kChunk)}, state, o, final_state);
  }

  std::vector<ScratchDecl> declared_scratch() const override {
    // FLA's chunk_gated_delta_rule_fwd allocates its intermediates per call
    // (vllm/model_executor/layers/fla/ops/chunk.py at 044990c1, one sequence of T tokens, NT =
    // ceil(T / 64) chunks, bf16 activations): g fp32 [T, H]; A fp32 [T, H, 64] and its bf16
    // solve_tril copy; w [T, H, K]; u, v_new, o [T, H, V]; h [NT, H, V, K]; the final state fp32
    // [H, V, K]. The profile run calls the layer without metadata: only the T = 64 warmup (vLLM
    // PR #36599) runs, and no vLLM release reserves the rest (issue #54775 is open, PR #55149
    // was closed unmerged).
    const int64_t T = ctx_.engine->max_num_batched_tokens, NT = (T + kChunk - 1) / kChunk;
    const int64_t H = hv_, K = dk_, V = dv_;
    ScratchDecl d;
    d.name = "chunk_gated_delta_rule intermediates";
    d.bytes = T * H * 4 + T * H * kChunk * (4 + 2) + T * H * K * 2 + 3 * T * H * V * 2 +
              NT * H * V * K * 2 + H * V * K * 4;
    d.size_rule = "per prefill call of T tokens: g, A (fp32 and bf16), w, u, v_new, o, the chunk "
                  "states h [ceil(T / 64), H, V, K] and the final state; shown at T = "
                  "max_num_batched_tokens in one sequence";
    d.config_key = "max_num_batched_tokens";
    d.kind = "per call";
    d.seen_by_profile_run = false;
    d.source = "vllm/model_executor/layers/fla/ops/chunk.py (044990c1); vLLM issue #54775";
    return {d};
  }

  void forward(const std::vector<at::Tensor>& in, at::Tensor& out,
               const ForwardBatch& batch) override {
    if (batch.num_spec_reqs > 0) {
      forward_verify(in, out, batch);
      return;
    }
    forward_rows(in.at(0), in.at(2), in.at(1), out, batch);
  }

  /// The non-speculative path over `batch`: mixed_qkv [>= T, conv_dim], a / b [>= T, Hv]; writes
  /// rows 0..T-1 of out.
  void forward_rows(const at::Tensor& mixed_qkv, const at::Tensor& a, const at::Tensor& b,
                    at::Tensor& out, const ForwardBatch& batch) {
    const int B = batch.num_reqs;
    // Decodes lead the batch (vLLM's input batch is reordered that way for GDN, whose metadata
    // builder sets reorder_batch_threshold = 1); the scheduler's order already is.
    // A decode is a request of one new token (vLLM split_decodes_and_prefills with
    // decode_threshold 1, whatever its context: the FULL-capture dummy batch is all decodes).
    int D = 0;
    while (D < B && batch.query_lens[D] == 1) ++D;
    for (int r = D; r < B; ++r) {
      if (batch.query_lens[r] == 1) {
        throw Error("gdn mixer: the batch is not decode-first (harness fault)");
      }
    }
    const int64_t T = batch.query_start.empty()
                          ? 0
                          : static_cast<int64_t>(batch.query_start[B - 1] + batch.query_lens[B - 1]);
    at::Tensor o = out.narrow(0, 0, T).view({T, hv_, dv_});
    const at::Tensor x = mixed_qkv.narrow(0, 0, T);
    const at::Tensor slots = batch.state_slots.narrow(0, 0, B);

    if (D == B) {  // decode only (also the FULL decode graph's path)
      at::Tensor conv_out = at::empty({T, conv_dim_}, x.options());
      mamba_ops::causal_conv1d_update(*ctx_.jit, x, conv_state_, conv_weight_, at::Tensor(),
                                      mamba_ops::Activation::kSilu, slots, conv_out);
      decode(conv_out, a.narrow(0, 0, T), b.narrow(0, 0, T), slots,
             batch.query_start_loc.narrow(0, 0, B + 1), at::Tensor(), o);
      return;
    }

    // Prefill (maybe with leading decodes): conv1d over the whole batch.
    std::vector<uint8_t> has_init(B);
    for (int r = 0; r < B; ++r) has_init[r] = batch.context_lens[r] > 0 ? 1 : 0;
    // Host metadata (prefill steps only: never inside a captured graph).
    const at::Tensor has_initial_state = upload(has_init, at::kBool, ctx_.device);
    at::Tensor conv_out = at::empty({T, conv_dim_}, x.options());
    mamba_ops::causal_conv1d_fwd(*ctx_.jit, x, conv_weight_, at::Tensor(), conv_state_,
                                 batch.query_start_loc.narrow(0, 0, B + 1), slots,
                                 has_initial_state, mamba_ops::Activation::kSilu, conv_out);
    if (D > 0) {
      decode(conv_out.narrow(0, 0, D), a.narrow(0, 0, D), b.narrow(0, 0, D), slots,
             batch.query_start_loc.narrow(0, 0, D + 1), at::Tensor(), o.narrow(0, 0, D));
    }
    const int64_t TP = T - D;  // prefill tokens, after the decode rows
    const gdn_chunk::PostConvOut pc =
        post_conv(conv_out.narrow(0, D, TP), a.narrow(0, D, TP), b.narrow(0, D, TP));
    std::vector<int32_t> cu = {0};
    std::vector<int> lens;
    for (int r = D; r < B; ++r) {
      cu.push_back(cu.back() + batch.query_lens[r]);
      lens.push_back(batch.query_lens[r]);
    }
    const int64_t P = B - D;
    // The slices at num_decodes: unaligned pointers in mixed batches, as in vLLM.
    const at::Tensor prefill_slots = slots.narrow(0, D, P);
    const at::Tensor prefill_has_init = has_initial_state.narrow(0, D, P);
    at::Tensor gathered = at::empty({P, hv_, dv_, dk_}, ssm_state_.options());
    mamba_ops::gather_initial_states(*ctx_.jit, ssm_state_, prefill_slots, prefill_has_init,
                                     gathered);
    const at::Tensor initial = gathered.to(at::kFloat);
    at::Tensor final_state = at::empty({P, hv_, dv_, dk_}, initial.options());
    chunk(pc, upload(cu, at::kInt, ctx_.device), lens, initial, o.narrow(0, D, TP), final_state);
    mamba_ops::scatter_states(*ctx_.jit, ssm_state_, final_state, prefill_slots);
  }

  std::vector<at::Tensor> cache_views() const override {
    if (!conv_state_.defined()) return {};
    return {conv_state_, ssm_state_};
  }
  std::vector<at::Tensor> parameters() const override { return {conv_weight_, a_log_, dt_bias_}; }

  std::string compile_config() const override {
    return fmt::format("gdn Hk={} Hv={} K={} V={} width={} ssm={} page={}", hk_, hv_, dk_, dv_,
                       width_, c10::toString(state_dtype_),
                       ssm_state_.defined() ? ssm_state_.stride(0) : 0);
  }

 private:
  /// The query scale of both kernels, K^-0.5 (vLLM: head_k_dim ** -0.5).
  float scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk_))); }

  gdn_chunk::GdnDims chunk_dims() const {
    return {static_cast<int>(hk_), static_cast<int>(hv_), static_cast<int>(dk_),
            static_cast<int>(dv_)};
  }

  gdn_chunk::PostConvOut post_conv(const at::Tensor& conv_out, const at::Tensor& a,
                                   const at::Tensor& b) const {
    const int64_t T = conv_out.size(0);
    const auto bf16 = conv_out.options();
    const auto f32 = bf16.dtype(at::kFloat);
    gdn_chunk::PostConvOut pc;
    pc.q = at::empty({T, hk_, dk_}, bf16);
    pc.k = at::empty({T, hk_, dk_}, bf16);
    pc.v = at::empty({T, hv_, dv_}, bf16);
    pc.g = at::empty({T, hv_}, f32);
    pc.beta = at::empty({T, hv_}, f32);
    gdn_chunk::fused_post_conv(*ctx_.jit, chunk_dims(), conv_out, a, b, a_log_, dt_bias_, pc);
    return pc;
  }

  void chunk(const gdn_chunk::PostConvOut& pc, const at::Tensor& cu_seqlens,
             const std::vector<int>& lens, const at::Tensor& initial, const at::Tensor& o,
             const at::Tensor& final_state) const {
    const int64_t T = pc.q.size(0);
    // FLA's intermediates come from torch's caching allocator, not the locked workspace (vLLM
    // sizes them into the KV budget instead: mamba/gdn/chunk_workspace.py).
    at::Tensor scratch =
        at::empty({gdn_chunk::chunk_scratch_bytes(chunk_dims(), T, lens)},
                  at::TensorOptions().dtype(at::kByte).device(ctx_.device));
    gdn_chunk::chunk_gated_delta_rule(*ctx_.jit, chunk_dims(), pc.q, pc.k, pc.v, pc.g, pc.beta,
                                      scale(), cu_seqlens, lens, initial, o, final_state,
                                      scratch);
  }

  // vLLM rearrange_mixed_qkv: contiguous q [T, Hk, K], k, v [T, Hv, V] copies, then the fused
  // decode update over the requests' SSM-state pages.
  // `num_accepted` defined: the verify rows' spec state pages ([N, 1 + k] slots).
  void decode(const at::Tensor& conv_out, const at::Tensor& a, const at::Tensor& b,
              const at::Tensor& slots, const at::Tensor& cu_seqlens,
              const at::Tensor& num_accepted, const at::Tensor& o) const {
    const int64_t T = conv_out.size(0);
    const at::Tensor q = conv_out.narrow(1, 0, hk_ * dk_).contiguous().view({T, hk_, dk_});
    const at::Tensor k = conv_out.narrow(1, hk_ * dk_, hk_ * dk_).contiguous().view({T, hk_, dk_});
    const at::Tensor v = conv_out.narrow(1, 2 * hk_ * dk_, hv_ * dv_).contiguous().view({T, hv_, dv_});
    const gdn_decode::GdnDims dd{static_cast<int>(hk_), static_cast<int>(hv_),
                                 static_cast<int>(dk_), static_cast<int>(dv_)};
    gdn_decode::fused_sigmoid_gating_delta_rule_update(*ctx_.jit, dd, a_log_, a, b, dt_bias_, q, k,
                                                       v, ssm_state_, slots, cu_seqlens,
                                                       num_accepted, o, scale(), true);
  }

  at::Tensor zeros_f32(std::vector<int64_t> shape) const {
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(ctx_.device);
    return ctx_.mode == DeviceMode::kCuda ? at::zeros(shape, f32) : at::empty(shape, f32);
  }

  /// Verify step: the spec rows (the leading num_spec_reqs requests) through the conv update
  /// with num_accepted_tokens and the spec state pages, the rest as forward_rows; outputs merged
  /// in batch order.
  void forward_verify(const std::vector<at::Tensor>& in, at::Tensor& out,
                      const ForwardBatch& batch) {
    const at::Tensor& mixed_qkv = in.at(0);
    const at::Tensor& b = in.at(1);
    const at::Tensor& a = in.at(2);
    const int B = batch.num_reqs, S = batch.num_spec_reqs;
    const int64_t T = batch.query_start[B - 1] + batch.query_lens[B - 1];
    const int64_t TS = S == B ? T : batch.query_start[S];  // spec rows lead the batch
    at::Tensor x_spec, spec_qsl;
    if (S == B) {
      x_spec = mixed_qkv.narrow(0, 0, T);
      spec_qsl = batch.query_start_loc.narrow(0, 0, B + 1);
    } else {
      // vLLM: index_select copies by spec_token_indx / non_spec_token_indx (the spec rows lead,
      // so the copies are of row ranges: fresh, contiguous tensors), and its own cumsum of the
      // spec requests' query lengths.
      x_spec = mixed_qkv.narrow(0, 0, TS).clone(at::MemoryFormat::Contiguous);
      std::vector<int32_t> cu = {0};
      for (int r = 0; r < S; ++r) cu.push_back(cu.back() + batch.query_lens[r]);
      spec_qsl = upload(cu, at::kInt, ctx_.device);
    }
    const at::Tensor spec_pages = batch.spec_state_slots.narrow(0, 0, S);
    const at::Tensor accepted = batch.num_accepted_tokens.narrow(0, 0, S);
    at::Tensor conv_out = at::empty_like(x_spec);
    mamba_ops::causal_conv1d_update_varlen_spec(
        *ctx_.jit, x_spec, conv_state_, conv_weight_, at::Tensor(), mamba_ops::Activation::kSilu,
        batch.spec_state_slots.select(1, 0).narrow(0, 0, S), accepted, spec_qsl,
        batch.spec_query_len, conv_out);
    at::Tensor o = out.narrow(0, 0, T).view({T, hv_, dv_});
    decode(conv_out, a.narrow(0, 0, TS), b.narrow(0, 0, TS), spec_pages, spec_qsl, accepted,
           o.narrow(0, 0, TS));
    if (S == B) return;
    // The other rows: a batch of their own (rebased query starts, fresh index tensors).
    ForwardBatch rest;
    rest.num_reqs = B - S;
    rest.num_tokens = static_cast<int>(T - TS);
    std::vector<int32_t> starts;
    for (int r = S; r < B; ++r) {
      rest.query_lens.push_back(batch.query_lens[r]);
      rest.context_lens.push_back(batch.context_lens[r]);
      rest.query_start.push_back(batch.query_start[r] - static_cast<int>(TS));
      starts.push_back(rest.query_start.back());
    }
    starts.push_back(rest.num_tokens);
    rest.query_start_loc = upload(starts, at::kInt, ctx_.device);
    rest.state_slots = batch.state_slots.narrow(0, S, B - S).clone();
    auto rows_copy = [&](const at::Tensor& t) {
      return t.narrow(0, TS, T - TS).clone(at::MemoryFormat::Contiguous);
    };
    at::Tensor rest_out = at::empty({T - TS, hv_ * dv_}, out.options());
    forward_rows(rows_copy(mixed_qkv), rows_copy(a), rows_copy(b), rest_out, rest);
    out.narrow(0, TS, T - TS).copy_(rest_out);
  }

  int64_t hk_, hv_, dk_, dv_, width_, conv_rows_, conv_dim_ = 0;
  at::ScalarType state_dtype_;
  at::Tensor conv_weight_, a_log_, dt_bias_;
  at::Tensor conv_state_, ssm_state_;
  bool prefill_warmed_up_ = false;
};

MixerBackendInfo gdn_backend() {
  MixerBackendInfo b;
  b.kind = "gdn";
  b.name = "gdn_triton";
  b.description = "gated delta net (Qwen3-Next) with vLLM's Triton/FLA kernels: causal conv1d, "
                  "chunked prefill chain (chunk 64), fused decode update, state gather/scatter";
  b.verify_steps = true;
  b.make = [](const MixerSpec& s, const MixerContext& c) -> std::unique_ptr<Mixer> {
    return std::make_unique<GdnMixer>(s, c);
  };
  for (auto* k : gdn_chunk::all_kernels()) b.kernels.push_back(k);
  for (auto* k : gdn_decode::all_kernels()) b.kernels.push_back(k);
  for (auto* k : mamba_ops::all_kernels()) b.kernels.push_back(k);
  b.check = [](const MixerSpec& s, const ModelConfig&, const EngineConfig&) {
    std::vector<ScenarioProblem> out;
    const int64_t dk = s.params.value("head_k_dim", int64_t{0});
    const int64_t width = s.params.value("conv_kernel", int64_t{0});
    if (dk != 64 && dk != 128) {
      out.push_back({"model.linear_key_head_dim",
                     fmt::format("the GDN kernels take key head dims of 64 or 128, got {}", dk)});
    }
    if (s.head_dim != 64 && s.head_dim != 128) {
      out.push_back({"model.linear_value_head_dim",
                     fmt::format("the GDN kernels take value head dims of 64 or 128, got {}",
                                 s.head_dim)});
    }
    if (width < 2 || width > 4) {
      out.push_back({"model.linear_conv_kernel_dim",
                     fmt::format("the causal conv1d kernels (mamba_ops) take widths 2..4, "
                                 "got {}",
                                 width)});
    }
    return out;
  };
  return b;
}

}  // namespace

CS_REGISTER_MIXER_BACKEND(gdn_backend());

}  // namespace coldstart
