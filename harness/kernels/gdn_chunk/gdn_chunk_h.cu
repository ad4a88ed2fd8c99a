// chunk_gated_delta_rule_fwd_h: the state recurrence across 64-token chunks, one block per
// (BV-slice of V, sequence, value head). State S [V, K] fp32 (vLLM's current "[V, K]" layout).
// For each chunk c of the sequence (rows t of the chunk, g = chunk-local cumsum, gl = g of its
// last row):
//   h[c]    = bf16(S)                                  (state before the chunk)
//   v_new   = u - w @ S^T                              (stored bf16, SAVE_NEW_VALUE)
//   S       = exp(gl) * S + (v_new * exp(gl - g))^T @ k (the scaled v_new rounded to bf16)
// and ht = S after the last chunk (float32). Mirrors chunk_gated_delta_rule_fwd_kernel_h_blockdim64
// (vllm/model_executor/layers/fla/ops/chunk_delta_h.py); gk (USE_GK) and exp2 gates (USE_EXP2) are
// not used by the GDN prefill and are rejected here.
// The state lives in the warps' mma accumulators; w, k, bf16(S) and the scaled v_new^T are
// staged in dynamic shared memory (gdn_chunk_kernels.h: h_smem_bytes).
// Arguments: k bf16 [T, Hg, K], v (= u) bf16 [T, H, V], w bf16 [T, H, K], v_new bf16 [T, H, V],
// g f32 [T, H], gk (null), h bf16 [NT, H, V, K], h0 f32 [N, H, V, K], ht f32 [N, H, V, K],
// cu_seqlens, chunk_offsets int32 [N+1], T (do_not_specialize).
#if BT != 64
#error "BT must be 64"
#endif
#if USE_GK || USE_EXP2 || !USE_G
#error "the GDN prefill uses scalar gates g in natural-log space only"
#endif
// A candidate's BV larger than V (V = 64 with BV = 128) covers all of V in one block.
constexpr int kBV = BV < V ? BV : V;
static_assert(V % kBV == 0 && kBV % 16 == 0 && K % 16 == 0, "V must be a multiple of BV");

constexpr int kLdK = K + 8;   // rows of K elements
constexpr int kLdT = BT + 8;  // rows of BT elements
constexpr int kStateTiles = (kBV / 16) * (K / 8);
constexpr int kTpwS = (kStateTiles + NUM_WARPS - 1) / NUM_WARPS;
constexpr int kVTiles = (BT / 16) * (kBV / 8);
constexpr int kTpwV = (kVTiles + NUM_WARPS - 1) / NUM_WARPS;

