// mamba_gather_initial_states: out[b] = has_initial_state[b] ? state[indices[b]] : 0, one dense
// state row (ROW_SIZE elements) per batch entry (vLLM's _gather_initial_states_kernel,
// vllm/model_executor/layers/mamba/ops/gather_initial_states.py; commit in mamba_ops_kernels.h).
//
// Grid (cdiv(ROW_SIZE, BLOCK_SIZE), n), 256 threads (vLLM's num_warps = 8); thread t copies
// elements t, t + 256, ... of its block of BLOCK_SIZE. LAUNCH_PDL waits on the previous grid
// (griddepcontrol) before reading, as vLLM's gdc_wait.
// Constexprs: ROW_SIZE, BLOCK_SIZE, LAUNCH_PDL (vLLM's); STATE_DTYPE and INDEX_BITS (32 / 64),
// derived from the state and indices pointer dtypes (no key distinction of their own).
// Arguments, in order:
//   state              STATE_DTYPE, row s at state + s*stride_state_batch (dense row)
//   indices            int32 / int64, entry b at indices[b*stride_indices]
//   has_initial_state  bool (one byte), entry b at [b*stride_has_initial_state]
//   out                STATE_DTYPE [n, ROW_SIZE], contiguous
//   stride_state_batch, stride_indices, stride_has_initial_state   int64, elements

constexpr int kThreads = 256;
#if INDEX_BITS == 64
typedef long long mo_index_t;
#else
typedef int mo_index_t;
#endif
typedef typename CsType<STATE_DTYPE>::T mo_state_t;

extern "C" __global__ void __launch_bounds__(kThreads)
mamba_gather_initial_states(const mo_state_t* __restrict__ state,
                            const mo_index_t* __restrict__ indices,
                            const unsigned char* __restrict__ has_initial_state,
                            mo_state_t* __restrict__ out, cs_i64 stride_state_batch,
                            cs_i64 stride_indices, cs_i64 stride_has_initial_state) {
  const int block = blockIdx.x;
  const cs_i64 b = blockIdx.y;
#if LAUNCH_PDL
  mo_gdc_wait_and_launch_dependents();
#endif
  const bool has = has_initial_state[b * stride_has_initial_state] != 0;
  cs_i64 idx = static_cast<cs_i64>(indices[b * stride_indices]);
  if (!has) idx = 0;
  const mo_state_t* src = state + idx * stride_state_batch;
  mo_state_t* dst = out + b * ROW_SIZE;
  for (int e = threadIdx.x; e < BLOCK_SIZE; e += kThreads) {
    const cs_i64 off = static_cast<cs_i64>(block) * BLOCK_SIZE + e;
    if (off < ROW_SIZE) dst[off] = has ? src[off] : static_cast<mo_state_t>(0);
  }
}
