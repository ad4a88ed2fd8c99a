// moe_grouped_topk: sigmoid router with an expert-score correction bias and grouped top-k, the
// routing of DeepSeek-V3-style and NemotronH MoE layers. Mirrors vLLM's ahead-of-time CUDA op
// _moe_C.grouped_topk with scoring_func 1 (sigmoid): csrc/libtorch_stable/moe/
// grouped_topk_kernels.cu at vllm-project/vllm a89c2e3989b1 (invokeNoAuxTc and its two kernels,
// grouped_topk_fused_small_expert_count_kernel and grouped_topk_fused_kernel; the top-k reduction
// is csrc/libtorch_stable/moe/moeTopKFuncs.cuh at 64f818893418), called from
// fused_grouped_topk in vllm/model_executor/layers/fused_moe/router/grouped_topk_router.py.
// Per token, in float32:
//   score[e]  = sigmoid(logit[e]), computed as 0.5 * tanh(0.5 x) + 0.5 (vLLM's sigmoid_accurate)
//   biased[e] = score[e] + bias[e]
//   N_GROUP > 1: a group's score is the sum of its two largest biased scores (equal values count
//     twice); the TOPK_GROUP best groups are kept (equal group scores: lower group first) and the
//     other groups' experts are not eligible. N_GROUP == 1 keeps every expert (vLLM's
//     single-group kernel does no group step).
//   ids: the TOP_K eligible experts of largest biased score, in descending order; equal biased
//     scores go to the lower expert index (vLLM packs (value, 65535 - index) into one key).
//   weights: the UNBIASED score[id] * routed_scaling_factor, divided by (sum of the TOP_K unbiased
//     scores + 1e-20) when RENORMALIZE.
// Left out: vLLM's fallback when the k-th selected group score is -inf (ids 0..k-1, weights 1/k)
// is not reproduced; logits here are finite. routed_scaling_factor is a double in vLLM and a
// float here (NemotronH passes 1.0 and scales the routed output instead).
//
// AOT kernel: every argument is in do_not_specialize (fused_moe_kernels.cpp). Constexprs:
// NUM_EXPERTS (E <= 1024), TOP_K (<= 32, vLLM's limit), N_GROUP (<= 32, divides E), TOPK_GROUP
// (1..N_GROUP), RENORMALIZE (0/1). Logits are float32 (vLLM's routers hand it float32 logits:
// GateLinear out_dtype); the bias is float32 (NemotronH's e_score_correction_bias).
// One warp per token, 4 warps a block; grid x = ceil(num_tokens / 4).
// Arguments, in order:
//   logits        float32 [num_tokens, E], row r at logits + r * logits_stride
//   bias          float32 [E], contiguous
//   topk_weights  float32 [num_tokens, TOP_K], contiguous
//   topk_ids      int32 [num_tokens, TOP_K], contiguous
//   num_tokens    int32
//   logits_stride int64, elements
//   routed_scaling_factor  float32

#if !defined(NUM_EXPERTS) || !defined(TOP_K) || !defined(N_GROUP) || !defined(TOPK_GROUP) || \
    !defined(RENORMALIZE)
#error "NUM_EXPERTS, TOP_K, N_GROUP, TOPK_GROUP and RENORMALIZE must be defined"
#endif
#if NUM_EXPERTS < 1 || NUM_EXPERTS > 1024
#error "NUM_EXPERTS must be in [1, 1024]"
#endif
#if TOP_K < 1 || TOP_K > 32 || N_GROUP < 1 || N_GROUP > 32 || TOPK_GROUP < 1 || TOPK_GROUP > N_GROUP
#error "TOP_K and N_GROUP must be in [1, 32], TOPK_GROUP in [1, N_GROUP]"
#endif
#if NUM_EXPERTS % N_GROUP != 0 || TOP_K > TOPK_GROUP * (NUM_EXPERTS / N_GROUP)
#error "N_GROUP must divide NUM_EXPERTS and TOP_K must be <= TOPK_GROUP * NUM_EXPERTS / N_GROUP"
#endif

constexpr int kGtWarps = 4;
constexpr int kGtPerLane = (NUM_EXPERTS + 31) / 32;  // expert e lives in lane e % 32, slot e / 32
constexpr int kGtPerGroup = NUM_EXPERTS / N_GROUP;

// The larger of two (value, index) candidates: larger value, then lower index. NaN ranks above
// every number, as in torch.topk, so a NaN score still selects a real expert id (a comparison
// that is never true would leave the sentinel id and send the GEMM out of bounds).
__device__ __forceinline__ bool gt_better(float v, int e, float bv, int be) {
  const bool vn = v != v, bn = bv != bv;
  if (vn || bn) return vn && (!bn || e < be);
  return v > bv || (v == bv && e < be);
}

