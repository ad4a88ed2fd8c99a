// fused_moe_gemm: the grouped expert GEMM of vLLM's Triton fused_moe_kernel
// (vllm/model_executor/layers/fused_moe/fused_moe.py, vllm-project/vllm 13cb3e44373b; the
// naive_block_assignment branch of later vLLM, see fused_moe_kernels.h):
//   C[offs_token, n] = sum_k A[offs_token / TOP_K, k] * B[expert, n, k]  (* topk_weights[offs_token])
// for the BLOCK_SIZE_M rows offs_token of one block of sorted_token_ids, all of one expert.
//
// Constexprs (the compile key, in this order): BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K,
// GROUP_SIZE_M (from the config), MUL_ROUTED_WEIGHT, TOP_K, COMPUTE_TYPE (1 = bf16, the only one),
// NAIVE_BLOCK_ASSIGNMENT, NUM_WARPS, NUM_STAGES.
// Integer and pointer arguments are specialized Triton-style (vLLM's kernel has no
// do_not_specialize); the kernel reads CS_SPEC_* to pick 16-byte async copies when the compile
// key promises unit K strides and 16-element alignment, and plain loads otherwise.
//
// Program mapping as vLLM's: pid -> (pid_m, pid_n) in groups of GROUP_SIZE_M rows of blocks;
// blocks with pid_m * BLOCK_SIZE_M >= num_tokens_post_padded exit; a block whose expert id is -1
// (expert parallelism) writes zeros. Aligned mode: offs_token = sorted_token_ids[pid_m * BM + i];
// naive mode (NAIVE_BLOCK_ASSIGNMENT, sorted_token_ids unused): offs_token = pid_m for row 0 and
// num_valid_tokens (masked) for the other rows, expert = expert_ids[pid_m] = topk_ids.flat[pid_m].
// Rows with offs_token >= num_valid_tokens are neither read nor written. Columns n >= N read row
// n % N of B (vLLM's offs_bn % N) and are not written.
//
// Tensor cores: mma.sync m16n8k16 bf16 -> fp32. Warps tile the BM x BN block (see kWm / kWn);
// A and B stage through shared memory in a cp.async ring of kStages buffers. kStages is
// NUM_STAGES, clamped so that the ring fits the arch's shared memory per block (the compile key
// keeps NUM_STAGES as the config says; fused_moe_kernels.h, gemm_pipeline_stages, is the host
// copy of this rule).
// Grid x = cdiv(EM, BM) * cdiv(N, BN); NUM_WARPS * 32 threads; dynamic shared memory
// gemm_smem_bytes(...).
// Arguments, in order:
//   a                 bf16 [rows, K], row r at a + r * stride_am (k at stride_ak)
//   b                 bf16 [E, N, K], (e, n, k) at b + e * stride_be + n * stride_bn + k * stride_bk
//   c                 bf16, row t (a (token, k) pair) at c + t * stride_cm, column n at stride_cn
//   topk_weights      float32 [num_valid_tokens] (flat), read when MUL_ROUTED_WEIGHT
//   sorted_token_ids  int32 [EM] (aligned mode; may be null in naive mode)
//   expert_ids        int32 [cdiv(EM, BM)]
//   num_tokens_post_padded  int32 [1]
//   N, K, EM, num_valid_tokens   int32
//   stride_am, stride_ak, stride_be, stride_bk, stride_bn, stride_cm, stride_cn   int32, elements

#if !defined(BLOCK_SIZE_M) || !defined(BLOCK_SIZE_N) || !defined(BLOCK_SIZE_K) || \
    !defined(GROUP_SIZE_M) || !defined(MUL_ROUTED_WEIGHT) || !defined(TOP_K) ||     \
    !defined(COMPUTE_TYPE) || !defined(NAIVE_BLOCK_ASSIGNMENT) || !defined(NUM_WARPS) || \
    !defined(NUM_STAGES)
#error "fused_moe_gemm: a constexpr is missing"
#endif
#if COMPUTE_TYPE != 1
#error "fused_moe_gemm: only COMPUTE_TYPE 1 (bf16) is implemented"
#endif

