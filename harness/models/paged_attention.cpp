// Paged attention mixer over a plain paged KV cache: kv_cache_dtype auto / bfloat16 (bf16 cache)
// and fp8 / fp8_e4m3 (e4m3 bytes with per-tensor k/v scales of 1.0, vLLM's default without
// calibrated scales). Modelled on vLLM's Triton attention backend (vllm/v1/attention/backends/
// triton_attn.py and vllm/v1/attention/ops/triton_unified_attention.py, 2026 main):
// - its metadata builder allocates the split-KV ("3D", segmented softmax) scratch once, for
//   seq_threshold_3D = 128 // num_kv_heads sequences snapped to the nearest capture size; the
//   scratch is persistent, not from the growable workspace, so this backend never meets the
//   workspace lock;
// - unified_attention takes the 3D split-KV path only for decode-only batches of at most
//   seq_threshold_3D sequences; any prefill row or a larger batch takes the 2D kernel, which here
//   is the paged prefill kernel over the whole batch (chunks read their K/V back from the cache).
// Both paths are runtime-compiled kernels, so they compile on first use: on the hot path unless
// a warmer, the FULL decode graph capture or an earlier request reached them.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "harness/kernels/paged/paged.h"
#include "harness/models/attention_common.h"
#include "harness/models/mixer.h"

namespace coldstart {
namespace {

class PagedAttention final : public Mixer {
 public:
  PagedAttention(const MixerSpec& spec, const MixerContext& ctx)
      : Mixer(spec, ctx),
        layout_(paged::PagedLayout::make(static_cast<int>(spec.head_dim), ctx.engine->block_size,
                                         static_cast<int>(spec.num_kv_heads),
                                         paged::parse_cache_dtype(ctx.engine->kv_cache_dtype))),
        sm_scale_(attention_scale(spec.head_dim)),
        seq_threshold_3d_(threshold_3d(spec.num_kv_heads, *ctx.engine)) {}

  std::string backend() const override {
    return std::string("paged_") + paged::cache_dtype_name(layout_.dtype);
  }

  CacheSpec cache_spec() const override {
    CacheSpec c;
    c.kind = CacheSpec::Kind::kPagedKv;
    c.bytes_per_token = layout_.page_size_bytes() / layout_.block_size;
    c.group = fmt::format("attention/{}/token_bytes={}", backend(), c.bytes_per_token);
    return c;
  }

  void bind_cache(const CacheBinding& c) override {
    CS_CHECK(c.page_bytes == layout_.page_size_bytes(),
             "paged cache page size differs from its block");
    if (c.hybrid) {
      cache_ = paged::block_major_view(layout_, c.bytes, c.num_pages, c.page_bytes);
    } else {
      const at::ScalarType t = paged::cache_scalar_type(layout_);
      cache_ = (t == at::kByte ? c.bytes : c.bytes.view(t))
                   .view(paged::cache_shape(layout_, c.num_pages));
    }
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(ctx_.device);
    k_scale_ = at::empty({1}, f32);
    v_scale_ = at::empty({1}, f32);
    // The metadata builder's persistent split-KV scratch (allocated with the backend, before any
    // graph is captured). vLLM has one builder per KV cache group, so the layers of a group share
    // one buffer (layers run one after another); keyed here by the layer's cache spec and size.
    const int64_t bytes =
        paged::decode_workspace_bytes(seq_threshold_3d_, spec_.num_heads, spec_.head_dim);
    auto make = [&] { return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(ctx_.device)); };
    if (ctx_.shared_buffers != nullptr) {
      const std::string key = fmt::format("{}/split-KV scratch/{}", cache_spec().group, bytes);
      auto it = ctx_.shared_buffers->find(key);
      if (it == ctx_.shared_buffers->end()) it = ctx_.shared_buffers->emplace(key, make()).first;
      scratch_ = it->second;
    } else {
      scratch_ = make();
    }
    if (ctx_.mode == DeviceMode::kCuda) {
      k_scale_.fill_(1.0);
      v_scale_.fill_(1.0);
    }
  }

