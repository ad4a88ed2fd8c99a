// moe_sum: out[m, h] = sum over k of input[m, k, h], the final reduction over a token's top-k
// expert outputs (already multiplied by their router weights in the second GEMM). Mirrors vLLM's
// ahead-of-time op _moe_C.moe_sum (csrc/moe/moe_align_sum_kernels.cu, vllm-project/vllm
// 1377b4e02fb7): for top_k 2, 3 and 4 vLLM runs moe_sum_kernel<scalar_t, TOPK>, which adds in the
// element type (bf16: rounded after every addition); for any other top_k (Qwen3-Next's 10) it
// calls at::sum_out(output, input, 1), which accumulates bf16 in float32 and rounds once. This
// kernel does the same per TOP_K (a libtorch op is not used so that the step stays one
// runtime-compiled kernel; the numbers match at::sum_out's up to summation order).
//
// AOT kernel: every argument in do_not_specialize. Constexpr: TOP_K.
// Grid x = num_tokens, 256 threads a block.
// Arguments, in order:
//   out         bf16 [num_tokens, d], row m at out + m * out_stride
//   input       bf16 [num_tokens, TOP_K, d], contiguous
//   d           int32
//   out_stride  int64, elements

#ifndef TOP_K
#error "TOP_K must be defined"
#endif

constexpr int kSumThreads = 256;

extern "C" __global__ void __launch_bounds__(kSumThreads)
moe_sum(cs_u16* __restrict__ out, const cs_u16* __restrict__ input, cs_i32 d, cs_i64 out_stride) {
  const cs_i64 m = blockIdx.x;
  const cs_u16* in = input + m * TOP_K * static_cast<cs_i64>(d);
  for (int j = threadIdx.x; j < d; j += kSumThreads) {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < TOP_K; ++k) {
      acc += cs_bf16_to_f32(in[static_cast<cs_i64>(k) * d + j]);
#if TOP_K >= 2 && TOP_K <= 4
      acc = cs_round_bf16(acc);  // vLLM's moe_sum_kernel adds in bf16
#endif
    }
    out[m * out_stride + j] = cs_f32_to_bf16(acc);
  }
}
