// The registries of model families and mixer backends, and the up-front replayability check that
// asks them (so a scenario the harness cannot replay is refused before any strategy runs).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>

#include "harness/common/error.h"
#include "harness/jit/tuned_tables.engine_keys.h"
#include "harness/jit/select.h"
#include "harness/common/paths.h"
#include "harness/jit/nvrtc_archs.h"
#include "harness/models/model.h"
#include "harness/models/moe.engine_keys.h"
#include "harness/models/spec_decode.engine_keys.h"

namespace coldstart {
namespace {

std::vector<MixerBackendInfo>& backends() {
  static std::vector<MixerBackendInfo> b;
  return b;
}

std::vector<ModelFamilyInfo>& families() {
  static std::vector<ModelFamilyInfo> f;
  return f;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

/// The kv_cache_dtype values some backend of `kind` serves, for messages.
std::vector<std::string> dtypes_of(const std::string& kind) {
  std::set<std::string> out;
  for (const auto& b : backends()) {
    if (b.kind != kind) continue;
    if (b.kv_cache_dtypes.empty()) out.insert("any");
    out.insert(b.kv_cache_dtypes.begin(), b.kv_cache_dtypes.end());
  }
  return {out.begin(), out.end()};
}

// a * b * ..., saturating at INT64_MAX (the inputs are non-negative).
int64_t product(std::initializer_list<int64_t> v) {
  __int128 p = 1;
  for (int64_t x : v) {
    p *= std::max<int64_t>(x, 0);
    if (p > std::numeric_limits<int64_t>::max()) return std::numeric_limits<int64_t>::max();
  }
  return static_cast<int64_t>(p);
}

// Shape limits every family shares, from the model's config, its layer plan and MoE specs:
// - the grids of the attention kernels: the cache store runs (tokens, KV heads) and the split-KV
//   decode (batch, query heads, splits), so heads go in grid y, which CUDA caps at 65535
//   (kernels/launch_util.h: store_grid, decode_grid; heads = 2^30 failed in the child);
// - torch's storage sizes: a tensor's bytes must fit int64 (computeStorageNbytes throws "storage
//   size overflow"; hidden_size = intermediate_size = 2^31 - 1 failed in the child). Checked for
//   the weights every family has (embedding, attention, dense MLP, routed experts) and the
//   widest activation of a max_num_batched_tokens step, at 4 bytes an element (float32 is the
//   widest dtype the replay keeps them in).
void check_shape_limits(const Scenario& s, const std::vector<MixerSpec>& plan,
                        const std::vector<MoeSpec>& moe, std::vector<ScenarioProblem>& out) {
  const ModelConfig& m = s.model;
  std::set<std::string> seen;
  auto add = [&](const std::string& key, const std::string& text) {
    if (seen.insert(key).second) out.push_back({key, text});
  };
  constexpr int64_t kMaxGridYZ = 65535;
  for (const MixerSpec& spec : plan) {
    if (spec.kind != "attention") continue;
    if (spec.num_heads > kMaxGridYZ)
      add("model.num_attention_heads",
          fmt::format("{} query heads on a rank: the attention kernels put heads in grid y, "
                      "which CUDA caps at {}", spec.num_heads, kMaxGridYZ));
    if (spec.num_kv_heads > kMaxGridYZ)
      add("model.num_key_value_heads",
          fmt::format("{} KV heads on a rank: the cache-store kernels put them in grid y, "
                      "which CUDA caps at {}", spec.num_kv_heads, kMaxGridYZ));
  }
  constexpr int64_t kMaxElements = std::numeric_limits<int64_t>::max() / 4;
  auto bytes_fit = [&](const std::string& key, const char* what, int64_t elements) {
    if (elements > kMaxElements)
      add(key, fmt::format("the {} would hold {} elements: past the int64 byte size of a torch "
                           "tensor",
                           what, elements == std::numeric_limits<int64_t>::max()
                                     ? std::string("more than 2^63")
                                     : std::to_string(elements)));
  };
  const int64_t H = m.hidden_size;
  bytes_fit("model.vocab_size", "embedding [vocab_size, hidden_size]", product({m.vocab_size, H}));
  bytes_fit("model.num_attention_heads", "attention projection",
            product({m.num_attention_heads + 2LL * m.num_key_value_heads, m.head_dim, H}));
  bytes_fit("model.intermediate_size", "MLP gate/up projection [2 x intermediate_size, hidden_size]",
            product({2, m.intermediate_size, H}));
  for (const MoeSpec& e : moe)
    bytes_fit("model.moe_intermediate_size", "routed experts' w13 [E, 2N, H]",
              product({e.num_experts, 2, e.intermediate, e.hidden}));
  int64_t widest = std::max<int64_t>({H, 2LL * m.intermediate_size, m.vocab_size});
  for (const MixerSpec& spec : plan)
    for (int64_t w : spec.input_widths) widest = std::max(widest, w);
  bytes_fit("engine.max_num_batched_tokens", "widest activation of a step [tokens, width]",
            product({s.engine.max_num_batched_tokens, widest}));
}

// Every tuned table under the scenario's tuned_config_dir, read as the kernels will read it, so a
// broken one is refused before anything runs (it failed in the child, exit 1). Two levels deep:
// <dir>/<kernel>/<table>.json.
void check_tuned_tables(const Scenario& s, std::vector<ScenarioProblem>& out) {
  const std::string& dir = tuned_config_dir(s.engine);
  if (dir.empty()) return;
  std::vector<std::string> tables;
  for (const std::string& sub : paths::directory_entries(dir).value_or(std::vector<std::string>{})) {
    const std::string p = paths::join(dir, sub);
    if (paths::is_directory(p)) {
      for (const std::string& f : paths::directory_entries(p).value_or(std::vector<std::string>{}))
        if (f.size() > 5 && f.compare(f.size() - 5, 5, ".json") == 0) tables.push_back(paths::join(p, f));
    } else if (sub.size() > 5 && sub.compare(sub.size() - 5, 5, ".json") == 0) {
      tables.push_back(p);
    }
  }
  for (const std::string& t : tables) {
    try {
      jit::load_tuned_table(t);
    } catch (const InputError& e) {
      out.push_back({"engine.tuned_config_dir", e.what()});
    }
  }
}

}  // namespace

bool ForwardBatch::uniform_decode() const {
  if (num_reqs == 0) return false;
  for (int q : query_lens)
    if (q != 1) return false;
  return true;
}

bool ForwardBatch::uniform_verify() const {
  if (num_reqs == 0 || spec_query_len <= 1 || num_spec_reqs != num_reqs) return false;
  for (int q : query_lens)
    if (q != spec_query_len) return false;
  return true;
}

std::string MixerSpec::summary() const {
  return fmt::format("{}(heads={},kv_heads={},head_dim={})", kind, num_heads, num_kv_heads,
                     head_dim);
}

std::vector<at::Tensor> Mixer::dummy_inputs(int64_t num_tokens) const {
  std::vector<at::Tensor> out;
  const auto opt = at::TensorOptions().dtype(at::kBFloat16).device(ctx_.device);
  for (size_t i = 0; i < spec_.input_widths.size(); ++i) {
    const int64_t width = spec_.input_widths[i];
    const int64_t stride = i < spec_.input_row_strides.size() ? spec_.input_row_strides[i] : width;
    at::Tensor buf = at::empty({num_tokens, stride}, opt);
    if (ctx_.mode == DeviceMode::kCuda) buf.normal_();
    // The last `width` columns: a slice of a wider projection, as the model hands it.
    out.push_back(buf.narrow(1, stride - width, width));
  }
  return out;
}

bool register_mixer_backend(MixerBackendInfo info) {
  for (const auto& b : backends()) {
    if (b.kind != info.kind) continue;
    for (const auto& d : info.kv_cache_dtypes) {
      if (std::find(b.kv_cache_dtypes.begin(), b.kv_cache_dtypes.end(), d) != b.kv_cache_dtypes.end())
        throw Error(fmt::format("mixer backends '{}' and '{}' both serve {} with kv_cache_dtype {}",
                                b.name, info.name, info.kind, d));
    }
  }
  backends().push_back(std::move(info));
  return true;
}

const MixerBackendInfo* find_mixer_backend(const std::string& kind, const std::string& kv_cache_dtype) {
  const MixerBackendInfo* any = nullptr;
  for (const auto& b : backends()) {
    if (b.kind != kind) continue;
    if (b.kv_cache_dtypes.empty()) any = &b;
    if (std::find(b.kv_cache_dtypes.begin(), b.kv_cache_dtypes.end(), kv_cache_dtype) !=
        b.kv_cache_dtypes.end())
      return &b;
  }
  return any;
}

std::vector<MixerBackendInfo> mixer_backends() {
  auto v = backends();
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return std::tie(a.kind, a.name) < std::tie(b.kind, b.name);
  });
  return v;
}

