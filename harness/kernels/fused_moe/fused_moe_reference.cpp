#include "harness/kernels/fused_moe/fused_moe_reference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

namespace coldstart::fused_moe::ref {

TopK topk_softmax(const at::Tensor& gating, int top_k, bool renormalize) {
  const at::Tensor p = at::softmax(gating.to(at::kCPU).to(at::kDouble), 1);
  const int64_t m = p.size(0);
  const int64_t e = p.size(1);
  TopK out;
  out.weights = at::empty({m, top_k}, at::kDouble);
  out.ids = at::empty({m, top_k}, at::kLong);
  auto pa = p.accessor<double, 2>();
  auto wa = out.weights.accessor<double, 2>();
  auto ia = out.ids.accessor<int64_t, 2>();
  std::vector<int64_t> order(static_cast<size_t>(e));
  for (int64_t r = 0; r < m; ++r) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return pa[r][x] > pa[r][y]; });
    double sum = 0;
    for (int k = 0; k < top_k; ++k) sum += pa[r][order[k]];
    for (int k = 0; k < top_k; ++k) {
      ia[r][k] = order[k];
      wa[r][k] = renormalize ? pa[r][order[k]] / sum : pa[r][order[k]];
    }
  }
  return out;
}

at::Tensor grouped_topk_scores(const at::Tensor& logits, const at::Tensor& bias, int64_t n_group,
                               int64_t topk_group) {
  const at::Tensor l = logits.to(at::kCPU).to(at::kDouble);
  at::Tensor s = (at::sigmoid(l) + bias.to(at::kCPU).to(at::kDouble).unsqueeze(0)).contiguous();
  if (n_group <= 1) return s;
  const int64_t m = s.size(0);
  const int64_t e = s.size(1);
  const int64_t per = e / n_group;
  auto sa = s.accessor<double, 2>();
  std::vector<double> gscore(static_cast<size_t>(n_group));
  std::vector<int64_t> order(static_cast<size_t>(n_group));
  const double ninf = -std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t g = 0; g < n_group; ++g) {
      std::vector<double> v(static_cast<size_t>(per));
      for (int64_t i = 0; i < per; ++i) v[static_cast<size_t>(i)] = sa[r][g * per + i];
      std::sort(v.begin(), v.end(), std::greater<double>());
      gscore[static_cast<size_t>(g)] = v[0] + (per > 1 ? v[1] : ninf);
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      return gscore[static_cast<size_t>(x)] > gscore[static_cast<size_t>(y)];
    });
    for (int64_t j = topk_group; j < n_group; ++j) {
      const int64_t g = order[static_cast<size_t>(j)];
      for (int64_t i = 0; i < per; ++i) sa[r][g * per + i] = ninf;
    }
  }
  return s;
}

at::Tensor routing_weights(const at::Tensor& logits, const at::Tensor& ids, bool renormalize,
                           double routed_scaling_factor) {
  const at::Tensor l = logits.to(at::kCPU).to(at::kDouble);
  at::Tensor w = at::sigmoid(l.gather(1, ids.to(at::kCPU).to(at::kLong)));
  if (renormalize) w = w / (w.sum(1, true) + 1e-20);
  return w * routed_scaling_factor;
}

TopK grouped_topk(const at::Tensor& logits, const at::Tensor& bias, int top_k, int64_t n_group,
                  int64_t topk_group, bool renormalize, double routed_scaling_factor) {
  const at::Tensor s = grouped_topk_scores(logits, bias, n_group, topk_group);
  const int64_t m = s.size(0);
  const int64_t e = s.size(1);
  auto sa = s.accessor<double, 2>();
  TopK out;
  out.ids = at::empty({m, top_k}, at::kLong);
  auto ia = out.ids.accessor<int64_t, 2>();
  std::vector<int64_t> order(static_cast<size_t>(e));
  for (int64_t r = 0; r < m; ++r) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return sa[r][x] > sa[r][y]; });
    for (int k = 0; k < top_k; ++k) ia[r][k] = order[static_cast<size_t>(k)];
  }
  out.weights = routing_weights(logits, out.ids, renormalize, routed_scaling_factor);
  return out;
}

