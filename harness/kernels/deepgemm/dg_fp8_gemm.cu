// fp8_gemm: D (bf16) = A (FP8 e4m3, 1x128 per-token-group scales) x B^T (FP8 e4m3, 128x128 block
// scales), the DeepGEMM "1d2d" recipe, as a persistent TMA + mbarrier pipelined kernel.
//
// Compile key (constexprs): SHAPE_N and SHAPE_K are compiled in, M is not (a runtime argument
// left out of specialization); BLOCK_M / BLOCK_N / BLOCK_K tile, NUM_STAGES pipeline depth,
// NUM_GROUPS, GEMM_TYPE (DeepGEMM's GemmType: 0 normal, 1 m-grouped contiguous, 4 batched), NUM_SMS persistent grid,
// NUM_MULTICAST / IS_MULTICAST_ON_A cluster shape, SWAP_AB, MMA_SYNC (1 = the warp-level mma.sync
// path; forced on sm_100a, where WGMMA does not exist).
//
// Layouts (row-major, K contiguous):
//   A      normal / grouped: [M, K];  batched: [M, NUM_GROUPS, K] (einsum "bhr": row m of group g
//          at (m * NUM_GROUPS + g) * K), read through tmap_a (box {128, BLOCK_M}, 128B swizzle)
//   B      [NUM_GROUPS * SHAPE_N, K] (tmap_b, box {128, BLOCK_N}, 128B swizzle)
//   SFA    fp32, MN-major: [NUM_GROUPS][K/128][M_pad] (M_pad = M rounded up to 4), via tmap_sfa
//   SFB    fp32 [NUM_GROUPS][ceil(N/128)][K/128]
//   grouped_layout  int32 [M]: expert of each row, -1 for padding rows (GEMM_TYPE 1 only)
//   D      bf16, row m of group g at out + m * ldo + g * gso
// Threads: NUM_MATH_WG math warpgroups (1 when BLOCK_M <= 64, else 2) plus one producer
// warpgroup whose first thread issues the TMA loads.
#ifndef MMA_SYNC
#define MMA_SYNC 0
#endif
#if CS_HAS_WGMMA && !MMA_SYNC
#define USE_WGMMA 1
#else
#define USE_WGMMA 0
#endif

#define NUM_MATH_WG (BLOCK_M <= 64 ? 1 : 2)
// Rows the math warpgroups cover: BLOCK_M rounded up to 64 (one warpgroup) or to 128 (two). The
// A tile in shared memory holds BLOCK_M rows; the rows past it that an m64 MMA reads belong to the
// following tiles and only feed output rows that are never stored.
#define TILE_M (BLOCK_M <= 64 ? 64 : (BLOCK_M + 127) / 128 * 128)
#define WG_M (TILE_M / NUM_MATH_WG)              // rows per math warpgroup: 64 or 128
#define SUBS (WG_M / 64)                         // m64 sub-tiles per warpgroup
#define ACC (BLOCK_N / 2)                        // f32 accumulators per thread per sub-tile
#define KB_COUNT (SHAPE_K / 128)
#define N_SCALE_BLOCKS ((SHAPE_N + 127) / 128)
#define A_STAGE_BYTES (BLOCK_M * 128)
#define B_STAGE_BYTES (BLOCK_N * 128)
#define SFA_STAGE_BYTES (((BLOCK_M * 4) + 127) / 128 * 128)
#define NUM_THREADS (128 * (NUM_MATH_WG + 1))
// With two math warpgroups a thread may hold 168 registers, fewer than the accumulators of the
// larger tiles need: as DeepGEMM does, the producer warpgroup gives registers back (40) and the
// math warpgroups take them (232). Only where the accumulators alone exceed ~160 registers, so
// the compiler is certain to have used all 168 (setmaxnreg.inc waits for registers the CTA does
// not have otherwise); dg_gemm_test checks the register count of such a kernel.
#define USE_SETMAXNREG (USE_WGMMA && NUM_MATH_WG == 2 && (SUBS + 1) * ACC >= 160)

struct TileCoord {
  int group;    // batched group or grouped-contiguous expert
  int m_block;
  int n_block;
};

