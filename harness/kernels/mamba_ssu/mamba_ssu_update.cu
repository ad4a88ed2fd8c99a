// mamba_ssu_update: one decode step of the Mamba2 selective state update, the CUDA replay of
// vLLM's Triton _selective_scan_update_kernel (vllm/model_executor/layers/mamba/ops/mamba_ssm.py;
// see mamba_ssu_kernels.h for the version and the facts mirrored). Same grid
// (cdiv(dim, BLOCK_SIZE_M), N, nheads), the same 32 * NUM_WARPS threads per program, the same
// constexprs, argument list and order of operations.
//
// Program (pid_m, pid_b, pid_h): rows m in [pid_m * BLOCK_SIZE_M, +BLOCK_SIZE_M) of head pid_h
// (head dim = "dim", P), all dstate columns (padded to BLOCK_SIZE_DSTATE), for batch row pid_b:
//   src = state_batch_indices[pid_b], dst = dst_state_batch_indices[pid_b] (HAS_STATE_BATCH_INDICES;
//   else both pid_b). src == null_block_id: the state is read as zeros and not stored (the output
//   row is still computed and written, as in vLLM).
//   dt   = softplus(dt + dt_bias)                       (DT_SOFTPLUS, HAS_DT_BIAS)
//   dA   = exp2(log2(e) * A * dt)                       (fast_exp)
//   s    = s * dA + (B * dt) * x                        (B, C of group pid_h / nheads_ngroups_ratio)
//   out  = sum_n s * C (+ x * D)                        (HAS_D), stored in out's dtype
//   s is stored to slot dst in the state's dtype (round to nearest even).
// TIE_HDIM (A, dt, dt_bias stride-0 along the head dim and A along dstate, as MambaMixer2's
// expanded views are): dt, dt_bias and A are read once per head and dA is a scalar.
//
// Constexprs (vLLM's order): DT_SOFTPLUS, TIE_HDIM, BLOCK_SIZE_M, HAS_DT_BIAS, HAS_D, HAS_Z,
// HAS_STATE_BATCH_INDICES, IS_SPEC_DECODING, IS_VARLEN, BLOCK_SIZE_DSTATE, USE_RS_ROUNDING,
// PHILOX_ROUNDS; then NUM_WARPS (Triton compiles num_warps into the binary) and the element-type
// codes of the tensors (Triton's pointer signature): STATE_DTYPE, X_DTYPE, DT_DTYPE,
// DT_BIAS_DTYPE, A_DTYPE, B_DTYPE, C_DTYPE, D_DTYPE, OUT_DTYPE.
// The harness replays MambaMixer2's decode call: no z, no speculative decoding (num_accepted_tokens
// and cu_seqlens None), no stochastic rounding; those combinations are refused below.
//
// Work split: the tile [BLOCK_SIZE_M, BLOCK_SIZE_DSTATE] is covered by groups of kLanesN lanes
// along dstate (kVec consecutive columns per lane and chunk, chunks kLanesN * kVec apart, so a
// group's accesses are coalesced) and kRowsPerPass rows per pass. Row sums are xor-shuffle
// reductions inside a lane group. When the compile key promises it (state pointer 16-byte
// aligned, state strides divisible by 16 elements, stride_state_dstate == 1, dstate divisible by
// 16: Triton's specialization, CS_SPEC_*), a lane moves its 4 state elements as one vector.
//
// Arguments, in vLLM's order (pointers to the element types above; strides in elements):
//   state_ptr, rand_seed_ptr (None), x_ptr, dt_ptr, dt_bias_ptr, A_ptr, B_ptr, C_ptr, D_ptr,
//   z_ptr (None), out_ptr, state_batch_indices_ptr, dst_state_batch_indices_ptr (int32),
//   null_block_id, num_accepted_tokens_ptr (None), cu_seqlens_ptr (None), N (do_not_specialize),
//   nheads, dim, dstate, nheads_ngroups_ratio, then the strides of state (4), x (3), dt (3),
//   dt_bias (2), A (3), B (3), C (3), D (2), z (3), out (3), state_batch_indices (2) and
//   dst_state_batch_indices (2).

