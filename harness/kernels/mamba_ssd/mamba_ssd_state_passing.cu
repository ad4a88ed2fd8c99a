// _state_passing_fwd_kernel (batch-parallel form of vLLM PR #35397): per sequence b and head h,
// over b's chunks c = last_chunk_indices[b-1] + 1 .. last_chunk_indices[b] in order,
//   s = exp(dA_cs[h, c, chunk_size - 1]) * s + states[c, h, :];   out[c, h, :] = s
// starting from s = initstates[b, h, :] (HAS_INITSTATES) or 0, s kept in f32 and each out row
// stored in the state dtype (OUT_DTYPE). The flattened state is dim = P * N elements; one block
// per (BLOCK_SIZE slice of it, sequence, head).
// Arguments (vLLM's order): states f32, out (OUT_DTYPE), dA_cs f32, initstates (INIT_DTYPE; null
// without HAS_INITSTATES), last_chunk_indices int32 [B], then the tl.int64 strides
// stride_states_chunk, stride_states_head, stride_out_chunk, stride_out_head, stride_dA_cs_head,
// stride_dA_cs_chunk, stride_initstates_batch, stride_initstates_head. Constexprs: dim,
// chunk_size, the constexpr strides, HAS_INITSTATES, BLOCK_SIZE, NUM_WARPS, NUM_STAGES,
// OUT_DTYPE, INIT_DTYPE.
constexpr int kPerThread = (BLOCK_SIZE + kMsThreads - 1) / kMsThreads;
typedef MsType<OUT_DTYPE> MsOut;
typedef MsType<INIT_DTYPE> MsInit;

extern "C" __global__ void __launch_bounds__(kMsThreads)
    mamba_ssd_state_passing(const float* __restrict__ states, typename MsOut::T* __restrict__ out,
                            const float* __restrict__ dA_cs,
                            const typename MsInit::T* __restrict__ initstates,
                            const int* __restrict__ last_chunk_indices, cs_i64 stride_states_chunk,
                            cs_i64 stride_states_head, cs_i64 stride_out_chunk,
                            cs_i64 stride_out_head, cs_i64 stride_dA_cs_head,
                            cs_i64 stride_dA_cs_chunk, cs_i64 stride_initstates_batch,
                            cs_i64 stride_initstates_head) {
  const int pid_m = blockIdx.x, pid_b = blockIdx.y, pid_h = blockIdx.z;
  const cs_i64 chunk_end = static_cast<cs_i64>(last_chunk_indices[pid_b]) + 1;
  const cs_i64 chunk_start = pid_b > 0 ? static_cast<cs_i64>(last_chunk_indices[pid_b - 1]) + 1 : 0;
  cs_i64 offs[kPerThread];
  bool ok[kPerThread];
  float s[kPerThread];
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int i = threadIdx.x + e * kMsThreads;
    offs[e] = static_cast<cs_i64>(pid_m) * BLOCK_SIZE + i;
    ok[e] = i < BLOCK_SIZE && offs[e] < dim;
    s[e] = 0.f;
    if (HAS_INITSTATES && ok[e]) {
      s[e] =
          MsInit::load(initstates[pid_b * stride_initstates_batch + pid_h * stride_initstates_head +
                                  offs[e] * stride_initstates_dim]);
    }
  }
  const float* da = dA_cs + pid_h * stride_dA_cs_head + (chunk_size - 1) * stride_dA_cs_csize;
  for (cs_i64 c = chunk_start; c < chunk_end; ++c) {
    const float decay = ms_fast_exp(da[c * stride_dA_cs_chunk]);
    const float* in = states + c * stride_states_chunk + pid_h * stride_states_head;
    typename MsOut::T* o = out + c * stride_out_chunk + pid_h * stride_out_head;
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      if (!ok[e]) continue;
      s[e] = decay * s[e] + in[offs[e] * stride_states_dim];
      o[offs[e] * stride_out_dim] = MsOut::store(s[e]);
    }
  }
}
