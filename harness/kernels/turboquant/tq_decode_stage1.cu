// tq_decode_stage1: split-KV decode attention over the TurboQuant cache, stage 1.
//
// Constexprs: HEAD_DIM, BLOCK_SIZE (tokens per cache block), NUM_KV_SPLITS, KV_GROUP (= Hq / Hk).
// Grid (B, Hq, NUM_KV_SPLITS), 128 threads. Block (b, h, s) attends query head h of sequence b
// over the s-th of NUM_KV_SPLITS equal token ranges of that sequence (ceil(len / splits) tokens
// each) and writes the split's normalized partial output and log-sum-exp.
// Arguments, in order:
//   q                   bf16 [B, Hq, D], element (b, h, d) at q[b*q_stride_b + h*q_stride_h + d]
//   cache               uint8 [num_blocks, BLOCK_SIZE, Hk, D + 6]
//   block_table         int32 [B, block_table_stride]: cache block of each BLOCK_SIZE tokens
//   seq_lens            int32 [B]: tokens in the cache per sequence
//   mid_o               float32 [B, Hq, NUM_KV_SPLITS, D + 1], contiguous: D outputs then the
//                       natural-log LSE of the scaled scores; an empty split gets zeros, -inf
//   q_stride_b, q_stride_h   int64, in elements
//   block_table_stride  int32, in elements (specialized like Triton: 1 / divisible by 16)
//   sm_scale            float32, softmax scale applied to q.k (1/sqrt(D) for standard attention)
//
// Score of token t: sm_scale * q . k'_t with k'_t = H (n_t c_t / |c_t|); since H is symmetric
// and orthogonal this is sm_scale * n_t * (H q) . c_t / |c_t|, so q is rotated once per block.

#ifndef BLOCK_SIZE
#error "BLOCK_SIZE must be defined"
#endif
#ifndef NUM_KV_SPLITS
#error "NUM_KV_SPLITS must be defined"
#endif
#ifndef KV_GROUP
#error "KV_GROUP must be defined"
#endif

constexpr int kStage1Threads = 128;
constexpr int kGroups = kStage1Threads / kTpw;

extern "C" __global__ void __launch_bounds__(kStage1Threads)
tq_decode_stage1(const cs_u16* __restrict__ q, const cs_u8* __restrict__ cache,
                 const int* __restrict__ block_table, const int* __restrict__ seq_lens,
                 float* __restrict__ mid_o, cs_i64 q_stride_b, cs_i64 q_stride_h,
                 int block_table_stride, float sm_scale) {
  const int b = blockIdx.x;
  const int hq = blockIdx.y;
  const int num_q_heads = gridDim.y;
  const int num_kv_heads = num_q_heads / KV_GROUP;
  const int hk = hq / KV_GROUP;
  const int tid = threadIdx.x;

  const CsKvSplit sp = cs_kv_split<kD, NUM_KV_SPLITS>(mid_o, seq_lens[b]);
  const int start = sp.start;
  const int end = sp.end;
  float* out = sp.row;
  if (start >= end) {
    cs_kv_split_store_empty<kD, kStage1Threads>(out);
    return;
  }

  __shared__ float s_cent[16];
  __shared__ float s_m[kGroups];
  __shared__ float s_l[kGroups];
  __shared__ float s_w[kGroups];
  __shared__ float s_acc[kGroups][kD];
  if (tid < 16) s_cent[tid] = tq_centroid(tid);

  const int g = tid % kTpw;
  const int group = tid / kTpw;
  const int c0 = g * kCpl;

  // Rotated query with the softmax scale folded in; every group holds its own copy.
  float qr[kCpl];
  const cs_u16* qp = q + b * q_stride_b + hq * q_stride_h + c0;
#pragma unroll
  for (int i = 0; i < kCpl; ++i) qr[i] = cs_bf16_to_f32(qp[i]);
  tq_fwht(qr, g);
  const float q_mul = sm_scale * rsqrtf(static_cast<float>(kD));
#pragma unroll
  for (int i = 0; i < kCpl; ++i) qr[i] *= q_mul;
  __syncthreads();  // s_cent

  const int* bt = block_table + static_cast<cs_i64>(b) * block_table_stride;
  float m = cs_neg_inf();
  float l = 0.0f;
  float acc[kCpl];
#pragma unroll
  for (int i = 0; i < kCpl; ++i) acc[i] = 0.0f;

  // The trip count is uniform over the block, so the shuffles stay converged; a group whose
  // token is past the end reads a valid token and discards it.
  for (int base = start; base < end; base += kGroups) {
    const int t_raw = base + group;
    const bool valid = t_raw < end;
    const int t = valid ? t_raw : start;
    const cs_i64 slot =
        static_cast<cs_i64>(bt[t / BLOCK_SIZE]) * BLOCK_SIZE + (t % BLOCK_SIZE);
    const cs_u8* sp = cache + tq_slot_offset(slot, num_kv_heads, hk);

    float dot = 0.0f;
    float ss = 0.0f;
    float vq[kCpl];
#pragma unroll
    for (int w = 0; w < kCpl / 4; ++w) {
      const cs_u32 kw = tq_load_u16(sp + c0 / 2 + 2 * w);
      const cs_u32 vw = tq_load_u16(sp + kKeyBytes + c0 / 2 + 2 * w);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float c = s_cent[(kw >> (4 * j)) & 15u];
        dot += qr[4 * w + j] * c;
        ss += c * c;
        vq[4 * w + j] = static_cast<float>((vw >> (4 * j)) & 15u);
      }
    }
    dot = tq_group_sum(dot);
    ss = tq_group_sum(ss);
    if (valid) {
      const float norm = cs_f16_to_f32(tq_load_u16(sp + kD / 2));
      const float vscale = cs_f16_to_f32(tq_load_u16(sp + kKeyBytes + kD / 2));
      const float vzero = cs_f16_to_f32(tq_load_u16(sp + kKeyBytes + kD / 2 + 2));
      const CsSoftmaxStep st = cs_online_softmax_step(m, l, norm * dot / sqrtf(ss));
#pragma unroll
      for (int i = 0; i < kCpl; ++i) acc[i] = acc[i] * st.alpha + st.p * (vzero + vscale * vq[i]);
    }
  }

  // Merge the groups' running softmax states.
  if (g == 0) {
    s_m[group] = m;
    s_l[group] = l;
  }
#pragma unroll
  for (int i = 0; i < kCpl; ++i) s_acc[group][c0 + i] = acc[i];
  __syncthreads();
  // Group 0 had a token (start < end), as the merge requires.
  const float lse =
      cs_merge_softmax_parts<kD, kGroups, kStage1Threads>(s_m, s_l, s_acc, s_w, 1.0f, out);
  if (tid == 0) out[kD] = lse;
}
