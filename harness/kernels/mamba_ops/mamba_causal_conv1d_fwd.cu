// mamba_causal_conv1d_fwd: depthwise causal conv1d over a varlen batch of prefill sequences, with
// per-sequence conv state in a slot cache (vLLM's _causal_conv1d_fwd_kernel / causal_conv1d_fn,
// vllm/model_executor/layers/mamba/ops/causal_conv1d.py; see mamba_ops_kernels.h for the commit).
//
// Program structure as vLLM's: one CTA per (sequence, chunk of BLOCK_M tokens) x (BLOCK_N
// channels); thread t of the CTA owns channel blockIdx.y * BLOCK_N + t. The chunk-0 CTA of a
// sequence reads its initial state (has_initial_state) and writes the sequence's final conv state;
// later chunks read their history (the width - 1 tokens before the chunk) from x.
// vLLM maps programs to (sequence, chunk) through two host-built tables (batch_ptr,
// token_chunk_offset_ptr); this kernel derives the same map on the device with a warp scan over
// query_start_loc (no host read of device data), so the grid is an upper bound and programs past
// the last chunk exit, like vLLM's padded programs (batch_ptr == pad_slot_id).
//
// Constexprs (vLLM's, same names upper-cased): DIM, NUM_CACHE_LINES, STRIDE_X_DIM, STRIDE_X_TOKEN,
// STRIDE_W_DIM, STRIDE_W_WIDTH, STRIDE_ISTATE_SEQ, STRIDE_ISTATE_DIM, STRIDE_ISTATE_TOKEN,
// STRIDE_CACHE_INDICES, STRIDE_O_DIM, STRIDE_O_TOKEN, PAD_SLOT_ID, HAS_BIAS, KERNEL_WIDTH (2..4),
// SILU_ACTIVATION, USE_PAD_SLOT, NP2_STATELEN, BLOCK_M, BLOCK_N (= threads per CTA). vLLM's
// prefix-caching constexprs (IS_APC_ENABLED, STRIDE_BLOCK_M) are constant (0) without prefix
// caching, which this kernel does not implement, and are left out.
// Arguments, in order:
//   x                  bf16, element (token t, channel c) at x[t*STRIDE_X_TOKEN + c*STRIDE_X_DIM]
//   weight             bf16, (c, j) at weight[c*STRIDE_W_DIM + j*STRIDE_W_WIDTH]
//   bias               bf16 [DIM] (not read unless HAS_BIAS)
//   conv_states        bf16, slot s, row r (0 = oldest), channel c at
//                      conv_states[s*STRIDE_ISTATE_SEQ + c*STRIDE_ISTATE_DIM + r*STRIDE_ISTATE_TOKEN]
//   cache_indices      int32, sequence b's slot at cache_indices[b*STRIDE_CACHE_INDICES];
//                      PAD_SLOT_ID = skip the sequence (nothing written)
//   has_initial_state  bool (one byte) [num_seqs], contiguous
//   query_start_loc    int32 [num_seqs + 1], contiguous
//   out                bf16, (t, c) at out[t*STRIDE_O_TOKEN + c*STRIDE_O_DIM]; must not overlap x
//   seqlen             int32 total tokens (vLLM's cu_seqlen: specialized, otherwise unused)
//   num_seqs           int32 (this kernel's own argument, left out of specialization)

#if !defined(KERNEL_WIDTH) || KERNEL_WIDTH < 2 || KERNEL_WIDTH > 4
#error "KERNEL_WIDTH must be 2, 3 or 4"
#endif
#if BLOCK_N > 1024 || BLOCK_N % 32 != 0
#error "BLOCK_N must be a multiple of 32 up to 1024"
#endif

constexpr int kStateLen = KERNEL_WIDTH - 1;

