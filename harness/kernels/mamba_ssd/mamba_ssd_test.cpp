// mamba_ssd kernels: CPU tests of the chunk metadata, dims, candidate lists and tuning keys; the
// compile-only path of the wrappers (every autotune candidate compiles once per tuning key, the
// HAS_INITSTATES and state-dtype variants, T and the number of sequences staying out of the keys,
// strides entering them, argument validation); GPU tests of the whole chain against the float64
// token-by-token recurrence (one and many chunks, varlen batches with continuing sequences whose
// first chunk is shortened, initial states, float32 and bf16 state dtype, strided views,
// NaN-poisoned output and intermediates). GPU tests skip without a CUDA GPU and a CUDA libtorch.
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
#include "harness/kernels/mamba_ssd/mamba_ssd.h"
#include "harness/kernels/mamba_ssd/mamba_ssd_reference.h"
#include "harness/kernels/test_util.h"

namespace coldstart::mamba_ssd {
namespace {

using namespace kernels::test;  // test_util.h
using jit::DType;

const SsdDims kNano = ssd_dims(kernels::shapes::kNemotronNanoMambaTp1);
const SsdDims kTest{8, 64, 2, 128, 128};   // small heads, Nemotron head / state / chunk sizes

// ---------------------------------------------------------------------------------------------
// CPU: metadata, dims, candidates, keys

TEST(MambaSsdMetadata, FreshSequencesAreCutIntoChunks) {
  const ChunkMetadata m = compute_chunk_metadata({0, 300}, {0}, 128);
  EXPECT_EQ(m.cu_chunk_seqlens, (std::vector<int32_t>{0, 128, 256, 300}));
  EXPECT_EQ(m.last_chunk_indices, (std::vector<int32_t>{2}));
  EXPECT_EQ(m.seq_idx, (std::vector<int32_t>{0, 0, 0}));
}

TEST(MambaSsdMetadata, ContinuingSequenceFinishesItsChunkFirst) {
  // seq 1 has 200 tokens in its state: 56 tokens finish its chunk [128, 256), then 128 + 116;
  // seq 2 continues on a boundary (128); seq 3 continues at 10 with only 5 new tokens.
  const ChunkMetadata m = compute_chunk_metadata({0, 50, 350, 353, 358}, {0, 200, 128, 10}, 128);
  EXPECT_EQ(m.cu_chunk_seqlens, (std::vector<int32_t>{0, 50, 106, 234, 350, 353, 358}));
  EXPECT_EQ(m.last_chunk_indices, (std::vector<int32_t>{0, 3, 4, 5}));
  EXPECT_EQ(m.seq_idx, (std::vector<int32_t>{0, 1, 1, 1, 2, 3}));
}

TEST(MambaSsdMetadata, EdgeCasesAndValidation) {
  // no new token on a chunk boundary: no chunk, the previous chunk's index (vLLM's quirk)
  const ChunkMetadata m = compute_chunk_metadata({0, 0, 4}, {0, 0}, 128);
  EXPECT_EQ(m.cu_chunk_seqlens, (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(m.last_chunk_indices, (std::vector<int32_t>{-1, 0}));
  EXPECT_TRUE(compute_chunk_metadata({0}, {}, 128).seq_idx.empty());
  EXPECT_THROW(compute_chunk_metadata({}, {}, 128), InputError);
  EXPECT_THROW(compute_chunk_metadata({1, 4}, {0}, 128), InputError);
  EXPECT_THROW(compute_chunk_metadata({0, 4, 2}, {0, 0}, 128), InputError);
  EXPECT_THROW(compute_chunk_metadata({0, 4}, {0, 0}, 128), InputError);
  EXPECT_THROW(compute_chunk_metadata({0, 4}, {-1}, 128), InputError);
  EXPECT_THROW(compute_chunk_metadata({0, 4}, {0}, 0), InputError);
}

TEST(MambaSsdDims, Validation) {
  EXPECT_NO_THROW(kNano.validate());
  EXPECT_NO_THROW((SsdDims{16, 64, 1, 128, 256}.validate()));
  EXPECT_THROW((SsdDims{64, 64, 3, 128, 128}.validate()), InputError);
  EXPECT_THROW((SsdDims{64, 80, 8, 128, 128}.validate()), InputError);
  EXPECT_THROW((SsdDims{64, 64, 8, 128, 100}.validate()), InputError);
  EXPECT_THROW((SsdDims{64, 64, 8, 512, 128}.validate()), InputError);
}

TEST(MambaSsdCandidates, ListsMatchVllm) {
  EXPECT_EQ(cumsum_candidates().size(), 6u);
  EXPECT_EQ(chunk_state_candidates().size(), 14u);
  EXPECT_EQ(state_passing_candidates().size(), 6u);
  EXPECT_EQ(bmm_candidates().size(), 9u);
  EXPECT_EQ(chunk_scan_candidates().size(), 23u);
  EXPECT_EQ(cumsum_candidates()[0].name, "BLOCK_SIZE_H=2,warps=4,stages=3");
  EXPECT_EQ(state_passing_candidates().back().name, "BLOCK_SIZE=2048,warps=4,stages=3");
  EXPECT_EQ(chunk_state_candidates()[0].name,
            "BLOCK_SIZE_M=32,BLOCK_SIZE_N=32,BLOCK_SIZE_K=32,warps=4,stages=3");
  EXPECT_EQ(bmm_candidates()[0].name,
            "BLOCK_SIZE_M=128,BLOCK_SIZE_N=256,BLOCK_SIZE_K=64,warps=8,stages=3");
  EXPECT_EQ(chunk_scan_candidates()[5].name,
            "BLOCK_SIZE_M=64,BLOCK_SIZE_N=64,BLOCK_SIZE_K=64,warps=4,stages=1");
  for (const auto& list : {cumsum_candidates(), chunk_state_candidates(),
                           state_passing_candidates(), bmm_candidates(), chunk_scan_candidates()}) {
    std::set<std::string> names;
    for (const jit::KernelConfig& c : list) names.insert(c.name);
    EXPECT_EQ(names.size(), list.size());
  }
}

TEST(MambaSsdCandidates, TuningKeysCarryDtypesAndNoneness) {
  EXPECT_EQ(cumsum_tuning_key(kNano, DType::kBF16, DType::kBF16),
            "chunk_size=128,nheads=64|dt:bf16,A:fp32,dt_bias:bf16,dt_out:fp32,dA_cumsum:fp32,"
            "cu_chunk_seqlens:i32");
  EXPECT_EQ(chunk_state_tuning_key(kNano, DType::kBF16),
            "hdim=64,dstate=128,chunk_size=128|x:bf16,b:bf16,states:fp32,dt:fp32,dA_cumsum:fp32,"
            "cu_chunk_seqlens:i32");
  EXPECT_EQ(state_passing_tuning_key(kNano, DType::kF32, std::nullopt),
            "dim=8192|states:fp32,out:fp32,dA_cs:fp32,initstates:None,last_chunk_indices:i32");
  EXPECT_NE(state_passing_tuning_key(kNano, DType::kF32, DType::kF32),
            state_passing_tuning_key(kNano, DType::kF32, std::nullopt));
  EXPECT_NE(state_passing_tuning_key(kNano, DType::kBF16, std::nullopt),
            state_passing_tuning_key(kNano, DType::kF32, std::nullopt));
  EXPECT_EQ(bmm_tuning_key(kNano, DType::kBF16),
            "chunk_size=128,K=128,IS_CAUSAL=0|a:bf16,b:bf16,out:fp32,cu_chunk_seqlens:i32");
  EXPECT_EQ(chunk_scan_tuning_key(kNano, DType::kBF16, DType::kF32, DType::kBF16, std::nullopt),
            "chunk_size=128,hdim=64,dstate=128,IS_CAUSAL=1|cb:fp32,x:bf16,z:None,out:bf16,"
            "dt:fp32,dA_cumsum:fp32,seq_idx:i32,C:bf16,states:fp32,D:bf16,initstates:None,"
            "cu_chunk_seqlens:i32");
  // the key does not depend on the number of heads except for the cumsum
  const SsdDims super = ssd_dims(kernels::shapes::kNemotronSuperMambaTp8);
  EXPECT_EQ(chunk_scan_tuning_key(super, DType::kBF16, DType::kF32, DType::kBF16, std::nullopt),
            chunk_scan_tuning_key(kNano, DType::kBF16, DType::kF32, DType::kBF16, std::nullopt));
  EXPECT_NE(cumsum_tuning_key(super, DType::kBF16, DType::kBF16),
            cumsum_tuning_key(kNano, DType::kBF16, DType::kBF16));
  EXPECT_EQ(float_bits(INFINITY), 2139095040);
  EXPECT_EQ(float_bits(0.0), 0);
}

// ---------------------------------------------------------------------------------------------
// Compile-only: the wrappers on meta tensors

at::Tensor meta(std::vector<int64_t> shape, at::ScalarType t) {
  return at::empty(shape, at::TensorOptions().device(at::kMeta).dtype(t));
}

// Every argument of chunk_scan_combined_varlen, as MambaMixer2 lays them out: x / B / C are column
// views of one conv output row [x | B | C], dt a column slice of the in_proj row.
struct ChainArgs {
  at::Tensor x, dt, A, B, C, D, dt_bias, seq_idx, cu_seqlens, cu_chunk, last_chunk, h0, out;
};

ChainArgs chain_args(const SsdDims& d, int64_t T, int64_t batch, int64_t nchunks,
                     const at::TensorOptions& o, int64_t proj_pad = 0, int64_t conv_pad = 0) {
  const int64_t H = d.nheads, P = d.head_dim, G = d.ngroups, N = d.dstate;
  const int64_t conv = H * P + 2 * G * N, proj = H * P + conv + H + proj_pad;
  ChainArgs a;
  const at::Tensor xbc = at::empty({T, conv + conv_pad}, o.dtype(at::kBFloat16));
  a.x = xbc.narrow(1, 0, H * P).view({T, H, P});
  a.B = xbc.narrow(1, H * P, G * N).view({T, G, N});
  a.C = xbc.narrow(1, H * P + G * N, G * N).view({T, G, N});
  a.dt = at::empty({T, proj}, o.dtype(at::kBFloat16)).narrow(1, H * P + conv, H);
  a.A = at::empty({H}, o.dtype(at::kFloat));
  a.D = at::empty({H}, o.dtype(at::kBFloat16));
  a.dt_bias = at::empty({H}, o.dtype(at::kBFloat16));
  a.seq_idx = at::empty({nchunks}, o.dtype(at::kInt));
  a.cu_seqlens = at::empty({batch + 1}, o.dtype(at::kInt));
  a.cu_chunk = at::empty({nchunks + 1}, o.dtype(at::kInt));
  a.last_chunk = at::empty({batch}, o.dtype(at::kInt));
  a.out = at::empty({T, H * P}, o.dtype(at::kBFloat16)).view({T, H, P});
  return a;
}

at::Tensor run_chain(jit::JitRuntime& rt, const SsdDims& d, const ChainArgs& a,
                     at::ScalarType state_dtype) {
  return chunk_scan_combined_varlen(rt, a.x, a.dt, a.A, a.B, a.C, d.chunk_size, a.D, a.dt_bias,
                                    a.seq_idx, a.cu_seqlens, a.cu_chunk, a.last_chunk, a.h0, true,
                                    0.0, INFINITY, a.out, state_dtype);
}

std::map<std::string, int> compiles_per_kernel(jit::JitRuntime& rt) {
  std::map<std::string, int> n;
  for (const jit::CompileRecord& r : rt.monitor().records()) ++n[r.kernel];
  return n;
}

// One compile-only runtime for the key tests (each kernel compiles once per key).
jit::JitRuntime& meta_runtime() {
  static jit::JitRuntime* rt = new jit::JitRuntime(compile_only_options());
  return *rt;
}

const auto kMetaOpts = at::TensorOptions().device(at::kMeta);

TEST(MambaSsdCompileOnly, KeysTheInitialStateVariantsAndTheStateDtype) {
  jit::JitRuntime& rt = meta_runtime();
  const size_t before = rt.monitor().records().size();
  const size_t picks = rt.autotuner().cached_picks();
  const auto n0 = compiles_per_kernel(rt);
  auto added = [&](const char* kernel) {
    const auto n = compiles_per_kernel(rt);
    const auto it = n0.find(kernel);
    return n.count(kernel) ? n.at(kernel) - (it == n0.end() ? 0 : it->second) : 0;
  };
  // 1. a fresh prefill: every candidate of every kernel compiles once
  ChainArgs a = chain_args(kNano, 3000, 2, 25, kMetaOpts);
  const at::Tensor st = run_chain(rt, kNano, a, at::kFloat);
  EXPECT_TRUE(st.is_meta());
  EXPECT_EQ(st.sizes(), (at::IntArrayRef{2, 64, 64, 128}));
  EXPECT_EQ(st.scalar_type(), at::kFloat);
  if (before == 0) {  // this test ran first on the shared runtime
    EXPECT_EQ(added("mamba_ssd_cumsum"), 6);
    EXPECT_EQ(added("mamba_ssd_chunk_state"), 14);
    EXPECT_EQ(added("mamba_ssd_state_passing"), 6);
    EXPECT_EQ(added("mamba_ssd_bmm"), 9);
    EXPECT_EQ(added("mamba_ssd_chunk_scan"), 23);
    EXPECT_EQ(rt.monitor().records().size(), 58u);
    EXPECT_EQ(rt.autotuner().cached_picks(), 5u);
  }
  for (const jit::CompileRecord& r : rt.monitor().records()) {
    EXPECT_EQ(r.selector, "autotune") << r.kernel;
    if (r.kernel == "mamba_ssd_state_passing") {
      EXPECT_EQ(r.tuning_key, state_passing_tuning_key(kNano, DType::kF32, std::nullopt));
      EXPECT_NE(r.key.find("HAS_INITSTATES=0"), std::string::npos);
    }
  }
  const size_t fresh = rt.monitor().records().size();
  // 2. other token / sequence / chunk counts (T 128 vs 3000: T is no kernel argument, nchunks
  // enters only as nchunks * chunk_size strides): no compile
  run_chain(rt, kNano, chain_args(kNano, 128, 1, 1, kMetaOpts), at::kFloat);
  run_chain(rt, kNano, chain_args(kNano, 1, 1, 1, kMetaOpts), at::kFloat);
  run_chain(rt, kNano, chain_args(kNano, 8192, 7, 70, kMetaOpts), at::kFloat);
  EXPECT_EQ(rt.monitor().records().size(), fresh);
  // 3. a continued prefill (initial states): HAS_INITSTATES=1 variants of the two kernels that
  // read them, each autotuned under its own key (initstates:fp32 instead of None)
  const int sp = added("mamba_ssd_state_passing"), sc = added("mamba_ssd_chunk_scan");
  a.h0 = meta({2, 64, 64, 128}, at::kFloat);
  run_chain(rt, kNano, a, at::kFloat);
  EXPECT_EQ(added("mamba_ssd_state_passing"), sp + 6);
  EXPECT_EQ(added("mamba_ssd_chunk_scan"), sc + 23);
  EXPECT_EQ(rt.monitor().records().size(), fresh + 29);
  const jit::CompileRecord& init_rec = rt.monitor().records().back();
  EXPECT_NE(init_rec.key.find("HAS_INITSTATES=1"), std::string::npos);
  EXPECT_NE(init_rec.tuning_key.find("initstates:fp32"), std::string::npos);
  // 4. a bf16 SSM cache: the state dtype is in both kernels' keys, the others are untouched
  a.h0 = meta({2, 64, 64, 128}, at::kBFloat16);
  const at::Tensor st16 = run_chain(rt, kNano, a, at::kBFloat16);
  EXPECT_EQ(st16.scalar_type(), at::kBFloat16);
  EXPECT_EQ(added("mamba_ssd_state_passing"), sp + 12);
  EXPECT_EQ(added("mamba_ssd_chunk_scan"), sc + 46);
  EXPECT_EQ(rt.monitor().records().size(), fresh + 58);
  EXPECT_EQ(rt.autotuner().cached_picks(), picks + (before == 0 ? 9u : 4u));
}

TEST(MambaSsdCompileOnly, StridesAndHeadsEnterTheKeysLikeTriton) {
  jit::JitRuntime& rt = meta_runtime();
  run_chain(rt, kNano, chain_args(kNano, 256, 1, 2, kMetaOpts), at::kFloat);  // warm
  const size_t before = rt.monitor().records().size();
  const auto n0 = compiles_per_kernel(rt);
  // an in_proj row of 10305 elements: stride_dt_seqlen is no longer divisible by 16 -> one new
  // cumsum binary (the pick; the tuning key is unchanged); the other kernels do not read dt rows
  run_chain(rt, kNano, chain_args(kNano, 256, 1, 2, kMetaOpts, 1), at::kFloat);
  auto n = compiles_per_kernel(rt);
  EXPECT_EQ(rt.monitor().records().size() - before, 1u);
  EXPECT_EQ(n["mamba_ssd_cumsum"], n0.at("mamba_ssd_cumsum") + 1);
  const jit::CompileRecord last = rt.monitor().records().back();
  EXPECT_NE(last.key.find("i64,"), std::string::npos);  // the unspecialized stride
  EXPECT_EQ(last.selector, "autotune");
  // conv output rows of 6152 elements (not a multiple of 16): the token strides of x, B and C
  // lose their specialization -> one new binary (the pick) of each kernel that reads them
  run_chain(rt, kNano, chain_args(kNano, 256, 1, 2, kMetaOpts, 0, 8), at::kFloat);
  n = compiles_per_kernel(rt);
  EXPECT_EQ(rt.monitor().records().size() - before, 4u);
  EXPECT_EQ(n["mamba_ssd_chunk_state"], n0.at("mamba_ssd_chunk_state") + 1);
  EXPECT_EQ(n["mamba_ssd_bmm"], n0.at("mamba_ssd_bmm") + 1);
  EXPECT_EQ(n["mamba_ssd_chunk_scan"], n0.at("mamba_ssd_chunk_scan") + 1);
}

TEST(MambaSsdCompileOnly, ValidationNamesTheArgument) {
  jit::JitRuntime rt(compile_only_options());
  const ChainArgs a = chain_args(kTest, 64, 1, 1, kMetaOpts);
  ChainArgs b = a;
  b.x = meta({64, 8, 64}, at::kFloat);
  EXPECT_MENTIONS(run_chain(rt, kTest, b, at::kFloat), "argument 'x'");
  b = a;
  b.C = meta({64, 2, 64}, at::kBFloat16);
  EXPECT_MENTIONS(run_chain(rt, kTest, b, at::kFloat), "argument 'C'");
  b = a;
  b.out = meta({64, 8, 65}, at::kBFloat16).narrow(2, 1, 64);
  EXPECT_MENTIONS(run_chain(rt, kTest, b, at::kFloat), "argument 'out'");
  b = a;
  b.h0 = meta({2, 8, 64, 128}, at::kFloat);
  EXPECT_MENTIONS(run_chain(rt, kTest, b, at::kFloat), "argument 'initial_states'");
  b = a;
  b.cu_chunk = meta({1}, at::kInt);
  EXPECT_MENTIONS(run_chain(rt, kTest, b, at::kFloat), "argument 'cu_chunk_seqlens'");
  b = a;
  b.seq_idx = meta({2}, at::kInt);
  EXPECT_MENTIONS(run_chain(rt, kTest, b, at::kFloat), "argument 'seq_idx'");
  b = a;
  b.D = meta({8}, at::kHalf);
  EXPECT_MENTIONS(run_chain(rt, kTest, b, at::kFloat), "argument 'D'");
  EXPECT_MENTIONS(run_chain(rt, kTest, a, at::kInt), "argument 'state_dtype'");
  EXPECT_THROW(chunk_scan_combined_varlen(rt, a.x, a.dt, a.A, a.B, a.C, 96, a.D, a.dt_bias,
                                          a.seq_idx, a.cu_seqlens, a.cu_chunk, a.last_chunk, a.h0,
                                          true, 0.0, INFINITY, a.out, at::kFloat),
               InputError);
  EXPECT_EQ(rt.monitor().records().size(), 0u);
}

// ---------------------------------------------------------------------------------------------
// GPU

// A runtime for the GPU tests; with MSSD_CACHE_DIR set, its cache directory (compiled kernels and
// autotune picks shared with the benchmark).
jit::JitRuntime& runtime() {
  static jit::JitRuntime* rt = [] {
    jit::JitOptions o;
    if (const char* dir = std::getenv("MSSD_CACHE_DIR")) o.cache_dir = dir;
    return new jit::JitRuntime(o);
  }();
  return *rt;
}

// Fills freed blocks of torch's caching allocator with NaN, so the chain's intermediates (which
// it allocates with at::empty) start poisoned: anything the kernels fail to write shows up.
void poison_allocator(int64_t bytes) {
  at::Tensor p = at::full({bytes / 4}, NAN, cuda(at::kFloat));
  p.reset();
}

// max |x - ref| / max |ref| (x must be NaN-free) and the RMS error relative to the RMS value.
std::pair<double, double> errors(const at::Tensor& x, const at::Tensor& ref) {
  const at::Tensor xd = x.to(at::kCPU).to(at::kDouble);
  EXPECT_FALSE(at::isnan(xd).any().item<bool>()) << "unwritten (NaN) elements";
  const double scale = ref.abs().max().item<double>();
  const double max_err = (xd - ref).abs().max().item<double>() / std::max(scale, 1e-30);
  const double rms = ((xd - ref).pow(2).mean() / ref.pow(2).mean()).sqrt().item<double>();
  return {max_err, rms};
}

struct ChainCase {
  std::vector<int32_t> lens;      // new tokens per sequence
  std::vector<int32_t> computed;  // tokens already in each sequence's state
  bool initial_states = false;
  at::ScalarType state_dtype = at::kFloat;
  uint64_t seed = 1;
  // padding of the conv output rows: 16 keeps x / B / C rows 16-byte aligned (the kernels'
  // 16-byte staging), 8 does not (their 4-byte staging)
  int64_t conv_pad = 8;
};

void check_chain(const SsdDims& d, const ChainCase& k) {
  const int64_t H = d.nheads, P = d.head_dim, G = d.ngroups, N = d.dstate;
  std::vector<int32_t> qsl{0};
  for (int32_t n : k.lens) qsl.push_back(qsl.back() + n);
  const int64_t T = qsl.back(), S = static_cast<int64_t>(k.lens.size());
  const ChunkMetadata md = compute_chunk_metadata(qsl, k.computed, d.chunk_size);
  auto dev_i32 = [](const std::vector<int32_t>& v) {
    return at::tensor(v, at::kInt).to(at::kCUDA);
  };
  // conv output rows [x | B | C | pad] and in_proj rows [gate | x B C | dt | pad] as vLLM has them
  const int64_t conv = H * P + 2 * G * N, proj = H * P + conv + H + 6;
  const at::Tensor xbc = random_bf16({T, conv + k.conv_pad}, k.seed, 1.0, 0.0);
  const at::Tensor x = xbc.narrow(1, 0, H * P).view({T, H, P});
  const at::Tensor B = xbc.narrow(1, H * P, G * N).view({T, G, N});
  const at::Tensor C = xbc.narrow(1, H * P + G * N, G * N).view({T, G, N});
  const at::Tensor dt = random_bf16({T, proj}, k.seed + 1, 1.0, -1.5).narrow(1, H * P + conv, H);
  at::manual_seed(static_cast<int64_t>(k.seed) + 2);
  const at::Tensor A = (-at::exp(at::rand({H}) * 2.0 - 1.0)).to(at::kCUDA);  // A = -exp(A_log)
  const at::Tensor D = random_bf16({H}, k.seed + 3, 1.0, 0.0);
  const at::Tensor dt_bias = random_bf16({H}, k.seed + 4, 0.5, 0.0);
  at::Tensor h0;
  if (k.initial_states) {
    // vLLM: torch.where(has_initial_states, ssm_state[idx], 0) in the cache dtype
    at::manual_seed(static_cast<int64_t>(k.seed) + 5);
    at::Tensor h = at::randn({S, H, P, N}) * 0.5;
    for (int64_t s = 0; s < S; ++s) {
      if (k.computed[s] == 0) h[s].zero_();
    }
    h0 = h.to(k.state_dtype).to(at::kCUDA);
  }
  const at::Tensor out_full = at::full({T, H * P + 16}, NAN, cuda(at::kBFloat16));
  const at::Tensor out = out_full.narrow(1, 0, H * P).view({T, H, P});
  poison_allocator(64ll << 20);
  const at::Tensor st = chunk_scan_combined_varlen(
      runtime(), x, dt, A, B, C, d.chunk_size, D, dt_bias, dev_i32(md.seq_idx), dev_i32(qsl),
      dev_i32(md.cu_chunk_seqlens), dev_i32(md.last_chunk_indices), h0, true, 0.0, INFINITY, out,
      k.state_dtype);
  ASSERT_EQ(st.scalar_type(), k.state_dtype);
  ASSERT_EQ(st.sizes(), (at::IntArrayRef{S, H, P, N}));
  std::vector<int64_t> lens64(k.lens.begin(), k.lens.end());
  const ref::Recurrent r =
      ref::ssd_recurrence(x, dt, A, B, C, D, dt_bias, lens64, h0, true, 0.0, INFINITY);
  const auto [eo, ro] = errors(out, r.out);
  const auto [es, rs] = errors(st, r.final_state);
  // bf16 inputs; the chain rounds to bf16 the scaled B (chunk state), the decayed CB (scan) and
  // the carried state before the products, each ~2^-9 relative: RMS errors stay well under 1%.
  EXPECT_LT(eo, 3e-2) << "output";
  EXPECT_LT(ro, 1e-2) << "output rms";
  EXPECT_LT(es, 3e-2) << "final state";
  EXPECT_LT(rs, 1e-2) << "final state rms";
  std::printf(
      "[ mamba_ssd ] H=%d P=%d G=%d N=%d cs=%d T=%lld S=%lld chunks=%zu h0=%d state=%s pad=%lld: "
      "out max %.2e rms %.2e, state max %.2e rms %.2e\n",
      d.nheads, d.head_dim, d.ngroups, d.dstate, d.chunk_size, static_cast<long long>(T),
      static_cast<long long>(S), md.seq_idx.size(), k.initial_states ? 1 : 0,
      c10::toString(k.state_dtype), static_cast<long long>(k.conv_pad), eo, ro, es, rs);
  // the padding of the output rows is untouched
  EXPECT_TRUE(at::isnan(out_full.narrow(1, H * P, 16).to(at::kFloat)).all().item<bool>());
}

TEST(MambaSsdGpu, OneFullChunk) {
  CS_REQUIRE_GPU();
  check_chain(kTest, {{128}, {0}, false, at::kFloat, 10, 16});
}

TEST(MambaSsdGpu, PartialChunksWithInitialState) {
  CS_REQUIRE_GPU();
  check_chain(kTest, {{300}, {0}, false, at::kFloat, 20, 16});
  check_chain(kTest, {{200}, {384}, true, at::kFloat, 30});  // continues on a boundary
}

TEST(MambaSsdGpu, VarlenBatchWithContinuingSequences) {
  CS_REQUIRE_GPU();
  // new sequences among continued ones, a continuation off the chunk boundary (77 + 300 tokens:
  // first chunk 51 tokens), one shorter than its first chunk (200 + 20)
  const ChainCase k{{1, 127, 129, 300, 64, 20}, {0, 200, 0, 77, 128, 200}, true, at::kFloat, 40};
  check_chain(kTest, k);
}

TEST(MambaSsdGpu, Bf16StateDtype) {
  CS_REQUIRE_GPU();
  const ChainCase k{{1, 127, 129, 300, 64, 20}, {0, 200, 0, 77, 128, 200}, true, at::kBFloat16, 50};
  check_chain(kTest, k);
}

// The served models' own head counts (model_shapes.h), two sequences, one continuing.
TEST(MambaSsdGpu, ServedModelShapes) {
  CS_REQUIRE_GPU();
  check_chain(kNano, {{300, 77}, {0, 130}, true, at::kFloat, 80, 16});
  check_chain(ssd_dims(kernels::shapes::kNemotronSuperMambaTp8), {{200}, {0}, false, at::kFloat, 90});
}

TEST(MambaSsdGpu, ManyChunks) {
  CS_REQUIRE_GPU();
  check_chain(kTest, {{1500, 548}, {0, 0}, false, at::kFloat, 70, 16});
}

}  // namespace
}  // namespace coldstart::mamba_ssd
