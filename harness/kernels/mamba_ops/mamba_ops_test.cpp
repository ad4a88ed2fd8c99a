// Mamba ops: CPU tests of the heuristics, argument validation and compile keys (compile-only
// runtime, meta tensors), and GPU tests of every kernel against the float64 libtorch reference
// with poisoned outputs, strided views as the engine passes them, and checks that no other state
// byte changed (GPU tests skip without a CUDA GPU and a CUDA libtorch).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/mamba_ops/mamba_ops.h"
#include "harness/kernels/mamba_ops/mamba_ops_reference.h"
#include "harness/kernels/model_shapes.h"
#include "harness/kernels/test_util.h"

namespace coldstart::mamba_ops {
namespace {

using namespace kernels::test;  // test_util.h

const auto kMeta = at::TensorOptions().device(at::kMeta);

// Distinct compile keys the runtime recorded for `kernel`.
std::set<std::string> keys_of(jit::JitRuntime& rt, const std::string& kernel) {
  std::set<std::string> out;
  for (const jit::CompileRecord& r : rt.monitor().records()) {
    if (r.kernel == kernel) out.insert(r.key);
  }
  return out;
}

// A slot cache of `slots` pages of `page` elements and the conv-state view of each page:
// [slots, rows, dim] with strides (page, dim, 1) (vLLM's SD layout inside a bigger page).
struct StatePages {
  at::Tensor buffer;  // [slots, page]
  at::Tensor conv;    // view
};
StatePages state_pages(const at::TensorOptions& o, int64_t slots, int64_t rows, int64_t dim) {
  const int64_t page = rows * dim + 2 * dim + 24;  // conv state + (SSM state stand-in)
  StatePages p;
  p.buffer = at::empty({slots, page}, o.dtype(at::kBFloat16));
  p.conv = p.buffer.as_strided({slots, rows, dim}, {page, dim, 1}, p.buffer.storage_offset() + 8);
  return p;
}

// ---------------------------------------------------------------------------------------------
// CPU: heuristics

TEST(MambaOpsHeuristics, RowsPerBlockOn132Sms) {
  // layernorm_guard.py calc_rows_per_block: min(next_power_of_2(cdiv(M, 2 * 132)), 4).
  EXPECT_EQ(gated_rms_norm_rows_per_block(1, 132), 1);
  EXPECT_EQ(gated_rms_norm_rows_per_block(32, 132), 1);
  EXPECT_EQ(gated_rms_norm_rows_per_block(264, 132), 1);
  EXPECT_EQ(gated_rms_norm_rows_per_block(265, 132), 2);
  EXPECT_EQ(gated_rms_norm_rows_per_block(528, 132), 2);
  EXPECT_EQ(gated_rms_norm_rows_per_block(529, 132), 4);
  EXPECT_EQ(gated_rms_norm_rows_per_block(8192 * 32, 132), 4);
  EXPECT_EQ(gated_rms_norm_rows_per_block(0, 132), 1);
  EXPECT_THROW(gated_rms_norm_rows_per_block(8, 0), InputError);
}

TEST(MambaOpsHeuristics, BlockSizesAndPdl) {
  EXPECT_EQ(gated_rms_norm_block_n(128), 128);
  EXPECT_EQ(gated_rms_norm_block_n(100), 128);
  EXPECT_EQ(gated_rms_norm_num_warps(128), 1);
  EXPECT_EQ(gated_rms_norm_num_warps(4096), 8);
  EXPECT_THROW(gated_rms_norm_block_n(40000), InputError);
  EXPECT_EQ(state_block_size(3), 4);
  EXPECT_EQ(state_block_size(32 * 128 * 128), 1024);
  EXPECT_TRUE(launch_pdl_for_arch("sm_90"));
  EXPECT_TRUE(launch_pdl_for_arch("sm_100a"));
  EXPECT_FALSE(launch_pdl_for_arch("sm_86"));
  EXPECT_THROW(conv_fwd_constexprs(ConvFwdSpec{8, 1, 1, 8, 5, 1, 8, 1, 8, 1, 1, 8, 5}),
               InputError);
}

// ---------------------------------------------------------------------------------------------
// CPU: compile-only mode (meta tensors, no launches)

TEST(MambaOpsCompileOnly, ValidationNamesFunctionAndArgument) {
  jit::JitRuntime rt(compile_only_options());
  const at::Tensor x = at::empty({16, 64}, kMeta.dtype(at::kBFloat16));
  const at::Tensor w = at::empty({64, 4}, kMeta.dtype(at::kBFloat16));
  StatePages p = state_pages(kMeta, 4, 3, 64);
  const at::Tensor qsl = at::empty({3}, kMeta.dtype(at::kInt));
  const at::Tensor ci = at::empty({2}, kMeta.dtype(at::kInt));
  const at::Tensor has = at::empty({2}, kMeta.dtype(at::kBool));
  const at::Tensor out = at::empty({16, 64}, kMeta.dtype(at::kBFloat16));
  EXPECT_MENTIONS(causal_conv1d_fwd(rt, x, w, at::Tensor(), p.conv, qsl, ci, has,
                                    Activation::kSilu, x),
                  "mamba_ops::causal_conv1d_fwd: argument 'out' overlaps x");
  EXPECT_MENTIONS(causal_conv1d_fwd(rt, x, at::empty({64, 5}, kMeta.dtype(at::kBFloat16)),
                                    at::Tensor(), p.conv, qsl, ci, has, Activation::kSilu, out),
                  "argument 'weight'");
  EXPECT_MENTIONS(causal_conv1d_fwd(rt, x, w, at::Tensor(), p.conv.transpose(1, 2), qsl, ci, has,
                                    Activation::kSilu, out),
                  "argument 'conv_states'");
  EXPECT_MENTIONS(causal_conv1d_fwd(rt, x, w, at::Tensor(), p.conv, qsl,
                                    at::empty({3}, kMeta.dtype(at::kInt)), has, Activation::kSilu,
                                    out),
                  "argument 'cache_indices'");
  EXPECT_MENTIONS(causal_conv1d_update(rt, x, p.conv, w, at::Tensor(), Activation::kSilu,
                                       at::empty({16}, kMeta.dtype(at::kLong)), out),
                  "mamba_ops::causal_conv1d_update: argument 'conv_state_indices'");
  EXPECT_MENTIONS(gated_rms_norm(rt, x, x, at::empty({64}, kMeta.dtype(at::kBFloat16)), 1e-6,
                                 true, Activation::kSilu, 48, 132, out),
                  "mamba_ops::gated_rms_norm: group_size 48 does not divide N = 64");
  const at::Tensor state = at::empty({4, 8, 16}, kMeta.dtype(at::kFloat));
  EXPECT_MENTIONS(gather_initial_states(rt, state, at::empty({2}, kMeta.dtype(at::kInt)),
                                        at::empty({2}, kMeta.dtype(at::kBool)),
                                        at::empty({2, 8, 16}, kMeta.dtype(at::kBFloat16))),
                  "mamba_ops::gather_initial_states: argument 'out'");
  EXPECT_MENTIONS(scatter_states(rt, state.transpose(1, 2), state, ci), "argument 'state'");
  EXPECT_EQ(rt.cached_kernels(), 0u);
}

// The seed's four gather / scatter variants (vLLM qwen_triton_warmup
// _warm_state_gather_scatter_kernels): aligned contiguous indices, unaligned indices
// (idx_pool[1:2]), aligned indices with an unaligned mask, strided indices (idx_pool[::2]).
struct SeedVariant {
  at::Tensor idx;
  at::Tensor has;
};
std::vector<SeedVariant> seed_variants(const at::Tensor& idx_pool, const at::Tensor& has_pool) {
  using at::indexing::Slice;
  return {{idx_pool.slice(0, 0, 1), has_pool.slice(0, 0, 1)},
          {idx_pool.slice(0, 1, 2), has_pool.slice(0, 1, 2)},
          {idx_pool.slice(0, 4, 5), has_pool.slice(0, 1, 2)},
          {idx_pool.slice(0, 0, 6, 2).slice(0, 0, 1), has_pool.slice(0, 0, 1)}};
}

TEST(MambaOpsCompileOnly, SeedGatherScatterVariantsGiveTritonsKeys) {
  jit::JitRuntime rt(compile_only_options());
  // Qwen3-Next GDN SSM state at TP 1: [2, HV 32, V 128, K 128], bf16 here.
  const at::Tensor state = at::empty({2, 32, 128, 128}, kMeta.dtype(at::kBFloat16));
  const at::Tensor idx_pool = at::empty({6}, kMeta.dtype(at::kInt));
  const at::Tensor has_pool = at::empty({2}, kMeta.dtype(at::kBool));
  for (const SeedVariant& v : seed_variants(idx_pool, has_pool)) {
    const at::Tensor gathered = at::empty({1, 32, 128, 128}, kMeta.dtype(at::kBFloat16));
    gather_initial_states(rt, state, v.idx, v.has, gathered);
    scatter_states(rt, state, at::empty({1, 32, 128, 128}, kMeta.dtype(at::kFloat)), v.idx);
    scatter_states(rt, state, gathered, v.idx);
  }
  // Gather: 4 keys (index pointer aligned or not, mask pointer aligned or not, index stride 1
  // or 2). Scatter does not take the mask: variants 1 and 3 (aligned, stride 1) coincide, so 3
  // keys per source dtype, 6 with a float32 and a bf16 source.
  EXPECT_EQ(keys_of(rt, "mamba_gather_initial_states").size(), 4u);
  EXPECT_EQ(keys_of(rt, "mamba_scatter_states").size(), 6u);
  // sm_90: launch_pdl is vLLM's default there.
  for (const std::string& k : keys_of(rt, "mamba_gather_initial_states")) {
    EXPECT_NE(k.find("LAUNCH_PDL=1"), std::string::npos) << k;
  }
  // An int64 index pool is yet another key; launch_pdl=false another.
  gather_initial_states(rt, state, at::empty({1}, kMeta.dtype(at::kLong)), has_pool.slice(0, 0, 1),
                        at::empty({1, 32, 128, 128}, kMeta.dtype(at::kBFloat16)));
  gather_initial_states(rt, state, idx_pool.slice(0, 0, 1), has_pool.slice(0, 0, 1),
                        at::empty({1, 32, 128, 128}, kMeta.dtype(at::kBFloat16)), false);
  EXPECT_EQ(keys_of(rt, "mamba_gather_initial_states").size(), 6u);
}

TEST(MambaOpsCompileOnly, ConvKeysFollowTritonSpecialization) {
  jit::JitRuntime rt(compile_only_options());
  const int64_t dim = 8192;
  const at::Tensor qkvz = at::empty({40, dim + 4096}, kMeta.dtype(at::kBFloat16));
  const at::Tensor w = at::empty({dim, 4}, kMeta.dtype(at::kBFloat16));
  StatePages p = state_pages(kMeta, 9, 3, dim);
  auto fwd = [&](int64_t t, const at::Tensor& conv) {
    const at::Tensor x = qkvz.narrow(0, 0, t).narrow(1, 0, dim);
    causal_conv1d_fwd(rt, x, w, at::Tensor(), conv, at::empty({3}, kMeta.dtype(at::kInt)),
                      at::empty({2}, kMeta.dtype(at::kInt)), at::empty({2}, kMeta.dtype(at::kBool)),
                      Activation::kSilu, at::empty({t, dim}, kMeta.dtype(at::kBFloat16)));
  };
  fwd(17, p.conv);
  fwd(19, p.conv);  // same specialization of cu_seqlen (neither 1 nor % 16): a hit
  EXPECT_EQ(keys_of(rt, "mamba_causal_conv1d_fwd").size(), 1u);
  fwd(32, p.conv);  // cu_seqlen % 16 == 0
  fwd(1, p.conv);   // cu_seqlen == 1
  EXPECT_EQ(keys_of(rt, "mamba_causal_conv1d_fwd").size(), 3u);
  // num_cache_lines and the page stride are constexprs: another slot count is another key.
  fwd(17, state_pages(kMeta, 10, 3, dim).conv);
  EXPECT_EQ(keys_of(rt, "mamba_causal_conv1d_fwd").size(), 4u);
  // Decode: batch is specialized (1, % 16, other).
  for (int64_t b : {1, 2, 3, 16, 32}) {
    const at::Tensor x = at::empty({b, dim}, kMeta.dtype(at::kBFloat16));
    causal_conv1d_update(rt, x, p.conv, w, at::Tensor(), Activation::kSilu,
                         at::empty({b}, kMeta.dtype(at::kInt)), x);
  }
  EXPECT_EQ(keys_of(rt, "mamba_causal_conv1d_update").size(), 3u);
}

// The speculative-decoding verify update (Qwen3-Next GDN at TP 1, width 4, num_speculative_tokens
// 2: conv state rows 3 + 2): its own keys beside the decode update's, one per max_query_len.
TEST(MambaOpsCompileOnly, SpecUpdateKeysFollowMaxQueryLen) {
  jit::JitRuntime rt(compile_only_options());
  const int64_t dim = kernels::shapes::conv_dim(kernels::shapes::kQwen3NextGdnTp1);
  const at::Tensor w = at::empty({dim, 4}, kMeta.dtype(at::kBFloat16));
  const StatePages p = state_pages(kMeta, 9, 3 + 2, dim);
  const int64_t b = 4;
  const at::Tensor ci = at::empty({b}, kMeta.dtype(at::kInt));
  const at::Tensor accepted = at::empty({b}, kMeta.dtype(at::kInt));
  const at::Tensor qsl = at::empty({b + 1}, kMeta.dtype(at::kInt));
  auto spec = [&](int64_t t, int max_query_len) {
    causal_conv1d_update_varlen_spec(rt, at::empty({t, dim}, kMeta.dtype(at::kBFloat16)), p.conv,
                                     w, at::Tensor(), Activation::kSilu, ci, accepted, qsl,
                                     max_query_len,
                                     at::empty({t, dim}, kMeta.dtype(at::kBFloat16)));
  };
  const at::Tensor x1 = at::empty({b, dim}, kMeta.dtype(at::kBFloat16));
  causal_conv1d_update(rt, x1, p.conv, w, at::Tensor(), Activation::kSilu, ci, x1);
  spec(12, 3);
  spec(7, 3);  // the token count is no kernel argument: a hit
  EXPECT_EQ(keys_of(rt, "mamba_causal_conv1d_update").size(), 2u);
  spec(8, 2);  // SEQLEN and STATE_LEN are constexprs
  const std::set<std::string> keys = keys_of(rt, "mamba_causal_conv1d_update");
  ASSERT_EQ(keys.size(), 3u);
  auto count = [&](const std::string& text) {
    int n = 0;
    for (const std::string& k : keys) n += k.find(text) != std::string::npos ? 1 : 0;
    return n;
  };
  EXPECT_EQ(count("SEQLEN=1,STATE_LEN=3,"), 1);
  EXPECT_EQ(count("SEQLEN=3,STATE_LEN=5,"), 1);
  EXPECT_EQ(count("SEQLEN=2,STATE_LEN=4,"), 1);
  EXPECT_EQ(count("IS_VARLEN=0,IS_SPEC_DECODING=0,"), 1);
  EXPECT_EQ(count("IS_VARLEN=1,IS_SPEC_DECODING=1,"), 2);
  EXPECT_EQ(count("STRIDE_X_SEQ=0,"), 2);  // varlen: x is flat (token, dim)
  EXPECT_EQ(count("NP2_STATELEN=8,NP2_SEQLEN=4,"), 1);
  // Empty batches compile nothing.
  causal_conv1d_update_varlen_spec(rt, at::empty({0, dim}, kMeta.dtype(at::kBFloat16)), p.conv, w,
                                   at::Tensor(), Activation::kSilu, ci, accepted, qsl, 3,
                                   at::empty({0, dim}, kMeta.dtype(at::kBFloat16)));
  causal_conv1d_update_varlen_spec(rt, at::empty({5, dim}, kMeta.dtype(at::kBFloat16)), p.conv, w,
                                   at::Tensor(), Activation::kSilu,
                                   at::empty({0}, kMeta.dtype(at::kInt)),
                                   at::empty({0}, kMeta.dtype(at::kInt)),
                                   at::empty({1}, kMeta.dtype(at::kInt)), 3,
                                   at::empty({5, dim}, kMeta.dtype(at::kBFloat16)));
  EXPECT_EQ(keys_of(rt, "mamba_causal_conv1d_update").size(), 3u);
}

TEST(MambaOpsCompileOnly, SpecUpdateValidationNamesArgument) {
  jit::JitRuntime rt(compile_only_options());
  const int64_t dim = 300;
  const auto bf16 = kMeta.dtype(at::kBFloat16);
  const auto i32 = kMeta.dtype(at::kInt);
  const at::Tensor x = at::empty({9, dim}, bf16);
  const at::Tensor out = at::empty({9, dim}, bf16);
  const at::Tensor w = at::empty({dim, 4}, bf16);
  const StatePages p = state_pages(kMeta, 6, 4, dim);  // width 4: room for max_query_len <= 2
  const at::Tensor ci = at::empty({3}, i32);
  const at::Tensor acc = at::empty({3}, i32);
  const at::Tensor qsl = at::empty({4}, i32);
  const char* fn = "mamba_ops::causal_conv1d_update_varlen_spec: ";
  auto call = [&](const at::Tensor& x_, const at::Tensor& conv, const at::Tensor& w_,
                  const at::Tensor& ci_, const at::Tensor& acc_, const at::Tensor& qsl_, int q,
                  const at::Tensor& out_, Activation act = Activation::kSilu) {
    causal_conv1d_update_varlen_spec(rt, x_, conv, w_, at::Tensor(), act, ci_, acc_, qsl_, q,
                                     out_);
  };
  EXPECT_NO_THROW(call(x, p.conv, w, ci, acc, qsl, 2, out));
  const size_t compiled = rt.cached_kernels();
  EXPECT_MENTIONS(call(x, p.conv, w, ci, acc, qsl, 3, out),
                  std::string(fn) + "argument 'conv_states' has shape [6, 4, 300]; speculative "
                                    "decoding with max_query_len 3 needs at least width - 1 + "
                                    "(max_query_len - 1) = 5 rows");
  EXPECT_MENTIONS(call(x, p.conv, w, ci, acc, qsl, 0, out),
                  std::string(fn) + "argument 'max_query_len' is 0");
  EXPECT_MENTIONS(call(x, p.conv, w, ci, at::empty({3}, kMeta.dtype(at::kLong)), qsl, 2, out),
                  std::string(fn) + "argument 'num_accepted_tokens'");
  EXPECT_MENTIONS(call(x, p.conv, w, ci, at::empty({4}, i32), qsl, 2, out),
                  std::string(fn) + "argument 'num_accepted_tokens'");
  EXPECT_MENTIONS(call(x, p.conv, w, ci, at::empty({6}, i32).slice(0, 0, 6, 2), qsl, 2, out),
                  std::string(fn) + "argument 'num_accepted_tokens'");
  EXPECT_MENTIONS(call(x, p.conv, w, ci, acc, at::empty({3}, i32), 2, out),
                  std::string(fn) + "argument 'query_start_loc'");
  EXPECT_MENTIONS(call(x, p.conv, w, ci, acc, at::empty({4}, kMeta.dtype(at::kLong)), 2, out),
                  std::string(fn) + "argument 'query_start_loc'");
  EXPECT_MENTIONS(call(x, p.conv, w, at::empty({3}, kMeta.dtype(at::kLong)), acc, qsl, 2, out),
                  std::string(fn) + "argument 'conv_state_indices'");
  EXPECT_MENTIONS(call(x, p.conv, at::empty({dim, 5}, bf16), ci, acc, qsl, 2, out),
                  std::string(fn) + "argument 'weight'");
  EXPECT_MENTIONS(call(x, p.conv.transpose(1, 2), w, ci, acc, qsl, 2, out),
                  std::string(fn) + "argument 'conv_states'");
  EXPECT_MENTIONS(call(x, p.conv, w, ci, acc, qsl, 2, x),
                  std::string(fn) + "argument 'out' overlaps x");
  EXPECT_MENTIONS(call(x, p.conv, w, ci, acc, qsl, 2, at::empty({8, dim}, bf16)),
                  std::string(fn) + "argument 'out' has shape [8, 300]");
  EXPECT_MENTIONS(call(x.t(), p.conv, w, ci, acc, qsl, 2, out), std::string(fn) + "argument 'x'");
  EXPECT_MENTIONS(call(x, p.conv, w, ci, acc, qsl, 2, out, Activation::kSigmoid),
                  "activation sigmoid is not supported");
  EXPECT_EQ(rt.cached_kernels(), compiled);
}

TEST(MambaOpsCompileOnly, GatedNormKeysFollowRowsPerBlockAndM) {
  jit::JitRuntime rt(compile_only_options());
  const at::Tensor wt = at::empty({128}, kMeta.dtype(at::kBFloat16));
  auto norm = [&](int64_t m) {
    const at::Tensor x = at::empty({m, 128}, kMeta.dtype(at::kBFloat16));
    gated_rms_norm(rt, x, x, wt, 1e-6, true, Activation::kSilu, 128, 132, x);
  };
  // GDN: M = tokens * 32 heads. Tokens 3, 5 -> M 96, 160 (both % 16, RPB 1): one key; token 8 ->
  // M 256 (RPB 1) the same; 9 -> 288 (RPB 2); 17 -> 544 (RPB 4); M = 1 and M = 7: M specialized.
  for (int64_t t : {3, 5, 8}) norm(t * 32);
  EXPECT_EQ(keys_of(rt, "mamba_gated_rms_norm").size(), 1u);
  norm(9 * 32);
  norm(17 * 32);
  norm(1);
  norm(7);
  EXPECT_EQ(keys_of(rt, "mamba_gated_rms_norm").size(), 5u);
}

// ---------------------------------------------------------------------------------------------
// CPU: the spec-decode reference against vLLM's index arithmetic

// One channel of _causal_conv1d_update_kernel (vLLM 03c6dad8) with IS_VARLEN and
// IS_SPEC_DECODING, written out the way the kernel indexes (per-request state_len and seqlen, the
// shift by one from the accepted offset, the x part at i - VAL, then the sliding window), for
// exact small-integer inputs, against the reference's reading (the window is the accepted
// history, the new state drops its oldest row).
TEST(MambaOpsReference, VarlenSpecUpdateFollowsVllmsIndexing) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  int checked = 0;
  for (int width = 2; width <= 4; ++width) {
    for (int max_q = 1; max_q <= 4; ++max_q) {
      const int state_len = width - 1 + (max_q - 1);
      const int rows = state_len + 1;  // one row past what the kernel may touch
      for (int len = 0; len <= max_q; ++len) {
        for (int accepted = 1; accepted <= max_q; ++accepted) {
          std::vector<double> old(rows), xs(len + 1), wt(width);
          for (int r = 0; r < rows; ++r) old[r] = 100 + r;
          for (int t = 0; t <= len; ++t) xs[t] = 10 * (t + 1);
          for (int j = 0; j < width; ++j) wt[j] = j + 1;
          // The kernel's arithmetic.
          std::vector<double> st = old;
          std::vector<double> want_out(len + 1, nan);  // row len: past qsl[B]
          if (len > 0) {
            const int state_len_b = state_len - (max_q - len);
            const int off = accepted - 1;
            std::vector<double> col(width - 1);
            for (int j = 0; j < width - 1; ++j) col[j] = old[off + j];
            const int val = state_len_b - len;
            std::vector<double> next(state_len_b);
            for (int i = 0; i < state_len_b; ++i) {
              next[i] = i + len < state_len_b ? old[off + i + 1]
                        : (i - val >= 0 && i - val < len) ? xs[i - val]
                                                          : 0.0;
            }
            for (int i = 0; i < state_len_b; ++i) st[i] = next[i];
            for (int t = 0; t < len; ++t) {
              double acc = 0;
              for (int j = 0; j < width - 1; ++j) acc += col[j] * wt[j];
              acc += xs[t] * wt[width - 1];
              for (int j = 0; j + 1 < width - 1; ++j) col[j] = col[j + 1];
              col[width - 2] = xs[t];
              want_out[t] = acc;
            }
          }
          const at::Tensor x = at::tensor(xs).reshape({len + 1, 1}).to(at::kBFloat16);
          const at::Tensor conv = at::tensor(old).reshape({1, rows, 1}).to(at::kBFloat16);
          const at::Tensor w = at::tensor(wt).reshape({1, width}).to(at::kBFloat16);
          const ref::Conv got = ref::causal_conv1d_update_varlen_spec(
              x, conv, w, at::Tensor(), false, at::tensor(std::vector<int32_t>{0}),
              at::tensor(std::vector<int32_t>{accepted}), at::tensor(std::vector<int32_t>{0, len}));
          const std::string what = "width " + std::to_string(width) + " max_query_len " +
                                   std::to_string(max_q) + " len " + std::to_string(len) +
                                   " accepted " + std::to_string(accepted);
          EXPECT_TRUE(at::equal(got.conv_states.to(at::kDouble).reshape({rows}), at::tensor(st)))
              << what;
          const at::Tensor o = got.out.reshape({len + 1});
          for (int t = 0; t <= len; ++t) {
            if (std::isnan(want_out[t])) {
              EXPECT_TRUE(std::isnan(o[t].item<double>())) << what << " row " << t;
            } else {
              EXPECT_EQ(o[t].item<double>(), want_out[t]) << what << " row " << t;
            }
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
  // A PAD_SLOT_ID request changes nothing.
  const at::Tensor conv = at::ones({2, 3, 4}, at::kBFloat16);
  const ref::Conv pad = ref::causal_conv1d_update_varlen_spec(
      at::ones({2, 4}, at::kBFloat16), conv, at::ones({4, 2}, at::kBFloat16), at::Tensor(), true,
      at::tensor(std::vector<int32_t>{kPadSlotId}), at::tensor(std::vector<int32_t>{1}),
      at::tensor(std::vector<int32_t>{0, 2}));
  EXPECT_TRUE(at::equal(pad.conv_states, conv));
  EXPECT_TRUE(pad.out.isnan().all().item<bool>());
}

// ---------------------------------------------------------------------------------------------
// GPU: every kernel against the reference

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Expects `got` (any dtype, any device) close to the float64 reference where the reference is
// not NaN, and still NaN (poison untouched) where it is.
void expect_close(const at::Tensor& got, const at::Tensor& want, double tol, const char* what) {
  const at::Tensor g = got.cpu().to(at::kDouble);
  const at::Tensor written = want.isnan().logical_not();
  EXPECT_TRUE(g.masked_select(written).isnan().logical_not().all().item<bool>())
      << what << ": a row that should be written still holds the poison";
  EXPECT_TRUE(g.masked_select(written.logical_not()).isnan().all().item<bool>())
      << what << ": a row of a skipped sequence was written";
  const at::Tensor err = (g - want).abs().masked_select(written);
  const at::Tensor lim = (want.abs() * tol + tol).masked_select(written);
  EXPECT_TRUE((err <= lim).all().item<bool>())
      << what << ": max abs error " << err.max().item<double>();
}

at::Tensor poisoned_bf16(std::vector<int64_t> shape) {
  return at::full(shape, kNaN, cuda(at::kBFloat16));
}

at::Tensor ints(const std::vector<int32_t>& v) { return at::tensor(v).to(at::kCUDA); }

struct ConvCase {
  int64_t dim;
  int width;
  bool bias;
  bool silu;
  std::vector<int32_t> lens;
  std::vector<int32_t> slots;  // kPadSlotId = skip
  std::vector<bool> has;
  int64_t state_rows;
};

// e.g. D8192_W4_silu_B5_T61: dim, width, bias / silu, sequences and their total length.
std::string conv_name(const ::testing::TestParamInfo<ConvCase>& i) {
  const ConvCase& c = i.param;
  int64_t tokens = 0;
  for (int32_t n : c.lens) tokens += n;
  return "D" + std::to_string(c.dim) + "_W" + std::to_string(c.width) + (c.bias ? "_bias" : "") +
         (c.silu ? "_silu" : "") + "_B" + std::to_string(c.lens.size()) + "_T" +
         std::to_string(tokens);
}
void PrintTo(const ConvCase& c, std::ostream* os) {
  auto list = [os](const char* name, const auto& v) {
    *os << " " << name << " [";
    for (size_t i = 0; i < v.size(); ++i) *os << (i ? ", " : "") << static_cast<int64_t>(v[i]);
    *os << "]";
  };
  *os << conv_name({c, 0});
  list("lens", c.lens);
  list("slots", c.slots);
  list("has_initial_state", c.has);
  *os << " state_rows " << c.state_rows;
}

class MambaConvFwdGpu : public ::testing::TestWithParam<ConvCase> {};

TEST_P(MambaConvFwdGpu, MatchesReference) {
  CS_REQUIRE_GPU();
  const ConvCase c = GetParam();
  jit::JitRuntime& rt = gpu_runtime();
  std::vector<int32_t> qsl{0};
  for (int32_t n : c.lens) qsl.push_back(qsl.back() + n);
  const int64_t t = qsl.back();
  const int64_t b = static_cast<int64_t>(c.lens.size());
  // x: a column slice of a wider projection; cache_indices: every other entry of a pool.
  const at::Tensor proj = random_bf16({t, c.dim + 96}, 11, 1.0, 0.0);
  const at::Tensor x = proj.narrow(1, 32, c.dim);
  const at::Tensor w = random_bf16({c.dim, c.width}, 12, 0.5, 0.0);
  const at::Tensor bias = c.bias ? random_bf16({c.dim}, 13, 0.5, 0.1) : at::Tensor();
  StatePages p = state_pages(cuda(at::kBFloat16), 9, c.state_rows, c.dim);
  p.buffer.copy_(random_bf16({9, p.buffer.size(1)}, 14, 1.0, 0.0));
  std::vector<int32_t> pool;
  for (int32_t s : c.slots) pool.insert(pool.end(), {s, 77});
  const at::Tensor ci = ints(pool).slice(0, 0, 2 * b, 2);
  const at::Tensor has =
      at::tensor(std::vector<int32_t>(c.has.begin(), c.has.end())).to(at::kBool).to(at::kCUDA);
  const at::Tensor q = ints(qsl);
  const at::Tensor before = p.buffer.cpu();
  const ref::Conv want = ref::causal_conv1d_fwd(x, w, bias, p.conv, q, ci, has, c.silu);
  const at::Tensor out = poisoned_bf16({t, c.dim});
  causal_conv1d_fwd(rt, x, w, bias, p.conv, q, ci, has,
                    c.silu ? Activation::kSilu : Activation::kNone, out);
  expect_close(out, want.out, 2e-2, "out");
  // The whole page buffer: written conv states exactly as the reference, every other byte kept.
  at::Tensor expected = before.clone();
  expected.as_strided(p.conv.sizes(), p.conv.strides(), 8).copy_(want.conv_states);
  EXPECT_TRUE(at::equal(p.buffer.cpu(), expected)) << "conv state pages differ";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MambaConvFwdGpu,
    ::testing::Values(
        // Qwen3-Next GDN (dim 8192, width 4, silu): short and chunk-spanning sequences, one pad.
        ConvCase{8192, 4, false, true, {5, 1, 37, 2, 16}, {3, 6, 0, kPadSlotId, 8},
                 {true, false, true, true, false}, 3},
        // dim not a multiple of BLOCK_N, width 2, bias, no activation, spec-decode-sized state.
        ConvCase{4160, 2, true, false, {300, 3, 1}, {2, 5, 7}, {false, true, true}, 3},
        // one long sequence with initial state (many chunks), width 3.
        ConvCase{4096, 3, true, true, {1000}, {4}, {true}, 2}),
    conv_name);

TEST(MambaConvUpdateGpu, MatchesReferenceOutOfPlaceAndInPlace) {
  CS_REQUIRE_GPU();
  jit::JitRuntime& rt = gpu_runtime();
  for (const auto& [dim, width, with_bias, silu] :
       std::vector<std::tuple<int64_t, int, bool, bool>>{{8192, 4, false, true},
                                                         {4160, 2, true, false}}) {
    for (bool in_place : {false, true}) {
      const int64_t b = 7;
      const at::Tensor proj = random_bf16({b, dim + 64}, 21, 1.0, 0.0);
      at::Tensor x = proj.narrow(1, 0, dim);
      if (in_place) x = x.clone();
      const at::Tensor w = random_bf16({dim, width}, 22, 0.5, 0.0);
      const at::Tensor bias = with_bias ? random_bf16({dim}, 23, 0.5, 0.0) : at::Tensor();
      StatePages p = state_pages(cuda(at::kBFloat16), 11, width - 1 + 2, dim);
      p.buffer.copy_(random_bf16({11, p.buffer.size(1)}, 24, 1.0, 0.0));
      const at::Tensor idx = ints({4, 0, kPadSlotId, 10, 7, 1, 2});
      const at::Tensor before = p.buffer.cpu();
      const ref::Conv want = ref::causal_conv1d_update(x, p.conv, w, bias, silu, idx);
      const at::Tensor x_before = x.cpu();
      const at::Tensor out = in_place ? x : poisoned_bf16({b, dim});
      causal_conv1d_update(rt, x, p.conv, w, bias, silu ? Activation::kSilu : Activation::kNone,
                           idx, out);
      at::Tensor want_out = want.out.clone();
      if (in_place) want_out[2].copy_(x_before[2].to(at::kDouble));  // pad row: x untouched
      if (in_place) {
        const at::Tensor g = out.cpu().to(at::kDouble);
        EXPECT_TRUE(at::equal(out.cpu()[2], x_before[2])) << "pad row changed in place";
        EXPECT_TRUE(((g - want_out).abs() <= want_out.abs() * 2e-2 + 2e-2).all().item<bool>())
            << "in-place update, dim " << dim;
      } else {
        expect_close(out, want.out, 2e-2, "update out");
      }
      at::Tensor expected = before.clone();
      expected.as_strided(p.conv.sizes(), p.conv.strides(), 8).copy_(want.conv_states);
      EXPECT_TRUE(at::equal(p.buffer.cpu(), expected)) << "conv state pages differ, dim " << dim;
    }
  }
}

// The speculative-decoding verify update: varlen requests of up to max_query_len tokens.
struct SpecCase {
  int64_t dim;
  int width;
  bool bias;
  bool silu;
  int max_query_len;
  std::vector<int32_t> lens;      // tokens per request (0 = nothing scheduled)
  std::vector<int32_t> slots;     // kPadSlotId = skip
  std::vector<int32_t> accepted;  // num_accepted_tokens, 1 .. max_query_len
};

// e.g. D8192_W4_silu_Q4_B7_T22: dim, width, bias / silu, max_query_len, requests, tokens.
std::string spec_name(const ::testing::TestParamInfo<SpecCase>& i) {
  const SpecCase& c = i.param;
  int64_t tokens = 0;
  for (int32_t n : c.lens) tokens += n;
  return "D" + std::to_string(c.dim) + "_W" + std::to_string(c.width) + (c.bias ? "_bias" : "") +
         (c.silu ? "_silu" : "") + "_Q" + std::to_string(c.max_query_len) + "_B" +
         std::to_string(c.lens.size()) + "_T" + std::to_string(tokens);
}
void PrintTo(const SpecCase& c, std::ostream* os) {
  auto list = [os](const char* name, const std::vector<int32_t>& v) {
    *os << " " << name << " [";
    for (size_t i = 0; i < v.size(); ++i) *os << (i ? ", " : "") << v[i];
    *os << "]";
  };
  *os << spec_name({c, 0});
  list("lens", c.lens);
  list("slots", c.slots);
  list("accepted", c.accepted);
}

class MambaConvUpdateSpecGpu : public ::testing::TestWithParam<SpecCase> {};

TEST_P(MambaConvUpdateSpecGpu, MatchesReference) {
  CS_REQUIRE_GPU();
  const SpecCase c = GetParam();
  jit::JitRuntime& rt = gpu_runtime();
  std::vector<int32_t> qsl{0};
  for (int32_t n : c.lens) qsl.push_back(qsl.back() + n);
  const int64_t b = static_cast<int64_t>(c.lens.size());
  const int64_t t = qsl.back() + 2;  // two padding rows past qsl[B]: never read or written
  // x: a column slice of a wider projection; conv_state_indices: every other entry of a pool.
  const at::Tensor proj = random_bf16({t, c.dim + 64}, 51 + c.width, 1.0, 0.0);
  const at::Tensor x = proj.narrow(1, 16, c.dim);
  const at::Tensor w = random_bf16({c.dim, c.width}, 52, 0.5, 0.0);
  const at::Tensor bias = c.bias ? random_bf16({c.dim}, 53, 0.5, 0.1) : at::Tensor();
  // The rows spec decode needs plus one spare row holding NaN, which no request may read or
  // write; the rest of each page (the SSM-state stand-in) is random and must stay as it is.
  const int64_t rows = c.width - 1 + (c.max_query_len - 1) + 1;
  StatePages p = state_pages(cuda(at::kBFloat16), 9, rows, c.dim);
  p.buffer.copy_(random_bf16({9, p.buffer.size(1)}, 54 + c.max_query_len, 1.0, 0.0));
  p.conv.select(1, rows - 1).fill_(kNaN);
  std::vector<int32_t> pool;
  for (int32_t s : c.slots) pool.insert(pool.end(), {s, 77});
  const at::Tensor ci = ints(pool).slice(0, 0, 2 * b, 2);
  const at::Tensor accepted = ints(c.accepted);
  const at::Tensor q = ints(qsl);
  const at::Tensor before = p.buffer.cpu();
  const at::Tensor x_before = proj.cpu();
  const ref::Conv want =
      ref::causal_conv1d_update_varlen_spec(x, p.conv, w, bias, c.silu, ci, accepted, q);
  const at::Tensor out = poisoned_bf16({t, c.dim});
  causal_conv1d_update_varlen_spec(rt, x, p.conv, w, bias,
                                   c.silu ? Activation::kSilu : Activation::kNone, ci, accepted,
                                   q, c.max_query_len, out);
  // Rows of the pad request, of the empty request (none) and past qsl[B] keep the poison.
  expect_close(out, want.out, 2e-2, "spec update out");
  // The whole page buffer, bit for bit (NaN rows included): the rewritten conv-state rows as the
  // reference, every other element kept.
  at::Tensor expected = before.clone();
  expected.as_strided(p.conv.sizes(), p.conv.strides(), 8).copy_(want.conv_states);
  EXPECT_TRUE(at::equal(p.buffer.cpu().view(at::kShort), expected.view(at::kShort)))
      << "conv state pages differ";
  EXPECT_TRUE(at::equal(proj.cpu().view(at::kShort), x_before.view(at::kShort))) << "x changed";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MambaConvUpdateSpecGpu,
    ::testing::Values(
        // Qwen3-Next GDN at TP 1 (dim 8192, width 4, silu, no bias): num_speculative_tokens 3
        // with mixed lengths (one empty request, one pad), then the served 2 (max_query_len 3).
        SpecCase{kernels::shapes::conv_dim(kernels::shapes::kQwen3NextGdnTp1), 4, false, true, 4,
                 {4, 2, 0, 4, 3, 1, 4}, {3, 6, 0, kPadSlotId, 8, 1, 5}, {4, 1, 1, 2, 3, 1, 2}},
        SpecCase{kernels::shapes::conv_dim(kernels::shapes::kQwen3NextGdnTp1), 4, false, true, 3,
                 {3, 3, 1, 0, 2}, {2, kPadSlotId, 7, 4, 0}, {2, 3, 1, 1, 2}},
        // dim not a multiple of BLOCK_N, width 3 with bias and no activation, one draft token.
        SpecCase{4160, 3, true, false, 2, {2, 1, 2, 0, 2}, {4, 2, kPadSlotId, 1, 7},
                 {2, 1, 1, 1, 1}},
        // width 2 (the window is one accepted row), bias and silu.
        SpecCase{1000, 2, true, true, 3, {3, 1, 2, 0, 3}, {5, 0, 8, 2, kPadSlotId},
                 {3, 1, 2, 1, 1}},
        // max_query_len above every length; the last request accepted more tokens than it now
        // schedules (num_accepted_tokens counts the previous step's).
        SpecCase{520, 3, false, true, 4, {3, 1, 0, 2, 1}, {1, 3, 5, 7, 0}, {2, 1, 1, 2, 4}},
        // width 4 with bias, one draft token, the pad request first.
        SpecCase{4160, 4, true, false, 2, {2, 2, 1, 0}, {kPadSlotId, 3, 6, 2}, {1, 2, 1, 1}}),
    spec_name);

TEST(MambaGatedRmsNormGpu, MatchesReference) {
  CS_REQUIRE_GPU();
  jit::JitRuntime& rt = gpu_runtime();
  const int64_t n = 512;
  for (int64_t m : {1, 37, 300, 1100}) {
    for (int64_t group : {n, n / 4}) {
      for (Activation act : {Activation::kSilu, Activation::kSigmoid}) {
        const bool before = act == Activation::kSilu;
        const at::Tensor xz = random_bf16({m, 2 * n + 32}, 31 + m, 1.0, 0.2);
        const at::Tensor x = xz.narrow(1, 0, n);
        const at::Tensor z = xz.narrow(1, n + 32, n);
        const at::Tensor w = group == n ? random_bf16({n}, 32, 0.3, 1.0)
                                        : random_bf16({n}, 33, 0.3, 1.0).to(at::kFloat);
        const at::Tensor out = poisoned_bf16({m, n});
        gated_rms_norm(rt, x, z, w, 1e-6, before, act, group, 132, out);
        expect_close(out, ref::gated_rms_norm(x, z, w, 1e-6, before, act, group), 1e-2,
                     "gated_rms_norm");
      }
    }
  }
}

TEST(MambaStatesGpu, SeedVariantsGatherAndScatter) {
  CS_REQUIRE_GPU();
  jit::JitRuntime& rt = gpu_runtime();
  for (at::ScalarType dt : {at::kBFloat16, at::kFloat}) {
    // Slot rows [4, 32, 64] inside padded pages (slot stride 8192 + 64 elements).
    const int64_t slots = 5, page = 4 * 32 * 64 + 64;
    const at::Tensor buffer =
        (at::randn({slots, page}, at::TensorOptions().dtype(at::kFloat)) + 0.5).to(dt).to(at::kCUDA);
    const at::Tensor state = buffer.as_strided({slots, 4, 32, 64}, {page, 2048, 64, 1}, 0);
    const at::Tensor idx_pool = ints({3, 1, 4, 0, 2, 4});
    const at::Tensor has_pool = at::tensor(std::vector<int32_t>{1, 0}).to(at::kBool).to(at::kCUDA);
    const at::Tensor idx_pool_b = ints({2, 4, 0, 1, 3, 0});
    const at::Tensor has_pool_b = at::tensor(std::vector<int32_t>{0, 1}).to(at::kBool).to(at::kCUDA);
    for (int pools = 0; pools < 2; ++pools) {
      for (const SeedVariant& v : seed_variants(pools ? idx_pool_b : idx_pool,
                                                pools ? has_pool_b : has_pool)) {
        const at::Tensor out = at::full({1, 4, 32, 64}, kNaN, cuda(dt));
        gather_initial_states(rt, state, v.idx, v.has, out);
        EXPECT_TRUE(at::equal(out.cpu(), ref::gather_initial_states(state, v.idx, v.has)));
        // Scatter a float32 source and a source of the state dtype into padded pages.
        const at::Tensor src32 = at::randn({1, 4, 32, 64}, cuda(at::kFloat));
        for (const at::Tensor& src : {src32, src32.to(dt)}) {
          const at::Tensor before = buffer.cpu();
          const at::Tensor want = ref::scatter_states(state, src, v.idx);
          scatter_states(rt, state, src, v.idx);
          at::Tensor expected = before.clone();
          expected.as_strided(state.sizes(), state.strides(), 0).copy_(want);
          EXPECT_TRUE(at::equal(buffer.cpu(), expected)) << c10::toString(dt);
        }
      }
    }
    // A batch of three rows, int64 indices with stride 2, mask with stride 3.
    const at::Tensor idx = at::tensor(std::vector<int64_t>{4, 9, 0, 9, 2, 9}).to(at::kCUDA);
    const at::Tensor has =
        at::tensor(std::vector<int32_t>{1, 0, 0, 0, 0, 0, 1, 0, 0}).to(at::kBool).to(at::kCUDA);
    const at::Tensor out = at::full({3, 4, 32, 64}, kNaN, cuda(dt));
    gather_initial_states(rt, state, idx.slice(0, 0, 6, 2), has.slice(0, 0, 9, 3), out, false);
    EXPECT_TRUE(at::equal(out.cpu(), ref::gather_initial_states(state, idx.slice(0, 0, 6, 2),
                                                                has.slice(0, 0, 9, 3))));
  }
}

}  // namespace
}  // namespace coldstart::mamba_ops