bool MixerRef::registered() const {
  for (const MixerBackendInfo& b : backends())
    if (b.name == name_ || b.kind == name_) return true;
  return false;
}

std::unique_ptr<Mixer> make_mixer(const MixerSpec& spec, const MixerContext& ctx) {
  const MixerBackendInfo* b = find_mixer_backend(spec.kind, ctx.engine->kv_cache_dtype);
  if (b == nullptr) {
    throw InputError(fmt::format("no {} backend for kv_cache_dtype '{}' (replayable: {})", spec.kind,
                                 ctx.engine->kv_cache_dtype, join(dtypes_of(spec.kind))));
  }
  return b->make(spec, ctx);
}

bool register_model_family(ModelFamilyInfo info) {
  for (const auto& f : families()) {
    for (const auto& a : info.architectures) {
      if (std::find(f.architectures.begin(), f.architectures.end(), a) != f.architectures.end())
        throw Error(fmt::format("model families '{}' and '{}' both serve {}", f.name, info.name, a));
    }
  }
  families().push_back(std::move(info));
  return true;
}

const ModelFamilyInfo* find_model_family(const std::string& architecture) {
  for (const auto& f : families()) {
    if (std::find(f.architectures.begin(), f.architectures.end(), architecture) !=
        f.architectures.end())
      return &f;
  }
  return nullptr;
}

