// tq_decode_stage1: split-KV decode attention over the TurboQuant cache, stage 1.
//
// Constexprs: HEAD_DIM, BLOCK_SIZE (tokens per cache block), NUM_KV_SPLITS, KV_GROUP (= Hq / Hk).
// Grid (B, Hq / HPB, NUM_KV_SPLITS), 128 threads (4 warps): HPB query heads per block, all of one
// KV head, HPB = cs_decode_heads_per_block(KV_GROUP, 8) (the host's decode_stage1_heads_per_block
// in turboquant_kernels.h applies the same rule). Block (b, y, s) attends query heads
// [y * HPB, (y + 1) * HPB) of sequence b over the s-th of NUM_KV_SPLITS equal token ranges of that
// sequence (ceil(len / splits) tokens each) and writes each head's normalized partial output and
// log-sum-exp; a cached token is read once for the block's HPB heads, as the paged stage 1 and
// vLLM's grouped Triton decode kernel do.
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
// and orthogonal this is sm_scale * n_t * (H q) . c_t / |c_t|, so each head's query is rotated
// once per block (into shared memory, by tq_fwht's lane groups).
//
// Work split: D / 8 lanes per cached token, each owning 8 coordinates (4 bytes of key indices and
// 4 of value indices, read as 16-bit words: a slot is only 2-byte aligned); a warp covers
// 32 / (D / 8) tokens a step and loads kUnroll steps before using them. The softmax runs over a
// tile of kUnroll tokens at a time (one rescale of the output per tile, not per token), and the
// value's zero point is accumulated as one scalar per head (sum of p * zero) rather than per
// coordinate. Each lane group keeps its own softmax state per head; the groups merge through
// cs_merge_head_parts at the end.

#ifndef BLOCK_SIZE
#error "BLOCK_SIZE must be defined"
#endif
#ifndef NUM_KV_SPLITS
#error "NUM_KV_SPLITS must be defined"
#endif
#ifndef KV_GROUP
#error "KV_GROUP must be defined"
#endif

static_assert(kD / 8 <= 32, "a token's lanes must fit one warp");
constexpr int kStage1Warps = 4;
constexpr int kStage1Threads = 32 * kStage1Warps;
constexpr int kLanesTok = kD / 8;             // lanes per cached token, 8 coordinates each
constexpr int kTokWarp = 32 / kLanesTok;       // tokens per warp step
constexpr int kHpb = cs_decode_heads_per_block(KV_GROUP, 8);
constexpr int kUnroll = 4;                     // warp steps loaded together: the softmax tile
constexpr int kParts = kStage1Warps * kTokWarp;  // lane groups with their own softmax state
constexpr int kTokensPerRound = kParts * kUnroll;
constexpr int kRotGroups = kStage1Threads / kTpw;  // head vectors tq_fwht rotates at once
static_assert(kRotGroups >= kHpb, "one pass must rotate every head of the block");