constexpr int kBM = BLOCK_SIZE_M;
constexpr int kBN = BLOCK_SIZE_N;
constexpr int kBK = BLOCK_SIZE_K;
constexpr int kThreads = NUM_WARPS * 32;
static_assert(kBM % 16 == 0 && kBN % 8 == 0 && kBK % 16 == 0, "block sizes: M%16, N%8, K%16");
static_assert(NUM_WARPS >= 1 && (NUM_WARPS & (NUM_WARPS - 1)) == 0, "num_warps: a power of 2");
static_assert(GROUP_SIZE_M >= 1, "GROUP_SIZE_M >= 1");

// ---- warp tiling: kWm x kWn warps compute; per warp a (kBM/kWm) x (kBN/kWn) tile ------------
struct FmLayout {
  int wm;
  int wn;
};
constexpr FmLayout fm_pick_layout() {
  FmLayout best{0, 0};
  int best_cost = 1 << 30;
  for (int wm = 1; wm <= NUM_WARPS; wm *= 2) {
    const int wn = NUM_WARPS / wm;
    if (kBM % (16 * wm) != 0 || kBN % (8 * wn) != 0) continue;
    const int cost = kBM / wm + kBN / wn;  // fragment loads per k step and warp
    if (cost < best_cost) {
      best_cost = cost;
      best = FmLayout{wm, wn};
    }
  }
  // Too many warps for the tile: fewer warps compute, all of them load.
  for (int w = NUM_WARPS / 2; w >= 1 && best.wm == 0; w /= 2) {
    for (int wm = 1; wm <= w; wm *= 2) {
      if (kBM % (16 * wm) == 0 && kBN % (8 * (w / wm)) == 0) {
        best = FmLayout{wm, w / wm};
        break;
      }
    }
  }
  return best;
}
constexpr FmLayout kLayout = fm_pick_layout();
constexpr int kWm = kLayout.wm;
constexpr int kWn = kLayout.wn;
static_assert(kWm >= 1 && kWn >= 1, "no warp layout for this block");
constexpr int kTm = kBM / kWm;  // rows per warp
constexpr int kTn = kBN / kWn;  // columns per warp
constexpr int kMt = kTm / 16;   // m16 tiles per warp
constexpr int kNt = kTn / 8;    // n8 tiles per warp

// ---- shared memory: the ring, then the rows' token ids and A offsets -------------------------
constexpr int kPitch = kBK + 8;  // elements; +16 bytes keeps ldmatrix rows on distinct banks
constexpr int kStageElems = (kBM + kBN) * kPitch;
constexpr int kStageBytes = kStageElems * 2;
constexpr int kRowBytes = kBM * 16;  // cs_i64 s_tok[kBM], cs_i64 s_arow[kBM]
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 870)
constexpr int kSmemLimit = 166912;
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1000 || __CUDA_ARCH__ == 1030)
constexpr int kSmemLimit = 232448;
#else
constexpr int kSmemLimit = 101376;  // sm_86, sm_89, sm_120 and anything unknown
#endif
constexpr int kStagesFit = (kSmemLimit - kRowBytes) / kStageBytes;
constexpr int kStages = NUM_STAGES < kStagesFit ? (NUM_STAGES < 1 ? 1 : NUM_STAGES) : kStagesFit;
static_assert(kStages >= 1, "one pipeline stage does not fit in shared memory");

// ---- what the specialization promises -------------------------------------------------------
#if defined(CS_SPEC_a) && CS_SPEC_a == 16 && defined(CS_SPEC_stride_am) && \
    CS_SPEC_stride_am == 16 && defined(CS_SPEC_stride_ak) && CS_SPEC_stride_ak == 1 && \
    defined(CS_SPEC_K) && CS_SPEC_K == 16
constexpr bool kVecA = true;
#else
constexpr bool kVecA = false;
#endif
#if defined(CS_SPEC_b) && CS_SPEC_b == 16 && defined(CS_SPEC_stride_be) && \
    CS_SPEC_stride_be == 16 && defined(CS_SPEC_stride_bn) && CS_SPEC_stride_bn == 16 && \
    defined(CS_SPEC_stride_bk) && CS_SPEC_stride_bk == 1 && defined(CS_SPEC_K) && CS_SPEC_K == 16
constexpr bool kVecB = true;
#else
constexpr bool kVecB = false;
#endif

