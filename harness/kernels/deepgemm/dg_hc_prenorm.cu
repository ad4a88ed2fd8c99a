// tf32_hc_prenorm_gemm: the hyper-connection pre-norm GEMM, split over K.
//
//   out_mul[s, m, n] = sum over k in split s of x[m, k] * fn[n, k]
//   sqrsum[s, m]     = sum over k in split s of x[m, k]^2
//
// x is bf16 [M, K] (K contiguous, any row stride), fn fp32 [N, K]. The K blocks of 64 are dealt
// to the NUM_SPLITS splits as DeepGEMM does (impls/sm90_tf32_hc_prenorm_gemm.cuh): with
// nkb = K / 64, per = nkb / S and rem = nkb % S, split s starts at block s * per + min(s, rem)
// and owns per + (s < rem) blocks. Block b of the grid computes row block b / S, split b % S.
//
// Compile key (constexprs): SHAPE_N, SHAPE_K, BLOCK_M (64), BLOCK_N (align(N, 16)), BLOCK_K (64),
// NUM_SPLITS, NUM_STAGES; M is a runtime argument left out of specialization.
//
// Math. Warp-level TF32 mma.sync m16n8k8 with fp32 accumulators. bf16 x converts exactly to
// TF32; fn does not, so each fn value is split into a TF32 head and a TF32 remainder and both
// are multiplied (two MMAs): the products are then good to ~2^-22, i.e. fp32 math (DeepGEMM
// rounds fn to TF32 once, ~2^-11). Each 64-deep K block is accumulated from zero in the tensor
// core and added to the running sums with an ordinary fp32 add, which keeps long K (16384 and
// more) from piling up the tensor core's accumulation error. sqrsum uses the same two-level sum.
//
// Pipeline. One producer thread loads, per K block, the 64x64 bf16 x tile and the BLOCK_N x 64
// fp32 fn tile (as two 32-column halves: TMA's 128-byte swizzle holds 32 floats a row) into
// NUM_STAGES shared-memory stages (mbarrier full / empty rings). Four math warps own 16 rows
// each. Inside a warp, MMA row g and column g read tile rows / fn rows chosen (rowA_of / colB_of)
// so that the 8- and 16-byte shared loads of the swizzled tiles hit distinct banks; the k order
// inside an MMA is a permutation too (slot j <-> k = 4 t + 2 step + j), the same for both
// operands, so four consecutive k values come in one load.
#define NUM_KB (SHAPE_K / BLOCK_K)
#define KB_PER_SPLIT (NUM_KB / NUM_SPLITS)
#define KB_REM (NUM_KB % NUM_SPLITS)
#define NT (SHAPE_N / 8)                     // n8 tiles holding real columns
#define HC_HALVES (NT > 8 && NT % 2 == 0 ? 2 : 1)
#define NT_HALF (NT / HC_HALVES)
#define HC_MATH_WARPS 4
#define HC_THREADS (HC_MATH_WARPS * 32 + 32)
#define A_STAGE_BYTES (BLOCK_M * BLOCK_K * 2)  // bf16 x tile, 128-byte rows
#define B_HALF_BYTES (BLOCK_N * 128)           // 32 fp32 of BLOCK_N fn rows
#define B_STAGE_BYTES (2 * B_HALF_BYTES)

#if BLOCK_M != 64 || BLOCK_K != 64
#error "the hc pre-norm kernel is written for 64 x 64 x-tiles"
#endif

__device__ __forceinline__ cs_u32 to_tf32(float f) {
  cs_u32 r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return r;
}

