// Token mixers: the unit that runs between captured pieces of a forward pass, as vLLM's splitting
// ops are (attention over some KV format, a gated delta net, Mamba2, MLA-style attention with a
// sparse indexer). A model lists one MixerSpec per layer (its layer plan); the engine builds one
// Mixer per layer from the backend registered for that spec, groups them by cache spec (vLLM's
// KV cache groups), allocates their caches and walks the plan. MLPs and MoE stay inside pieces.
//
// A new kernel family adds one backend file under harness/models/ that registers itself with
// CS_REGISTER_MIXER_BACKEND; nothing else in the engine changes.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness/common/target.h"
#include "harness/jit/jit.h"
#include "harness/replay/scenario.h"
#include "harness/runtime/device.h"
#include "harness/runtime/graph.h"
#include "harness/runtime/workspace.h"

namespace coldstart {
namespace dist {
class RankGroup;
}  // namespace dist


/// One step's batch as the model runner builds it (vLLM's input batch + attention metadata).
/// Tokens of all requests are packed back to back: request r owns rows
/// [query_start[r], query_start[r] + query_lens[r]).
struct ForwardBatch {
  int num_tokens = 0;                 ///< N rows in the tensors below (may include padding)
  int num_reqs = 0;                   ///< B requests
  std::vector<int> query_lens;        ///< host, per request: new tokens this step
  std::vector<int> context_lens;      ///< host, per request: tokens already in the KV cache
  std::vector<int> query_start;       ///< host, per request: first row
  at::Tensor input_ids;               ///< [N] int64
  at::Tensor positions;               ///< [N] int64
  at::Tensor slot_mapping;            ///< [N] int64, KV-cache slot of each token, -1 = padding
  at::Tensor block_table;             ///< [B, max_blocks_per_req] int32 (rows of the engine's table)
  at::Tensor seq_lens;                ///< [B] int32, context + query tokens
  at::Tensor query_start_loc;         ///< [B + 1] int32, first row of each request, then N
  at::Tensor state_slots;             ///< [B] int32, state page (block id) of each request
  bool skip_attention = false;        ///< no attention metadata (profile run, piecewise capture):
                                      ///< mixers are skipped and leave their output as it is
  /// Speculative decoding (spec_decode.engine_keys.h). The first num_spec_reqs requests are
  /// verify rows whose drafts the metadata knows (vLLM's GDN spec decodes); 0 without drafts,
  /// and in the eager warmups of a FULL capture under cudagraph_warmup_metadata build.
  int num_spec_reqs = 0;
  int spec_query_len = 1;             ///< 1 + num_speculative_tokens (1: no speculative decoding)
  at::Tensor spec_state_slots;        ///< [B, 1 + k] int32: each request's state pages (column t
                                      ///< receives the state after its token t; column 0 holds the
                                      ///< conv state); undefined when k == 0
  at::Tensor num_accepted_tokens;     ///< [B] int32: 1 + the drafts the request's previous verify
                                      ///< step accepted (its initial state's column + 1); 1 for a
                                      ///< first verify step; undefined when k == 0

