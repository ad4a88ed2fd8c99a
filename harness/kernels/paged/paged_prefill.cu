// paged_prefill: continuation (chunked) prefill attention over the paged cache. The chunk's K and
// V were stored into the cache first (paged_cache_store), so every key and value is read from the
// cache through the block table: query i of sequence b sits at position
// pos = seq_lens[b] - query_len_b + i and attends causally to cached tokens [0, pos].
//
// Constexprs: HEAD_DIM, BLOCK_SIZE, KV_GROUP (= Hq / Hk), CACHE_DTYPE.
// Grid (T, Hq), 128 threads (4 warps): one CTA per (query token, query head), an online softmax
// over the sequence's cached tokens. Query tokens of all sequences are packed (varlen):
// sequence b owns tokens [query_start_loc[b], query_start_loc[b + 1]). A token at or past
// query_start_loc[num_seqs] (padding) is not written.
// Arguments, in order:
//   q                   bf16 [T, Hq, D], element (t, h, d) at q[t*q_stride_t + h*q_stride_h + d]
//   key_cache           [num_blocks, BLOCK_SIZE, Hk, D] of the cache's element type (kv_cache[0])
//   value_cache         same (kv_cache[1])
//   k_scale, v_scale    float32 [1] (fp8 only; not read for bf16)
//   block_table         int32 [num_seqs, block_table_stride]
//   query_start_loc     int32 [num_seqs + 1], non-decreasing, query_start_loc[0] = 0
//   seq_lens            int32 [num_seqs]: cached tokens per sequence after the chunk was stored
//                       (context + query_len; must be >= query_len)
//   out                 bf16 [T, Hq, D], element (t, h, d) at out[t*out_stride_t + h*out_stride_h + d]
//   q_stride_t, q_stride_h, out_stride_t, out_stride_h   int64, in elements
//   block_table_stride  int32, in elements
//   num_seqs            int32 (>= 1)
//   sm_scale            float32, softmax scale applied to q.k
//   cache_block_stride  int64, elements between two blocks of key_cache / value_cache (vLLM's
//                       Triton attention passes stride_k_cache_0 the same way)

#ifndef BLOCK_SIZE
#error "BLOCK_SIZE must be defined"
#endif
#ifndef KV_GROUP
#error "KV_GROUP must be defined"
#endif

constexpr int kPrefillWarps = 4;
constexpr int kPrefillThreads = 32 * kPrefillWarps;

extern "C" __global__ void __launch_bounds__(kPrefillThreads)
paged_prefill(const cs_u16* __restrict__ q, const pa_cache_t* __restrict__ key_cache,
              const pa_cache_t* __restrict__ value_cache, const float* __restrict__ k_scale,
              const float* __restrict__ v_scale, const int* __restrict__ block_table,
              const int* __restrict__ query_start_loc, const int* __restrict__ seq_lens,
              cs_u16* __restrict__ out, cs_i64 q_stride_t, cs_i64 q_stride_h,
              cs_i64 out_stride_t, cs_i64 out_stride_h, int block_table_stride, int num_seqs,
              float sm_scale, cs_i64 cache_block_stride) {
  const int t = blockIdx.x;
  const int hq = blockIdx.y;
  const int num_q_heads = gridDim.y;
  const int num_kv_heads = num_q_heads / KV_GROUP;
  const int hk = hq / KV_GROUP;
  const int tid = threadIdx.x;

  if (t >= query_start_loc[num_seqs]) return;  // padding token
  // The sequence of token t: the last b with query_start_loc[b] <= t (skips empty sequences).
  int lo = 0;
  int hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start_loc[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int b = lo;
  const int q_begin = query_start_loc[b];
  const int q_len = query_start_loc[b + 1] - q_begin;
  const int seq_len = seq_lens[b];
  const int pos = seq_len - q_len + (t - q_begin);  // position of this query in its sequence
  const int end = min(pos + 1, seq_len);
  cs_u16* o = out + t * out_stride_t + hq * out_stride_h;
  if (end <= 0) {  // only when seq_lens[b] < query_len (invalid input): a defined zero output
    for (int d = tid; d < kD; d += kPrefillThreads) o[d] = 0;
    return;
  }

  __shared__ float s_out[kD];
  float qv[kCpl];
  pa_load_query(q + t * q_stride_t + hq * q_stride_h, sm_scale, qv);
  const float ks = kCacheFp8 ? *k_scale : 1.0f;
  const float vs = kCacheFp8 ? *v_scale : 1.0f;
  pa_attend<BLOCK_SIZE, kPrefillWarps>(qv, key_cache, value_cache, ks, vs,
                                       block_table + static_cast<cs_i64>(b) * block_table_stride,
                                       cache_block_stride, 0, end, num_kv_heads, hk, s_out);
  for (int d = tid; d < kD; d += kPrefillThreads) o[d] = cs_f32_to_bf16(s_out[d]);
}
