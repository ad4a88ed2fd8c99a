// mamba_scatter_states: state[indices[b]] = src[b] (converted to the state's dtype), one dense row
// of ROW_SIZE elements per batch entry (vLLM's _scatter_states_kernel,
// vllm/model_executor/layers/mamba/ops/scatter_states.py; commit in mamba_ops_kernels.h).
//
// Grid (cdiv(ROW_SIZE, BLOCK_SIZE), n), 256 threads (num_warps = 8); as the gather.
// Constexprs: ROW_SIZE, BLOCK_SIZE, LAUNCH_PDL (vLLM's); SRC_DTYPE, STATE_DTYPE, INDEX_BITS
// derived from the pointer dtypes. float32 -> bf16 / f16 rounds to nearest even (Triton's store
// cast).
// Arguments, in order:
//   state    STATE_DTYPE, row s at state + s*stride_state_batch (dense row)
//   src      SRC_DTYPE, row b at src + b*stride_src_batch (dense row)
//   indices  int32 / int64, entry b at indices[b*stride_indices]; distinct slots
//   stride_state_batch, stride_src_batch, stride_indices   int64, elements

constexpr int kThreads = 256;
#if INDEX_BITS == 64
typedef long long mo_index_t;
#else
typedef int mo_index_t;
#endif
typedef CsType<STATE_DTYPE> mo_dst;
typedef CsType<SRC_DTYPE> mo_src;

extern "C" __global__ void __launch_bounds__(kThreads)
mamba_scatter_states(typename mo_dst::T* __restrict__ state,
                     const typename mo_src::T* __restrict__ src,
                     const mo_index_t* __restrict__ indices, cs_i64 stride_state_batch,
                     cs_i64 stride_src_batch, cs_i64 stride_indices) {
  const int block = blockIdx.x;
  const cs_i64 b = blockIdx.y;
#if LAUNCH_PDL
  mo_gdc_wait_and_launch_dependents();
#endif
  const cs_i64 idx = static_cast<cs_i64>(indices[b * stride_indices]);
  typename mo_dst::T* dst = state + idx * stride_state_batch;
  const typename mo_src::T* s = src + b * stride_src_batch;
  for (int e = threadIdx.x; e < BLOCK_SIZE; e += kThreads) {
    const cs_i64 off = static_cast<cs_i64>(block) * BLOCK_SIZE + e;
    if (off >= ROW_SIZE) continue;
    if constexpr (SRC_DTYPE == STATE_DTYPE) {
      dst[off] = *reinterpret_cast<const typename mo_dst::T*>(s + off);
    } else {
      dst[off] = mo_dst::store(mo_src::load(s[off]));
    }
  }
}