  /// Every request has one new token (a decode step without drafts).
  bool uniform_decode() const;
  /// Every request is a verify row of spec_query_len tokens with known drafts (a FULL
  /// uniform-decode batch under speculative decoding); false when spec_query_len == 1.
  bool uniform_verify() const;
};

/// One sequence's share of a step: which request slot, how many tokens are already cached, how
/// many new tokens, and the sequence's KV-cache blocks.
struct SeqStep {
  int req_slot = 0;    ///< the request's row in this step's batch (0..B-1, in order)
  int state_slot = 0;  ///< its state page (a block id), fixed while it runs (0 = the null block)
  int context_len = 0;
  int query_len = 0;
  std::vector<int32_t> blocks;
  /// Speculative decoding: the request's 1 + k state pages (state_slot is the first), whether
  /// this row carries drafts, and 1 + the drafts its previous verify step accepted.
  std::vector<int32_t> state_pages;
  bool verify = false;
  int num_accepted = 1;
};

/// What one layer's mixer is and the shapes it works on (the model's layer plan has one per
/// layer).
struct MixerSpec {
  std::string kind;          ///< "attention" | "gdn" | "mamba2" | "mla_sparse"
  int layer = 0;             ///< decoder layer index
  int64_t num_heads = 0;     ///< query heads (attention), value heads (GDN / Mamba2)
  int64_t num_kv_heads = 0;  ///< KV heads (attention), key heads / groups (GDN / Mamba2)
  int64_t head_dim = 0;      ///< per-head width
  int64_t output_width = 0;  ///< columns of the mixer output [N, output_width] bf16
  /// Column widths of the inputs the model hands the mixer, in order (attention: q, k, v), and the
  /// row stride of each as the model lays them out (v is a column slice of the fused QKV
  /// projection, so its row stride is wider than its width). Kernels specialize on strides, so
  /// warmers build synthetic inputs with exactly these (Mixer::dummy_inputs).
  std::vector<int64_t> input_widths;
  std::vector<int64_t> input_row_strides;
  nlohmann::json params = nlohmann::json::object();  ///< family-specific dimensions

  /// "attention(Hq=32,Hk=8,D=128)"-style summary for results and logs.
  std::string summary() const;