// (a1 >= a2) and (b1 >= b2): the two largest of the four values, kept in (a1, a2).
__device__ __forceinline__ void gt_top2_merge(float& a1, float& a2, float b1, float b2) {
  if (b1 > a1) {
    a2 = fmaxf(a1, b2);
    a1 = b1;
  } else {
    a2 = fmaxf(a2, b1);
  }
}

extern "C" __global__ void __launch_bounds__(kGtWarps * 32)
moe_grouped_topk(const float* __restrict__ logits, const float* __restrict__ bias,
                 float* __restrict__ topk_weights, cs_i32* __restrict__ topk_ids,
                 cs_i32 num_tokens, cs_i64 logits_stride, float routed_scaling_factor) {
  const int lane = threadIdx.x & 31;
  const cs_i64 row = static_cast<cs_i64>(blockIdx.x) * kGtWarps + (threadIdx.x >> 5);
  if (row >= num_tokens) return;

  float score[kGtPerLane];   // unbiased sigmoid scores
  float biased[kGtPerLane];  // score + bias: what the selection ranks
#pragma unroll
  for (int i = 0; i < kGtPerLane; ++i) {
    const int e = lane + 32 * i;
    score[i] = 0.0f;
    biased[i] = cs_neg_inf();
    if (e < NUM_EXPERTS) {
      const float x = logits[row * logits_stride + e];
      score[i] = 0.5f * tanhf(0.5f * x) + 0.5f;
      biased[i] = score[i] + bias[e];
    }
  }

  // Eligible experts: bit i of `eligible` is expert lane + 32 i (groups drop some).
  unsigned eligible = 0u;
#pragma unroll
  for (int i = 0; i < kGtPerLane; ++i) {
    if (lane + 32 * i < NUM_EXPERTS) eligible |= 1u << i;
  }
#if N_GROUP > 1
  // Group scores: the sum of each group's two largest biased scores; every lane holds them all.
  float gscore[N_GROUP];
#pragma unroll
  for (int g = 0; g < N_GROUP; ++g) {
    float t1 = cs_neg_inf();
    float t2 = cs_neg_inf();
#pragma unroll
    for (int i = 0; i < kGtPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < NUM_EXPERTS && e / kGtPerGroup == g) gt_top2_merge(t1, t2, biased[i], cs_neg_inf());
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float o1 = __shfl_xor_sync(cs_full_mask, t1, o);
      const float o2 = __shfl_xor_sync(cs_full_mask, t2, o);
      gt_top2_merge(t1, t2, o1, o2);
    }
    gscore[g] = t1 + t2;
  }
  unsigned chosen_groups = 0u;
  for (int r = 0; r < TOPK_GROUP; ++r) {
    int best_g = -1;
    float best = cs_neg_inf();
#pragma unroll
    for (int g = 0; g < N_GROUP; ++g) {
      if (!(chosen_groups & (1u << g)) && (best_g < 0 || gscore[g] > best)) {
        best = gscore[g];
        best_g = g;
      }
    }
    chosen_groups |= 1u << best_g;
  }
#pragma unroll
  for (int i = 0; i < kGtPerLane; ++i) {
    const int e = lane + 32 * i;
    if (e < NUM_EXPERTS && !(chosen_groups & (1u << (e / kGtPerGroup)))) eligible &= ~(1u << i);
  }
#endif

  // TOP_K rounds of a warp arg-max over the eligible biased scores; lane k keeps pick k.
  float my_weight = 0.0f;
  int my_id = 0;
  float picked_sum = 0.0f;
  for (int k = 0; k < TOP_K; ++k) {
    float best = cs_neg_inf();
    int best_e = 0x7fffffff;
    float best_score = 0.0f;
#pragma unroll
    for (int i = 0; i < kGtPerLane; ++i) {
      const int e = lane + 32 * i;
      if ((eligible & (1u << i)) && gt_better(biased[i], e, best, best_e)) {
        best = biased[i];
        best_e = e;
        best_score = score[i];
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(cs_full_mask, best, o);
      const int oe = __shfl_xor_sync(cs_full_mask, best_e, o);
      const float os = __shfl_xor_sync(cs_full_mask, best_score, o);
      if (gt_better(ob, oe, best, best_e)) {
        best = ob;
        best_e = oe;
        best_score = os;
      }
    }
    if (best_e < NUM_EXPERTS && (best_e & 31) == lane) {
      eligible &= ~(1u << (best_e >> 5));  // the owner drops the winner
    }
    picked_sum += best_score;
    if (lane == k) {
      my_weight = best_score;
      my_id = best_e;
    }
  }
  if (lane < TOP_K) {
    float w = my_weight * routed_scaling_factor;
#if RENORMALIZE
    w = w / (picked_sum + 1e-20f);
#endif
    topk_weights[row * TOP_K + lane] = w;
    topk_ids[row * TOP_K + lane] = my_id;
  }
}
