// float64 reference of the DeepGEMM-style kernels. See dg_reference.h.
#include "harness/kernels/deepgemm/dg_reference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace coldstart::deepgemm::reference {

at::Tensor e4m3_to_double(const at::Tensor& bytes) {
  std::vector<double> lut(256);
  for (int v = 0; v < 256; ++v) {
    const int sign = v >> 7, exp = (v >> 3) & 15, man = v & 7;
    double mag;
    if (exp == 15 && man == 7) {
      mag = std::nan("");
    } else if (exp == 0) {
      mag = std::ldexp(man, -9);
    } else {
      mag = std::ldexp(1.0 + man / 8.0, exp - 7);
    }
    lut[v] = sign ? -mag : mag;
  }
  const at::Tensor table = at::tensor(lut, at::kDouble).to(bytes.device());
  return table.index_select(0, bytes.reshape({-1}).to(at::kLong)).reshape(bytes.sizes());
}

at::Tensor random_e4m3(std::vector<int64_t> shape, uint64_t seed, int max_exponent) {
  at::Tensor out = at::empty(shape, at::kByte);
  uint8_t* p = out.data_ptr<uint8_t>();
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> sign(0, 1), exp(0, max_exponent), man(0, 7);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int e = exp(gen), m = man(gen);
    if (e == 15 && m == 7) m = 6;  // never NaN
    p[i] = static_cast<uint8_t>((sign(gen) << 7) | (e << 3) | m);
  }
  return out;
}

at::Tensor fp8_gemm(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb) {
  const int64_t n = b.size(0), k = a.size(1);
  const at::Tensor af = e4m3_to_double(a) * sfa.to(at::kDouble).repeat_interleave(128, 1).narrow(1, 0, k);
  const at::Tensor sb = sfb.to(at::kDouble).repeat_interleave(128, 0).narrow(0, 0, n).repeat_interleave(128, 1).narrow(1, 0, k);
  const at::Tensor bf = e4m3_to_double(b) * sb;
  return at::matmul(af, bf.t());
}

HcPrenorm hc_prenorm_gemm(const at::Tensor& x, const at::Tensor& fn, int num_splits) {
  const int64_t m = x.size(0), k = x.size(1), n = fn.size(0);
  const int64_t nkb = k / 64, per = nkb / num_splits, rem = nkb % num_splits;
  const at::Tensor xd = x.to(at::kDouble), fd = fn.to(at::kDouble);
  const auto opts = xd.options();
  HcPrenorm r{at::zeros({num_splits, m, n}, opts), at::zeros({num_splits, m}, opts), at::zeros({num_splits, m, n}, opts)};
  for (int64_t s = 0; s < num_splits; ++s) {
    const int64_t first = s * per + std::min(s, rem), blocks = per + (s < rem ? 1 : 0);
    if (blocks == 0) continue;
    const at::Tensor xs = xd.narrow(1, first * 64, blocks * 64), fs = fd.narrow(1, first * 64, blocks * 64);
    r.out_mul[s].copy_(at::matmul(xs, fs.t()));
    r.sqrsum[s].copy_(xs.square().sum(1));
    r.out_mul_l2[s].copy_(at::matmul(xs.square(), fs.square().t()).sqrt());
  }
  return r;
}

IndexerLogits mqa_logits(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& kv_sf, const at::Tensor& weights) {
  const int64_t tokens = q.size(0), heads = q.size(1), dim = q.size(2), kv_len = kv.size(0);
  const at::Tensor k = e4m3_to_double(kv), sf = kv_sf.to(at::kDouble);
  const at::Tensor w = weights.to(at::kDouble);
  IndexerLogits r{at::empty({tokens, kv_len}, k.options()), at::empty({tokens, kv_len}, k.options())};
  for (int64_t t0 = 0; t0 < tokens; t0 += 64) {
    const int64_t nt = std::min<int64_t>(64, tokens - t0);
    const at::Tensor qd = e4m3_to_double(q.narrow(0, t0, nt)).reshape({nt * heads, dim});
    const at::Tensor wc = w.narrow(0, t0, nt).unsqueeze(2);  // [nt, H, 1]
    const at::Tensor dots = at::matmul(qd, k.t()).view({nt, heads, kv_len});
    const at::Tensor mags = at::matmul(qd.abs(), k.abs().t()).view({nt, heads, kv_len});
    r.logits.narrow(0, t0, nt).copy_((dots.clamp_min(0) * wc).sum(1) * sf);
    r.magnitude.narrow(0, t0, nt).copy_((mags * wc.abs()).sum(1) * sf);
  }
  return r;
}

IndexerLogits paged_mqa_logits(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& weights,
                               const at::Tensor& context_lens, const at::Tensor& block_table, int block_kv) {
  const int64_t batch = q.size(0), next_n = q.size(1), heads = q.size(2), dim = q.size(3);
  const at::Tensor lens = context_lens.to(at::kCPU).to(at::kLong);
  const at::Tensor table = block_table.to(at::kCPU).to(at::kLong);
  const int64_t width = batch == 0 ? 0 : lens.select(1, next_n - 1).max().item<int64_t>();
  const auto opts = q.options().dtype(at::kDouble);
  IndexerLogits r{at::full({batch * next_n, width}, std::nan(""), opts), at::full({batch * next_n, width}, std::nan(""), opts)};
  const at::Tensor w = weights.to(at::kDouble);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens[b][next_n - 1].item<int64_t>();
    if (len <= 0) continue;
    const int64_t nblk = (len + block_kv - 1) / block_kv;
    const at::Tensor idx = table[b].narrow(0, 0, nblk).to(kv_cache.device());
    const at::Tensor blocks = kv_cache.index_select(0, idx);  // [nblk, block_kv * (D + 4)]
    const at::Tensor k = e4m3_to_double(blocks.narrow(1, 0, block_kv * dim).contiguous()).reshape({nblk * block_kv, dim});
    const at::Tensor sf = blocks.narrow(1, block_kv * dim, block_kv * 4).contiguous().view(at::kFloat).reshape({-1});
    const at::Tensor kk = k.narrow(0, 0, len);
    const at::Tensor sfd = sf.narrow(0, 0, len).to(at::kDouble);
    const at::Tensor qd = e4m3_to_double(q[b]).reshape({next_n * heads, dim});
    const at::Tensor wc = w.narrow(0, b * next_n, next_n).unsqueeze(2);  // [next_n, H, 1]
    const at::Tensor dots = at::matmul(qd, kk.t()).view({next_n, heads, len});
    const at::Tensor mags = at::matmul(qd.abs(), kk.abs().t()).view({next_n, heads, len});
    r.logits.narrow(0, b * next_n, next_n).narrow(1, 0, len).copy_((dots.clamp_min(0) * wc).sum(1) * sfd);
    r.magnitude.narrow(0, b * next_n, next_n).narrow(1, 0, len).copy_((mags * wc.abs()).sum(1) * sfd);
  }
  return r;
}

}  // namespace coldstart::deepgemm::reference