extern "C" __global__ void __launch_bounds__(kThreads)
fused_moe_gemm(const cs_u16* __restrict__ a, const cs_u16* __restrict__ b, cs_u16* __restrict__ c,
               const float* __restrict__ topk_weights, const cs_i32* __restrict__ sorted_token_ids,
               const cs_i32* __restrict__ expert_ids,
               const cs_i32* __restrict__ num_tokens_post_padded, cs_i32 N, cs_i32 K, cs_i32 EM,
               cs_i32 num_valid_tokens, cs_i32 stride_am, cs_i32 stride_ak, cs_i32 stride_be,
               cs_i32 stride_bk, cs_i32 stride_bn, cs_i32 stride_cm, cs_i32 stride_cn) {
  extern __shared__ __align__(16) cs_u8 fm_smem[];
  cs_u16* s_ring = reinterpret_cast<cs_u16*>(fm_smem);
  cs_i64* s_tok = reinterpret_cast<cs_i64*>(fm_smem + kStages * kStageBytes);
  cs_i64* s_arow = s_tok + kBM;

  // -- program id -> (pid_m, pid_n), grouped as vLLM does
  const int pid = blockIdx.x;
  const int num_pid_m = (EM + kBM - 1) / kBM;
  const int num_pid_n = (N + kBN - 1) / kBN;
  const int num_pid_in_group = GROUP_SIZE_M * num_pid_n;
  const int group_id = pid / num_pid_in_group;
  const int first_pid_m = group_id * GROUP_SIZE_M;
  const int group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M);
  const int pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m);
  const int pid_n = (pid % num_pid_in_group) / group_size_m;

  if (static_cast<cs_i64>(pid_m) * kBM >= num_tokens_post_padded[0]) return;
  const int tid = threadIdx.x;

  for (int r = tid; r < kBM; r += kThreads) {
#if NAIVE_BLOCK_ASSIGNMENT
    const cs_i64 tok = r == 0 ? static_cast<cs_i64>(pid_m) : static_cast<cs_i64>(num_valid_tokens);
#else
    const cs_i64 tok = sorted_token_ids[static_cast<cs_i64>(pid_m) * kBM + r];
#endif
    s_tok[r] = tok;
    s_arow[r] = tok < num_valid_tokens ? (tok / TOP_K) * static_cast<cs_i64>(stride_am) : -1;
  }
  const cs_i64 expert = expert_ids[pid_m];
  __syncthreads();

  const int n0 = pid_n * kBN;
  if (expert == -1) {  // expert not on this rank: zeros for the valid rows
    for (int i = tid; i < kBM * kBN; i += kThreads) {
      const int r = i / kBN;
      const int n = n0 + i % kBN;
      if (s_tok[r] < num_valid_tokens && n < N) {
        c[s_tok[r] * stride_cm + static_cast<cs_i64>(n) * stride_cn] = 0;
      }
    }
    return;
  }
  const cs_u16* b_e = b + expert * static_cast<cs_i64>(stride_be);

  // -- one k tile (k0 .. k0 + kBK) of A and B into ring stage `st`
  auto load_tile = [&](int st, int kt) {
    cs_u16* sa = s_ring + st * kStageElems;
    cs_u16* sb = sa + kBM * kPitch;
    const int k0 = kt * kBK;
    constexpr int kChunks = kBK / 8;
    if constexpr (kVecA) {
      for (int i = tid; i < kBM * kChunks; i += kThreads) {
        const int r = i / kChunks;
        const int kc = (i % kChunks) * 8;
        const cs_i64 off = s_arow[r];
        const bool ok = off >= 0 && k0 + kc < K;
        fm_cp_async16(sa + r * kPitch + kc, ok ? a + off + k0 + kc : a, ok);
      }
    } else {
      for (int i = tid; i < kBM * kBK; i += kThreads) {
        const int r = i / kBK;
        const int kk = i % kBK;
        const cs_i64 off = s_arow[r];
        cs_u16 v = 0;
        if (off >= 0 && k0 + kk < K) v = a[off + static_cast<cs_i64>(k0 + kk) * stride_ak];
        sa[r * kPitch + kk] = v;
      }
    }
    if constexpr (kVecB) {
      for (int i = tid; i < kBN * kChunks; i += kThreads) {
        const int n = i / kChunks;
        const int kc = (i % kChunks) * 8;
        const int gn = n0 + n < N ? n0 + n : (n0 + n) % N;
        const bool ok = k0 + kc < K;
        const cs_u16* src = b_e + static_cast<cs_i64>(gn) * stride_bn + (ok ? k0 + kc : 0);
        fm_cp_async16(sb + n * kPitch + kc, src, ok);
      }
    } else {
      for (int i = tid; i < kBN * kBK; i += kThreads) {
        const int n = i / kBK;
        const int kk = i % kBK;
        const int gn = n0 + n < N ? n0 + n : (n0 + n) % N;
        cs_u16 v = 0;
        if (k0 + kk < K) {
          v = b_e[static_cast<cs_i64>(gn) * stride_bn + static_cast<cs_i64>(k0 + kk) * stride_bk];
        }
        sb[n * kPitch + kk] = v;
      }
    }
  };

  const int warp = tid >> 5;
  const int lane = tid & 31;
  const bool mma_warp = warp < kWm * kWn;
  const int wrow = (warp / kWn) * kTm;
  const int wcol = (warp % kWn) * kTn;
  float acc[kMt][kNt][4];
