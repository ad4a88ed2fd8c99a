// fused_post_conv_prep: splits the causal-conv output of a GDN layer into q, k (L2-normalized per
// head when APPLY_L2NORM) and v, and computes the gates
//   g = -exp(A_log) * softplus(a + dt_bias)   (softplus(x) = x above SOFTPLUS_THRESHOLD = 20)
//   beta = sigmoid(b)
// Mirrors _fused_post_conv_kernel (vllm/model_executor/layers/fla/ops/fused_gdn_prefill_post_conv.py):
// grid (cdiv(L, BLOCK_T), H + HV); blocks y < H do q/k head y, blocks y >= H do v head y - H and
// its gates; vLLM launches it with num_warps 4, BLOCK_T 16, L2NORM_EPS 1e-6 (a float constexpr,
// fixed here) and no autotune. Each warp handles tokens warp, warp + NUM_WARPS, ... of the block;
// lane l owns the K/32 (V/32) contiguous features l*K/32 ...
// When the compile key promises 16-divisible strides and 16-byte aligned pointers (Triton-style
// specialization, CS_SPEC_*), feature pairs move as 32-bit words.
// Arguments: mixed_qkv bf16 [L, >= 2*H*K + HV*V] (row stride stride_x_tok), a, b bf16 [L, HV]
// (row strides stride_a_tok / stride_b_tok), A_log f32 [HV], dt_bias bf16 [HV], q, k bf16 [L, H, K],
// v bf16 [L, HV, V], g, beta f32 [L, HV], the three input and three output token strides, L.
#if (K % 32) != 0 || (V % 32) != 0
#error "K and V must be multiples of 32"
#endif
#if OUTPUT_G_EXP
#error "OUTPUT_G_EXP (FlashInfer's exp(g)) is not used by the FLA prefill"
#endif

#if defined(CS_SPEC_stride_x_tok) && defined(CS_SPEC_mixed_qkv)
#if CS_SPEC_stride_x_tok == 16 && CS_SPEC_mixed_qkv == 16
#define GD_PAIRS 1
#endif
#endif
#ifndef GD_PAIRS
#define GD_PAIRS 0
#endif

constexpr float kL2Eps = 1e-6f;
constexpr float kSoftplusThreshold = 20.f;

// Copies EPL contiguous features starting at src (bf16) to registers as float.
template <int EPL>
__device__ __forceinline__ void gd_load_feats(const cs_u16* src, float* x) {
  if (GD_PAIRS) {
    for (int e = 0; e < EPL; e += 2) {
      const cs_u32 p = *reinterpret_cast<const cs_u32*>(src + e);
      x[e] = cs_bf16_to_f32(static_cast<cs_u16>(p & 0xffffu));
      x[e + 1] = cs_bf16_to_f32(static_cast<cs_u16>(p >> 16));
    }
  } else {
    for (int e = 0; e < EPL; ++e) x[e] = cs_bf16_to_f32(src[e]);
  }
}

// Outputs are contiguous and 4-byte aligned (checked by the wrapper).
template <int EPL>
__device__ __forceinline__ void gd_store_feats(cs_u16* dst, const float* x) {
  for (int e = 0; e < EPL; e += 2) {
    *reinterpret_cast<cs_u32*>(dst + e) = cs_pack_bf16x2(x[e], x[e + 1]);
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
gdn_post_conv(const cs_u16* __restrict__ mixed_qkv, const cs_u16* __restrict__ a,
              const cs_u16* __restrict__ b, const float* __restrict__ A_log,
              const cs_u16* __restrict__ dt_bias, cs_u16* __restrict__ q, cs_u16* __restrict__ k,
              cs_u16* __restrict__ v, float* __restrict__ g, float* __restrict__ beta,
              long long stride_x_tok, long long stride_a_tok, long long stride_b_tok,
              long long stride_q_tok, long long stride_k_tok, long long stride_v_tok, int L) {
  const int i_head = blockIdx.y;
  const int t_begin = blockIdx.x * BLOCK_T;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (i_head < H) {
    constexpr int kE = K / 32;
    for (int tt = warp; tt < BLOCK_T; tt += NUM_WARPS) {
      const int t = t_begin + tt;
      if (t >= L) break;
      const cs_u16* row = mixed_qkv + static_cast<cs_i64>(t) * stride_x_tok;
      float xq[kE], xk[kE];
      gd_load_feats<kE>(row + i_head * K + lane * kE, xq);
      gd_load_feats<kE>(row + H * K + i_head * K + lane * kE, xk);
      if (APPLY_L2NORM) {
        float sq = 0.f, sk = 0.f;
        for (int e = 0; e < kE; ++e) {
          sq += xq[e] * xq[e];
          sk += xk[e] * xk[e];
        }
        const float iq = 1.f / sqrtf(cs_warp_sum(sq) + kL2Eps);
        const float ik = 1.f / sqrtf(cs_warp_sum(sk) + kL2Eps);
        for (int e = 0; e < kE; ++e) {
          xq[e] *= iq;
          xk[e] *= ik;
        }
      }
      gd_store_feats<kE>(q + static_cast<cs_i64>(t) * stride_q_tok + i_head * K + lane * kE, xq);
      gd_store_feats<kE>(k + static_cast<cs_i64>(t) * stride_k_tok + i_head * K + lane * kE, xk);
    }
  } else {
    const int i_hv = i_head - H;
    constexpr int kE = V / 32;
    for (int tt = warp; tt < BLOCK_T; tt += NUM_WARPS) {
      const int t = t_begin + tt;
      if (t >= L) break;
      float xv[kE];
      gd_load_feats<kE>(
          mixed_qkv + static_cast<cs_i64>(t) * stride_x_tok + 2 * H * K + i_hv * V + lane * kE, xv);
      gd_store_feats<kE>(v + static_cast<cs_i64>(t) * stride_v_tok + i_hv * V + lane * kE, xv);
    }
    if (threadIdx.x < BLOCK_T) {
      const int t = t_begin + threadIdx.x;
      if (t < L) {
        const float a_log = A_log[i_hv];
        const float bias = cs_bf16_to_f32(dt_bias[i_hv]);
        const float av = cs_bf16_to_f32(a[static_cast<cs_i64>(t) * stride_a_tok + i_hv]);
        const float bv = cs_bf16_to_f32(b[static_cast<cs_i64>(t) * stride_b_tok + i_hv]);
        const float x = av + bias;
        float sp = x > 0.f ? x + logf(1.f + expf(-x)) : logf(1.f + expf(x));
        if (!(x <= kSoftplusThreshold)) sp = x;
        g[static_cast<cs_i64>(t) * HV + i_hv] = -expf(a_log) * sp;
        beta[static_cast<cs_i64>(t) * HV + i_hv] = 1.f / (1.f + expf(-bv));
      }
    }
  }
}
