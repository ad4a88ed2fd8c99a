// mamba_causal_conv1d_update: one decode step of the depthwise causal conv1d: new tokens per
// request against the request's conv state, which is shifted left and appended in place (vLLM's
// _causal_conv1d_update_kernel / causal_conv1d_update, vllm/model_executor/layers/mamba/ops/
// causal_conv1d.py; commit in mamba_ops_kernels.h). No prefix caching, no EAGLE tree (vLLM's
// IS_APC_ENABLED / IS_EAGLE_TREE = 0). Two launches use it:
// - decode (IS_VARLEN = IS_SPEC_DECODING = 0): SEQLEN tokens per request (1 outside speculative
//   decoding) at x[b*STRIDE_X_SEQ + ...]; the state's first STATE_LEN = width - 1 rows shift left
//   by SEQLEN and take the new tokens.
// - speculative-decoding verify (IS_VARLEN = IS_SPEC_DECODING = 1): request b's tokens are rows
//   [qsl[b], qsl[b+1]) of a flat x (at most SEQLEN = max_query_len of them; a request with none
//   is skipped), STATE_LEN = width - 1 + (SEQLEN - 1). The previous step left width - 2 older
//   rows followed by all of its tokens, of which the first num_accepted_tokens[b] were accepted,
//   so the last width - 1 accepted inputs are state rows a .. a + width - 2 with
//   a = num_accepted_tokens[b] - 1: that is the conv window. Afterwards the state holds rows
//   a + 1 .. a + width - 2 followed by the request's len tokens (width - 2 + len rows; rows past
//   them are kept).
// Both flags follow vLLM's kernel on their own, so the other two combinations also compute what
// vLLM's would; the wrappers (mamba_ops.h) launch only these two.
//
// One CTA per (request, BLOCK_N channels); thread t owns channel blockIdx.y * BLOCK_N + t and
// does all of its loads (history, shifted state rows, new tokens) before its state stores.
// Constexprs (vLLM's): DIM, SEQLEN, STATE_LEN, NUM_CACHE_LINES, STRIDE_X_SEQ, STRIDE_X_DIM,
// STRIDE_X_TOKEN, STRIDE_W_DIM, STRIDE_W_WIDTH, STRIDE_CONV_STATE_SEQ, STRIDE_CONV_STATE_DIM,
// STRIDE_CONV_STATE_TOK, STRIDE_STATE_INDICES, STRIDE_O_SEQ, STRIDE_O_DIM, STRIDE_O_TOKEN,
// PAD_SLOT_ID, HAS_BIAS, KERNEL_WIDTH (2..4), SILU_ACTIVATION, IS_VARLEN, IS_SPEC_DECODING,
// USE_PAD_SLOT, NP2_STATELEN, NP2_SEQLEN, BLOCK_N (= threads per CTA).
// Arguments, in order:
//   x                   bf16, (request b, token t, channel c) at x[b*STRIDE_X_SEQ +
//                       t*STRIDE_X_TOKEN + c*STRIDE_X_DIM]; IS_VARLEN: at
//                       x[(qsl[b] + t)*STRIDE_X_TOKEN + c*STRIDE_X_DIM]
//   weight, bias        as mamba_causal_conv1d_fwd
//   conv_state          bf16, slot s, row r, channel c at
//                       [s*STRIDE_CONV_STATE_SEQ + c*STRIDE_CONV_STATE_DIM + r*STRIDE_CONV_STATE_TOK]
//   conv_state_indices  int32, request b's slot at [b*STRIDE_STATE_INDICES]; PAD_SLOT_ID = skip
//   num_accepted_tokens int32 [batch] (read only when IS_SPEC_DECODING; else may be null)
//   query_start_loc     int32 [batch + 1] (read only when IS_VARLEN; else may be null)
//   out                 bf16, like x with STRIDE_O_*; may be x itself (each thread reads its
//                       request's inputs before writing the same elements)
//   batch               int32 requests (specialized, as vLLM's)

#if !defined(KERNEL_WIDTH) || KERNEL_WIDTH < 2 || KERNEL_WIDTH > 4
#error "KERNEL_WIDTH must be 2, 3 or 4"
#endif
#if STATE_LEN < KERNEL_WIDTH - 1
#error "STATE_LEN must be at least KERNEL_WIDTH - 1"
#endif
#if SEQLEN < 1
#error "SEQLEN must be at least 1"
#endif

