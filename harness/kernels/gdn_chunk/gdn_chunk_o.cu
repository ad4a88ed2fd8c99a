// chunk_fwd_o: the output of each 64-token chunk, one block per (BV-slice of V, chunk, value head):
//   o = scale * ( (q @ h[c]^T) * exp(g)  +  tril(q @ k^T * exp(g_i - g_j)) @ v_new )
// with h[c] the bf16 state before the chunk ([V, K] layout) and the masked score matrix rounded
// to bf16 before its product, as vLLM does. Mirrors chunk_fwd_kernel_o
// (vllm/model_executor/layers/fla/ops/chunk_o.py). q, k and h are staged BK columns at a time;
// dynamic shared memory (gdn_chunk_kernels.h: o_smem_bytes).
// Arguments: q, k bf16 [T, Hg, K], v (= v_new) bf16 [T, H, V], h bf16 [NT, H, V, K], g f32 [T, H],
// o bf16 (token row stride o_stride_t elements, [H, V] contiguous inside a row), cu_seqlens,
// chunk_indices, scale (f32), T (do_not_specialize), o_stride_t (this port's addition: vLLM
// writes a contiguous o).
#if BT != 64
#error "BT must be 64"
#endif
#if !USE_G
#error "the GDN prefill always has gates"
#endif
// Candidate tiles larger than K / V cover all of it.
constexpr int kBK = BK < K ? BK : K;
constexpr int kBV = BV < V ? BV : V;
static_assert(K % kBK == 0 && V % kBV == 0 && kBK % 16 == 0 && kBV % 8 == 0,
              "K / V must be multiples of BK / BV");

constexpr int kLdB = kBK + 8;
constexpr int kLdT = BT + 8;
constexpr int kLdV = kBV + 8;
constexpr int kOTiles = (BT / 16) * (kBV / 8);
constexpr int kTpwO = (kOTiles + NUM_WARPS - 1) / NUM_WARPS;
constexpr int kSTiles = (BT / 16) * (BT / 8);
constexpr int kTpwS = (kSTiles + NUM_WARPS - 1) / NUM_WARPS;

