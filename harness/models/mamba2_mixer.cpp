// Mamba2 mixer: the conv + SSM core of a Mamba2 layer (NemotronH's "M" layers) as vLLM runs it,
// MambaMixer2.conv_ssm_forward (vllm/model_executor/layers/mamba/mamba2/mamba_mixer2.py,
// vllm-project/vllm 2e0714af), without prefix caching (mamba_cache_mode "none") and without
// speculative decoding.
//
// Inputs (views of the model's in_proj output, whose columns are [gate | xBC | dt]):
//   xBC [N, conv_dim] and dt [N, H], both with the projection's row stride.
// Output: the SSM output [N, H * P] bf16; the gated RMSNorm and out_proj are the model's.
//
// Per step:
// - decodes (requests of one new token) lead the batch (vLLM's Mamba2 metadata builder reorders
//   with reorder_batch_threshold 1); the prefill rows follow;
// - prefill rows: causal_conv1d_fn over the prefill rows only (query_start_loc_p rebased to 0,
//   state indices and has_initial_state sliced at num_decodes), then
//   mamba_chunk_scan_combined_varlen with the metadata builder's chunk layout (chunks never cross
//   a sequence, a continuing sequence's first chunk ends at its next chunk boundary), D, dt_bias,
//   dt_softplus, dt_limit (0, inf) and initial states only when some prefill has context
//   (prep_initial_states: HAS_INITSTATES is part of the kernels' keys); the final states are
//   written to the requests' SSM-state pages (a torch index_put, no kernel);
// - decode rows: causal_conv1d_update, then selective_state_update with the stride-0 expanded
//   dt / A / dt_bias / D views vLLM builds, its config from vLLM's tuned table by effective batch.
// - no attention metadata (profile run, capture warmups): vLLM only copies xBC (a torch clone):
//   nothing compiles. vLLM PR #39822 runs the SSD chain there; here that is the warmer
//   mamba-ssd-warmup, so `none` shows the engine without it.
// The layer's own parameters (conv1d weight and bias, A, D, dt_bias) live here.
//
// State page of a request (vLLM MambaStateShapeCalculator.mamba2_state_shape, "SD" conv layout):
//   conv state [conv_kernel - 1, conv_dim] bf16, then the SSM state [H, P, N] in the SSM dtype.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <limits>
#include <map>

#include "harness/jit/tuned_tables.engine_keys.h"
#include "harness/common/paths.h"
#include "harness/kernels/mamba_ops/mamba_ops.h"
#include "harness/kernels/mamba_ssd/mamba_ssd.h"
#include "harness/kernels/mamba_ssu/mamba_ssu.h"
#include "harness/models/mamba2_layer.h"
#include "harness/models/mixer.h"
#include "harness/runtime/host_upload.h"

namespace coldstart {
namespace {

class Mamba2Mixer final : public Mixer {
 public:
  Mamba2Mixer(const MixerSpec& spec, const MixerContext& ctx)
      : Mixer(spec, ctx), d_(Mamba2Dims::from_spec(spec)) {
    const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(ctx.device);
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(ctx.device);
    conv_weight_ = at::empty({d_.conv_dim(), d_.conv_kernel}, bf16);
    if (d_.conv_bias) conv_bias_ = at::empty({d_.conv_dim()}, bf16);
    a_ = at::empty({d_.heads}, f32);       // A = -exp(A_log), float32 in vLLM
    d_skip_ = at::empty({d_.heads}, bf16);  // D and dt_bias in the model dtype
    dt_bias_ = at::empty({d_.heads}, bf16);
    if (ctx.mode == DeviceMode::kCuda) {
      at::Generator gen = at::detail::createCPUGenerator(2000 + spec.layer);
      conv_weight_.copy_(at::randn({d_.conv_dim(), d_.conv_kernel}, gen, at::kFloat).mul_(0.5));
      if (conv_bias_.defined()) conv_bias_.copy_(at::randn({d_.conv_dim()}, gen, at::kFloat).mul_(0.1));
      a_.copy_(at::rand({d_.heads}, gen, at::kFloat).add_(0.5).neg_());
      d_skip_.copy_(at::rand({d_.heads}, gen, at::kFloat));
      dt_bias_.copy_(at::rand({d_.heads}, gen, at::kFloat).mul_(0.5).sub_(2.0));
    }
    ssu_src_.device_name = ctx.target ? ctx.target->device_name : std::string();
    // vLLM looks for selective_state_update tables in VLLM_TUNED_CONFIG_FOLDER first, then in its
    // packaged folder; tuned_config_dir stands for both.
    if (ctx.engine && !tuned_config_dir(*ctx.engine).empty())
      ssu_src_.table_dir = paths::join(tuned_config_dir(*ctx.engine), "selective_state_update");
  }

  std::string backend() const override { return "mamba2_triton"; }

  CacheSpec cache_spec() const override {
    CacheSpec c;
    c.kind = CacheSpec::Kind::kState;
    c.bytes_per_request = d_.conv_state_bytes() + d_.ssm_state_bytes();
    c.group = fmt::format("mamba2/conv={}x{}/ssm={}x{}x{}/{}", d_.conv_dim(), d_.conv_kernel - 1,
                          d_.heads, d_.head_dim, d_.state, c10::toString(d_.ssm_dtype));
    return c;
  }

