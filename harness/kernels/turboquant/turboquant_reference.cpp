#include "harness/kernels/turboquant/turboquant_reference.h"

#include <ATen/ATen.h>
#include <c10/util/Half.h>

#include <cmath>

#include <fmt/format.h>

namespace coldstart::tq::ref {
namespace {

constexpr float kPositive[8] = {0.1284f, 0.3881f, 0.6568f, 0.9424f,
                                1.2562f, 1.6181f, 2.0690f, 2.7326f};

float centroid(int i) { return i >= 8 ? kPositive[i - 8] : -kPositive[7 - i]; }

// The 15 decision boundaries, ascending, computed in float exactly as the kernel does.
std::vector<double> boundaries() {
  std::vector<double> b;
  for (int k = 6; k >= 0; --k) b.push_back(-static_cast<double>((kPositive[k] + kPositive[k + 1]) * 0.5f));
  b.push_back(0.0);
  for (int k = 0; k < 7; ++k) b.push_back(static_cast<double>((kPositive[k] + kPositive[k + 1]) * 0.5f));
  return b;
}

int64_t last_dim(const at::Tensor& t, const char* what) {
  if (t.dim() < 1) throw Error(fmt::format("turboquant reference: {} must have a last dimension", what));
  const int64_t d = t.size(-1);
  if (d <= 0 || (d & (d - 1)) != 0) {
    throw Error(fmt::format("turboquant reference: {} last dimension {} is not a power of two", what, d));
  }
  return d;
}

std::vector<int64_t> lead_shape(const at::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end() - 1);
}

uint16_t half_bits(float f) { return c10::Half(f).x; }
float half_value(uint16_t bits) { return static_cast<float>(c10::Half(bits, c10::Half::from_bits())); }

}  // namespace

at::Tensor hadamard(int64_t head_dim) {
  at::Tensor h = at::ones({head_dim, head_dim}, at::kDouble);
  auto a = h.accessor<double, 2>();
  for (int64_t i = 0; i < head_dim; ++i) {
    for (int64_t j = 0; j < head_dim; ++j) {
      a[i][j] = (__builtin_popcountll(static_cast<unsigned long long>(i & j)) & 1) ? -1.0 : 1.0;
    }
  }
  return h / std::sqrt(static_cast<double>(head_dim));
}

at::Tensor centroids() {
  at::Tensor c = at::empty({16}, at::kDouble);
  auto a = c.accessor<double, 1>();
  for (int i = 0; i < 16; ++i) a[i] = centroid(i);
  return c;
}

QuantizedKeys quantize_keys(const at::Tensor& key) {
  const int64_t d = last_dim(key, "key");
  const at::Tensor x = key.detach().to(at::kCPU).to(at::kDouble).reshape({-1, d});
  const at::Tensor y = at::matmul(x, hadamard(d)).contiguous();  // rows: (H k)^T, H symmetric
  const at::Tensor norm = y.norm(2, {1}).contiguous();
  const int64_t rows = y.size(0);
  at::Tensor idx = at::empty({rows, d}, at::kByte);
  at::Tensor norm_h = at::empty({rows}, at::kHalf);
  const std::vector<double> bounds = boundaries();
  const double* yp = y.data_ptr<double>();
  const double* np = norm.data_ptr<double>();
  uint8_t* ip = idx.data_ptr<uint8_t>();
  c10::Half* hp = norm_h.data_ptr<c10::Half>();
  for (int64_t r = 0; r < rows; ++r) {
    const double n = np[r];
    hp[r] = c10::Half(static_cast<float>(n));
    const double to_unit = n > 0 ? std::sqrt(static_cast<double>(d)) / n : 0.0;
    for (int64_t i = 0; i < d; ++i) {
      const double u = yp[r * d + i] * to_unit;
      int count = 0;
      for (double b : bounds) count += u > b ? 1 : 0;
      ip[r * d + i] = static_cast<uint8_t>(count);
    }
  }
  std::vector<int64_t> lead = lead_shape(key);
  std::vector<int64_t> full = lead;
  full.push_back(d);
  return {idx.view(full), norm_h.view(lead)};
}