#if IS_SPEC_DECODING || IS_VARLEN
#error "mamba_ssu_update replays plain decode: num_accepted_tokens and cu_seqlens must be None"
#endif
#if HAS_Z
#error "mamba_ssu_update replays MambaMixer2's call: z must be None"
#endif
#if USE_RS_ROUNDING || PHILOX_ROUNDS != 0
#error "mamba_ssu_update: stochastic rounding (USE_RS_ROUNDING) is not replayed"
#endif
#if (BLOCK_SIZE_M & (BLOCK_SIZE_M - 1)) != 0 || BLOCK_SIZE_M < 1
#error "BLOCK_SIZE_M must be a power of two (tl.arange)"
#endif
#if (BLOCK_SIZE_DSTATE & (BLOCK_SIZE_DSTATE - 1)) != 0 || BLOCK_SIZE_DSTATE < 1
#error "BLOCK_SIZE_DSTATE must be a power of two (next_power_of_2(dstate))"
#endif
#if NUM_WARPS < 1 || NUM_WARPS > 32 || (NUM_WARPS & (NUM_WARPS - 1)) != 0
#error "NUM_WARPS must be a power of two in 1..32"
#endif

constexpr int kThreads = 32 * NUM_WARPS;
constexpr int kVec = BLOCK_SIZE_DSTATE < 4 ? BLOCK_SIZE_DSTATE : 4;
constexpr int kLanesN = BLOCK_SIZE_DSTATE / kVec < 32 ? BLOCK_SIZE_DSTATE / kVec : 32;
constexpr int kChunks = BLOCK_SIZE_DSTATE / (kVec * kLanesN);
constexpr int kNPer = kChunks * kVec;  // state columns per lane
constexpr int kRowsPerPass = kThreads / kLanesN;
constexpr int kPasses = (BLOCK_SIZE_M + kRowsPerPass - 1) / kRowsPerPass;

#if defined(CS_SPEC_state_ptr) && CS_SPEC_state_ptr == 16 &&                         \
    defined(CS_SPEC_stride_state_batch) && CS_SPEC_stride_state_batch == 16 &&       \
    defined(CS_SPEC_stride_state_head) && CS_SPEC_stride_state_head == 16 &&         \
    defined(CS_SPEC_stride_state_dim) && CS_SPEC_stride_state_dim == 16 &&           \
    defined(CS_SPEC_stride_state_dstate) && CS_SPEC_stride_state_dstate == 1 &&      \
    defined(CS_SPEC_dstate) && CS_SPEC_dstate == 16 && BLOCK_SIZE_DSTATE >= 4
#define SSU_VEC_STATE 1
#else
#define SSU_VEC_STATE 0
#endif

typedef SsuElem<STATE_DTYPE>::T ssu_state_t;
typedef SsuElem<X_DTYPE>::T ssu_x_t;
typedef SsuElem<DT_DTYPE>::T ssu_dt_t;
typedef SsuElem<DT_BIAS_DTYPE>::T ssu_dt_bias_t;
typedef SsuElem<A_DTYPE>::T ssu_a_t;
typedef SsuElem<B_DTYPE>::T ssu_b_t;
typedef SsuElem<C_DTYPE>::T ssu_c_t;
typedef SsuElem<D_DTYPE>::T ssu_d_t;
typedef SsuElem<OUT_DTYPE>::T ssu_out_t;

// Column of element v of chunk j for lane group position `lane_n`.
__device__ __forceinline__ int ssu_col(int j, int v, int lane_n) {
  return (j * kLanesN + lane_n) * kVec + v;
}

