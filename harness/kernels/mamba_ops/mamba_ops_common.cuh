// Mamba ops (causal conv1d, gated RMSNorm, state gather / scatter): device helpers shared by every
// kernel of the family. This text is prepended to each kernel's source (mamba_ops_kernels.cpp),
// so every NVRTC program is self-contained: no #include at all (no cuda_bf16.h), which keeps each
// compile well under a second.
//
// Element types are passed as dtype codes (constexprs derived from the pointer dtypes the compile
// key already carries, so they add no key distinction of their own):
//   0 = float32, 1 = float16, 2 = bfloat16.
// Conversions are bit-level: float -> bf16 / f16 rounds to nearest even, as Triton's implicit
// cast on tl.store does.

typedef unsigned short mo_u16;
typedef unsigned int mo_u32;
typedef long long mo_i64;

#define MO_F32 0
#define MO_F16 1
#define MO_BF16 2

__device__ __forceinline__ float mo_bf16_to_f32(mo_u16 b) {
  return __uint_as_float(static_cast<mo_u32>(b) << 16);
}

// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ mo_u16 mo_f32_to_bf16(float f) {
  mo_u32 x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<mo_u16>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<mo_u16>(x >> 16);
}

__device__ __forceinline__ float mo_f16_to_f32(mo_u16 h) {
  float f;
  asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ mo_u16 mo_f32_to_f16(float f) {
  mo_u16 h;
  asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
  return h;
}

// Storage type and float conversions of a dtype code.
template <int kCode> struct MoType;
template <> struct MoType<MO_F32> {
  typedef float T;
  static __device__ __forceinline__ float load(T v) { return v; }
  static __device__ __forceinline__ T store(float f) { return f; }
};
template <> struct MoType<MO_F16> {
  typedef mo_u16 T;
  static __device__ __forceinline__ float load(T v) { return mo_f16_to_f32(v); }
  static __device__ __forceinline__ T store(float f) { return mo_f32_to_f16(f); }
};
template <> struct MoType<MO_BF16> {
  typedef mo_u16 T;
  static __device__ __forceinline__ float load(T v) { return mo_bf16_to_f32(v); }
  static __device__ __forceinline__ T store(float f) { return mo_f32_to_bf16(f); }
};

// A bf16 * bf16 product as Triton computes it (both operands bf16 -> a bf16 result): the fp32
// product of two bf16 values is exact, so rounding it once to bf16 is the correctly rounded
// bf16 multiply.
__device__ __forceinline__ float mo_bf16_mul(float a, float b) {
  return mo_bf16_to_f32(mo_f32_to_bf16(a * b));
}

__device__ __forceinline__ float mo_sigmoid(float v) { return 1.0f / (1.0f + __expf(-v)); }

// x / (1 + exp(-x)), the form vLLM's conv kernels write.
__device__ __forceinline__ float mo_silu(float v) { return v / (1.0f + __expf(-v)); }

// Programmatic dependent launch (Triton's tl.extra.cuda.gdc_wait / gdc_launch_dependents): wait
// for the grid this launch depends on, then let dependents start. Hopper and later only; without
// a programmatic launch attribute on this launch (the harness launcher sets none) the wait returns
// at once, so the kernels are correct either way.
__device__ __forceinline__ void mo_gdc_wait_and_launch_dependents() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
