// Paged attention over a plain paged KV cache (vLLM kv_cache_dtype "auto"/"bfloat16" or
// "fp8"/"fp8_e4m3"): device helpers shared by every paged kernel. This text is prepended to each
// kernel's source at build time (see paged_kernels.cpp), so every NVRTC program is
// self-contained: no #include at all (no cuda_bf16.h / cuda_fp8.h).
//
// Cache of one attention layer, vLLM's FlashAttention layout
// (FlashAttentionBackend.get_kv_cache_shape: (2, num_blocks, block_size, num_kv_heads, head_size)):
//   kv_cache [2, num_blocks, BLOCK_SIZE, Hk, D], contiguous; [0] holds K, [1] holds V.
// The kernels take the K half and the V half as two pointers (key_cache = kv_cache[0],
// value_cache = kv_cache[1]); element (slot, h, d) of either is at ((slot * Hk) + h) * D + d, and
// token slot s lives at block s / BLOCK_SIZE, row s % BLOCK_SIZE.
//
// CACHE_DTYPE selects the element type, so the two formats are distinct compile keys:
//   0  bf16 ("auto"/"bfloat16"): the element is the bf16 bit pattern; k_scale / v_scale are not
//      read (may be null).
//   1  fp8 e4m3 ("fp8"/"fp8_e4m3"): one byte per element, OCP E4M3 (bias 7, no infinities,
//      0x7f/0xff = NaN, largest finite 448). Stored = e4m3(x / scale), rounded to nearest even and
//      saturated to +-448; read back as e4m3_value * scale. k_scale and v_scale are float32
//      scalars in device memory (per tensor, like vLLM's layer._k_scale / _v_scale), read by the
//      kernels, so a captured CUDA graph sees a changed scale.
//
// Work split of pa_attend (the prefill kernel's; decode stage 1 has its own, see
// paged_decode_stage1.cu): one warp per cached token at a time; lane l owns the
// coordinates l, l + 32, l + 64, ... (kCpl = D / 32 of them), so a warp's loads of one token row
// are coalesced. q . k is a warp-wide butterfly sum, each warp keeps its own online-softmax state,
// and the warps' states are merged through shared memory at the end.

#ifndef HEAD_DIM
#error "HEAD_DIM must be defined (NVRTC option -DHEAD_DIM=<multiple of 32 in [32, 256]>)"
#endif
#if (HEAD_DIM < 32) || (HEAD_DIM > 256) || ((HEAD_DIM % 32) != 0)
#error "HEAD_DIM must be a multiple of 32 in [32, 256]"
#endif

constexpr int kD = HEAD_DIM;
constexpr int kCpl = kD / 32;  // coordinates per lane

// ---- the cache element type --------------------------------------------------------------------

#ifdef CACHE_DTYPE
#if CACHE_DTYPE == 0
typedef cs_u16 pa_cache_t;
constexpr bool kCacheFp8 = false;
__device__ __forceinline__ float pa_cache_load(pa_cache_t x) { return cs_bf16_to_f32(x); }
#elif CACHE_DTYPE == 1
typedef cs_u8 pa_cache_t;
constexpr bool kCacheFp8 = true;
__device__ __forceinline__ float pa_cache_load(pa_cache_t x) { return cs_e4m3_to_f32(x); }
#else
#error "CACHE_DTYPE must be 0 (bf16) or 1 (fp8 e4m3)"
#endif

// Element offset of (block, row, head, 0) in key_cache / value_cache. `block_stride` is the
// element distance between two blocks: block_size * Hk * D for the plain layout, a whole
// K+V page for the block-major layout of hybrid models (see paged_kernels.h).
__device__ __forceinline__ cs_i64 pa_cache_offset(cs_i64 block, int row, cs_i64 block_stride,
                                                  int num_kv_heads, int head) {
  return block * block_stride + (static_cast<cs_i64>(row) * num_kv_heads + head) * kD;
}

// Attention of one query over cached tokens [start, end) of one sequence and KV head, by a CTA of
// NWARPS warps (blockDim.x == 32 * NWARPS; every thread must call it). q holds the lane's
// coordinates (lane + 32 i) of the query with the softmax scale folded in; bt is the sequence's
// block-table row. Requires start < end. On return (after a __syncthreads) s_out[0, D) holds the
// normalized output, and the function returns the natural-log LSE of the scaled scores.
//
// K and V are read raw: a token's score is k_scale * (q . k_raw), and v_scale multiplies the
// normalized output once at the end (both 1 for bf16).
template <int BS, int NWARPS>
__device__ __forceinline__ float pa_attend(const float (&q)[kCpl],
                                           const pa_cache_t* __restrict__ key_cache,
                                           const pa_cache_t* __restrict__ value_cache,
                                           float k_scale, float v_scale,
                                           const int* __restrict__ bt, cs_i64 block_stride,
                                           int start, int end, int num_kv_heads, int head,
                                           float* s_out) {
  __shared__ float s_m[NWARPS];
  __shared__ float s_l[NWARPS];
  __shared__ float s_w[NWARPS];
  __shared__ float s_acc[NWARPS][kD];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  float m = cs_neg_inf();
  float l = 0.0f;
  float acc[kCpl];
#pragma unroll
  for (int i = 0; i < kCpl; ++i) acc[i] = 0.0f;

  // Each warp walks its own tokens; the trip count is uniform within the warp, so the shuffles
  // stay converged.
  for (int t = start + warp; t < end; t += NWARPS) {
    const cs_i64 off =
        pa_cache_offset(bt[t / BS], t % BS, block_stride, num_kv_heads, head) + lane;
    const pa_cache_t* kp = key_cache + off;
    const pa_cache_t* vp = value_cache + off;
    float dot = 0.0f;
    float v[kCpl];
#pragma unroll
    for (int i = 0; i < kCpl; ++i) {
      dot += q[i] * pa_cache_load(kp[32 * i]);
      v[i] = pa_cache_load(vp[32 * i]);
    }
    const CsSoftmaxStep st = cs_online_softmax_step(m, l, cs_warp_sum(dot) * k_scale);
#pragma unroll
    for (int i = 0; i < kCpl; ++i) acc[i] = acc[i] * st.alpha + st.p * v[i];
  }

  // Merge the warps' states; a warp without tokens has m = -inf, l = 0 and weight 0.
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kCpl; ++i) s_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  // Warp 0 had a token (start < end), as the merge requires.
  const float lse =
      cs_merge_softmax_parts<kD, NWARPS, 32 * NWARPS>(s_m, s_l, s_acc, s_w, v_scale, s_out);
  __syncthreads();
  return lse;
}

// The query vector of one head for pa_attend: lane's coordinates, times sm_scale.
__device__ __forceinline__ void pa_load_query(const cs_u16* __restrict__ qp, float sm_scale,
                                              float (&q)[kCpl]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < kCpl; ++i) q[i] = cs_bf16_to_f32(qp[lane + 32 * i]) * sm_scale;
}
#endif  // CACHE_DTYPE
