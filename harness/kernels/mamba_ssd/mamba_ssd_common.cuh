// Mamba2 SSD chunked scan: device helpers shared by every mamba_ssd kernel. This text is prepended
// to each kernel's source at build time (mamba_ssd_kernels.cpp), so every NVRTC program is
// self-contained: no #include, no CUDA headers.
//
// Conventions of the chain (vLLM's ssd_*.py after PR #35397):
//   tokens are packed varlen [T, ...]; chunk c owns rows cu_chunk_seqlens[c] ..
//   cu_chunk_seqlens[c+1]-1 (at most chunk_size, never two sequences);
//   dt / dA_cumsum are float32 [H, nchunks, chunk_size]; states [nchunks, H, P, N];
//   head h reads group h / (H / G) of B and C.
// Element-type codes (constexprs that follow the pointer dtypes): 0 = f32, 1 = f16, 2 = bf16.
//
// Matrix products use the tensor cores through mma.sync.m16n8k16 (bf16 in, f32 accumulate), with
// operands staged in shared memory and fetched with ldmatrix (.trans for operands stored with the
// M / N dimension contiguous). Rows are padded by 8 elements: 16-byte aligned for ldmatrix and
// spread over the banks.
// Note: the vLLM constexpr names (K, dim, hdim, dstate, chunk_size, ...) are -D macros of the
// kernel that uses them; helpers here use ms_-prefixed names only (and device_common.cuh's cs_
// ones).

#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif
#ifndef NUM_STAGES
#define NUM_STAGES 1
#endif
constexpr int kMsThreads = NUM_WARPS * 32;

// CsType (device_common.cuh) plus the bf16 operand form the tensor-core products stage:
// float32 and float16 values are rounded to bf16 (nearest even), bf16 values pass unchanged.
template <int kCode>
struct MsType : CsType<kCode> {
  static __device__ __forceinline__ cs_u16 to_bf16(typename CsType<kCode>::T v) {
    if constexpr (kCode == CS_BF16) {
      return v;
    } else {
      return cs_f32_to_bf16(CsType<kCode>::load(v));
    }
  }
};

// triton_helpers.fast_exp: exp(x) as exp2(x * log2(e)).
__device__ __forceinline__ float ms_fast_exp(float v) { return exp2f(1.4426950408889634f * v); }

// mamba_ssm.softplus as vLLM's kernels use it: log(exp(x) + 1) (the callers pass x itself above
// 20).
__device__ __forceinline__ float ms_softplus(float v) { return logf(expf(v) + 1.0f); }

// ---- tensor-core tiles ----------------------------------------------------------------------

// How a block tile of kRows x kCols outputs is split among NUM_WARPS warps: a kWarpsM x kWarpsN
// grid of warps, each owning kMt x kNt mma tiles (16 x 8 each). With fewer tiles than warps the
// warps past kActive only help staging.
template <int kRows, int kCols>
struct MsWarpGrid {
  static constexpr int kMTiles = kRows / 16;
  static constexpr int kNTiles = kCols / 8;
  static constexpr int kWarpsM = NUM_WARPS < kMTiles ? NUM_WARPS : kMTiles;
  static constexpr int kWarpsNMax = NUM_WARPS / kWarpsM;
  static constexpr int kWarpsN = kWarpsNMax < kNTiles ? kWarpsNMax : kNTiles;
  static constexpr int kMt = kMTiles / kWarpsM;
  static constexpr int kNt = kNTiles / kWarpsN;
  static constexpr int kActive = kWarpsM * kWarpsN;
  static_assert(kMTiles >= 1 && kNTiles >= 1, "tile smaller than one mma tile");
  static_assert(kMTiles % kWarpsM == 0 && kNTiles % kWarpsN == 0, "uneven warp split");
  // First output row / column of warp w's sub-tile.
  static __device__ __forceinline__ int row0(int w) { return (w % kWarpsM) * kMt * 16; }
  static __device__ __forceinline__ int col0(int w) { return (w / kWarpsM) * kNt * 8; }
};

