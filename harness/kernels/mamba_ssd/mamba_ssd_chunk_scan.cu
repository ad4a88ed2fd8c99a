// _chunk_scan_fwd_kernel: the output of each chunk c (tokens m < len, head h, group g, p < P):
//   y[m, p] = exp(dA[m]) * sum_n C[m, g, n] * bf16(prev[p, n])
//           + sum_{k <= m} bf16(CB[c, g, m, k] * exp(min(dA[m] - dA[k], 0)) * dt[k]) * x[k, h, p]
//           + D[h (, p)] * x[m, h, p]
// with dA = dA_cumsum[h, c, :], dt = dt[h, c, :] and prev the state before the chunk: when the
// chunk starts a new sequence (seq_idx[c] != seq_idx[c-1]) initstates[seq_idx[c], h] (or zero
// without HAS_INITSTATES), else the passed state states[c-1, h] (the state dtype, rounded to the
// input dtype for the product, as vLLM does). Stored bf16 to out. One block per (BLOCK_SIZE_M
// tokens x BLOCK_SIZE_N of P, chunk, head); dynamic shared memory (chunk_scan_smem_bytes).
// Arguments (vLLM's order): cb f32 [nchunks, G, cs, cs], x bf16, z (unused, HAS_Z = 0), out
// bf16, dt f32, dA_cumsum f32, seq_idx int32 [nchunks], C bf16, states (STATES_DTYPE), D
// (D_DTYPE), initstates (INIT_DTYPE), cu_chunk_seqlens int32, then the tl.int64 strides
// stride_cb_chunk, stride_cb_head, stride_cb_csize_m, stride_x_seqlen, stride_x_head,
// stride_z_seqlen, stride_z_head, stride_out_seqlen, stride_out_head, stride_dt_chunk,
// stride_dt_head, stride_dA_cs_chunk, stride_dA_cs_head, stride_C_seqlen, stride_C_head,
// stride_states_chunk, stride_states_head, stride_states_hdim, stride_init_states_batch,
// stride_init_states_head, stride_init_states_hdim. Constexprs: chunk_size, hdim, dstate,
// nheads_ngroups_ratio, the constexpr strides, IS_CAUSAL, HAS_D, D_HAS_HDIM, HAS_Z,
// BLOCK_SIZE_M / N / K, BLOCK_SIZE_DSTATE, IS_TRITON_22, HAS_INITSTATES, NUM_WARPS, NUM_STAGES,
// STATES_DTYPE, INIT_DTYPE, D_DTYPE.
static_assert(stride_x_hdim == 1 && stride_out_hdim == 1 && stride_C_dstate == 1 &&
                  stride_cb_csize_k == 1 && stride_states_dstate == 1 &&
                  (stride_init_states_dstate == 1 || !HAS_INITSTATES),
              "inner dimensions must be contiguous");
#if HAS_Z
#error "z gating is not used by MambaMixer2 (z=None)"
#endif
#if !IS_CAUSAL
#error "vLLM always launches the chunk scan with IS_CAUSAL=True"
#endif
// 16-byte staging where the compile key says the rows are 16-byte aligned (mamba_ssd_common.cuh).
#if defined(CS_SPEC_C_ptr) && CS_SPEC_C_ptr == 16 && defined(CS_SPEC_stride_C_seqlen) && \
    CS_SPEC_stride_C_seqlen == 16 && defined(CS_SPEC_stride_C_head) && CS_SPEC_stride_C_head == 16
constexpr bool kVecC = true;
#else
constexpr bool kVecC = false;
#endif
#if defined(CS_SPEC_x_ptr) && CS_SPEC_x_ptr == 16 && defined(CS_SPEC_stride_x_seqlen) && \
    CS_SPEC_stride_x_seqlen == 16 && defined(CS_SPEC_stride_x_head) && CS_SPEC_stride_x_head == 16