/// D += A (16x8 tf32, row) * B (8x8 tf32, col), fp32 accumulators in the m16n8 C layout.
__device__ __forceinline__ void mma_tf32_m16n8k8(float* d, cs_u32 a0, cs_u32 a1, cs_u32 a2, cs_u32 a3, cs_u32 b0, cs_u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// Tile row of MMA row g (0..7) of a warp's 16 rows; row g + 8 is that plus 8. Rows 0, 2, 4, 6
/// then 1, 3, 5, 7: a half warp's 8-byte loads then cover all eight 16-byte chunks.
__device__ __forceinline__ int rowA_of(int g) { return ((g & 3) << 1) | (g >> 2); }
/// fn row (within an n8 tile) of MMA column g: 0, 4, 1, 5, 2, 6, 3, 7, so that a quarter warp's
/// 16-byte loads cover all eight chunks. MMA column 2t is fn row t, column 2t + 1 fn row t + 4.
__device__ __forceinline__ int colB_of(int g) { return (g >> 1) | ((g & 1) << 2); }

extern "C" __global__ void __launch_bounds__(HC_THREADS, 1)
dg_hc_prenorm(const __grid_constant__ TensorMap tmap_x, const __grid_constant__ TensorMap tmap_fn,
              float* __restrict__ out_mul, float* __restrict__ sqrsum, int m, long long ld_out_m,
              long long ld_out_s) {
  extern __shared__ cs_u8 smem_raw[];
  cs_u8* smem = reinterpret_cast<cs_u8*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
  cs_u8* a_tiles = smem;
  cs_u8* b_tiles = a_tiles + NUM_STAGES * A_STAGE_BYTES;
  cs_u64* full_bar = reinterpret_cast<cs_u64*>(b_tiles + NUM_STAGES * B_STAGE_BYTES);
  cs_u64* empty_bar = full_bar + NUM_STAGES;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int m_block = blockIdx.x / NUM_SPLITS;
  const int split = blockIdx.x % NUM_SPLITS;
  const int kb_first = split * KB_PER_SPLIT + min(split, KB_REM);
  const int num_kb = KB_PER_SPLIT + (split < KB_REM ? 1 : 0);

  if (threadIdx.x == 0) {
    for (int s = 0; s < NUM_STAGES; ++s) {
      mbar_init(&full_bar[s], 1);
      mbar_init(&empty_bar[s], HC_MATH_WARPS);
    }
    fence_barrier_init();
    fence_proxy_async_smem();
  }
  __syncthreads();

  if (warp == HC_MATH_WARPS) {
    // ------------------------------------------------------------ producer
    if (lane != 0) return;
    tma_prefetch_map(&tmap_x);
    tma_prefetch_map(&tmap_fn);
    for (int i = 0; i < num_kb; ++i) {
      const int s = i % NUM_STAGES;
      mbar_wait(&empty_bar[s], ((i / NUM_STAGES) & 1) ^ 1);
      mbar_expect_tx(&full_bar[s], A_STAGE_BYTES + B_STAGE_BYTES);
      const int k0 = (kb_first + i) * BLOCK_K;
      cs_u8* b = b_tiles + s * B_STAGE_BYTES;
      tma_load_2d(a_tiles + s * A_STAGE_BYTES, &tmap_x, &full_bar[s], k0, m_block * BLOCK_M);
      tma_load_2d(b, &tmap_fn, &full_bar[s], k0, 0);
      tma_load_2d(b + B_HALF_BYTES, &tmap_fn, &full_bar[s], k0 + 32, 0);
    }
    return;
  }

  // -------------------------------------------------------------- math warps
  const int g = lane / 4;
  const int t = lane % 4;
  const int row0 = warp * 16 + rowA_of(g);  // tile rows row0 and row0 + 8
  float fin[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) fin[j][i] = 0.f;
  float sq0 = 0.f, sq1 = 0.f;

  for (int i = 0; i < num_kb; ++i) {
    const int s = i % NUM_STAGES;
    mbar_wait(&full_bar[s], (i / NUM_STAGES) & 1);
    const cs_u8* a_tile = a_tiles + s * A_STAGE_BYTES;
    const cs_u8* b_tile = b_tiles + s * B_STAGE_BYTES;
    float bsq0 = 0.f, bsq1 = 0.f;
    // Wide N (sm_100's N up to 128) goes in two column halves, each over the whole K block, so
    // that only half the block accumulators are live next to the running sums.
#pragma unroll
    for (int half = 0; half < HC_HALVES; ++half) {
      float acc[NT_HALF][4];
#pragma unroll
      for (int j = 0; j < NT_HALF; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < BLOCK_K / 16; ++kk) {
        // Four consecutive k (k0 + 4t .. + 3) of rows row0 and row0 + 8: 8 bytes each.
        const int kx = kk * 16 + 4 * t;
        const uint2 xa = *reinterpret_cast<const uint2*>(a_tile + swizzle128_offset(row0, kx * 2));
        const uint2 xb = *reinterpret_cast<const uint2*>(a_tile + swizzle128_offset(row0 + 8, kx * 2));
        // bf16 pairs -> fp32 bit patterns (exact in TF32): low half is the lower k.
        const cs_u32 a_lo[4] = {xa.x << 16, xa.x & 0xffff0000u, xa.y << 16, xa.y & 0xffff0000u};
        const cs_u32 a_hi[4] = {xb.x << 16, xb.x & 0xffff0000u, xb.y << 16, xb.y & 0xffff0000u};
        if (half == 0) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float v0 = __uint_as_float(a_lo[e]), v1 = __uint_as_float(a_hi[e]);
            bsq0 = fmaf(v0, v0, bsq0);
            bsq1 = fmaf(v1, v1, bsq1);
          }
        }
        const cs_u8* b_half = b_tile + (kk / 2) * B_HALF_BYTES;  // 32 k per TMA half-tile
        const int kb_col = ((kk % 2) * 16 + 4 * t) * 4;       // byte column inside it
#pragma unroll
        for (int j = 0; j < NT_HALF; ++j) {
          const int n8 = half * NT_HALF + j;
          const float4 fv = *reinterpret_cast<const float4*>(b_half + swizzle128_offset(n8 * 8 + colB_of(g), kb_col));
          const float f[4] = {fv.x, fv.y, fv.z, fv.w};
          cs_u32 head[4], tail[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            head[e] = to_tf32(f[e]);
            tail[e] = to_tf32(f[e] - __uint_as_float(head[e]));
          }
#pragma unroll
          for (int step = 0; step < 2; ++step) {
            // Slots t and t + 4 of this MMA are k0 + 4t + 2 step and + 1.
            const cs_u32 a0 = a_lo[2 * step], a2 = a_lo[2 * step + 1];
            const cs_u32 a1 = a_hi[2 * step], a3 = a_hi[2 * step + 1];
            mma_tf32_m16n8k8(acc[j], a0, a1, a2, a3, head[2 * step], head[2 * step + 1]);
            mma_tf32_m16n8k8(acc[j], a0, a1, a2, a3, tail[2 * step], tail[2 * step + 1]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < NT_HALF; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) fin[half * NT_HALF + j][e] += acc[j][e];
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty_bar[s]);
    sq0 += bsq0;
    sq1 += bsq1;
  }

  // Row sums of squares: the four lanes of a row group hold disjoint k.
  sq0 += __shfl_xor_sync(0xffffffffu, sq0, 1);
  sq0 += __shfl_xor_sync(0xffffffffu, sq0, 2);
  sq1 += __shfl_xor_sync(0xffffffffu, sq1, 1);
  sq1 += __shfl_xor_sync(0xffffffffu, sq1, 2);
  const int r0 = m_block * BLOCK_M + row0;
  const int r1 = r0 + 8;
  if (t == 0) {
    if (r0 < m) sqrsum[static_cast<long long>(split) * m + r0] = sq0;
    if (r1 < m) sqrsum[static_cast<long long>(split) * m + r1] = sq1;
  }
  float* out_s = out_mul + static_cast<long long>(split) * ld_out_s;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    // C columns 2t and 2t + 1 are fn rows t and t + 4 of the tile (colB_of).
    const int c0 = j * 8 + t, c1 = j * 8 + t + 4;
    if (r0 < m) {
      out_s[static_cast<long long>(r0) * ld_out_m + c0] = fin[j][0];
      out_s[static_cast<long long>(r0) * ld_out_m + c1] = fin[j][1];
    }
    if (r1 < m) {
      out_s[static_cast<long long>(r1) * ld_out_m + c0] = fin[j][2];
      out_s[static_cast<long long>(r1) * ld_out_m + c1] = fin[j][3];
    }
  }
}
