// paged_decode_stage1: split-KV decode attention over the paged cache, stage 1 (one query token
// per sequence).
//
// Constexprs: HEAD_DIM, BLOCK_SIZE (tokens per cache block), NUM_KV_SPLITS, KV_GROUP (= Hq / Hk),
// CACHE_DTYPE.
// Grid (B, Hq / HPB, NUM_KV_SPLITS), 128 threads (4 warps): HPB query heads per block, all of
// one KV head, HPB = cs_decode_heads_per_block(KV_GROUP, coordinates per lane) (the host's
// decode_stage1_heads_per_block applies the same rule). Block (b, y, s) attends query heads [y * HPB, (y + 1) * HPB) of sequence b over
// the s-th of NUM_KV_SPLITS equal token ranges of that sequence (ceil(len / splits) tokens
// each) and writes each head's normalized partial output and LSE. Query head h reads KV head
// h / KV_GROUP (GQA); a block reads each K and V row of its range once for its HPB heads, as
// vLLM's grouped Triton decode kernel does (vllm/attention/ops/triton_decode_attention.py,
// _fwd_grouped_kernel_stage1: one program per KV head and head group, not per query head).
//
// Work split: a lane group of kLpt lanes owns one cached token at a time, each lane kEpl of its
// coordinates of K and V in 8-element pieces (one 16-byte bf16 / 8-byte fp8 load each when the
// compile key promises 16-byte aligned caches and a block stride divisible by 16, element loads
// otherwise); a warp covers 32 / kLpt tokens a step and issues kUnroll steps' loads before
// using them, so enough bytes are in flight to keep HBM busy. Each lane group
// keeps an online softmax per head, rescaled once per tile of kUnroll tokens; the groups' states
// merge through shared memory at the end.
//
// Arguments, in order:
//   q                   bf16 [B, Hq, D], element (b, h, d) at q[b*q_stride_b + h*q_stride_h + d]
//   key_cache           [num_blocks, BLOCK_SIZE, Hk, D] of the cache's element type (kv_cache[0])
//   value_cache         same (kv_cache[1])
//   k_scale, v_scale    float32 [1] (fp8 only; not read for bf16)
//   block_table         int32 [B, block_table_stride]: cache block of each BLOCK_SIZE tokens
//   seq_lens            int32 [B]: tokens in the cache per sequence (the query token included)
//   mid_o               float32 [B, Hq, NUM_KV_SPLITS, D + 1], contiguous: D outputs then the
//                       natural-log LSE of the scaled scores; an empty split gets zeros, -inf
//   q_stride_b, q_stride_h   int64, in elements
//   block_table_stride  int32, in elements (specialized like Triton: 1 / divisible by 16)
//   sm_scale            float32, softmax scale applied to q.k (1/sqrt(D) for standard attention)
//   cache_block_stride  int64, elements between two blocks of key_cache / value_cache (vLLM's
//                       Triton attention passes stride_k_cache_0 the same way)

#ifndef BLOCK_SIZE
#error "BLOCK_SIZE must be defined"
#endif
#ifndef NUM_KV_SPLITS
#error "NUM_KV_SPLITS must be defined"
#endif
#ifndef KV_GROUP
#error "KV_GROUP must be defined"
#endif

constexpr int kStage1Warps = 4;
constexpr int kStage1Threads = 32 * kStage1Warps;

// Lane layout: a token's row of D coordinates is read in 8-element pieces (one 16-byte bf16 or
// 8-byte fp8 load each) by kLpt lanes, the largest power of two (<= 32) dividing D / 8; lane j
// of the group holds pieces j, j + kLpt, ... (kVecs of them), so each load of the group is one
// contiguous run. D = 128: 16 lanes, 1 piece, 2 tokens a warp step; D = 256: 32 lanes, 1 piece;
// D = 96: 4 lanes, 3 pieces.
constexpr int pa_lanes_per_token(int head_dim) {
  int lanes = 1;
  while (lanes < 32 && (head_dim / 8) % (2 * lanes) == 0) lanes *= 2;
  return lanes;
}
constexpr int kLpt = pa_lanes_per_token(kD);  // lanes per token
constexpr int kVecs = kD / 8 / kLpt;          // 8-element pieces per lane
constexpr int kEpl = 8 * kVecs;               // coordinates per lane
constexpr int kTpw = 32 / kLpt;               // tokens per warp step