constexpr bool kVecX = true;
#else
constexpr bool kVecX = false;
#endif
#if defined(CS_SPEC_states_ptr) && CS_SPEC_states_ptr == 16 &&                   \
    defined(CS_SPEC_stride_states_chunk) && CS_SPEC_stride_states_chunk == 16 && \
    defined(CS_SPEC_stride_states_head) && CS_SPEC_stride_states_head == 16 &&   \
    defined(CS_SPEC_stride_states_hdim) && CS_SPEC_stride_states_hdim == 16
constexpr bool kVecStates = true;
#else
constexpr bool kVecStates = false;
#endif
#if defined(CS_SPEC_initstates_ptr) && CS_SPEC_initstates_ptr == 16 &&                     \
    defined(CS_SPEC_stride_init_states_batch) && CS_SPEC_stride_init_states_batch == 16 && \
    defined(CS_SPEC_stride_init_states_head) && CS_SPEC_stride_init_states_head == 16 &&   \
    defined(CS_SPEC_stride_init_states_hdim) && CS_SPEC_stride_init_states_hdim == 16
constexpr bool kVecInit = true;
#else
constexpr bool kVecInit = false;
#endif
#if defined(CS_SPEC_cb_ptr) && CS_SPEC_cb_ptr == 16 && defined(CS_SPEC_stride_cb_chunk) && \
    CS_SPEC_stride_cb_chunk == 16 && defined(CS_SPEC_stride_cb_head) &&                    \
    CS_SPEC_stride_cb_head == 16 && defined(CS_SPEC_stride_cb_csize_m) &&                  \
    CS_SPEC_stride_cb_csize_m == 16
constexpr bool kVecCB = true;
#else
constexpr bool kVecCB = false;
#endif
constexpr int kBM = BLOCK_SIZE_M < chunk_size ? BLOCK_SIZE_M : chunk_size;
constexpr int kBN = BLOCK_SIZE_N < hdim ? BLOCK_SIZE_N : hdim;
constexpr int kBK = BLOCK_SIZE_K < chunk_size ? BLOCK_SIZE_K : chunk_size;
// dstate per pass of the C @ prev product: all of it up to 128 ("faster to do one iteration"),
// else BLOCK_SIZE_K at a time, as vLLM does.
constexpr int kDK = BLOCK_SIZE_DSTATE <= 128 ? BLOCK_SIZE_DSTATE : BLOCK_SIZE_K;
static_assert(dstate % kDK == 0, "dstate must be a multiple of the dstate step");
constexpr int kLdC = kDK + 8;
constexpr int kLdCB = kBK + 8;
constexpr int kLdX = kBN + 8;
typedef MsWarpGrid<kBM, kBN> Grid;
typedef MsType<STATES_DTYPE> MsStates;
typedef MsType<INIT_DTYPE> MsInit;
typedef MsType<D_DTYPE> MsD;

