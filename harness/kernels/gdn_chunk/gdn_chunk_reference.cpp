#include "harness/kernels/gdn_chunk/gdn_chunk_reference.h"

#include <ATen/ATen.h>

#include <fmt/format.h>

#include "harness/common/error.h"

namespace coldstart::gdn_chunk::ref {
namespace {

at::Tensor f64(const at::Tensor& t) { return t.to(at::kCPU).to(at::kDouble); }

}  // namespace

PostConv post_conv(const GdnDims& d, const at::Tensor& conv_out, const at::Tensor& a,
                   const at::Tensor& b, const at::Tensor& A_log, const at::Tensor& dt_bias) {
  const int64_t T = conv_out.size(0);
  const int64_t hk = d.num_k_heads, hv = d.num_v_heads, K = d.head_k_dim, V = d.head_v_dim;
  const at::Tensor x = f64(conv_out);
  auto l2 = [](const at::Tensor& t) { return t / at::sqrt((t * t).sum(-1, true) + 1e-6); };
  PostConv r;
  r.q = l2(x.narrow(1, 0, hk * K).reshape({T, hk, K}));
  r.k = l2(x.narrow(1, hk * K, hk * K).reshape({T, hk, K}));
  r.v = x.narrow(1, 2 * hk * K, hv * V).reshape({T, hv, V});
  const at::Tensor z = f64(a) + f64(dt_bias).unsqueeze(0);
  const at::Tensor sp = at::where(z > 20.0, z, at::log1p(at::exp(z)));
  r.g = -at::exp(f64(A_log)).unsqueeze(0) * sp;
  r.beta = at::sigmoid(f64(b));
  return r;
}

Recurrent gated_delta_rule(const GdnDims& d, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const at::Tensor& g, const at::Tensor& beta,
                           double scale, const std::vector<int>& seq_lens,
                           const at::Tensor& initial_state) {
  const int64_t T = q.size(0);
  const int64_t hv = d.num_v_heads, K = d.head_k_dim, V = d.head_v_dim;
  const int64_t group = hv / d.num_k_heads;
  int64_t sum = 0;
  for (int n : seq_lens) sum += n;
  if (sum != T) {
    throw Error(fmt::format("gdn_chunk reference: lengths sum to {}, not T = {}", sum, T));
  }
  // key heads expanded to value heads: value head h reads key head h / group
  const at::Tensor qh = f64(q).repeat_interleave(group, 1) * scale;  // [T, Hv, K]
  const at::Tensor kh = f64(k).repeat_interleave(group, 1);
  const at::Tensor vv = f64(v), gg = f64(g), bb = f64(beta);
  const int64_t S = static_cast<int64_t>(seq_lens.size());
  Recurrent r;
  r.out = at::zeros({T, hv, V}, at::kDouble);
  r.final_state = at::zeros({S, hv, V, K}, at::kDouble);
  const at::Tensor h0 = initial_state.defined() ? f64(initial_state) : r.final_state.clone();
  int64_t t0 = 0;
  for (int64_t n = 0; n < S; ++n) {
    at::Tensor st = h0[n].clone();  // [Hv, V, K]
    for (int64_t t = t0; t < t0 + seq_lens[n]; ++t) {
      st.mul_(at::exp(gg[t]).view({hv, 1, 1}));
      const at::Tensor kt = kh[t];                                      // [Hv, K]
      const at::Tensor sk = at::matmul(st, kt.unsqueeze(-1)).squeeze(-1);  // [Hv, V]
      const at::Tensor u = bb[t].unsqueeze(-1) * (vv[t] - sk);
      st.add_(u.unsqueeze(-1) * kt.unsqueeze(1));
      r.out[t] = at::matmul(st, qh[t].unsqueeze(-1)).squeeze(-1);
    }
    r.final_state[n] = st;
    t0 += seq_lens[n];
  }
  return r;
}

}  // namespace coldstart::gdn_chunk::ref
