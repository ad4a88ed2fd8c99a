// paged_cache_store: writes N tokens of K and V into the paged cache (vLLM's
// reshape_and_cache_flash).
//
// Constexprs: HEAD_DIM, CACHE_DTYPE (0 bf16, 1 fp8 e4m3; see paged_common.cuh).
// Grid (N, Hk), 128 threads; thread d handles coordinates d, d + 128 of token blockIdx.x, head
// blockIdx.y.
// Arguments, in order:
//   key            bf16 [N, Hk, D], element (t, h, d) at key[t*key_stride_t + h*key_stride_h + d]
//   value          bf16 [N, Hk, D], same with value_stride_*
//   slot_mapping   int64 [N]: cache slot of token t; negative (-1, padding) = do not store
//   key_cache      [num_blocks, block_size, Hk, D] of the cache's element type (kv_cache[0])
//   value_cache    same (kv_cache[1])
//   k_scale        float32 [1] (fp8: stored = e4m3(k / k_scale), saturating; bf16: not read)
//   v_scale        float32 [1] (same for V)
//   key_stride_t, key_stride_h, value_stride_t, value_stride_h   int64, in elements
//   block_size     int32, tokens per cache block
//   block_stride   int64, elements between two blocks of key_cache / value_cache (vLLM's
//                  reshape_and_cache_flash takes the same two as runtime arguments)

constexpr int kStoreThreads = 128;

extern "C" __global__ void __launch_bounds__(kStoreThreads)
paged_cache_store(const cs_u16* __restrict__ key, const cs_u16* __restrict__ value,
                  const cs_i64* __restrict__ slot_mapping, pa_cache_t* __restrict__ key_cache,
                  pa_cache_t* __restrict__ value_cache, const float* __restrict__ k_scale,
                  const float* __restrict__ v_scale, cs_i64 key_stride_t, cs_i64 key_stride_h,
                  cs_i64 value_stride_t, cs_i64 value_stride_h, int block_size,
                  cs_i64 block_stride) {
  const int token = blockIdx.x;
  const int head = blockIdx.y;
  const int num_kv_heads = gridDim.y;
  const cs_i64 slot = slot_mapping[token];
  if (slot < 0) return;  // uniform over the block

  const cs_u16* kp = key + token * key_stride_t + head * key_stride_h;
  const cs_u16* vp = value + token * value_stride_t + head * value_stride_h;
  const cs_i64 off =
      pa_cache_offset(slot / block_size, static_cast<int>(slot % block_size), block_stride,
                      num_kv_heads, head);
  if constexpr (kCacheFp8) {
    const float ks = *k_scale;
    const float vs = *v_scale;
    for (int d = threadIdx.x; d < kD; d += kStoreThreads) {
      key_cache[off + d] = cs_f32_to_e4m3(cs_bf16_to_f32(kp[d]) / ks);
      value_cache[off + d] = cs_f32_to_e4m3(cs_bf16_to_f32(vp[d]) / vs);
    }
  } else {
    for (int d = threadIdx.x; d < kD; d += kStoreThreads) {
      key_cache[off + d] = kp[d];
      value_cache[off + d] = vp[d];
    }
  }
}