#pragma unroll
  for (int i = 0; i < kMt; ++i)
#pragma unroll
    for (int j = 0; j < kNt; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

  auto compute_tile = [&](int st) {
    if (!mma_warp) return;
    const cs_u16* sa = s_ring + st * kStageElems;
    const cs_u16* sb = sa + kBM * kPitch;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      cs_u32 af[kMt][4];
      cs_u32 bf[kNt][2];
#pragma unroll
      for (int i = 0; i < kMt; ++i) {
        const int row = wrow + i * 16 + (lane & 15);
        cs_ldmatrix_x4(af[i], cs_smem_addr(sa + row * kPitch + kk + (lane >> 4) * 8));
      }
#pragma unroll
      for (int j = 0; j < kNt; ++j) {
        const int n = wcol + j * 8 + (lane & 7);
        cs_ldmatrix_x2(bf[j], cs_smem_addr(sb + n * kPitch + kk + ((lane >> 3) & 1) * 8));
      }
#pragma unroll
      for (int i = 0; i < kMt; ++i)
#pragma unroll
        for (int j = 0; j < kNt; ++j) cs_mma_bf16_m16n8k16(acc[i][j], af[i], bf[j]);
    }
  };

  const int num_k_tiles = (K + kBK - 1) / kBK;
  if constexpr (kStages == 1) {
    for (int kt = 0; kt < num_k_tiles; ++kt) {
      load_tile(0, kt);
      fm_cp_async_commit();
      fm_cp_async_wait<0>();
      __syncthreads();
      compute_tile(0);
      __syncthreads();
    }
  } else {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < num_k_tiles) load_tile(s, s);
      fm_cp_async_commit();
    }
    for (int kt = 0; kt < num_k_tiles; ++kt) {
      fm_cp_async_wait<kStages - 2>();
      __syncthreads();
      const int nk = kt + kStages - 1;
      if (nk < num_k_tiles) load_tile(nk % kStages, nk);
      fm_cp_async_commit();
      compute_tile(kt % kStages);
    }
    fm_cp_async_wait<0>();
  }

  // -- epilogue: fp32 accumulator (* router weight) -> bf16, rows of valid tokens, columns < N
  if (!mma_warp) return;
#pragma unroll
  for (int i = 0; i < kMt; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wrow + i * 16 + (lane >> 2) + h * 8;
      const cs_i64 tok = s_tok[r];
      if (tok >= num_valid_tokens) continue;
      float w = 1.0f;
#if MUL_ROUTED_WEIGHT
      w = topk_weights[tok];
#endif
      cs_u16* crow = c + tok * stride_cm;
#pragma unroll
      for (int j = 0; j < kNt; ++j) {
        const int n = n0 + wcol + j * 8 + (lane & 3) * 2;
        if (n < N) crow[static_cast<cs_i64>(n) * stride_cn] = cs_f32_to_bf16(acc[i][j][2 * h] * w);
        if (n + 1 < N) {
          crow[static_cast<cs_i64>(n + 1) * stride_cn] = cs_f32_to_bf16(acc[i][j][2 * h + 1] * w);
        }
      }
    }
  }
}
