// The prefill (ragged) sparse-indexer logits and the -inf cleaning that follows them. One file,
// two kernels: the constexprs of a compile select the one it builds (NUM_HEADS: the logits
// kernel; otherwise the cleaning kernel).
//
// fp8_mqa_logits (DeepGEMM impls/sm90_fp8_mqa_logits.cuh):
//
//   logits[t, s] = kv_sf[s] * sum_h weights[t, h] * relu(sum_d q[t, h, d] * kv[s, d])
//
// for s in [ks[t], ke[t]) (clamped to [0, seq_len_kv)). q is FP8 e4m3 [T, H, D], kv FP8 [Skv, D],
// kv_sf fp32 [Skv], weights fp32 [T, H] (row stride ld_w), ks / ke int32 [T], logits fp32 rows of
// stride ld_logits.
//
// Compile key (constexprs): NUM_HEADS, HEAD_DIM, IS_COMPRESSED_LOGITS (0: logits column = KV
// position), BLOCK_Q (128 / H tokens a block, so 128 query-head rows), BLOCK_KV (256 KV rows a
// step), NUM_Q_STAGES, NUM_KV_STAGES, NUM_SMS (the persistent grid). T, Skv and the strides are
// runtime values left out of specialization.
//
// Work split. Block b takes query blocks b, b + NUM_SMS, ... For a query block the KV range is
// [lo, hi) = the union of its tokens' [ks, ke); it is walked in steps of BLOCK_KV rows and every
// column of [lo, hi) is written for every token of the block (columns outside a token's own
// range hold real dot products, as in DeepGEMM, and are what the cleaning kernel overwrites).
// Nothing outside [lo, hi) is written. One producer thread loads the query tile (128 rows x D,
// TMA swizzle = D bytes) into NUM_Q_STAGES stages and the 256 x D KV tiles into NUM_KV_STAGES
// stages; eight math warps own 32 KV rows each (two m16 sub-tiles) and compute, per sub-tile,
// the 16 x 128 scores with FP8 mma.sync m16n8k32 (fp32 accumulators), then relu, the head
// weights and the sum over a token's heads in registers, and store 16 logits per token.
//
// clean_logits (DeepGEMM impls/smxx_clean_logits.cuh): for each row i, writes -inf to every
// column c < seq_len_kv outside [ks[i / NEXT_N], ke[i / NEXT_N] - NEXT_N + i % NEXT_N + 1).
// Rows are dealt evenly to the blocks of the grid, then to its NUM_WARPS warps. Compile key:
// NEXT_N, BLOCK_KV (DeepGEMM's 8192-column chunk, the unit a warp sweeps), NUM_WARPS.

#ifdef NUM_HEADS
// ================================================================= fp8_mqa_logits

#define Q_ROWS (BLOCK_Q * NUM_HEADS)
#define NT (Q_ROWS / 8)                 // n8 tiles of the query rows
#define Q_HALVES (NT > 8 ? 2 : 1)
#define MATH_WARPS (BLOCK_KV / 32)      // 32 KV rows per warp
#define MQA_THREADS (MATH_WARPS * 32 + 32)
#define Q_STAGE_BYTES (Q_ROWS * HEAD_DIM)
#define KV_STAGE_BYTES (BLOCK_KV * HEAD_DIM)

#if Q_ROWS != 128 || BLOCK_KV != 256 || IS_COMPRESSED_LOGITS != 0
#error "fp8_mqa_logits: 128 query rows, 256 KV rows, uncompressed logits"
#endif

/// The KV range [lo, hi) of query block `qb`: the union of its tokens' clamped ranges; lo >= hi
/// when all are empty.
__device__ __forceinline__ void block_range(int qb, int seq_len, int seq_len_kv, const int* ks, const int* ke,
                                            int& lo, int& hi) {
  lo = seq_len_kv;
  hi = 0;
#pragma unroll
  for (int q = 0; q < BLOCK_Q; ++q) {
    const int tok = qb * BLOCK_Q + q;
    if (tok >= seq_len) break;
    const int a = min(max(__ldg(&ks[tok]), 0), seq_len_kv);
    const int b = min(max(__ldg(&ke[tok]), a), seq_len_kv);
    if (a < b) {
      lo = min(lo, a);
      hi = max(hi, b);
    }
  }
}

