// The Mamba2 warmups the engines added for hybrid Mamba models (NemotronH), one warmer each, so
// the `none` strategy shows the engine without any of them:
//
// mamba-ssd-warmup: vLLM PR #39822 "[Hybrid] Warmup Mamba2 SSD kernel" (merged 2026-04,
//   MambaMixer2._warmup_ssd_kernels in vllm/model_executor/layers/mamba/mamba2/mamba_mixer2.py
//   @ 2e0714af). In vLLM it runs inside the profile run, once per layer; here it runs in
//   kernel_warmup, once per distinct layer config (the compile keys are the same; vLLM's point of
//   running before the KV cache exists, the autotuner's memory, is not what this harness
//   measures). It calls mamba_chunk_scan_combined_varlen on one sequence of chunk_size random
//   tokens (one chunk), with the layer's A, D and dt_bias, z None, dt_softplus, dt_limit
//   (0, inf), the SSM cache dtype as state dtype, once without and once with random initial
//   states (HAS_INITSTATES is a constexpr of _state_passing_fwd and _chunk_scan_fwd).
//
// mamba-conv1d-warmup: vLLM PR #48363 "[Perf] Warm up hybrid Mamba2 Triton kernels reported by
//   the JIT monitor" (open as of 2026-07; hybrid_mamba_triton_warmup): causal_conv1d_fwd with the
//   layer's real conv weight and bias on one token routed to the null block of its real conv
//   state, swept over the 8 pointer-alignment cases of (x, cache indices, has_initial_state),
//   since mixed decode + prefill batches slice those at num_decodes. Its other two kernels
//   (_zero_kv_blocks_kernel, _compute_slot_mapping_kernel) are not replayed.
//
// mamba-cached-prefill-warmup: TensorRT-LLM PR #16177 "Close Mamba hybrid warmup gap in
//   autotuner warmup" (merged 2026-07): the warmup step carries several sequences, some with
//   cached tokens, so the multi-sequence and HAS_INITSTATES=True variants compile before the
//   first chunked prefill that continues a prompt. Replayed as one eager model step through
//   every layer (dummy_run) with two prefill sequences on the null block: one fresh, one with a
//   chunk_size + 1 token context; the token counts are not multiples of 16 so that Triton's
//   divisibility specialization is not the warmed one only.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <limits>
#include <set>

#include "harness/kernels/mamba_ops/mamba_ops.h"
#include "harness/kernels/mamba_ssd/mamba_ssd.h"
#include "harness/models/mamba2_layer.h"
#include "harness/runtime/host_upload.h"
#include "warmers/warmer.h"
#include "warmers/warmup_context.h"

namespace coldstart {
namespace {

/// The mixers this file's warmers warm (Warmer::mixers_used).
const MixerRef kMamba2{"mamba2"};

/// The first Mamba2 layer of each distinct compile config (layers with equal configs share every
/// compiled kernel); `need_cache` skips layers without a bound cache.
std::vector<Mixer*> distinct_mamba_layers(WarmupContext& ctx, bool need_cache) {
  std::vector<Mixer*> out;
  std::set<std::string> seen;
  for (Mixer* m : ctx.mixers(kMamba2)) {
    if (need_cache && m->cache_views().empty()) continue;
    if (seen.insert(m->compile_config()).second) out.push_back(m);
  }
  return out;
}

at::Tensor random_like_shape(WarmupContext& ctx, std::vector<int64_t> shape, at::ScalarType t) {
  at::Tensor x = at::empty(shape, at::TensorOptions().dtype(t).device(ctx.device()));
  if (ctx.mode() == DeviceMode::kCuda) x.normal_();
  return x;
}

class MambaSsdWarmup final : public Warmer {
 public:
  std::string name() const override { return "mamba-ssd-warmup"; }
  std::vector<std::string> mixers_used() const override { return {kMamba2.name()}; }
  std::string description() const override {
    return "Mamba2 SSD chain on one chunk, with and without initial states (vLLM PR #39822, "
           "MambaMixer2._warmup_ssd_kernels)";
  }

  void run(WarmupContext& ctx) override {
    const std::vector<Mixer*> layers = distinct_mamba_layers(ctx, /*need_cache=*/false);
    if (layers.empty()) {
      ctx.skip("no Mamba2 layer, nothing to warm");
      return;
    }
    for (Mixer* layer : layers) {
      const Mamba2Dims d = Mamba2Dims::from_spec(layer->spec());
      const std::vector<at::Tensor> p = layer->parameters();  // conv w, conv b, A, D, dt_bias
      const int64_t T = d.chunk_size;
      const at::Tensor x = random_like_shape(ctx, {T, d.heads, d.head_dim}, at::kBFloat16);
      const at::Tensor dt = random_like_shape(ctx, {T, d.heads}, at::kBFloat16);
      const at::Tensor B = random_like_shape(ctx, {T, d.groups, d.state}, at::kBFloat16);
      const at::Tensor C = random_like_shape(ctx, {T, d.groups, d.state}, at::kBFloat16);
      const at::Tensor out = at::empty({T, d.heads, d.head_dim}, x.options());
      auto ints = [&](std::vector<int32_t> v) { return upload(v, at::kInt, ctx.device()); };
      const at::Tensor cu_seqlens = ints({0, static_cast<int32_t>(T)});
      const at::Tensor cu_chunks = ints({0, static_cast<int32_t>(T)});
      const at::Tensor last_chunk = ints({0});
      const at::Tensor seq_idx = ints({0});
      for (bool with_initial : {false, true}) {
        const at::Tensor initial =
            with_initial ? random_like_shape(ctx, {1, d.heads, d.head_dim, d.state}, d.ssm_dtype)
                         : at::Tensor();
        mamba_ssd::chunk_scan_combined_varlen(
            ctx.jit(), x, dt, p.at(2), B, C, d.chunk_size, p.at(3), p.at(4), seq_idx, cu_seqlens,
            cu_chunks, last_chunk, initial, /*dt_softplus=*/true, 0.0,
            std::numeric_limits<double>::infinity(), out, d.ssm_dtype);
      }
      ctx.log(fmt::format("mamba-ssd-warmup: layer {} ({}): one chunk of {} tokens, with and "
                          "without initial states",
                          layer->spec().layer, layer->compile_config(), T));
    }
  }
};

class MambaConv1dWarmup final : public Warmer {
 public:
  std::string name() const override { return "mamba-conv1d-warmup"; }
  std::vector<std::string> mixers_used() const override { return {kMamba2.name()}; }
  std::string description() const override {
    return "Mamba2 causal conv1d forward on one null-block token in the 8 pointer-alignment "
           "cases of mixed batches (vLLM PR #48363, hybrid_mamba_triton_warmup; open)";
  }

