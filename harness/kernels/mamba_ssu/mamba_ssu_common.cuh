// Mamba2 selective state update (decode): device helpers of mamba_ssu_update. This text is
// prepended to the kernel's source at build time (mamba_ssu_kernels.cpp), so the NVRTC program is
// self-contained: no #include at all.
//
// Element types: every tensor argument's element type is a constexpr code (the dtype Triton reads
// from the pointer signature): 0 = float32, 1 = float16, 2 = bfloat16. Arithmetic is float32
// throughout, as vLLM's kernel loads every operand with .to(tl.float32); values are rounded to
// their storage type (round to nearest even) only when stored.

// Two floats as a 16-bit pair, `lo` in the low half (one cvt instruction, sm_80+).
template <int CODE>
__device__ __forceinline__ cs_u32 ssu_pack2(float lo, float hi) {
  if constexpr (CODE == 2) {
    return cs_pack_bf16x2_cvt(lo, hi);
  } else {
    return cs_pack_f16x2_cvt(lo, hi);
  }
}

// The storage type of a dtype code.
template <int CODE>
struct SsuElem {
  static_assert(CODE >= 0 && CODE <= 2, "dtype code must be 0 (float32), 1 (float16) or 2 (bfloat16)");
  typedef cs_u16 T;
};
template <>
struct SsuElem<0> {
  typedef float T;
};

template <int CODE>
__device__ __forceinline__ float ssu_load(const typename SsuElem<CODE>::T* p) {
  if constexpr (CODE == 0) {
    return *p;
  } else if constexpr (CODE == 1) {
    return cs_f16_to_f32(*p);
  } else {
    return cs_bf16_to_f32(*p);
  }
}

template <int CODE>
__device__ __forceinline__ void ssu_store(typename SsuElem<CODE>::T* p, float v) {
  if constexpr (CODE == 0) {
    *p = v;
  } else if constexpr (CODE == 1) {
    *p = cs_f32_to_f16(v);
  } else {
    *p = cs_f32_to_bf16_cvt(v);
  }
}

// Four consecutive elements as one 16-byte (float32) or 8-byte (16-bit) access; the caller
// guarantees the alignment (the compile key's specialization says so).
template <int CODE>
__device__ __forceinline__ void ssu_load4(const typename SsuElem<CODE>::T* p, float (&v)[4]) {
  if constexpr (CODE == 0) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else {
    const uint2 q = *reinterpret_cast<const uint2*>(p);
    const cs_u32 w[2] = {q.x, q.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if constexpr (CODE == 2) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      } else {
        v[2 * i] = cs_f16_to_f32(static_cast<cs_u16>(w[i] & 0xffffu));
        v[2 * i + 1] = cs_f16_to_f32(static_cast<cs_u16>(w[i] >> 16));
      }
    }
  }
}

template <int CODE>
__device__ __forceinline__ void ssu_store4(typename SsuElem<CODE>::T* p, const float (&v)[4]) {
  if constexpr (CODE == 0) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    uint2 q;
    q.x = ssu_pack2<CODE>(v[0], v[1]);
    q.y = ssu_pack2<CODE>(v[2], v[3]);
    *reinterpret_cast<uint2*>(p) = q;
  }
}

// ---- math as vLLM's Triton kernel does it ------------------------------------------------------

// softplus of mamba_ssm.py (the Triton >= 3 branch): log(exp(x) + 1) for x <= 20, else x.
__device__ __forceinline__ float ssu_softplus(float x) {
  return x <= 20.0f ? logf(expf(x) + 1.0f) : x;
}

// fast_exp of mamba/ops/triton_helpers.py: exp2(log2(e) * x), which Triton lowers to one
// ex2.approx.f32.
__device__ __forceinline__ float ssu_fast_exp(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(1.4426950408889634f * x));
  return y;
}
