// The MoE backend registry and the MoE layer around the routed experts (moe.h).
#include "harness/models/moe.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "harness/common/error.h"
#include "harness/dist/rank_group.h"
#include "harness/runtime/host_upload.h"

namespace coldstart {
namespace {

std::vector<MoeBackendInfo>& registry() {
  static std::vector<MoeBackendInfo> r;
  return r;
}

std::string formats() {
  std::string out;
  for (const MoeBackendInfo& b : moe_backends())
    out += fmt::format("{}{} ({})", out.empty() ? "" : ", ", b.weight_format, b.name);
  return out.empty() ? "none" : out;
}

const char* routing_name(MoeRouting r) {
  switch (r) {
    case MoeRouting::kSoftmaxTopk: return "softmax_topk";
    case MoeRouting::kSigmoidGroupedTopk: return "sigmoid_grouped_topk";
    case MoeRouting::kByModel: return "by_model";
  }
  return "?";
}

[[noreturn]] void fail(const char* arg, const std::string& what) {
  throw InputError(fmt::format("moe::layer_forward: argument '{}' {}", arg, what));
}

/// The rest of an MoE layer after its routed experts (routed [M, L]): routed scale, output
/// latent, shared expert, into out [M, H].
void finish_layer(const at::Tensor& hidden, at::Tensor routed, const MoeLayerWeights& w,
                  double routed_scale, const at::Tensor& out);

// A bf16 matrix [rows, cols] with a contiguous innermost dimension (rows / cols < 0: any).
void check_matrix(const char* arg, const at::Tensor& t, int64_t rows, int64_t cols) {
  if (!t.defined()) fail(arg, "is undefined");
  if (t.scalar_type() != at::kBFloat16 || t.dim() != 2) {
    fail(arg, fmt::format("must be a BFloat16 matrix, got {} with {} dimensions",
                          c10::toString(t.scalar_type()), t.dim()));
  }
  if (t.size(1) > 1 && t.stride(1) != 1) fail(arg, "must have a contiguous innermost dimension");
  if ((rows >= 0 && t.size(0) != rows) || (cols >= 0 && t.size(1) != cols)) {
    fail(arg, fmt::format("has shape [{}, {}], expected [{}, {}]", t.size(0), t.size(1),
                          rows >= 0 ? std::to_string(rows) : "*", cols >= 0 ? std::to_string(cols) : "*"));
  }
}

/// moe_layer_forward's argument checks (its documented InputErrors), shared with the EP path.
void check_layer(const MoeSpec& s, const at::Tensor& hidden, const MoeLayerWeights& w,
                 const at::Tensor& out) {
  check_matrix("hidden", hidden, -1, -1);
  if (!hidden.is_contiguous()) fail("hidden", "must be contiguous");
  const int64_t m = hidden.size(0), h = hidden.size(1);
  check_matrix("out", out, m, h);
  const bool latent = w.input_latent.defined();
  if (latent != w.output_latent.defined()) {
    fail("w.output_latent", "must be defined exactly when w.input_latent is");
  }
  if (latent) {
    check_matrix("w.input_latent", w.input_latent, s.hidden, h);
    check_matrix("w.output_latent", w.output_latent, h, s.hidden);
  } else if (h != s.hidden) {
    fail("hidden", fmt::format("has {} columns; without latent projections the experts' width "
                               "({}) must equal it", h, s.hidden));
  }
  const bool shared = w.shared_up.defined();
  if (shared != w.shared_down.defined()) {
    fail("w.shared_down", "must be defined exactly when w.shared_up is");
  }
  const bool gated = w.shared_activation == MoeActivation::kSiluGated;
  if (shared) {
    if (!gated && w.shared_activation != MoeActivation::kRelu2) {
      fail("w.shared_activation", "must be kRelu2 or kSiluGated");
    }
    check_matrix("w.shared_up", w.shared_up, -1, h);
    const int64_t width = gated ? w.shared_up.size(0) / 2 : w.shared_up.size(0);
    if (gated && w.shared_up.size(0) % 2 != 0) fail("w.shared_up", "must have an even row count (gated)");
    check_matrix("w.shared_down", w.shared_down, h, width);
  }
}

}  // namespace

std::string MoeSpec::summary() const {
  return fmt::format("moe(E={},N={},H={},top_k={},{},{})", num_experts, intermediate, hidden, top_k,
                     routing_name(routing), weight_format);
}

bool register_moe_backend(MoeBackendInfo info) {
  for (const MoeBackendInfo& b : registry()) {
    if (b.weight_format == info.weight_format) {
      throw Error(fmt::format("MoE backends '{}' and '{}' both serve weight format {}", b.name,
                              info.name, info.weight_format));
    }
  }
  registry().push_back(std::move(info));
  return true;
}

const MoeBackendInfo* find_moe_backend(const std::string& weight_format) {
  for (const MoeBackendInfo& b : registry())
    if (b.weight_format == weight_format) return &b;
  return nullptr;
}

std::vector<MoeBackendInfo> moe_backends() {
  std::vector<MoeBackendInfo> v = registry();
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return v;
}

std::unique_ptr<MoeExperts> make_moe_experts(const MoeSpec& spec, const MixerContext& ctx) {
  const MoeBackendInfo* b = find_moe_backend(spec.weight_format);
  if (b == nullptr) {
    throw InputError(fmt::format("no MoE backend for {} experts (registered: {})",
                                 spec.weight_format, formats()));
  }
  return b->make(spec, ctx);
}

void moe_layer_forward(MoeExperts& experts, const at::Tensor& hidden,
                       const at::Tensor& router_logits, const MoeLayerWeights& w,
                       double routed_scale, const at::Tensor& out) {
  const MoeSpec& s = experts.spec();
  check_layer(s, hidden, w, out);
  const int64_t m = hidden.size(0);
  const bool latent = w.input_latent.defined();
  const auto opts = hidden.options();
  const at::Tensor topk_w = at::empty({m, s.top_k}, opts.dtype(at::kFloat));
  const at::Tensor topk_ids = at::empty({m, s.top_k}, opts.dtype(at::kInt));
  experts.route(router_logits, w.correction_bias, topk_w, topk_ids);
  const at::Tensor x = latent ? at::linear(hidden, w.input_latent) : hidden;
  at::Tensor routed = experts.forward(x, topk_w, topk_ids, w.experts);
  finish_layer(hidden, routed, w, routed_scale, out);
}

namespace {

/// vLLM's routing simulation on the host (moe.engine_keys.h): ids [m * top_k], weights alike.
void simulate_routing(const MoeExpertParallel& ep, int64_t m, int top_k, std::vector<int32_t>& ids,
                      std::vector<float>& weights) {
  // One stream per (seed, layer, call): every rank draws the same routing.
  std::seed_seq seq{static_cast<uint32_t>(ep.seed), static_cast<uint32_t>(ep.seed >> 32),
                    static_cast<uint32_t>(ep.layer), static_cast<uint32_t>(ep.call),
                    static_cast<uint32_t>(ep.call >> 32)};
  std::mt19937_64 gen(seq);
  const int64_t E = ep.global_experts;
  ids.resize(static_cast<size_t>(m * top_k));
  weights.assign(ids.size(), 1.0f);
  if (ep.simulation == "uniform_random") {
    std::uniform_int_distribution<int64_t> pick(0, E - 1);
    for (auto& id : ids) id = static_cast<int32_t>(pick(gen));
    return;
  }
  CS_CHECK(ep.simulation == "normal_routing", "unknown routing simulation " + ep.simulation);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto& id : ids) {
    const double sig = 1.0 / (1.0 + std::exp(-normal(gen)));
    id = static_cast<int32_t>(std::clamp<int64_t>(static_cast<int64_t>(sig * E), 0, E - 1));
  }
  for (int64_t t = 0; t < m; ++t) {
    double sum = 0;
    for (int j = 0; j < top_k; ++j) {
      const double a = std::abs(normal(gen));
      weights[static_cast<size_t>(t * top_k + j)] = static_cast<float>(a);
      sum += a;
    }
    for (int j = 0; j < top_k; ++j)
      weights[static_cast<size_t>(t * top_k + j)] /= static_cast<float>(sum > 0 ? sum : 1.0);
  }
}

}  // namespace

