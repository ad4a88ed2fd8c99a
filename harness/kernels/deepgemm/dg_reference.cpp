// float64 reference of the DeepGEMM-style kernels. See dg_reference.h.
#include "harness/kernels/deepgemm/dg_reference.h"

#include <ATen/ATen.h>

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

}  // namespace coldstart::deepgemm::reference
