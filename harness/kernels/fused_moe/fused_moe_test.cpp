// Fused MoE kernels: CPU tests of vLLM's host-side rules (naive assignment, buffer sizes, EM,
// configs, shared memory), of the reference itself and of the compile-only path (validation,
// compile keys, selection provenance); GPU tests of every kernel against the libtorch reference
// with poisoned outputs (they skip without a CUDA GPU and a CUDA libtorch).
#include <gtest/gtest.h>

#include <iostream>
#include <numeric>

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/jit/select.h"
#include "harness/kernels/fused_moe/fused_moe.h"
#include "harness/kernels/fused_moe/fused_moe_reference.h"
#include "harness/kernels/test_util.h"

namespace coldstart::fused_moe {
namespace {

using namespace kernels::test;  // test_util.h

const MoeShape kQwen = moe_shape(kernels::shapes::kQwen3NextMoe);
const MoeShape kSmall{8, 128, 256, 2, false};

std::string table_dir() {
  const char* dir = std::getenv("COLDSTART_SOURCE_DIR");
  return std::string(dir != nullptr ? dir : ".") + "/fixtures/tuned-configs/fused_moe";
}
const ConfigSource kH200{table_dir(), "NVIDIA H200"};

// ---------------------------------------------------------------------------------------------
// CPU: vLLM's host-side rules

TEST(FusedMoeTables, FileNamesLikeVllm) {
  EXPECT_EQ(table_file_name(512, 512, "NVIDIA H200"),
            "E=512,N=512,device_name=NVIDIA_H200.json");
  EXPECT_EQ(table_file_name(128, 1856, "NVIDIA H200", "fp8_w8a8"),
            "E=128,N=1856,device_name=NVIDIA_H200,dtype=fp8_w8a8.json");
  EXPECT_EQ(table_file_name(256, 256, "NVIDIA H200", "fp8_w8a8", {128, 128}),
            "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json");
  // `not all(block_shape)`: a zero drops the selector.
  EXPECT_EQ(table_file_name(256, 256, "NVIDIA H200", "", {0, 128}),
            "E=256,N=256,device_name=NVIDIA_H200.json");
  EXPECT_EQ(table_file_name(128, 1856, "NVIDIA H100 80GB HBM3"),
            "E=128,N=1856,device_name=NVIDIA_H100_80GB_HBM3.json");
}

TEST(FusedMoeTables, DefaultConfigLikeVllm) {
  // get_default_config: M <= E and M > E.
  EXPECT_EQ(default_config(8, 8).name,
            "BLOCK_SIZE_M=16,BLOCK_SIZE_N=32,BLOCK_SIZE_K=64,GROUP_SIZE_M=1,warps=4,stages=1");
  EXPECT_EQ(default_config(1000, 8).name,
            "BLOCK_SIZE_M=64,BLOCK_SIZE_N=64,BLOCK_SIZE_K=32,GROUP_SIZE_M=8,warps=4,stages=1");
}

TEST(FusedMoeRules, NaiveAssignmentWhenPairsTimesFourFitExperts) {
  for (int64_t m = 1; m <= 12; ++m) EXPECT_TRUE(uses_naive_block_assignment(m, 10, 512)) << m;
  EXPECT_FALSE(uses_naive_block_assignment(13, 10, 512));  // 13 * 10 * 4 = 520 > 512
  EXPECT_TRUE(uses_naive_block_assignment(1, 2, 8));
  EXPECT_FALSE(uses_naive_block_assignment(2, 2, 8));
  EXPECT_TRUE(uses_naive_block_assignment(4, 8, 128));  // Nemotron-like E=128: M <= 4
  EXPECT_FALSE(uses_naive_block_assignment(5, 8, 128));
}

TEST(FusedMoeRules, SortedLengthAndEm) {
  EXPECT_EQ(max_num_tokens_padded(640, 512, 16), 640 + 512 * 15);
  EXPECT_EQ(max_num_tokens_padded(130, 512, 16), 130 * 16);  // numel < E: min(numel * bm, ...)
  EXPECT_EQ(max_num_tokens_padded(4, 8, 16), 4 * 16);        // min(64, 4 + 8 * 15)
  EXPECT_EQ(max_num_tokens_padded(8, 8, 16), 8 + 8 * 15);     // numel == E: no clamp
  EXPECT_EQ(gemm_em(true, 50, 0, 5, 10, 16), 800);
  EXPECT_EQ(gemm_em(false, 130, 2080, 13, 10, 16), 2080);     // a_rows 13 < 16: min(2080, 2080)
  EXPECT_EQ(gemm_em(false, 640, 8320, 64, 10, 16), 8320);
  EXPECT_EQ(gemm_em(false, 20, 500, 2, 10, 16), 320);         // min(500, 2 * 10 * 16)
}

TEST(FusedMoeRules, LaunchLimitsNameTheStrideOrGridThatDoesNotFit) {
  const jit::KernelConfig big = default_config(4096, 512);  // BLOCK_SIZE_M 64, BLOCK_SIZE_N 64
  // Qwen3-Next at a 16K-token chunk: well inside every limit.
  EXPECT_EQ(unsupported_launch(kQwen, big, 16384), "");
  EXPECT_EQ(unsupported_launch(kQwen, default_config(0, 512), 0), "");
  // w13 [E, 2N, H]: 2N * H must fit a 32-bit stride; 2N = 2^20, H = 2048 is 2^31.
  MoeShape wide = kQwen;
  wide.intermediate = 1 << 19;
  EXPECT_NE(unsupported_launch(wide, big, 1).find("w13's expert stride"), std::string::npos);
  wide.intermediate = (1 << 19) - 1;  // 2^31 - 4096: fits
  EXPECT_EQ(unsupported_launch(wide, big, 1), "");
  // Non-gated (relu2): w13 is [E, N, H], so N = 2^19 fits where the gated w13 does not.
  MoeShape relu = kQwen;
  relu.intermediate = 1 << 19;
  relu.activation = Activation::kRelu2NoMul;
  EXPECT_EQ(unsupported_launch(relu, big, 1), "");
  relu.intermediate = 1 << 20;
  EXPECT_NE(unsupported_launch(relu, big, 1).find("expert stride"), std::string::npos);
  // Grid x: cdiv(EM, 64) * cdiv(2N, 64) blocks. N = 2^18 gives 8192 column blocks, so EM past
  // 2^18 * 64 rows (about 16.8M; here 2M tokens x 10 experts) needs more than 2^31 - 1 blocks.
  MoeShape tall = kQwen;
  tall.intermediate = 1 << 18;
  const std::string grid = unsupported_launch(tall, big, 1 << 21);
  EXPECT_NE(grid.find("grid x"), std::string::npos) << grid;
  EXPECT_NE(grid.find("w13 GEMM"), std::string::npos) << grid;
  EXPECT_EQ(unsupported_launch(tall, big, 16384), "");
  // (token, expert) pairs are a 32-bit count.
  EXPECT_NE(unsupported_launch(kQwen, big, int64_t{1} << 28).find("pairs"), std::string::npos);
  EXPECT_THROW(unsupported_launch(kQwen, jit::make_config({{"BLOCK_SIZE_M", 3}}), 1), InputError);
}

TEST(FusedMoeRules, GemmConstexprsAndSharedMemory) {
  const jit::KernelConfig cfg = jit::make_config(
      {{"BLOCK_SIZE_M", 128}, {"BLOCK_SIZE_N", 256}, {"BLOCK_SIZE_K", 64}, {"GROUP_SIZE_M", 1}}, 8, 4);
  const auto cs = gemm_constexprs(cfg, true, 1, false);
  std::string text;
  for (const auto& c : cs) text += c.name + "=" + std::to_string(c.value) + ",";
  EXPECT_EQ(text,
            "BLOCK_SIZE_M=128,BLOCK_SIZE_N=256,BLOCK_SIZE_K=64,GROUP_SIZE_M=1,MUL_ROUTED_WEIGHT=1,"
            "TOP_K=1,COMPUTE_TYPE=1,NAIVE_BLOCK_ASSIGNMENT=0,NUM_WARPS=8,NUM_STAGES=4,");
  const GemmBlock blk = gemm_block(cfg);
  // (128 + 256) * (64 + 8) * 2 = 55296 bytes a stage: 4 fit in 227 KiB, 1 in 99 KiB (sm_86).
  EXPECT_EQ(gemm_pipeline_stages(blk, 90), 4);
  EXPECT_EQ(gemm_smem_bytes(blk, 90), 4 * 55296 + 128 * 16);
  EXPECT_EQ(gemm_pipeline_stages(blk, 86), 1);
  EXPECT_EQ(gemm_pipeline_stages(blk, 80), 2);
  const jit::KernelConfig bad = jit::make_config({{"BLOCK_SIZE_M", 24}, {"BLOCK_SIZE_N", 32},
                                                  {"BLOCK_SIZE_K", 64}, {"GROUP_SIZE_M", 1}});
  EXPECT_THROW(gemm_block(bad), InputError);
  EXPECT_THROW(gemm_block(jit::make_config({{"BLOCK_SIZE_M", 16}})), InputError);
}

TEST(FusedMoeRules, EveryH200TableConfigIsSupportedAndFits) {
  const jit::TunedTable t = jit::load_tuned_table(
      table_dir() + "/" + table_file_name(512, 512, "NVIDIA H200"));
  for (const jit::TunedEntry& e : t.entries) {
    const GemmBlock blk = gemm_block(e.config());
    for (int sm : {80, 86, 89, 90, 100, 120}) {
      EXPECT_GE(gemm_pipeline_stages(blk, sm), 1) << e.batch << " sm_" << sm;
      EXPECT_LE(gemm_smem_bytes(blk, sm), gemm_smem_limit(sm));
    }
    EXPECT_EQ(gemm_pipeline_stages(blk, 90), e.config().num_stages) << "H200 clamps " << e.batch;
  }
}

TEST(FusedMoeReference, AlignMatchesVllmDocstringExample) {
  // moe_align_block_size.py's docstring: topk_ids [[2,3,4],[1,2,4],[1,3,4],[1,2,3]], block 4.
  const at::Tensor ids = at::tensor({2, 3, 4, 1, 2, 4, 1, 3, 4, 1, 2, 3}, at::kInt).view({4, 3});
  const ref::Align a = ref::align_block_size(ids, 5, 4);
  EXPECT_EQ(a.total, 16);
  const std::vector<int64_t> want = {3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12};
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(a.sorted_token_ids[i].item<int64_t>(), want[i]) << i;
  EXPECT_EQ(a.expert_ids.size(0), 4);
  EXPECT_EQ(a.expert_ids[0].item<int64_t>(), 1);
  EXPECT_EQ(a.expert_ids[3].item<int64_t>(), 4);
}

TEST(FusedMoeReference, TopkAndExpertLoop) {
  const at::Tensor g = at::tensor({0.0f, 2.0f, 1.0f, 2.0f}, at::kFloat).view({1, 4});
  const ref::TopK t = ref::topk_softmax(g, 2, true);
  EXPECT_EQ(t.ids[0][0].item<int64_t>(), 1);  // tie of experts 1 and 3: lower index first
  EXPECT_EQ(t.ids[0][1].item<int64_t>(), 3);
  EXPECT_NEAR(t.weights[0][0].item<double>(), 0.5, 1e-12);
  // One expert, identity-like weights: out = w * w2 (silu(x) * x) with w13 = [I; I], w2 = I.
  const at::Tensor eye = at::eye(4, at::kFloat);
  const at::Tensor w13 = at::cat({eye, eye}, 0).unsqueeze(0);
  const at::Tensor x = at::tensor({1.0f, -1.0f, 2.0f, 0.5f}, at::kFloat).view({1, 4});
  const at::Tensor out = ref::fused_experts(x, w13, eye.unsqueeze(0), at::full({1, 1}, 0.5f),
                                            at::zeros({1, 1}, at::kInt));
  EXPECT_TRUE(at::allclose(out, 0.5 * x * at::sigmoid(x) * x));
}

// ---------------------------------------------------------------------------------------------
// CPU: compile-only (meta tensors; kernels compiled by NVRTC, never launched)

struct MetaProblem {
  at::Tensor hidden, w13, w2, weights, ids, out;
};
MetaProblem meta_problem(const MoeShape& s, int64_t m) {
  const auto meta = [](at::ScalarType t) { return at::TensorOptions().device(at::kMeta).dtype(t); };
  MetaProblem p;
  p.hidden = at::empty({m, s.hidden}, meta(at::kBFloat16));
  p.w13 = at::empty({s.num_experts, 2 * s.intermediate, s.hidden}, meta(at::kBFloat16));
  p.w2 = at::empty({s.num_experts, s.hidden, s.intermediate}, meta(at::kBFloat16));
  p.weights = at::empty({m, s.top_k}, meta(at::kFloat));
  p.ids = at::empty({m, s.top_k}, meta(at::kInt));
  p.out = at::empty({m, s.hidden}, meta(at::kBFloat16));
  return p;
}

jit::Selection run_meta(jit::JitRuntime& rt, const MoeShape& s, int64_t m) {
  const MetaProblem p = meta_problem(s, m);
  return fused_experts(rt, s, kH200, p.hidden, p.w13, p.w2, p.weights, p.ids, p.out);
}

// The GEMM compile records made since record index `from`.
std::vector<jit::CompileRecord> gemm_records(jit::JitRuntime& rt, size_t from) {
  std::vector<jit::CompileRecord> out;
  const auto all = rt.monitor().records();
  for (size_t i = from; i < all.size(); ++i) {
    if (all[i].kernel == "fused_moe_gemm") out.push_back(all[i]);
  }
  return out;
}

TEST(FusedMoeCompileOnly, AotKernelsHaveOneKeyPerShapeFamily) {
  jit::JitRuntime rt(compile_only_options());
  precompile_aot_kernels(rt, kQwen);
  EXPECT_EQ(rt.cached_kernels(), 5u);  // topk_softmax bf16 + f32, align, silu_and_mul, sum
  for (const jit::KernelSource* k : {&topk_softmax_kernel(), &align_kernel(),
                                     &silu_and_mul_kernel(), &sum_kernel()}) {
    EXPECT_EQ(k->do_not_specialize, k->arg_names) << k->name;
  }
  EXPECT_TRUE(gemm_kernel().do_not_specialize.empty());
  // Serving calls of any M hit the precompiled AOT binaries: only the GEMM compiles.
  for (int64_t m : {1, 13, 300}) {
    const size_t before = rt.monitor().records().size();
    run_meta(rt, kQwen, m);
    for (size_t i = before; i < rt.monitor().records().size(); ++i) {
      EXPECT_EQ(rt.monitor().records()[i].kernel, "fused_moe_gemm") << m;
    }
  }
  const auto meta = at::TensorOptions().device(at::kMeta);
  const size_t before = rt.cached_kernels();
  topk_softmax(rt, kQwen, at::empty({77, 512}, meta.dtype(at::kBFloat16)),
               at::empty({77, 10}, meta.dtype(at::kFloat)), at::empty({77, 10}, meta.dtype(at::kInt)));
  EXPECT_EQ(rt.cached_kernels(), before);
}

TEST(FusedMoeCompileOnly, NaivePathUpToTwelveTokensForQwen3Next) {
  jit::JitRuntime rt(compile_only_options());
  precompile_aot_kernels(rt, kQwen);
  for (int64_t m : {1, 12, 13}) {
    const size_t from = rt.monitor().records().size();
    run_meta(rt, kQwen, m);
    const auto recs = gemm_records(rt, from);
    ASSERT_EQ(recs.size(), 2u) << m;  // w13 and w2
    for (const auto& r : recs) {
      const bool naive = r.key.find("NAIVE_BLOCK_ASSIGNMENT=1") != std::string::npos;
      EXPECT_EQ(naive, m <= 12) << m << " " << r.key;
    }
  }
}

// Issue 29's proof for this family: the GEMM keys reached by every token count 1..4096 in
// key-only mode are exactly those reached by envelope_token_classes' representatives, with the
// H200 table (Qwen3-Next) and without one (vLLM's default configs: a GPU with no table).
TEST(FusedMoeCompileOnly, EnvelopeClassesReachEveryKeyOfEveryTokenCount) {
  const int64_t max_tokens = 4096;
  const auto gemm_keys = [&](const ConfigSource& src, const std::vector<int64_t>& counts) {
    jit::JitRuntime rt(compile_only_options());
    rt.set_key_only(true);
    for (int64_t m : counts) {
      const MetaProblem p = meta_problem(kQwen, m);
      fused_experts(rt, kQwen, src, p.hidden, p.w13, p.w2, p.weights, p.ids, p.out);
    }
    std::set<std::string> keys;
    for (const std::string& k : rt.reached_keys())
      if (k.find("fused_moe_gemm") != std::string::npos) keys.insert(k);
    return keys;
  };
  std::vector<int64_t> every(max_tokens);
  std::iota(every.begin(), every.end(), 1);
  for (const ConfigSource& src : {kH200, ConfigSource{table_dir(), "NVIDIA No Such GPU"}}) {
    SCOPED_TRACE(src.device_name);
    const std::vector<int64_t> classes = envelope_token_classes(src, kQwen, max_tokens);
    ASSERT_FALSE(classes.empty());
    EXPECT_EQ(classes.front(), 1);
    EXPECT_TRUE(std::is_sorted(classes.begin(), classes.end()));
    EXPECT_LT(classes.size(), 200u) << "the classes should be far fewer than the counts";
    const std::set<std::string> all = gemm_keys(src, every);
    EXPECT_EQ(gemm_keys(src, classes), all);
    // Each class reaches a key no smaller count reached: none of them is redundant.
    size_t before = 0;
    for (size_t i = 0; i < classes.size(); ++i) {
      const size_t now = gemm_keys(src, {classes.begin(), classes.begin() + i + 1}).size();
      EXPECT_GT(now, before) << "class " << classes[i] << " reaches no new key";
      before = now;
    }
    std::cout << src.device_name << ": " << classes.size() << " classes of 1.." << max_tokens
              << " tokens, " << all.size() << " GEMM keys\n";
  }
}

TEST(FusedMoeCompileOnly, SelectionProvenanceAndSpecialization) {
  jit::JitRuntime rt(compile_only_options());
  precompile_aot_kernels(rt, kQwen);
  size_t from = rt.monitor().records().size();
  const jit::Selection s5 = run_meta(rt, kQwen, 5);
  EXPECT_EQ(s5.selector, "table");
  EXPECT_EQ(s5.tuning_key, "M=5 -> 4");
  EXPECT_EQ(s5.config.name, "BLOCK_SIZE_M=16,BLOCK_SIZE_N=128,BLOCK_SIZE_K=64,GROUP_SIZE_M=1,warps=4,stages=3");
  for (const auto& r : gemm_records(rt, from)) {
    EXPECT_EQ(r.selector, "table");
    EXPECT_EQ(r.tuning_key, "M=5 -> 4");
    EXPECT_EQ(r.config, s5.config.name);
    EXPECT_EQ(r.num_candidates, 18);
  }
  // M = 60 and 64 both take entry 64, but num_valid_tokens (600 / 640) and EM (8280 / 8320)
  // differ in their %16 specialization: vLLM's Triton kernel specializes them, so new binaries.
  from = rt.monitor().records().size();
  EXPECT_EQ(run_meta(rt, kQwen, 64).tuning_key, "M=64 -> 64");
  const auto r64 = gemm_records(rt, from);
  from = rt.monitor().records().size();
  EXPECT_EQ(run_meta(rt, kQwen, 60).tuning_key, "M=60 -> 64");
  const auto r60 = gemm_records(rt, from);
  ASSERT_EQ(r64.size(), 2u);
  ASSERT_EQ(r60.size(), 2u);
  EXPECT_NE(r64[0].key, r60[0].key);
  EXPECT_NE(r64[0].key.find("i32:16,i32:16,i32:16,i32:16"), std::string::npos) << r64[0].key;
  EXPECT_NE(r60[0].key.find("i32:16,i32:16,i32,i32"), std::string::npos) << r60[0].key;
}

TEST(FusedMoeCompileOnly, DefaultConfigWithoutTable) {
  jit::JitRuntime rt(compile_only_options());
  const jit::Selection small = run_meta(rt, kSmall, 3);
  EXPECT_EQ(small.selector, "default");
  EXPECT_EQ(small.tuning_key, "M=3");
  EXPECT_EQ(small.config.name, default_config(3, 8).name);
  EXPECT_EQ(run_meta(rt, kSmall, 300).config.name, default_config(300, 8).name);
}

TEST(FusedMoeCompileOnly, ValidationNamesFunctionAndArgument) {
  jit::JitRuntime rt(compile_only_options());
  MetaProblem p = meta_problem(kQwen, 4);
  const auto meta = at::TensorOptions().device(at::kMeta);
  EXPECT_MENTIONS(fused_experts(rt, kQwen, kH200, p.hidden.to(at::kFloat), p.w13, p.w2, p.weights,
                                p.ids, p.out),
                  "fused_moe::fused_experts: argument 'hidden'");
  EXPECT_MENTIONS(fused_experts(rt, kQwen, kH200, p.hidden, p.w13, p.w2, p.weights,
                                at::empty({4, 9}, meta.dtype(at::kInt)), p.out),
                  "argument 'topk_ids'");
  EXPECT_MENTIONS(fused_experts(rt, kQwen, kH200, p.hidden, p.w2, p.w2, p.weights, p.ids, p.out),
                  "argument 'w13'");
  EXPECT_MENTIONS(topk_softmax(rt, kQwen, at::empty({4, 512}, meta.dtype(at::kHalf)), p.weights,
                               p.ids),
                  "fused_moe::topk_softmax: argument 'gating_logits'");
  EXPECT_THROW(precompile_aot_kernels(rt, MoeShape{2048, 512, 2048, 10, true}), InputError);
  const MetaProblem z = meta_problem(kQwen, 0);
  const size_t before = rt.cached_kernels();
  fused_experts(rt, kQwen, kH200, z.hidden, z.w13, z.w2, z.weights, z.ids, z.out);
  EXPECT_EQ(rt.cached_kernels(), before);  // M == 0 compiles and launches nothing
}

// ---------------------------------------------------------------------------------------------
// GPU

at::Tensor nan_bf16(std::vector<int64_t> shape) {
  return at::full(shape, NAN, cuda(at::kBFloat16));
}

// Max |got - want| must stay under atol + rtol * |want| everywhere; no NaN left.
void expect_close(const at::Tensor& got, const at::Tensor& want, double atol, double rtol,
                  const std::string& what) {
  const at::Tensor g = got.to(at::kCPU).to(at::kDouble);
  const at::Tensor w = want.to(at::kCPU).to(at::kDouble);
  ASSERT_EQ(g.sizes(), w.sizes()) << what;
  EXPECT_FALSE(at::isnan(g).any().item<bool>()) << what << ": unwritten (NaN) outputs";
  const at::Tensor excess = (g - w).abs() - (atol + rtol * w.abs());
  EXPECT_LE(excess.max().item<double>(), 0.0)
      << what << ": max error " << (g - w).abs().max().item<double>() << ", max |ref| "
      << w.abs().max().item<double>();
}

struct GpuProblem {
  MoeShape s;
  at::Tensor hidden, w13, w2, weights, ids;
};

GpuProblem gpu_problem(const MoeShape& s, int64_t m, uint64_t seed) {
  at::manual_seed(seed);
  GpuProblem p{s, {}, {}, {}, {}, {}};
  const auto f = cuda(at::kFloat);
  p.hidden = at::randn({m, s.hidden}, f).to(at::kBFloat16);
  p.w13 = (at::randn({s.num_experts, 2 * s.intermediate, s.hidden}, f) /
           std::sqrt(static_cast<double>(s.hidden))).to(at::kBFloat16);
  p.w2 = (at::randn({s.num_experts, s.hidden, s.intermediate}, f) /
          std::sqrt(static_cast<double>(s.intermediate))).to(at::kBFloat16);
  const at::Tensor probs = at::softmax(at::randn({m, s.num_experts}, f) * 2.0, 1);
  auto [w, ids] = at::topk(probs, s.top_k, 1);
  if (s.renormalize) w = w / w.sum(1, true);
  p.weights = w.contiguous();
  p.ids = ids.to(at::kInt).contiguous();
  return p;
}

void check_fused(const GpuProblem& p, const at::Tensor& ref, const jit::Selection* forced,
                 bool strided_out, const std::string& what) {
  jit::JitRuntime& rt = gpu_runtime();
  const int64_t m = p.hidden.size(0);
  at::Tensor out = strided_out ? nan_bf16({m, p.s.hidden + 40}).narrow(1, 8, p.s.hidden)
                               : nan_bf16({m, p.s.hidden});
  if (forced != nullptr) {
    fused_experts_with(rt, p.s, *forced, p.hidden, p.w13, p.w2, p.weights, p.ids, out);
  } else {
    fused_experts(rt, p.s, kH200, p.hidden, p.w13, p.w2, p.weights, p.ids, out);
  }
  const double scale = ref.abs().max().item<double>();
  expect_close(out, ref, 0.03 * scale, 0.03, what);
}

TEST(FusedMoeGpu, TopkSoftmaxMatchesTorch) {
  CS_REQUIRE_GPU();
  jit::JitRuntime& rt = gpu_runtime();
  for (bool renorm : {true, false}) {
    for (at::ScalarType dt : {at::kBFloat16, at::kFloat}) {
      const MoeShape s{512, 512, 2048, 10, renorm};
      at::manual_seed(3);
      const at::Tensor g = (at::randn({37, 520}, cuda(at::kFloat)) * 3).to(dt).narrow(1, 0, 512);
      at::Tensor w = at::full({37, 10}, NAN, cuda(at::kFloat));
      at::Tensor ids = at::full({37, 10}, -7, cuda(at::kInt));
      topk_softmax(rt, s, g, w, ids);
      const ref::TopK r = ref::topk_softmax(g, 10, renorm);
      EXPECT_TRUE(at::equal(ids.to(at::kCPU).to(at::kLong), r.ids)) << renorm;
      expect_close(w, r.weights, 1e-6, 1e-5, "topk weights");
    }
  }
}

TEST(FusedMoeGpu, AlignMatchesCpuSortAndPadding) {
  CS_REQUIRE_GPU();
  jit::JitRuntime& rt = gpu_runtime();
  for (int64_t bm : {16, 64}) {
    for (int64_t m : {13, 300}) {
      const GpuProblem p = gpu_problem(MoeShape{512, 8, 8, 10, true}, m, 11 + m);
      const Alignment a = align_block_size(rt, p.s, p.ids, bm);
      const ref::Align r = ref::align_block_size(p.ids, 512, bm);
      const int64_t len = max_num_tokens_padded(m * 10, 512, bm);
      ASSERT_EQ(a.sorted_token_ids.size(0), len);
      EXPECT_EQ(a.num_tokens_post_padded.item<int>(), r.total);
      const at::Tensor sorted = a.sorted_token_ids.to(at::kCPU).to(at::kLong);
      const at::Tensor experts = a.expert_ids.to(at::kCPU).to(at::kLong);
      const int64_t blocks = r.total / bm;
      EXPECT_TRUE(at::equal(experts.narrow(0, 0, blocks), r.expert_ids));
      EXPECT_TRUE((experts.narrow(0, blocks, experts.size(0) - blocks) == 0).all().item<bool>());
      // Inside one block the order of the pairs is the atomics'; compare sorted blocks.
      for (int64_t b = 0; b < blocks; ++b) {
        EXPECT_TRUE(at::equal(std::get<0>(sorted.narrow(0, b * bm, bm).sort()),
                              std::get<0>(r.sorted_token_ids.narrow(0, b * bm, bm).sort())))
            << "block " << b;
      }
      EXPECT_TRUE((sorted.narrow(0, r.total, len - r.total) == m * 10).all().item<bool>());
    }
  }
}

TEST(FusedMoeGpu, SiluAndMulAndSum) {
  CS_REQUIRE_GPU();
  jit::JitRuntime& rt = gpu_runtime();
  const at::Tensor x = random_bf16({7, 2 * 300}, 5, 2.0, 0.1);
  at::Tensor out = nan_bf16({7, 320}).narrow(1, 0, 300);
  silu_and_mul(rt, out, x);
  const at::Tensor xf = x.to(at::kCPU).to(at::kFloat);
  const at::Tensor g = xf.narrow(1, 0, 300);
  expect_close(out, g * at::sigmoid(g) * xf.narrow(1, 300, 300), 1e-2, 1e-2, "silu_and_mul");
  for (int64_t k : {2, 10}) {
    const at::Tensor in = random_bf16({5, k, 2048}, 6, 1.0, 0.0);
    at::Tensor o = nan_bf16({5, 2048});
    moe_sum(rt, in, o);
    expect_close(o, in.to(at::kCPU).to(at::kFloat).sum(1), 2e-2, 1e-2, "moe_sum");
  }
}

TEST(FusedMoeGpu, Qwen3NextTableSelectionAndEveryTableConfig) {
  CS_REQUIRE_GPU();
  const std::vector<int64_t> ms = {1, 5, 13, 64, 300};
  std::map<int64_t, GpuProblem> probs;
  std::map<int64_t, at::Tensor> refs;
  for (int64_t m : ms) {
    probs.emplace(m, gpu_problem(kQwen, m, 100 + m));
    const GpuProblem& p = probs.at(m);
    refs[m] = ref::fused_experts(p.hidden, p.w13, p.w2, p.weights, p.ids);
    check_fused(p, refs[m], nullptr, m == 13, "table M=" + std::to_string(m));
  }
  // Force each distinct config of the H200 file at least once, cycling through the Ms (so naive
  // and aligned paths both see several), plus the two default configs.
  const jit::TunedTable t = jit::load_tuned_table(
      table_dir() + "/" + table_file_name(512, 512, "NVIDIA H200"));
  std::vector<jit::Selection> forced;
  std::set<std::string> seen;
  for (const jit::TunedEntry& e : t.entries) {
    if (seen.insert(e.config().name).second) forced.push_back(jit::select_from_table(t, e.batch));
  }
  EXPECT_EQ(forced.size(), 11u);
  forced.push_back(jit::select_by_heuristic("default M<=E", default_config(1, 512)));
  forced.push_back(jit::select_by_heuristic("default M>E", default_config(600, 512)));
  for (size_t i = 0; i < forced.size(); ++i) {
    const int64_t m = ms[i % ms.size()];
    check_fused(probs.at(m), refs[m], &forced[i], false,
                forced[i].config.name + " at M=" + std::to_string(m));
  }
}

TEST(FusedMoeGpu, SmallExpertsDefaultConfigsAndTails) {
  CS_REQUIRE_GPU();
  // E = 8 / top-2: no table (default configs); M = 1 naive, 300 > E takes the 64x64x32 config.
  for (int64_t m : {1, 5, 64, 300}) {
    const GpuProblem p = gpu_problem(kSmall, m, 7 + m);
    check_fused(p, ref::fused_experts(p.hidden, p.w13, p.w2, p.weights, p.ids), nullptr, m == 5,
                "E=8 M=" + std::to_string(m));
  }
  // K and N not multiples of 16 (H = 200, N = 100): the unspecialized load path and the tails.
  const MoeShape odd{8, 100, 200, 2, true};
  for (int64_t m : {1, 13}) {
    const GpuProblem p = gpu_problem(odd, m, 21 + m);
    check_fused(p, ref::fused_experts(p.hidden, p.w13, p.w2, p.weights, p.ids), nullptr, true,
                "H=200 N=100 M=" + std::to_string(m));
  }
}

}  // namespace
}  // namespace coldstart::fused_moe