extern "C" __global__ void __launch_bounds__(kThreads)
mamba_ssu_update(ssu_state_t* state_ptr, const cs_i64* rand_seed_ptr, const ssu_x_t* x_ptr,
                 const ssu_dt_t* dt_ptr, const ssu_dt_bias_t* dt_bias_ptr, const ssu_a_t* A_ptr,
                 const ssu_b_t* B_ptr, const ssu_c_t* C_ptr, const ssu_d_t* D_ptr,
                 const float* z_ptr, ssu_out_t* out_ptr, const int* state_batch_indices_ptr,
                 const int* dst_state_batch_indices_ptr, cs_i64 null_block_id,
                 const int* num_accepted_tokens_ptr, const int* cu_seqlens_ptr, cs_i64 N,
                 cs_i64 nheads, cs_i64 dim, cs_i64 dstate, cs_i64 nheads_ngroups_ratio,
                 cs_i64 stride_state_batch, cs_i64 stride_state_head, cs_i64 stride_state_dim,
                 cs_i64 stride_state_dstate, cs_i64 stride_x_batch, cs_i64 stride_x_head,
                 cs_i64 stride_x_dim, cs_i64 stride_dt_batch, cs_i64 stride_dt_head,
                 cs_i64 stride_dt_dim, cs_i64 stride_dt_bias_head, cs_i64 stride_dt_bias_dim,
                 cs_i64 stride_A_head, cs_i64 stride_A_dim, cs_i64 stride_A_dstate,
                 cs_i64 stride_B_batch, cs_i64 stride_B_group, cs_i64 stride_B_dstate,
                 cs_i64 stride_C_batch, cs_i64 stride_C_group, cs_i64 stride_C_dstate,
                 cs_i64 stride_D_head, cs_i64 stride_D_dim, cs_i64 stride_z_batch,
                 cs_i64 stride_z_head, cs_i64 stride_z_dim, cs_i64 stride_out_batch,
                 cs_i64 stride_out_head, cs_i64 stride_out_dim,
                 cs_i64 stride_state_indices_batch, cs_i64 stride_state_indices_T,
                 cs_i64 stride_dst_state_indices_batch, cs_i64 stride_dst_state_indices_T) {
  // Arguments of the paths this replay refuses (vLLM passes them all).
  (void)rand_seed_ptr;
  (void)z_ptr;
  (void)num_accepted_tokens_ptr;
  (void)cu_seqlens_ptr;
  (void)N;
  (void)nheads;
  (void)stride_z_batch;
  (void)stride_z_head;
  (void)stride_z_dim;
  (void)stride_state_indices_T;  // init_token_idx is 0 outside spec decode
  (void)stride_dst_state_indices_T;
  (void)state_batch_indices_ptr;
  (void)dst_state_batch_indices_ptr;
  (void)null_block_id;
  (void)stride_state_indices_batch;
  (void)stride_dst_state_indices_batch;

  const int pid_m = blockIdx.x;
  const cs_i64 pid_b = blockIdx.y;
  const cs_i64 pid_h = blockIdx.z;
  const int lane_n = threadIdx.x % kLanesN;
  const int row_t = threadIdx.x / kLanesN;

  cs_i64 src = pid_b;
  cs_i64 dst = pid_b;
  bool live = true;
#if HAS_STATE_BATCH_INDICES
  src = state_batch_indices_ptr[pid_b * stride_state_indices_batch];
  dst = dst_state_batch_indices_ptr[pid_b * stride_dst_state_indices_batch];
  live = src != null_block_id;
#endif
  const ssu_state_t* s_src = state_ptr + src * stride_state_batch + pid_h * stride_state_head;
  ssu_state_t* s_dst = state_ptr + dst * stride_state_batch + pid_h * stride_state_head;

  x_ptr += pid_b * stride_x_batch + pid_h * stride_x_head;
  dt_ptr += pid_b * stride_dt_batch + pid_h * stride_dt_head;
  const cs_i64 group = pid_h / nheads_ngroups_ratio;
  B_ptr += pid_b * stride_B_batch + group * stride_B_group;
  C_ptr += pid_b * stride_C_batch + group * stride_C_group;
  out_ptr += pid_b * stride_out_batch + pid_h * stride_out_head;

  float bv[kNPer], cv[kNPer];
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      const int n = ssu_col(j, v, lane_n);
      const bool ok = n < dstate;
      bv[j * kVec + v] = ok ? ssu_load<B_DTYPE>(B_ptr + n * stride_B_dstate) : 0.0f;
      cv[j * kVec + v] = ok ? ssu_load<C_DTYPE>(C_ptr + n * stride_C_dstate) : 0.0f;
    }
  }

  // The state tile, every pass's rows loaded before any arithmetic (memory-level parallelism).
  float s[kPasses][kNPer];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int r = row_t + p * kRowsPerPass;
    const cs_i64 m = static_cast<cs_i64>(pid_m) * BLOCK_SIZE_M + r;
    const bool ok = r < BLOCK_SIZE_M && m < dim && live;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int n0 = ssu_col(j, 0, lane_n);