extern "C" __global__ void __launch_bounds__(kThreads)
gdn_chunk_h(const cs_u16* __restrict__ k, const cs_u16* __restrict__ v, const cs_u16* __restrict__ w,
      cs_u16* __restrict__ v_new, const float* __restrict__ g, const float* __restrict__ gk,
      cs_u16* __restrict__ h, const float* __restrict__ h0, float* __restrict__ ht,
      const int* __restrict__ cu_seqlens, const int* __restrict__ chunk_offsets, int T) {
  extern __shared__ __align__(16) unsigned char gd_smem[];
  cs_u16* sW = reinterpret_cast<cs_u16*>(gd_smem);  // [BT][K]
  cs_u16* sK = sW + BT * kLdK;                       // [BT][K]
  cs_u16* sS = sK + BT * kLdK;                       // [BV][K]
  cs_u16* sVT = sS + kBV * kLdK;                      // [BV][BT]
  float* sg = reinterpret_cast<float*>(sVT + kBV * kLdT);
  (void)gk;

  const int i_v = blockIdx.x;
  const int i_nh = blockIdx.y;
  const int i_n = i_nh / H, i_h = i_nh % H;
  const int i_hk = i_h / (H / Hg);
  int bos, len, boh;
  if (IS_VARLEN) {
    bos = cu_seqlens[i_n];
    len = cu_seqlens[i_n + 1] - bos;
    boh = chunk_offsets[i_n];
  } else {
    bos = i_n * T;
    len = T;
    boh = i_n * ((T + BT - 1) / BT);
  }
  const int nt = (len + BT - 1) / BT;
  const int v0 = i_v * kBV;
  const int warp = threadIdx.x >> 5;
  const cs_i64 state_off = static_cast<cs_i64>(i_nh) * V * K;

  float S[kTpwS][4];
  for (int j = 0; j < kTpwS; ++j) {
    const int i = warp + j * NUM_WARPS;
    for (int e = 0; e < 4; ++e) {
      float x = 0.f;
      if (USE_INITIAL_STATE && i < kStateTiles) {
        const int r = gd_frag_row(GD_TILE_M0(i, K), e), col = gd_frag_col(GD_TILE_N0(i, K), e);
        x = h0[state_off + static_cast<cs_i64>(v0 + r) * K + col];
      }
      S[j][e] = x;
    }
  }

  for (int c = 0; c < nt; ++c) {
    const int rows = min(BT, len - c * BT);
    const cs_i64 row0 = static_cast<cs_i64>(bos) + c * BT;
    // (a) bf16(S) -> shared; stage w, k and g of the chunk.
    for (int j = 0; j < kTpwS; ++j) {
      const int i = warp + j * NUM_WARPS;
      if (i >= kStateTiles) break;
      const int m0 = GD_TILE_M0(i, K), n0 = GD_TILE_N0(i, K);
      for (int e = 0; e < 4; e += 2) {
        const int r = gd_frag_row(m0, e), col = gd_frag_col(n0, e);
        const cs_u32 lo = cs_f32_to_bf16(S[j][e]), hi = cs_f32_to_bf16(S[j][e + 1]);
        *reinterpret_cast<cs_u32*>(&sS[r * kLdK + col]) = lo | (hi << 16);
      }
    }
    for (int idx = threadIdx.x; idx < BT * (K / 2); idx += kThreads) {
      const int t = idx / (K / 2), col = (idx % (K / 2)) * 2;
      cs_u32 wv = 0, kv = 0;
      if (t < rows) {
        wv = *reinterpret_cast<const cs_u32*>(w + ((row0 + t) * H + i_h) * K + col);
        kv = *reinterpret_cast<const cs_u32*>(k + ((row0 + t) * Hg + i_hk) * K + col);
      }
      *reinterpret_cast<cs_u32*>(&sW[t * kLdK + col]) = wv;
      *reinterpret_cast<cs_u32*>(&sK[t * kLdK + col]) = kv;
    }
    for (int t = threadIdx.x; t < BT; t += kThreads) {
      sg[t] = t < rows ? g[(row0 + t) * H + i_h] : 0.f;
    }
    __syncthreads();
    // (b) h[c] = bf16(S), coalesced from shared memory.
    {
      cs_u16* hc = h + (static_cast<cs_i64>(boh + c) * H + i_h) * V * K;
      for (int idx = threadIdx.x; idx < kBV * (K / 2); idx += kThreads) {
        const int r = idx / (K / 2), col = (idx % (K / 2)) * 2;
        *reinterpret_cast<cs_u32*>(hc + static_cast<cs_i64>(v0 + r) * K + col) =
            *reinterpret_cast<const cs_u32*>(&sS[r * kLdK + col]);
      }
    }
    const float gl = sg[rows - 1];
    // (c) v_new = u - w @ S^T; scaled copy for the state update.
    for (int j = 0; j < kTpwV; ++j) {
      const int i = warp + j * NUM_WARPS;
      if (i >= kVTiles) break;
      const int m0 = GD_TILE_M0(i, kBV), n0 = GD_TILE_N0(i, kBV);
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      gd_mma_tile(acc, sW, kLdK, sS, kLdK, m0, n0, K);
      for (int e = 0; e < 4; e += 2) {
        const int t = gd_frag_row(m0, e), col = gd_frag_col(n0, e);
        float x0 = 0.f, x1 = 0.f;
        if (t < rows) {
          const cs_i64 off = ((row0 + t) * H + i_h) * V + v0 + col;
          const cs_u32 uu = *reinterpret_cast<const cs_u32*>(v + off);
          x0 = cs_bf16_to_f32(static_cast<cs_u16>(uu & 0xffffu)) - acc[e];
          x1 = cs_bf16_to_f32(static_cast<cs_u16>(uu >> 16)) - acc[e + 1];
          if (SAVE_NEW_VALUE) {
            *reinterpret_cast<cs_u32*>(v_new + off) =
                static_cast<cs_u32>(cs_f32_to_bf16(x0)) |
                (static_cast<cs_u32>(cs_f32_to_bf16(x1)) << 16);
          }
          const float dec = expf(gl - sg[t]);
          x0 *= dec;
          x1 *= dec;
        }
        sVT[col * kLdT + t] = cs_f32_to_bf16(x0);
        sVT[(col + 1) * kLdT + t] = cs_f32_to_bf16(x1);
      }
    }
    const float eg = expf(gl);
    for (int j = 0; j < kTpwS; ++j)
      for (int e = 0; e < 4; ++e) S[j][e] *= eg;
    __syncthreads();
    // (d) S += v_scaled^T @ k
    for (int j = 0; j < kTpwS; ++j) {
      const int i = warp + j * NUM_WARPS;
      if (i >= kStateTiles) break;
      gd_mma_tile_kn(S[j], sVT, kLdT, sK, kLdK, GD_TILE_M0(i, K), GD_TILE_N0(i, K), BT);
    }
    __syncthreads();
  }

  if (STORE_FINAL_STATE) {
    for (int j = 0; j < kTpwS; ++j) {
      const int i = warp + j * NUM_WARPS;
      if (i >= kStateTiles) break;
      const int m0 = GD_TILE_M0(i, K), n0 = GD_TILE_N0(i, K);
      for (int e = 0; e < 4; ++e) {
        const int r = gd_frag_row(m0, e), col = gd_frag_col(n0, e);
        ht[state_off + static_cast<cs_i64>(v0 + r) * K + col] = S[j][e];
      }
    }
  }
}
