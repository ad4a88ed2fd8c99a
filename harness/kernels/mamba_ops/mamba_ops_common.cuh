// Mamba ops (causal conv1d, gated RMSNorm, state gather / scatter): device helpers shared by every
// kernel of the family. This text is prepended to each kernel's source (mamba_ops_kernels.cpp),
// so every NVRTC program is self-contained: no #include at all (no cuda_bf16.h), which keeps each
// compile well under a second.
//
// Element types are passed as dtype codes (constexprs derived from the pointer dtypes the compile
// key already carries, so they add no key distinction of their own):
//   0 = float32, 1 = float16, 2 = bfloat16.
// The codes (CS_F32 / CS_F16 / CS_BF16), their storage types and conversions (CsType) are
// device_common.cuh's, which every program starts with.

// A bf16 * bf16 product as Triton computes it (both operands bf16 -> a bf16 result): the fp32
// product of two bf16 values is exact, so rounding it once to bf16 is the correctly rounded
// bf16 multiply.
__device__ __forceinline__ float mo_bf16_mul(float a, float b) {
  return cs_round_bf16(a * b);
}

__device__ __forceinline__ float mo_sigmoid(float v) { return 1.0f / (1.0f + __expf(-v)); }

// x / (1 + exp(-x)), the form vLLM's conv kernels write.
__device__ __forceinline__ float mo_silu(float v) { return v / (1.0f + __expf(-v)); }

// Programmatic dependent launch (Triton's tl.extra.cuda.gdc_wait / gdc_launch_dependents): wait
// for the grid this launch depends on, then let dependents start. Hopper and later only; without
// a programmatic launch attribute on this launch (the harness launcher sets none) the wait returns
// at once, so the kernels are correct either way.
__device__ __forceinline__ void mo_gdc_wait_and_launch_dependents() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