// acc[i][j] (the 16 x 8 tile at rows m0 + 16 i, cols n0 + 8 j) += A[rows, 0:kd] * B[0:kd, cols].
//   kATrans false: sa holds A as [M][K] (K contiguous, row stride lda);
//           true:  sa holds A as [K][M] (M contiguous).
//   kBTrans false: sb holds B as [N][K] (K contiguous, row stride ldb);
//           true:  sb holds B as [K][N] (N contiguous).
// Fragment ownership of acc (PTX m16n8k16): lane l holds acc[.][.][0..1] at row l/4, cols
// 2 (l%4) + {0, 1}, and [2..3] at row l/4 + 8 (see cs_mma_acc_row / cs_mma_acc_col).
template <int kMt, int kNt, bool kATrans, bool kBTrans>
__device__ __forceinline__ void ms_warp_mma(float (*acc)[kNt][4], const cs_u16* sa, int lda,
                                            const cs_u16* sb, int ldb, int m0, int n0, int kd) {
  const int lane = threadIdx.x & 31;
  const int r = lane & 7, q = lane >> 3;
  for (int k0 = 0; k0 < kd; k0 += 16) {
    cs_u32 af[kMt][4];
    cs_u32 bf[kNt][2];
#pragma unroll
    for (int i = 0; i < kMt; ++i) {
      const int mb = m0 + 16 * i;
      const cs_u16* p = kATrans ? sa + (k0 + r + (q >> 1) * 8) * lda + mb + (q & 1) * 8
                                : sa + (mb + r + (q & 1) * 8) * lda + k0 + (q >> 1) * 8;
      cs_ldmatrix_x4(af[i], cs_smem_addr(p), kATrans);
    }
#pragma unroll
    for (int j = 0; j < kNt; ++j) {
      const int nb = n0 + 8 * j;
      const cs_u16* p =
          kBTrans ? sb + (k0 + r + (q & 1) * 8) * ldb + nb : sb + (nb + r) * ldb + k0 + (q & 1) * 8;
      cs_ldmatrix_x2(bf[j], cs_smem_addr(p), kBTrans);
    }
#pragma unroll
    for (int i = 0; i < kMt; ++i)
#pragma unroll
      for (int j = 0; j < kNt; ++j) cs_mma_bf16_m16n8k16(acc[i][j], af[i], bf[j]);
  }
}

// ---- staging global -> shared ---------------------------------------------------------------
// Vector width follows the compile key, as Triton's does: a kernel stages 16 bytes per load only
// when the pointer and the strides involved are specialized as divisible by 16 (CS_SPEC_<arg> ==
// 16, see jit.h), else 4 bytes (bf16 pairs) or one element.

// dst[r * ld + c] = src[r * src_stride + c] (bf16) for r < rows, c < cols; rows >= valid_rows
// read as zeros. cols a multiple of 8; dst rows 16-byte aligned.
template <bool kVec>
__device__ __forceinline__ void ms_stage_bf16_rows(cs_u16* dst, int ld, const cs_u16* src,
                                                   cs_i64 src_stride, int rows, int cols,
                                                   int valid_rows) {
  constexpr int kPer = kVec ? 8 : 2;
  const int per_row = cols / kPer;
  for (int i = threadIdx.x; i < rows * per_row; i += kMsThreads) {
    const int r = i / per_row, c = (i % per_row) * kPer;
    if constexpr (kVec) {
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (r < valid_rows) v = *reinterpret_cast<const uint4*>(src + r * src_stride + c);
      *reinterpret_cast<uint4*>(dst + r * ld + c) = v;
    } else {
      cs_u32 v = 0;
      if (r < valid_rows) v = *reinterpret_cast<const cs_u32*>(src + r * src_stride + c);
      *reinterpret_cast<cs_u32*>(dst + r * ld + c) = v;
    }
  }
}

// dst[r * ld + c] = bf16(src[r * src_stride + c]) for r < rows, c < cols, src of dtype code
// kCode. kVec: 16-byte loads (4 float32 or 8 bf16 elements; float16 stays per element).
template <int kCode, bool kVec>
__device__ __forceinline__ void ms_stage_to_bf16(cs_u16* dst, int ld,
                                                 const typename MsType<kCode>::T* src,
                                                 cs_i64 src_stride, int rows, int cols) {
  constexpr bool kV = kVec && kCode != CS_F16;
  constexpr int kPer = !kV ? 1 : (kCode == CS_F32 ? 4 : 8);
  const int per_row = cols / kPer;
  for (int i = threadIdx.x; i < rows * per_row; i += kMsThreads) {
    const int r = i / per_row, c = (i % per_row) * kPer;
    const typename MsType<kCode>::T* s = src + r * src_stride + c;
    if constexpr (kV && kCode == CS_F32) {
      const float4 v = *reinterpret_cast<const float4*>(s);
      *reinterpret_cast<uint2*>(dst + r * ld + c) =
          make_uint2(cs_pack_bf16x2(v.x, v.y), cs_pack_bf16x2(v.z, v.w));
    } else if constexpr (kV) {
      *reinterpret_cast<uint4*>(dst + r * ld + c) = *reinterpret_cast<const uint4*>(s);
    } else {
      dst[r * ld + c] = MsType<kCode>::to_bf16(*s);
    }
  }
}

template <int kMt, int kNt>
__device__ __forceinline__ void ms_zero(float (*acc)[kNt][4]) {
#pragma unroll
  for (int i = 0; i < kMt; ++i)
#pragma unroll
    for (int j = 0; j < kNt; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}
