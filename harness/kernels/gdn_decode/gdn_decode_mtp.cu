// gdn_decode_mtp: the fused GDN decode kernel of speculative (MTP) decoding: post-conv split of
// the packed conv output, q/k L2 norm, sigmoid gating, the delta rule over each request's tokens,
// every token's state stored, and the output gated RMSNorm, in one kernel.
//
// Sources. The math and the slot rules mirror vLLM's CUDA kernel gdn_decode_post_conv_mtp_kernel
// (csrc/libtorch_stable/gdn/fused_gdn_decode_kernel.cu @ 06017534a783, the op
// torch.ops._C.fused_gdn_decode_post_conv_mtp). The value tile BV (a program per (request, value
// head, V / BV tile)) mirrors the ROCm Triton port fused_gdn_decode_post_conv_mtp_triton
// (vllm/third_party/flash_linear_attention/ops/fused_gdn_decode_post_conv_mtp.py), whose source
// was not found in the indexed repositories: its tile rule comes from the seed's warmup
// (qwen_triton_warmup.py, _warm_fused_gdn_decode_post_conv_mtp_kernel: "request counts 1,
// ceil(num_cus / hv) and 4 * num_cus / hv + 1 select BV = 32, 64 and V"), see mtp_value_tile in
// gdn_decode_kernels.h. [inference] The port's other constexprs, its warp count and how it
// normalizes a row split over several V tiles are not known; this file's choices are marked.
//
// Constexprs [inference: the port's names are unknown]: H, HV, K, V, BV, STATE_DTYPE
// (0 bf16, 1 float32), SIGMOID_GATE (output_gate_activation: 1 "sigmoid", 0 "silu"),
// DT_BIAS_DTYPE (0 float32, 1 bf16), NORM_WEIGHT_DTYPE (0 float32, 1 bf16).
// Grid (num_reqs, HV, V / BV), 256 threads (the CUDA kernel's 8 warps); warp w owns BV / 8 rows.
//
// Per program (request r, value head hv, tile j), as the CUDA kernel:
//   - tokens [bos, eos) = cu_seqlens[r], cu_seqlens[r + 1]; none: return
//   - source slot = state_indices[r * W + num_accepted_tokens[r] - 1] when 1 <= accepted <= W,
//     else 0; a source slot <= 0 (vLLM's null block 0, or a pad) or more than 8 tokens: the
//     tile's outputs of every token are zero, nothing else is read or written
//   - per token t: q, k L2-normalized (rsqrt(sum + 1e-6)), q *= scale; decay = exp(-exp(A_log) *
//     softplus(a + dt_bias)) (softplus: x > 20 ? x : log1p(exp(x))); beta = sigmoid(b);
//     S *= decay; S += beta * (v - S k) k^T; o = S q, rounded to bf16; the state after token t
//     goes to slot state_indices[r * W + t] when that slot is > 0
//   - out = o * rsqrt(mean(o^2) + norm_eps) * norm_weight * gate(output_gate), gate = sigmoid or
//     silu, per (token, head) over the V outputs.
// With BV < V a row's outputs come from V / BV programs. [inference] Each writes its raw bf16
// outputs into `out`, and the last of them to arrive (a per-(request, head) arrival counter in a
// module-global array, reset by that last program) normalizes the whole row in place.
// Arguments, in order:
//   mixed_qkv     bf16, row (token) t at mixed_qkv + t * mixed_stride: [q (H*K) | k (H*K) | v (HV*V)]
//   a, b          bf16, element (t, hv) at a[t * a_stride + hv]
//   A_log         float32 [HV]; dt_bias [HV] of DT_BIAS_DTYPE
//   state_indices int32 [num_reqs, W], contiguous; cu_seqlens int32 [num_reqs + 1];
//   num_accepted_tokens int32 [num_reqs]
//   state         [slots, HV, V, K] of STATE_DTYPE, slot stride state_stride, the rest contiguous
//   output_gate   bf16, element (t, hv, vv) at output_gate[t * gate_stride + hv * V + vv]
//   norm_weight   [V] of NORM_WEIGHT_DTYPE; out bf16 [T, HV, V], contiguous
//   state_indices_width (W, int32), mixed_stride, a_stride, b_stride, gate_stride, state_stride
//   (int64, in elements), scale, norm_eps (float32)

#if K != 128 || V != 128
#error "the MTP kernel is written for K = V = 128 (the CUDA kernel's kDimK / kDimV)"
#endif
#if BV != 32 && BV != 64 && BV != V
#error "BV must be 32, 64 or V"
#endif

constexpr int kMtpWarps = 8;
constexpr int kMtpThreads = 32 * kMtpWarps;
constexpr int kMtpMaxTokens = 8;     // the CUDA kernel's kMaxMtpTokens
constexpr int kRows = BV / kMtpWarps;  // state rows per warp: 4, 8 or 16
constexpr int kKpl = K / 32;
constexpr int kTiles = V / BV;
// Arrival counters of the split-V normalization: one per (request, value head), at most this many
// (gdn_decode_kernels.h: kMtpArrivalSlots, checked by the wrapper).
constexpr int kArrivalSlots = 65536;

