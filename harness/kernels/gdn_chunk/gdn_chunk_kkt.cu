// chunk_scaled_dot_kkt_fwd: per 64-token chunk and value head,
//   A[i, j] = beta_i * (k_i . k_j) * exp(g_i - g_j)   for j < i (both in the sequence), else 0,
// float32 [B*T, H, BT]. Mirrors chunk_scaled_dot_kkt_fwd_kernel
// (vllm/model_executor/layers/fla/ops/chunk_scaled_dot_kkt.py).
// Grid (NT, B * H). k is staged BK columns at a time in shared memory; the 64x64 product runs on
// the tensor cores (bf16 in, fp32 accumulate); beta and the gate factor are applied in fp32.
// Arguments: k bf16 [B*T, Hg, K], beta f32 [B*T, H], g f32 [B*T, H] (chunk-local cumsum),
// A f32 [B*T, H, BT], cu_seqlens, chunk_indices, T (do_not_specialize).
#if BT != 64
#error "BT must be 64"
#endif
// A candidate's BK larger than K (K = 64, BK = 128) stages all of K at once.
constexpr int kBK = BK < K ? BK : K;
#if (K % 16) != 0
#error "K must be a multiple of 16"
#endif
static_assert(K % kBK == 0 && kBK % 16 == 0, "K must be a multiple of BK");

constexpr int kLd = kBK + 8;
constexpr int kTiles = (BT / 16) * (BT / 8);
constexpr int kTpw = (kTiles + NUM_WARPS - 1) / NUM_WARPS;

extern "C" __global__ void __launch_bounds__(kThreads)
gdn_chunk_kkt(const cs_u16* __restrict__ k, const float* __restrict__ beta, const float* __restrict__ g,
        float* __restrict__ A, const int* __restrict__ cu_seqlens,
        const int* __restrict__ chunk_indices, int T) {
  __shared__ __align__(16) cs_u16 sk[BT * kLd];
  __shared__ float sb[BT];
  __shared__ float sg[BT];
  const int i_t = blockIdx.x;
  const int i_b = blockIdx.y / H;
  const int i_h = blockIdx.y % H;
  const int i_hk = i_h / (H / Hg);
  const GdChunk c = gd_chunk(cu_seqlens, chunk_indices, i_t, i_b, T, IS_VARLEN, BT);
  const int rows = min(BT, c.len - c.t0);
  const int warp = threadIdx.x >> 5;
  const cs_i64 row0 = static_cast<cs_i64>(c.bos) + c.t0;

  for (int i = threadIdx.x; i < BT; i += kThreads) {
    sb[i] = i < rows ? beta[(row0 + i) * H + i_h] : 0.f;
    sg[i] = (USE_G && i < rows) ? g[(row0 + i) * H + i_h] : 0.f;
  }
  float acc[kTpw][4];
  for (int j = 0; j < kTpw; ++j)
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;

  for (int kb = 0; kb < K; kb += kBK) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < BT * (kBK / 2); idx += kThreads) {
      const int r = idx / (kBK / 2);
      const int cc = (idx % (kBK / 2)) * 2;
      cs_u32 val = 0;
      if (r < rows) {
        val = *reinterpret_cast<const cs_u32*>(k + ((row0 + r) * Hg + i_hk) * K + kb + cc);
      }
      *reinterpret_cast<cs_u32*>(&sk[r * kLd + cc]) = val;
    }
    __syncthreads();
    for (int j = 0; j < kTpw; ++j) {
      const int i = warp + j * NUM_WARPS;
      if (i >= kTiles) break;
      const int m0 = GD_TILE_M0(i, BT), n0 = GD_TILE_N0(i, BT);
      if (n0 > m0 + 15) continue;  // strictly above the diagonal: masked to zero anyway
      gd_mma_tile(acc[j], sk, kLd, sk, kLd, m0, n0, kBK);
    }
  }

  for (int j = 0; j < kTpw; ++j) {
    const int i = warp + j * NUM_WARPS;
    if (i >= kTiles) break;
    const int m0 = GD_TILE_M0(i, BT), n0 = GD_TILE_N0(i, BT);
    for (int e = 0; e < 4; ++e) {
      const int r = gd_frag_row(m0, e), col = gd_frag_col(n0, e);
      if (r >= rows) continue;
      float v = 0.f;
      if (col < r) v = acc[j][e] * sb[r] * expf(sg[r] - sg[col]);
      A[((row0 + r) * H + i_h) * BT + col] = v;
    }
  }
}
