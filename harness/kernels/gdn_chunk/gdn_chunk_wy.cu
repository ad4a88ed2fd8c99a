// recompute_w_u_fwd: with Ai = solve_tril's (I + A)^-1 (bf16) per chunk and value head,
//   u = Ai @ (v * beta)             bf16 [B*T, H, V]
//   w = Ai @ (k * beta * exp(g))    bf16 [B*T, H, K]
// (the scaled operands rounded to bf16 before the product, as vLLM does).
// Mirrors recompute_w_u_fwd_kernel (vllm/model_executor/layers/fla/ops/wy_fast.py).
// Grid (NT, B * H). Ai stays in shared memory; the scaled v and k are staged BV / BK columns at
// a time, token-major.
// Arguments: k bf16 [B*T, Hg, K], v bf16 [B*T, H, V], beta f32 [B*T, H], w, u, A (= Ai) bf16
// [B*T, H, BT], g f32 [B*T, H], cu_seqlens, chunk_indices, T (do_not_specialize).
#if BT != 64
#error "BT must be 64"
#endif
#if (K % BK) != 0 || (V % BV) != 0 || (BK % 8) != 0 || (BV % 8) != 0
#error "K / V must be multiples of BK / BV (multiples of 8)"
#endif

constexpr int kLd = BT + 8;
constexpr int kBN = BK > BV ? BK : BV;
constexpr int kLdN = kBN + 8;
constexpr int kTpwMax = ((BT / 16) * (kBN / 8) + NUM_WARPS - 1) / NUM_WARPS;

// out[r, n] = sum_t sa[r][t] * sb[t][n] for r < rows, n < bn, stored bf16 at
// out + (row0 + r) * row_stride + n.
__device__ __forceinline__ void gd_wy_product(const cs_u16* sa, const cs_u16* sb, int bn,
                                              cs_u16* out, cs_i64 row_stride, int rows) {
  const int warp = threadIdx.x >> 5;
  const int tiles = (BT / 16) * (bn / 8);
  for (int j = 0; j < kTpwMax; ++j) {
    const int i = warp + j * NUM_WARPS;
    if (i >= tiles) break;
    const int m0 = (i / (bn / 8)) * 16, n0 = (i % (bn / 8)) * 8;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    gd_mma_tile_kn(acc, sa, kLd, sb, kLdN, m0, n0, BT);
    for (int e = 0; e < 4; e += 2) {
      const int r = gd_frag_row(m0, e), col = gd_frag_col(n0, e);
      if (r >= rows) continue;
      const cs_u32 lo = cs_f32_to_bf16(acc[e]), hi = cs_f32_to_bf16(acc[e + 1]);
      *reinterpret_cast<cs_u32*>(out + r * row_stride + col) = lo | (hi << 16);
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
gdn_chunk_wy(const cs_u16* __restrict__ k, const cs_u16* __restrict__ v, const float* __restrict__ beta,
       cs_u16* __restrict__ w, cs_u16* __restrict__ u, const cs_u16* __restrict__ A,
       const float* __restrict__ g, const int* __restrict__ cu_seqlens,
       const int* __restrict__ chunk_indices, int T) {
  __shared__ __align__(16) cs_u16 sa[BT * kLd];
  __shared__ __align__(16) cs_u16 sb[BT * kLdN];
  __shared__ float sbeta[BT];
  __shared__ float sgate[BT];
  const int i_t = blockIdx.x;
  const int i_b = blockIdx.y / H;
  const int i_h = blockIdx.y % H;
  const int i_hk = i_h / (H / Hg);
  const GdChunk c = gd_chunk(cu_seqlens, chunk_indices, i_t, i_b, T, IS_VARLEN, BT);
  const int rows = min(BT, c.len - c.t0);
  const cs_i64 row0 = static_cast<cs_i64>(c.bos) + c.t0;

  for (int i = threadIdx.x; i < BT; i += kThreads) {
    sbeta[i] = i < rows ? beta[(row0 + i) * H + i_h] : 0.f;
    sgate[i] = i < rows ? expf(g[(row0 + i) * H + i_h]) : 0.f;
  }
  for (int idx = threadIdx.x; idx < BT * (BT / 2); idx += kThreads) {
    const int r = idx / (BT / 2), col = (idx % (BT / 2)) * 2;
    cs_u32 val = 0;
    if (r < rows) val = *reinterpret_cast<const cs_u32*>(A + ((row0 + r) * H + i_h) * BT + col);
    *reinterpret_cast<cs_u32*>(&sa[r * kLd + col]) = val;
  }

  for (int vb = 0; vb < V; vb += BV) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < BT * BV; idx += kThreads) {
      const int t = idx / BV, col = idx % BV;
      float x = 0.f;
      if (t < rows) x = cs_bf16_to_f32(v[((row0 + t) * H + i_h) * V + vb + col]) * sbeta[t];
      sb[t * kLdN + col] = cs_f32_to_bf16(x);
    }
    __syncthreads();
    gd_wy_product(sa, sb, BV, u + (row0 * H + i_h) * V + vb, static_cast<cs_i64>(H) * V, rows);
  }
  for (int kb = 0; kb < K; kb += BK) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < BT * BK; idx += kThreads) {
      const int t = idx / BK, col = idx % BK;
      float x = 0.f;
      if (t < rows) {
        x = cs_bf16_to_f32(k[((row0 + t) * Hg + i_hk) * K + kb + col]) * sbeta[t] * sgate[t];
      }
      sb[t * kLdN + col] = cs_f32_to_bf16(x);
    }
    __syncthreads();
    gd_wy_product(sa, sb, BK, w + (row0 * H + i_h) * K + kb, static_cast<cs_i64>(H) * K, rows);
  }
}