  /// An attention layer at decoder layer `layer`: inputs q [N, q_heads * head_dim], k and v
  /// [N, kv_heads * head_dim] with the row strides {q, k, v} of the projection they come from,
  /// output [N, q_heads * head_dim].
  static MixerSpec attention(int layer, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                             std::vector<int64_t> row_strides) {
    MixerSpec s;
    s.kind = "attention";
    s.layer = layer;
    s.num_heads = q_heads;
    s.num_kv_heads = kv_heads;
    s.head_dim = head_dim;
    s.output_width = q_heads * head_dim;
    s.input_widths = {q_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim};
    s.input_row_strides = std::move(row_strides);
    return s;
  }
};

/// The cache a mixer needs per layer (vLLM's KVCacheSpec): paged KV blocks addressed by the block
/// table, or per-request recurrent state (conv state + SSM state), one page per request. The
/// engine lays every layer's cache out with plan_kv_cache (harness/replay/kv_cache_plan.h), which
/// follows vLLM's grouping and, for hybrid models, its page-size unification.
struct CacheSpec {
  enum class Kind { kNone, kPagedKv, kState };
  Kind kind = Kind::kNone;
  int64_t bytes_per_token = 0;    ///< kPagedKv: K + V bytes of one token in this layer
  int64_t bytes_per_request = 0;  ///< kState: one request's state bytes in this layer
  std::string group;              ///< layers with equal texts form one cache group
};

/// One layer's share of the cache memory (Mixer::bind_cache).
struct CacheBinding {
  at::Tensor bytes;        ///< uint8 1-D, num_pages * page_bytes, 256-byte aligned
  int64_t num_pages = 0;   ///< pages (blocks) in `bytes`
  int64_t page_bytes = 0;  ///< bytes of one page
  bool hybrid = false;     ///< the pages are shared with recurrent-state layers
};

/// Everything a mixer (and a model) may use of the engine.
struct MixerContext {
  DeviceMode mode = DeviceMode::kCompileOnly;
  c10::Device device = c10::Device(c10::kMeta);
  jit::JitRuntime* jit = nullptr;
  WorkspaceManager* workspace = nullptr;
  const Target* target = nullptr;
  const ModelConfig* model = nullptr;
  const EngineConfig* engine = nullptr;
  GpuSpans* prefill_attention_spans = nullptr;  ///< times libtorch SDPA calls when set
  /// Persistent buffers the layers of one engine share by key (a metadata builder's scratch,
  /// which vLLM keeps once per KV cache group, not per layer); nullptr = each layer its own.
  std::map<std::string, at::Tensor>* shared_buffers = nullptr;
  /// With engine.ranks: all, this process's rank in its group; the model issues the engines'
  /// collectives through it (tp_all_reduce, layers_common.h). nullptr: one process, none issued.
  dist::RankGroup* ranks = nullptr;
};

/// A buffer a backend keeps besides the KV cache and its per-call temporaries' ordinary
/// allocations, declared with the engine's size rule so a reviewer can see what memory the KV
/// budget did or did not leave room for (the result's `declared_scratch`).
struct ScratchDecl {
  std::string name;         ///< "split-KV decode scratch (3D path)"
  int64_t bytes = 0;        ///< its size under this scenario's settings, one layer's
  std::string size_rule;    ///< the engine's rule, in words
  std::string config_key;   ///< what sets its size ("max_model_len", an env var); "" = fixed
  std::string kind;         ///< "persistent" | "workspace manager" | "per call"
  bool seen_by_profile_run = false;  ///< inside the profile run's peak, so the KV budget left room
  std::string source;       ///< the engine file / PR the rule comes from
};

/// One layer's token mixer over its cache.
class Mixer {
 public:
  Mixer(MixerSpec spec, const MixerContext& ctx) : spec_(std::move(spec)), ctx_(ctx) {}
  virtual ~Mixer() = default;
  const MixerSpec& spec() const { return spec_; }
  /// The registered backend name ("turboquant_4bit_nc", "paged_bf16", ...).
  virtual std::string backend() const = 0;
  /// The cache this layer needs.
  virtual CacheSpec cache_spec() const = 0;
  /// Binds this layer's cache (CacheBinding). Paged KV: page p is block p (page_bytes =
  /// block_size * bytes_per_token, with the engine's final block size); when the pages are shared
  /// with recurrent-state layers (a hybrid model) the layer must lay a block's K and V inside its
  /// page, as vLLM re-strides attention caches for hybrid models. State: page p is the state of
  /// the request whose state block is p (ForwardBatch::state_slots), bytes_per_request of it used
  /// (vLLM pads state pages up to the attention page). Called once in kv_cache_alloc.
  virtual void bind_cache(const CacheBinding& binding) = 0;
  /// Runs the mixer for `batch`: `in` as MixerSpec::input_widths describes (bf16 [N, width]
  /// views), writes the first batch.num_tokens rows of `out` (bf16 [>= N, output_width]). May
  /// JIT-compile kernels and ask the workspace for scratch memory; throws what the replayed
  /// engine would raise (e.g. the workspace-lock error).
  virtual void forward(const std::vector<at::Tensor>& in, at::Tensor& out,
                       const ForwardBatch& batch) = 0;
  /// The call the layer gets when the forward context has no attention metadata (vLLM's profile
  /// run, the eager warmups of piecewise capture, the sampler warmup's dummy run). vLLM's
  /// attention layers return at once, which is the default here; a backend whose engine layer
  /// does something on that path (the GDN layer's prefill-kernel warmup) overrides it. `out` is
  /// left as it is either way.
  virtual void forward_no_metadata(const std::vector<at::Tensor>& in, at::Tensor& out,
                                   const ForwardBatch& batch) {
    (void)in;
    (void)out;
    (void)batch;
  }
  /// The layer's cache as its kernels see it, for warmers that launch kernels on the serving
  /// tensors as vLLM's warmers read layer.kv_cache (attention: {kv_cache}; GDN / Mamba2:
  /// {conv_state, ssm_state}); empty before bind_cache or when the layer has none.
  virtual std::vector<at::Tensor> cache_views() const { return {}; }
  /// The layer's own parameters kernels take (GDN: {conv1d weight, A_log, dt_bias}); empty when
  /// all of its weights live in the model.
  virtual std::vector<at::Tensor> parameters() const { return {}; }
  /// What makes this layer's kernels distinct (dims, dtypes, cache alignment): layers with equal
  /// texts share every compiled kernel. Warmers de-duplicate by it.
  virtual std::string compile_config() const = 0;
  /// The largest workspace any call of this layer can request under the engine's limits
  /// (decode at max_num_seqs, a continuation over max_model_len - 1 cached tokens), bytes; 0
  /// when it uses none. For reserve-the-maximum warmers.
  virtual int64_t max_workspace_bytes() const { return 0; }
  /// The scratch buffers this layer's backend keeps (ScratchDecl), under the engine's settings;
  /// empty when it keeps none besides ordinary per-call tensors.
  virtual std::vector<ScratchDecl> declared_scratch() const { return {}; }
  /// Synthetic random inputs of `num_tokens` rows laid out as the model hands them
  /// (MixerSpec::input_widths / input_row_strides), on the engine's device.
  std::vector<at::Tensor> dummy_inputs(int64_t num_tokens) const;