at::Tensor dequantize_keys(const QuantizedKeys& q) {
  const int64_t d = last_dim(q.indices, "key indices");
  const at::Tensor idx = q.indices.to(at::kCPU).to(at::kLong).reshape({-1, d});
  const at::Tensor c = centroids().index_select(0, idx.reshape({-1})).view({-1, d});
  const at::Tensor unit = c / c.norm(2, {1}, /*keepdim=*/true);
  const at::Tensor n = q.norm.to(at::kCPU).to(at::kDouble).reshape({-1, 1});
  return at::matmul(unit * n, hadamard(d)).view(q.indices.sizes());
}

QuantizedValues quantize_values(const at::Tensor& value) {
  const int64_t d = last_dim(value, "value");
  const at::Tensor v = value.detach().to(at::kCPU).to(at::kFloat).reshape({-1, d}).contiguous();
  const int64_t rows = v.size(0);
  at::Tensor idx = at::empty({rows, d}, at::kByte);
  at::Tensor scale = at::empty({rows}, at::kHalf);
  at::Tensor zero = at::empty({rows}, at::kHalf);
  const float* vp = v.data_ptr<float>();
  uint8_t* ip = idx.data_ptr<uint8_t>();
  for (int64_t r = 0; r < rows; ++r) {
    float lo = vp[r * d];
    float hi = lo;
    for (int64_t i = 1; i < d; ++i) {
      lo = std::fmin(lo, vp[r * d + i]);
      hi = std::fmax(hi, vp[r * d + i]);
    }
    const volatile float range = hi - lo;  // float arithmetic, as the kernel
    const float raw_scale = range / 15.0f;
    const uint16_t sb = half_bits(raw_scale);
    const uint16_t zb = half_bits(lo);
    scale.data_ptr<c10::Half>()[r] = c10::Half(sb, c10::Half::from_bits());
    zero.data_ptr<c10::Half>()[r] = c10::Half(zb, c10::Half::from_bits());
    const float s = half_value(sb);
    const float z = half_value(zb);
    for (int64_t i = 0; i < d; ++i) {
      float qv = 0.0f;
      if (s > 0.0f) {
        const volatile float t = (vp[r * d + i] - z) / s;
        qv = std::nearbyint(static_cast<float>(t));
      }
      qv = std::fmin(std::fmax(qv, 0.0f), 15.0f);
      ip[r * d + i] = static_cast<uint8_t>(qv);
    }
  }
  std::vector<int64_t> lead = lead_shape(value);
  std::vector<int64_t> full = lead;
  full.push_back(d);
  return {idx.view(full), scale.view(lead), zero.view(lead)};
}

at::Tensor dequantize_values(const QuantizedValues& q) {
  const at::Tensor idx = q.indices.to(at::kCPU).to(at::kDouble);
  const at::Tensor s = q.scale.to(at::kCPU).to(at::kDouble).unsqueeze(-1);
  const at::Tensor z = q.zero.to(at::kCPU).to(at::kDouble).unsqueeze(-1);
  return z + s * idx;
}

at::Tensor roundtrip_keys(const at::Tensor& key) { return dequantize_keys(quantize_keys(key)); }
at::Tensor roundtrip_values(const at::Tensor& value) {
  return dequantize_values(quantize_values(value));
}

at::Tensor pack_slots(const TqLayout& l, const QuantizedKeys& k, const QuantizedValues& v) {
  const int64_t d = l.head_dim;
  const at::Tensor ki = k.indices.to(at::kCPU).reshape({-1, d}).contiguous();
  const at::Tensor vi = v.indices.to(at::kCPU).reshape({-1, d}).contiguous();
  const at::Tensor kn = k.norm.to(at::kCPU).reshape({-1}).contiguous();
  const at::Tensor vs = v.scale.to(at::kCPU).reshape({-1}).contiguous();
  const at::Tensor vz = v.zero.to(at::kCPU).reshape({-1}).contiguous();
  const int64_t rows = ki.size(0);
  at::Tensor out = at::zeros({rows, l.slot_bytes}, at::kByte);
  uint8_t* o = out.data_ptr<uint8_t>();
  const uint8_t* kp = ki.data_ptr<uint8_t>();
  const uint8_t* vp = vi.data_ptr<uint8_t>();
  auto put16 = [](uint8_t* p, uint16_t x) {
    p[0] = static_cast<uint8_t>(x & 0xff);
    p[1] = static_cast<uint8_t>(x >> 8);
  };
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* s = o + r * l.slot_bytes;
    for (int64_t i = 0; i < d / 2; ++i) {
      s[i] = static_cast<uint8_t>(kp[r * d + 2 * i] | (kp[r * d + 2 * i + 1] << 4));
      s[l.key_bytes + i] = static_cast<uint8_t>(vp[r * d + 2 * i] | (vp[r * d + 2 * i + 1] << 4));
    }
    put16(s + d / 2, kn.data_ptr<c10::Half>()[r].x);
    put16(s + l.key_bytes + d / 2, vs.data_ptr<c10::Half>()[r].x);
    put16(s + l.key_bytes + d / 2 + 2, vz.data_ptr<c10::Half>()[r].x);
  }
  std::vector<int64_t> shape = lead_shape(k.indices);
  shape.push_back(l.slot_bytes);
  return out.view(shape);
}