__device__ __forceinline__ bool tile_of(int t, int m, const int* grouped_layout, TileCoord& c) {
  const int num_m_blocks = (m + BLOCK_M - 1) / BLOCK_M;
  const int num_n_blocks = (SHAPE_N + BLOCK_N - 1) / BLOCK_N;
  const int per_group = num_m_blocks * num_n_blocks;
  c.group = GEMM_TYPE == 4 ? t / per_group : 0;
  const int r = t % per_group;
  c.m_block = r % num_m_blocks;
  c.n_block = r / num_m_blocks;
  if (GEMM_TYPE == 1) {
    c.group = grouped_layout[c.m_block * BLOCK_M];
    return c.group >= 0;  // a block of padding rows: nothing to compute or store
  }
  return true;
}

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
dg_fp8_gemm(const __grid_constant__ TensorMap tmap_a, const __grid_constant__ TensorMap tmap_b,
            const __grid_constant__ TensorMap tmap_sfa, const float* __restrict__ sfb,
            const int* __restrict__ grouped_layout, cs_u16* __restrict__ out, int m, long long ldo,
            long long gso) {
  extern __shared__ cs_u8 smem_raw[];
  cs_u8* smem = reinterpret_cast<cs_u8*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
  cs_u8* a_tiles = smem;
  cs_u8* b_tiles = a_tiles + NUM_STAGES * A_STAGE_BYTES;
  float* sfa_tiles = reinterpret_cast<float*>(b_tiles + NUM_STAGES * B_STAGE_BYTES);
  cs_u64* full_bar = reinterpret_cast<cs_u64*>(reinterpret_cast<cs_u8*>(sfa_tiles) + NUM_STAGES * SFA_STAGE_BYTES);
  cs_u64* empty_bar = full_bar + NUM_STAGES;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < NUM_STAGES; ++s) {
      mbar_init(&full_bar[s], 1);
      mbar_init(&empty_bar[s], NUM_MATH_WG * 4);  // one arrival per math warp
    }
    fence_barrier_init();
    fence_proxy_async_smem();
  }
  __syncthreads();

  const int num_m_blocks = (m + BLOCK_M - 1) / BLOCK_M;
  const int num_n_blocks = (SHAPE_N + BLOCK_N - 1) / BLOCK_N;
  const int total = num_m_blocks * num_n_blocks * (GEMM_TYPE == 4 ? NUM_GROUPS : 1);

  if (wg == NUM_MATH_WG) {
    // ------------------------------------------------------------ producer
#if USE_SETMAXNREG
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
#endif
    if (threadIdx.x != NUM_MATH_WG * 128) return;
    tma_prefetch_map(&tmap_a);
    tma_prefetch_map(&tmap_b);
    tma_prefetch_map(&tmap_sfa);
    unsigned it = 0;
    for (int t = blockIdx.x; t < total; t += NUM_SMS) {
      TileCoord c;
      if (!tile_of(t, m, grouped_layout, c)) continue;
      const int m0 = c.m_block * BLOCK_M;
      const int b_row = c.group * SHAPE_N + c.n_block * BLOCK_N;
      for (int kb = 0; kb < KB_COUNT; ++kb, ++it) {
        const int s = it % NUM_STAGES;
        mbar_wait(&empty_bar[s], ((it / NUM_STAGES) & 1) ^ 1);
        mbar_expect_tx(&full_bar[s], BLOCK_M * 128 + BLOCK_N * 128 + BLOCK_M * 4);
        if (GEMM_TYPE == 4) {
          tma_load_3d(a_tiles + s * A_STAGE_BYTES, &tmap_a, &full_bar[s], kb * 128, m0, c.group);
          tma_load_3d(sfa_tiles + s * (SFA_STAGE_BYTES / 4), &tmap_sfa, &full_bar[s], m0, kb, c.group);
        } else {
          tma_load_2d(a_tiles + s * A_STAGE_BYTES, &tmap_a, &full_bar[s], kb * 128, m0);
          tma_load_2d(sfa_tiles + s * (SFA_STAGE_BYTES / 4), &tmap_sfa, &full_bar[s], m0, kb);
        }
        tma_load_2d(b_tiles + s * B_STAGE_BYTES, &tmap_b, &full_bar[s], kb * 128, b_row);
      }
    }
    return;
  }

  // -------------------------------------------------------------- math warpgroups
