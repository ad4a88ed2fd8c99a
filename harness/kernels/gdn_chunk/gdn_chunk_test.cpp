// gdn_chunk kernels: CPU tests of the geometry, scratch sizing, candidate lists and tuning keys,
// the compile-only path of the wrappers (every autotune candidate compiles; T stays out of the
// chain's compile keys; argument validation), and GPU tests of fused_post_conv and of the whole
// chunked chain against float64 references (the chain against the token-by-token recurrence),
// with poisoned outputs and scratch, varlen batches and strided views. GPU tests skip without a
// CUDA GPU and a CUDA libtorch.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/jit/select.h"
#include "harness/kernels/gdn_chunk/gdn_chunk.h"
#include "harness/kernels/gdn_chunk/gdn_chunk_reference.h"
#include "harness/kernels/test_util.h"

namespace coldstart::gdn_chunk {
namespace {

using namespace kernels::test;  // test_util.h

const GdnDims kQwen = gdn_dims(kernels::shapes::kQwen3NextGdnTp1);
const GdnDims kSmall{1, 4, 64, 64};     // K = V = 64, four value heads per key head

// ---------------------------------------------------------------------------------------------
// CPU: geometry, scratch, candidates, keys

TEST(GdnChunkDims, ConvDimAndValidation) {
  EXPECT_EQ(kQwen.conv_dim(), 2 * 16 * 128 + 32 * 128);
  EXPECT_NO_THROW(kQwen.validate());
  EXPECT_NO_THROW(kSmall.validate());
  EXPECT_THROW((GdnDims{16, 24, 128, 128}.validate()), InputError);  // not a multiple
  EXPECT_THROW((GdnDims{16, 32, 96, 128}.validate()), InputError);
  EXPECT_THROW((GdnDims{0, 32, 128, 128}.validate()), InputError);
}

TEST(GdnChunkScratch, MirrorsChunkWorkspace) {
  // One sequence of 4096 tokens: NT = 64. chunk_workspace.py: h = 64*32*128*128*2,
  // v_new = u = 4096*32*128*2, w = the same (K = V), A = 4096*32*64*4, A's bf16 copy half of A.
  const int64_t h = 64ll * 32 * 128 * 128 * 2, vnew = 4096ll * 32 * 128 * 2;
  const int64_t a = 4096ll * 32 * 64 * 4;
  const int64_t g = 4096ll * 32 * 4, tables = 512 + 256;  // 64 x 2 int32, 2 int32
  EXPECT_EQ(chunk_scratch_bytes(kQwen, 4096, {4096}), h + 3 * vnew + a + a / 2 + g + tables);
  EXPECT_EQ(num_chunks({1, 63, 64, 65, 200}), 1 + 1 + 1 + 2 + 4);
  EXPECT_EQ(num_chunks({0, 0}), 0);
  EXPECT_THROW(chunk_scratch_bytes(kQwen, 10, {4, 5}), InputError);
  const ChunkScratchLayout l = chunk_scratch_layout(kSmall, 393, 9, 5);
  for (int64_t off : {l.g_cumsum, l.A, l.Ai, l.w, l.u, l.h, l.v_new, l.chunk_indices,
                      l.chunk_offsets, l.total}) {
    EXPECT_EQ(off % 256, 0);
  }
  EXPECT_GE(l.total - l.chunk_offsets, 6 * 4);
}

TEST(GdnChunkCandidates, CountsMatchVllm) {
  EXPECT_EQ(cumsum_candidates().size(), 4u);
  EXPECT_EQ(kkt_candidates().size(), 27u);
  EXPECT_EQ(solve_tril_candidates().size(), 12u);
  EXPECT_EQ(wy_candidates().size(), 9u);
  EXPECT_EQ(h_candidates().size(), 12u);
  EXPECT_EQ(o_candidates(90).size(), 24u);   // Hopper: num_warps [2, 4]
  EXPECT_EQ(o_candidates(100).size(), 24u);  // capability >= 9 counts as "hopper"
  EXPECT_EQ(o_candidates(86).size(), 36u);   // [2, 4, 8], BK/BV in [32, 64]
  EXPECT_EQ(o_candidates(80).size(), 36u);   // [2, 4, 8], BK/BV in [64, 128]
  EXPECT_EQ(config_value(o_candidates(86)[0], "BK", 0), 32);
  EXPECT_EQ(config_value(o_candidates(90)[0], "BK", 0), 64);
  EXPECT_EQ(kkt_candidates()[0].name, "BK=32,warps=2,stages=2");
  EXPECT_EQ(h_candidates()[1].name, "BV=64,warps=2,stages=2");
  for (const auto& list : {cumsum_candidates(), kkt_candidates(), solve_tril_candidates(),
                           wy_candidates(), h_candidates(), o_candidates(90), o_candidates(86)}) {
    std::set<std::string> names;
    for (const jit::KernelConfig& c : list) names.insert(c.name);
    EXPECT_EQ(names.size(), list.size());
  }
}

TEST(GdnChunkCandidates, TuningKeys) {
  EXPECT_EQ(cumsum_tuning_key(kQwen), "B=1,H=32,BT=64,IS_VARLEN=1,REVERSE=0");
  EXPECT_EQ(kkt_tuning_key(kQwen), "H=32,K=128,BT=64,IS_VARLEN=1");
  EXPECT_EQ(solve_tril_tuning_key(kQwen), "H=32,BT=64,IS_VARLEN=1");
  EXPECT_EQ(wy_tuning_key(kQwen), "H=32,K=128,V=128,BT=64,BK=64,BV=64,IS_VARLEN=1");
  EXPECT_EQ(h_tuning_key(kQwen), "H=32,K=128,V=128,BT=64");
  EXPECT_EQ(o_tuning_key(kSmall), "H=4,K=64,V=64,BT=64");
}

TEST(GdnChunkKernels, DoNotSpecializeT) {
  EXPECT_TRUE(post_conv_kernel().do_not_specialize.empty());  // a plain @triton.jit
  for (const jit::KernelSource* k : all_kernels()) {
    if (k == &post_conv_kernel()) continue;
    EXPECT_EQ(k->do_not_specialize, std::vector<std::string>{"T"}) << k->name;
  }
}

// ---------------------------------------------------------------------------------------------
// Compile-only: the wrappers on meta tensors

at::Tensor meta(std::vector<int64_t> shape, at::ScalarType t) {
  return at::empty(shape, at::TensorOptions().device(at::kMeta).dtype(t));
}

// Every argument of chunk_gated_delta_rule for `lens`, on `device`, uninitialized.
struct ChainArgs {
  at::Tensor q, k, v, g, beta, cu, h0, out, ht, scratch;
};

ChainArgs meta_chain(const GdnDims& d, const std::vector<int>& lens) {
  int64_t T = 0;
  for (int n : lens) T += n;
  const int64_t S = static_cast<int64_t>(lens.size());
  ChainArgs a;
  a.q = meta({T, d.num_k_heads, d.head_k_dim}, at::kBFloat16);
  a.k = meta({T, d.num_k_heads, d.head_k_dim}, at::kBFloat16);
  a.v = meta({T, d.num_v_heads, d.head_v_dim}, at::kBFloat16);
  a.g = meta({T, d.num_v_heads}, at::kFloat);
  a.beta = meta({T, d.num_v_heads}, at::kFloat);
  a.cu = meta({S + 1}, at::kInt);
  a.h0 = meta({S, d.num_v_heads, d.head_v_dim, d.head_k_dim}, at::kFloat);
  a.out = meta({T, d.num_v_heads, d.head_v_dim}, at::kBFloat16);
  a.ht = meta({S, d.num_v_heads, d.head_v_dim, d.head_k_dim}, at::kFloat);
  a.scratch = meta({chunk_scratch_bytes(d, T, lens)}, at::kByte);
  return a;
}

void run_chain(jit::JitRuntime& rt, const GdnDims& d, const ChainArgs& a,
               const std::vector<int>& lens) {
  chunk_gated_delta_rule(rt, d, a.q, a.k, a.v, a.g, a.beta, 1.f / std::sqrt(d.head_k_dim), a.cu,
                         lens, a.h0, a.out, a.ht, a.scratch);
}

TEST(GdnChunkCompileOnly, EveryCandidateCompilesOnceAndTIsNotInTheKeys) {
  jit::JitRuntime rt(compile_only_options());
  run_chain(rt, kQwen, meta_chain(kQwen, {1, 63, 64, 65, 200}), {1, 63, 64, 65, 200});
  const auto recs = rt.monitor().records();
  std::map<std::string, int> per_kernel;
  std::map<std::string, std::set<std::string>> keys;
  for (const jit::CompileRecord& r : recs) {
    ++per_kernel[r.kernel];
    keys[r.kernel].insert(r.key);
    EXPECT_EQ(r.selector, "autotune") << r.kernel;
  }
  EXPECT_EQ(per_kernel["gdn_chunk_cumsum"], 4);
  EXPECT_EQ(per_kernel["gdn_chunk_kkt"], 27);
  EXPECT_EQ(per_kernel["gdn_chunk_solve_tril"], 12);
  EXPECT_EQ(per_kernel["gdn_chunk_wy"], 9);
  EXPECT_EQ(per_kernel["gdn_chunk_h"], 12);
  EXPECT_EQ(per_kernel["gdn_chunk_o"], 24);
  EXPECT_EQ(recs.size(), 88u);
  for (const jit::CompileRecord& r : recs) {
    if (r.kernel == "gdn_chunk_kkt") {
      EXPECT_EQ(r.tuning_key, "H=32,K=128,BT=64,IS_VARLEN=1");
      EXPECT_EQ(r.num_candidates, 27);
    }
  }
  // Other token counts (1 and 4096: specializations "1" and "16" had T been specialized) and
  // sequence counts: cached picks, the same binaries, nothing compiled.
  run_chain(rt, kQwen, meta_chain(kQwen, {1}), {1});
  run_chain(rt, kQwen, meta_chain(kQwen, {4000, 96}), {4000, 96});
  EXPECT_EQ(rt.monitor().records().size(), 88u);
  EXPECT_EQ(rt.autotuner().cached_picks(), 6u);
}

TEST(GdnChunkCompileOnly, PostConvKeySpecializesLLikeTriton) {
  jit::JitRuntime rt(compile_only_options());
  auto call = [&](int64_t T) {
    const GdnDims& d = kQwen;
    at::Tensor ba = meta({T, 2 * d.num_v_heads}, at::kBFloat16);
    PostConvOut o{meta({T, 16, 128}, at::kBFloat16), meta({T, 16, 128}, at::kBFloat16),
                  meta({T, 32, 128}, at::kBFloat16), meta({T, 32}, at::kFloat),
                  meta({T, 32}, at::kFloat)};
    fused_post_conv(rt, d, meta({T, d.conv_dim()}, at::kBFloat16), ba.narrow(1, 32, 32),
                    ba.narrow(1, 0, 32), meta({32}, at::kFloat), meta({32}, at::kBFloat16), o);
  };
  call(64);
  call(128);  // same specialization of L (16-divisible): same key
  EXPECT_EQ(rt.monitor().records().size(), 1u);
  call(65);  // a plain @triton.jit specializes L: a new key
  EXPECT_EQ(rt.monitor().records().size(), 2u);
  EXPECT_EQ(rt.monitor().records()[0].selector, "");
}

TEST(GdnChunkCompileOnly, ValidationNamesTheArgument) {
  jit::JitRuntime rt(compile_only_options());
  const std::vector<int> lens{10, 20};
  ChainArgs a = meta_chain(kSmall, lens);
  EXPECT_MENTIONS(run_chain(rt, kSmall, a, {10, 21}), "seq_lens_host");
  ChainArgs b = a;
  b.g = meta({30, 4}, at::kBFloat16);
  EXPECT_MENTIONS(run_chain(rt, kSmall, b, lens), "argument 'g'");
  b = a;
  b.scratch = meta({1024}, at::kByte);
  EXPECT_MENTIONS(run_chain(rt, kSmall, b, lens), "chunk_scratch_bytes");
  b = a;
  b.h0 = meta({2, 4, 64, 32}, at::kFloat);
  EXPECT_MENTIONS(run_chain(rt, kSmall, b, lens), "initial_state");
  b = a;
  b.out = meta({30, 4, 128}, at::kBFloat16).narrow(2, 0, 64);
  EXPECT_MENTIONS(run_chain(rt, kSmall, b, lens), "argument 'out'");
  EXPECT_EQ(rt.monitor().records().size(), 0u);
}

// ---------------------------------------------------------------------------------------------
// GPU

// A runtime for the GPU tests; with GDNC_CACHE_DIR set, its cache directory (compiled kernels and
// autotune picks shared with the benchmark).
jit::JitRuntime& runtime() {
  static jit::JitRuntime* rt = [] {
    jit::JitOptions o;
    if (const char* dir = std::getenv("GDNC_CACHE_DIR")) o.cache_dir = dir;
    return new jit::JitRuntime(o);
  }();
  return *rt;
}

at::Tensor nan_like(std::vector<int64_t> shape, at::ScalarType t) {
  return at::full(shape, NAN, cuda(t));
}

// max |x - ref| / max |ref| and whether x has a NaN.
double rel_max_err(const at::Tensor& x, const at::Tensor& ref) {
  const at::Tensor xd = x.to(at::kCPU).to(at::kDouble);
  EXPECT_FALSE(at::isnan(xd).any().item<bool>()) << "unwritten (NaN) elements";
  const double scale = ref.abs().max().item<double>();
  return (xd - ref).abs().max().item<double>() / std::max(scale, 1e-30);
}

TEST(GdnChunkGpu, PostConvMatchesReference) {
  CS_REQUIRE_GPU();
  for (const GdnDims& d : {kQwen, kSmall}) {
    for (int64_t T : {37, 64}) {
      const int64_t hv = d.num_v_heads;
      // conv output rows wider than conv_dim; a and b columns of one fused [T, 2*Hv] tensor
      const at::Tensor conv_full = random_bf16({T, d.conv_dim() + 24}, 11 + T, 1.0, 0.1);
      const at::Tensor conv = conv_full.narrow(1, 0, d.conv_dim());
      const at::Tensor ba = random_bf16({T, 2 * hv}, 12 + T, 2.0, 0.0);
      const at::Tensor b = ba.narrow(1, 0, hv), a = ba.narrow(1, hv, hv);
      at::manual_seed(13);
      const at::Tensor A_log = (at::rand({hv}) * 3 - 1).to(at::kCUDA);
      const at::Tensor dt_bias = random_bf16({hv}, 14, 1.0, 0.5);
      PostConvOut o{nan_like({T, d.num_k_heads, d.head_k_dim}, at::kBFloat16),
                    nan_like({T, d.num_k_heads, d.head_k_dim}, at::kBFloat16),
                    nan_like({T, hv, d.head_v_dim}, at::kBFloat16), nan_like({T, hv}, at::kFloat),
                    nan_like({T, hv}, at::kFloat)};
      fused_post_conv(runtime(), d, conv, a, b, A_log, dt_bias, o);
      const ref::PostConv r = ref::post_conv(d, conv, a, b, A_log, dt_bias);
      EXPECT_LT(rel_max_err(o.q, r.q), 8e-3) << "T=" << T;
      EXPECT_LT(rel_max_err(o.k, r.k), 8e-3) << "T=" << T;
      EXPECT_EQ(rel_max_err(o.v, r.v), 0.0) << "T=" << T;
      EXPECT_LT(rel_max_err(o.g, r.g), 1e-5) << "T=" << T;
      EXPECT_LT(rel_max_err(o.beta, r.beta), 1e-5) << "T=" << T;
    }
  }
}

// Runs the chain on random post-conv-like inputs and compares with the float64 recurrence.
void check_chain(const GdnDims& d, const std::vector<int>& lens, bool with_initial_state,
                 uint64_t seed) {
  int64_t T = 0;
  for (int n : lens) T += n;
  const int64_t S = static_cast<int64_t>(lens.size());
  const int64_t hk = d.num_k_heads, hv = d.num_v_heads, K = d.head_k_dim, V = d.head_v_dim;
  auto l2 = [](const at::Tensor& x) {
    const at::Tensor f = x.to(at::kFloat);
    return (f / f.norm(2, -1, true)).to(at::kBFloat16);
  };
  const at::Tensor q = l2(random_bf16({T, hk, K}, seed, 1.0, 0.0));
  const at::Tensor k = l2(random_bf16({T, hk, K}, seed + 1, 1.0, 0.0));
  const at::Tensor v = random_bf16({T, hv, V}, seed + 2, 1.0, 0.0);
  at::manual_seed(seed + 3);
  // gates as Qwen3-Next makes them: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)
  const at::Tensor g = (-at::rand({T, hv}) * 0.9 - 0.02).to(at::kCUDA);
  const at::Tensor beta = at::sigmoid(at::randn({T, hv}) * 2).to(at::kCUDA);
  std::vector<int32_t> cu_host{0};
  for (int n : lens) cu_host.push_back(cu_host.back() + n);
  const at::Tensor cu = at::tensor(cu_host, at::kInt).to(at::kCUDA);
  at::Tensor h0 = at::zeros({S, hv, V, K}, cuda(at::kFloat));
  if (with_initial_state) {
    h0 = (at::randn({S, hv, V, K}) * 0.3).to(at::kCUDA);
    if (S > 1) h0[1].zero_();  // a new sequence among continued ones
  }
  const int64_t row = hv * V + 64;  // output rows wider than [Hv, V]
  const at::Tensor out_full = nan_like({T, row}, at::kBFloat16);
  const at::Tensor out = out_full.narrow(1, 0, hv * V).view({T, hv, V});
  const at::Tensor ht = nan_like({S, hv, V, K}, at::kFloat);
  const at::Tensor scratch = at::full({chunk_scratch_bytes(d, T, lens)}, kSentinel,
                                      cuda(at::kByte));
  const float scale = 1.f / std::sqrt(static_cast<float>(K));
  chunk_gated_delta_rule(runtime(), d, q, k, v, g, beta, scale, cu, lens, h0, out, ht, scratch);
  const ref::Recurrent r =
      ref::gated_delta_rule(d, q, k, v, g, beta, scale, lens, with_initial_state ? h0 : at::Tensor());
  const double eo = rel_max_err(out, r.out), es = rel_max_err(ht, r.final_state);
  EXPECT_LT(eo, 3e-2) << "output";
  EXPECT_LT(es, 3e-2) << "final state";
  // RMS error against RMS value: bf16 intermediates keep it well below 1%
  const at::Tensor od = out.to(at::kCPU).to(at::kDouble);
  const double rms = ((od - r.out).pow(2).mean() / r.out.pow(2).mean()).sqrt().item<double>();
  EXPECT_LT(rms, 1e-2) << "output rms";
  std::printf("[ gdn_chunk ] Hk=%d Hv=%d K=%d V=%d T=%lld S=%lld h0=%d: max err %.2e (out) "
              "%.2e (state), rms %.2e\n",
              d.num_k_heads, d.num_v_heads, K, V, static_cast<long long>(T),
              static_cast<long long>(S), with_initial_state ? 1 : 0, eo, es, rms);
  // the padding of the output rows is untouched
  EXPECT_TRUE(at::isnan(out_full.narrow(1, hv * V, 64).to(at::kFloat)).all().item<bool>());
}

TEST(GdnChunkGpu, ChainMatchesRecurrenceVarlenWithInitialState) {
  CS_REQUIRE_GPU();
  check_chain(kQwen, {1, 63, 64, 65, 200}, true, 100);
}

TEST(GdnChunkGpu, ChainMatchesRecurrenceLongSequenceNoInitialState) {
  CS_REQUIRE_GPU();
  check_chain(kQwen, {300}, false, 200);
}

TEST(GdnChunkGpu, ChainMatchesRecurrenceHeadDim64) {
  CS_REQUIRE_GPU();
  check_chain(kSmall, {1, 63, 64, 65, 200}, true, 300);
  check_chain(kSmall, {300}, false, 400);
}

}  // namespace
}  // namespace coldstart::gdn_chunk
