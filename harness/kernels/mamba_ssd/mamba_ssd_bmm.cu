// _bmm_chunk_fwd_kernel: per chunk c and group g, over the chunk's len tokens,
//   out[c, g, i, j] = sum_k a[start + i, g, k] * b[start + j, g, k]   (i, j < chunk_size)
// with rows / columns past len reading zeros; f32 accumulation and output (vLLM calls it with
// a = C, b = B, output_dtype=float32, causal=False). One block per (BLOCK_SIZE_M x BLOCK_SIZE_N
// tile of [chunk_size, chunk_size], chunk x group); K (= dstate) in steps of BLOCK_SIZE_K staged
// in dynamic shared memory (mamba_ssd_kernels.h: bmm_smem_bytes).
// Arguments (vLLM's order): a bf16, b bf16, out f32, cu_chunk_seqlens int32, then the tl.int64
// strides stride_a_seqlen, stride_a_head, stride_b_seqlen, stride_b_head, stride_out_chunk,
// stride_out_head, stride_outm. Constexprs: chunk_size, K, ngroups, stride_ak, stride_bk,
// stride_outn, IS_CAUSAL, dot_dtype (dtype code, bf16 = 2), BLOCK_SIZE_M / N / K, NUM_WARPS,
// NUM_STAGES.
static_assert(stride_ak == 1 && stride_bk == 1 && stride_outn == 1,
              "inner dimensions must be contiguous");
static_assert(dot_dtype == CS_BF16, "bf16 operands only");
// 16-byte staging when the compile key says a / b rows are 16-byte aligned (mamba_ssd_common.cuh).
#if defined(CS_SPEC_a_ptr) && CS_SPEC_a_ptr == 16 && defined(CS_SPEC_stride_a_seqlen) && \
    CS_SPEC_stride_a_seqlen == 16 && defined(CS_SPEC_stride_a_head) && CS_SPEC_stride_a_head == 16
constexpr bool kVecA = true;
#else
constexpr bool kVecA = false;
#endif
#if defined(CS_SPEC_b_ptr) && CS_SPEC_b_ptr == 16 && defined(CS_SPEC_stride_b_seqlen) && \
    CS_SPEC_stride_b_seqlen == 16 && defined(CS_SPEC_stride_b_head) && CS_SPEC_stride_b_head == 16
constexpr bool kVecB = true;
#else
constexpr bool kVecB = false;
#endif
constexpr int kBM = BLOCK_SIZE_M < chunk_size ? BLOCK_SIZE_M : chunk_size;
constexpr int kBN = BLOCK_SIZE_N < chunk_size ? BLOCK_SIZE_N : chunk_size;
constexpr int kBK = BLOCK_SIZE_K < K ? BLOCK_SIZE_K : K;
constexpr int kLd = kBK + 8;
typedef MsWarpGrid<kBM, kBN> Grid;

extern "C" __global__ void __launch_bounds__(kMsThreads)
    mamba_ssd_bmm(const cs_u16* __restrict__ a, const cs_u16* __restrict__ b,
                  float* __restrict__ out, const int* __restrict__ cu_chunk_seqlens,
                  cs_i64 stride_a_seqlen, cs_i64 stride_a_head, cs_i64 stride_b_seqlen,
                  cs_i64 stride_b_head, cs_i64 stride_out_chunk, cs_i64 stride_out_head,
                  cs_i64 stride_outm) {
  extern __shared__ __align__(16) unsigned char ms_smem[];
  cs_u16* sA = reinterpret_cast<cs_u16*>(ms_smem);  // [kBM][kBK]
  cs_u16* sB = sA + kBM * kLd;                      // [kBN][kBK]

  constexpr int kNumPidN = (chunk_size + BLOCK_SIZE_N - 1) / BLOCK_SIZE_N;
  const int pid_m = blockIdx.x / kNumPidN, pid_n = blockIdx.x % kNumPidN;
  const cs_i64 pid_ch = blockIdx.y;
  const cs_i64 c = pid_ch / ngroups;
  const int g = static_cast<int>(pid_ch - c * ngroups);
  if (IS_CAUSAL && pid_n * BLOCK_SIZE_N >= (pid_m + 1) * BLOCK_SIZE_M) return;
  const int m0 = pid_m * kBM, n0 = pid_n * kBN;
  const int start = cu_chunk_seqlens[c];
  const int len = cu_chunk_seqlens[c + 1] - start;
  const cs_u16* ac = a + start * stride_a_seqlen + g * stride_a_head;
  const cs_u16* bc = b + start * stride_b_seqlen + g * stride_b_head;
  const int warp = threadIdx.x >> 5;

  float acc[Grid::kMt][Grid::kNt][4];
  ms_zero<Grid::kMt, Grid::kNt>(acc);
  for (int k0 = 0; k0 < K; k0 += kBK) {
    ms_stage_bf16_rows<kVecA>(sA, kLd, ac + m0 * stride_a_seqlen + k0, stride_a_seqlen, kBM, kBK,
                              len - m0);
    ms_stage_bf16_rows<kVecB>(sB, kLd, bc + n0 * stride_b_seqlen + k0, stride_b_seqlen, kBN, kBK,
                              len - n0);
    __syncthreads();
    if (warp < Grid::kActive) {
      ms_warp_mma<Grid::kMt, Grid::kNt, false, false>(acc, sA, kLd, sB, kLd, Grid::row0(warp),
                                                      Grid::col0(warp), kBK);
    }
    __syncthreads();
  }
  if (warp >= Grid::kActive) return;
  float* o = out + c * stride_out_chunk + g * stride_out_head;
#pragma unroll
  for (int i = 0; i < Grid::kMt; ++i)
#pragma unroll
    for (int j = 0; j < Grid::kNt; ++j)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const int r = m0 + Grid::row0(warp) + 16 * i + cs_mma_acc_row(e);
        const int col = n0 + Grid::col0(warp) + 8 * j + cs_mma_acc_col(e);
        *reinterpret_cast<float2*>(o + r * stride_outm + col) =
            make_float2(acc[i][j][e], acc[i][j][e + 1]);
      }
}
