// Device helpers of the DeepGEMM-style family (NVRTC, no includes; the integer types and number
// formats are device_common.cuh's, which every program starts with): bf16 output rounding, mbarriers, TMA tile loads through by-value tensor maps, WGMMA shared-memory
// descriptors and fences (SM90), and the warp-level FP8 mma.sync (SM89+) the SM100 variants use.
#pragma once

/// CUtensorMap as the driver encodes it: 128 opaque bytes, 64-byte aligned, passed by value.
struct __align__(64) TensorMap {
  cs_u64 opaque[16];
};

/// float -> bf16 bits, rounded to nearest even (cs_f32_to_bf16), except that every NaN becomes
/// the canonical 0x7fc0: the GEMM's output format, kept as it was before the shared helpers.
__device__ __forceinline__ cs_u16 float_to_bf16_bits(float f) {
  if ((__float_as_uint(f) & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return cs_f32_to_bf16(f);
}

// ---------------------------------------------------------------- mbarrier

__device__ __forceinline__ void mbar_init(cs_u64* bar, cs_u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(cs_smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// Orders this thread's generic-proxy writes to shared memory (mbarrier inits, staged data) before
/// later async-proxy accesses (TMA, WGMMA) to it.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void mbar_expect_tx(cs_u64* bar, cs_u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(cs_smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(cs_u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(cs_smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(cs_u64* bar, cs_u32 parity) {
  cs_u32 done = 0;
  const cs_u32 addr = cs_smem_addr(bar);
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  }
}

// ---------------------------------------------------------------- TMA

__device__ __forceinline__ void tma_prefetch_map(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, cs_u64* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          cs_smem_addr(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(cs_smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, cs_u64* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(
          cs_smem_addr(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(cs_smem_addr(bar))
      : "memory");
}

// ---------------------------------------------------------------- swizzled tiles

/// Byte offset of (row, byte column) in a tile of 128-byte rows stored with the 128-byte TMA
/// swizzle: 16-byte chunk c of row r sits at chunk c ^ (r % 8).
__device__ __forceinline__ cs_u32 swizzle128_offset(cs_u32 row, cs_u32 byte_col) {
  return row * 128u + ((((byte_col >> 4) ^ (row & 7u)) << 4) | (byte_col & 15u));
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CS_HAS_WGMMA 1
// ---------------------------------------------------------------- WGMMA (sm_90a)

/// Shared-memory matrix descriptor of a K-major tile of 128-byte rows with the 128-byte swizzle:
/// 8-row core groups 1024 bytes apart (stride byte offset), layout type 1 (128B swizzle).
__device__ __forceinline__ cs_u64 wgmma_desc_sw128(const void* tile) {
  const cs_u64 addr = cs_smem_addr(tile);
  cs_u64 desc = (addr & 0x3ffffull) >> 4;
  desc |= static_cast<cs_u64>(1) << 16;             // leading byte offset (unused when swizzled)
  desc |= static_cast<cs_u64>(1024 >> 4) << 32;     // stride byte offset
  desc |= static_cast<cs_u64>(1) << 62;             // 128-byte swizzle
  return desc;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
#else
#define CS_HAS_WGMMA 0
#endif

// ---------------------------------------------------------------- mma.sync FP8 (sm_89+)

// The FP8 operands are loaded with device_common.cuh's cs_ldmatrix_x4 / _x2: a b16 8x8 matrix is
// an 8 x 16-byte tile, which holds 16 e4m3 values per row just as well.

/// D += A (16x32 e4m3, row) * B (32x8 e4m3, col), f32 accumulators in the m16n8 C layout.
__device__ __forceinline__ void mma_fp8_m16n8k32(float* d, cs_u32 a0, cs_u32 a1, cs_u32 a2, cs_u32 a3, cs_u32 b0, cs_u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------- MQA-logits scores

/// Byte offset of (row, byte column) in a tile of kRowBytes-byte rows stored with TMA's
/// kRowBytes-byte swizzle (32, 64 or 128): 16-byte chunk bits XORed with address bits 7 and up.
template <int kRowBytes>
__device__ __forceinline__ cs_u32 swizzled_row_offset(cs_u32 row, cs_u32 col) {
  const cs_u32 off = row * kRowBytes + col;
  return off ^ (((off >> 7) & (kRowBytes / 16 - 1)) << 4);
}

/// The indexer's scores for one m16 sub-tile of KV rows (rows rbase..rbase + 15 of the KV tile at
/// shared address `kv_base`, kHeadDim e4m3 bytes each) against every query row of the tile at
/// `q_base` (kNt n8 tiles of rows, kNumHeads rows per token, kNq tokens): FP8 mma.sync m16n8k32,
/// relu, times the head weights wts[n8][0..1] of this lane's two columns, summed over each token's
/// heads (kQHalves passes over the n8 tiles keep the accumulators within the register budget).
/// Lane `lane` gets, for token t = lane % 4 (when t < kNq), the sums of KV rows rbase + lane / 4
/// (v0) and rbase + lane / 4 + 8 (v1). Shared by fp8_mqa_logits and fp8_paged_mqa_logits.
template <int kHeadDim, int kNumHeads, int kNt, int kQHalves, int kNq>
__device__ __forceinline__ void mqa_subtile_scores(cs_u32 kv_base, cs_u32 q_base, int rbase, int lane,
                                                   const float (*wts)[2], float& v0, float& v1) {
  constexpr int kNtHalf = kNt / kQHalves;
  constexpr int kKSteps = kHeadDim / 32;
  float p0[kNq], p1[kNq];
#pragma unroll
  for (int x = 0; x < kNq; ++x) p0[x] = p1[x] = 0.f;
#pragma unroll
  for (int half = 0; half < kQHalves; ++half) {
    float acc[kNtHalf][4];
#pragma unroll
    for (int j = 0; j < kNtHalf; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
#pragma unroll 1  // unrolled, the loads of every k step are hoisted past the 168-register budget of 9 warps
    for (int kk = 0; kk < kKSteps; ++kk) {
      cs_u32 fa[4];
      cs_ldmatrix_x4(fa, kv_base + swizzled_row_offset<kHeadDim>(rbase + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                                 kk * 32 + (lane >> 4) * 16));
#pragma unroll
      for (int jj = 0; jj < kNtHalf / 2; ++jj) {
        const int n8 = half * kNtHalf + 2 * jj;
        cs_u32 fb[4];
        cs_ldmatrix_x4(fb, q_base + swizzled_row_offset<kHeadDim>((n8 + (lane >> 4)) * 8 + (lane & 7),
                                                                  kk * 32 + ((lane >> 3) & 1) * 16));
        mma_fp8_m16n8k32(acc[2 * jj], fa[0], fa[1], fa[2], fa[3], fb[0], fb[1]);
        mma_fp8_m16n8k32(acc[2 * jj + 1], fa[0], fa[1], fa[2], fa[3], fb[2], fb[3]);
      }
    }
#pragma unroll
    for (int j = 0; j < kNtHalf; ++j) {
      const int n8 = half * kNtHalf + j;
      const int x = (n8 * 8) / kNumHeads;  // the token of these query rows
      p0[x] += fmaxf(acc[j][0], 0.f) * wts[n8][0] + fmaxf(acc[j][1], 0.f) * wts[n8][1];
      p1[x] += fmaxf(acc[j][2], 0.f) * wts[n8][0] + fmaxf(acc[j][3], 0.f) * wts[n8][1];
    }
  }
  const int t = lane % 4;
  v0 = 0.f;
  v1 = 0.f;
#pragma unroll
  for (int q = 0; q < kNq; ++q) {
    p0[q] += __shfl_xor_sync(0xffffffffu, p0[q], 1);
    p0[q] += __shfl_xor_sync(0xffffffffu, p0[q], 2);
    p1[q] += __shfl_xor_sync(0xffffffffu, p1[q], 1);
    p1[q] += __shfl_xor_sync(0xffffffffu, p1[q], 2);
    if (q == t) {
      v0 = p0[q];
      v1 = p1[q];
    }
  }
}
