// Device helpers every kernel family uses: fixed-width integers, number-format conversions, warp
// reductions. kernels::make_kernel_source (source_util.cpp) puts this text first in every
// family's NVRTC program, ahead of the family's own common header, so the families need no copy
// of their own and cannot drift apart.
//
// NVRTC gets no include path for these programs, so nothing here may #include (not even
// <cstdint>, cuda_bf16.h or cuda_fp8.h): the integer types are typedefs and every conversion is
// written at the bit level or as inline PTX.
//
// Every name starts with cs_. Families pass their compile-time constants as -D macros, among
// them single letters (B, D, H, K, N, V ...) and lower-case names (a, b, k, m, s, x, z, dim,
// state ...), so this header also avoids such names for its parameters and locals: it is
// compiled together with every family's macros.

typedef unsigned char cs_u8;
typedef unsigned short cs_u16;
typedef unsigned int cs_u32;
typedef int cs_i32;
typedef long long cs_i64;
typedef unsigned long long cs_u64;

/// All 32 lanes of a warp, for the *_sync shuffles.
constexpr unsigned cs_full_mask = 0xffffffffu;

/// -inf, the neutral element of a running max (no INFINITY macro without headers).
__device__ __forceinline__ float cs_neg_inf() { return __int_as_float(0xff800000); }

// ---- bf16 --------------------------------------------------------------------------------------
// bf16 is the upper half of a float32, so widening is a shift.

__device__ __forceinline__ float cs_bf16_to_f32(cs_u16 bits) {
  return __uint_as_float(static_cast<cs_u32>(bits) << 16);
}

/// float -> bf16 bits, rounded to nearest even, in software (any arch). A NaN stays a NaN with
/// its sign and upper payload bits (the quiet bit is set so the truncation cannot make it Inf).
__device__ __forceinline__ cs_u16 cs_f32_to_bf16(float val) {
  cs_u32 bits = __float_as_uint(val);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<cs_u16>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<cs_u16>(bits >> 16);
}

/// `val` rounded to the nearest bf16 value, as a float (a bf16 store followed by a load).
__device__ __forceinline__ float cs_round_bf16(float val) {
  return cs_bf16_to_f32(cs_f32_to_bf16(val));
}

/// Two floats as a bf16 pair, `lo` in the low half, each rounded by cs_f32_to_bf16.
__device__ __forceinline__ cs_u32 cs_pack_bf16x2(float lo, float hi) {
  return static_cast<cs_u32>(cs_f32_to_bf16(lo)) | (static_cast<cs_u32>(cs_f32_to_bf16(hi)) << 16);
}

// The conversion instructions of sm_80+: one instruction instead of cs_f32_to_bf16's six, the
// same result for every input but NaN (the instruction writes the canonical NaN 0x7fff).

/// float -> bf16 bits by cvt.rn.bf16.f32 (sm_80+).
__device__ __forceinline__ cs_u16 cs_f32_to_bf16_cvt(float val) {
  cs_u16 bits;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(val));
  return bits;
}

/// Two floats as a bf16 pair, `lo` in the low half, by cvt.rn.bf16x2.f32 (sm_80+).
__device__ __forceinline__ cs_u32 cs_pack_bf16x2_cvt(float lo, float hi) {
  cs_u32 pair;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(hi), "f"(lo));
  return pair;
}

// ---- fp16 (PTX conversions: exact widening, round-to-nearest-even narrowing) -------------------

__device__ __forceinline__ float cs_f16_to_f32(cs_u16 bits) {
  float val;
  asm("cvt.f32.f16 %0, %1;" : "=f"(val) : "h"(bits));
  return val;
}

__device__ __forceinline__ cs_u16 cs_f32_to_f16(float val) {
  cs_u16 bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(val));
  return bits;
}

/// Two floats as an fp16 pair, `lo` in the low half, by cvt.rn.f16x2.f32 (sm_80+).
__device__ __forceinline__ cs_u32 cs_pack_f16x2_cvt(float lo, float hi) {
  cs_u32 pair;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(hi), "f"(lo));
  return pair;
}