extern "C" __global__ void __launch_bounds__(kMsThreads) mamba_ssd_chunk_scan(
    const float* __restrict__ cb, const cs_u16* __restrict__ x, const cs_u16* __restrict__ z,
    cs_u16* __restrict__ out, const float* __restrict__ dt, const float* __restrict__ dA_cumsum,
    const int* __restrict__ seq_idx, const cs_u16* __restrict__ C,
    const typename MsStates::T* __restrict__ states, const typename MsD::T* __restrict__ D,
    const typename MsInit::T* __restrict__ initstates, const int* __restrict__ cu_chunk_seqlens,
    cs_i64 stride_cb_chunk, cs_i64 stride_cb_head, cs_i64 stride_cb_csize_m, cs_i64 stride_x_seqlen,
    cs_i64 stride_x_head, cs_i64 stride_z_seqlen, cs_i64 stride_z_head, cs_i64 stride_out_seqlen,
    cs_i64 stride_out_head, cs_i64 stride_dt_chunk, cs_i64 stride_dt_head,
    cs_i64 stride_dA_cs_chunk, cs_i64 stride_dA_cs_head, cs_i64 stride_C_seqlen,
    cs_i64 stride_C_head, cs_i64 stride_states_chunk, cs_i64 stride_states_head,
    cs_i64 stride_states_hdim, cs_i64 stride_init_states_batch, cs_i64 stride_init_states_head,
    cs_i64 stride_init_states_hdim) {
  extern __shared__ __align__(16) unsigned char ms_smem[];
  float* sDA = reinterpret_cast<float*>(ms_smem);  // [chunk_size]
  float* sDT = sDA + chunk_size;                   // [chunk_size]
  cs_u16* work = reinterpret_cast<cs_u16*>(sDT + chunk_size);
  // phase 1: C [kBM][kDK] and prev [kBN][kDK]; phase 2: scaled CB [kBM][kBK] and x [kBK][kBN]
  cs_u16* sC = work;
  cs_u16* sP = sC + kBM * kLdC;
  cs_u16* sCB = work;
  cs_u16* sX = sCB + kBM * kLdCB;
  (void)z;
  (void)stride_z_seqlen;
  (void)stride_z_head;

  constexpr int kNumPidN = (hdim + BLOCK_SIZE_N - 1) / BLOCK_SIZE_N;
  const int pid_m = blockIdx.x / kNumPidN, pid_n = blockIdx.x % kNumPidN;
  const cs_i64 c = blockIdx.y;
  const int h = blockIdx.z;
  const int g = h / nheads_ngroups_ratio;
  const int m0 = pid_m * kBM, n0 = pid_n * kBN;
  const int start = cu_chunk_seqlens[c];
  const int len = cu_chunk_seqlens[c + 1] - start;
  if (m0 >= len) return;  // a row block past the end of a short chunk: nothing to store
  const int seq = seq_idx[c * stride_seq_idx_chunk];
  const int seq_prev = c >= 1 ? seq_idx[(c - 1) * stride_seq_idx_chunk] : -1;
  const bool new_seq = seq != seq_prev;
  const int warp = threadIdx.x >> 5;
  const cs_u16* xc = x + start * stride_x_seqlen + h * stride_x_head;
  const cs_u16* cc = C + start * stride_C_seqlen + g * stride_C_head;

  for (int t = threadIdx.x; t < chunk_size; t += kMsThreads) {
    sDA[t] = dA_cumsum[c * stride_dA_cs_chunk + h * stride_dA_cs_head + t * stride_dA_cs_csize];
    sDT[t] = dt[c * stride_dt_chunk + h * stride_dt_head + t * stride_dt_csize];
  }

  float acc[Grid::kMt][Grid::kNt][4];
  ms_zero<Grid::kMt, Grid::kNt>(acc);

  // ---- phase 1: the carried state, C @ prev^T, scaled by exp(dA[m]) ----
  if (HAS_INITSTATES || !new_seq) {
    const bool from_init = HAS_INITSTATES && new_seq;
    for (int k0 = 0; k0 < dstate; k0 += kDK) {
      ms_stage_bf16_rows<kVecC>(sC, kLdC, cc + m0 * stride_C_seqlen + k0, stride_C_seqlen, kBM, kDK,
                                len - m0);
      if (from_init) {
        ms_stage_to_bf16<INIT_DTYPE, kVecInit>(sP, kLdC,
                                               initstates + seq * stride_init_states_batch +
                                                   h * stride_init_states_head +
                                                   n0 * stride_init_states_hdim + k0,
                                               stride_init_states_hdim, kBN, kDK);
      } else {
        ms_stage_to_bf16<STATES_DTYPE, kVecStates>(sP, kLdC,
                                                   states + (c - 1) * stride_states_chunk +
                                                       h * stride_states_head +
                                                       n0 * stride_states_hdim + k0,
                                                   stride_states_hdim, kBN, kDK);
      }
      __syncthreads();
      if (warp < Grid::kActive) {
        ms_warp_mma<Grid::kMt, Grid::kNt, false, false>(acc, sC, kLdC, sP, kLdC, Grid::row0(warp),
                                                        Grid::col0(warp), kDK);
      }
      __syncthreads();
    }
    if (warp < Grid::kActive) {
#pragma unroll
      for (int i = 0; i < Grid::kMt; ++i)
#pragma unroll
        for (int j = 0; j < Grid::kNt; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc[i][j][e] *= ms_fast_exp(sDA[m0 + Grid::row0(warp) + 16 * i + cs_mma_acc_row(e)]);
          }
    }
  } else {
    __syncthreads();  // sDA / sDT visible
  }

  // ---- phase 2: the causal part inside the chunk ----
  const int k_max = min(m0 + kBM, len);
  const float* cbc = cb + c * stride_cb_chunk + g * stride_cb_head;
  for (int k0 = 0; k0 < k_max; k0 += kBK) {
    constexpr int kPerCB = kVecCB ? 4 : 2;
    for (int i = threadIdx.x; i < kBM * (kBK / kPerCB); i += kMsThreads) {
      const int r = i / (kBK / kPerCB), col = (i % (kBK / kPerCB)) * kPerCB;
      const int m = m0 + r, k = k0 + col;
      const float* src = cbc + m * stride_cb_csize_m + k;
      float v[4];
      if constexpr (kVecCB) {
        const float4 q = *reinterpret_cast<const float4*>(src);
        v[0] = q.x;
        v[1] = q.y;
        v[2] = q.z;
        v[3] = q.w;
      } else {
        const float2 q = *reinterpret_cast<const float2*>(src);
        v[0] = q.x;
        v[1] = q.y;
      }
      const float dam = sDA[m];
#pragma unroll
      for (int e = 0; e < kPerCB; ++e) {
        v[e] = k + e <= m ? v[e] * ms_fast_exp(fminf(dam - sDA[k + e], 0.f)) * sDT[k + e] : 0.f;
      }
      if constexpr (kVecCB) {
        *reinterpret_cast<uint2*>(&sCB[r * kLdCB + col]) =
            make_uint2(cs_pack_bf16x2(v[0], v[1]), cs_pack_bf16x2(v[2], v[3]));
      } else {
        *reinterpret_cast<cs_u32*>(&sCB[r * kLdCB + col]) = cs_pack_bf16x2(v[0], v[1]);
      }
    }
    ms_stage_bf16_rows<kVecX>(sX, kLdX, xc + k0 * stride_x_seqlen + n0, stride_x_seqlen, kBK, kBN,
                              len - k0);
    __syncthreads();
    if (warp < Grid::kActive) {
      ms_warp_mma<Grid::kMt, Grid::kNt, false, true>(acc, sCB, kLdCB, sX, kLdX, Grid::row0(warp),
                                                     Grid::col0(warp), kBK);
    }
    __syncthreads();
  }

  // ---- epilogue: D x, store ----
  if (warp >= Grid::kActive) return;
  float dv = 0.f;
  if (HAS_D && !D_HAS_HDIM) dv = MsD::load(D[h * stride_D_head]);
  cs_u16* oc = out + start * stride_out_seqlen + h * stride_out_head;
#pragma unroll
  for (int i = 0; i < Grid::kMt; ++i)
#pragma unroll
    for (int j = 0; j < Grid::kNt; ++j)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int m = m0 + Grid::row0(warp) + 16 * i + cs_mma_acc_row(e);
        const int p = n0 + Grid::col0(warp) + 8 * j + cs_mma_acc_col(e);
        if (m >= len) continue;
        float y0 = acc[i][j][e], y1 = acc[i][j][e + 1];
        if (HAS_D) {
          const cs_u32 xr = *reinterpret_cast<const cs_u32*>(xc + m * stride_x_seqlen + p);
          float d0 = dv, d1 = dv;
          if (D_HAS_HDIM) {
            d0 = MsD::load(D[h * stride_D_head + p]);
            d1 = MsD::load(D[h * stride_D_head + p + 1]);
          }
          y0 += cs_bf16_to_f32(static_cast<cs_u16>(xr & 0xffffu)) * d0;
          y1 += cs_bf16_to_f32(static_cast<cs_u16>(xr >> 16)) * d1;
        }
        *reinterpret_cast<cs_u32*>(oc + m * stride_out_seqlen + p) = cs_pack_bf16x2(y0, y1);
      }
}