std::vector<int64_t> MoeExperts::token_classes(int64_t max_tokens) const {
  std::vector<int64_t> out;
  for (int64_t m = 1; m <= max_tokens; ++m) out.push_back(m);
  return out;
}

void run_local_experts(MoeExperts& local, int64_t M, const MoeWeights& w, c10::Device device) {
  if (M < 1) throw InputError(fmt::format("run_local_experts: M {} must be at least 1", M));
  const MoeSpec& s = local.spec();
  const int64_t k = s.top_k;
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(device);
  if (device.is_meta()) {
    local.forward(at::empty({M, s.hidden}, bf16), at::empty({M, k}, bf16.dtype(at::kFloat)),
                  at::empty({M, k}, bf16.dtype(at::kInt)), w);
    return;
  }
  std::vector<int32_t> ids(static_cast<size_t>(M * k));
  for (int64_t i = 0; i < M * k; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i % s.num_experts);
  const at::Tensor topk_ids = upload(ids, at::kInt, device).view({M, k});
  const at::Tensor topk_w = at::full({M, k}, 1.0 / static_cast<double>(k), bf16.dtype(at::kFloat));
  local.forward(at::randn({M, s.hidden}, bf16), topk_w, topk_ids, w);
}

void moe_layer_forward_ep(MoeExperts& local, const MoeExpertParallel& ep, const at::Tensor& hidden,
                          const at::Tensor& router_logits, const MoeLayerWeights& w,
                          double routed_scale, const at::Tensor& out) {
  CS_CHECK(ep.ranks != nullptr, "expert parallelism needs the rank group");
  const MoeSpec& s = local.spec();
  const int world = ep.ranks->world(), rank = ep.ranks->rank();
  if (ep.global_experts != s.num_experts * world)
    fail("ep.global_experts", fmt::format("{} is not {} local experts x {} ranks",
                                          ep.global_experts, s.num_experts, world));
  check_layer(s, hidden, w, out);
  const int64_t m = hidden.size(0);
  const int k = s.top_k;
  const bool meta = hidden.is_meta();
  // Every token's top-k over the global experts, on the host.
  std::vector<int32_t> ids;
  std::vector<float> weights;
  if (ep.simulation != "none") {
    simulate_routing(ep, m, k, ids, weights);
  } else {
    if (meta)
      throw InputError(
          "expert parallelism in compile-only mode: tokens are routed by the router's scores, "
          "which need the GPU; set engine.moe_routing_simulation (uniform_random or "
          "normal_routing) to replay it without one");
    CS_CHECK(ep.router != nullptr, "expert parallelism without a simulation needs the router");
    const auto opts = hidden.options();
    const at::Tensor topk_w = at::empty({m, k}, opts.dtype(at::kFloat));
    const at::Tensor topk_ids = at::empty({m, k}, opts.dtype(at::kInt));
    ep.router->route(router_logits, w.correction_bias, topk_w, topk_ids);
    const at::Tensor ids_h = topk_ids.cpu(), w_h = topk_w.cpu();
    ids.assign(ids_h.data_ptr<int32_t>(), ids_h.data_ptr<int32_t>() + ids_h.numel());
    weights.assign(w_h.data_ptr<float>(), w_h.data_ptr<float>() + w_h.numel());
  }
  // The tokens this rank receives, their choices as local ids (-1: another rank's expert).
  const int64_t first = rank * s.num_experts;
  std::vector<int64_t> rows;
  std::vector<int32_t> local_ids;
  std::vector<float> local_w;
  for (int64_t t = 0; t < m; ++t) {
    bool mine = false;
    for (int j = 0; j < k; ++j) {
      const int64_t e = ids[static_cast<size_t>(t * k + j)] - first;
      mine |= e >= 0 && e < s.num_experts;
    }
    if (!mine) continue;
    rows.push_back(t);
    for (int j = 0; j < k; ++j) {
      const int64_t e = ids[static_cast<size_t>(t * k + j)] - first;
      local_ids.push_back(e >= 0 && e < s.num_experts ? static_cast<int32_t>(e) : -1);
      local_w.push_back(weights[static_cast<size_t>(t * k + j)]);
    }
  }
  const int64_t mr = static_cast<int64_t>(rows.size());
  std::vector<int64_t> counts(static_cast<size_t>(world), 0);
  counts[static_cast<size_t>(rank)] = mr;
  ep.ranks->all_reduce(counts, fmt::format("layer {} moe dispatch", ep.layer));
  const bool latent = w.input_latent.defined();
  const at::Tensor x = latent ? at::linear(hidden, w.input_latent) : hidden;
  const c10::Device dev = hidden.device();
  at::Tensor xr, tw, ti, rows_t;
  if (meta) {
    xr = at::empty({mr, x.size(1)}, x.options());
    tw = at::empty({mr, k}, x.options().dtype(at::kFloat));
    ti = at::empty({mr, k}, x.options().dtype(at::kInt));
  } else {
    rows_t = upload(rows, at::kLong, dev);
    xr = x.index_select(0, rows_t).contiguous();
    tw = upload(local_w, at::kFloat, dev).view({mr, k});
    ti = upload(local_ids, at::kInt, dev).view({mr, k});
  }
  const at::Tensor routed_r = local.forward(xr, tw, ti, w.experts);
  ep.ranks->all_reduce(counts, fmt::format("layer {} moe combine", ep.layer));
  at::Tensor routed = at::zeros({m, routed_r.size(1)}, routed_r.options());
  if (!meta && mr > 0) routed.index_copy_(0, rows_t, routed_r);
  finish_layer(hidden, routed, w, routed_scale, out);
}