std::pair<QuantizedKeys, QuantizedValues> unpack_slots(const TqLayout& l, const at::Tensor& slots) {
  if (slots.scalar_type() != at::kByte || slots.dim() < 1 || slots.size(-1) != l.slot_bytes) {
    throw Error(fmt::format("turboquant reference: slots must be uint8 [..., {}]", l.slot_bytes));
  }
  const int64_t d = l.head_dim;
  const at::Tensor sl = slots.to(at::kCPU).reshape({-1, l.slot_bytes}).contiguous();
  const int64_t rows = sl.size(0);
  at::Tensor ki = at::empty({rows, d}, at::kByte);
  at::Tensor vi = at::empty({rows, d}, at::kByte);
  at::Tensor kn = at::empty({rows}, at::kHalf);
  at::Tensor vs = at::empty({rows}, at::kHalf);
  at::Tensor vz = at::empty({rows}, at::kHalf);
  const uint8_t* p = sl.data_ptr<uint8_t>();
  auto get16 = [](const uint8_t* q) {
    return c10::Half(static_cast<uint16_t>(q[0] | (q[1] << 8)), c10::Half::from_bits());
  };
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* s = p + r * l.slot_bytes;
    for (int64_t i = 0; i < d / 2; ++i) {
      ki.data_ptr<uint8_t>()[r * d + 2 * i] = s[i] & 15;
      ki.data_ptr<uint8_t>()[r * d + 2 * i + 1] = s[i] >> 4;
      vi.data_ptr<uint8_t>()[r * d + 2 * i] = s[l.key_bytes + i] & 15;
      vi.data_ptr<uint8_t>()[r * d + 2 * i + 1] = s[l.key_bytes + i] >> 4;
    }
    kn.data_ptr<c10::Half>()[r] = get16(s + d / 2);
    vs.data_ptr<c10::Half>()[r] = get16(s + l.key_bytes + d / 2);
    vz.data_ptr<c10::Half>()[r] = get16(s + l.key_bytes + d / 2 + 2);
  }
  std::vector<int64_t> lead = lead_shape(slots);
  std::vector<int64_t> full = lead;
  full.push_back(d);
  return {QuantizedKeys{ki.view(full), kn.view(lead)},
          QuantizedValues{vi.view(full), vs.view(lead), vz.view(lead)}};
}

at::Tensor gather_slots(const TqLayout& l, const at::Tensor& cache,
                        const at::Tensor& block_table_row, int64_t num_tokens) {
  const at::Tensor c = cache.to(at::kCPU).contiguous().view({-1, l.num_kv_heads, l.slot_bytes});
  const at::Tensor slots = kernels::ref::token_slots(block_table_row, l.block_size, 0, num_tokens);
  return c.index_select(0, slots);
}

std::pair<at::Tensor, at::Tensor> dequant_sequence(const TqLayout& l, const at::Tensor& cache,
                                                   const at::Tensor& block_table_row,
                                                   int64_t num_tokens) {
  auto q = unpack_slots(l, gather_slots(l, cache, block_table_row, num_tokens));
  return {dequantize_keys(q.first), dequantize_values(q.second)};
}

Attention decode_attention(const at::Tensor& q, const std::vector<at::Tensor>& keys,
                           const std::vector<at::Tensor>& values, double sm_scale) {
  return kernels::ref::decode_attention("turboquant", q, keys, values, sm_scale);
}

}  // namespace coldstart::tq::ref