extern "C" __global__ void __launch_bounds__(MQA_THREADS, 1)
dg_mqa_logits(const __grid_constant__ TensorMap tmap_q, const __grid_constant__ TensorMap tmap_kv,
              const float* __restrict__ kv_sf, const float* __restrict__ weights, const int* __restrict__ ks,
              const int* __restrict__ ke, float* __restrict__ logits, int seq_len, int seq_len_kv,
              long long ld_w, long long ld_logits) {
  extern __shared__ cs_u8 smem_raw[];
  cs_u8* smem = reinterpret_cast<cs_u8*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
  cs_u8* q_tiles = smem;
  cs_u8* kv_tiles = q_tiles + NUM_Q_STAGES * Q_STAGE_BYTES;
  cs_u64* q_full = reinterpret_cast<cs_u64*>(kv_tiles + NUM_KV_STAGES * KV_STAGE_BYTES);
  cs_u64* q_empty = q_full + NUM_Q_STAGES;
  cs_u64* kv_full = q_empty + NUM_Q_STAGES;
  cs_u64* kv_empty = kv_full + NUM_KV_STAGES;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < NUM_Q_STAGES; ++s) {
      mbar_init(&q_full[s], 1);
      mbar_init(&q_empty[s], MATH_WARPS);
    }
    for (int s = 0; s < NUM_KV_STAGES; ++s) {
      mbar_init(&kv_full[s], 1);
      mbar_init(&kv_empty[s], MATH_WARPS);
    }
    fence_barrier_init();
    fence_proxy_async_smem();
  }
  __syncthreads();

  const int num_qb = (seq_len + BLOCK_Q - 1) / BLOCK_Q;

  if (warp == MATH_WARPS) {
    // ------------------------------------------------------------ producer
    if (lane != 0) return;
    tma_prefetch_map(&tmap_q);
    tma_prefetch_map(&tmap_kv);
    unsigned qi = 0, kvi = 0;
    for (int qb = blockIdx.x; qb < num_qb; qb += NUM_SMS) {
      int lo, hi;
      block_range(qb, seq_len, seq_len_kv, ks, ke, lo, hi);
      if (lo >= hi) continue;
      const int qs = qi % NUM_Q_STAGES;
      mbar_wait(&q_empty[qs], ((qi / NUM_Q_STAGES) & 1) ^ 1);
      mbar_expect_tx(&q_full[qs], Q_STAGE_BYTES);
      tma_load_2d(q_tiles + qs * Q_STAGE_BYTES, &tmap_q, &q_full[qs], 0, qb * Q_ROWS);
      ++qi;
      for (int kv0 = lo; kv0 < hi; kv0 += BLOCK_KV, ++kvi) {
        const int s = kvi % NUM_KV_STAGES;
        mbar_wait(&kv_empty[s], ((kvi / NUM_KV_STAGES) & 1) ^ 1);
        mbar_expect_tx(&kv_full[s], KV_STAGE_BYTES);
        tma_load_2d(kv_tiles + s * KV_STAGE_BYTES, &tmap_kv, &kv_full[s], 0, kv0);
      }
    }
    return;
  }

  // -------------------------------------------------------------- math warps
  const int g = lane / 4;
  const int t = lane % 4;
  unsigned qi = 0, kvi = 0;
  for (int qb = blockIdx.x; qb < num_qb; qb += NUM_SMS) {
    int lo, hi;
    block_range(qb, seq_len, seq_len_kv, ks, ke, lo, hi);
    if (lo >= hi) continue;
    const int tok0 = qb * BLOCK_Q;
    // Weights of the two query rows (columns 2t, 2t + 1) this lane holds in each n8 tile.
    float wts[NT][2];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int col = j * 8 + 2 * t;
      const int tok = tok0 + col / NUM_HEADS;
      const int h = col % NUM_HEADS;
      const bool ok = tok < seq_len;
      wts[j][0] = ok ? __ldg(&weights[tok * ld_w + h]) : 0.f;
      wts[j][1] = ok ? __ldg(&weights[tok * ld_w + h + 1]) : 0.f;
    }
    const int qs = qi % NUM_Q_STAGES;
    mbar_wait(&q_full[qs], (qi / NUM_Q_STAGES) & 1);
    const cs_u32 q_base = cs_smem_addr(q_tiles + qs * Q_STAGE_BYTES);

    for (int kv0 = lo; kv0 < hi; kv0 += BLOCK_KV, ++kvi) {
      const int s = kvi % NUM_KV_STAGES;
      mbar_wait(&kv_full[s], (kvi / NUM_KV_STAGES) & 1);
      const cs_u32 kv_base = cs_smem_addr(kv_tiles + s * KV_STAGE_BYTES);
#pragma unroll 1
      for (int sub = 0; sub < 2; ++sub) {
        const int rbase = warp * 32 + sub * 16;
        // Scores against all query rows: relu, head weights, the sum over each token's heads.
        float v0, v1;
        mqa_subtile_scores<HEAD_DIM, NUM_HEADS, NT, Q_HALVES, BLOCK_Q>(kv_base, q_base, rbase, lane, wts, v0, v1);
        // Lane t stores token t's logits of KV rows g and g + 8 (8 lanes: 32 contiguous bytes).
        const int tok = tok0 + t;
        if (t < BLOCK_Q && tok < seq_len) {
          float* row = logits + static_cast<long long>(tok) * ld_logits;
          const int s0 = kv0 + rbase + g, s1 = s0 + 8;
          if (s0 < hi) row[s0] = v0 * __ldg(&kv_sf[s0]);
          if (s1 < hi) row[s1] = v1 * __ldg(&kv_sf[s1]);
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&kv_empty[s]);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&q_empty[qs]);
    ++qi;
  }
}

