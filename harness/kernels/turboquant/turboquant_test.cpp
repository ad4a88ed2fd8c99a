// TurboQuant kernels: CPU tests of the layout, workspace sizes, the reference itself and the
// compile-only path of the wrappers; GPU tests of every kernel against the libtorch reference with
// poisoned outputs (they skip without a CUDA GPU and a CUDA libtorch).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/reference_util.h"
#include "harness/kernels/model_shapes.h"
#include "harness/kernels/test_util.h"
#include "harness/kernels/turboquant/turboquant.h"
#include "harness/kernels/turboquant/turboquant_reference.h"

namespace coldstart::tq {
namespace {

// Qwen3-8B's attention heads (kernels/model_shapes.h): the served shape among the cases below.
constexpr int kHq = kernels::shapes::kQwen3_8B.num_q_heads;
constexpr int kHk = kernels::shapes::kQwen3_8B.num_kv_heads;
constexpr int kD = kernels::shapes::kQwen3_8B.head_dim;

using kernels::ref::token_slots;
using namespace kernels::test;  // test_util.h

// ---------------------------------------------------------------------------------------------
// CPU: layout and workspace sizes

TEST(TqLayout, Qwen3Slot) {
  const TqLayout l = TqLayout::make(128, 16, 8);
  EXPECT_EQ(l.key_bytes, 66);
  EXPECT_EQ(l.value_bytes, 68);
  EXPECT_EQ(l.slot_bytes, 134);
  EXPECT_EQ(l.block_bytes(), 16 * 8 * 134);
  EXPECT_EQ(TqLayout::make(64, 16, 8).slot_bytes, 70);
  EXPECT_EQ(TqLayout::make(256, 16, 8).slot_bytes, 262);
}

TEST(TqLayout, DecodeHeadsPerBlockDividesTheGroup) {
  EXPECT_EQ(decode_stage1_heads_per_block(4), 4);  // Qwen3-8B: one block per KV head
  EXPECT_EQ(decode_stage1_heads_per_block(8), 4);
  EXPECT_EQ(decode_stage1_heads_per_block(6), 3);
  EXPECT_EQ(decode_stage1_heads_per_block(2), 2);
  EXPECT_EQ(decode_stage1_heads_per_block(1), 1);
  EXPECT_EQ(decode_stage1_heads_per_block(5), 1);
}

TEST(TqLayout, RejectsBadHeadDim) {
  EXPECT_THROW(TqLayout::make(96, 16, 8), InputError);
  EXPECT_THROW(TqLayout::make(8, 16, 8), InputError);
  EXPECT_THROW(TqLayout::make(512, 16, 8), InputError);
  EXPECT_THROW(TqLayout::make(128, 0, 8), InputError);
  EXPECT_THROW(TqLayout::make(128, 16, 0), InputError);
}

TEST(TqWorkspace, MatchesVllmFormulas) {
  // Qwen3-8B, batch 4: mid_o 4*32*32*129*4 = 2113536, out 32768, lse 512.
  EXPECT_EQ(decode_workspace_bytes(4, 32, 128), 2113536 + 32768 + 512);
  // Batch 1: mid_o 528384, out 8192, lse 128 -> rounded to 256.
  EXPECT_EQ(decode_workspace_bytes(1, 32, 128), 528384 + 8192 + 256);
  EXPECT_EQ(continuation_workspace_bytes(8, 2048, 128), 2 * 8 * 2048 * 128 * 2);
  EXPECT_EQ(continuation_alloc_len(2047, 16), 2048);
  EXPECT_EQ(continuation_alloc_len(16, 16), 16);
  EXPECT_EQ(round_up_256(1), 256);
  EXPECT_EQ(round_up_256(0), 0);
}

// ---------------------------------------------------------------------------------------------
// CPU: the reference is sane

TEST(TqReference, HadamardIsOrthonormalAndSymmetric) {
  for (int64_t d : {16, 64, 128}) {
    const at::Tensor h = ref::hadamard(d);
    EXPECT_TRUE(at::allclose(h, h.t()));
    EXPECT_TRUE(at::allclose(at::matmul(h, h), at::eye(d, at::kDouble), 0, 1e-12));
  }
}

TEST(TqReference, KeyRoundTripErrorAndNormCorrection) {
  at::manual_seed(1234);
  for (int64_t d : {64, 128}) {
    const at::Tensor k = (at::randn({2000, d}) * 3.0 + 0.5).to(at::kBFloat16);
    const ref::QuantizedKeys q = ref::quantize_keys(k);
    const at::Tensor kd = ref::dequantize_keys(q);
    const at::Tensor kk = k.to(at::kDouble);
    const double rel = ((kd - kk).norm() / kk.norm()).item<double>();
    const double worst = ((kd - kk).norm(2, {1}) / kk.norm(2, {1})).max().item<double>();
    std::printf("D=%lld key round trip: rel L2 error %.4f, worst row %.4f\n",
                static_cast<long long>(d), rel, worst);
    EXPECT_LT(rel, 0.15);
    EXPECT_LT(worst, 0.25);
    // Norm correction: the dequantized key has exactly the stored fp16 norm.
    const at::Tensor stored = q.norm.to(at::kDouble);
    const double norm_err = ((kd.norm(2, {1}) - stored).abs() / stored).max().item<double>();
    EXPECT_LT(norm_err, 1e-12);
    // The stored norm is the input's norm rounded to fp16 (relative half-ulp 2^-11).
    const double fp16_err = ((stored - kk.norm(2, {1})).abs() / kk.norm(2, {1})).max().item<double>();
    EXPECT_LE(fp16_err, std::ldexp(1.0, -11) * 1.0001);
    EXPECT_LE(q.indices.max().item<int64_t>(), 15);
  }
}

TEST(TqReference, ValueErrorWithinHalfStep) {
  at::manual_seed(99);
  const at::Tensor v = (at::randn({1000, 128}) * 2.0 - 1.0).to(at::kBFloat16);
  const ref::QuantizedValues q = ref::quantize_values(v);
  const at::Tensor vd = ref::dequantize_values(q);
  const at::Tensor err = (vd - v.to(at::kDouble)).abs().amax({1});
  const at::Tensor scale = q.scale.to(at::kDouble);
  const at::Tensor zero = q.zero.to(at::kDouble);
  // Half a step, plus fp16 rounding of zero (half-ulp) and of scale (15 steps of half-ulp).
  const at::Tensor bound = scale * 0.5 + zero.abs() * std::ldexp(1.0, -11) +
                           scale * 15 * std::ldexp(1.0, -11) + 1e-12;
  EXPECT_TRUE((err <= bound).all().item<bool>())
      << "max excess " << (err - bound).max().item<double>();
  // Constant rows are exact.
  const at::Tensor c = at::full({3, 128}, 0.375).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(ref::roundtrip_values(c), c.to(at::kDouble)));
}

TEST(TqReference, PackUnpackRoundTrip) {
  at::manual_seed(5);
  const TqLayout l = TqLayout::make(64, 16, 2);
  const at::Tensor k = at::randn({7, 2, 64});
  const at::Tensor v = at::randn({7, 2, 64});
  const auto qk = ref::quantize_keys(k);
  const auto qv = ref::quantize_values(v);
  const at::Tensor slots = ref::pack_slots(l, qk, qv);
  ASSERT_EQ(slots.sizes(), (std::vector<int64_t>{7, 2, l.slot_bytes}));
  const auto back = ref::unpack_slots(l, slots);
  EXPECT_TRUE(at::equal(back.first.indices, qk.indices));
  EXPECT_TRUE(at::equal(back.first.norm, qk.norm));
  EXPECT_TRUE(at::equal(back.second.indices, qv.indices));
  EXPECT_TRUE(at::equal(back.second.scale, qv.scale));
  EXPECT_TRUE(at::equal(back.second.zero, qv.zero));
  // Byte map: coordinate 0 in the low nibble of byte 0, norm right after the key indices.
  const uint8_t* s = slots.data_ptr<uint8_t>();
  EXPECT_EQ(s[0] & 15, qk.indices[0][0][0].item<int>());
  EXPECT_EQ(s[0] >> 4, qk.indices[0][0][1].item<int>());
  EXPECT_EQ(static_cast<uint16_t>(s[32] | (s[33] << 8)), qk.norm[0][0].item<at::Half>().x);
}

// ---------------------------------------------------------------------------------------------
// CPU: compile-only mode (meta tensors, JitRuntime without launches)

TEST(TqCompileOnly, WrappersCompileOnMetaTensors) {
  jit::JitRuntime rt(compile_only_options());
  const TqLayout l = TqLayout::make(128, 16, 8);
  const auto meta = at::TensorOptions().device(at::kMeta);
  const int64_t hq = 32, n = 48, b = 4, max_blocks = 2048;
  const at::Tensor cache = at::empty(cache_shape(l, 64), meta.dtype(at::kByte));
  const at::Tensor qkv = at::empty({n, hq + 2 * l.num_kv_heads, 128}, meta.dtype(at::kBFloat16));
  const at::Tensor key = qkv.narrow(1, hq, l.num_kv_heads);
  const at::Tensor value = qkv.narrow(1, hq + l.num_kv_heads, l.num_kv_heads);
  store(rt, l, key, value, at::empty({n}, meta.dtype(at::kLong)), cache);

  const at::Tensor ws_buf = at::empty({decode_workspace_bytes(b, hq, 128)}, meta.dtype(at::kByte));
  const DecodeWorkspace ws = decode_workspace_views(ws_buf, b, hq, 128);
  const at::Tensor q = at::empty({b, hq, 128}, meta.dtype(at::kBFloat16));
  const at::Tensor bt = at::empty({b, max_blocks}, meta.dtype(at::kInt));
  decode(rt, l, q, cache, bt, at::empty({b}, meta.dtype(at::kInt)), 1.0f / std::sqrt(128.0f), ws);

  const int64_t alloc = continuation_alloc_len(2000, 16);
  const at::Tensor cbuf =
      at::empty({continuation_workspace_bytes(8, alloc, 128)}, meta.dtype(at::kByte));
  const ContinuationBuffers cb = continuation_views(cbuf, 8, alloc, 128);
  dequant_kv(rt, l, cache, bt[0], 2000, cb.k, cb.v);
  EXPECT_EQ(rt.cached_kernels(), 4u);

  // Same keys again: no new compile.
  decode(rt, l, q, cache, bt, at::empty({b}, meta.dtype(at::kInt)), 0.5f, ws);
  EXPECT_EQ(rt.cached_kernels(), 4u);
  // A block table with another row stride specialization ("1") is a new compile key.
  decode(rt, l, q.narrow(0, 0, 1), cache, at::empty({1, 1}, meta.dtype(at::kInt)),
         at::empty({1}, meta.dtype(at::kInt)), 0.5f, decode_workspace_views(ws_buf, 1, hq, 128));
  EXPECT_EQ(rt.cached_kernels(), 5u);
}

TEST(TqCompileOnly, ValidationNamesTheArgument) {
  jit::JitRuntime rt(compile_only_options());
  const TqLayout l = TqLayout::make(128, 16, 8);
  const auto meta = at::TensorOptions().device(at::kMeta);
  const at::Tensor cache = at::empty(cache_shape(l, 4), meta.dtype(at::kByte));
  const at::Tensor good = at::empty({3, 8, 128}, meta.dtype(at::kBFloat16));
  const at::Tensor slots = at::empty({3}, meta.dtype(at::kLong));
  EXPECT_MENTIONS(store(rt, l, good.to(at::kFloat), good, slots, cache), "'key'");
  EXPECT_MENTIONS(store(rt, l, good, good, slots.to(at::kInt), cache), "'slot_mapping'");
  const at::Tensor bad_cache = at::empty({4, 16, 8, 130}, meta.dtype(at::kByte));
  EXPECT_MENTIONS(store(rt, l, good, good, slots, bad_cache), "'cache'");
  const at::Tensor cpu_key = at::empty({3, 8, 128}, at::kBFloat16);
  EXPECT_MENTIONS(store(rt, l, cpu_key, good, slots, cache), "CUDA device");
  const at::Tensor q = at::empty({2, 12, 128}, meta.dtype(at::kBFloat16));  // 12 % 8 != 0
  const at::Tensor mid = at::empty({2, 12, 32, 129}, meta.dtype(at::kFloat));
  EXPECT_MENTIONS(decode_stage1(rt, l, q, cache, at::empty({2, 4}, meta.dtype(at::kInt)),
                                at::empty({2}, meta.dtype(at::kInt)), 1.0f, mid),
                  "'q'");
  const at::Tensor kout = at::empty({8, 32, 128}, meta.dtype(at::kBFloat16));
  EXPECT_MENTIONS(dequant_kv(rt, l, cache, at::empty({1}, meta.dtype(at::kInt)), 33, kout, kout),
                  "'k_out'");
  EXPECT_MENTIONS(dequant_kv(rt, l, cache, at::empty({1}, meta.dtype(at::kInt)), 20, kout, kout),
                  "'block_table_row'");
  EXPECT_EQ(rt.cached_kernels(), 0u);
}

// ---------------------------------------------------------------------------------------------
// GPU

// A cache with `num_blocks` blocks poisoned with kSentinel, and a shuffled block table giving
// every sequence its own blocks.
PagedCache make_paged(const TqLayout& l, const std::vector<int64_t>& lens, int64_t stride,
                      uint64_t seed) {
  PagedCache p = shuffled_blocks(l.block_size, lens, stride, seed);
  p.cache = at::full(cache_shape(l, p.num_blocks), kSentinel, cuda(at::kByte));
  return p;
}

// Stores `key`/`value` [n, Hk, D] of every sequence through the kernel.
void store_all(const TqLayout& l, PagedCache& p, const std::vector<at::Tensor>& keys,
               const std::vector<at::Tensor>& values) {
  for (size_t b = 0; b < keys.size(); ++b) {
    const int64_t n = keys[b].size(0);
    store(gpu_runtime(), l, keys[b], values[b],
          token_slots(p.block_table[b], l.block_size, 0, n).to(at::kCUDA), p.cache);
  }
}

// ---- store ----

struct StoreCase {
  int64_t tokens, hq, hk, d;
};

std::string store_name(const testing::TestParamInfo<StoreCase>& i) {
  return "n" + std::to_string(i.param.tokens) + "_hq" + std::to_string(i.param.hq) + "_hk" +
         std::to_string(i.param.hk) + "_d" + std::to_string(i.param.d);
}
void PrintTo(const StoreCase& c, std::ostream* os) { *os << store_name({c, 0}); }

class TqStoreGpu : public testing::TestWithParam<StoreCase> {};

TEST_P(TqStoreGpu, BytesMatchReference) {
  CS_REQUIRE_GPU();
  const StoreCase c = GetParam();
  const TqLayout l = TqLayout::make(static_cast<int>(c.d), 16, static_cast<int>(c.hk));
  // key / value as strided views of a fused qkv tensor, as a serving engine passes them.
  const at::Tensor qkv = random_bf16({c.tokens, c.hq + 2 * c.hk, c.d}, 11 + c.tokens, 2.0, 0.3);
  const at::Tensor key = qkv.narrow(1, c.hq, c.hk);
  const at::Tensor value = qkv.narrow(1, c.hq + c.hk, c.hk);
  const int64_t num_blocks = (c.tokens + 15) / 16 + 3;
  const int64_t total_slots = num_blocks * 16;
  // Distinct random slots; every 5th token skipped (negative slot).
  const at::Tensor slots = random_slots(c.tokens, total_slots);
  at::Tensor cache = at::full(cache_shape(l, num_blocks), kSentinel, cuda(at::kByte));
  store(gpu_runtime(), l, key, value, slots.to(at::kCUDA), cache);
  const at::Tensor bytes = cache.cpu().view({-1, c.hk, l.slot_bytes});

  const at::Tensor written = slots >= 0;
  const at::Tensor tok = written.nonzero().squeeze(1);
  const at::Tensor kept_slots = slots.index_select(0, tok);
  // Untouched elsewhere.
  at::Tensor unused = at::ones({total_slots}, at::kBool);
  unused.index_fill_(0, kept_slots, false);
  const at::Tensor rest = bytes.index_select(0, unused.nonzero().squeeze(1));
  EXPECT_TRUE((rest == kSentinel).all().item<bool>()) << "store wrote outside slot_mapping";

  const auto got = ref::unpack_slots(l, bytes.index_select(0, kept_slots));  // [n', Hk, ...]
  const at::Tensor k_in = key.cpu().index_select(0, tok);
  const at::Tensor v_in = value.cpu().index_select(0, tok);
  const ref::QuantizedKeys want_k = ref::quantize_keys(k_in);
  const ref::QuantizedValues want_v = ref::quantize_values(v_in);

  // Keys: indices may differ by one step where float32 and float64 land on both sides of a
  // decision boundary; count those and hold every other row to fp16 rounding of the norm.
  const at::Tensor kdiff = (got.first.indices.to(at::kInt) - want_k.indices.to(at::kInt)).abs();
  const int64_t rows = kdiff.size(0) * kdiff.size(1);
  const at::Tensor row_flip = (kdiff > 0).any(2).reshape({-1});
  const int64_t flipped = row_flip.sum().item<int64_t>();
  EXPECT_LE(kdiff.max().item<int>(), 1);
  EXPECT_LE(flipped, std::max<int64_t>(2, rows / 1000)) << "of " << rows << " rows";
  const at::Tensor norm_ulps = (got.first.norm.view(at::kShort).to(at::kInt) -
                                want_k.norm.view(at::kShort).to(at::kInt)).abs();
  EXPECT_LE(norm_ulps.max().item<int>(), 1);
  const at::Tensor kd_got = ref::dequantize_keys(got.first).reshape({rows, c.d});
  const at::Tensor kd_want = ref::dequantize_keys(want_k).reshape({rows, c.d});
  const at::Tensor ok_rows = row_flip.logical_not().nonzero().squeeze(1);
  const at::Tensor kerr = (kd_got - kd_want).abs().index_select(0, ok_rows);
  const at::Tensor knorm = kd_want.norm(2, {1}, true).index_select(0, ok_rows);
  const double k_abs = kerr.max().item<double>();
  const double k_rel = (kerr / knorm.clamp_min(1e-30)).max().item<double>();
  std::printf("store D=%lld Hk=%lld n=%lld: key max abs err %.3g, max err/|k| %.3g, "
              "flipped rows %lld/%lld\n",
              static_cast<long long>(c.d), static_cast<long long>(c.hk),
              static_cast<long long>(c.tokens), k_abs, k_rel, static_cast<long long>(flipped),
              static_cast<long long>(rows));
  EXPECT_LE(k_rel, 1.1e-3);  // one fp16 ulp of the norm, relative

  // Values: the kernel mirrors the reference's float32 arithmetic, so the bytes must match.
  EXPECT_TRUE(at::equal(got.second.indices, want_v.indices));
  EXPECT_TRUE(at::equal(got.second.scale.view(at::kShort), want_v.scale.view(at::kShort)));
  EXPECT_TRUE(at::equal(got.second.zero.view(at::kShort), want_v.zero.view(at::kShort)));
  const at::Tensor verr = (ref::dequantize_values(got.second) - v_in.to(at::kDouble)).abs();
  const at::Tensor half_step = want_v.scale.to(at::kDouble).unsqueeze(-1) * 0.5 +
                               want_v.zero.to(at::kDouble).abs().unsqueeze(-1) * 1e-3 + 1e-9;
  std::printf("store: value max abs err %.3g (max step/2 %.3g)\n", verr.max().item<double>(),
              half_step.max().item<double>());
  EXPECT_TRUE((verr <= half_step * 1.05).all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TqStoreGpu,
    testing::Values(StoreCase{1, kHq, kHk, kD}, StoreCase{17, kHq, kHk, kD}, StoreCase{300, kHq, kHk, kD},
                    StoreCase{300, 8, 8, 64}, StoreCase{2053, 16, 2, 128}, StoreCase{17, 16, 2, 64}),
    store_name);

// ---- decode ----

struct DecodeCase {
  int64_t batch, ctx, hq, hk, d;
};

std::string decode_name(const testing::TestParamInfo<DecodeCase>& i) {
  const DecodeCase& c = i.param;
  return "b" + std::to_string(c.batch) + "_ctx" + std::to_string(c.ctx) + "_hq" +
         std::to_string(c.hq) + "_hk" + std::to_string(c.hk) + "_d" + std::to_string(c.d);
}
void PrintTo(const DecodeCase& c, std::ostream* os) { *os << decode_name({c, 0}); }

std::vector<DecodeCase> decode_cases() {
  std::vector<DecodeCase> out;
  for (int64_t d : {128, 64}) {
    for (auto heads : {std::pair<int64_t, int64_t>{32, 8}, {8, 8}, {16, 2}}) {
      for (int64_t b : {1, 3, 4}) {
        for (int64_t ctx : {1, 17, 300, 2048 + 5}) out.push_back({b, ctx, heads.first, heads.second, d});
      }
    }
  }
  // Stage 1 serves 3 heads a block at group 6 and one token per warp step at D 256; D 16 and 32
  // put 16 and 8 tokens in a warp step.
  out.push_back({2, 300, 24, 4, 128});
  out.push_back({2, 2048 + 5, 16, 2, 256});
  out.push_back({3, 300, 8, 2, 32});
  out.push_back({2, 1000, 8, 2, 16});
  return out;
}

class TqDecodeGpu : public testing::TestWithParam<DecodeCase> {};

TEST_P(TqDecodeGpu, MatchesFloat64Reference) {
  CS_REQUIRE_GPU();
  const DecodeCase c = GetParam();
  const TqLayout l = TqLayout::make(static_cast<int>(c.d), 16, static_cast<int>(c.hk));
  const uint64_t seed = static_cast<uint64_t>(c.batch * 1000003 + c.ctx * 131 + c.hq * 7 + c.d);
  std::vector<int64_t> lens;
  for (int64_t b = 0; b < c.batch; ++b) lens.push_back(std::max<int64_t>(1, c.ctx - 7 * b));
  const int64_t max_blocks = (c.ctx + 15) / 16 + 3;  // not a multiple of 16 on purpose
  PagedCache p = make_paged(l, lens, max_blocks, seed);
  std::vector<at::Tensor> keys, values;
  for (int64_t b = 0; b < c.batch; ++b) {
    keys.push_back(random_bf16({lens[b], c.hk, c.d}, seed + 2 * b, 1.5, 0.2));
    values.push_back(random_bf16({lens[b], c.hk, c.d}, seed + 2 * b + 1, 1.0, -0.1));
  }
  store_all(l, p, keys, values);

  const at::Tensor qkv = random_bf16({c.batch, c.hq + 2 * c.hk, c.d}, seed + 99, 1.0, 0.0);
  const at::Tensor q = qkv.narrow(1, 0, c.hq);  // strided, like a view of the qkv projection
  const at::Tensor seq_lens = at::tensor(std::vector<int32_t>(lens.begin(), lens.end())).to(at::kCUDA);
  const at::Tensor bt = p.block_table.to(at::kCUDA);
  at::Tensor ws_buf = at::empty({decode_workspace_bytes(c.batch, c.hq, c.d)}, cuda(at::kByte));
  const DecodeWorkspace ws = decode_workspace_views(ws_buf, c.batch, c.hq, c.d);
  ws.mid_o.fill_(std::numeric_limits<float>::quiet_NaN());
  ws.out.fill_(std::numeric_limits<float>::quiet_NaN());
  ws.lse.fill_(std::numeric_limits<float>::quiet_NaN());
  const float sm_scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  decode(gpu_runtime(), l, q, p.cache, bt, seq_lens, sm_scale, ws);

  const at::Tensor mid = ws.mid_o.cpu();
  const at::Tensor out = ws.out.cpu().to(at::kDouble);
  const at::Tensor lse = ws.lse.cpu().to(at::kDouble);
  ASSERT_FALSE(mid.isnan().any().item<bool>()) << "stage 1 left part of mid_o unwritten";
  ASSERT_FALSE(out.isnan().any().item<bool>()) << "stage 2 left part of out unwritten";
  ASSERT_FALSE(lse.isnan().any().item<bool>()) << "stage 2 left part of lse unwritten";
  // Empty splits carry lse = -inf and zeros.
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t per = (lens[b] + kNumKvSplits - 1) / kNumKvSplits;
    const int64_t nonempty = (lens[b] + per - 1) / per;
    const at::Tensor split_lse = mid[b].select(2, c.d);  // [Hq, S]
    EXPECT_EQ(split_lse.isinf().sum().item<int64_t>(), c.hq * (kNumKvSplits - nonempty));
  }

  std::vector<at::Tensor> kd, vd;
  for (int64_t b = 0; b < c.batch; ++b) {
    auto kv = ref::dequant_sequence(l, p.cache, p.block_table[b], lens[b]);
    kd.push_back(kv.first);
    vd.push_back(kv.second);
  }
  const ref::Attention want = ref::decode_attention(q.cpu(), kd, vd, sm_scale);
  const double rel = ((out - want.out).norm() / want.out.norm()).item<double>();
  const double lse_err = (lse - want.lse).abs().max().item<double>();
  std::printf("decode %s: out rel L2 err %.3g, lse max abs err %.3g\n",
              decode_name({c, 0}).c_str(), rel, lse_err);
  EXPECT_LT(rel, 1e-2);
  EXPECT_LT(lse_err, 1e-3 * std::max(1.0, want.lse.abs().max().item<double>()));
}

INSTANTIATE_TEST_SUITE_P(Shapes, TqDecodeGpu, testing::ValuesIn(decode_cases()), decode_name);

// ---- dequant for continuation prefill ----

class TqDequantGpu : public testing::TestWithParam<DecodeCase> {};

TEST_P(TqDequantGpu, MatchesReferenceAndLeavesTailUntouched) {
  CS_REQUIRE_GPU();
  const DecodeCase c = GetParam();  // batch unused: one sequence
  const TqLayout l = TqLayout::make(static_cast<int>(c.d), 16, static_cast<int>(c.hk));
  const uint64_t seed = static_cast<uint64_t>(c.ctx * 17 + c.hk * 3 + c.d);
  const int64_t n = c.ctx;
  PagedCache p = make_paged(l, {n}, (n + 15) / 16 + 1, seed);
  store_all(l, p, {random_bf16({n, c.hk, c.d}, seed, 2.0, 0.1)},
            {random_bf16({n, c.hk, c.d}, seed + 1, 1.0, 0.0)});
  // One block more than needed, so rows past num_tokens include a whole untouched block.
  const int64_t alloc_len = continuation_alloc_len(n, l.block_size) + l.block_size;
  at::Tensor buf = at::empty({continuation_workspace_bytes(c.hk, alloc_len, c.d)}, cuda(at::kByte));
  const ContinuationBuffers cb = continuation_views(buf, c.hk, alloc_len, c.d);
  cb.k.fill_(std::numeric_limits<float>::quiet_NaN());
  cb.v.fill_(std::numeric_limits<float>::quiet_NaN());
  dequant_kv(gpu_runtime(), l, p.cache, p.block_table[0].to(at::kCUDA), n, cb.k, cb.v);

  const at::Tensor k = cb.k.cpu().to(at::kDouble);  // [Hk, alloc, D]
  const at::Tensor v = cb.v.cpu().to(at::kDouble);
  EXPECT_TRUE(k.narrow(1, n, alloc_len - n).isnan().all().item<bool>()) << "wrote past num_tokens";
  EXPECT_TRUE(v.narrow(1, n, alloc_len - n).isnan().all().item<bool>()) << "wrote past num_tokens";
  const at::Tensor kh = k.narrow(1, 0, n).permute({1, 0, 2});  // [n, Hk, D]
  const at::Tensor vh = v.narrow(1, 0, n).permute({1, 0, 2});
  ASSERT_FALSE(kh.isnan().any().item<bool>());
  ASSERT_FALSE(vh.isnan().any().item<bool>());
  const auto want = ref::dequant_sequence(l, p.cache, p.block_table[0], n);
  // bf16 output: relative rounding 2^-8 of each element, plus float32 transform noise.
  const at::Tensor kerr = (kh - want.first).abs();
  const at::Tensor kbound = want.first.abs() * std::ldexp(1.0, -8) +
                            want.first.norm(2, {2}, true) * 1e-5;
  const at::Tensor verr = (vh - want.second).abs();
  const at::Tensor vbound = want.second.abs() * std::ldexp(1.0, -8) + 1e-6;
  std::printf("dequant n=%lld Hk=%lld D=%lld: K max abs err %.3g, V max abs err %.3g\n",
              static_cast<long long>(n), static_cast<long long>(c.hk),
              static_cast<long long>(c.d), kerr.max().item<double>(), verr.max().item<double>());
  EXPECT_TRUE((kerr <= kbound).all().item<bool>());
  EXPECT_TRUE((verr <= vbound).all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TqDequantGpu,
    testing::Values(DecodeCase{1, 1, kHq, kHk, kD}, DecodeCase{1, 17, kHq, kHk, kD},
                    DecodeCase{1, 300, 8, 8, 64}, DecodeCase{1, 2048 + 5, kHq, kHk, kD},
                    DecodeCase{1, 2048, 16, 2, 64}, DecodeCase{1, 16, kHq, kHk, kD}),
    [](const testing::TestParamInfo<DecodeCase>& i) {
      return "n" + std::to_string(i.param.ctx) + "_hk" + std::to_string(i.param.hk) + "_d" +
             std::to_string(i.param.d);
    });

}  // namespace
}  // namespace coldstart::tq
