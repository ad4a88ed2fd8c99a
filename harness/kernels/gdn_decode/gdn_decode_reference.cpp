#include "harness/kernels/gdn_decode/gdn_decode_reference.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "harness/common/error.h"

namespace coldstart::gdn_decode::ref {
namespace {

at::Tensor f64(const at::Tensor& t) { return t.to(at::kCPU).to(at::kDouble).contiguous(); }

std::vector<int64_t> ints(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU).to(at::kLong).contiguous().reshape({-1});
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

double softplus(double x) { return x <= 20.0 ? std::log1p(std::exp(x)) : x; }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// One token of the gated delta rule on S [V, K] (in place); returns o = S q.
at::Tensor step(at::Tensor& s, at::Tensor q, at::Tensor k, const at::Tensor& v, double a_log,
                double a, double dt_bias, double b, double scale, bool l2norm) {
  if (l2norm) {
    q = q / std::sqrt(q.dot(q).item<double>() + 1e-6);
    k = k / std::sqrt(k.dot(k).item<double>() + 1e-6);
  }
  q = q * scale;
  const double g = -std::exp(a_log) * softplus(a + dt_bias);
  s.mul_(std::exp(g));
  const at::Tensor u = (v - s.mv(k)) * sigmoid(b);
  s.add_(at::outer(u, k));
  return s.mv(q);
}

Result start(const at::Tensor& state, int64_t tokens, const GdnDims& d) {
  Result r;
  r.state = f64(state).clone();
  r.out = at::full({tokens, d.num_v_heads, d.head_v_dim},
                   std::numeric_limits<double>::quiet_NaN(), at::kDouble);
  r.written = at::zeros({state.size(0)}, at::kBool);
  return r;
}

void check_not_written(const Result& r, int64_t slot) {
  if (r.written[slot].item<bool>()) {
    throw Error(fmt::format("gdn_decode reference: slot {} is read after an earlier sequence of "
                            "the call wrote it",
                            slot));
  }
}

}  // namespace

Result decode_update(const GdnDims& d, const at::Tensor& A_log, const at::Tensor& a,
                     const at::Tensor& b, const at::Tensor& dt_bias, const at::Tensor& q,
                     const at::Tensor& k, const at::Tensor& v, const at::Tensor& state,
                     const at::Tensor& state_indices, const at::Tensor& cu_seqlens,
                     const at::Tensor& num_accepted_tokens, double scale, bool l2norm) {
  const int64_t t_all = q.size(0);
  const at::Tensor qd = f64(q), kd = f64(k), vd = f64(v), ad = f64(a), bd = f64(b);
  const at::Tensor A = f64(A_log), dtb = f64(dt_bias), s_in = f64(state);
  const at::Tensor idx = state_indices.to(at::kCPU).to(at::kLong);
  const bool varlen = cu_seqlens.defined();
  const std::vector<int64_t> cu = varlen ? ints(cu_seqlens) : std::vector<int64_t>{};
  const int64_t n = varlen ? static_cast<int64_t>(cu.size()) - 1 : t_all;
  const std::vector<int64_t> acc =
      num_accepted_tokens.defined() ? ints(num_accepted_tokens) : std::vector<int64_t>{};
  const int group = d.num_v_heads / d.num_k_heads;
  Result r = start(state, t_all, d);
  auto slot_at = [&](int64_t seq, int64_t col) {
    return idx.dim() == 1 ? idx[seq].item<int64_t>() : idx[seq][col].item<int64_t>();
  };
  for (int64_t seq = 0; seq < n; ++seq) {
    const int64_t bos = varlen ? cu[seq] : seq;
    const int64_t len = varlen ? cu[seq + 1] - cu[seq] : 1;
    if (len <= 0) continue;
    const int64_t slot0 = slot_at(seq, acc.empty() ? 0 : acc[seq] - 1);
    if (slot0 < 0) continue;
    check_not_written(r, slot0);
    std::vector<at::Tensor> s(d.num_v_heads);
    for (int hv = 0; hv < d.num_v_heads; ++hv) s[hv] = s_in[slot0][hv].clone();
    for (int64_t t = 0; t < len; ++t) {
      const int64_t tok = bos + t;
      for (int hv = 0; hv < d.num_v_heads; ++hv) {
        const int h = hv / group;
        r.out[tok][hv] = step(s[hv], qd[tok][h], kd[tok][h], vd[tok][hv], A[hv].item<double>(),
                              ad[tok][hv].item<double>(), dtb[hv].item<double>(),
                              bd[tok][hv].item<double>(), scale, l2norm);
      }
      const int64_t dst = slot_at(seq, t);
      if (dst >= 0) {
        for (int hv = 0; hv < d.num_v_heads; ++hv) r.state[dst][hv].copy_(s[hv]);
        r.written[dst] = true;
      }
    }
  }
  return r;
}

Result mtp(const GdnDims& d, const at::Tensor& mixed_qkv, const at::Tensor& a,
           const at::Tensor& b, const at::Tensor& A_log, const at::Tensor& dt_bias,
           const at::Tensor& state_indices, const at::Tensor& cu_seqlens,
           const at::Tensor& num_accepted_tokens, const at::Tensor& state,
           const at::Tensor& output_gate, const at::Tensor& norm_weight, double scale,
           double norm_eps, const std::string& activation) {
  const int64_t hk = d.num_k_heads, kdim = d.head_k_dim, vdim = d.head_v_dim;
  const at::Tensor x = f64(mixed_qkv), ad = f64(a), bd = f64(b), A = f64(A_log),
                   dtb = f64(dt_bias), s_in = f64(state), z = f64(output_gate),
                   w = f64(norm_weight);
  const at::Tensor idx = state_indices.to(at::kCPU).to(at::kLong);
  const std::vector<int64_t> cu = ints(cu_seqlens);
  const std::vector<int64_t> acc = ints(num_accepted_tokens);
  const int64_t n = idx.size(0), width = idx.size(1);
  const int group = d.num_v_heads / d.num_k_heads;
  Result r = start(state, mixed_qkv.size(0), d);
  for (int64_t req = 0; req < n; ++req) {
    const int64_t bos = cu[req], len = cu[req + 1] - cu[req];
    if (len <= 0) continue;
    const int64_t src = (acc[req] > 0 && acc[req] <= width) ? idx[req][acc[req] - 1].item<int64_t>() : 0;
    if (src <= 0 || len > kMtpMaxTokens) {
      r.out.narrow(0, bos, len).zero_();
      continue;
    }
    check_not_written(r, src);
    for (int hv = 0; hv < d.num_v_heads; ++hv) {
      at::Tensor s = s_in[src][hv].clone();
      const int64_t h = hv / group;
      for (int64_t t = 0; t < len; ++t) {
        const int64_t tok = bos + t;
        const at::Tensor row = x[tok];
        const at::Tensor o =
            step(s, row.narrow(0, h * kdim, kdim), row.narrow(0, (hk + h) * kdim, kdim),
                 row.narrow(0, 2 * hk * kdim + hv * vdim, vdim), A[hv].item<double>(),
                 ad[tok][hv].item<double>(), dtb[hv].item<double>(), bd[tok][hv].item<double>(),
                 scale, true);
        const double rstd = 1.0 / std::sqrt(o.pow(2).mean().item<double>() + norm_eps);
        const at::Tensor zg = z[tok][hv];
        const at::Tensor gate = activation == "sigmoid" ? at::sigmoid(zg) : zg * at::sigmoid(zg);
        r.out[tok][hv] = o * rstd * w * gate;
        const int64_t dst = idx[req][t].item<int64_t>();
        if (dst > 0) {
          r.state[dst][hv].copy_(s);
          r.written[dst] = true;
        }
      }
    }
  }
  return r;
}

}  // namespace coldstart::gdn_decode::ref
