#include "harness/kernels/paged/paged_reference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace coldstart::paged::ref {
namespace {

// Values of the codes 0x00..0x7e (non-negative finite, ascending).
const std::array<double, 127>& positive_table() {
  static const std::array<double, 127> table = [] {
    std::array<double, 127> t{};
    for (int c = 0; c < 127; ++c) t[c] = e4m3_value(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

}  // namespace

double e4m3_value(uint8_t byte) {
  const int e = (byte >> 3) & 0xf;
  const int m = byte & 0x7;
  const double sign = (byte & 0x80) ? -1.0 : 1.0;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), -9);
  return sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

uint8_t e4m3_from_float(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7f);
  const double a = std::fabs(static_cast<double>(x));
  const auto& t = positive_table();
  if (a >= t[126]) return static_cast<uint8_t>(sign | 126);  // saturate (448)
  // First code whose value is >= a; the answer is it or the one below.
  const int hi = static_cast<int>(std::lower_bound(t.begin(), t.end(), a) - t.begin());
  if (t[hi] == a) return static_cast<uint8_t>(sign | hi);
  const int lo = hi - 1;
  const double dlo = a - t[lo];
  const double dhi = t[hi] - a;
  int code;
  if (dlo < dhi) {
    code = lo;
  } else if (dhi < dlo) {
    code = hi;
  } else {
    code = (lo % 2 == 0) ? lo : hi;  // tie: even mantissa (the code's low bit)
  }
  return static_cast<uint8_t>(sign | code);
}

at::Tensor cache_elements(const PagedLayout& layout, const at::Tensor& x, float scale) {
  const at::Tensor xb = x.detach().to(at::kCPU).to(at::kBFloat16).contiguous();
  if (layout.dtype == CacheDtype::kBF16) return xb.clone();
  const at::Tensor xf = xb.to(at::kFloat).contiguous();
  at::Tensor out = at::empty(xf.sizes(), at::kByte);
  const float* in = xf.data_ptr<float>();
  uint8_t* o = out.data_ptr<uint8_t>();
  for (int64_t i = 0; i < xf.numel(); ++i) {
    const volatile float q = in[i] / scale;  // float32 division, as the kernel
    o[i] = e4m3_from_float(q);
  }
  return out;
}

at::Tensor element_values(const PagedLayout& layout, const at::Tensor& elements, double scale) {
  const at::Tensor e = elements.detach().to(at::kCPU).contiguous();
  if (layout.dtype == CacheDtype::kBF16) {
    if (e.scalar_type() != at::kBFloat16) {
      throw Error("paged reference: bf16 cache elements must be bfloat16");
    }
    return e.to(at::kDouble);
  }
  if (e.scalar_type() != at::kByte) throw Error("paged reference: fp8 cache elements must be uint8");
  at::Tensor out = at::empty(e.sizes(), at::kDouble);
  const uint8_t* in = e.data_ptr<uint8_t>();
  double* o = out.data_ptr<double>();
  for (int64_t i = 0; i < e.numel(); ++i) o[i] = e4m3_value(in[i]) * scale;
  return out;
}

std::pair<at::Tensor, at::Tensor> gather_sequence(const PagedLayout& l, const at::Tensor& kv_cache,
                                                  const at::Tensor& block_table_row,
                                                  int64_t num_tokens, double k_scale,
                                                  double v_scale) {
  const at::Tensor c = kv_cache.detach().to(at::kCPU).contiguous();
  if (c.dim() != 5 || c.size(0) != 2) {
    throw Error("paged reference: kv_cache must be [2, num_blocks, block_size, Hk, D]");
  }
  const at::Tensor slots = kernels::ref::token_slots(block_table_row, l.block_size, 0, num_tokens);
  const at::Tensor k = c[0].reshape({-1, l.num_kv_heads, l.head_dim}).index_select(0, slots);
  const at::Tensor v = c[1].reshape({-1, l.num_kv_heads, l.head_dim}).index_select(0, slots);
  return {element_values(l, k, k_scale), element_values(l, v, v_scale)};
}

Attention decode_attention(const at::Tensor& q, const std::vector<at::Tensor>& keys,
                           const std::vector<at::Tensor>& values, double sm_scale) {
  return kernels::ref::decode_attention("paged", q, keys, values, sm_scale);
}

at::Tensor prefill_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                             double sm_scale) {
  const at::Tensor qd = q.to(at::kCPU).to(at::kDouble);          // [L, Hq, D]
  const at::Tensor k = keys.to(at::kCPU).to(at::kDouble);        // [S, Hk, D]
  const at::Tensor v = values.to(at::kCPU).to(at::kDouble);
  const int64_t l = qd.size(0);
  const int64_t hq = qd.size(1);
  const int64_t s = k.size(0);
  if (s < l) throw Error(fmt::format("paged reference: {} keys for a chunk of {} queries", s, l));
  const int64_t group = hq / k.size(1);
  const at::Tensor kx = k.repeat_interleave(group, 1).permute({1, 0, 2});  // [Hq, S, D]
  const at::Tensor vx = v.repeat_interleave(group, 1).permute({1, 0, 2});
  const at::Tensor qx = qd.permute({1, 0, 2});                              // [Hq, L, D]
  at::Tensor scores = at::matmul(qx, kx.transpose(1, 2)) * sm_scale;       // [Hq, L, S]
  // Query i sees keys j <= S - L + i.
  const at::Tensor i = at::arange(l, at::kLong).unsqueeze(1);
  const at::Tensor j = at::arange(s, at::kLong).unsqueeze(0);
  const at::Tensor masked = j > (i + (s - l));
  scores = scores.masked_fill(masked.unsqueeze(0), -std::numeric_limits<double>::infinity());
  const at::Tensor p = at::softmax(scores, -1);
  return at::matmul(p, vx).permute({1, 0, 2}).contiguous();  // [L, Hq, D]
}

}  // namespace coldstart::paged::ref
