// Gated delta net (GDN) decode kernels: device helpers shared by gdn_decode_update and
// gdn_decode_mtp. This text is prepended to each kernel's source at build time (see
// gdn_decode_kernels.cpp), so every NVRTC program is self-contained: no #include at all.
//
// State of one value head: S [V, K] (vLLM's layout, ssm_state[slot, hv, v, k]); its element type
// is the STATE_DTYPE constexpr: 0 = bf16 (vLLM's default, mamba_ssm_cache_dtype "auto" on a bf16
// model), 1 = float32 (--mamba-ssm-cache-dtype float32). Arithmetic is float32 throughout; the
// state is rounded to its storage type only when stored.
//
// Work split of both kernels: warp w of a CTA owns kRows consecutive state rows (value
// coordinates); lane l owns the KPL = K / 32 consecutive key coordinates [l * KPL, (l + 1) * KPL),
// so a warp's loads of one state row are coalesced (float4 per lane for a float32 state at
// K = 128). Row dot products (S k, S q) are warp reductions; gd_reduce_rows sums kRows values at
// once with a halving butterfly (a "reduce-scatter": log2(kRows) + the remaining steps shuffles
// instead of 5 * kRows).

// ---- the state element type ------------------------------------------------------------------

#ifndef STATE_DTYPE
#error "STATE_DTYPE must be defined (0 = bf16, 1 = float32)"
#endif
#if STATE_DTYPE == 0
typedef cs_u16 gd_state_t;
#elif STATE_DTYPE == 1
typedef float gd_state_t;
#else
#error "STATE_DTYPE must be 0 (bf16) or 1 (float32)"
#endif

// Loads / stores N consecutive state elements (N = 4: one 16-byte float4 or one 8-byte uint2).
template <int N>
__device__ __forceinline__ void gd_load_state(const gd_state_t* p, float (&out)[N]) {
#if STATE_DTYPE == 1
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + i);
      out[i] = v.x;
      out[i + 1] = v.y;
      out[i + 2] = v.z;
      out[i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = p[i];
  }
#else
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const uint2 v = *reinterpret_cast<const uint2*>(p + i);
      out[i] = __uint_as_float(v.x << 16);
      out[i + 1] = __uint_as_float(v.x & 0xffff0000u);
      out[i + 2] = __uint_as_float(v.y << 16);
      out[i + 3] = __uint_as_float(v.y & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = cs_bf16_to_f32(p[i]);
  }
#endif
}

template <int N>
__device__ __forceinline__ void gd_store_state(gd_state_t* p, const float (&in)[N]) {
#if STATE_DTYPE == 1
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      *reinterpret_cast<float4*>(p + i) = make_float4(in[i], in[i + 1], in[i + 2], in[i + 3]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] = in[i];
  }
#else
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      uint2 v;
      v.x = cs_pack_bf16x2_cvt(in[i], in[i + 1]);
      v.y = cs_pack_bf16x2_cvt(in[i + 2], in[i + 3]);
      *reinterpret_cast<uint2*>(p + i) = v;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] = cs_f32_to_bf16(in[i]);
  }
#endif
}

// N consecutive bf16 values as floats (N = 4: one 8-byte load; the caller guarantees alignment).
template <int N>
__device__ __forceinline__ void gd_load_bf16(const cs_u16* p, float (&out)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const uint2 v = *reinterpret_cast<const uint2*>(p + i);
      out[i] = __uint_as_float(v.x << 16);
      out[i + 1] = __uint_as_float(v.x & 0xffff0000u);
      out[i + 2] = __uint_as_float(v.y << 16);
      out[i + 3] = __uint_as_float(v.y & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = cs_bf16_to_f32(p[i]);
  }
}

// ---- reductions --------------------------------------------------------------------------------

// Warp-wide sums of R per-lane values x[0..R) (R a power of two, 1..32). On return, lane l holds
// in x[0] the full sum of value gd_reduced_row<R>(l); every value's sum is held by 32 / R lanes.
template <int R>
__device__ __forceinline__ void gd_reduce_rows(float (&x)[R]) {
  static_assert(R >= 1 && R <= 32 && (R & (R - 1)) == 0, "R must be a power of two <= 32");
  const int lane = threadIdx.x & 31;
  int offset = 16;
#pragma unroll
  for (int half = R / 2; half >= 1; half /= 2) {
    // Lanes with the offset bit set keep the upper half of the remaining values, the others the
    // lower half; each sends the half it gives away to its partner.
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float give = upper ? x[i] : x[i + half];
      const float keep = upper ? x[i + half] : x[i];
      x[i] = keep + __shfl_xor_sync(cs_full_mask, give, offset);
    }
    offset >>= 1;
  }
  for (; offset > 0; offset >>= 1) x[0] += __shfl_xor_sync(cs_full_mask, x[0], offset);
}

// The value index whose sum lane `lane` holds after gd_reduce_rows<R>.
template <int R>
__device__ __forceinline__ int gd_reduced_row(int lane) {
  int row = 0;
  int offset = 16;
#pragma unroll
  for (int half = R / 2; half >= 1; half /= 2) {
    if (lane & offset) row += half;
    offset >>= 1;
  }
  return row;
}

// The first lane holding the sum of value `row` after gd_reduce_rows<R>.
template <int R>
__device__ __forceinline__ int gd_lane_of_row(int row) {
  int lane = 0;
  int offset = 16;
#pragma unroll
  for (int half = R / 2; half >= 1; half /= 2) {
    if (row >= half) {
      lane |= offset;
      row -= half;
    }
    offset >>= 1;
  }
  return lane;
}

// ---- gating ------------------------------------------------------------------------------------

// g = -exp(A_log) * softplus(a + dt_bias), softplus with vLLM's beta / threshold: for
// beta * x <= threshold (1 / beta) * log(1 + exp(beta * x)), else x. Returns exp(g), the decay.
__device__ __forceinline__ float gd_decay(float a_log, float x, float sp_beta, float sp_threshold) {
  const float bx = sp_beta * x;
  const float softplus = bx <= sp_threshold ? (1.0f / sp_beta) * logf(1.0f + expf(bx)) : x;
  return expf(-expf(a_log) * softplus);
}

__device__ __forceinline__ float gd_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