// ---- fp8 e4m3 (OCP: bias 7, no infinities, 0x7f / 0xff NaN, largest finite 448) ---------------
// Software on every arch, so sm_86 (no fp8 cvt instruction) gives the same bits as sm_90.

/// e4m3 byte -> float (exact). A NaN byte gives a quiet NaN with the byte's sign. Branch-free:
/// the byte's exponent and mantissa bits go to the bottom of a float's exponent field (a float
/// of 2^-120 times the value, subnormal for e4m3 subnormals), and one multiply by 2^120 puts
/// them in place; exact because NVRTC compiles without -ftz (float subnormals are kept), so
/// every architecture gives the same bits. Only the low 8 bits of `byte` are read.
__device__ __forceinline__ float cs_e4m3_to_f32(cs_u32 byte) {
  const cs_u32 sign = (byte & 0x80u) << 24;
  const cs_u32 mag_bits = byte & 0x7fu;
  const float value = __uint_as_float(sign | (mag_bits << 20)) * 0x1p120f;
  return mag_bits == 0x7fu ? __uint_as_float(0x7fc00000u | sign) : value;
}

/// float -> e4m3 byte: round to nearest even, saturating to +-448; NaN -> 0x7f with the sign.
__device__ __forceinline__ cs_u8 cs_f32_to_e4m3(float val) {
  const cs_u32 bits = __float_as_uint(val);
  const cs_u32 sign = (bits >> 24) & 0x80u;
  const cs_u32 abits = bits & 0x7fffffffu;
  if (abits > 0x7f800000u) return static_cast<cs_u8>(sign | 0x7fu);
  const float mag = __uint_as_float(abits);
  if (mag >= 448.0f) return static_cast<cs_u8>(sign | 0x7eu);
  if (mag < 0.015625f) {  // below the smallest normal 2^-6: multiples of 2^-9 (8 -> 0x08 = 2^-6)
    return static_cast<cs_u8>(sign | static_cast<cs_u32>(rintf(mag * 512.0f)));
  }
  // Normal: keep 3 mantissa bits, round half to even on the 20 dropped bits. A carry into the
  // exponent is the correct result; mag < 448 keeps the result <= 448 (exponent 8, mantissa 6).
  const cs_u32 rounded = abits + 0x7ffffu + ((abits >> 20) & 1u);
  const cs_u32 ex = (rounded >> 23) - 120u;  // biased e4m3 exponent, 1..15
  const cs_u32 man = (rounded >> 20) & 7u;
  return static_cast<cs_u8>(sign | (ex << 3) | man);
}

// ---- element types by dtype code ---------------------------------------------------------------
// Families whose tensors may be float32, float16 or bfloat16 pass the element type as a constexpr
// code derived from the pointer's dtype: 0 = float32, 1 = float16, 2 = bfloat16.

#define CS_F32 0
#define CS_F16 1
#define CS_BF16 2

/// Storage type T of a dtype code and its float conversions (narrowing rounds to nearest even,
/// as Triton's implicit cast on tl.store does; bf16 by cs_f32_to_bf16).
template <int kCsCode>
struct CsType;
template <>
struct CsType<CS_F32> {
  typedef float T;
  static __device__ __forceinline__ float load(T val) { return val; }
  static __device__ __forceinline__ T store(float val) { return val; }
};
template <>
struct CsType<CS_F16> {
  typedef cs_u16 T;
  static __device__ __forceinline__ float load(T val) { return cs_f16_to_f32(val); }
  static __device__ __forceinline__ T store(float val) { return cs_f32_to_f16(val); }
};
template <>
struct CsType<CS_BF16> {
  typedef cs_u16 T;
  static __device__ __forceinline__ float load(T val) { return cs_bf16_to_f32(val); }
  static __device__ __forceinline__ T store(float val) { return cs_f32_to_bf16(val); }
};

// ---- warp reductions (butterfly: every lane ends with the result) ------------------------------