  void run(WarmupContext& ctx) override {
    const std::vector<Mixer*> layers = distinct_mamba_layers(ctx, /*need_cache=*/true);
    if (layers.empty()) {
      ctx.skip("no Mamba2 layer with a bound cache, nothing to warm");
      return;
    }
    int calls = 0;
    for (Mixer* layer : layers) {
      const Mamba2Dims d = Mamba2Dims::from_spec(layer->spec());
      const std::vector<at::Tensor> p = layer->parameters();
      const at::Tensor conv_state = layer->cache_views().at(0);
      const int64_t row = layer->spec().input_row_strides.at(0);
      // Pools one row / element longer than needed: offset 1 makes the pointer unaligned.
      const at::Tensor x_pool = random_like_shape(ctx, {2, row}, at::kBFloat16);
      const at::Tensor idx_pool = upload(std::vector<int32_t>{0, 0}, at::kInt, ctx.device());
      const at::Tensor has_pool = upload(std::vector<uint8_t>{0, 0}, at::kBool, ctx.device());
      const at::Tensor qsl = upload(std::vector<int32_t>{0, 1}, at::kInt, ctx.device());
      for (int c = 0; c < 8; ++c) {
        const at::Tensor x = x_pool.narrow(0, c & 1, 1).narrow(1, 0, d.conv_dim());
        const at::Tensor idx = idx_pool.narrow(0, (c >> 1) & 1, 1);
        const at::Tensor has = has_pool.narrow(0, (c >> 2) & 1, 1);
        at::Tensor out = at::empty({1, d.conv_dim()}, x.options());
        mamba_ops::causal_conv1d_fwd(ctx.jit(), x, p.at(0), p.at(1), conv_state, qsl, idx, has,
                                     mamba_ops::Activation::kSilu, out);
        ++calls;
      }
    }
    ctx.log(fmt::format("mamba-conv1d-warmup: {} conv1d calls over {} layer config(s)", calls,
                        layers.size()));
  }
};

class MambaCachedPrefillWarmup final : public Warmer {
 public:
  std::string name() const override { return "mamba-cached-prefill-warmup"; }
  std::vector<std::string> mixers_used() const override { return {kMamba2.name()}; }
  std::string description() const override {
    return "one eager step of two prefill sequences, one continuing a cached context, through "
           "every layer (TensorRT-LLM PR #16177)";
  }

  void run(WarmupContext& ctx) override {
    const std::vector<Mixer*> layers = ctx.mixers(kMamba2);
    if (layers.empty()) {
      ctx.skip("no Mamba2 layer, nothing to warm");
      return;
    }
    const Mamba2Dims d = Mamba2Dims::from_spec(layers.front()->spec());
    const EngineConfig& e = ctx.scenario().engine;
    const int bs = e.block_size;
    // Two sequences: a fresh one and one continuing a context of chunk_size + 1 tokens, both
    // longer than the largest capture size (so the step runs eagerly, as a prefill does) and
    // within the step's token budget.
    int fresh = 17, cont = 19;
    for (int size : e.cudagraph_capture_sizes) {
      while (fresh + cont <= size) {
        fresh += 16;
        cont += 16;
      }
    }
    if (fresh + cont > e.max_num_batched_tokens || e.max_num_seqs < 2) {
      ctx.skip("max_num_seqs or max_num_batched_tokens cannot hold its two prefills");
      return;
    }
    const int context = static_cast<int>(d.chunk_size) + 1;
    SeqStep a = null_block_step(0, fresh, bs), b = null_block_step(context, cont, bs);
    a.req_slot = 0;
    b.req_slot = 1;
    ctx.dummy_run({a, b});
    ctx.log(fmt::format("mamba-cached-prefill-warmup: one step of {} fresh + {} continuing "
                        "tokens (context {})",
                        fresh, cont, context));
  }
};

CS_REGISTER_WARMER(MambaSsdWarmup);
CS_REGISTER_WARMER(MambaConv1dWarmup);
CS_REGISTER_WARMER(MambaCachedPrefillWarmup);

}  // namespace
}  // namespace coldstart
