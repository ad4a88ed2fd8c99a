#include "harness/kernels/mamba_ssu/mamba_ssu_reference.h"

#include <ATen/ATen.h>

#include <vector>

#include <fmt/format.h>

#include "harness/common/error.h"

namespace coldstart::mamba_ssu::ref {
namespace {

at::Tensor f64(const at::Tensor& t) { return t.to(at::kCPU).to(at::kDouble).contiguous(); }

// Column 0 of a [B] or [B, W] index tensor, first `rows` entries.
std::vector<int64_t> column0(const at::Tensor& t, int64_t rows) {
  at::Tensor c = t.to(at::kCPU).to(at::kLong);
  if (c.dim() == 2) c = c.select(1, 0);
  c = c.narrow(0, 0, rows).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + rows);
}

}  // namespace

Result selective_state_update(const at::Tensor& state, const at::Tensor& x, const at::Tensor& dt,
                              const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
                              const at::Tensor& D, const at::Tensor& dt_bias, bool dt_softplus,
                              const at::Tensor& state_batch_indices,
                              const at::Tensor& dst_state_batch_indices, int64_t null_block_id) {
  const int64_t slots = state.size(0), H = state.size(1), P = state.size(2), N = state.size(3);
  const int64_t rows = x.size(0), G = B.size(1);
  std::vector<int64_t> src(rows), dst(rows);
  for (int64_t b = 0; b < rows; ++b) src[b] = dst[b] = b;
  if (state_batch_indices.defined()) {
    src = column0(state_batch_indices, rows);
    dst = dst_state_batch_indices.defined() ? column0(dst_state_batch_indices, rows) : src;
  }
  Result r;
  const at::Tensor s_in = f64(state);
  r.state = s_in.clone();
  r.written = at::zeros({slots}, at::kBool);
  std::vector<bool> live(rows);
  std::vector<int> writers(slots, 0);
  for (int64_t b = 0; b < rows; ++b) {
    live[b] = !state_batch_indices.defined() || src[b] != null_block_id;
    if (live[b]) ++writers[dst[b]];
  }
  for (int64_t b = 0; b < rows; ++b) {
    if (!live[b]) continue;
    const int others = writers[src[b]] - (dst[b] == src[b] ? 1 : 0);
    if (others > 0 || writers[dst[b]] > 1) {
      throw Error(fmt::format("mamba_ssu reference: row {} reads slot {} or stores slot {}, which "
                              "another row of the call stores to",
                              b, src[b], dst[b]));
    }
    r.written[dst[b]] = true;
  }
  // s0 [B, H, P, N]: the rows' source states, zeros for null rows.
  at::Tensor s0 = at::zeros({rows, H, P, N}, at::kDouble);
  for (int64_t b = 0; b < rows; ++b) {
    if (live[b]) s0[b].copy_(s_in[src[b]]);
  }
  at::Tensor d = f64(dt);  // [B, H, P]
  if (dt_bias.defined()) d = d + f64(dt_bias).unsqueeze(0);
  if (dt_softplus) d = at::where(d <= 20.0, at::log1p(at::exp(d)), d);
  const at::Tensor head_group = at::arange(H, at::kLong).div(H / G, "floor");
  const at::Tensor Bh = f64(B).index_select(1, head_group);  // [B, H, N]
  const at::Tensor Ch = f64(C).index_select(1, head_group);
  const at::Tensor xd = f64(x);
  const at::Tensor dA = at::exp(d.unsqueeze(-1) * f64(A).unsqueeze(0));  // [B, H, P, N]
  const at::Tensor s1 = s0 * dA + (d.unsqueeze(-1) * Bh.unsqueeze(2)) * xd.unsqueeze(-1);
  r.out = (s1 * Ch.unsqueeze(2)).sum(-1);
  if (D.defined()) r.out = r.out + xd * f64(D).unsqueeze(0);
  for (int64_t b = 0; b < rows; ++b) {
    if (live[b]) r.state[dst[b]].copy_(s1[b]);
  }
  return r;
}

}  // namespace coldstart::mamba_ssu::ref
