#include "harness/kernels/mamba_ops/mamba_ops_reference.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace coldstart::mamba_ops::ref {
namespace {

at::Tensor silu_of(const at::Tensor& v) { return v / (1 + at::exp(-v)); }

// One sequence: h [width - 1 + len, dim] float64 -> out [len, dim].
at::Tensor conv_rows(const at::Tensor& h, const at::Tensor& w, const at::Tensor& bias, int64_t len,
                     bool act) {
  const int64_t width = w.size(1);
  at::Tensor acc = at::zeros({len, h.size(1)}, at::kDouble);
  if (bias.defined()) acc += bias.cpu().to(at::kDouble);
  for (int64_t j = 0; j < width; ++j) acc += h.narrow(0, j, len) * w.select(1, j);
  return act ? silu_of(acc) : acc;
}

Conv run_conv(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& bias,
              const at::Tensor& conv_states, const at::Tensor& starts, const at::Tensor& lens,
              const at::Tensor& slots, const at::Tensor& has, bool act) {
  const at::Tensor x = x_in.cpu().to(at::kDouble);
  const at::Tensor w = weight.cpu().to(at::kDouble);
  const int64_t width = w.size(1);
  Conv r;
  r.out = at::full({x.size(0), x.size(1)}, std::numeric_limits<double>::quiet_NaN(), at::kDouble);
  r.conv_states = conv_states.cpu().clone();
  for (int64_t b = 0; b < slots.size(0); ++b) {
    const int64_t slot = slots[b].item<int64_t>();
    if (slot == kPadSlotId) continue;
    const int64_t s = starts[b].item<int64_t>();
    const int64_t len = lens[b].item<int64_t>();
    at::Tensor state = r.conv_states[slot].narrow(0, 0, width - 1);
    const at::Tensor hist = has[b].item<bool>() ? state.to(at::kDouble)
                                                : at::zeros({width - 1, x.size(1)}, at::kDouble);
    const at::Tensor h = at::cat({hist, x.narrow(0, s, len)});
    r.out.narrow(0, s, len).copy_(conv_rows(h, w, bias, len, act));
    state.copy_(h.narrow(0, len, width - 1).to(state.scalar_type()));
  }
  return r;
}

}  // namespace

Conv causal_conv1d_fwd(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& conv_states, const at::Tensor& query_start_loc,
                       const at::Tensor& cache_indices, const at::Tensor& has_initial_state,
                       bool silu_act) {
  const at::Tensor qsl = query_start_loc.cpu().to(at::kLong);
  const int64_t b = qsl.size(0) - 1;
  const at::Tensor starts = qsl.narrow(0, 0, b);
  const at::Tensor lens = qsl.narrow(0, 1, b) - starts;
  return run_conv(x, weight, bias, conv_states, starts, lens, cache_indices.cpu().to(at::kLong),
                  has_initial_state.cpu(), silu_act);
}

Conv causal_conv1d_update(const at::Tensor& x, const at::Tensor& conv_states,
                          const at::Tensor& weight, const at::Tensor& bias, bool silu_act,
                          const at::Tensor& conv_state_indices) {
  const int64_t b = x.size(0);
  return run_conv(x, weight, bias, conv_states, at::arange(b, at::kLong),
                  at::ones({b}, at::kLong), conv_state_indices.cpu().to(at::kLong),
                  at::ones({b}, at::kBool), silu_act);
}

Conv causal_conv1d_update_varlen_spec(const at::Tensor& x_in, const at::Tensor& conv_states,
                                      const at::Tensor& weight, const at::Tensor& bias,
                                      bool silu_act, const at::Tensor& conv_state_indices,
                                      const at::Tensor& num_accepted_tokens,
                                      const at::Tensor& query_start_loc) {
  const at::Tensor x = x_in.cpu().to(at::kDouble);
  const at::Tensor w = weight.cpu().to(at::kDouble);
  const int64_t width = w.size(1);
  const at::Tensor qsl = query_start_loc.cpu().to(at::kLong);
  const at::Tensor slots = conv_state_indices.cpu().to(at::kLong);
  const at::Tensor accepted = num_accepted_tokens.cpu().to(at::kLong);
  Conv r;
  r.out = at::full({x.size(0), x.size(1)}, std::numeric_limits<double>::quiet_NaN(), at::kDouble);
  r.conv_states = conv_states.cpu().clone();
  for (int64_t b = 0; b < slots.size(0); ++b) {
    const int64_t slot = slots[b].item<int64_t>();
    if (slot == kPadSlotId) continue;
    const int64_t start = qsl[b].item<int64_t>();
    const int64_t len = qsl[b + 1].item<int64_t>() - start;
    if (len == 0) continue;
    // The accepted history: width - 1 rows ending at the last accepted token of the last step.
    const int64_t first = accepted[b].item<int64_t>() - 1;
    at::Tensor state = r.conv_states[slot];
    const at::Tensor h =
        at::cat({state.narrow(0, first, width - 1).to(at::kDouble), x.narrow(0, start, len)});
    r.out.narrow(0, start, len).copy_(conv_rows(h, w, bias, len, silu_act));
    // Every input but the oldest stays: a later step may reject some of the new tokens.
    const int64_t kept = width - 2 + len;
    state.narrow(0, 0, kept).copy_(h.narrow(0, 1, kept).to(state.scalar_type()));
  }
  return r;
}

at::Tensor gated_rms_norm(const at::Tensor& x_in, const at::Tensor& z_in, const at::Tensor& weight,
                          double eps, bool norm_before_gate, Activation act, int64_t group_size) {
  at::Tensor x = x_in.cpu().to(at::kDouble);
  const at::Tensor z = z_in.cpu().to(at::kDouble);
  const at::Tensor w = weight.cpu().to(at::kDouble);
  at::Tensor g = at::ones_like(z);
  if (act == Activation::kSilu) g = z * at::sigmoid(z);
  if (act == Activation::kSigmoid) g = at::sigmoid(z);
  if (!norm_before_gate) x = x * g;
  const int64_t m = x.size(0);
  const int64_t n = x.size(1);
  const at::Tensor xg = x.reshape({m, n / group_size, group_size});
  const at::Tensor rstd = 1.0 / at::sqrt(xg.pow(2).mean({-1}, true) + eps);
  at::Tensor y = (xg * rstd).reshape({m, n}) * w;
  if (norm_before_gate) y = y * g;
  return y;
}

at::Tensor gather_initial_states(const at::Tensor& state, const at::Tensor& indices,
                                 const at::Tensor& has_initial_state) {
  const at::Tensor s = state.cpu();
  const at::Tensor idx = indices.cpu().to(at::kLong);
  const at::Tensor has = has_initial_state.cpu();
  std::vector<int64_t> shape = s.sizes().vec();
  shape[0] = idx.size(0);
  at::Tensor out = at::zeros(shape, s.options());
  for (int64_t i = 0; i < idx.size(0); ++i) {
    if (has[i].item<bool>()) out[i].copy_(s[idx[i].item<int64_t>()]);
  }
  return out;
}

at::Tensor scatter_states(const at::Tensor& state, const at::Tensor& src,
                          const at::Tensor& indices) {
  at::Tensor s = state.cpu().clone();
  const at::Tensor v = src.cpu().to(s.scalar_type());
  const at::Tensor idx = indices.cpu().to(at::kLong);
  for (int64_t i = 0; i < idx.size(0); ++i) s[idx[i].item<int64_t>()].copy_(v[i]);
  return s;
}

}  // namespace coldstart::mamba_ops::ref
