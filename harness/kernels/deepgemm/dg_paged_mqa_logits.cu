// fp8_paged_mqa_logits: the decode sparse-indexer logits over a paged FP8 cache (DeepGEMM
// impls/sm90_fp8_paged_mqa_logits.cuh), consuming get_paged_mqa_logits_metadata's schedule.
//
//   logits[b * NEXT_N + i, s] = sf[s] * sum_h weights[b * NEXT_N + i, h] * relu(q[b, i, h] . k[s])
//
// for s < min(ctx, logits_cols), ctx = context_lens[b, NEXT_N - 1] (the batch row's last query
// token; positions at or past an earlier token's own length are computed all the same, as in
// DeepGEMM, and are the caller's to mask). k[s] and sf[s] are token s % BLOCK_KV of physical
// block block_table[b, s / BLOCK_KV]: a block of the uint8 cache holds BLOCK_KV * HEAD_DIM FP8
// values, token-major, then BLOCK_KV fp32 scales; blocks are kv_block_bytes apart. q is FP8
// [B, NEXT_N, H, D] contiguous, weights fp32 [B * NEXT_N, H] contiguous, context_lens int32
// [B, NEXT_N], block_table int32 rows of stride ld_block_table, logits fp32 rows of stride
// ld_logits. Nothing at or past column min(ctx, logits_cols) is written.
//
// Compile key (constexprs): NEXT_N (1 or 2: one schedule atom per batch row), NUM_HEADS,
// HEAD_DIM, BLOCK_KV, IS_CONTEXT_LENS_2D (1), IS_VARLEN (0), NUM_Q_STAGES, NUM_KV_STAGES,
// SPLIT_KV (256). The batch size, the strides and the grid (NUM_SMS blocks, as many as the
// schedule has entries less one) are runtime values: DeepGEMM keys neither batch nor SM count.
//
// Work. Block i walks the tasks from schedule[i] up to schedule[i + 1] (row by row, split by
// split; a row without splits is stepped over). A task is SPLIT_KV / BLOCK_KV cache blocks of one
// row; the ones past the row's last block are skipped. One producer thread loads the row's
// query tile (NEXT_N * H rows x D, TMA swizzle = D bytes; reloaded only when the row changes)
// into NUM_Q_STAGES stages, and each cache block j of a task into the NUM_KV_STAGES stages of
// ring j (a 3-D tensor map over (D, BLOCK_KV, blocks)). Eight math warps, BLOCK_KV / 32 per ring,
// own 32 tokens each (two m16 sub-tiles): FP8 mma.sync m16n8k32 scores against all query rows,
// then relu, weights and the sum over heads in registers, times the token's scale.

#define BLOCKS_PER_SPLIT (SPLIT_KV / BLOCK_KV)
#define Q_ROWS (NEXT_N * NUM_HEADS)
#define NT (Q_ROWS / 8)
#define Q_HALVES (NT > 8 ? 2 : 1)
#define MATH_WARPS (SPLIT_KV / 32)
#define WARPS_PER_BLOCK (BLOCK_KV / 32)
#define PAGED_THREADS (MATH_WARPS * 32 + 32)
#define Q_STAGE_BYTES (Q_ROWS * HEAD_DIM)
#define KV_STAGE_BYTES (BLOCK_KV * HEAD_DIM)

#if NEXT_N < 1 || NEXT_N > 2 || SPLIT_KV % BLOCK_KV != 0 || BLOCK_KV % 32 != 0
#error "fp8_paged_mqa_logits: NEXT_N 1 or 2, BLOCK_KV a multiple of 32 dividing SPLIT_KV"
#endif
#if IS_CONTEXT_LENS_2D != 1 || IS_VARLEN != 0
#error "fp8_paged_mqa_logits: 2-D context_lens, no varlen"
#endif

/// Walks one block's share of the schedule: calls task(b, split, ctx) for every task in order.
struct TaskWalk {
  int b, split, end_b, end_split, batch_size;
  const int* context_lens;

