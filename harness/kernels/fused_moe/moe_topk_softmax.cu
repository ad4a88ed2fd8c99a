// moe_topk_softmax: router softmax over the experts, then the top-k experts of each token.
// Mirrors vLLM's ahead-of-time CUDA op _moe_C.topk_softmax (csrc/moe/topk_softmax_kernels.cu,
// vllm-project/vllm ad4715551f2b): softmax in float32 with expf after subtracting the row max,
// then k rounds of arg-max where equal probabilities go to the lower expert index; with
// RENORMALIZE the k weights are divided by their sum (vLLM's renormalize / norm_topk_prob).
//
// AOT kernel: every argument is in do_not_specialize (fused_moe_kernels.cpp), so the compile key
// only depends on the constexprs (one binary per shape family, as vLLM's op is built once).
// Constexprs: NUM_EXPERTS (E), TOP_K, RENORMALIZE (0/1), INPUT_DTYPE (0 = float32, 1 = bf16).
// One warp per token, 4 warps a block; grid x = ceil(num_tokens / 4).
// Arguments, in order:
//   gating        float32 or bf16 [num_tokens, E], row r at gating + r * gating_stride
//   topk_weights  float32 [num_tokens, TOP_K], contiguous
//   topk_ids      int32 [num_tokens, TOP_K], contiguous
//   num_tokens    int32
//   gating_stride int64, elements

#if !defined(NUM_EXPERTS) || !defined(TOP_K) || !defined(RENORMALIZE) || !defined(INPUT_DTYPE)
#error "NUM_EXPERTS, TOP_K, RENORMALIZE and INPUT_DTYPE must be defined"
#endif
#if TOP_K < 1 || TOP_K > NUM_EXPERTS
#error "TOP_K must be in [1, NUM_EXPERTS]"
#endif

constexpr int kTsWarps = 4;
constexpr int kTsPerLane = (NUM_EXPERTS + 31) / 32;

extern "C" __global__ void __launch_bounds__(kTsWarps * 32)
moe_topk_softmax(const void* __restrict__ gating, float* __restrict__ topk_weights,
                 cs_i32* __restrict__ topk_ids, cs_i32 num_tokens, cs_i64 gating_stride) {
  const int lane = threadIdx.x & 31;
  const cs_i64 row = static_cast<cs_i64>(blockIdx.x) * kTsWarps + (threadIdx.x >> 5);
  if (row >= num_tokens) return;

  float v[kTsPerLane];
  float mx = cs_neg_inf();
#pragma unroll
  for (int i = 0; i < kTsPerLane; ++i) {
    const int e = lane + 32 * i;
    float x = cs_neg_inf();
    if (e < NUM_EXPERTS) {
#if INPUT_DTYPE == 1
      x = cs_bf16_to_f32(static_cast<const cs_u16*>(gating)[row * gating_stride + e]);
#else
      x = static_cast<const float*>(gating)[row * gating_stride + e];
#endif
    }
    v[i] = x;
    mx = fmaxf(mx, x);
  }
  mx = cs_warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kTsPerLane; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < NUM_EXPERTS ? expf(v[i] - mx) : 0.0f;
    sum += v[i];
  }
  sum = cs_warp_sum(sum);
  const float inv = 1.0f / sum;
#pragma unroll
  for (int i = 0; i < kTsPerLane; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < NUM_EXPERTS ? v[i] * inv : -1.0f;  // probabilities are >= 0; -1 = out of range
  }

  float picked_sum = 0.0f;
  float my_weight = 0.0f;  // lane k < TOP_K keeps the k-th weight
  int my_id = 0;
  for (int k = 0; k < TOP_K; ++k) {
    float best = -2.0f;
    int best_e = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < kTsPerLane; ++i) {
      if (v[i] > best) {  // ascending e within a lane: strict '>' keeps the lower index
        best = v[i];
        best_e = lane + 32 * i;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(cs_full_mask, best, o);
      const int oe = __shfl_xor_sync(cs_full_mask, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) {
        best = ob;
        best_e = oe;
      }
    }
    picked_sum += best;
#pragma unroll
    for (int i = 0; i < kTsPerLane; ++i) {
      if (lane + 32 * i == best_e) v[i] = -1.0f;  // the owner drops the winner
    }
    if (lane == (k & 31)) {
      my_weight = best;
      my_id = best_e;
    }
    if (k % 32 == 31 || k == TOP_K - 1) {  // flush a batch of 32 picks
      const int base = k - (k & 31);
      if (lane <= (k & 31)) {
        topk_ids[row * TOP_K + base + lane] = my_id;
        topk_weights[row * TOP_K + base + lane] = my_weight;
      }
    }
  }
#if RENORMALIZE
  // Each lane rescales the entries it wrote itself.
  const float scale = 1.0f / picked_sum;
  for (int k = lane; k < TOP_K; k += 32) topk_weights[row * TOP_K + k] *= scale;
#endif
}
