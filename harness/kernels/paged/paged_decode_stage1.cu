// paged_decode_stage1: split-KV decode attention over the paged cache, stage 1 (one query token
// per sequence).
//
// Constexprs: HEAD_DIM, BLOCK_SIZE (tokens per cache block), NUM_KV_SPLITS, KV_GROUP (= Hq / Hk),
// CACHE_DTYPE.
// Grid (B, Hq, NUM_KV_SPLITS), 128 threads (4 warps). Block (b, h, s) attends query head h of
// sequence b over the s-th of NUM_KV_SPLITS equal token ranges of that sequence
// (ceil(len / splits) tokens each) and writes the split's normalized partial output and LSE.
// Query head h reads KV head h / KV_GROUP (GQA).
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

extern "C" __global__ void __launch_bounds__(kStage1Threads)
paged_decode_stage1(const cs_u16* __restrict__ q, const pa_cache_t* __restrict__ key_cache,
                    const pa_cache_t* __restrict__ value_cache, const float* __restrict__ k_scale,
                    const float* __restrict__ v_scale, const int* __restrict__ block_table,
                    const int* __restrict__ seq_lens, float* __restrict__ mid_o,
                    cs_i64 q_stride_b, cs_i64 q_stride_h, int block_table_stride,
                    float sm_scale, cs_i64 cache_block_stride) {
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
  if (start >= end) {  // uniform over the block
    cs_kv_split_store_empty<kD, kStage1Threads>(out);
    return;
  }

  __shared__ float s_out[kD];
  float qv[kCpl];
  pa_load_query(q + b * q_stride_b + hq * q_stride_h, sm_scale, qv);
  const float ks = kCacheFp8 ? *k_scale : 1.0f;
  const float vs = kCacheFp8 ? *v_scale : 1.0f;
  const float lse = pa_attend<BLOCK_SIZE, kStage1Warps>(
      qv, key_cache, value_cache, ks, vs,
      block_table + static_cast<cs_i64>(b) * block_table_stride, cache_block_stride,
      start, end, num_kv_heads, hk,
      s_out);
  for (int d = tid; d < kD; d += kStage1Threads) out[d] = s_out[d];
  if (tid == 0) out[kD] = lse;
}
