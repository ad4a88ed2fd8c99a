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
// The state lives in the warps' mma accumulators; bf16(S) and the scaled v_new^T are staged in
// dynamic shared memory, and so are w, k and g of two chunks: chunk c + 1's are copied in with
// cp.async (sm_80+) while chunk c computes, so the serial chunk loop does not wait on global
// memory once per chunk (gdn_chunk_kernels.h: h_smem_bytes).
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
// Stages of the w / k / g buffers: two (chunk c + 1 copied in while chunk c computes) up to
// K = 128, whose 97 KB of shared memory fit every sm_80+ GPU; one for K = 256, whose two stages
// would not fit sm_80 / sm_86 (the host's h_smem_bytes applies the same rule).
constexpr int kStages = K <= 128 ? 2 : 1;

// k is a caller's tensor: 16-byte copies when the compile key says its pointer is 16-byte aligned
// (Triton's pointer specialization, CS_SPEC_k), 4-byte ones otherwise; w is the chain's own
// 256-byte aligned scratch.
#if defined(CS_SPEC_k) && CS_SPEC_k == 16
constexpr int kKCopy = 16;
#else
constexpr int kKCopy = 4;
#endif

// Async global -> shared copy of BYTES (4 or 16); `valid` false writes zeros (src-size 0; `src`
// must still be a mapped address).
template <int BYTES>
__device__ __forceinline__ void gd_cp_async(void* smem, const void* src, bool valid) {
  const int n = valid ? BYTES : 0;
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(cs_smem_addr(smem)),
                 "l"(src), "r"(n));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(cs_smem_addr(smem)),
                 "l"(src), "r"(n));
  }
}
__device__ __forceinline__ void gd_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void gd_cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Issues the copies of chunk c's w and k rows ([BT][K], rows past the sequence zeroed) and g into
// one stage of the shared buffers, as one commit group.
__device__ __forceinline__ void gd_h_prefetch(cs_u16* sW, cs_u16* sK, float* sg,
                                              const cs_u16* __restrict__ k,
                                              const cs_u16* __restrict__ w,
                                              const float* __restrict__ g, cs_i64 row0, int rows,
                                              int i_h, int i_hk) {
  for (int idx = threadIdx.x; idx < BT * (K / 8); idx += kThreads) {
    const int t = idx / (K / 8), col = (idx % (K / 8)) * 8;
    const bool ok = t < rows;
    const cs_i64 r = row0 + (ok ? t : 0);
    gd_cp_async<16>(&sW[t * kLdK + col], w + (r * H + i_h) * K + col, ok);
  }
  for (int idx = threadIdx.x; idx < BT * (K * 2 / kKCopy); idx += kThreads) {
    constexpr int kPer = kKCopy / 2;  // elements per copy
    const int t = idx / (K / kPer), col = (idx % (K / kPer)) * kPer;
    const bool ok = t < rows;
    const cs_i64 r = row0 + (ok ? t : 0);
    gd_cp_async<kKCopy>(&sK[t * kLdK + col], k + (r * Hg + i_hk) * K + col, ok);
  }
  for (int t = threadIdx.x; t < BT; t += kThreads) {
    const bool ok = t < rows;
    gd_cp_async<4>(&sg[t], g + (row0 + (ok ? t : 0)) * H + i_h, ok);
  }
  gd_cp_async_commit();
}

extern "C" __global__ void __launch_bounds__(kThreads)
gdn_chunk_h(const cs_u16* __restrict__ k, const cs_u16* __restrict__ v, const cs_u16* __restrict__ w,
      cs_u16* __restrict__ v_new, const float* __restrict__ g, const float* __restrict__ gk,
      cs_u16* __restrict__ h, const float* __restrict__ h0, float* __restrict__ ht,
      const int* __restrict__ cu_seqlens, const int* __restrict__ chunk_offsets, int T) {
  extern __shared__ __align__(16) unsigned char gd_smem[];
  cs_u16* sW = reinterpret_cast<cs_u16*>(gd_smem);  // [kStages][BT][K]: w of the chunks
  cs_u16* sK = sW + kStages * BT * kLdK;             // [kStages][BT][K]: k
  cs_u16* sS = sK + kStages * BT * kLdK;             // [BV][K]
  cs_u16* sVT = sS + kBV * kLdK;                     // [BV][BT]
  float* sg = reinterpret_cast<float*>(sVT + kBV * kLdT);  // [kStages][BT]
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

  if (kStages == 2 && nt > 0) gd_h_prefetch(sW, sK, sg, k, w, g, bos, min(BT, len), i_h, i_hk);
  for (int c = 0; c < nt; ++c) {
    const int rows = min(BT, len - c * BT);
    const cs_i64 row0 = static_cast<cs_i64>(bos) + c * BT;
    const int stage = kStages == 2 ? (c & 1) : 0;
    if (kStages == 1) {
      // One stage: chunk c's copies overwrite what chunk c - 1's step (d) read.
      if (c > 0) __syncthreads();
      gd_h_prefetch(sW, sK, sg, k, w, g, row0, rows, i_h, i_hk);
    }
    const cs_u16* cW = sW + stage * BT * kLdK;
    const cs_u16* cK = sK + stage * BT * kLdK;
    const float* cg = sg + stage * BT;
    // (a) bf16(S) -> shared.
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
    gd_cp_async_wait_all();  // this thread's copies of chunk c
    __syncthreads();         // everyone's copies and bf16(S) are visible
    // Chunk c + 1's copies go to the other stage, last read by chunk c - 1's steps (c) and (d),
    // which every thread finished before the barrier above.
    if (kStages == 2 && c + 1 < nt) {
      gd_h_prefetch(sW + (stage ^ 1) * BT * kLdK, sK + (stage ^ 1) * BT * kLdK,
                    sg + (stage ^ 1) * BT, k, w, g, row0 + BT, min(BT, len - (c + 1) * BT), i_h,
                    i_hk);
    }
    // (b) h[c] = bf16(S), coalesced from shared memory.
    {
      cs_u16* hc = h + (static_cast<cs_i64>(boh + c) * H + i_h) * V * K;
      for (int idx = threadIdx.x; idx < kBV * (K / 2); idx += kThreads) {
        const int r = idx / (K / 2), col = (idx % (K / 2)) * 2;
        *reinterpret_cast<cs_u32*>(hc + static_cast<cs_i64>(v0 + r) * K + col) =
            *reinterpret_cast<const cs_u32*>(&sS[r * kLdK + col]);
      }
    }
    const float gl = cg[rows - 1];
    // (c) v_new = u - w @ S^T; scaled copy for the state update.
    for (int j = 0; j < kTpwV; ++j) {
      const int i = warp + j * NUM_WARPS;
      if (i >= kVTiles) break;
      const int m0 = GD_TILE_M0(i, kBV), n0 = GD_TILE_N0(i, kBV);
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      gd_mma_tile(acc, cW, kLdK, sS, kLdK, m0, n0, K);
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
          const float dec = expf(gl - cg[t]);
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
    // (d) S += v_scaled^T @ k. No barrier after it: the next chunk's step (a) writes only sS,
    // whose readers ((b), (c)) finished before the barrier above, and sVT and this stage's
    // buffers are next written after the next chunk's first barrier.
    for (int j = 0; j < kTpwS; ++j) {
      const int i = warp + j * NUM_WARPS;
      if (i >= kStateTiles) break;
      gd_mma_tile_kn(S[j], sVT, kLdT, cK, kLdK, GD_TILE_M0(i, K), GD_TILE_N0(i, K), BT);
    }
  }
  gd_cp_async_wait_all();

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
