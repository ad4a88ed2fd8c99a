#include "harness/kernels/mamba_ssd/mamba_ssd_reference.h"

#include <ATen/ATen.h>

#include <fmt/format.h>

#include "harness/common/error.h"

namespace coldstart::mamba_ssd::ref {
namespace {

at::Tensor f64(const at::Tensor& t) { return t.to(at::kCPU).to(at::kDouble); }

}  // namespace

Recurrent ssd_recurrence(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                         const at::Tensor& B, const at::Tensor& C, const at::Tensor& D,
                         const at::Tensor& dt_bias, const std::vector<int64_t>& seq_lens,
                         const at::Tensor& initial_states, bool dt_softplus, double dt_lo,
                         double dt_hi) {
  const int64_t T = x.size(0), H = x.size(1), P = x.size(2), G = B.size(1), N = B.size(2);
  int64_t sum = 0;
  for (int64_t n : seq_lens) sum += n;
  if (sum != T) {
    throw Error(fmt::format("mamba_ssd reference: lengths sum to {}, not T = {}", sum, T));
  }
  // processed dt, [T, H]
  at::Tensor d = f64(dt);
  if (dt_bias.defined()) d = d + f64(dt_bias).unsqueeze(0);
  if (dt_softplus) d = at::where(d <= 20.0, at::log1p(at::exp(d)), d);
  d = at::clamp(d, dt_lo, dt_hi);
  const at::Tensor decay = at::exp(d * f64(A).unsqueeze(0));  // [T, H]
  const at::Tensor xx = f64(x);
  const at::Tensor bh = f64(B).repeat_interleave(H / G, 1);  // [T, H, N]
  const at::Tensor ch = f64(C).repeat_interleave(H / G, 1);
  at::Tensor dd = at::zeros({H, P}, at::kDouble);
  if (D.defined()) dd = D.dim() == 1 ? f64(D).unsqueeze(1).expand({H, P}) : f64(D);
  const int64_t S = static_cast<int64_t>(seq_lens.size());
  Recurrent r;
  r.out = at::zeros({T, H, P}, at::kDouble);
  r.final_state = at::zeros({S, H, P, N}, at::kDouble);
  int64_t t0 = 0;
  for (int64_t s = 0; s < S; ++s) {
    at::Tensor st = initial_states.defined() ? f64(initial_states[s]).clone()
                                             : at::zeros({H, P, N}, at::kDouble);
    for (int64_t t = t0; t < t0 + seq_lens[s]; ++t) {
      st.mul_(decay[t].view({H, 1, 1}));
      st.add_(d[t].view({H, 1, 1}) * xx[t].unsqueeze(-1) * bh[t].unsqueeze(1));
      r.out[t] = at::matmul(st, ch[t].unsqueeze(-1)).squeeze(-1) + dd * xx[t];
    }
    r.final_state[s] = st;
    t0 += seq_lens[s];
  }
  return r;
}

}  // namespace coldstart::mamba_ssd::ref
