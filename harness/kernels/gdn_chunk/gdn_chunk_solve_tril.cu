// solve_tril for BT = 64: Ai = (I + A)^-1 per 64-token chunk and value head, A strictly lower
// triangular (chunk_scaled_dot_kkt's output), written bf16 [B*T, H, BT] with zeros above the
// diagonal (vLLM allocates Ai with zeros_like). Mirrors merge_16x16_to_64x64_inverse_kernel
// (vllm/model_executor/layers/fla/ops/solve_tril.py), which inverts the four 16x16 diagonal
// blocks and merges them; here the whole 64x64 inverse is one forward substitution in fp32
// (DOT_PRECISION "ieee" is vLLM's default precision; the same math, in another order).
// Rows beyond the sequence are zero in the solve and not stored.
// Grid (NT, B * H); thread c (< 64) owns column c of the inverse:
//   X[i][c] = [i == c] - sum_{j < i} A[i][j] * X[j][c].
// USE_TMA and DOT_PRECISION only select how vLLM's kernel loads and multiplies; they are kept
// as constexprs so the compile keys vary as vLLM's do.
// Arguments: A f32 [B*T, H, BT], Ai bf16 [B*T, H, BT], cu_seqlens, chunk_indices, T.
#if BT != 64
#error "this solve is written for BT = 64"
#endif

constexpr int kLd = BT + 1;

extern "C" __global__ void __launch_bounds__(kThreads)
gdn_chunk_solve_tril(const float* __restrict__ A, cs_u16* __restrict__ Ai,
               const int* __restrict__ cu_seqlens, const int* __restrict__ chunk_indices, int T) {
  __shared__ float sa[BT * kLd];
  __shared__ float sx[BT * kLd];
  const int i_t = blockIdx.x;
  const int i_b = blockIdx.y / H;
  const int i_h = blockIdx.y % H;
  const GdChunk c = gd_chunk(cu_seqlens, chunk_indices, i_t, i_b, T, IS_VARLEN, BT);
  const int rows = min(BT, c.len - c.t0);
  const cs_i64 row0 = static_cast<cs_i64>(c.bos) + c.t0;

  for (int idx = threadIdx.x; idx < BT * BT; idx += kThreads) {
    const int r = idx / BT, col = idx % BT;
    float v = 0.f;
    if (r < rows && col < r) v = A[((row0 + r) * H + i_h) * BT + col];
    sa[r * kLd + col] = v;
  }
  __syncthreads();
  for (int col = threadIdx.x; col < BT; col += kThreads) {
    for (int i = 0; i < col; ++i) sx[i * kLd + col] = 0.f;
    sx[col * kLd + col] = 1.f;
  }
  // Row i of X needs rows < i of the same column only: columns are independent.
  for (int i = 1; i < BT; ++i) {
    for (int col = threadIdx.x; col < BT; col += kThreads) {
      if (col >= i) continue;
      float acc0 = 0.f, acc1 = 0.f;
      int j = col;
      for (; j + 1 < i; j += 2) {
        acc0 = fmaf(sa[i * kLd + j], sx[j * kLd + col], acc0);
        acc1 = fmaf(sa[i * kLd + j + 1], sx[(j + 1) * kLd + col], acc1);
      }
      if (j < i) acc0 = fmaf(sa[i * kLd + j], sx[j * kLd + col], acc0);
      sx[i * kLd + col] = -(acc0 + acc1);
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < rows * (BT / 2); idx += kThreads) {
    const int r = idx / (BT / 2), col = (idx % (BT / 2)) * 2;
    const cs_u32 lo = cs_f32_to_bf16(sx[r * kLd + col]);
    const cs_u32 hi = cs_f32_to_bf16(sx[r * kLd + col + 1]);
    *reinterpret_cast<cs_u32*>(Ai + ((row0 + r) * H + i_h) * BT + col) = lo | (hi << 16);
  }
}
