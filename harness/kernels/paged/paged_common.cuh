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
// Work split of the attention kernels: one warp per cached token at a time; lane l owns the
// coordinates l, l + 32, l + 64, ... (kCpl = D / 32 of them), so a warp's loads of one token row
// are coalesced. q . k is a warp-wide butterfly sum, each warp keeps its own online-softmax state,
// and the warps' states are merged through shared memory at the end.

#ifndef HEAD_DIM
#error "HEAD_DIM must be defined (NVRTC option -DHEAD_DIM=<multiple of 32 in [32, 256]>)"
#endif
#if (HEAD_DIM < 32) || (HEAD_DIM > 256) || ((HEAD_DIM % 32) != 0)
#error "HEAD_DIM must be a multiple of 32 in [32, 256]"
#endif

typedef unsigned char pa_u8;
typedef unsigned short pa_u16;
typedef unsigned int pa_u32;
typedef long long pa_i64;

constexpr int kD = HEAD_DIM;
constexpr int kCpl = kD / 32;  // coordinates per lane
constexpr unsigned kFullMask = 0xffffffffu;

// ---- number formats (bit-level, no CUDA headers) ---------------------------------------------

__device__ __forceinline__ float pa_bf16_to_f32(pa_u16 b) {
  return __uint_as_float(static_cast<pa_u32>(b) << 16);
}

// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ pa_u16 pa_f32_to_bf16(float f) {
  pa_u32 x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<pa_u16>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<pa_u16>(x >> 16);
}

__device__ __forceinline__ float pa_neg_inf() { return __int_as_float(0xff800000); }

// E4M3 byte -> float (exact). Software on every arch, so sm_86 (no fp8 cvt) behaves as sm_90.
__device__ __forceinline__ float pa_e4m3_to_f32(pa_u8 b) {
  const pa_u32 sign = static_cast<pa_u32>(b & 0x80u) << 24;
  const pa_u32 e = (b >> 3) & 0xfu;
  const pa_u32 m = b & 0x7u;
  if (e == 0) {  // zero and subnormals: m * 2^-9
    const float mag = static_cast<float>(m) * 0.001953125f;
    return __uint_as_float(__float_as_uint(mag) | sign);
  }
  if (e == 15 && m == 7) return __uint_as_float(0x7fc00000u | sign);  // NaN
  return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
}

// float -> E4M3 byte: round to nearest even, saturating to +-448 (NaN -> 0x7f with the sign).
__device__ __forceinline__ pa_u8 pa_f32_to_e4m3(float f) {
  const pa_u32 x = __float_as_uint(f);
  const pa_u32 sign = (x >> 24) & 0x80u;
  const pa_u32 ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<pa_u8>(sign | 0x7fu);
  const float a = __uint_as_float(ax);
  if (a >= 448.0f) return static_cast<pa_u8>(sign | 0x7eu);
  if (a < 0.015625f) {  // below the smallest normal 2^-6: multiples of 2^-9 (8 -> 0x08 = 2^-6)
    return static_cast<pa_u8>(sign | static_cast<pa_u32>(rintf(a * 512.0f)));
  }
  // Normal: keep 3 mantissa bits, round half to even on the 20 dropped bits. A carry into the
  // exponent is the correct result; a < 448 keeps the result <= 448 (exponent 8, mantissa 6).
  const pa_u32 r = ax + 0x7ffffu + ((ax >> 20) & 1u);
  const pa_u32 e = (r >> 23) - 120u;  // biased e4m3 exponent, 1..15
  const pa_u32 m = (r >> 20) & 7u;
  return static_cast<pa_u8>(sign | (e << 3) | m);
}

// ---- the cache element type --------------------------------------------------------------------

#ifdef CACHE_DTYPE
#if CACHE_DTYPE == 0
typedef pa_u16 pa_cache_t;
constexpr bool kCacheFp8 = false;
__device__ __forceinline__ float pa_cache_load(pa_cache_t x) { return pa_bf16_to_f32(x); }
#elif CACHE_DTYPE == 1
typedef pa_u8 pa_cache_t;
constexpr bool kCacheFp8 = true;
__device__ __forceinline__ float pa_cache_load(pa_cache_t x) { return pa_e4m3_to_f32(x); }
#else
#error "CACHE_DTYPE must be 0 (bf16) or 1 (fp8 e4m3)"
#endif

// Element offset of (block, row, head, 0) in key_cache / value_cache. `block_stride` is the
// element distance between two blocks: block_size * Hk * D for the plain layout, a whole
// K+V page for the block-major layout of hybrid models (see paged_kernels.h).
__device__ __forceinline__ pa_i64 pa_cache_offset(pa_i64 block, int row, pa_i64 block_stride,
                                                  int num_kv_heads, int head) {
  return block * block_stride + (static_cast<pa_i64>(row) * num_kv_heads + head) * kD;
}

__device__ __forceinline__ float pa_warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
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
                                           const int* __restrict__ bt, pa_i64 block_stride,
                                           int start, int end, int num_kv_heads, int head,
                                           float* s_out) {
  __shared__ float s_m[NWARPS];
  __shared__ float s_l[NWARPS];
  __shared__ float s_w[NWARPS];
  __shared__ float s_acc[NWARPS][kD];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  float m = pa_neg_inf();
  float l = 0.0f;
  float acc[kCpl];
#pragma unroll
  for (int i = 0; i < kCpl; ++i) acc[i] = 0.0f;

  // Each warp walks its own tokens; the trip count is uniform within the warp, so the shuffles
  // stay converged.
  for (int t = start + warp; t < end; t += NWARPS) {
    const pa_i64 off =
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
    const float score = pa_warp_sum(dot) * k_scale;
    const float m_new = fmaxf(m, score);
    const float alpha = expf(m - m_new);  // 0 for the first token (m = -inf)
    const float p = expf(score - m_new);
    l = l * alpha + p;
#pragma unroll
    for (int i = 0; i < kCpl; ++i) acc[i] = acc[i] * alpha + p * v[i];
    m = m_new;
  }

  // Merge the warps' states; a warp without tokens has m = -inf, l = 0 and weight 0.
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kCpl; ++i) s_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float m_all = pa_neg_inf();
#pragma unroll
  for (int j = 0; j < NWARPS; ++j) m_all = fmaxf(m_all, s_m[j]);  // finite: warp 0 had a token
  if (tid < NWARPS) s_w[tid] = expf(s_m[tid] - m_all);
  __syncthreads();
  float l_all = 0.0f;
#pragma unroll
  for (int j = 0; j < NWARPS; ++j) l_all += s_l[j] * s_w[j];
  const float out_mul = v_scale / l_all;
  for (int d = tid; d < kD; d += 32 * NWARPS) {
    float o = 0.0f;
#pragma unroll
    for (int j = 0; j < NWARPS; ++j) o += s_acc[j][d] * s_w[j];
    s_out[d] = o * out_mul;
  }
  __syncthreads();
  return m_all + logf(l_all);
}

// The query vector of one head for pa_attend: lane's coordinates, times sm_scale.
__device__ __forceinline__ void pa_load_query(const pa_u16* __restrict__ qp, float sm_scale,
                                              float (&q)[kCpl]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < kCpl; ++i) q[i] = pa_bf16_to_f32(qp[lane + 32 * i]) * sm_scale;
}
#endif  // CACHE_DTYPE
