#include "harness/kernels/reference_util.h"

#include <ATen/ATen.h>

#include <limits>

#include <fmt/format.h>

#include "harness/common/error.h"

namespace coldstart::kernels::ref {

at::Tensor token_slots(const at::Tensor& block_table_row, int64_t block_size, int64_t first,
                       int64_t num_tokens) {
  const at::Tensor bt = block_table_row.to(at::kCPU).to(at::kLong).contiguous();
  at::Tensor slots = at::empty({num_tokens}, at::kLong);
  const int64_t* row = bt.data_ptr<int64_t>();
  int64_t* out = slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < num_tokens; ++i) {
    const int64_t t = first + i;
    out[i] = row[t / block_size] * block_size + t % block_size;
  }
  return slots;
}

Attention decode_attention(const char* family, const at::Tensor& q,
                           const std::vector<at::Tensor>& keys,
                           const std::vector<at::Tensor>& values, double sm_scale) {
  const at::Tensor qd = q.to(at::kCPU).to(at::kDouble);
  const int64_t b = qd.size(0);
  const int64_t hq = qd.size(1);
  const int64_t d = qd.size(2);
  if (static_cast<int64_t>(keys.size()) != b || static_cast<int64_t>(values.size()) != b) {
    throw Error(fmt::format(
        "{} reference: decode_attention needs one key and value tensor per sequence", family));
  }
  Attention a;
  a.out = at::zeros({b, hq, d}, at::kDouble);
  a.lse = at::full({b, hq}, -std::numeric_limits<double>::infinity(), at::kDouble);
  for (int64_t i = 0; i < b; ++i) {
    const at::Tensor k = keys[i].to(at::kCPU).to(at::kDouble);  // [L, Hk, D]
    const at::Tensor v = values[i].to(at::kCPU).to(at::kDouble);
    if (k.size(0) == 0) continue;
    const int64_t group = hq / k.size(1);
    const at::Tensor kx = k.repeat_interleave(group, 1).permute({1, 0, 2});  // [Hq, L, D]
    const at::Tensor vx = v.repeat_interleave(group, 1).permute({1, 0, 2});
    const at::Tensor scores =
        at::matmul(kx, qd[i].unsqueeze(-1)).squeeze(-1) * sm_scale;  // [Hq, L]
    const at::Tensor lse = at::logsumexp(scores, {1});
    const at::Tensor p = at::exp(scores - lse.unsqueeze(1));
    a.out[i].copy_(at::matmul(p.unsqueeze(1), vx).squeeze(1));
    a.lse[i].copy_(lse);
  }
  return a;
}

}  // namespace coldstart::kernels::ref