  __device__ __forceinline__ TaskWalk(const int* schedule, int batch, const int* lens) {
    // Clamped so that a schedule of another batch reads nothing out of bounds.
    b = max(schedule[2 * blockIdx.x], 0);
    split = max(schedule[2 * blockIdx.x + 1], 0);
    end_b = schedule[2 * blockIdx.x + 2];
    end_split = schedule[2 * blockIdx.x + 3];
    batch_size = batch;
    context_lens = lens;
  }
  /// The next task with work (ctx > split * SPLIT_KV); false past the end of the share.
  __device__ __forceinline__ bool next(int& tb, int& tsplit, int& ctx) {
    while (b < batch_size && (b < end_b || (b == end_b && split < end_split))) {
      const int len = max(__ldg(&context_lens[b * NEXT_N + NEXT_N - 1]), 0);
      const int segs = (len + SPLIT_KV - 1) / SPLIT_KV;
      const bool has_work = split < segs;
      tb = b;
      tsplit = split;
      ctx = len;
      if (++split >= segs) {
        ++b;
        split = 0;
      }
      if (has_work) return true;
    }
    return false;
  }
};

extern "C" __global__ void __launch_bounds__(PAGED_THREADS, 1)
dg_paged_mqa_logits(const __grid_constant__ TensorMap tmap_q, const __grid_constant__ TensorMap tmap_kv,
                    const cs_u8* __restrict__ kv_cache, const float* __restrict__ weights,
                    const int* __restrict__ context_lens, const int* __restrict__ block_table,
                    const int* __restrict__ schedule, float* __restrict__ logits, int batch_size,
                    long long ld_block_table, long long ld_logits, int logits_cols, long long kv_block_bytes) {
  extern __shared__ cs_u8 smem_raw[];
  cs_u8* smem = reinterpret_cast<cs_u8*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
  cs_u8* q_tiles = smem;
  cs_u8* kv_tiles = q_tiles + NUM_Q_STAGES * Q_STAGE_BYTES;  // [ring][stage]
  cs_u64* q_full = reinterpret_cast<cs_u64*>(kv_tiles + BLOCKS_PER_SPLIT * NUM_KV_STAGES * KV_STAGE_BYTES);
  cs_u64* q_empty = q_full + NUM_Q_STAGES;
  cs_u64* kv_full = q_empty + NUM_Q_STAGES;                     // [ring][stage]
  cs_u64* kv_empty = kv_full + BLOCKS_PER_SPLIT * NUM_KV_STAGES;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < NUM_Q_STAGES; ++s) {
      mbar_init(&q_full[s], 1);
      mbar_init(&q_empty[s], MATH_WARPS);
    }
    for (int s = 0; s < BLOCKS_PER_SPLIT * NUM_KV_STAGES; ++s) {
      mbar_init(&kv_full[s], 1);
      mbar_init(&kv_empty[s], WARPS_PER_BLOCK);
    }
    fence_barrier_init();
    fence_proxy_async_smem();
  }
  __syncthreads();

  TaskWalk walk(schedule, batch_size, context_lens);
  int b, split, ctx;

  if (warp == MATH_WARPS) {
    // ------------------------------------------------------------ producer
    if (lane != 0) return;
    tma_prefetch_map(&tmap_q);
    tma_prefetch_map(&tmap_kv);
    unsigned qi = 0;
    unsigned kvi[BLOCKS_PER_SPLIT];
#pragma unroll
    for (int j = 0; j < BLOCKS_PER_SPLIT; ++j) kvi[j] = 0;
    int prev_b = -1;
    while (walk.next(b, split, ctx)) {
      if (b != prev_b) {
        const int qs = qi % NUM_Q_STAGES;
        mbar_wait(&q_empty[qs], ((qi / NUM_Q_STAGES) & 1) ^ 1);
        mbar_expect_tx(&q_full[qs], Q_STAGE_BYTES);
        tma_load_2d(q_tiles + qs * Q_STAGE_BYTES, &tmap_q, &q_full[qs], 0, b * Q_ROWS);
        ++qi;
        prev_b = b;
      }
      const int num_blocks = (ctx + BLOCK_KV - 1) / BLOCK_KV;
#pragma unroll
      for (int j = 0; j < BLOCKS_PER_SPLIT; ++j) {
        const int blk = split * BLOCKS_PER_SPLIT + j;
        if (blk >= num_blocks) break;
        const int phys = __ldg(&block_table[b * ld_block_table + blk]);
        const int s = j * NUM_KV_STAGES + kvi[j] % NUM_KV_STAGES;
        mbar_wait(&kv_empty[s], ((kvi[j] / NUM_KV_STAGES) & 1) ^ 1);
        mbar_expect_tx(&kv_full[s], KV_STAGE_BYTES);
        tma_load_3d(kv_tiles + s * KV_STAGE_BYTES, &tmap_kv, &kv_full[s], 0, 0, phys);
        ++kvi[j];
      }
    }
    return;
  }

  // -------------------------------------------------------------- math warps
  const int g = lane / 4;
  const int t = lane % 4;
  const int ring = warp / WARPS_PER_BLOCK;
  const int rows0 = (warp % WARPS_PER_BLOCK) * 32;  // this warp's first token in the block
  unsigned qi = 0, kvi = 0;
  int prev_b = -1, qs = 0;
  float wts[NT][2];
  while (walk.next(b, split, ctx)) {
    if (b != prev_b) {
      if (prev_b >= 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(&q_empty[qs]);
      }
      qs = qi % NUM_Q_STAGES;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int col = j * 8 + 2 * t;  // query row of the tile: token col / H, head col % H
        const float* w = weights + (static_cast<long long>(b) * NEXT_N + col / NUM_HEADS) * NUM_HEADS + col % NUM_HEADS;
        wts[j][0] = __ldg(w);
        wts[j][1] = __ldg(w + 1);
      }
      mbar_wait(&q_full[qs], (qi / NUM_Q_STAGES) & 1);
      ++qi;
      prev_b = b;
    }
    const int blk = split * BLOCKS_PER_SPLIT + ring;
    if (blk * BLOCK_KV >= ctx) continue;
    const int s = ring * NUM_KV_STAGES + kvi % NUM_KV_STAGES;
    mbar_wait(&kv_full[s], (kvi / NUM_KV_STAGES) & 1);
    const int phys = __ldg(&block_table[b * ld_block_table + blk]);
    const float* scales = reinterpret_cast<const float*>(kv_cache + phys * kv_block_bytes + BLOCK_KV * HEAD_DIM);
    const int limit = min(ctx, logits_cols);
    const cs_u32 q_base = cs_smem_addr(q_tiles + qs * Q_STAGE_BYTES);
    const cs_u32 kv_base = cs_smem_addr(kv_tiles + s * KV_STAGE_BYTES);
#pragma unroll 1
    for (int sub = 0; sub < 2; ++sub) {
      const int rbase = rows0 + sub * 16;
      // Scores against all query rows: relu, head weights, the sum over each token's heads.
      float v0, v1;
      mqa_subtile_scores<HEAD_DIM, NUM_HEADS, NT, Q_HALVES, NEXT_N>(kv_base, q_base, rbase, lane, wts, v0, v1);
      if (t < NEXT_N) {
        float* row = logits + (static_cast<long long>(b) * NEXT_N + t) * ld_logits;
        const int tok0 = rbase + g, tok1 = tok0 + 8;  // tokens within the cache block
        const int s0 = blk * BLOCK_KV + tok0, s1 = blk * BLOCK_KV + tok1;
        if (s0 < limit) row[s0] = v0 * __ldg(&scales[tok0]);
        if (s1 < limit) row[s1] = v1 * __ldg(&scales[tok1]);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&kv_empty[s]);
    ++kvi;
  }
}
