// mamba_causal_conv1d_update: one decode step of the depthwise causal conv1d: SEQLEN new tokens
// per request (1 outside speculative decoding) against the request's conv state, which is
// shifted left and appended in place (vLLM's _causal_conv1d_update_kernel /
// causal_conv1d_update, vllm/model_executor/layers/mamba/ops/causal_conv1d.py; commit in
// mamba_ops_kernels.h). Not varlen, no prefix caching, no spec-decode acceptance, no EAGLE tree
// (vLLM's IS_VARLEN / IS_APC_ENABLED / IS_SPEC_DECODING / IS_EAGLE_TREE = 0).
//
// One CTA per (request, BLOCK_N channels); thread t owns channel blockIdx.y * BLOCK_N + t.
// Constexprs (vLLM's): DIM, SEQLEN, STATE_LEN (width - 1), NUM_CACHE_LINES, STRIDE_X_SEQ,
// STRIDE_X_DIM, STRIDE_X_TOKEN, STRIDE_W_DIM, STRIDE_W_WIDTH, STRIDE_CONV_STATE_SEQ,
// STRIDE_CONV_STATE_DIM, STRIDE_CONV_STATE_TOK, STRIDE_STATE_INDICES, STRIDE_O_SEQ, STRIDE_O_DIM,
// STRIDE_O_TOKEN, PAD_SLOT_ID, HAS_BIAS, KERNEL_WIDTH (2..4), SILU_ACTIVATION, USE_PAD_SLOT,
// NP2_STATELEN, NP2_SEQLEN, BLOCK_N (= threads per CTA).
// Arguments, in order:
//   x                   bf16, (request b, token t, channel c) at
//                       x[b*STRIDE_X_SEQ + t*STRIDE_X_TOKEN + c*STRIDE_X_DIM]
//   weight, bias        as mamba_causal_conv1d_fwd
//   conv_state          bf16, slot s, row r, channel c at
//                       [s*STRIDE_CONV_STATE_SEQ + c*STRIDE_CONV_STATE_DIM + r*STRIDE_CONV_STATE_TOK]
//   conv_state_indices  int32, request b's slot at [b*STRIDE_STATE_INDICES]; PAD_SLOT_ID = skip
//   out                 bf16, like x with STRIDE_O_*; may be x itself (each thread reads its
//                       request's inputs before writing the same elements)
//   batch               int32 requests (specialized, as vLLM's)

#if !defined(KERNEL_WIDTH) || KERNEL_WIDTH < 2 || KERNEL_WIDTH > 4
#error "KERNEL_WIDTH must be 2, 3 or 4"
#endif
#if STATE_LEN < KERNEL_WIDTH - 1
#error "STATE_LEN must be at least KERNEL_WIDTH - 1"
#endif

extern "C" __global__ void __launch_bounds__(BLOCK_N)
mamba_causal_conv1d_update(const cs_u16* x, const cs_u16* __restrict__ weight,
                           const cs_u16* __restrict__ bias, cs_u16* __restrict__ conv_state,
                           const int* __restrict__ conv_state_indices, cs_u16* out, int batch) {
  const int b = blockIdx.x;
  if (b >= batch) return;
  const int feat = blockIdx.y * BLOCK_N + threadIdx.x;
  if (feat >= DIM) return;
  const cs_i64 slot =
      static_cast<cs_i64>(conv_state_indices[static_cast<cs_i64>(b) * STRIDE_STATE_INDICES]);
#if USE_PAD_SLOT
  if (slot == PAD_SLOT_ID) return;
#endif
  cs_u16* st = conv_state + slot * STRIDE_CONV_STATE_SEQ +
               static_cast<cs_i64>(feat) * STRIDE_CONV_STATE_DIM;
  const cs_u16* xs = x + static_cast<cs_i64>(b) * STRIDE_X_SEQ + static_cast<cs_i64>(feat) * STRIDE_X_DIM;

  // History: the first width - 1 rows of the state (oldest first).
  float col[KERNEL_WIDTH - 1];
  for (int j = 0; j < KERNEL_WIDTH - 1; ++j) {
    col[j] = cs_bf16_to_f32(st[static_cast<cs_i64>(j) * STRIDE_CONV_STATE_TOK]);
  }
  // New state: rows shifted left by SEQLEN, the new tokens appended.
  cs_u16 next[STATE_LEN];
  for (int i = 0; i < STATE_LEN; ++i) {
    if (i + SEQLEN < STATE_LEN) {
      next[i] = slot < NUM_CACHE_LINES ? st[static_cast<cs_i64>(i + SEQLEN) * STRIDE_CONV_STATE_TOK]
                                       : static_cast<cs_u16>(0);
    } else {
      const int t = i - (STATE_LEN - SEQLEN);
      next[i] = t >= 0 ? xs[static_cast<cs_i64>(t) * STRIDE_X_TOKEN] : static_cast<cs_u16>(0);
    }
  }
  float xin[SEQLEN];
  for (int t = 0; t < SEQLEN; ++t) xin[t] = cs_bf16_to_f32(xs[static_cast<cs_i64>(t) * STRIDE_X_TOKEN]);
  for (int i = 0; i < STATE_LEN; ++i) st[static_cast<cs_i64>(i) * STRIDE_CONV_STATE_TOK] = next[i];

  float w[KERNEL_WIDTH];
  for (int j = 0; j < KERNEL_WIDTH; ++j) {
    w[j] = cs_bf16_to_f32(weight[static_cast<cs_i64>(feat) * STRIDE_W_DIM + j * STRIDE_W_WIDTH]);
  }
  const float acc0 = HAS_BIAS ? cs_bf16_to_f32(bias[feat]) : 0.f;
  cs_u16* os = out + static_cast<cs_i64>(b) * STRIDE_O_SEQ + static_cast<cs_i64>(feat) * STRIDE_O_DIM;
  for (int t = 0; t < SEQLEN; ++t) {
    float acc = acc0;
    for (int j = 0; j < KERNEL_WIDTH - 1; ++j) acc += mo_bf16_mul(col[j], w[j]);
    acc += mo_bf16_mul(xin[t], w[KERNEL_WIDTH - 1]);
    for (int j = 0; j + 1 < KERNEL_WIDTH - 1; ++j) col[j] = col[j + 1];
    col[KERNEL_WIDTH - 2] = xin[t];
    if (SILU_ACTIVATION) acc = mo_silu(acc);
    os[static_cast<cs_i64>(t) * STRIDE_O_TOKEN] = cs_f32_to_bf16(acc);
  }
}