#if DT_BIAS_DTYPE == 0
typedef float gd_dt_bias_t;
#elif DT_BIAS_DTYPE == 1
typedef cs_u16 gd_dt_bias_t;
#else
#error "DT_BIAS_DTYPE must be 0 (float32) or 1 (bf16)"
#endif
#if NORM_WEIGHT_DTYPE == 0
typedef float gd_norm_w_t;
#elif NORM_WEIGHT_DTYPE == 1
typedef cs_u16 gd_norm_w_t;
#else
#error "NORM_WEIGHT_DTYPE must be 0 (float32) or 1 (bf16)"
#endif

__device__ __forceinline__ float gd_to_f32(float x) { return x; }
__device__ __forceinline__ float gd_to_f32(cs_u16 x) { return cs_bf16_to_f32(x); }

#if BV < V
__device__ unsigned int gdn_mtp_arrivals[kArrivalSlots];
#endif

// out[row] = o * rstd * w * gate for one (token, head) row of V raw outputs, by one warp.
template <typename LoadRaw>
__device__ __forceinline__ void gd_mtp_norm_row(LoadRaw raw, const cs_u16* __restrict__ gate_row,
                                                const gd_norm_w_t* __restrict__ norm_weight,
                                                cs_u16* out_row, float norm_eps) {
  const int lane = threadIdx.x & 31;
  float ov[V / 32];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < V / 32; ++i) {
    ov[i] = raw(lane + 32 * i);
    ss += ov[i] * ov[i];
  }
  ss = cs_warp_sum(ss);
  const float rstd = rsqrtf(ss / static_cast<float>(V) + norm_eps);
#pragma unroll
  for (int i = 0; i < V / 32; ++i) {
    const int c = lane + 32 * i;
    const float z = cs_bf16_to_f32(gate_row[c]);
#if SIGMOID_GATE
    const float gate = 1.0f / (1.0f + expf(-z));
#else
    const float gate = z / (1.0f + expf(-z));
#endif
    out_row[c] = cs_f32_to_bf16(ov[i] * rstd * gd_to_f32(norm_weight[c]) * gate);
  }
}

