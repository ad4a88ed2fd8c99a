// tq_decode_stage2: reduces stage 1's per-split partial outputs into the attention output.
//
// Constexprs: HEAD_DIM, NUM_KV_SPLITS.
// Grid (B, Hq), 128 threads.
// Arguments, in order:
//   mid_o        float32 [B, Hq, NUM_KV_SPLITS, D + 1], contiguous (stage 1's output)
//   out          bf16 [B, Hq, D], element (b, h, d) at out[b*out_stride_b + h*out_stride_h + d]
//   lse          float32 [B, Hq], contiguous: natural-log LSE over all tokens (-inf, with a zero
//                output, when the sequence has no tokens)
//   out_stride_b, out_stride_h   int64, in elements
// Splits whose LSE is -inf (no tokens) get weight zero.
// The body is the split-KV reducer both decode families share (split_kv_decode.cuh).

#ifndef NUM_KV_SPLITS
#error "NUM_KV_SPLITS must be defined"
#endif

constexpr int kStage2Threads = 128;

extern "C" __global__ void __launch_bounds__(kStage2Threads)
tq_decode_stage2(const float* __restrict__ mid_o, cs_u16* __restrict__ out,
                 float* __restrict__ lse, cs_i64 out_stride_b, cs_i64 out_stride_h) {
  cs_split_kv_reduce<kD, NUM_KV_SPLITS, kStage2Threads>(mid_o, out, lse, out_stride_b,
                                                        out_stride_h);
}
