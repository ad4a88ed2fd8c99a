// Split-KV decode attention, the parts the paged and turboquant families share (both replay the
// same two-stage scheme of vLLM's Triton decode attention; only how a cached token is read
// differs). Prepended to those families' programs after device_common.cuh and before the family
// header (paged_kernels.cpp, turboquant_kernels.cpp); every helper is a template on the head dim
// and counts, so the text does not depend on the family's macros. (Its short names D, b, h, s
// are safe there: those families' macros are HEAD_DIM, BLOCK_SIZE, NUM_KV_SPLITS, KV_GROUP and
// CACHE_DTYPE.)
//
// The scratch between the stages, per query token b and query head h:
//   mid_o float32 [B, Hq, SPLITS, D + 1], contiguous: for split s, the split's normalized partial
//   output (D floats) followed by the natural-log LSE of its scaled scores; an empty split holds
//   zeros and -inf.
// Both families' stage 1 runs grid (B, Hq / heads per block, SPLITS), the heads a block serves
// by cs_decode_heads_per_block (cs_kv_split reads the grid); split s of a sequence of n tokens covers tokens
// [s * ceil(n / SPLITS), min((s + 1) * ceil(n / SPLITS), n)). Stage 2 runs grid (B, Hq).

// ---- stage 1 -----------------------------------------------------------------------------------

/// Query heads one stage-1 block serves (heads of one KV head, so the block reads each cached
/// token once for all of them): the largest of 4, 3, 2, 1 that divides the KV group (Hq / Hk)
/// and keeps a lane's query and output state (2 x heads x coords_per_lane floats) within 64
/// registers. The host's split_kv_heads_per_block (split_kv.h) is the same rule.
constexpr int cs_decode_heads_per_block(int kv_group, int coords_per_lane) {
  const int cap = 32 / coords_per_lane;
  for (int h = 4; h > 1; --h)
    if (h <= cap && kv_group % h == 0) return h;
  return 1;
}

/// The KV range and mid_o row of the stage-1 block (blockIdx = (b, head group, split), each
/// block serving HPB consecutive query heads, so gridDim.y = Hq / HPB).
struct CsKvSplit {
  int start;           ///< first token of the split
  int end;             ///< one past the last token (end <= start: the split is empty)
  float* row;          ///< mid_o[b, h0, split, 0 .. D] of the block's first head h0 = blockIdx.y * HPB
  cs_i64 head_stride;  ///< floats between two heads' rows: SPLITS * (D + 1)
  /// mid_o[b, h0 + i, split, 0 .. D]: the row of the block's i-th head.
  __device__ __forceinline__ float* head_row(int i) const { return row + i * head_stride; }
};

template <int D, int SPLITS, int HPB = 1>
__device__ __forceinline__ CsKvSplit cs_kv_split(float* mid_o, int seq_len) {
  const int b = blockIdx.x;
  const int h0 = blockIdx.y * HPB;
  const int split = blockIdx.z;
  const int num_q_heads = gridDim.y * HPB;
  const int per_split = (seq_len + SPLITS - 1) / SPLITS;
  CsKvSplit sp;
  sp.start = split * per_split;
  sp.end = min(sp.start + per_split, seq_len);
  sp.row = mid_o + ((static_cast<cs_i64>(b) * num_q_heads + h0) * SPLITS + split) *
                       static_cast<cs_i64>(D + 1);
  sp.head_stride = SPLITS * static_cast<cs_i64>(D + 1);
  return sp;
}

/// Writes an empty split's row (zeros, LSE -inf) for each of the block's HPB heads; every thread
/// of the block (THREADS of them) calls it.
template <int D, int HPB, int THREADS>
__device__ __forceinline__ void cs_kv_split_store_empty(const CsKvSplit& sp) {
  for (int i = threadIdx.x; i < HPB * (D + 1); i += THREADS) {
    const int d = i % (D + 1);
    sp.head_row(i / (D + 1))[d] = d == D ? cs_neg_inf() : 0.0f;
  }
}

/// One token's step of an online softmax: folds `score` into the running max `m_run` and sum
/// `l_run`. The caller then updates its unnormalized output as acc = acc * alpha + p * value.
struct CsSoftmaxStep {
  float alpha;  ///< rescale of the old state: exp(old max - new max), 0 for the first token
  float p;      ///< weight of this token: exp(score - new max)
};

__device__ __forceinline__ CsSoftmaxStep cs_online_softmax_step(float& m_run, float& l_run,
                                                               float score) {
  const float m_new = fmaxf(m_run, score);
  CsSoftmaxStep st;
  st.alpha = expf(m_run - m_new);
  st.p = expf(score - m_new);
  l_run = l_run * st.alpha + st.p;
  m_run = m_new;
  return st;
}

/// Merges the online-softmax states of NPARTS parts of a block (warps or lane groups that each
/// walked their own tokens) into one normalized output. The caller has stored part j's running
/// max in s_m[j], running sum in s_l[j] and unnormalized output in s_acc[j][0, D), then
/// synchronized; s_w is NPARTS floats of scratch. A part without tokens has max -inf and sum 0
/// and gets weight 0; part 0 must have had a token. Every thread of the block (THREADS of them)
/// calls it. Writes dst[d] = out_scale * output[d] for d < D and returns the natural-log LSE of
/// all parts' scores.
template <int D, int NPARTS, int THREADS>
__device__ __forceinline__ float cs_merge_softmax_parts(const float* s_m, const float* s_l,
                                                        const float (*s_acc)[D], float* s_w,
                                                        float out_scale, float* dst) {
  const int tid = threadIdx.x;
  float m_all = cs_neg_inf();
#pragma unroll
  for (int j = 0; j < NPARTS; ++j) m_all = fmaxf(m_all, s_m[j]);
  if (tid < NPARTS) s_w[tid] = expf(s_m[tid] - m_all);
  __syncthreads();
  float l_all = 0.0f;
#pragma unroll
  for (int j = 0; j < NPARTS; ++j) l_all += s_l[j] * s_w[j];
  const float out_mul = out_scale / l_all;
  for (int d = tid; d < D; d += THREADS) {
    float o = 0.0f;
#pragma unroll
    for (int j = 0; j < NPARTS; ++j) o += s_acc[j][d] * s_w[j];
    dst[d] = o * out_mul;
  }
  return m_all + logf(l_all);
}

