// tq_dequant_kv: dequantizes the first num_tokens cached tokens of one sequence into bf16 K and V
// (used by continuation prefill, which then runs ordinary attention over them).
//
// Constexprs: HEAD_DIM, BLOCK_SIZE.
// Grid (ceil(num_tokens / (128 / TPW)), Hk), 128 threads; one lane group (TPW = D / CPL lanes,
// see tq_common) per token. Rows t >= num_tokens of the outputs are not written.
// Arguments, in order:
//   cache        uint8 [num_blocks, BLOCK_SIZE, Hk, D + 6]
//   block_table  int32 [>= ceil(num_tokens / BLOCK_SIZE)]: the sequence's block-table row
//   k_out        bf16 [Hk, alloc_len, D], contiguous
//   v_out        bf16 [Hk, alloc_len, D], contiguous
//   num_tokens   int32, tokens to dequantize (>= 1)
//   alloc_len    int32, row count of the outputs (>= num_tokens)

#ifndef BLOCK_SIZE
#error "BLOCK_SIZE must be defined"
#endif

constexpr int kDequantThreads = 128;
constexpr int kTokensPerCta = kDequantThreads / kTpw;

extern "C" __global__ void __launch_bounds__(kDequantThreads)
tq_dequant_kv(const cs_u8* __restrict__ cache, const int* __restrict__ block_table,
              cs_u16* __restrict__ k_out, cs_u16* __restrict__ v_out, int num_tokens,
              int alloc_len) {
  const int head = blockIdx.y;
  const int num_kv_heads = gridDim.y;
  const int tid = threadIdx.x;
  const int g = tid % kTpw;
  const int c0 = g * kCpl;

  __shared__ float s_cent[16];
  if (tid < 16) s_cent[tid] = tq_centroid(tid);
  __syncthreads();

  const int t_raw = blockIdx.x * kTokensPerCta + tid / kTpw;
  const bool valid = t_raw < num_tokens;
  const int t = valid ? t_raw : 0;  // keep the warp converged for the shuffles below
  const cs_i64 slot =
      static_cast<cs_i64>(block_table[t / BLOCK_SIZE]) * BLOCK_SIZE + (t % BLOCK_SIZE);
  const cs_u8* sp = cache + tq_slot_offset(slot, num_kv_heads, head);

  float k[kCpl];
  float v[kCpl];
  float ss = 0.0f;
#pragma unroll
  for (int w = 0; w < kCpl / 4; ++w) {
    const cs_u32 kw = tq_load_u16(sp + c0 / 2 + 2 * w);
    const cs_u32 vw = tq_load_u16(sp + kKeyBytes + c0 / 2 + 2 * w);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float c = s_cent[(kw >> (4 * j)) & 15u];
      k[4 * w + j] = c;
      ss += c * c;
      v[4 * w + j] = static_cast<float>((vw >> (4 * j)) & 15u);
    }
  }
  ss = tq_group_sum(ss);
  tq_fwht(k, g);
  if (!valid) return;

  const float norm = cs_f16_to_f32(tq_load_u16(sp + kD / 2));
  const float vscale = cs_f16_to_f32(tq_load_u16(sp + kKeyBytes + kD / 2));
  const float vzero = cs_f16_to_f32(tq_load_u16(sp + kKeyBytes + kD / 2 + 2));
  const float k_mul = norm / sqrtf(ss * static_cast<float>(kD));
  const cs_i64 row = (static_cast<cs_i64>(head) * alloc_len + t) * kD + c0;
#pragma unroll
  for (int i = 0; i < kCpl; i += 2) {
    const cs_u32 kk = static_cast<cs_u32>(cs_f32_to_bf16(k[i] * k_mul)) |
                      (static_cast<cs_u32>(cs_f32_to_bf16(k[i + 1] * k_mul)) << 16);
    const cs_u32 vv = static_cast<cs_u32>(cs_f32_to_bf16(vzero + vscale * v[i])) |
                      (static_cast<cs_u32>(cs_f32_to_bf16(vzero + vscale * v[i + 1])) << 16);
    *reinterpret_cast<cs_u32*>(k_out + row + i) = kk;
    *reinterpret_cast<cs_u32*>(v_out + row + i) = vv;
  }
}
