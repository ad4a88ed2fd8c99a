// _chunk_state_fwd_kernel: the state each chunk contributes on its own, per chunk c and head h
// (group g = h / nheads_ngroups_ratio), with t over the chunk's len tokens:
//   states[c, h, p, n] = sum_t x[start + t, h, p] * bf16(B[start + t, g, n] * w_t),
//   w_t = exp(min(dA_cs[h, c, chunk_size - 1] - dA_cs[h, c, t], 0)) * dt[h, c, t]
// (B scaled in f32 and rounded to the input dtype before the product, f32 accumulation, f32
// states: vLLM's states_in_fp32=True). One block per (BLOCK_SIZE_M x BLOCK_SIZE_N tile of
// [P, N], chunk, head); tokens in steps of BLOCK_SIZE_K staged token-major in dynamic shared
// memory (mamba_ssd_kernels.h: chunk_state_smem_bytes).
// Arguments (vLLM's order): x bf16, b bf16, states f32, dt f32, dA_cumsum f32, cu_chunk_seqlens
// int32, then the tl.int64 strides stride_x_seqlen, stride_x_head, stride_b_seqlen,
// stride_b_head, stride_states_chunk, stride_states_head, stride_states_hdim, stride_dt_head,
// stride_dt_chunk, stride_dA_cs_head, stride_dA_cs_chunk. Constexprs: hdim, dstate, chunk_size,
// nheads_ngroups_ratio, the constexpr strides, BLOCK_SIZE_M / N / K, NUM_WARPS, NUM_STAGES.
static_assert(stride_x_hdim == 1 && stride_b_dstate == 1 && stride_states_dstate == 1,
              "inner dimensions must be contiguous");
// 16-byte staging when the compile key says x / b rows are 16-byte aligned (mamba_ssd_common.cuh).
#if defined(CS_SPEC_x_ptr) && CS_SPEC_x_ptr == 16 && defined(CS_SPEC_stride_x_seqlen) && \
    CS_SPEC_stride_x_seqlen == 16 && defined(CS_SPEC_stride_x_head) && CS_SPEC_stride_x_head == 16
constexpr bool kVecX = true;
#else
constexpr bool kVecX = false;
#endif
#if defined(CS_SPEC_b_ptr) && CS_SPEC_b_ptr == 16 && defined(CS_SPEC_stride_b_seqlen) && \
    CS_SPEC_stride_b_seqlen == 16 && defined(CS_SPEC_stride_b_head) && CS_SPEC_stride_b_head == 16
constexpr bool kVecB = true;
#else
constexpr bool kVecB = false;
#endif
// Candidate tiles larger than the problem cover all of it (Triton masks the excess).
constexpr int kBM = BLOCK_SIZE_M < hdim ? BLOCK_SIZE_M : hdim;
constexpr int kBN = BLOCK_SIZE_N < dstate ? BLOCK_SIZE_N : dstate;
constexpr int kBK = BLOCK_SIZE_K < chunk_size ? BLOCK_SIZE_K : chunk_size;
constexpr int kLdX = kBM + 8;
constexpr int kLdB = kBN + 8;
constexpr int kPerB = kVecB ? 8 : 2;  // B elements per load
typedef MsWarpGrid<kBM, kBN> Grid;