__device__ __forceinline__ float cs_warp_sum(float val) {
#pragma unroll
  for (int ofs = 16; ofs > 0; ofs >>= 1) val += __shfl_xor_sync(cs_full_mask, val, ofs);
  return val;
}

__device__ __forceinline__ float cs_warp_max(float val) {
#pragma unroll
  for (int ofs = 16; ofs > 0; ofs >>= 1) val = fmaxf(val, __shfl_xor_sync(cs_full_mask, val, ofs));
  return val;
}

// ---- shared memory -----------------------------------------------------------------------------

/// The 32-bit shared-window address of a generic pointer into shared memory (the operand form of
/// ldmatrix, cp.async, mbarrier and TMA instructions).
__device__ __forceinline__ cs_u32 cs_smem_addr(const void* ptr) {
  return static_cast<cs_u32>(__cvta_generic_to_shared(ptr));
}

// ---- tensor cores: warp-level ldmatrix and mma.sync (sm_80+) ------------------------------------

/// ldmatrix .m8n8 .b16 .x4: four 8x8 matrices of 16-bit elements from shared memory into
/// cs_frag[0..3] (matrix i in cs_frag[i]), transposed when cs_trans. Lane l passes the shared-window
/// address (cs_smem_addr) of row l % 8 of matrix l / 8; rows are 16 bytes and 16-byte aligned.
__device__ __forceinline__ void cs_ldmatrix_x4(cs_u32* cs_frag, cs_u32 cs_saddr,
                                               bool cs_trans = false) {
  if (cs_trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(cs_frag[0]), "=r"(cs_frag[1]), "=r"(cs_frag[2]), "=r"(cs_frag[3])
                 : "r"(cs_saddr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(cs_frag[0]), "=r"(cs_frag[1]), "=r"(cs_frag[2]), "=r"(cs_frag[3])
                 : "r"(cs_saddr));
  }
}

/// ldmatrix .x2: two 8x8 matrices into cs_frag[0..1]; lanes 0..15 pass the row addresses (the
/// other lanes' addresses are ignored but must still be valid shared addresses).
__device__ __forceinline__ void cs_ldmatrix_x2(cs_u32* cs_frag, cs_u32 cs_saddr,
                                               bool cs_trans = false) {
  if (cs_trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(cs_frag[0]), "=r"(cs_frag[1])
                 : "r"(cs_saddr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(cs_frag[0]), "=r"(cs_frag[1])
                 : "r"(cs_saddr));
  }
}

/// cs_acc (a 16x8 fp32 tile) += A (16x16 bf16, row-major fragment cs_a[0..3]) * B (16x8 bf16,
/// column-major fragment cs_b[0..1]): mma.sync m16n8k16 with fp32 accumulation. Which element a
/// lane holds in cs_acc is given by cs_mma_acc_row / cs_mma_acc_col.
__device__ __forceinline__ void cs_mma_bf16_m16n8k16(float* cs_acc, const cs_u32* cs_a,
                                                     const cs_u32* cs_b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(cs_acc[0]), "+f"(cs_acc[1]), "+f"(cs_acc[2]), "+f"(cs_acc[3])
      : "r"(cs_a[0]), "r"(cs_a[1]), "r"(cs_a[2]), "r"(cs_a[3]), "r"(cs_b[0]), "r"(cs_b[1]));
}

/// Row (0..15) within its m16n8 tile of element cs_e (0..3) of this lane's accumulator fragment
/// (PTX m16n8 C layout: elements 0, 1 at row lane / 4, elements 2, 3 eight rows below).
__device__ __forceinline__ int cs_mma_acc_row(int cs_e) {
  return ((threadIdx.x & 31) >> 2) + ((cs_e >> 1) << 3);
}

/// Column (0..7) within its m16n8 tile of element cs_e of this lane's accumulator fragment
/// (2 * (lane % 4) plus cs_e's low bit).
__device__ __forceinline__ int cs_mma_acc_col(int cs_e) {
  return ((threadIdx.x & 3) << 1) + (cs_e & 1);
}