Align align_block_size(const at::Tensor& topk_ids, int64_t num_experts, int64_t block_m) {
  const at::Tensor flat = topk_ids.to(at::kCPU).to(at::kLong).reshape({-1});
  const int64_t numel = flat.numel();
  auto fa = flat.accessor<int64_t, 1>();
  std::vector<std::vector<int64_t>> groups(static_cast<size_t>(num_experts));
  for (int64_t i = 0; i < numel; ++i) {
    if (fa[i] >= 0 && fa[i] < num_experts) groups[static_cast<size_t>(fa[i])].push_back(i);
  }
  std::vector<int64_t> sorted;
  std::vector<int64_t> experts;
  for (int64_t e = 0; e < num_experts; ++e) {
    auto& g = groups[static_cast<size_t>(e)];
    if (g.empty()) continue;
    const int64_t padded = (static_cast<int64_t>(g.size()) + block_m - 1) / block_m * block_m;
    sorted.insert(sorted.end(), g.begin(), g.end());
    sorted.insert(sorted.end(), static_cast<size_t>(padded) - g.size(), numel);
    experts.insert(experts.end(), static_cast<size_t>(padded / block_m), e);
  }
  Align out;
  out.total = static_cast<int64_t>(sorted.size());
  out.sorted_token_ids = at::tensor(sorted, at::kLong);
  out.expert_ids = at::tensor(experts, at::kLong);
  return out;
}

at::Tensor fused_experts(const at::Tensor& hidden, const at::Tensor& w13, const at::Tensor& w2,
                         const at::Tensor& topk_weights, const at::Tensor& topk_ids, bool gated) {
  const at::Tensor x = hidden.to(at::kCPU).to(at::kFloat);
  const at::Tensor ids = topk_ids.to(at::kCPU).to(at::kLong);
  const at::Tensor tw = topk_weights.to(at::kCPU).to(at::kFloat);
  const int64_t m = x.size(0);
  const int64_t top_k = ids.size(1);
  const int64_t n = w2.size(2);
  at::Tensor out = at::zeros({m, x.size(1)}, at::kFloat);
  const at::Tensor flat = ids.reshape({-1});
  const at::Tensor used = std::get<0>(at::_unique(flat, /*sorted=*/true));
  auto ua = used.accessor<int64_t, 1>();
  for (int64_t u = 0; u < used.numel(); ++u) {
    const int64_t e = ua[u];
    const at::Tensor pairs = at::nonzero(flat == e).reshape({-1});  // flat pair indices
    const at::Tensor tokens = at::floor_divide(pairs, top_k);
    const at::Tensor xe = x.index_select(0, tokens);                          // [P, H]
    const at::Tensor h = at::matmul(xe, w13[e].to(at::kCPU).to(at::kFloat).t());  // [P, 2N | N]
    at::Tensor act;
    if (gated) {
      const at::Tensor g = h.narrow(1, 0, n);
      act = g * at::sigmoid(g) * h.narrow(1, n, n);
    } else {
      act = at::square(at::relu(h));
    }
    const at::Tensor y = at::matmul(act, w2[e].to(at::kCPU).to(at::kFloat).t());  // [P, H]
    const at::Tensor w = tw.reshape({-1}).index_select(0, pairs).unsqueeze(1);
    out.index_add_(0, tokens, y * w);
  }
  return out;
}

at::Tensor nemotron_moe(const at::Tensor& hidden, const at::Tensor& topk_weights,
                        const at::Tensor& topk_ids, const at::Tensor& fc1_latent,
                        const at::Tensor& fc2_latent, const at::Tensor& w13, const at::Tensor& w2,
                        const at::Tensor& shared_up, const at::Tensor& shared_down,
                        double routed_scaling_factor) {
  const auto f32 = [](const at::Tensor& t) { return t.to(at::kCPU).to(at::kFloat); };
  const at::Tensor x = f32(hidden);
  const at::Tensor xl = fc1_latent.defined() ? at::matmul(x, f32(fc1_latent).t()) : x;
  at::Tensor routed =
      fused_experts(xl, w13, w2, topk_weights, topk_ids, /*gated=*/false) * routed_scaling_factor;
  if (fc2_latent.defined()) routed = at::matmul(routed, f32(fc2_latent).t());
  if (!shared_up.defined()) return routed;
  const at::Tensor up = at::matmul(x, f32(shared_up).t());
  return routed + at::matmul(at::square(at::relu(up)), f32(shared_down).t());
}

}  // namespace coldstart::fused_moe::ref
