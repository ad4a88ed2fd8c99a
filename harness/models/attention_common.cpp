#include "harness/models/attention_common.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cmath>

namespace coldstart {

at::Tensor chunk_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           int64_t context, GpuSpans* spans) {
  const int64_t L = q.size(0), Hq = q.size(1), D = q.size(2), Hk = k.size(1), T = k.size(0);
  if (q.is_meta()) return at::empty({L, Hq * D}, q.options());
#if TORCH_VERSION_MAJOR >= 2
  if (spans) spans->begin();
  const int64_t group = Hq / Hk;
  auto heads_first = [&](const at::Tensor& x) {  // [T, Hk, D] -> [1, Hq, T, D]
    return x.transpose(0, 1).unsqueeze(1).expand({Hk, group, T, D}).reshape({1, Hq, T, D});
  };
  at::Tensor qh = q.transpose(0, 1).unsqueeze(0);
  at::Tensor o;
  if (context == 0) {
    o = at::scaled_dot_product_attention(qh, heads_first(k), heads_first(v), {}, 0.0, true);
  } else {
    at::Tensor mask = at::ones({L, T}, at::TensorOptions().dtype(at::kBool).device(q.device()))
                          .tril(context);
    o = at::scaled_dot_product_attention(qh, heads_first(k), heads_first(v), mask);
  }
  at::Tensor out = o.squeeze(0).transpose(0, 1).reshape({L, Hq * D});
  if (spans) spans->end();
  return out;
#else
  (void)T;
  (void)context;
  (void)spans;
  TORCH_CHECK(false, "chunk_attention needs libtorch >= 2.0 on a real device");
#endif
}

float attention_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

}  // namespace coldstart