extern "C" __global__ void __launch_bounds__(BLOCK_N)
mamba_causal_conv1d_update(const cs_u16* x, const cs_u16* __restrict__ weight,
                           const cs_u16* __restrict__ bias, cs_u16* __restrict__ conv_state,
                           const int* __restrict__ conv_state_indices,
                           const int* __restrict__ num_accepted_tokens,
                           const int* __restrict__ query_start_loc, cs_u16* out, int batch) {
  const int b = blockIdx.x;
  if (b >= batch) return;
  const int feat = blockIdx.y * BLOCK_N + threadIdx.x;
  if (feat >= DIM) return;
  const cs_i64 slot =
      static_cast<cs_i64>(conv_state_indices[static_cast<cs_i64>(b) * STRIDE_STATE_INDICES]);
#if USE_PAD_SLOT
  if (slot == PAD_SLOT_ID) return;
#endif
#if IS_VARLEN
  // This request's token count replaces SEQLEN (an upper bound) and shortens the state it
  // rewrites by as much.
  const cs_i64 first_token = static_cast<cs_i64>(query_start_loc[b]);
  const int seqlen = query_start_loc[b + 1] - static_cast<int>(first_token);
  const int state_len = STATE_LEN - (SEQLEN - seqlen);
  const cs_i64 x_row = first_token * STRIDE_X_TOKEN;
  const cs_i64 o_row = first_token * STRIDE_O_TOKEN;
  if (seqlen == 0) return;
#else
  const int seqlen = SEQLEN;
  const int state_len = STATE_LEN;
  const cs_i64 x_row = static_cast<cs_i64>(b) * STRIDE_X_SEQ;
  const cs_i64 o_row = static_cast<cs_i64>(b) * STRIDE_O_SEQ;
#endif
#if IS_SPEC_DECODING
  // The last width - 1 accepted inputs start at row num_accepted - 1 (the rows after them hold
  // rejected drafts); the kept rows shift by one from there.
  const cs_i64 first_row = static_cast<cs_i64>(num_accepted_tokens[b]) - 1;
  const int shift = 1;
#else
  const cs_i64 first_row = 0;
  const int shift = seqlen;
#endif
  cs_u16* st = conv_state + slot * STRIDE_CONV_STATE_SEQ +
               static_cast<cs_i64>(feat) * STRIDE_CONV_STATE_DIM;
  const cs_u16* win = st + first_row * STRIDE_CONV_STATE_TOK;
  const cs_u16* xs = x + x_row + static_cast<cs_i64>(feat) * STRIDE_X_DIM;

  // History: width - 1 state rows from first_row (oldest first).
  float col[KERNEL_WIDTH - 1];
  for (int j = 0; j < KERNEL_WIDTH - 1; ++j) {
    col[j] = cs_bf16_to_f32(win[static_cast<cs_i64>(j) * STRIDE_CONV_STATE_TOK]);
  }
  // New state rows 0 .. state_len - 1: kept state rows (from first_row + shift), then the new
  // tokens. Rows past state_len are neither loaded nor stored.
  cs_u16 next[STATE_LEN];
  const int x_first = state_len - seqlen;  // first row that takes a new token
  for (int i = 0; i < STATE_LEN; ++i) {
    cs_u16 v = static_cast<cs_u16>(0);
    if (i + seqlen < state_len) {
      if (slot < NUM_CACHE_LINES) v = win[static_cast<cs_i64>(i + shift) * STRIDE_CONV_STATE_TOK];
    } else {
      const int t = i - x_first;
      if (t >= 0 && t < seqlen) v = xs[static_cast<cs_i64>(t) * STRIDE_X_TOKEN];
    }
    next[i] = v;
  }
  float xin[SEQLEN];
  for (int t = 0; t < SEQLEN; ++t) {
    xin[t] = t < seqlen ? cs_bf16_to_f32(xs[static_cast<cs_i64>(t) * STRIDE_X_TOKEN]) : 0.f;
  }
  for (int i = 0; i < STATE_LEN; ++i) {
    if (i < state_len) st[static_cast<cs_i64>(i) * STRIDE_CONV_STATE_TOK] = next[i];
  }

  float w[KERNEL_WIDTH];
  for (int j = 0; j < KERNEL_WIDTH; ++j) {
    w[j] = cs_bf16_to_f32(weight[static_cast<cs_i64>(feat) * STRIDE_W_DIM + j * STRIDE_W_WIDTH]);
  }
  const float acc0 = HAS_BIAS ? cs_bf16_to_f32(bias[feat]) : 0.f;
  cs_u16* os = out + o_row + static_cast<cs_i64>(feat) * STRIDE_O_DIM;
  for (int t = 0; t < SEQLEN; ++t) {
    if (t >= seqlen) break;
    float acc = acc0;
    for (int j = 0; j < KERNEL_WIDTH - 1; ++j) acc += mo_bf16_mul(col[j], w[j]);
    acc += mo_bf16_mul(xin[t], w[KERNEL_WIDTH - 1]);
    for (int j = 0; j + 1 < KERNEL_WIDTH - 1; ++j) col[j] = col[j + 1];
    col[KERNEL_WIDTH - 2] = xin[t];
    if (SILU_ACTIVATION) acc = mo_silu(acc);
    os[static_cast<cs_i64>(t) * STRIDE_O_TOKEN] = cs_f32_to_bf16(acc);
  }
}