  void bind_cache(const CacheBinding& c) override {
    CS_CHECK(c.page_bytes >= d_.conv_state_bytes() + d_.ssm_state_bytes(),
             "Mamba2 state page smaller than one request's state");
    const int64_t cd = d_.conv_dim();
    conv_state_ = c.bytes.view(at::kBFloat16)
                      .as_strided({c.num_pages, d_.conv_kernel - 1, cd}, {c.page_bytes / 2, cd, 1});
    const int64_t es = static_cast<int64_t>(c10::elementSize(d_.ssm_dtype));
    CS_CHECK(c.page_bytes % es == 0 && d_.conv_state_bytes() % es == 0,
             "Mamba2 state page not aligned to the SSM dtype");
    ssm_state_ = c.bytes.view(d_.ssm_dtype)
                     .as_strided({c.num_pages, d_.heads, d_.head_dim, d_.state},
                                 {c.page_bytes / es, d_.head_dim * d_.state, d_.state, 1},
                                 d_.conv_state_bytes() / es);
  }

  void forward(const std::vector<at::Tensor>& in, at::Tensor& out,
               const ForwardBatch& batch) override {
    const at::Tensor& xbc = in.at(0);  // [N, conv_dim]
    const at::Tensor& dt = in.at(1);   // [N, H]
    const int B = batch.num_reqs;
    int D = 0;
    while (D < B && batch.query_lens[D] == 1) ++D;
    for (int r = D; r < B; ++r) {
      if (batch.query_lens[r] == 1) throw Error("mamba2 mixer: the batch is not decode-first (harness fault)");
    }
    const int64_t T = B == 0 ? 0 : static_cast<int64_t>(batch.query_start[B - 1] + batch.query_lens[B - 1]);
    const at::Tensor slots = batch.state_slots.narrow(0, 0, B);
    at::Tensor o = out.narrow(0, 0, T);
    const int64_t TD = D == 0 ? 0 : batch.query_start[D - 1] + 1;  // decode tokens
    if (D < B) prefill(xbc.narrow(0, TD, T - TD), dt.narrow(0, TD, T - TD), batch, D, slots,
                       o.narrow(0, TD, T - TD));
    if (D > 0) decode(xbc.narrow(0, 0, TD), dt.narrow(0, 0, TD), slots.narrow(0, 0, D), o.narrow(0, 0, TD));
  }

  std::vector<at::Tensor> cache_views() const override {
    if (!conv_state_.defined()) return {};
    return {conv_state_, ssm_state_};
  }
  /// {conv1d weight [conv_dim, width] bf16, conv1d bias [conv_dim] bf16 (undefined without
  /// use_conv_bias), A [H] f32, D [H] bf16, dt_bias [H] bf16}.
  std::vector<at::Tensor> parameters() const override {
    return {conv_weight_, conv_bias_, a_, d_skip_, dt_bias_};
  }

  std::string compile_config() const override {
    return fmt::format("mamba2 H={} P={} G={} N={} width={} chunk={} ssm={} page={}", d_.heads,
                       d_.head_dim, d_.groups, d_.state, d_.conv_kernel, d_.chunk_size,
                       c10::toString(d_.ssm_dtype), ssm_state_.defined() ? ssm_state_.stride(0) : 0);
  }

 private:
  void prefill(const at::Tensor& xbc, const at::Tensor& dt, const ForwardBatch& batch, int D,
               const at::Tensor& slots, const at::Tensor& o) {
    const int B = batch.num_reqs, P = B - D;
    const int64_t TP = xbc.size(0);
    // Host metadata of the prefill requests (vLLM's Mamba2AttentionMetadataBuilder).
    std::vector<int32_t> qsl = {0}, computed;
    std::vector<uint8_t> has_init;
    bool any_init = false;
    for (int r = D; r < B; ++r) {
      qsl.push_back(qsl.back() + batch.query_lens[r]);
      computed.push_back(batch.context_lens[r]);
      has_init.push_back(batch.context_lens[r] > 0 ? 1 : 0);
      any_init = any_init || batch.context_lens[r] > 0;
    }
    // has_initial_states and the state indices are sliced at num_decodes out of whole-batch
    // tensors, as in vLLM (their pointers are then not 16-byte aligned in mixed batches).
    std::vector<uint8_t> has_init_all(D, 0);
    has_init_all.insert(has_init_all.end(), has_init.begin(), has_init.end());
    const at::Tensor has_initial_state = upload(has_init_all, at::kBool, ctx_.device).narrow(0, D, P);
    const at::Tensor slots_p = slots.narrow(0, D, P);
    const at::Tensor qsl_p = upload(qsl, at::kInt, ctx_.device);
    at::Tensor conv_out = at::empty({TP, d_.conv_dim()}, xbc.options().memory_format(at::MemoryFormat::Contiguous));
    mamba_ops::causal_conv1d_fwd(*ctx_.jit, xbc, conv_weight_, conv_bias_, conv_state_, qsl_p,
                                 slots_p, has_initial_state, mamba_ops::Activation::kSilu, conv_out);
    const Mamba2Views v = split_xbc(conv_out);
    const mamba_ssd::ChunkMetadata cm =
        mamba_ssd::compute_chunk_metadata(qsl, computed, d_.chunk_size);
    at::Tensor initial;
    if (any_init) initial = gather_initial_states(slots_p, has_initial_state, P);
    const at::Tensor states = mamba_ssd::chunk_scan_combined_varlen(
        *ctx_.jit, v.x, dt, a_, v.B, v.C, d_.chunk_size, d_skip_, dt_bias_,
        upload(cm.seq_idx, at::kInt, ctx_.device), qsl_p,
        upload(cm.cu_chunk_seqlens, at::kInt, ctx_.device),
        upload(cm.last_chunk_indices, at::kInt, ctx_.device), initial, /*dt_softplus=*/true, 0.0,
        std::numeric_limits<double>::infinity(), o.view({TP, d_.heads, d_.head_dim}), d_.ssm_dtype);
    // ssm_state[state_indices_p] = varlen_states: a torch index_put (nothing compiles).
    if (ctx_.mode == DeviceMode::kCuda) ssm_state_.index_copy_(0, slots_p.to(at::kLong), states);
  }

