// libtorch reference of the DeepGEMM-style kernels' math in float64, for tests (cs_kernels_reference).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace coldstart::deepgemm::reference {

/// OCP FP8 e4m3 bytes (uint8, any shape, any device) -> float64 values (NaN for 0x7f / 0xff).
at::Tensor e4m3_to_double(const at::Tensor& bytes);

/// Random e4m3 bytes of `shape` (uint8, on the CPU, from `seed`), every finite code equally
/// likely, never NaN; `max_exponent` (0..15) caps the biased exponent so sums stay moderate.
at::Tensor random_e4m3(std::vector<int64_t> shape, uint64_t seed, int max_exponent = 10);

/// D = (A * sfa) x (B * sfb)^T in float64: a uint8 [M, K], sfa float [M, K/128] (row-major, per
/// token and 128-column group), b uint8 [N, K], sfb float [ceil(N/128), K/128] -> [M, N].
at::Tensor fp8_gemm(const at::Tensor& a, const at::Tensor& sfa, const at::Tensor& b, const at::Tensor& sfb);

}  // namespace coldstart::deepgemm::reference
