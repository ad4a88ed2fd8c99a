// tq_decode_stage2: reduces stage 1's per-split partial outputs into the attention output.
//
// Constexprs: HEAD_DIM, NUM_KV_SPLITS.
// Grid (B, Hq), 128 threads.
// Arguments, in order:
//   mid_o        float32 [B, Hq, NUM_KV_SPLITS, D + 1], contiguous (stage 1's output)
//   out          bf16 [B, Hq, D], element (b, h, d) at out[b*out_stride_b + h*out_stride_h + d]
//   lse          float32 [B, Hq], contiguous: natural-log LSE over all tokens (-inf, with a zero
//                output, when the sequence has no tokens)
//   out_stride_b, out_stride_h   int64, in elements
// Splits whose LSE is -inf (no tokens) get weight zero.

#ifndef NUM_KV_SPLITS
#error "NUM_KV_SPLITS must be defined"
#endif

constexpr int kStage2Threads = 128;

extern "C" __global__ void __launch_bounds__(kStage2Threads)
tq_decode_stage2(const float* __restrict__ mid_o, cs_u16* __restrict__ out,
                 float* __restrict__ lse, cs_i64 out_stride_b, cs_i64 out_stride_h) {
  const int b = blockIdx.x;
  const int h = blockIdx.y;
  const int num_q_heads = gridDim.y;
  const cs_i64 row = static_cast<cs_i64>(b) * num_q_heads + h;
  const float* in = mid_o + row * NUM_KV_SPLITS * static_cast<cs_i64>(kD + 1);
  cs_u16* o = out + b * out_stride_b + h * out_stride_h;

  float m = cs_neg_inf();
#pragma unroll
  for (int s = 0; s < NUM_KV_SPLITS; ++s) m = fmaxf(m, in[s * (kD + 1) + kD]);
  if (m == cs_neg_inf()) {
    for (int d = threadIdx.x; d < kD; d += kStage2Threads) o[d] = 0;
    if (threadIdx.x == 0) lse[row] = cs_neg_inf();
    return;
  }
  float w[NUM_KV_SPLITS];
  float total = 0.0f;
#pragma unroll
  for (int s = 0; s < NUM_KV_SPLITS; ++s) {
    w[s] = expf(in[s * (kD + 1) + kD] - m);
    total += w[s];
  }
  const float inv_total = 1.0f / total;
  for (int d = threadIdx.x; d < kD; d += kStage2Threads) {
    float acc = 0.0f;
#pragma unroll
    for (int s = 0; s < NUM_KV_SPLITS; ++s) acc += w[s] * in[s * (kD + 1) + d];
    o[d] = cs_f32_to_bf16(acc * inv_total);
  }
  if (threadIdx.x == 0) lse[row] = m + logf(total);
}