  /// torch.where(has_initial_state, ssm_state[indices], 0): torch operations in vLLM.
  at::Tensor gather_initial_states(const at::Tensor& slots, const at::Tensor& has_init, int P) const {
    if (ctx_.mode != DeviceMode::kCuda)
      return at::empty({P, d_.heads, d_.head_dim, d_.state}, ssm_state_.options());
    const at::Tensor s = ssm_state_.index_select(0, slots.to(at::kLong));
    return at::where(has_init.view({P, 1, 1, 1}), s, at::zeros({}, s.options()));
  }

  void decode(const at::Tensor& xbc, const at::Tensor& dt, const at::Tensor& slots,
              const at::Tensor& o) {
    const int64_t B = xbc.size(0), H = d_.heads, Pd = d_.head_dim, N = d_.state;
    at::Tensor conv_out = at::empty({B, d_.conv_dim()}, xbc.options());
    mamba_ops::causal_conv1d_update(*ctx_.jit, xbc, conv_state_, conv_weight_, conv_bias_,
                                    mamba_ops::Activation::kSilu, slots, conv_out);
    const Mamba2Views v = split_xbc(conv_out);
    // The expanded (stride-0) views vLLM hands selective_state_update.
    const at::Tensor A = a_.view({H, 1, 1}).expand({H, Pd, N});
    const at::Tensor dt_e = dt.view({B, H, 1}).expand({B, H, Pd});
    const at::Tensor dt_bias = dt_bias_.view({H, 1}).expand({H, Pd});
    const at::Tensor D = d_skip_.view({H, 1}).expand({H, Pd});
    const jit::Selection sel = mamba_ssu::selective_state_update(
        *ctx_.jit, ssu_src_, ssm_state_, v.x, dt_e, A, v.B, v.C, D, dt_bias, /*dt_softplus=*/true,
        slots, slots, o.view({B, H, Pd}));
    note_ssu_selection(B, sel);
  }

  Mamba2Views split_xbc(const at::Tensor& conv_out) const { return d_.split(conv_out); }

  void note_ssu_selection(int64_t batch, const jit::Selection& sel) {
    if (!ctx_.jit) return;
    ssu_used_.emplace(batch, sel.selector + " " + sel.tuning_key + " -> " + sel.config.name);
  }

  Mamba2Dims d_;
  mamba_ssu::ConfigSource ssu_src_;
  std::map<int64_t, std::string> ssu_used_;
  at::Tensor conv_weight_, conv_bias_, a_, d_skip_, dt_bias_;
  at::Tensor conv_state_, ssm_state_;
};

MixerBackendInfo mamba2_backend() {
  MixerBackendInfo b;
  b.kind = "mamba2";
  b.name = "mamba2_triton";
  b.description = "Mamba2 (NemotronH) with vLLM's Triton kernels: causal conv1d, the SSD "
                  "chunked-scan prefill chain (autotuned), selective_state_update (tuned table)";
  b.make = [](const MixerSpec& s, const MixerContext& c) -> std::unique_ptr<Mixer> {
    return std::make_unique<Mamba2Mixer>(s, c);
  };
  for (auto* k : mamba_ssd::all_kernels()) b.kernels.push_back(k);
  for (auto* k : mamba_ssu::all_kernels()) b.kernels.push_back(k);
  for (auto* k : mamba_ops::all_kernels()) b.kernels.push_back(k);
  b.check = [](const MixerSpec& s, const ModelConfig&, const EngineConfig&) {
    return Mamba2Dims::from_spec(s).problems();
  };
  return b;
}

}  // namespace

CS_REGISTER_MIXER_BACKEND(mamba2_backend());

}  // namespace coldstart