  std::vector<ScratchDecl> declared_scratch() const override {
    ScratchDecl d;
    d.name = "split-KV decode scratch (3D path)";
    d.bytes = paged::decode_workspace_bytes(seq_threshold_3d_, spec_.num_heads, spec_.head_dim);
    d.size_rule = fmt::format(
        "float32 partials [R, Hq, 16 segments, head_dim + 1] + LSE [R, Hq], R = seq_threshold_3D = "
        "128 // num_kv_heads snapped to a capture size ({}); a larger decode batch takes the 2D "
        "kernel instead of overflowing; one buffer per KV cache group, shared by its layers",
        seq_threshold_3d_);
    d.config_key = "cudagraph_capture_sizes";
    d.kind = "persistent";
    d.seen_by_profile_run = false;  // the builder exists only once the KV cache does
    d.source = "vllm/v1/attention/backends/triton_attn.py, TritonAttentionMetadataBuilder.__init__";
    return {d};
  }

  void forward(const std::vector<at::Tensor>& in, at::Tensor& out,
               const ForwardBatch& batch) override {
    const at::Tensor &q = in.at(0), &k = in.at(1), &v = in.at(2);
    const int64_t N = q.size(0), D = spec_.head_dim, Hq = spec_.num_heads,
                  Hk = spec_.num_kv_heads, B = batch.num_reqs;
    paged::store(*ctx_.jit, layout_, k.view({N, Hk, D}), v.view({N, Hk, D}),
                 batch.slot_mapping.narrow(0, 0, N), cache_, k_scale_, v_scale_);
    at::Tensor o = out.narrow(0, 0, N).view({N, Hq, D});
    if (batch.uniform_decode() && B <= seq_threshold_3d_) {
      paged::decode(*ctx_.jit, layout_, q.view({N, Hq, D}), cache_, k_scale_, v_scale_,
                    batch.block_table, batch.seq_lens, sm_scale_,
                    paged::decode_workspace_views(scratch_, B, Hq, D), o);
      return;
    }
    paged::prefill(*ctx_.jit, layout_, q.view({N, Hq, D}), cache_, k_scale_, v_scale_,
                   batch.block_table, batch.query_start_loc, batch.seq_lens, sm_scale_, o);
  }

  std::string compile_config() const override {
    const uint64_t offset = static_cast<uint64_t>(cache_.storage_offset()) *
                            static_cast<uint64_t>(cache_.element_size());
    return fmt::format("{} D={} block={} Hq={} Hk={} cache_align16={}", backend(), spec_.head_dim,
                       layout_.block_size, spec_.num_heads, spec_.num_kv_heads, offset % 16 == 0);
  }

 private:
  /// vLLM's TritonAttentionMetadataBuilder: 128 // num_kv_heads, snapped to the nearest CUDA
  /// graph capture size when graphs are captured (first of two equally near, as Python's min).
  static int64_t threshold_3d(int64_t num_kv_heads, const EngineConfig& e) {
    int64_t t = std::max<int64_t>(1, 128 / std::max<int64_t>(1, num_kv_heads));
    if (!e.cudagraph_capture_sizes.empty()) {
      int64_t best = e.cudagraph_capture_sizes.front();
      for (int size : e.cudagraph_capture_sizes)
        if (std::llabs(size - t) < std::llabs(best - t)) best = size;
      t = best;
    }
    return t;
  }

  paged::PagedLayout layout_;
  float sm_scale_;
  int64_t seq_threshold_3d_;
  at::Tensor cache_, k_scale_, v_scale_, scratch_;
};

MixerBackendInfo paged_backend() {
  MixerBackendInfo b;
  b.kind = "attention";
  b.name = "paged";
  b.kv_cache_dtypes = {"auto", "bfloat16", "fp8", "fp8_e4m3"};
  b.description = "paged KV cache in bf16 or fp8 e4m3: store, split-KV decode for small decode "
                  "batches, unified prefill kernel otherwise (vLLM triton_attn)";
  // Verify rows (1 + k tokens a request) take unified attention's 2D path, as vLLM's Triton
  // backend does for any batch whose max query length is above 1: paged_prefill.
  b.verify_steps = true;
  b.make = [](const MixerSpec& s, const MixerContext& c) -> std::unique_ptr<Mixer> {
    return std::make_unique<PagedAttention>(s, c);
  };
  b.kernels = paged::all_kernels();
  b.check = [](const MixerSpec& s, const ModelConfig&, const EngineConfig&) {
    std::vector<ScenarioProblem> out;
    if (s.head_dim % 32 != 0 || s.head_dim < 32 || s.head_dim > 256) {
      out.push_back({"model.head_dim",
                     fmt::format("the paged kernels take head_dim 32..256 in steps of 32, but the "
                                 "model's head_dim is {}",
                                 s.head_dim)});
    }
    return out;
  };
  return b;
}

}  // namespace

CS_REGISTER_MIXER_BACKEND(paged_backend());

}  // namespace coldstart