extern "C" __global__ void __launch_bounds__(kMtpThreads)
gdn_decode_mtp(const cs_u16* __restrict__ mixed_qkv, const cs_u16* __restrict__ a,
               const cs_u16* __restrict__ b, const float* __restrict__ A_log,
               const gd_dt_bias_t* __restrict__ dt_bias, const int* __restrict__ state_indices,
               const int* __restrict__ cu_seqlens, const int* __restrict__ num_accepted_tokens,
               gd_state_t* state, const cs_u16* __restrict__ output_gate,
               const gd_norm_w_t* __restrict__ norm_weight, cs_u16* out,
               int state_indices_width, cs_i64 mixed_stride, cs_i64 a_stride, cs_i64 b_stride,
               cs_i64 gate_stride, cs_i64 state_stride, float scale, float norm_eps) {
  const int req = blockIdx.x;
  const int hv = blockIdx.y;
  const int tile = blockIdx.z;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const cs_i64 bos = cu_seqlens[req];
  const int n = static_cast<int>(cu_seqlens[req + 1] - bos);
  if (n <= 0) return;

  const int width = state_indices_width;
  const int* idx = state_indices + static_cast<cs_i64>(req) * width;
  const int accepted = num_accepted_tokens[req];
  const int src = (accepted > 0 && accepted <= width) ? idx[accepted - 1] : 0;
  if (src <= 0 || n > kMtpMaxTokens) {
    for (int i = tid; i < n * BV; i += kMtpThreads) {
      out[((bos + i / BV) * HV + hv) * V + tile * BV + i % BV] = 0;  // bf16 +0
    }
    return;
  }

  const int key_head = hv / (HV / H);
  __shared__ float s_q[kMtpMaxTokens][K];
  __shared__ float s_k[kMtpMaxTokens][K];
  __shared__ float s_v[kMtpMaxTokens][BV];
  __shared__ float s_decay[kMtpMaxTokens];
  __shared__ float s_beta[kMtpMaxTokens];
#if BV == V
  __shared__ cs_u16 s_out[kMtpMaxTokens][V];
#else
  __shared__ int s_last;
#endif

  // Post-conv split: warp t prepares token t (normalized q, k; v of this tile; decay, beta).
  if (warp < n) {
    const cs_i64 tok = bos + warp;
    const cs_u16* row = mixed_qkv + tok * mixed_stride;
    float qv[kKpl], kv[kKpl];
    gd_load_bf16<kKpl>(row + key_head * K + lane * kKpl, qv);
    gd_load_bf16<kKpl>(row + H * K + key_head * K + lane * kKpl, kv);
    float s[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kKpl; ++j) {
      s[0] += qv[j] * qv[j];
      s[1] += kv[j] * kv[j];
    }
    gd_reduce_rows<2>(s);
    const float other = __shfl_xor_sync(cs_full_mask, s[0], 16);
    const float rq = rsqrtf((lane < 16 ? s[0] : other) + 1e-6f) * scale;
    const float rk = rsqrtf((lane < 16 ? other : s[0]) + 1e-6f);
#pragma unroll
    for (int j = 0; j < kKpl; ++j) {
      s_q[warp][lane * kKpl + j] = qv[j] * rq;
      s_k[warp][lane * kKpl + j] = kv[j] * rk;
    }
    const cs_u16* vrow = row + 2 * H * K + hv * V + tile * BV;
    for (int i = lane; i < BV; i += 32) s_v[warp][i] = cs_bf16_to_f32(vrow[i]);
    if (lane == 0) {
      const float x = cs_bf16_to_f32(a[tok * a_stride + hv]) + gd_to_f32(dt_bias[hv]);
      const float softplus = x > 20.0f ? x : log1pf(expf(x));
      s_decay[warp] = expf(-expf(A_log[hv]) * softplus);
      s_beta[warp] = 1.0f / (1.0f + expf(-cs_bf16_to_f32(b[tok * b_stride + hv])));
    }
  }
  __syncthreads();

  const int row_in_tile = warp * kRows;
  const int row0 = tile * BV + row_in_tile;
  const cs_i64 head_off = static_cast<cs_i64>(hv) * V * K + static_cast<cs_i64>(row0) * K + lane * kKpl;
  float h[kRows][kKpl];
  {
    const gd_state_t* p = state + static_cast<cs_i64>(src) * state_stride + head_off;
#pragma unroll
    for (int r = 0; r < kRows; ++r) gd_load_state<kKpl>(p + r * K, h[r]);
  }
  const int my_row = gd_reduced_row<kRows>(lane);
  const bool row_owner = (lane & (32 / kRows - 1)) == 0;

  for (int t = 0; t < n; ++t) {
    float qv[kKpl], kv[kKpl];
#pragma unroll
    for (int j = 0; j < kKpl; ++j) {
      qv[j] = s_q[t][lane * kKpl + j];
      kv[j] = s_k[t][lane * kKpl + j];
    }
    const float decay = s_decay[t];
    float dot[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kKpl; ++j) {
        h[r][j] *= decay;
        acc += h[r][j] * kv[j];
      }
      dot[r] = acc;
    }
    gd_reduce_rows<kRows>(dot);
    const float delta_mine = (s_v[t][row_in_tile + my_row] - dot[0]) * s_beta[t];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float delta = __shfl_sync(cs_full_mask, delta_mine, gd_lane_of_row<kRows>(r));
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kKpl; ++j) {
        h[r][j] += delta * kv[j];
        acc += h[r][j] * qv[j];
      }
      dot[r] = acc;
    }
    gd_reduce_rows<kRows>(dot);
    if (row_owner) {
#if BV == V
      s_out[t][row0 + my_row] = cs_f32_to_bf16(dot[0]);
#else
      out[((bos + t) * HV + hv) * V + row0 + my_row] = cs_f32_to_bf16(dot[0]);
#endif
    }
    const int dst = idx[t];
    if (dst > 0) {
      gd_state_t* p = state + static_cast<cs_i64>(dst) * state_stride + head_off;
#pragma unroll
      for (int r = 0; r < kRows; ++r) gd_store_state<kKpl>(p + r * K, h[r]);
    }
  }

#if BV == V
  __syncthreads();
  if (warp < n) {
    const cs_i64 tok = bos + warp;
    gd_mtp_norm_row([&](int c) { return cs_bf16_to_f32(s_out[warp][c]); },
                    output_gate + tok * gate_stride + hv * V, norm_weight,
                    out + (tok * HV + hv) * V, norm_eps);
  }
#else
  // Split-V normalization [inference, see above]: publish this tile's raw outputs, count the
  // arrival; the last tile of the (request, head) normalizes the full rows.
  __threadfence();
  __syncthreads();
  unsigned int* counter = &gdn_mtp_arrivals[req * HV + hv];
  if (tid == 0) s_last = atomicAdd(counter, 1u) == static_cast<unsigned int>(kTiles - 1);
  __syncthreads();
  if (!s_last) return;
  if (tid == 0) atomicExch(counter, 0u);  // ready for the next launch
  __threadfence();
  if (warp < n) {
    const cs_i64 tok = bos + warp;
    cs_u16* orow = out + (tok * HV + hv) * V;
    gd_mtp_norm_row([&](int c) { return cs_bf16_to_f32(__ldcg(orow + c)); },
                    output_gate + tok * gate_stride + hv * V, norm_weight, orow, norm_eps);
  }
#endif
}