#if USE_SETMAXNREG
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
#endif
  const int warp_in_wg = warp % 4;
  float acc[ACC];
  float fin[SUBS][ACC];
  unsigned it = 0;
  for (int t = blockIdx.x; t < total; t += NUM_SMS) {
    TileCoord c;
    if (!tile_of(t, m, grouped_layout, c)) continue;
    const int n0 = c.n_block * BLOCK_N;
#pragma unroll
    for (int sub = 0; sub < SUBS; ++sub)
#pragma unroll
      for (int i = 0; i < ACC; ++i) fin[sub][i] = 0.f;
    const float* sfb_g = sfb + static_cast<long long>(c.group) * N_SCALE_BLOCKS * KB_COUNT;
    const int first_scale_block = n0 / 128;

    for (int kb = 0; kb < KB_COUNT; ++kb, ++it) {
      const int s = it % NUM_STAGES;
      // B scales of the (at most three) 128-column blocks this tile's columns fall into.
      float sb[3];
#pragma unroll
      for (int j = 0; j < 3; ++j) {
        const int nb = first_scale_block + j;
        sb[j] = nb < N_SCALE_BLOCKS ? __ldg(&sfb_g[nb * KB_COUNT + kb]) : 0.f;
      }
      mbar_wait(&full_bar[s], (it / NUM_STAGES) & 1);
      const cs_u8* a_tile = a_tiles + s * A_STAGE_BYTES;
      const cs_u8* b_tile = b_tiles + s * B_STAGE_BYTES;
      const float* sfa_s = sfa_tiles + s * (SFA_STAGE_BYTES / 4);
#pragma unroll
      for (int sub = 0; sub < SUBS; ++sub) {
        const int row_base = wg * WG_M + sub * 64;  // first row of this m64 sub-tile in the tile
#if USE_WGMMA
#pragma unroll
        for (int i = 0; i < ACC; ++i) fence_operand(acc[i]);
        wgmma_fence();
        const cs_u64 da = wgmma_desc_sw128(a_tile + row_base * 128);
        const cs_u64 db = wgmma_desc_sw128(b_tile);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          WgmmaFp8<BLOCK_N>::mma(da + (k * 32 >> 4), db + (k * 32 >> 4), acc, k > 0);
        }
        wgmma_commit();
        wgmma_wait0();
#pragma unroll
        for (int i = 0; i < ACC; ++i) fence_operand(acc[i]);
#else
#pragma unroll
        for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
        if (row_base + warp_in_wg * 16 < BLOCK_M) {  // warps wholly past the tile have no rows
        const cs_u32 a_base = cs_smem_addr(a_tile);
        const cs_u32 b_base = cs_smem_addr(b_tile);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          // A fragment 16 x 32 bytes: lanes 0-7 rows 0-7 bytes 0-15, 8-15 rows 8-15, 16-23 rows
          // 0-7 bytes 16-31, 24-31 rows 8-15 bytes 16-31.
          const cs_u32 a_row = row_base + warp_in_wg * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          const cs_u32 a_col = k * 32 + (lane >> 4) * 16;
          cs_u32 fa[4];
          cs_ldmatrix_x4(fa, a_base + swizzle128_offset(a_row, a_col));
#pragma unroll
          for (int n8 = 0; n8 < BLOCK_N / 8; ++n8) {
            const cs_u32 b_row = n8 * 8 + (lane & 7);
            const cs_u32 b_col = k * 32 + ((lane >> 3) & 1) * 16;
            cs_u32 fb[2];
            cs_ldmatrix_x2(fb, b_base + swizzle128_offset(b_row, b_col));
            mma_fp8_m16n8k32(&acc[n8 * 4], fa[0], fa[1], fa[2], fa[3], fb[0], fb[1]);
          }
        }
        }
#endif
        // Promote the 128-deep partial sums with the A (per row) and B (per 128 columns) scales.
        const int r0 = row_base + warp_in_wg * 16 + lane / 4;
        const float sa0 = r0 < BLOCK_M ? sfa_s[r0] : 0.f;
        const float sa1 = r0 + 8 < BLOCK_M ? sfa_s[r0 + 8] : 0.f;
#pragma unroll
        for (int n8 = 0; n8 < BLOCK_N / 8; ++n8) {
          const int j = (n0 + n8 * 8) / 128 - first_scale_block;
          const float scale_b = j == 0 ? sb[0] : (j == 1 ? sb[1] : sb[2]);
          fin[sub][n8 * 4 + 0] += acc[n8 * 4 + 0] * sa0 * scale_b;
          fin[sub][n8 * 4 + 1] += acc[n8 * 4 + 1] * sa0 * scale_b;
          fin[sub][n8 * 4 + 2] += acc[n8 * 4 + 2] * sa1 * scale_b;
          fin[sub][n8 * 4 + 3] += acc[n8 * 4 + 3] * sa1 * scale_b;
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty_bar[s]);
    }

    // Epilogue: bf16 pairs straight from the accumulators.
    const int m_limit = m;
#pragma unroll
    for (int sub = 0; sub < SUBS; ++sub) {
      const int r0 = wg * WG_M + sub * 64 + warp_in_wg * 16 + lane / 4;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int tile_row = r0 + half * 8;
        const int row = c.m_block * BLOCK_M + tile_row;
        if (tile_row >= BLOCK_M || row >= m_limit) continue;
        cs_u16* out_row = out + static_cast<long long>(row) * ldo + static_cast<long long>(c.group) * gso *
                                                                    (GEMM_TYPE == 4 ? 1 : 0);
#pragma unroll
        for (int n8 = 0; n8 < BLOCK_N / 8; ++n8) {
          const int col = n0 + n8 * 8 + (lane % 4) * 2;
          if (col >= SHAPE_N) continue;
          const cs_u32 lo = float_to_bf16_bits(fin[sub][n8 * 4 + half * 2 + 0]);
          const cs_u32 hi = float_to_bf16_bits(fin[sub][n8 * 4 + half * 2 + 1]);
          *reinterpret_cast<cs_u32*>(out_row + col) = lo | (hi << 16);
        }
      }
    }
  }
}
