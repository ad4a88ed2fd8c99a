// moe_align_block_size: groups the (token, k) pairs by expert, each expert's group padded to a
// multiple of block_size, for the grouped GEMM. Mirrors vLLM's ahead-of-time CUDA op
// _moe_C.moe_align_block_size (csrc/moe/moe_align_sum_kernels.cu, moe_align_block_size_kernel,
// vllm-project/vllm 1377b4e02fb7) and its Python caller
// (vllm/model_executor/layers/fused_moe/moe_align_block_size.py):
//   - pair i (= token * top_k + k, the flat index into topk_ids) with expert e in [0, E) is
//     counted; ids outside [0, E) are skipped (vLLM skips ids >= E);
//   - each expert's count is rounded up to block_size, and an exclusive prefix sum gives the
//     experts' segments; num_tokens_post_padded = the total;
//   - expert_ids[b] = the expert of block b for b < total / block_size; the remaining blocks
//     (up to cdiv(max_num_tokens_padded, block_size)) get 0, as vLLM's kernel writes;
//   - sorted_token_ids is first filled with numel (the padding sentinel), then every pair is
//     written at its expert's next free slot. Inside one expert's segment the pairs' order
//     depends on atomics (vLLM's large-batch kernel uses atomicAdd as well).
//
// AOT kernel: every argument in do_not_specialize. Constexpr: NUM_EXPERTS (E <= 1024).
// One block of 1024 threads.
// Arguments, in order:
//   topk_ids               int32 [numel], contiguous (topk_ids [M, top_k] flattened)
//   sorted_token_ids       int32 [max_num_tokens_padded]
//   expert_ids             int32 [cdiv(max_num_tokens_padded, block_size)]
//   num_tokens_post_padded int32 [1]
//   numel, block_size, max_num_tokens_padded   int32

#ifndef NUM_EXPERTS
#error "NUM_EXPERTS must be defined"
#endif
#if NUM_EXPERTS < 1 || NUM_EXPERTS > 1024
#error "NUM_EXPERTS must be in [1, 1024]"
#endif

constexpr int kAlignThreads = 1024;

extern "C" __global__ void __launch_bounds__(kAlignThreads)
moe_align_block_size(const cs_i32* __restrict__ topk_ids, cs_i32* __restrict__ sorted_token_ids,
                     cs_i32* __restrict__ expert_ids, cs_i32* __restrict__ num_tokens_post_padded,
                     cs_i32 numel, cs_i32 block_size, cs_i32 max_num_tokens_padded) {
  __shared__ cs_i32 s_count[NUM_EXPERTS];       // counts, then the scatter cursors
  __shared__ cs_i32 s_start[NUM_EXPERTS + 1];   // exclusive prefix sum of padded counts
  __shared__ cs_i32 s_warp[32];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  for (int i = tid; i < max_num_tokens_padded; i += kAlignThreads) sorted_token_ids[i] = numel;
  for (int e = tid; e < NUM_EXPERTS; e += kAlignThreads) s_count[e] = 0;
  __syncthreads();

  for (int i = tid; i < numel; i += kAlignThreads) {
    const int e = topk_ids[i];
    if (e >= 0 && e < NUM_EXPERTS) atomicAdd(&s_count[e], 1);
  }
  __syncthreads();

  // Block-wide exclusive scan of the padded counts (one expert per thread, E <= 1024).
  const int padded =
      tid < NUM_EXPERTS ? (s_count[tid] + block_size - 1) / block_size * block_size : 0;
  int incl = padded;
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(cs_full_mask, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) s_warp[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int w = s_warp[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(cs_full_mask, w, o);
      if (lane >= o) w += n;
    }
    s_warp[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  const int excl = incl - padded + (warp > 0 ? s_warp[warp - 1] : 0);
  if (tid < NUM_EXPERTS) s_start[tid] = excl;
  if (tid == NUM_EXPERTS - 1) {
    s_start[NUM_EXPERTS] = excl + padded;
    num_tokens_post_padded[0] = excl + padded;
  }
  __syncthreads();

  if (tid < NUM_EXPERTS) {
    for (int i = s_start[tid]; i < s_start[tid + 1]; i += block_size) expert_ids[i / block_size] = tid;
    s_count[tid] = s_start[tid];  // scatter cursor
  }
  const int max_blocks = (max_num_tokens_padded + block_size - 1) / block_size;
  for (int b = s_start[NUM_EXPERTS] / block_size + tid; b < max_blocks; b += kAlignThreads) {
    expert_ids[b] = 0;
  }
  __syncthreads();

  for (int i = tid; i < numel; i += kAlignThreads) {
    const int e = topk_ids[i];
    if (e >= 0 && e < NUM_EXPERTS) sorted_token_ids[atomicAdd(&s_count[e], 1)] = i;
  }
}