std::vector<ModelFamilyInfo> model_families() {
  auto v = families();
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return v;
}

namespace {
std::vector<std::string> all_architectures() {
  std::vector<std::string> out;
  for (const auto& f : model_families()) out.insert(out.end(), f.architectures.begin(), f.architectures.end());
  return out;
}
}  // namespace

std::unique_ptr<Model> make_model(const ModelConfig& config, const MixerContext& ctx) {
  const ModelFamilyInfo* f = find_model_family(config.architecture);
  if (f == nullptr) {
    throw InputError(fmt::format("model architecture '{}' has no model family in coldstart yet "
                                 "(replayable: {})",
                                 config.architecture, join(all_architectures())));
  }
  return f->make(config, ctx);
}

/// The backends that serve verify steps, by name.
static std::vector<std::string> verify_backends() {
  std::vector<std::string> out;
  for (const MixerBackendInfo& b : mixer_backends())
    if (b.verify_steps) out.push_back(b.name);
  return out;
}

std::vector<ScenarioProblem> check_replayable(const Scenario& s, const Target* target) {
  std::vector<ScenarioProblem> out = check_spec_decode(s.engine);
  const EngineConfig& e = s.engine;
  if (e.cudagraph_mode == CudaGraphMode::kFull) {
    // Mixed prefill/decode batches inside one full graph need every mixer to be capturable for
    // any batch shape; the replay captures FULL graphs only for uniform decode batches.
    out.push_back({"engine.cudagraph_mode",
                   "'full' (mixed batches in full graphs) is not replayed; replayable: none, "
                   "piecewise, full_decode_only, full_and_piecewise"});
  }
  const ModelFamilyInfo* f = find_model_family(s.model.architecture);
  if (f == nullptr) {
    out.push_back({"model.architectures",
                   fmt::format("architecture '{}' has no model family in coldstart (replayable: {})",
                               s.model.architecture, join(all_architectures()))});
    return out;
  }
  if (f->check) {
    for (auto& p : f->check(s.model, e)) out.push_back(std::move(p));
    if (!out.empty()) return out;
  }
  MixerContext ctx;
  ctx.model = &s.model;
  ctx.engine = &s.engine;
  std::unique_ptr<Model> m = f->make(s.model, ctx);
  std::vector<MixerSpec> plan = m->layer_plan();
  // Expert parallelism and vLLM's routing simulation need routed experts (moe.engine_keys.h).
  if (e.string_key("enable_expert_parallel") == "true" && m->moe_specs().empty())
    out.push_back({"engine.enable_expert_parallel",
                   fmt::format("the {} family has no routed experts to split", f->name)});
  if (moe_routing_simulation(e) != "none" && !expert_parallel(e))
    out.push_back({"engine.moe_routing_simulation",
                   "is replayed under expert parallelism only (engine.enable_expert_parallel: "
                   "true with tensor_parallel_size > 1)"});
  if (uses_mtp_drafter(e)) {
    // vLLM's mtp method needs the checkpoint's MTP layers; the drafter's layers are checked with
    // the target's below.
    if (const std::unique_ptr<Model> drafter = m->make_mtp_drafter()) {
      for (const MixerSpec& l : drafter->layer_plan()) plan.push_back(l);
    } else {
      // The synthetic method needs a verify path in every layer's backend: hint at it only then.
      std::string no_verify;
      for (const MixerSpec& l : plan) {
        const MixerBackendInfo* b = find_mixer_backend(l.kind, e.kv_cache_dtype);
        if (b != nullptr && !b->verify_steps && no_verify.empty())
          no_verify = fmt::format("{} ({} layers)", b->name, l.kind);
      }
      out.push_back(
          {"engine.speculative_method",
           fmt::format("{}: the {} family has no MTP head in coldstart{}",
                       e.owned.contains("speculative_method") ? "mtp" : "mtp (the default)",
                       f->name,
                       no_verify.empty()
                           ? "; set speculative_method: synthetic to replay the verify steps "
                             "without a draft model"
                           : ", and its " + no_verify + " backend has no verify path, so "
                             "speculative decoding is not replayed for this model at all "
                             "(num_speculative_tokens: 0)")});
    }
  }
  std::set<std::string> seen;
  // Whether every kernel of a backend exists for the target's arch (one problem per backend:
  // every kernel of it needs the same arch), under `key`.
  auto check_archs = [&](const std::string& backend, const std::vector<const jit::KernelSource*>& kernels,
                         const std::string& key) {
    if (target == nullptr) return;
    for (const jit::KernelSource* k : kernels) {
      try {
        const std::string arch = jit::kernel_arch(*k, target->arch);
        if (!jit::nvrtc_can_target(arch) && seen.insert("nvrtc:" + backend).second) {
          out.push_back({key, fmt::format("the {} backend cannot run on {} with this CUDA toolkit: "
                                          "kernel {}: {}", backend, target->device_name, k->name,
                                          jit::nvrtc_cannot_target_text(arch))});
        }
      } catch (const jit::UnsupportedArchError& err) {
        const std::string text = fmt::format("the {} backend cannot run on {}: {}", backend,
                                             target->device_name, err.what());
        if (seen.insert(text).second) out.push_back({key, text});
      }
    }
  };
  const std::vector<MoeSpec> moe = m->moe_specs();
  // A fixed num_gpu_blocks must hold one max_model_len request. Models with recurrent-state
  // layers (their backends serve any kv_cache_dtype, mixer.h) get a larger block size at startup
  // (vLLM's hybrid rule, kv_cache_plan.h), known once the caches are planned: the engine checks
  // those.
  const bool has_state_layers = std::any_of(plan.begin(), plan.end(), [&](const MixerSpec& l) {
    const MixerBackendInfo* b = find_mixer_backend(l.kind, e.kv_cache_dtype);
    return b != nullptr && b->kv_cache_dtypes.empty();
  });
  const long long block_tokens =
      e.num_gpu_blocks ? *e.num_gpu_blocks * static_cast<long long>(e.block_size) : 0;
  if (e.num_gpu_blocks && !has_state_layers && e.max_model_len > 0 && block_tokens < e.max_model_len) {
    out.push_back({"engine.num_gpu_blocks",
                   fmt::format("{} blocks of {} tokens hold {} tokens, fewer than max_model_len "
                               "({}); vLLM refuses to start",
                               *e.num_gpu_blocks, e.block_size, block_tokens, e.max_model_len)});
  }
  check_shape_limits(s, plan, moe, out);
  check_tuned_tables(s, out);
  if (!out.empty()) return out;  // the backends' checks assume shapes that fit
  for (const MixerSpec& spec : plan) {
    const MixerBackendInfo* b = find_mixer_backend(spec.kind, e.kv_cache_dtype);
    if (b == nullptr) {
      if (seen.insert("missing:" + spec.kind).second) {
        out.push_back({"engine.kv_cache_dtype",
                       fmt::format("'{}' has no backend for the model's {} layers (replayable: {})",
                                   e.kv_cache_dtype, spec.kind, join(dtypes_of(spec.kind)))});
      }
      continue;
    }
    check_archs(b->name, b->kernels, "engine.kv_cache_dtype");
    if (num_speculative_tokens(e) > 0 && !b->verify_steps &&
        seen.insert("verify:" + b->name).second)
      out.push_back({"engine.num_speculative_tokens",
                     fmt::format("the {} backend of the model's {} layers has no speculative-"
                                 "decoding verify path in coldstart (verify steps are replayed "
                                 "for: {})",
                                 b->name, spec.kind, join(verify_backends()))});
    if (!b->check) continue;
    for (auto& p : b->check(spec, s.model, e)) {
      if (seen.insert(p.key + ":" + p.message).second) out.push_back(std::move(p));
    }
  }
  for (const MoeSpec& spec : moe) {
    const MoeBackendInfo* b = find_moe_backend(spec.weight_format);
    if (b == nullptr) {
      out.push_back({"model", fmt::format("the model's {} experts have no MoE backend ({})",
                                          spec.weight_format, spec.summary())});
      continue;
    }
    check_archs(b->name, b->kernels, "model");
    if (!b->check) continue;
    for (auto& p : b->check(spec, e, target)) {
      if (seen.insert(p.key + ":" + p.message).second) out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace coldstart
