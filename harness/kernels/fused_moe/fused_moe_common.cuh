// Fused MoE (vLLM's unquantized Triton fused_experts path): device helpers shared by every
// fused_moe kernel. This text is prepended to each kernel file at build time (fused_moe_kernels.cpp),
// so every NVRTC program is self-contained: no #include at all.
//
// Number formats are handled bit by bit (bf16 = the upper 16 bits of a float), so the programs
// need neither cuda_bf16.h nor any other header. Tensor-core and async-copy instructions are
// inline PTX (mma.sync m16n8k16 bf16 and cp.async exist on sm_80 and every later arch).

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

// ---- tensor cores -----------------------------------------------------------------------------

// Four 8x8 b16 matrices from shared memory (row addresses given per lane).
__device__ __forceinline__ void fm_ldmatrix_x4(cs_u32 (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(cs_smem_addr(p)));
}

__device__ __forceinline__ void fm_ldmatrix_x2(cs_u32 (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(cs_smem_addr(p)));
}

// D = A (16x16 bf16, row) * B (16x8 bf16, col) + D, fp32 accumulate.
__device__ __forceinline__ void fm_mma_bf16(float (&d)[4], const cs_u32 (&a)[4],
                                            const cs_u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
