// get_paged_mqa_logits_metadata: the schedule of the paged (decode) indexer logits kernel
// (DeepGEMM deep_gemm/include/deep_gemm/scheduler/paged_mqa_logits.cuh, non-varlen path).
//
// A task is (q_atom, kv_split): a 256-token (SPLIT_KV) slice of one batch row's context for its
// next_n query tokens. Row b has segs[b] = ceil(ctx[b] / SPLIT_KV) splits, where ctx[b] is its last
// query token's context length, context_lens[b * next_n + next_n - 1] (2-D context_lens). With
// atoms of 2 tokens when next_n >= 2 (else 1) a row has A = ceil(next_n / atom) atoms, and tasks
// are numbered row by row, atom by atom, split by split; total = A * sum(segs). Block i of the
// logits kernel's grid of NUM_SMS takes tasks [start(i), start(i + 1)) with
// start(i) = i * (total / NUM_SMS) + min(i, total % NUM_SMS), and schedule[i] encodes start(i) as
//   b    = the first row whose inclusive prefix sum P[b] satisfies P[b] * A > start(i)
//   off  = start(i) - P[b - 1] * A   (P[-1] = 0)
//   schedule[i] = (b * A + off / segs[b], off % segs[b])
// and (B * A, 0) when no row qualifies (the terminal entry, i = NUM_SMS, and any block left
// without work).
//
// Compile key (constexprs): ALIGNED_BATCH (B rounded up to 32: the prefix-sum array), SPLIT_KV,
// NUM_SMS, IS_VARLEN (0; the varlen atoms of SM100 are not implemented). batch_size and next_n
// are runtime values left out of specialization. One warp, as DeepGEMM launches it.

#if IS_VARLEN != 0
#error "get_paged_mqa_logits_metadata: only the non-varlen schedule is implemented"
#endif

extern "C" __global__ void __launch_bounds__(32, 1)
dg_paged_mqa_metadata(int batch_size, int next_n, const int* __restrict__ context_lens, int* __restrict__ schedule) {
  __shared__ unsigned prefix[ALIGNED_BATCH];
  const unsigned lane = threadIdx.x;

  // Inclusive prefix sums of the split counts, 32 rows at a time (warp scan + running carry).
  unsigned carry = 0;
  for (int c = 0; c < ALIGNED_BATCH / 32; ++c) {
    const int b = c * 32 + static_cast<int>(lane);
    const int len = b < batch_size ? __ldg(&context_lens[b * next_n + next_n - 1]) : 0;
    unsigned x = (static_cast<unsigned>(max(len, 0)) + SPLIT_KV - 1) / SPLIT_KV;
#pragma unroll
    for (unsigned d = 1; d < 32; d <<= 1) {
      const unsigned y = __shfl_up_sync(0xffffffffu, x, d);
      if (lane >= d) x += y;
    }
    x += carry;
    prefix[b] = x;
    carry = __shfl_sync(0xffffffffu, x, 31);
  }
  __syncwarp();

  const unsigned atom = next_n >= 2 ? 2u : 1u;
  const unsigned atoms = (static_cast<unsigned>(next_n) + atom - 1) / atom;
  const unsigned total = carry * atoms;
  const unsigned per = total / NUM_SMS, rem = total % NUM_SMS;
  for (unsigned i = lane; i <= NUM_SMS; i += 32) {
    const unsigned start = i * per + min(i, rem);
    unsigned lo = 0, hi = static_cast<unsigned>(batch_size);
    while (lo < hi) {
      const unsigned mid = (lo + hi) / 2;
      if (prefix[mid] * atoms <= start) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    unsigned q_atom, split;
    if (lo >= static_cast<unsigned>(batch_size)) {
      q_atom = static_cast<unsigned>(batch_size) * atoms;
      split = 0;
    } else {
      const unsigned before = lo == 0 ? 0u : prefix[lo - 1];
      const unsigned off = start - before * atoms;
      const unsigned segs = prefix[lo] - before;  // > 0: the search skips rows without splits
      q_atom = lo * atoms + off / segs;
      split = off % segs;
    }
    schedule[2 * i] = static_cast<int>(q_atom);
    schedule[2 * i + 1] = static_cast<int>(split);
  }
}
