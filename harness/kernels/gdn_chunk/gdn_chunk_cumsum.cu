// chunk_local_cumsum (scalar gates): o[t, h] = sum of s over the rows of t's 64-token chunk up to
// and including t (REVERSE: from t to the chunk's end), float32.
// Mirrors chunk_local_cumsum_scalar_kernel (vllm/model_executor/layers/fla/ops/cumsum.py).
// Grid (NT, B * H); one block per (chunk, head); only warp 0 works (lane l owns rows 2l, 2l+1 of
// a 64-row chunk), the other warps of a candidate config return at once.
// Arguments: s f32 [B*T, H] (HEAD_FIRST = 0), o f32 [B*T, H], cu_seqlens int32 [S+1],
// chunk_indices int32 [NT, 2], T (do_not_specialize).
#if (BT % 32) != 0 || BT > 256
#error "BT must be a multiple of 32, at most 256"
#endif
#if HEAD_FIRST
#error "HEAD_FIRST layouts are not used by the GDN prefill"
#endif

extern "C" __global__ void __launch_bounds__(kThreads)
gdn_chunk_cumsum(const float* __restrict__ s, float* __restrict__ o, const int* __restrict__ cu_seqlens,
           const int* __restrict__ chunk_indices, int T) {
  if (threadIdx.x >= 32) return;
  const int i_t = blockIdx.x;
  const int i_b = blockIdx.y / H;
  const int i_h = blockIdx.y % H;
  const GdChunk c = gd_chunk(cu_seqlens, chunk_indices, i_t, i_b, T, IS_VARLEN, BT);
  constexpr int kPer = BT / 32;
  const int lane = threadIdx.x;
  float v[kPer];
  float run = 0.f;
  for (int e = 0; e < kPer; ++e) {
    const int t = c.t0 + lane * kPer + e;
    v[e] = t < c.len ? s[static_cast<cs_i64>(c.bos + t) * H + i_h] : 0.f;
    run += v[e];
  }
  // inclusive scan of the per-lane totals
  float incl = run;
  for (int d = 1; d < 32; d <<= 1) {
    const float up = __shfl_up_sync(cs_full_mask, incl, d);
    if (lane >= d) incl += up;
  }
  const float total = __shfl_sync(cs_full_mask, incl, 31);
  float acc = incl - run;  // exclusive prefix of this lane
  for (int e = 0; e < kPer; ++e) {
    acc += v[e];
    const int t = c.t0 + lane * kPer + e;
    // REVERSE: the suffix sum total - prefix + own
    const float out = REVERSE ? total - acc + v[e] : acc;
    if (t < c.len) o[static_cast<cs_i64>(c.bos + t) * H + i_h] = out;
  }
}
