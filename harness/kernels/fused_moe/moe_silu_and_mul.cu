// moe_silu_and_mul: out[t, j] = silu(x[t, j]) * x[t, d + j] for j < d, the activation between the
// two expert GEMMs. Mirrors vLLM's ahead-of-time CUDA op _C.silu_and_mul
// (csrc/activation_kernels.cu, act_and_mul_kernel with silu_kernel, vllm-project/vllm
// 5500c76dce90): silu is computed in float32 as x / (1 + exp(-x)) and rounded to the element
// type, then multiplied by the up projection and rounded again (bf16 * bf16 in vLLM's kernel).
//
// AOT kernel: every argument in do_not_specialize; no constexpr (bf16 only).
// Grid x = num_tokens, 256 threads a block.
// Arguments, in order:
//   out         bf16 [num_tokens, d], row t at out + t * out_stride
//   input       bf16 [num_tokens, 2 * d], row t at input + t * in_stride
//   d           int32
//   out_stride, in_stride   int64, elements

constexpr int kActThreads = 256;

extern "C" __global__ void __launch_bounds__(kActThreads)
moe_silu_and_mul(cs_u16* __restrict__ out, const cs_u16* __restrict__ input, cs_i32 d,
                 cs_i64 out_stride, cs_i64 in_stride) {
  const cs_i64 t = blockIdx.x;
  const cs_u16* x = input + t * in_stride;
  cs_u16* o = out + t * out_stride;
  for (int j = threadIdx.x; j < d; j += kActThreads) {
    const float g = cs_bf16_to_f32(x[j]);
    const float u = cs_bf16_to_f32(x[d + j]);
    const float act = cs_round_bf16(g / (1.0f + expf(-g)));
    o[j] = cs_f32_to_bf16(act * u);
  }
}
