// Qwen3-Next gated-delta-net (GDN) chunked prefill: device helpers shared by every gdn_chunk
// kernel. This text is prepended to each kernel's source at build time (gdn_chunk_kernels.cpp),
// so every NVRTC program is self-contained: no #include, no CUDA headers.
//
// Conventions of the chain (vLLM's FLA port, vllm/model_executor/layers/fla/ops/):
//   tokens are packed varlen: sequence n owns rows cu_seqlens[n] .. cu_seqlens[n+1]-1;
//   chunk_indices int32 [NT, 2] = (sequence, chunk within the sequence) per 64-token chunk in
//   packing order (index.py prepare_chunk_indices); chunk_offsets int32 [S+1] = first global
//   chunk of each sequence (prepare_chunk_offsets).
//   Key heads Hg, value heads H (H % Hg == 0): value head h reads key head h / (H / Hg).
//
// Matrix products use the tensor cores through the sm_80+ warp instruction
// mma.sync.m16n8k16 (bf16 in, fp32 accumulate). Operands are staged in shared memory in the
// "reduction-dimension contiguous" layout: A as [M][KD] and B as [N][KD] (row stride padded by 8
// elements against bank conflicts), so each fragment register is one aligned 32-bit load.

#ifndef NUM_WARPS
#define NUM_WARPS 4
#endif
#ifndef NUM_STAGES
#define NUM_STAGES 1
#endif
constexpr int kThreads = NUM_WARPS * 32;

// ---- tensor-core tiles -----------------------------------------------------------------------

// acc (a 16x8 fp32 tile at rows m0.., cols n0..) += sa[m0:m0+16, 0:kd] * sb[n0:n0+8, 0:kd]^T,
// sa and sb bf16 in shared memory as [rows][kd] with row strides lda / ldb (elements, even).
// Fragment ownership of acc (PTX m16n8k16 layout): lane l holds
//   acc[0], acc[1] at row m0 + l/4,     cols n0 + 2*(l%4) + {0, 1}
//   acc[2], acc[3] at row m0 + l/4 + 8, the same cols.
// (Operands are named sa / sb: single capitals such as B, H, K are constexpr macros.)
__device__ __forceinline__ void gd_mma_tile(float* acc, const cs_u16* sa, int lda, const cs_u16* sb,
                                            int ldb, int m0, int n0, int kd) {
  const int lane = threadIdx.x & 31;
  const int r = lane >> 2;
  const int c = (lane & 3) * 2;
  const cs_u16* a_lo = sa + (m0 + r) * lda + c;
  const cs_u16* a_hi = a_lo + 8 * lda;
  const cs_u16* b_p = sb + (n0 + r) * ldb + c;
  for (int k0 = 0; k0 < kd; k0 += 16) {
    const cs_u32 fa[4] = {*reinterpret_cast<const cs_u32*>(a_lo + k0),
                          *reinterpret_cast<const cs_u32*>(a_hi + k0),
                          *reinterpret_cast<const cs_u32*>(a_lo + k0 + 8),
                          *reinterpret_cast<const cs_u32*>(a_hi + k0 + 8)};
    const cs_u32 fb[2] = {*reinterpret_cast<const cs_u32*>(b_p + k0),
                          *reinterpret_cast<const cs_u32*>(b_p + k0 + 8)};
    cs_mma_bf16_m16n8k16(acc, fa, fb);
  }
}

// The same product with sb given k-major: sbk[0:kd, n0:n0+8] stored [kd][N] (row stride ldb),
// i.e. B in its natural [reduction][column] layout (a token-major tile of k or v); each B
// register packs two 16-bit loads from consecutive rows, so no transposed staging is needed.
__device__ __forceinline__ void gd_mma_tile_kn(float* acc, const cs_u16* sa, int lda,
                                               const cs_u16* sbk, int ldb, int m0, int n0,
                                               int kd) {
  const int lane = threadIdx.x & 31;
  const int r = lane >> 2;
  const int c = (lane & 3) * 2;
  const cs_u16* a_lo = sa + (m0 + r) * lda + c;
  const cs_u16* a_hi = a_lo + 8 * lda;
  const cs_u16* b_p = sbk + c * ldb + n0 + r;
  for (int k0 = 0; k0 < kd; k0 += 16) {
    const cs_u32 fa[4] = {*reinterpret_cast<const cs_u32*>(a_lo + k0),
                          *reinterpret_cast<const cs_u32*>(a_hi + k0),
                          *reinterpret_cast<const cs_u32*>(a_lo + k0 + 8),
                          *reinterpret_cast<const cs_u32*>(a_hi + k0 + 8)};
    const cs_u16* bk = b_p + k0 * ldb;
    const cs_u32 fb[2] = {
        static_cast<cs_u32>(bk[0]) | (static_cast<cs_u32>(bk[ldb]) << 16),
        static_cast<cs_u32>(bk[8 * ldb]) | (static_cast<cs_u32>(bk[9 * ldb]) << 16)};
    cs_mma_bf16_m16n8k16(acc, fa, fb);
  }
}

// Row / column of element e (0..3) of a lane's fragment in a tile at (m0, n0).
__device__ __forceinline__ int gd_frag_row(int m0, int e) { return m0 + cs_mma_acc_row(e); }
__device__ __forceinline__ int gd_frag_col(int n0, int e) { return n0 + cs_mma_acc_col(e); }

// Tiles of an [M x N] output are numbered i = mt * (N / 8) + nt; warp w owns i = w + j * NUM_WARPS.
#define GD_TILE_M0(i, N) (((i) / ((N) / 8)) * 16)
#define GD_TILE_N0(i, N) (((i) % ((N) / 8)) * 8)

// ---- varlen chunk bookkeeping ---------------------------------------------------------------

struct GdChunk {
  int bos;  // first packed row of the sequence
  int len;  // tokens of the sequence
  int t0;   // first row of this chunk inside the sequence
};

// The chunk of block `i_t` (a global chunk number when varlen) of batch row `i_b`.
__device__ __forceinline__ GdChunk gd_chunk(const int* cu_seqlens, const int* chunk_indices,
                                            int i_t, int i_b, int T, int is_varlen, int bt) {
  GdChunk c;
  if (is_varlen) {
    const int n = chunk_indices[2 * i_t];
    const int ci = chunk_indices[2 * i_t + 1];
    c.bos = cu_seqlens[n];
    c.len = cu_seqlens[n + 1] - c.bos;
    c.t0 = ci * bt;
  } else {
    c.bos = i_b * T;
    c.len = T;
    c.t0 = i_t * bt;
  }
  return c;
}
