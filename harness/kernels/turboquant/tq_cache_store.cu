// tq_cache_store: quantizes N tokens of K and V into the TurboQuant 4-bit cache.
//
// Constexprs: HEAD_DIM.
// Grid (N, num_kv_heads), 32 threads. Every lane group of the warp computes the same (token, head)
// (so the warp stays converged for the shuffles); group 0 writes the slot.
// Arguments, in order:
//   key            bf16 [N, Hk, D], element (t, h, d) at key[t*key_stride_t + h*key_stride_h + d]
//   value          bf16 [N, Hk, D], same with value_stride_*
//   slot_mapping   int64 [N]: cache slot of token t; negative = do not store this token
//   cache          uint8 [num_blocks, block_size, Hk, D + 6]
//   key_stride_t, key_stride_h, value_stride_t, value_stride_h   int64, in elements

extern "C" __global__ void __launch_bounds__(32)
tq_cache_store(const cs_u16* __restrict__ key, const cs_u16* __restrict__ value,
               const cs_i64* __restrict__ slot_mapping, cs_u8* __restrict__ cache,
               cs_i64 key_stride_t, cs_i64 key_stride_h, cs_i64 value_stride_t,
               cs_i64 value_stride_h) {
  const int token = blockIdx.x;
  const int head = blockIdx.y;
  const int num_kv_heads = gridDim.y;
  const cs_i64 slot = slot_mapping[token];
  if (slot < 0) return;  // uniform over the block

  const int g = threadIdx.x % kTpw;
  const int c0 = g * kCpl;

  float k[kCpl];
  float v[kCpl];
  const cs_u16* kp = key + token * key_stride_t + head * key_stride_h + c0;
  const cs_u16* vp = value + token * value_stride_t + head * value_stride_h + c0;
#pragma unroll
  for (int i = 0; i < kCpl; ++i) {
    k[i] = cs_bf16_to_f32(kp[i]);
    v[i] = cs_bf16_to_f32(vp[i]);
  }

  // ---- key: rotate, take the norm, map each normalized coordinate to a centroid index ----
  tq_fwht(k, g);
  const float inv_sqrt_d = rsqrtf(static_cast<float>(kD));
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kCpl; ++i) {
    k[i] *= inv_sqrt_d;
    ss += k[i] * k[i];
  }
  const float norm = sqrtf(tq_group_sum(ss));
  const float to_unit = norm > 0.0f ? sqrtf(static_cast<float>(kD)) / norm : 0.0f;
  int kidx[kCpl];
#pragma unroll
  for (int i = 0; i < kCpl; ++i) kidx[i] = tq_key_index(k[i] * to_unit);

  // ---- value: 4-bit asymmetric uniform with fp16 scale and zero ----
  float lo = v[0];
  float hi = v[0];
#pragma unroll
  for (int i = 1; i < kCpl; ++i) {
    lo = fminf(lo, v[i]);
    hi = fmaxf(hi, v[i]);
  }
  lo = tq_group_min(lo);
  hi = tq_group_max(hi);
  const cs_u16 scale_h = cs_f32_to_f16((hi - lo) / 15.0f);
  const cs_u16 zero_h = cs_f32_to_f16(lo);
  const float scale = cs_f16_to_f32(scale_h);
  const float zero = cs_f16_to_f32(zero_h);
  int vidx[kCpl];
#pragma unroll
  for (int i = 0; i < kCpl; ++i) {
    float q = scale > 0.0f ? rintf((v[i] - zero) / scale) : 0.0f;
    q = fminf(fmaxf(q, 0.0f), 15.0f);
    vidx[i] = static_cast<int>(q);
  }

  if (threadIdx.x >= kTpw) return;  // after the last shuffle: only group 0 writes

  cs_u8* sp = cache + tq_slot_offset(slot, num_kv_heads, head);
#pragma unroll
  for (int w = 0; w < kCpl / 4; ++w) {
    const cs_u16 kw = static_cast<cs_u16>(kidx[4 * w] | (kidx[4 * w + 1] << 4) |
                                          (kidx[4 * w + 2] << 8) | (kidx[4 * w + 3] << 12));
    const cs_u16 vw = static_cast<cs_u16>(vidx[4 * w] | (vidx[4 * w + 1] << 4) |
                                          (vidx[4 * w + 2] << 8) | (vidx[4 * w + 3] << 12));
    *reinterpret_cast<cs_u16*>(sp + c0 / 2 + 2 * w) = kw;
    *reinterpret_cast<cs_u16*>(sp + kKeyBytes + c0 / 2 + 2 * w) = vw;
  }
  if (g == 0) {
    *reinterpret_cast<cs_u16*>(sp + kD / 2) = cs_f32_to_f16(norm);
    *reinterpret_cast<cs_u16*>(sp + kKeyBytes + kD / 2) = scale_h;
    *reinterpret_cast<cs_u16*>(sp + kKeyBytes + kD / 2 + 2) = zero_h;
  }
}