#if SSU_VEC_STATE
      float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (ok && n0 < dstate) ssu_load4<STATE_DTYPE>(s_src + m * stride_state_dim + n0, q);
#pragma unroll
      for (int v = 0; v < 4; ++v) s[p][j * kVec + v] = q[v];
#else
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        const int n = n0 + v;
        s[p][j * kVec + v] =
            ok && n < dstate
                ? ssu_load<STATE_DTYPE>(s_src + m * stride_state_dim + n * stride_state_dstate)
                : 0.0f;
      }
#endif
    }
  }

#if TIE_HDIM
  // One dt, dt_bias and A per head; dA is a scalar.
  float dt_h = ssu_load<DT_DTYPE>(dt_ptr);
#if HAS_DT_BIAS
  dt_h += ssu_load<DT_BIAS_DTYPE>(dt_bias_ptr + pid_h * stride_dt_bias_head);
#endif
#if DT_SOFTPLUS
  dt_h = ssu_softplus(dt_h);
#endif
  const float dA_h = ssu_fast_exp(ssu_load<A_DTYPE>(A_ptr + pid_h * stride_A_head) * dt_h);
  float db[kNPer];
#pragma unroll
  for (int k = 0; k < kNPer; ++k) db[k] = bv[k] * dt_h;
#endif

#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int r = row_t + p * kRowsPerPass;
    const cs_i64 m = static_cast<cs_i64>(pid_m) * BLOCK_SIZE_M + r;
    const bool row_ok = r < BLOCK_SIZE_M && m < dim;
    const float xv = row_ok ? ssu_load<X_DTYPE>(x_ptr + m * stride_x_dim) : 0.0f;
#if !TIE_HDIM
    float dt_m = row_ok ? ssu_load<DT_DTYPE>(dt_ptr + m * stride_dt_dim) : 0.0f;
#if HAS_DT_BIAS
    if (row_ok) {
      dt_m += ssu_load<DT_BIAS_DTYPE>(dt_bias_ptr + pid_h * stride_dt_bias_head +
                                      m * stride_dt_bias_dim);
    }
#endif
#if DT_SOFTPLUS
    dt_m = ssu_softplus(dt_m);
#endif
    const ssu_a_t* a_row = A_ptr + pid_h * stride_A_head + m * stride_A_dim;
#endif
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kNPer; ++k) {
#if TIE_HDIM
      s[p][k] = s[p][k] * dA_h + db[k] * xv;
#else
      const int n = ssu_col(k / kVec, k % kVec, lane_n);
      const float a = row_ok && n < dstate ? ssu_load<A_DTYPE>(a_row + n * stride_A_dstate) : 0.0f;
      s[p][k] = s[p][k] * ssu_fast_exp(a * dt_m) + (bv[k] * dt_m) * xv;
#endif
      acc += s[p][k] * cv[k];
    }
#pragma unroll
    for (int o = kLanesN / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(cs_full_mask, acc, o);
    if (row_ok && lane_n == 0) {
      float y = acc;
#if HAS_D
      y += xv * ssu_load<D_DTYPE>(D_ptr + pid_h * stride_D_head + m * stride_D_dim);
#endif
      ssu_store<OUT_DTYPE>(out_ptr + m * stride_out_dim, y);
    }
    if (row_ok && live) {
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        const int n0 = ssu_col(j, 0, lane_n);
#if SSU_VEC_STATE
        if (n0 < dstate) {
          const float q[4] = {s[p][j * kVec], s[p][j * kVec + 1], s[p][j * kVec + 2],
                              s[p][j * kVec + 3]};
          ssu_store4<STATE_DTYPE>(s_dst + m * stride_state_dim + n0, q);
        }
#else
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          const int n = n0 + v;
          if (n < dstate) {
            ssu_store<STATE_DTYPE>(s_dst + m * stride_state_dim + n * stride_state_dstate,
                                   s[p][j * kVec + v]);
          }
        }
#endif
      }
    }
  }
}
