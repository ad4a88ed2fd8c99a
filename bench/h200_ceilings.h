// The H200 (SXM) ceilings every benchmark reports its achieved rates against: one table, so two
// benches never compare with two different peaks. Datasheet figures (NVIDIA H200 Tensor Core GPU
// datasheet: HBM3e 4.8 TB/s; BF16 1,979 and FP8 3,958 TFLOPS with 2:4 sparsity, so 989 and
// 1,979 dense; TF32 989 with sparsity, 494 dense). Dense figures are the ceilings here: none of
// the kernels uses structured sparsity.
#pragma once

namespace coldstart::bench {

struct Ceilings {
  const char* device;          ///< the device these are for
  double hbm_bytes_per_s;      ///< HBM bandwidth, bytes/s
  double bf16_flops_per_s;     ///< dense BF16 tensor-core FLOP/s
  double fp8_flops_per_s;      ///< dense FP8 tensor-core FLOP/s
  double tf32_flops_per_s;     ///< dense TF32 tensor-core FLOP/s
};

inline constexpr Ceilings kH200{"NVIDIA H200 (SXM)", 4.8e12, 989e12, 1979e12, 494e12};

/// Percent of `ceiling` that `rate` (same unit) is.
inline double percent_of(double rate, double ceiling) { return 100.0 * rate / ceiling; }

}  // namespace coldstart::bench