constexpr int kHpb = cs_decode_heads_per_block(KV_GROUP, kEpl);  // <= 4 query heads
constexpr int kUnroll = kVecs == 1 ? 4 : (kVecs == 2 ? 2 : 1);  // warp steps loaded together
constexpr int kParts = kStage1Warps * kTpw;  // lane groups, each with its own softmax state
constexpr int kTokensPerRound = kParts * kUnroll;

#if defined(CS_SPEC_key_cache) && CS_SPEC_key_cache == 16 && defined(CS_SPEC_value_cache) && \
    CS_SPEC_value_cache == 16 && defined(CS_SPEC_cache_block_stride) &&                     \
    CS_SPEC_cache_block_stride == 16
constexpr bool kVecLoads = true;
#else
constexpr bool kVecLoads = false;
#endif

// 8 cache elements of one row as raw bits: 16 bytes (bf16) or 8 bytes (fp8).
struct PaRaw8 {
  cs_u32 w[kCacheFp8 ? 2 : 4];
};

__device__ __forceinline__ PaRaw8 pa_load8(const pa_cache_t* __restrict__ p) {
  PaRaw8 r;
  if constexpr (kVecLoads) {
    if constexpr (kCacheFp8) {
      const uint2 u = *reinterpret_cast<const uint2*>(p);
      r.w[0] = u.x;
      r.w[1] = u.y;
    } else {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      r.w[0] = u.x;
      r.w[1] = u.y;
      r.w[2] = u.z;
      r.w[3] = u.w;
    }
  } else {
    constexpr int kPer = kCacheFp8 ? 4 : 2;  // elements per 32-bit word
#pragma unroll
    for (int i = 0; i < (kCacheFp8 ? 2 : 4); ++i) {
      cs_u32 word = 0;
#pragma unroll
      for (int j = 0; j < kPer; ++j)
        word |= static_cast<cs_u32>(p[i * kPer + j]) << (j * 8 * static_cast<int>(sizeof(pa_cache_t)));
      r.w[i] = word;
    }
  }
  return r;
}

__device__ __forceinline__ void pa_unpack8(const PaRaw8& r, float* x) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    if constexpr (kCacheFp8) {
      x[e] = cs_e4m3_to_f32(r.w[e / 4] >> (8 * (e % 4)));
    } else {
      x[e] = cs_bf16_to_f32(static_cast<cs_u16>((r.w[e / 2] >> (16 * (e % 2))) & 0xffffu));
    }
  }
}

extern "C" __global__ void __launch_bounds__(kStage1Threads)
paged_decode_stage1(const cs_u16* __restrict__ q, const pa_cache_t* __restrict__ key_cache,
                    const pa_cache_t* __restrict__ value_cache, const float* __restrict__ k_scale,
                    const float* __restrict__ v_scale, const int* __restrict__ block_table,
                    const int* __restrict__ seq_lens, float* __restrict__ mid_o,
                    cs_i64 q_stride_b, cs_i64 q_stride_h, int block_table_stride,
                    float sm_scale, cs_i64 cache_block_stride) {
  const int b = blockIdx.x;
  const int h0 = blockIdx.y * kHpb;  // first query head of the block
  const int num_q_heads = gridDim.y * kHpb;
  const int num_kv_heads = num_q_heads / KV_GROUP;
  const int hk = h0 / KV_GROUP;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int group = lane / kLpt;  // token slot of the lane in its warp's step
  const int chunk = lane % kLpt;  // the lane's pieces: chunk, chunk + kLpt, ...

  const CsKvSplit sp = cs_kv_split<kD, NUM_KV_SPLITS, kHpb>(mid_o, seq_lens[b]);
  const int start = sp.start;
  const int end = sp.end;
  if (start >= end) {  // uniform over the block
    cs_kv_split_store_empty<kD, kHpb, kStage1Threads>(sp);
    return;
  }

  // The lane's coordinates of each head's query, softmax scale folded in.
  float qv[kHpb][kEpl];
#pragma unroll
  for (int h = 0; h < kHpb; ++h) {
    const cs_u16* qp = q + b * q_stride_b + (h0 + h) * q_stride_h;
#pragma unroll
    for (int e = 0; e < kEpl; ++e)
      qv[h][e] = cs_bf16_to_f32(qp[((e / 8) * kLpt + chunk) * 8 + e % 8]) * sm_scale;
  }
  const float ks = kCacheFp8 ? *k_scale : 1.0f;
  const float vs = kCacheFp8 ? *v_scale : 1.0f;
  const int* bt = block_table + static_cast<cs_i64>(b) * block_table_stride;

  float m[kHpb], l[kHpb], acc[kHpb][kEpl];
#pragma unroll
  for (int h = 0; h < kHpb; ++h) {
    m[h] = cs_neg_inf();
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < kEpl; ++e) acc[h][e] = 0.0f;
  }

  // Round r covers tokens [start + r * kTokensPerRound, ...): step u of warp w reads tokens
  // base + (u * kStage1Warps + w) * kTpw + group.
  for (int base = start; base < end; base += kTokensPerRound) {
    PaRaw8 kr[kUnroll][kVecs], vr[kUnroll][kVecs];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + (u * kStage1Warps + warp) * kTpw + group;
      valid[u] = t < end;
      if (valid[u]) {
        const cs_i64 off = pa_cache_offset(bt[t / BLOCK_SIZE], t % BLOCK_SIZE, cache_block_stride,
                                           num_kv_heads, hk);
#pragma unroll
        for (int v = 0; v < kVecs; ++v) {
          kr[u][v] = pa_load8(key_cache + off + (v * kLpt + chunk) * 8);
          vr[u][v] = pa_load8(value_cache + off + (v * kLpt + chunk) * 8);
        }
      } else {
#pragma unroll
        for (int v = 0; v < kVecs; ++v)
#pragma unroll
          for (int i = 0; i < (kCacheFp8 ? 2 : 4); ++i) kr[u][v].w[i] = vr[u][v].w[i] = 0u;
      }
    }
    // Scores of the tile's kUnroll tokens per head (-inf for a slot past the end).
    float score[kUnroll][kHpb];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[kEpl];
