// TurboQuant 4-bit KV cache ("turboquant_4bit_nc"): device helpers shared by every TurboQuant
// kernel. This text is prepended to each kernel's source at build time (see
// turboquant_kernels.cpp), so every NVRTC program is self-contained: no #include at all, which
// keeps the kernels independent of the CUDA include path given to NVRTC.
//
// One cache slot (one token of one KV head) holds, for head_dim D:
//   [0, D/2)              key:   4-bit centroid indices, two per byte, low nibble = even coordinate
//   [D/2, D/2+2)          key:   fp16 L2 norm of the key
//   [D/2+2, D+2)          value: 4-bit uniform indices, same packing
//   [D+2, D+4)            value: fp16 scale = (max - min) / 15
//   [D+4, D+6)            value: fp16 zero  = min
// D + 6 bytes in all (already even, so no padding for any power-of-two D). The cache of one layer
// is uint8 [num_blocks, BLOCK_SIZE, num_kv_heads, D + 6], contiguous; token slot s lives at block
// s / BLOCK_SIZE, row s % BLOCK_SIZE, i.e. at byte ((s * num_kv_heads) + head) * (D + 6).
//
// Keys: y = H k with H the normalized Sylvester Hadamard matrix (symmetric, H H = I);
// n = |y| = |k|; each y_i * sqrt(D) / n is mapped to the nearest of 16 Lloyd-Max centroids of a
// standard normal. Dequant: c = centroids[idx]; k' = H (n * c / |c|) ("norm correction": the
// reconstructed rotated key has exactly the stored norm). The 1/sqrt(D) scaling of the centroids
// cancels in c / |c|, so the kernels work with the unscaled table.
//
// Work split: a "group" of TQ_TPW consecutive lanes handles one head vector of D coordinates,
// TQ_CPL consecutive coordinates per lane (lane g of the group owns [g*CPL, (g+1)*CPL)). For D=128
// that is one warp, 4 coordinates (2 bytes of indices) per lane. All shuffles use the full warp
// mask, so every kernel keeps all 32 lanes of a warp converged around them.

#ifndef HEAD_DIM
#error "HEAD_DIM must be defined (NVRTC option -DHEAD_DIM=<power of two in [16, 256]>)"
#endif
#if (HEAD_DIM < 16) || (HEAD_DIM > 256) || ((HEAD_DIM & (HEAD_DIM - 1)) != 0)
#error "HEAD_DIM must be a power of two in [16, 256]"
#endif

constexpr int kD = HEAD_DIM;
constexpr int kKeyBytes = kD / 2 + 2;
constexpr int kValueBytes = kD / 2 + 4;
constexpr int kSlotBytes = (kKeyBytes + kValueBytes + 1) / 2 * 2;
constexpr int kCpl = kD >= 128 ? kD / 32 : 4;  // coordinates per lane (a multiple of 4)
constexpr int kTpw = kD / kCpl;                // lanes per head vector (4..32, divides 32)

static_assert(kCpl % 4 == 0, "each lane must own whole 16-bit words of indices");
static_assert(32 % kTpw == 0, "a group must tile a warp");

// ---- Lloyd-Max table (standard normal, 16 levels, ascending) -------------------------------

__device__ __forceinline__ float tq_centroid(int i) {
  // Selected with constants, no memory: used once per block to fill a shared-memory copy.
  const float pos[8] = {0.1284f, 0.3881f, 0.6568f, 0.9424f, 1.2562f, 1.6181f, 2.0690f, 2.7326f};
  return i >= 8 ? pos[i - 8] : -pos[7 - i];
}

// Index of the nearest centroid to x (x in units of the standard normal): the number of the 15
// decision boundaries (midpoints of neighbouring centroids, computed in float) strictly below x.
// A tie goes to the lower index. The host reference uses the same float boundaries.
__device__ __forceinline__ int tq_key_index(float x) {
  const float c[8] = {0.1284f, 0.3881f, 0.6568f, 0.9424f, 1.2562f, 1.6181f, 2.0690f, 2.7326f};
  int idx = (x > 0.0f) ? 1 : 0;
#pragma unroll
  for (int k = 0; k < 7; ++k) {
    const float mid = (c[k] + c[k + 1]) * 0.5f;
    idx += ((x > mid) ? 1 : 0) + ((x > -mid) ? 1 : 0);
  }
  return idx;
}

// ---- group-wide reductions and the Walsh-Hadamard transform --------------------------------

__device__ __forceinline__ float tq_group_sum(float x) {
#pragma unroll
  for (int o = kTpw / 2; o > 0; o >>= 1) x += __shfl_xor_sync(cs_full_mask, x, o);
  return x;
}

__device__ __forceinline__ float tq_group_max(float x) {
#pragma unroll
  for (int o = kTpw / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(cs_full_mask, x, o));
  return x;
}

__device__ __forceinline__ float tq_group_min(float x) {
#pragma unroll
  for (int o = kTpw / 2; o > 0; o >>= 1) x = fminf(x, __shfl_xor_sync(cs_full_mask, x, o));
  return x;
}

// Unnormalized fast Walsh-Hadamard transform of the D-vector spread over a group (lane g holds
// coordinates g*CPL .. g*CPL+CPL-1 in v). Multiply by 1/sqrt(D) for the orthonormal H.
__device__ __forceinline__ void tq_fwht(float (&v)[kCpl], int g) {
#pragma unroll
  for (int len = 1; len < kCpl; len <<= 1) {
#pragma unroll
    for (int i = 0; i < kCpl; ++i) {
      if ((i & len) == 0) {
        const float a = v[i];
        const float b = v[i + len];
        v[i] = a + b;
        v[i + len] = a - b;
      }
    }
  }
#pragma unroll
  for (int len = kCpl; len < kD; len <<= 1) {
    const int m = len / kCpl;
    const bool upper = (g & m) != 0;
#pragma unroll
    for (int i = 0; i < kCpl; ++i) {
      const float other = __shfl_xor_sync(cs_full_mask, v[i], m);
      v[i] = upper ? (other - v[i]) : (v[i] + other);
    }
  }
}

__device__ __forceinline__ cs_u16 tq_load_u16(const cs_u8* p) {
  return *reinterpret_cast<const cs_u16*>(p);
}

__device__ __forceinline__ cs_i64 tq_slot_offset(cs_i64 slot, int num_kv_heads, int head) {
  return (slot * num_kv_heads + head) * static_cast<cs_i64>(kSlotBytes);
}
