// mamba_gated_rms_norm: gated RMSNorm over groups of N columns,
//   norm_before_gate: y = rmsnorm(x) * w * act(z);   else: y = rmsnorm(x * act(z)) * w
// (vLLM's layer_norm_fwd_kernel with IS_RMS_NORM, no bias, called by rmsnorm_fn / RMSNormGated:
// vllm/model_executor/layers/fla/ops/layernorm_guard.py; commit in mamba_ops_kernels.h).
//
// Grid (cdiv(M, ROWS_PER_BLOCK), ngroups); NUM_WARPS = min(max(BLOCK_N / 256, 1), 8) warps (vLLM's
// num_warps heuristic, a function of the constexpr BLOCK_N). A CTA normalizes ROWS_PER_BLOCK rows
// of one group; thread t holds columns t, t + threads, ... of the row.
// Constexprs (vLLM's): N (group size), BLOCK_N (next power of two >= N), ROWS_PER_BLOCK,
// HAS_BIAS (0), HAS_Z (1), NORM_BEFORE_GATE, IS_RMS_NORM (1), ACTIVATION (0 none, 1 "swish" =
// silu, 2 "sigmoid"), W_DTYPE (weight dtype code, derived from the weight pointer's dtype).
// Arguments, in order:
//   x       bf16, row r, column c at x[r*stride_x_row + c]
//   y       bf16 output, y[r*stride_y_row + c]
//   weight  W_DTYPE [ngroups * N]
//   z       bf16 gate, z[r*stride_z_row + c]
//   rstd    float32 [ngroups * M] (1/rms of each row and group) or null (not written)
//   stride_x_row, stride_y_row, stride_z_row   int64, elements
//   M       int32 rows
//   eps     float32

#if HAS_BIAS
#error "mamba_gated_rms_norm: HAS_BIAS is not supported (RMSNormGated has no bias)"
#endif
#if !IS_RMS_NORM
#error "mamba_gated_rms_norm: only IS_RMS_NORM=1 (RMSNormGated)"
#endif

constexpr int kNumWarps = (BLOCK_N / 256) < 1 ? 1 : ((BLOCK_N / 256) > 8 ? 8 : (BLOCK_N / 256));
constexpr int kThreads = kNumWarps * 32;
constexpr int kPerThread = (BLOCK_N + kThreads - 1) / kThreads;

__device__ __forceinline__ float mo_gate(float z) {
  if (ACTIVATION == 1) return z * mo_sigmoid(z);
  if (ACTIVATION == 2) return mo_sigmoid(z);
  return 1.f;
}

extern "C" __global__ void __launch_bounds__(kThreads)
mamba_gated_rms_norm(const cs_u16* __restrict__ x, cs_u16* __restrict__ y,
                     const typename CsType<W_DTYPE>::T* __restrict__ weight,
                     const cs_u16* __restrict__ z, float* __restrict__ rstd_out,
                     cs_i64 stride_x_row, cs_i64 stride_y_row, cs_i64 stride_z_row, int M,
                     float eps) {
  __shared__ float red[kNumWarps];
  const int group = blockIdx.y;
  const int row0 = blockIdx.x * ROWS_PER_BLOCK;
  const int tid = threadIdx.x;
  const cs_i64 col_base = static_cast<cs_i64>(group) * N;
  float w[kPerThread];
  for (int i = 0; i < kPerThread; ++i) {
    const int c = tid + i * kThreads;
    w[i] = c < N ? CsType<W_DTYPE>::load(weight[col_base + c]) : 0.f;
  }
  for (int r = 0; r < ROWS_PER_BLOCK; ++r) {
    const int row = row0 + r;
    if (row >= M) break;  // uniform over the CTA
    float v[kPerThread];
    float g[kPerThread];
    float ss = 0.f;
    for (int i = 0; i < kPerThread; ++i) {
      const int c = tid + i * kThreads;
      v[i] = 0.f;
      g[i] = 1.f;
      if (c < N) {
        v[i] = cs_bf16_to_f32(x[row * stride_x_row + col_base + c]);
        if (HAS_Z) g[i] = mo_gate(cs_bf16_to_f32(z[row * stride_z_row + col_base + c]));
        if (HAS_Z && !NORM_BEFORE_GATE) v[i] *= g[i];
      }
      ss += v[i] * v[i];
    }
    ss = cs_warp_sum(ss);
    if (kNumWarps > 1) {
      if ((tid & 31) == 0) red[tid >> 5] = ss;
      __syncthreads();
      ss = 0.f;
      for (int k = 0; k < kNumWarps; ++k) ss += red[k];
      __syncthreads();  // red is reused by the next row
    }
    const float rstd = rsqrtf(ss / N + eps);
    if (rstd_out != nullptr && tid == 0) rstd_out[static_cast<cs_i64>(group) * M + row] = rstd;
    for (int i = 0; i < kPerThread; ++i) {
      const int c = tid + i * kThreads;
      if (c >= N) continue;
      float o = v[i] * rstd * w[i];
      if (HAS_Z && NORM_BEFORE_GATE) o *= g[i];
      y[row * stride_y_row + col_base + c] = cs_f32_to_bf16(o);
    }
  }
}