namespace {

void finish_layer(const at::Tensor& hidden, at::Tensor routed, const MoeLayerWeights& w,
                  double routed_scale, const at::Tensor& out) {
  const bool latent = w.input_latent.defined();
  const bool shared = w.shared_up.defined();
  const bool gated = w.shared_activation == MoeActivation::kSiluGated;
  // MoERunner._maybe_apply_routed_scale_to_output (vLLM 01cb30845063): fused_output *=
  // routed_scaling_factor, in the activations' dtype.
  if (routed_scale != 1.0) routed.mul_(routed_scale);
  const at::Tensor y = latent ? at::linear(routed, w.output_latent) : routed;
  at::Tensor o = out;
  if (!shared) {
    o.copy_(y);
    return;
  }
  const at::Tensor up = at::linear(hidden, w.shared_up);
  at::Tensor act;
  if (up.is_meta()) {
    // libtorch 1.13 has no meta kernels for relu / silu; only shapes matter there.
    act = gated ? up.narrow(1, 0, up.size(1) / 2) : up;
  } else if (gated) {
    const int64_t half = up.size(1) / 2;
    act = at::silu(up.narrow(1, 0, half)) * up.narrow(1, half, half);
  } else {
    act = at::square(at::relu(up));  // ReLUSquaredActivation: torch.square(F.relu(x))
  }
  at::add_out(o, at::linear(act, w.shared_down), y);
}

}  // namespace

}  // namespace coldstart