extern "C" __global__ void __launch_bounds__(BLOCK_N)
mamba_causal_conv1d_fwd(const cs_u16* __restrict__ x, const cs_u16* __restrict__ weight,
                        const cs_u16* __restrict__ bias, cs_u16* __restrict__ conv_states,
                        const int* __restrict__ cache_indices,
                        const unsigned char* __restrict__ has_initial_state,
                        const int* __restrict__ query_start_loc, cs_u16* __restrict__ out,
                        int seqlen, int num_seqs) {
  (void)seqlen;
  __shared__ int s_seq;
  __shared__ int s_chunk;
  // Program -> (sequence, chunk): the p-th chunk in sequence order, chunks = cdiv(len, BLOCK_M).
  if (threadIdx.x < 32) {
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x;
    const int p = blockIdx.x;
    int seq = -1, chunk = 0, base = 0;
    for (int s0 = 0; s0 < num_seqs; s0 += 32) {
      const int s = s0 + lane;
      int n = 0;
      if (s < num_seqs) n = (query_start_loc[s + 1] - query_start_loc[s] + BLOCK_M - 1) / BLOCK_M;
      int inc = n;
      for (int off = 1; off < 32; off <<= 1) {
        const int t = __shfl_up_sync(full, inc, off);
        if (lane >= off) inc += t;
      }
      const unsigned hit = __ballot_sync(full, base + inc > p);
      if (hit != 0u) {
        const int l = __ffs(hit) - 1;
        const int inc_l = __shfl_sync(full, inc, l);
        const int n_l = __shfl_sync(full, n, l);
        seq = s0 + l;
        chunk = p - (base + inc_l - n_l);
        break;
      }
      base += __shfl_sync(full, inc, 31);
    }
    if (lane == 0) {
      s_seq = seq;
      s_chunk = chunk;
    }
  }
  __syncthreads();
  const int seq = s_seq;
  const int chunk = s_chunk;
  if (seq < 0) return;  // past the last chunk
  const int feat = blockIdx.y * BLOCK_N + threadIdx.x;
  if (feat >= DIM) return;  // Triton's channel mask

  const int start = query_start_loc[seq];
  const int len = query_start_loc[seq + 1] - start;
  const int token_offset = BLOCK_M * chunk;
  const int segment_len = min(BLOCK_M, len - token_offset);

  const cs_i64 slot = static_cast<cs_i64>(cache_indices[static_cast<cs_i64>(seq) * STRIDE_CACHE_INDICES]);
#if USE_PAD_SLOT
  if (slot == PAD_SLOT_ID) return;
#endif
  const cs_u16* xs = x + static_cast<cs_i64>(start) * STRIDE_X_TOKEN +
                     static_cast<cs_i64>(feat) * STRIDE_X_DIM;
  cs_u16* st = conv_states + slot * STRIDE_ISTATE_SEQ + static_cast<cs_i64>(feat) * STRIDE_ISTATE_DIM;

  // History of the chunk: col[j] is token (chunk start - kStateLen + j); bf16 values held in float.
  float col[kStateLen];
  if (chunk == 0) {
    const bool load_init = has_initial_state[seq] != 0;
    for (int j = 0; j < kStateLen; ++j) {
      col[j] = load_init ? cs_bf16_to_f32(st[static_cast<cs_i64>(j) * STRIDE_ISTATE_TOKEN]) : 0.f;
    }
    // The sequence's final conv state: the last kStateLen tokens of (history ++ x).
    cs_u16 next[kStateLen];
    if (kStateLen <= len) {
      for (int i = 0; i < kStateLen; ++i) {
        next[i] = xs[static_cast<cs_i64>(len - kStateLen + i) * STRIDE_X_TOKEN];
      }
    } else {
      const int shift = kStateLen - len;  // rows kept from the old state (vLLM's VAL)
      for (int i = 0; i < kStateLen; ++i) {
        if (i < shift) {
          next[i] = (load_init && slot < NUM_CACHE_LINES)
                        ? st[static_cast<cs_i64>(i + len) * STRIDE_ISTATE_TOKEN]
                        : static_cast<cs_u16>(0);
        } else {
          next[i] = xs[static_cast<cs_i64>(i - shift) * STRIDE_X_TOKEN];
        }
      }
    }
    for (int i = 0; i < kStateLen; ++i) st[static_cast<cs_i64>(i) * STRIDE_ISTATE_TOKEN] = next[i];
  } else {
    for (int j = 0; j < kStateLen; ++j) {
      col[j] = cs_bf16_to_f32(xs[static_cast<cs_i64>(token_offset - kStateLen + j) * STRIDE_X_TOKEN]);
    }
  }

  float w[KERNEL_WIDTH];
  for (int j = 0; j < KERNEL_WIDTH; ++j) {
    w[j] = cs_bf16_to_f32(weight[static_cast<cs_i64>(feat) * STRIDE_W_DIM + j * STRIDE_W_WIDTH]);
  }
  const float acc0 = HAS_BIAS ? cs_bf16_to_f32(bias[feat]) : 0.f;
  cs_u16* os = out + static_cast<cs_i64>(start + token_offset) * STRIDE_O_TOKEN +
               static_cast<cs_i64>(feat) * STRIDE_O_DIM;
  for (int t = 0; t < segment_len; ++t) {
    const float xv = cs_bf16_to_f32(xs[static_cast<cs_i64>(token_offset + t) * STRIDE_X_TOKEN]);
    float acc = acc0;
    for (int j = 0; j < kStateLen; ++j) acc += mo_bf16_mul(col[j], w[j]);
    acc += mo_bf16_mul(xv, w[KERNEL_WIDTH - 1]);
    for (int j = 0; j + 1 < kStateLen; ++j) col[j] = col[j + 1];
    col[kStateLen - 1] = xv;
    if (SILU_ACTIVATION) acc = mo_silu(acc);
    os[static_cast<cs_i64>(t) * STRIDE_O_TOKEN] = cs_f32_to_bf16(acc);
  }
}