extern "C" __global__ void __launch_bounds__(kThreads)
gdn_chunk_o(const cs_u16* __restrict__ q, const cs_u16* __restrict__ k, const cs_u16* __restrict__ v,
      const cs_u16* __restrict__ h, const float* __restrict__ g, cs_u16* __restrict__ o,
      const int* __restrict__ cu_seqlens, const int* __restrict__ chunk_indices, float scale,
      int T, long long o_stride_t) {
  extern __shared__ __align__(16) unsigned char gd_smem[];
  cs_u16* sQ = reinterpret_cast<cs_u16*>(gd_smem);  // [BT][BK]
  cs_u16* sK = sQ + BT * kLdB;                       // [BT][BK]
  cs_u16* sH = sK + BT * kLdB;                       // [BV][BK]
  cs_u16* sP = sH + kBV * kLdB;                       // [BT][BT]
  cs_u16* sV = sP + BT * kLdT;                       // [BT][BV]
  float* sg = reinterpret_cast<float*>(sV + BT * kLdV);

  const int i_v = blockIdx.x, i_t = blockIdx.y;
  const int i_b = blockIdx.z / H, i_h = blockIdx.z % H;
  const int i_hk = i_h / (H / Hg);
  const GdChunk c = gd_chunk(cu_seqlens, chunk_indices, i_t, i_b, T, IS_VARLEN, BT);
  // the global chunk number that indexes h
  const int i_tg = IS_VARLEN ? i_t : i_b * ((T + BT - 1) / BT) + i_t;
  const int rows = min(BT, c.len - c.t0);
  const cs_i64 row0 = static_cast<cs_i64>(c.bos) + c.t0;
  const int v0 = i_v * kBV;
  const int warp = threadIdx.x >> 5;
  const cs_u16* hc = h + (static_cast<cs_i64>(i_tg) * H + i_h) * V * K;

  for (int t = threadIdx.x; t < BT; t += kThreads) sg[t] = t < rows ? g[(row0 + t) * H + i_h] : 0.f;
  float acc_o[kTpwO][4];
  float acc_s[kTpwS][4];
  for (int j = 0; j < kTpwO; ++j)
    for (int e = 0; e < 4; ++e) acc_o[j][e] = 0.f;
  for (int j = 0; j < kTpwS; ++j)
    for (int e = 0; e < 4; ++e) acc_s[j][e] = 0.f;

  for (int kb = 0; kb < K; kb += kBK) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < BT * (kBK / 2); idx += kThreads) {
      const int t = idx / (kBK / 2), col = (idx % (kBK / 2)) * 2;
      cs_u32 qv = 0, kv = 0;
      if (t < rows) {
        const cs_i64 off = ((row0 + t) * Hg + i_hk) * K + kb + col;
        qv = *reinterpret_cast<const cs_u32*>(q + off);
        kv = *reinterpret_cast<const cs_u32*>(k + off);
      }
      *reinterpret_cast<cs_u32*>(&sQ[t * kLdB + col]) = qv;
      *reinterpret_cast<cs_u32*>(&sK[t * kLdB + col]) = kv;
    }
    for (int idx = threadIdx.x; idx < kBV * (kBK / 2); idx += kThreads) {
      const int r = idx / (kBK / 2), col = (idx % (kBK / 2)) * 2;
      *reinterpret_cast<cs_u32*>(&sH[r * kLdB + col]) =
          *reinterpret_cast<const cs_u32*>(hc + static_cast<cs_i64>(v0 + r) * K + kb + col);
    }
    __syncthreads();
    for (int j = 0; j < kTpwO; ++j) {
      const int i = warp + j * NUM_WARPS;
      if (i >= kOTiles) break;
      gd_mma_tile(acc_o[j], sQ, kLdB, sH, kLdB, GD_TILE_M0(i, kBV), GD_TILE_N0(i, kBV), kBK);
    }
    for (int j = 0; j < kTpwS; ++j) {
      const int i = warp + j * NUM_WARPS;
      if (i >= kSTiles) break;
      const int m0 = GD_TILE_M0(i, BT), n0 = GD_TILE_N0(i, BT);
      if (n0 > m0 + 15) continue;  // above the diagonal: masked
      gd_mma_tile(acc_s[j], sQ, kLdB, sK, kLdB, m0, n0, kBK);
    }
  }

  // masked, gated scores -> bf16 in shared memory; v_new staged
  for (int j = 0; j < kTpwS; ++j) {
    const int i = warp + j * NUM_WARPS;
    if (i >= kSTiles) break;
    const int m0 = GD_TILE_M0(i, BT), n0 = GD_TILE_N0(i, BT);
    for (int e = 0; e < 4; e += 2) {
      const int r = gd_frag_row(m0, e), col = gd_frag_col(n0, e);
      float p0 = 0.f, p1 = 0.f;
      if (r < rows && col <= r) p0 = acc_s[j][e] * expf(sg[r] - sg[col]);
      if (r < rows && col + 1 <= r) p1 = acc_s[j][e + 1] * expf(sg[r] - sg[col + 1]);
      *reinterpret_cast<cs_u32*>(&sP[r * kLdT + col]) =
          static_cast<cs_u32>(cs_f32_to_bf16(p0)) | (static_cast<cs_u32>(cs_f32_to_bf16(p1)) << 16);
    }
  }
  for (int idx = threadIdx.x; idx < BT * (kBV / 2); idx += kThreads) {
    const int t = idx / (kBV / 2), col = (idx % (kBV / 2)) * 2;
    cs_u32 vv = 0;
    if (t < rows) vv = *reinterpret_cast<const cs_u32*>(v + ((row0 + t) * H + i_h) * V + v0 + col);
    *reinterpret_cast<cs_u32*>(&sV[t * kLdV + col]) = vv;
  }
  __syncthreads();
  for (int j = 0; j < kTpwO; ++j) {
    const int i = warp + j * NUM_WARPS;
    if (i >= kOTiles) break;
    const int m0 = GD_TILE_M0(i, kBV), n0 = GD_TILE_N0(i, kBV);
    for (int e = 0; e < 4; ++e) acc_o[j][e] *= expf(sg[gd_frag_row(m0, e)]);
    gd_mma_tile_kn(acc_o[j], sP, kLdT, sV, kLdV, m0, n0, BT);
    for (int e = 0; e < 4; e += 2) {
      const int r = gd_frag_row(m0, e), col = gd_frag_col(n0, e);
      if (r >= rows) continue;
      *reinterpret_cast<cs_u32*>(o + (row0 + r) * o_stride_t + static_cast<cs_i64>(i_h) * V + v0 +
                                 col) =
          static_cast<cs_u32>(cs_f32_to_bf16(acc_o[j][e] * scale)) |
          (static_cast<cs_u32>(cs_f32_to_bf16(acc_o[j][e + 1] * scale)) << 16);
    }
  }
}