extern "C" __global__ void __launch_bounds__(kStage1Threads)
tq_decode_stage1(const cs_u16* __restrict__ q, const cs_u8* __restrict__ cache,
                 const int* __restrict__ block_table, const int* __restrict__ seq_lens,
                 float* __restrict__ mid_o, cs_i64 q_stride_b, cs_i64 q_stride_h,
                 int block_table_stride, float sm_scale) {
  const int b = blockIdx.x;
  const int h0 = blockIdx.y * kHpb;  // first query head of the block
  const int num_q_heads = gridDim.y * kHpb;
  const int num_kv_heads = num_q_heads / KV_GROUP;
  const int hk = h0 / KV_GROUP;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int tok_slot = lane / kLanesTok;  // the lane's token in its warp's step
  const int chunk = lane % kLanesTok;     // the lane's coordinates [8 * chunk, 8 * chunk + 8)

  const CsKvSplit sp = cs_kv_split<kD, NUM_KV_SPLITS, kHpb>(mid_o, seq_lens[b]);
  const int start = sp.start;
  const int end = sp.end;
  if (start >= end) {  // uniform over the block
    cs_kv_split_store_empty<kD, kHpb, kStage1Threads>(sp);
    return;
  }

  __shared__ float s_cent[16];
  __shared__ float s_q[kHpb][kD];
  if (tid < 16) s_cent[tid] = tq_centroid(tid);
  {
    // Rotate each head's query, the softmax scale and H's 1/sqrt(D) folded in: group `vec` of
    // kTpw lanes (tq_common.cuh's layout) rotates head vec % kHpb; every lane takes part in the
    // shuffles, the first kHpb groups store.
    const int g = tid % kTpw;
    const int vec = tid / kTpw;
    const int hh = vec % kHpb;
    float qr[kCpl];
    const cs_u16* qp = q + b * q_stride_b + (h0 + hh) * q_stride_h + g * kCpl;
#pragma unroll
    for (int i = 0; i < kCpl; ++i) qr[i] = cs_bf16_to_f32(qp[i]);
    tq_fwht(qr, g);
    const float q_mul = sm_scale * rsqrtf(static_cast<float>(kD));
    if (vec < kHpb) {
#pragma unroll
      for (int i = 0; i < kCpl; ++i) s_q[hh][g * kCpl + i] = qr[i] * q_mul;
    }
  }
  __syncthreads();  // s_cent, s_q
  float qv[kHpb][8];
#pragma unroll
  for (int h = 0; h < kHpb; ++h)
#pragma unroll
    for (int e = 0; e < 8; ++e) qv[h][e] = s_q[h][8 * chunk + e];

  const int* bt = block_table + static_cast<cs_i64>(b) * block_table_stride;
  float m[kHpb], l[kHpb], acc_zero[kHpb], acc[kHpb][8];
#pragma unroll
  for (int h = 0; h < kHpb; ++h) {
    m[h] = cs_neg_inf();
    l[h] = 0.0f;
    acc_zero[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[h][e] = 0.0f;
  }

  // Round r covers tokens [start + r * kTokensPerRound, ...): step u of warp w reads token
  // base + (u * kStage1Warps + w) * kTokWarp + tok_slot. The trip count is uniform over the
  // block, so the shuffles stay converged; a token past the end reads nothing and scores -inf.
  for (int base = start; base < end; base += kTokensPerRound) {
    cs_u32 kw[kUnroll], vw[kUnroll];
    cs_u16 norm_bits[kUnroll], vscale_bits[kUnroll], vzero_bits[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + (u * kStage1Warps + warp) * kTokWarp + tok_slot;
      valid[u] = t < end;
      kw[u] = vw[u] = 0u;
      norm_bits[u] = vscale_bits[u] = vzero_bits[u] = 0;
      if (valid[u]) {
        const cs_i64 slot =
            static_cast<cs_i64>(bt[t / BLOCK_SIZE]) * BLOCK_SIZE + (t % BLOCK_SIZE);
        const cs_u8* p = cache + tq_slot_offset(slot, num_kv_heads, hk);
        kw[u] = tq_load_u16(p + 4 * chunk) | (static_cast<cs_u32>(tq_load_u16(p + 4 * chunk + 2)) << 16);
        vw[u] = tq_load_u16(p + kKeyBytes + 4 * chunk) |
                (static_cast<cs_u32>(tq_load_u16(p + kKeyBytes + 4 * chunk + 2)) << 16);
        norm_bits[u] = tq_load_u16(p + kD / 2);
        vscale_bits[u] = tq_load_u16(p + kKeyBytes + kD / 2);
        vzero_bits[u] = tq_load_u16(p + kKeyBytes + kD / 2 + 2);
      }
    }
    // Scores: per token, each head's (H q) . c and |c|^2 summed over the token's lanes.
    float score[kUnroll][kHpb];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float part[kHpb + 1];
#pragma unroll
      for (int h = 0; h <= kHpb; ++h) part[h] = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float c = s_cent[(kw[u] >> (4 * e)) & 15u];
#pragma unroll
        for (int h = 0; h < kHpb; ++h) part[h] += qv[h][e] * c;
        part[kHpb] += c * c;
      }
#pragma unroll
      for (int ofs = kLanesTok / 2; ofs > 0; ofs >>= 1)
#pragma unroll
        for (int h = 0; h <= kHpb; ++h) part[h] += __shfl_xor_sync(cs_full_mask, part[h], ofs);
      const float k_mul = cs_f16_to_f32(norm_bits[u]) / sqrtf(part[kHpb]);
#pragma unroll
      for (int h = 0; h < kHpb; ++h) score[u][h] = valid[u] ? part[h] * k_mul : cs_neg_inf();
    }
    // One online-softmax step per head over the tile's tokens.
    float p[kUnroll][kHpb];
#pragma unroll
    for (int h = 0; h < kHpb; ++h) {
      float m_new = m[h];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) m_new = fmaxf(m_new, score[u][h]);
      // A lane group with no token yet and none in this tile keeps its empty state.
      const float alpha = m_new == cs_neg_inf() ? 1.0f : expf(m[h] - m_new);
      float sum = 0.0f;
      float zero = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        p[u][h] = valid[u] ? expf(score[u][h] - m_new) : 0.0f;
        sum += p[u][h];
        zero += p[u][h] * cs_f16_to_f32(vzero_bits[u]);
      }
      l[h] = l[h] * alpha + sum;
      acc_zero[h] = acc_zero[h] * alpha + zero;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[h][e] *= alpha;
      m[h] = m_new;
    }
    // Values: v = zero + scale * index; the zero part is in acc_zero.
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const float vscale = cs_f16_to_f32(vscale_bits[u]);
      float vq[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) vq[e] = static_cast<float>((vw[u] >> (4 * e)) & 15u);
#pragma unroll
      for (int h = 0; h < kHpb; ++h) {
        const float pv = p[u][h] * vscale;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] += pv * vq[e];
      }
    }
  }

  // Merge the kParts lane groups' states per head (cs_merge_head_parts), each coordinate's
  // output with the head's zero-point term added.
  __shared__ CsHeadParts<kD, kHpb, kParts> s_parts;
  const int part = warp * kTokWarp + tok_slot;
#pragma unroll
  for (int h = 0; h < kHpb; ++h) {
    if (chunk == 0) {
      s_parts.m[h][part] = m[h];
      s_parts.l[h][part] = l[h];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) s_parts.acc[h][part][8 * chunk + e] = acc[h][e] + acc_zero[h];
  }
  cs_merge_head_parts<kD, kHpb, kParts, kStage1Threads>(s_parts, sp, 1.0f);
}