extern "C" __global__ void __launch_bounds__(kMsThreads)
    mamba_ssd_chunk_state(const cs_u16* __restrict__ x, const cs_u16* __restrict__ b,
                          float* __restrict__ states, const float* __restrict__ dt,
                          const float* __restrict__ dA_cumsum,
                          const int* __restrict__ cu_chunk_seqlens, cs_i64 stride_x_seqlen,
                          cs_i64 stride_x_head, cs_i64 stride_b_seqlen, cs_i64 stride_b_head,
                          cs_i64 stride_states_chunk, cs_i64 stride_states_head,
                          cs_i64 stride_states_hdim, cs_i64 stride_dt_head, cs_i64 stride_dt_chunk,
                          cs_i64 stride_dA_cs_head, cs_i64 stride_dA_cs_chunk) {
  extern __shared__ __align__(16) unsigned char ms_smem[];
  cs_u16* sX = reinterpret_cast<cs_u16*>(ms_smem);  // [kBK][kBM]: x^T, token-major
  cs_u16* sB = sX + kBK * kLdX;                     // [kBK][kBN]: scaled B, token-major

  constexpr int kNumPidN = (dstate + BLOCK_SIZE_N - 1) / BLOCK_SIZE_N;
  const int pid_m = blockIdx.x / kNumPidN, pid_n = blockIdx.x % kNumPidN;
  const cs_i64 c = blockIdx.y;
  const int h = blockIdx.z;
  const int g = h / nheads_ngroups_ratio;
  const int m0 = pid_m * kBM, n0 = pid_n * kBN;
  const int start = cu_chunk_seqlens[c];
  const int len = cu_chunk_seqlens[c + 1] - start;
  const cs_u16* xc = x + start * stride_x_seqlen + h * stride_x_head + m0;
  const cs_u16* bc = b + start * stride_b_seqlen + g * stride_b_head + n0;
  const float* dtc = dt + h * stride_dt_head + c * stride_dt_chunk;
  const float* dac = dA_cumsum + h * stride_dA_cs_head + c * stride_dA_cs_chunk;
  const float da_last = dac[(chunk_size - 1) * stride_dA_cs_csize];
  const int warp = threadIdx.x >> 5;

  float acc[Grid::kMt][Grid::kNt][4];
  ms_zero<Grid::kMt, Grid::kNt>(acc);
  for (int k0 = 0; k0 < len; k0 += kBK) {
    ms_stage_bf16_rows<kVecX>(sX, kLdX, xc + k0 * stride_x_seqlen, stride_x_seqlen, kBK, kBM,
                              len - k0);
    // B rows scaled by w_t in f32, rounded to bf16
    for (int i = threadIdx.x; i < kBK * (kBN / kPerB); i += kMsThreads) {
      const int t = i / (kBN / kPerB), col = (i % (kBN / kPerB)) * kPerB;
      const int k = k0 + t;
      cs_u32 o[4];
#pragma unroll
      for (int e = 0; e < kPerB / 2; ++e) o[e] = 0;
      if (k < len) {
        const float w = ms_fast_exp(fminf(da_last - dac[k * stride_dA_cs_csize], 0.f)) *
                        dtc[k * stride_dt_csize];
        const cs_u16* src = bc + k * stride_b_seqlen + col;
        cs_u32 raw[4];
        if constexpr (kVecB) {
          const uint4 v = *reinterpret_cast<const uint4*>(src);
          raw[0] = v.x;
          raw[1] = v.y;
          raw[2] = v.z;
          raw[3] = v.w;
        } else {
          raw[0] = *reinterpret_cast<const cs_u32*>(src);
        }
#pragma unroll
        for (int e = 0; e < kPerB / 2; ++e) {
          o[e] = cs_pack_bf16x2(cs_bf16_to_f32(static_cast<cs_u16>(raw[e] & 0xffffu)) * w,
                              cs_bf16_to_f32(static_cast<cs_u16>(raw[e] >> 16)) * w);
        }
      }
      if constexpr (kVecB) {
        *reinterpret_cast<uint4*>(&sB[t * kLdB + col]) = make_uint4(o[0], o[1], o[2], o[3]);
      } else {
        *reinterpret_cast<cs_u32*>(&sB[t * kLdB + col]) = o[0];
      }
    }
    __syncthreads();
    if (warp < Grid::kActive) {
      ms_warp_mma<Grid::kMt, Grid::kNt, true, true>(acc, sX, kLdX, sB, kLdB, Grid::row0(warp),
                                                    Grid::col0(warp), kBK);
    }
    __syncthreads();
  }
  if (warp >= Grid::kActive) return;
  float* out = states + c * stride_states_chunk + h * stride_states_head;
#pragma unroll
  for (int i = 0; i < Grid::kMt; ++i)
#pragma unroll
    for (int j = 0; j < Grid::kNt; ++j)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int p = m0 + Grid::row0(warp) + 16 * i + cs_mma_acc_row(e);
        const int n = n0 + Grid::col0(warp) + 8 * j + cs_mma_acc_col(e);
        *reinterpret_cast<float2*>(out + p * stride_states_hdim + n) =
            make_float2(acc[i][j][e], acc[i][j][e + 1]);
      }
}
