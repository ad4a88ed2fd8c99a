// _chunk_cumsum_fwd_kernel: per chunk c and head h, for t < chunk_size
//   dt_out[h, c, t]    = clamp(softplus(dt[start + t, h] + dt_bias[h]), dt_min, dt_max), 0 past len
//   dA_cumsum[h, c, t] = sum_{s <= t} dt_out[h, c, s] * A[h]
// (softplus only where the biased value is <= 20, as vLLM writes it). One block per (chunk,
// BLOCK_SIZE_H heads); one warp per head at a time, each lane owning BLOCK_SIZE_CHUNK / 32
// consecutive positions, a warp scan across lanes.
// Arguments (vLLM's order): dt bf16 (row stride stride_dt_seqlen), A f32 [H], dt_bias [H]
// (DT_BIAS_DTYPE), dt_out f32, dA_cumsum f32, cu_chunk_seqlens int32 [nchunks + 1], then the
// tl.int64 strides stride_dt_seqlen, stride_dt_out_head, stride_dt_out_chunk, stride_dA_cs_head,
// stride_dA_cs_chunk. Constexprs: nheads, chunk_size, dt_min / dt_max (float32 bits),
// stride_dt_head, stride_A_head, stride_dt_bias_head, stride_dt_out_csize, stride_dA_cs_csize,
// DT_SOFTPLUS, HAS_DT_BIAS, BLOCK_SIZE_H, BLOCK_SIZE_CHUNK, NUM_WARPS, NUM_STAGES, DT_BIAS_DTYPE.
constexpr int kPerLane = BLOCK_SIZE_CHUNK >= 32 ? BLOCK_SIZE_CHUNK / 32 : 1;
typedef MsType<DT_BIAS_DTYPE> MsBias;

extern "C" __global__ void __launch_bounds__(kMsThreads)
    mamba_ssd_cumsum(const cs_u16* __restrict__ dt, const float* __restrict__ A,
                     const typename MsBias::T* __restrict__ dt_bias, float* __restrict__ dt_out,
                     float* __restrict__ dA_cumsum, const int* __restrict__ cu_chunk_seqlens,
                     cs_i64 stride_dt_seqlen, cs_i64 stride_dt_out_head, cs_i64 stride_dt_out_chunk,
                     cs_i64 stride_dA_cs_head, cs_i64 stride_dA_cs_chunk) {
  const cs_i64 c = blockIdx.x;
  const int start = cu_chunk_seqlens[c];
  const int len = cu_chunk_seqlens[c + 1] - start;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float lo = __uint_as_float(static_cast<cs_u32>(dt_min));
  const float hi = __uint_as_float(static_cast<cs_u32>(dt_max));
  for (int hh = warp; hh < BLOCK_SIZE_H; hh += NUM_WARPS) {
    const int h = blockIdx.y * BLOCK_SIZE_H + hh;
    if (h >= nheads) break;
    const float a = A[h * stride_A_head];
    const float bias = HAS_DT_BIAS ? MsBias::load(dt_bias[h * stride_dt_bias_head]) : 0.f;
    float* o_dt = dt_out + h * stride_dt_out_head + c * stride_dt_out_chunk;
    float* o_da = dA_cumsum + h * stride_dA_cs_head + c * stride_dA_cs_chunk;
    float run = 0.f;
    float part[kPerLane];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int t = lane * kPerLane + e;
      float v = 0.f;
      if (t < len) v = cs_bf16_to_f32(dt[(start + t) * stride_dt_seqlen + h * stride_dt_head]);
      v += bias;
      if (DT_SOFTPLUS) v = v <= 20.f ? ms_softplus(v) : v;
      v = fminf(fmaxf(v, lo), hi);
      if (!(t < len)) v = 0.f;
      if (t < chunk_size) o_dt[t * stride_dt_out_csize] = v;
      run += v * a;
      part[e] = run;
    }
    // inclusive scan of the lane totals
    float incl = run;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += y;
    }
    const float before = incl - run;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int t = lane * kPerLane + e;
      if (t < chunk_size) o_da[t * stride_dA_cs_csize] = part[e] + before;
    }
  }
}