#pragma unroll
      for (int v = 0; v < kVecs; ++v) pa_unpack8(kr[u][v], kf + 8 * v);
#pragma unroll
      for (int h = 0; h < kHpb; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kEpl; ++e) dot += qv[h][e] * kf[e];
        // Sum over the kLpt lanes of the token (every lane takes part: the shuffles stay
        // converged; a slot past the end has k = 0 and is masked below).
#pragma unroll
        for (int ofs = kLpt / 2; ofs > 0; ofs >>= 1)
          dot += __shfl_xor_sync(cs_full_mask, dot, ofs);
        score[u][h] = valid[u] ? dot * ks : cs_neg_inf();
      }
    }
    // One online-softmax step per head over the tile (one rescale of the output per kUnroll
    // tokens, not per token, as the TurboQuant stage 1 does); score[u][h] becomes the weight.
#pragma unroll
    for (int h = 0; h < kHpb; ++h) {
      float m_new = m[h];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) m_new = fmaxf(m_new, score[u][h]);
      // A lane group with no token yet and none in this tile keeps its empty state.
      const float alpha = m_new == cs_neg_inf() ? 1.0f : expf(m[h] - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        score[u][h] = valid[u] ? expf(score[u][h] - m_new) : 0.0f;
        sum += score[u][h];
      }
      l[h] = l[h] * alpha + sum;
#pragma unroll
      for (int e = 0; e < kEpl; ++e) acc[h][e] *= alpha;
      m[h] = m_new;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (!valid[u]) continue;
      float vf[kEpl];
#pragma unroll
      for (int v = 0; v < kVecs; ++v) pa_unpack8(vr[u][v], vf + 8 * v);
#pragma unroll
      for (int h = 0; h < kHpb; ++h)
#pragma unroll
        for (int e = 0; e < kEpl; ++e) acc[h][e] += score[u][h] * vf[e];
    }
  }

  // Merge the kParts lane groups' states per head (cs_merge_head_parts); the fp8 value scale
  // multiplies the merged output.
  __shared__ CsHeadParts<kD, kHpb, kParts> s_parts;
  const int part = warp * kTpw + group;
#pragma unroll
  for (int h = 0; h < kHpb; ++h) {
    if (chunk == 0) {
      s_parts.m[h][part] = m[h];
      s_parts.l[h][part] = l[h];
    }
#pragma unroll
    for (int e = 0; e < kEpl; ++e)
      s_parts.acc[h][part][((e / 8) * kLpt + chunk) * 8 + e % 8] = acc[h][e];
  }
  cs_merge_head_parts<kD, kHpb, kParts, kStage1Threads>(s_parts, sp, vs);
}
