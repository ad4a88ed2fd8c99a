#include "harness/models/layers_common.h"

#include <ATen/ATen.h>

namespace coldstart {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor inv = at::rsqrt(xf.pow(2).mean({-1}, /*keepdim=*/true) + eps);
  return (xf * inv).to(x.scalar_type()) * weight;
}

at::Tensor gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor inv = at::rsqrt(xf.pow(2).mean({-1}, /*keepdim=*/true) + eps);
  return (xf * inv * (weight.to(at::kFloat) + 1.0)).to(x.scalar_type());
}

at::Tensor rope_table(int64_t max_positions, int64_t rot, double theta, c10::Device device) {
  const auto fopt = at::TensorOptions().dtype(at::kFloat).device(device);
  if (device.is_meta()) return at::empty({max_positions, rot}, fopt);
  at::Tensor inv_freq = at::pow(theta, -at::arange(0, rot, 2, fopt) / static_cast<double>(rot));
  at::Tensor freqs = at::outer(at::arange(max_positions, fopt), inv_freq);
  return at::cat({freqs.cos(), freqs.sin()}, -1).contiguous();
}

at::Tensor neox_rope(const at::Tensor& x, const at::Tensor& cos_sin) {
  const int64_t rot = cos_sin.size(-1), half = rot / 2, D = x.size(-1);
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor cos = cos_sin.narrow(-1, 0, half), sin = cos_sin.narrow(-1, half, half);
  at::Tensor x1 = xf.narrow(-1, 0, half), x2 = xf.narrow(-1, half, half);
  std::vector<at::Tensor> parts = {x1 * cos - x2 * sin, x2 * cos + x1 * sin};
  if (rot < D) parts.push_back(xf.narrow(-1, rot, D - rot));
  return at::cat(parts, -1).to(x.scalar_type());
}

WeightMaker::WeightMaker(c10::Device device) : device_(device), meta_(device.is_meta()) {}

at::Tensor WeightMaker::normal(std::vector<int64_t> shape, double std) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kBFloat16).device(device_));
  if (!meta_) t.normal_(0.0, std);
  bytes_ += t.numel() * 2;
  return t;
}

at::Tensor WeightMaker::ones(int64_t n) {
  at::Tensor t = at::empty({n}, at::TensorOptions().dtype(at::kBFloat16).device(device_));
  if (!meta_) t.fill_(1.0);
  bytes_ += n * 2;
  return t;
}

at::Tensor WeightMaker::zeros(int64_t n) {
  at::Tensor t = at::empty({n}, at::TensorOptions().dtype(at::kBFloat16).device(device_));
  if (!meta_) t.zero_();
  bytes_ += n * 2;
  return t;
}

}  // namespace coldstart