 protected:
  MixerSpec spec_;
  MixerContext ctx_;
};

/// A registered mixer backend: which specs it serves and how to build it.
struct MixerBackendInfo {
  std::string kind;                         ///< MixerSpec::kind it serves
  std::string name;                         ///< backend name
  std::vector<std::string> kv_cache_dtypes;  ///< the engine's kv_cache_dtype values it serves;
                                            ///< empty = any (recurrent-state mixers)
  std::string description;                  ///< one line for `coldstart list`
  /// Serves speculative-decoding verify steps (rows of 1 + k tokens per request, the
  /// ForwardBatch spec fields) as its engine layer does; a scenario with
  /// num_speculative_tokens > 0 and a backend without them is refused before anything runs.
  bool verify_steps = false;
  std::function<std::unique_ptr<Mixer>(const MixerSpec&, const MixerContext&)> make;
  /// The runtime-compiled kernels it launches (their declared archs are checked against the
  /// target before anything runs).
  std::vector<const jit::KernelSource*> kernels;
  /// Problems with this spec under these settings (e.g. a head_dim the kernels lack); may be
  /// empty.
  std::function<std::vector<ScenarioProblem>(const MixerSpec&, const ModelConfig&,
                                           const EngineConfig&)>
      check;
};

/// Registers a backend (static registration from its file). Throws Error on a duplicate
/// (kind, kv_cache_dtype) pair.
bool register_mixer_backend(MixerBackendInfo info);
/// The backend serving `spec.kind` under `engine.kv_cache_dtype`, or nullptr.
const MixerBackendInfo* find_mixer_backend(const std::string& kind, const std::string& kv_cache_dtype);
/// Every registered backend, sorted by (kind, name).
std::vector<MixerBackendInfo> mixer_backends();
/// Builds the mixer for `spec`; throws InputError naming the kind, kv_cache_dtype and the
/// registered ones when none serves it.
std::unique_ptr<Mixer> make_mixer(const MixerSpec& spec, const MixerContext& ctx);

/// A reference to mixers by backend name ("turboquant_4bit_nc") or by kind ("gdn", "mamba2"), as
/// warmers hold them (WarmupContext::mixers). registered() says whether some registered backend
/// has that name or kind: a warmer declares its references (Warmer::mixers_used), so one whose
/// backend was renamed or removed is refused when a scenario names it, not silently skipped.
class MixerRef {
 public:
  explicit MixerRef(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  bool registered() const;
  /// True when `m`'s backend or kind is this reference's name.
  bool matches(const Mixer& m) const { return m.backend() == name_ || m.spec().kind == name_; }

 private:
  std::string name_;
};

#define CS_MIXER_CAT2(a, b) a##b
#define CS_MIXER_CAT(a, b) CS_MIXER_CAT2(a, b)
/// Registers a MixerBackendInfo built by the expression `info` at static-initialization time.
#define CS_REGISTER_MIXER_BACKEND(info) \
  static const bool CS_MIXER_CAT(cs_mixer_registered_, __COUNTER__) = \
      ::coldstart::register_mixer_backend(info)

}  // namespace coldstart
