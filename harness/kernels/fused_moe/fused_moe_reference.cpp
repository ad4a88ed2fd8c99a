#include "harness/kernels/fused_moe/fused_moe_reference.h"

#include <ATen/ATen.h>

#include <algorithm>
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
                         const at::Tensor& topk_weights, const at::Tensor& topk_ids) {
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
    const at::Tensor h = at::matmul(xe, w13[e].to(at::kCPU).to(at::kFloat).t());  // [P, 2N]
    const at::Tensor g = h.narrow(1, 0, n);
    const at::Tensor act = g * at::sigmoid(g) * h.narrow(1, n, n);
    const at::Tensor y = at::matmul(act, w2[e].to(at::kCPU).to(at::kFloat).t());  // [P, H]
    const at::Tensor w = tw.reshape({-1}).index_select(0, pairs).unsqueeze(1);
    out.index_add_(0, tokens, y * w);
  }
  return out;
}

}  // namespace coldstart::fused_moe::ref
