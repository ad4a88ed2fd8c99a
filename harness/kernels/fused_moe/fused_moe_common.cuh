// Fused MoE (vLLM's unquantized Triton fused_experts path): device helpers shared by every
// fused_moe kernel. This text is prepended to each kernel file at build time (fused_moe_kernels.cpp),
// so every NVRTC program is self-contained: no #include at all.
//
// Number formats are handled bit by bit (bf16 = the upper 16 bits of a float), so the programs
// need neither cuda_bf16.h nor any other header. Async copies are inline PTX here (cp.async
// exists on sm_80 and every later arch); ldmatrix and mma.sync are device_common.cuh's.

// ---- async copies (sm_80+) --------------------------------------------------------------------

// 16-byte global -> shared copy; `valid` false writes 16 zero bytes (src-size 0), `src` must
// still be a mapped address.
__device__ __forceinline__ void fm_cp_async16(void* smem, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(cs_smem_addr(smem)),
               "l"(src), "r"(n));
}

__device__ __forceinline__ void fm_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void fm_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