/// The per-head online-softmax states of a stage-1 block's NPARTS parts (lane groups that each
/// walked their own tokens), in shared memory for cs_merge_head_parts: part j of head h stores
/// its running max in m[h][j], running sum in l[h][j] and unnormalized output in acc[h][j][0, D);
/// w is the merge's scratch. Declare it `__shared__` in the kernel.
template <int D, int HPB, int NPARTS>
struct CsHeadParts {
  float m[HPB][NPARTS];
  float l[HPB][NPARTS];
  float w[HPB][NPARTS];
  float acc[HPB][NPARTS][D];
};

/// Stage 1's epilogue: merges each of the block's HPB heads' NPARTS part states (stored by the
/// caller's threads in `parts`, not yet synchronized) and writes head i's row of the split,
/// sp.head_row(i)[d] = out_scale * output[d] for d < D, then its natural-log LSE at [D]. All
/// heads merge together (two barriers in all, not two per head). A part without tokens has max
/// -inf and sum 0 and gets weight 0; part 0 must have had a token. Every thread of the block
/// (THREADS of them) calls it. The arithmetic per head is cs_merge_softmax_parts's, in the
/// same order.
template <int D, int HPB, int NPARTS, int THREADS>
__device__ __forceinline__ void cs_merge_head_parts(CsHeadParts<D, HPB, NPARTS>& parts,
                                                    const CsKvSplit& sp, float out_scale) {
  __syncthreads();  // every part's state is stored
  const int tid = threadIdx.x;
  for (int i = tid; i < HPB * NPARTS; i += THREADS) {
    const int h = i / NPARTS;
    float m_all = cs_neg_inf();
#pragma unroll
    for (int j = 0; j < NPARTS; ++j) m_all = fmaxf(m_all, parts.m[h][j]);
    parts.w[h][i % NPARTS] = expf(parts.m[h][i % NPARTS] - m_all);
  }
  __syncthreads();
  for (int i = tid; i < HPB * (D + 1); i += THREADS) {
    const int h = i / (D + 1), d = i % (D + 1);
    float l_all = 0.0f;
#pragma unroll
    for (int j = 0; j < NPARTS; ++j) l_all += parts.l[h][j] * parts.w[h][j];
    if (d == D) {  // the head's LSE
      float m_all = cs_neg_inf();
#pragma unroll
      for (int j = 0; j < NPARTS; ++j) m_all = fmaxf(m_all, parts.m[h][j]);
      sp.head_row(h)[D] = m_all + logf(l_all);
      continue;
    }
    float o = 0.0f;
#pragma unroll
    for (int j = 0; j < NPARTS; ++j) o += parts.acc[h][j][d] * parts.w[h][j];
    sp.head_row(h)[d] = o * (out_scale / l_all);
  }
}

// ---- stage 2 -----------------------------------------------------------------------------------

/// Stage 2, whole: block (b, h) reduces mid_o[b, h, 0 .. SPLITS) into the bf16 output
/// out[b * out_stride_b + h * out_stride_h + d] and lse[b * Hq + h] (float32 [B, Hq],
/// contiguous). Split s gets weight exp(lse_s - max lse), so an empty split (-inf) counts for
/// nothing; a sequence with no tokens at all gets a zero output and LSE -inf. The weights live in
/// shared memory, computed once per split, so SPLITS may be large (up to the 1024 the wrappers
/// allow) without a register array. Every thread of the block (THREADS of them) calls it.
template <int D, int SPLITS, int THREADS>
__device__ __forceinline__ void cs_split_kv_reduce(const float* __restrict__ mid_o,
                                                   cs_u16* __restrict__ out,
                                                   float* __restrict__ lse, cs_i64 out_stride_b,
                                                   cs_i64 out_stride_h) {
  const int b = blockIdx.x;
  const int h = blockIdx.y;
  const cs_i64 row = static_cast<cs_i64>(b) * gridDim.y + h;
  const float* in = mid_o + row * SPLITS * static_cast<cs_i64>(D + 1);
  cs_u16* o = out + b * out_stride_b + h * out_stride_h;

  float m = cs_neg_inf();
  for (int s = 0; s < SPLITS; ++s) m = fmaxf(m, in[s * (D + 1) + D]);
  if (m == cs_neg_inf()) {
    for (int d = threadIdx.x; d < D; d += THREADS) o[d] = 0;
    if (threadIdx.x == 0) lse[row] = cs_neg_inf();
    return;
  }
  __shared__ float s_w[SPLITS];
  for (int s = threadIdx.x; s < SPLITS; s += THREADS) {
    s_w[s] = expf(in[s * (D + 1) + D] - m);  // 0 for an empty split
  }
  __syncthreads();
  float total = 0.0f;
  for (int s = 0; s < SPLITS; ++s) total += s_w[s];
  const float inv_total = 1.0f / total;
  for (int d = threadIdx.x; d < D; d += THREADS) {
    float acc = 0.0f;
    for (int s = 0; s < SPLITS; ++s) acc += s_w[s] * in[s * (D + 1) + d];
    o[d] = cs_f32_to_bf16(acc * inv_total);
  }
  if (threadIdx.x == 0) lse[row] = m + logf(total);
}