#else
// ================================================================= clean_logits

extern "C" __global__ void __launch_bounds__(NUM_WARPS * 32, 1)
dg_clean_logits(int seq_len, int seq_len_kv, long long ld_logits, const int* __restrict__ ks,
                const int* __restrict__ ke, float* __restrict__ logits) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // Rows dealt evenly: first to the blocks, then to the warps of a block.
  const int per_block = seq_len / gridDim.x, rem_block = seq_len % gridDim.x;
  const int b = blockIdx.x;
  const int row_begin = b * per_block + min(b, rem_block);
  const int rows = per_block + (b < rem_block ? 1 : 0);
  const int per_warp = rows / NUM_WARPS, rem_warp = rows % NUM_WARPS;
  const int first = row_begin + warp * per_warp + min(warp, rem_warp);
  const int last = first + per_warp + (warp < rem_warp ? 1 : 0);
  const float neg_inf = __int_as_float(0xff800000);
  for (int i = first; i < last; ++i) {
    const int a = min(max(__ldg(&ks[i / NEXT_N]), 0), seq_len_kv);
    const int e = min(max(__ldg(&ke[i / NEXT_N]) - NEXT_N + i % NEXT_N + 1, a), seq_len_kv);
    float* row = logits + static_cast<long long>(i) * ld_logits;
    for (int left = 0; left < seq_len_kv; left += BLOCK_KV) {
      const int right = min(left + BLOCK_KV, seq_len_kv);
      // [left, right) minus [a, e): up to two spans, written by the warp's lanes in turn.
      for (int c = left + lane; c < min(right, a); c += 32) row[c] = neg_inf;
      for (int c = max(left, e) + lane; c < right; c += 32) row[c] = neg_inf;
    }
  }
}

#endif
