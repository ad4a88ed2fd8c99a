// Paged-attention kernels: CPU tests of the layout, workspace sizes, the reference itself and the
// compile-only path of the wrappers; GPU tests of every kernel against the float64 libtorch
// reference, bf16 and fp8, with poisoned outputs and sentinels around what a kernel may write
// (they skip without a CUDA GPU and a CUDA libtorch).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/paged/paged.h"
#include "harness/kernels/paged/paged_reference.h"
#include "harness/kernels/reference_util.h"
#include "harness/kernels/model_shapes.h"
#include "harness/kernels/test_util.h"

namespace coldstart::paged {
namespace {

// Qwen3-8B's attention heads (kernels/model_shapes.h): the served shape among the cases below.
constexpr int kHq = kernels::shapes::kQwen3_8B.num_q_heads;
constexpr int kHk = kernels::shapes::kQwen3_8B.num_kv_heads;
constexpr int kD = kernels::shapes::kQwen3_8B.head_dim;

using namespace kernels::test;  // test_util.h

constexpr CacheDtype kBF16 = CacheDtype::kBF16;
constexpr CacheDtype kFP8 = CacheDtype::kFP8E4M3;

// ---------------------------------------------------------------------------------------------
// CPU: layout and workspace sizes

TEST(PagedLayout, Geometry) {
  const PagedLayout l = PagedLayout::make(128, 16, 8, kBF16);
  EXPECT_EQ(l.element_bytes(), 2);
  EXPECT_EQ(l.page_size_bytes(), 2 * 16 * 8 * 128 * 2);
  EXPECT_EQ(PagedLayout::make(128, 16, 8, kFP8).page_size_bytes(), 2 * 16 * 8 * 128);
  EXPECT_EQ(PagedLayout::make(96, 32, 1, kFP8).head_dim, 96);
}

TEST(PagedLayout, RejectsBadInput) {
  EXPECT_THROW(PagedLayout::make(100, 16, 8, kBF16), InputError);
  EXPECT_THROW(PagedLayout::make(16, 16, 8, kBF16), InputError);
  EXPECT_THROW(PagedLayout::make(288, 16, 8, kBF16), InputError);
  EXPECT_THROW(PagedLayout::make(128, 0, 8, kBF16), InputError);
  EXPECT_THROW(PagedLayout::make(128, 16, 0, kFP8), InputError);
  EXPECT_THROW(PagedLayout::make(128, 16, 8, static_cast<CacheDtype>(7)), InputError);
}

TEST(PagedLayout, ParsesVllmCacheDtypes) {
  EXPECT_EQ(parse_cache_dtype("auto"), kBF16);
  EXPECT_EQ(parse_cache_dtype("bfloat16"), kBF16);
  EXPECT_EQ(parse_cache_dtype("fp8"), kFP8);
  EXPECT_EQ(parse_cache_dtype("fp8_e4m3"), kFP8);
  EXPECT_THROW(parse_cache_dtype("fp8_e5m2"), InputError);
  EXPECT_THROW(parse_cache_dtype("turboquant_4bit_nc"), InputError);
  EXPECT_STREQ(cache_dtype_name(kFP8), "fp8_e4m3");
}

TEST(PagedWorkspace, Formula) {
  // Qwen3-8B, batch 4, 16 splits: mid_o 4*32*16*129*4 = 1056768, lse 512.
  EXPECT_EQ(decode_workspace_bytes(4, 32, 128), 1056768 + 512);
  // Batch 1: mid_o 264192, lse 128 -> 256.
  EXPECT_EQ(decode_workspace_bytes(1, 32, 128), 264192 + 256);
  // Odd sizes round each part up to 256 B: mid_o 1*1*1*65*4 = 260 -> 512, lse 4 -> 256.
  EXPECT_EQ(decode_workspace_bytes(1, 1, 64, 1), 512 + 256);
  EXPECT_EQ(decode_workspace_bytes(0, 32, 128), 0);
}

// The stage-1 grid's head groups: 4 heads a block where the group allows and the state fits.
TEST(PagedDecodeGrid, HeadsPerBlock) {
  EXPECT_EQ(decode_stage1_heads_per_block(128, 4), 4);   // Qwen3-8B: one block per KV head
  EXPECT_EQ(decode_stage1_heads_per_block(128, 16), 4);  // Nemotron Nano attention
  EXPECT_EQ(decode_stage1_heads_per_block(256, 8), 4);   // Qwen3-Next attention
  EXPECT_EQ(decode_stage1_heads_per_block(64, 6), 3);
  EXPECT_EQ(decode_stage1_heads_per_block(128, 2), 2);
  EXPECT_EQ(decode_stage1_heads_per_block(128, 1), 1);
  EXPECT_EQ(decode_stage1_heads_per_block(32, 5), 1);
  // D = 96: 4 lanes a token, 24 coordinates a lane: one head a block.
  EXPECT_EQ(decode_stage1_heads_per_block(96, 4), 1);
  EXPECT_EQ(decode_stage1_heads_per_block(192, 4), 1);  // 8 lanes, 24 coordinates
  for (int d = 32; d <= 256; d += 32)
    for (int g = 1; g <= 16; ++g) {
      const int h = decode_stage1_heads_per_block(d, g);
      EXPECT_TRUE(h >= 1 && h <= 4 && g % h == 0) << "d " << d << " group " << g;
    }
}

// ---------------------------------------------------------------------------------------------
// CPU: the reference is sane

TEST(PagedReference, E4m3KnownValues) {
  using ref::e4m3_from_float;
  EXPECT_EQ(e4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
  EXPECT_EQ(e4m3_from_float(1.0f), 0x38);
  EXPECT_EQ(e4m3_from_float(-2.0f), 0xc0);
  EXPECT_EQ(e4m3_from_float(448.0f), 0x7e);
  EXPECT_EQ(e4m3_from_float(460.0f), 0x7e);     // saturates, never NaN
  EXPECT_EQ(e4m3_from_float(1e30f), 0x7e);
  EXPECT_EQ(e4m3_from_float(-1e30f), 0xfe);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(e4m3_from_float(std::nanf("")), 0x7f);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);  // tie 0 / 2^-9 -> even
  EXPECT_EQ(e4m3_from_float(std::ldexp(3.0f, -10)), 0x02);  // tie 1 / 2 -> even
  EXPECT_EQ(e4m3_from_float(1.0625f), 0x38);                // tie 1.0 / 1.125 -> even
  EXPECT_EQ(e4m3_from_float(1.1875f), 0x3a);                // tie 1.125 / 1.25 -> even
  EXPECT_EQ(e4m3_from_float(1.06f), 0x38);
  EXPECT_EQ(e4m3_from_float(1.07f), 0x39);
  EXPECT_EQ(e4m3_from_float(-1.1f), 0xb9);
  EXPECT_DOUBLE_EQ(ref::e4m3_value(0x7e), 448.0);
  EXPECT_DOUBLE_EQ(ref::e4m3_value(0x08), std::ldexp(1.0, -6));
  EXPECT_DOUBLE_EQ(ref::e4m3_value(0x07), 7 * std::ldexp(1.0, -9));
  EXPECT_TRUE(std::isnan(ref::e4m3_value(0xff)));
  // Every finite code survives a round trip.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(e4m3_from_float(static_cast<float>(ref::e4m3_value(static_cast<uint8_t>(c)))), c);
  }
}

TEST(PagedReference, CacheElementsAndGather) {
  at::manual_seed(3);
  const PagedLayout l = PagedLayout::make(64, 4, 2, kFP8);
  const at::Tensor x = (at::randn({10, 2, 64}) * 3).to(at::kBFloat16);
  const float scale = 0.01f;
  const at::Tensor e = ref::cache_elements(l, x, scale);
  ASSERT_EQ(e.scalar_type(), at::kByte);
  const at::Tensor back = ref::element_values(l, e, scale);
  // Relative error of e4m3 (3 mantissa bits) is at most 2^-4 for normals; |x| / scale >= 2^-6.
  const at::Tensor xd = x.to(at::kDouble);
  const at::Tensor big = (xd / scale).abs() >= std::ldexp(1.0, -6);
  const at::Tensor sat = (xd / scale).abs() >= 448;
  const at::Tensor rel = ((back - xd).abs() / xd.abs().clamp_min(1e-30));
  EXPECT_TRUE((rel.masked_select(big & sat.logical_not()) <= 1.0 / 16 + 1e-12).all().item<bool>());
  EXPECT_TRUE((back.masked_select(sat).abs() == 448 * static_cast<double>(scale)).all().item<bool>());

  // gather: a 3-block table over a [2, 5, 4, 2, 64] cache.
  const PagedLayout lb = PagedLayout::make(64, 4, 2, kBF16);
  at::Tensor cache = at::randn({2, 5, 4, 2, 64}).to(at::kBFloat16);
  const at::Tensor bt = at::tensor(std::vector<int32_t>{3, 0, 4});
  const auto kv = ref::gather_sequence(lb, cache, bt, 10, 1.0, 1.0);
  ASSERT_EQ(kv.first.sizes(), (std::vector<int64_t>{10, 2, 64}));
  EXPECT_TRUE(at::equal(kv.first[0], cache[0][3][0].to(at::kDouble)));
  EXPECT_TRUE(at::equal(kv.first[5], cache[0][0][1].to(at::kDouble)));
  EXPECT_TRUE(at::equal(kv.second[9], cache[1][4][1].to(at::kDouble)));
}

TEST(PagedReference, PrefillMatchesDecodePerPosition) {
  // Causal prefill of a chunk = decode of each query over its visible prefix.
  at::manual_seed(8);
  const at::Tensor k = at::randn({12, 2, 32}, at::kDouble);
  const at::Tensor v = at::randn({12, 2, 32}, at::kDouble);
  const at::Tensor q = at::randn({5, 4, 32}, at::kDouble);
  const at::Tensor out = ref::prefill_attention(q, k, v, 0.3);
  for (int64_t i = 0; i < 5; ++i) {
    const int64_t visible = 12 - 5 + i + 1;
    const auto d = ref::decode_attention(q.narrow(0, i, 1), {k.narrow(0, 0, visible)},
                                         {v.narrow(0, 0, visible)}, 0.3);
    EXPECT_TRUE(at::allclose(out[i], d.out[0], 1e-12, 1e-12)) << "query " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// CPU: compile-only mode (meta tensors, JitRuntime without launches)

TEST(PagedCompileOnly, WrappersCompileOnMetaTensors) {
  jit::JitRuntime rt(compile_only_options());
  const auto meta = at::TensorOptions().device(at::kMeta);
  const int64_t hq = 32, hk = 8, d = 128, n = 48, b = 4, max_blocks = 2048;
  size_t expected = 0;
  for (CacheDtype dt : {kBF16, kFP8}) {
    const PagedLayout l = PagedLayout::make(d, 16, hk, dt);
    const at::Tensor cache = at::empty(cache_shape(l, 64), meta.dtype(cache_scalar_type(l)));
    const at::Tensor ks = at::empty({1}, meta.dtype(at::kFloat));
    const at::Tensor qkv = at::empty({n, hq + 2 * hk, d}, meta.dtype(at::kBFloat16));
    const at::Tensor key = qkv.narrow(1, hq, hk);
    const at::Tensor value = qkv.narrow(1, hq + hk, hk);
    store(rt, l, key, value, at::empty({n}, meta.dtype(at::kLong)), cache, ks, ks);

    const at::Tensor ws_buf = at::empty({decode_workspace_bytes(b, hq, d)}, meta.dtype(at::kByte));
    const DecodeWorkspace ws = decode_workspace_views(ws_buf, b, hq, d);
    const at::Tensor q = at::empty({b, hq, d}, meta.dtype(at::kBFloat16));
    const at::Tensor out = at::empty({b, hq, d}, meta.dtype(at::kBFloat16));
    const at::Tensor bt = at::empty({b, max_blocks}, meta.dtype(at::kInt));
    const at::Tensor lens = at::empty({b}, meta.dtype(at::kInt));
    decode(rt, l, q, cache, ks, ks, bt, lens, 1.0f / std::sqrt(128.0f), ws, out);

    const at::Tensor qp = qkv.narrow(1, 0, hq);
    prefill(rt, l, qp, cache, ks, ks, bt, at::empty({b + 1}, meta.dtype(at::kInt)), lens, 0.1f,
            at::empty({n, hq, d}, meta.dtype(at::kBFloat16)));
    // store, stage 1 and prefill per dtype; stage 2 is shared.
    expected += dt == kBF16 ? 4 : 3;
    EXPECT_EQ(rt.cached_kernels(), expected) << cache_dtype_name(dt);

    // Same keys again: no new compile.
    decode(rt, l, q, cache, ks, ks, bt, lens, 0.5f, ws, out);
    EXPECT_EQ(rt.cached_kernels(), expected);
  }
  // bf16 without scales compiles to the same keys as with them.
  const PagedLayout l = PagedLayout::make(d, 16, hk, kBF16);
  const at::Tensor cache = at::empty(cache_shape(l, 64), meta.dtype(at::kBFloat16));
  const at::Tensor kv = at::empty({n, hk, d}, meta.dtype(at::kBFloat16));
  store(rt, l, kv, kv, at::empty({n}, meta.dtype(at::kLong)), cache, at::Tensor(), at::Tensor());
  EXPECT_EQ(rt.cached_kernels(), expected);
  // Another GQA group is another compile key of stage 1.
  const PagedLayout l4 = PagedLayout::make(d, 16, 4, kBF16);
  const at::Tensor cache4 = at::empty(cache_shape(l4, 8), meta.dtype(at::kBFloat16));
  const at::Tensor ws_buf = at::empty({decode_workspace_bytes(1, hq, d)}, meta.dtype(at::kByte));
  decode(rt, l4, at::empty({1, hq, d}, meta.dtype(at::kBFloat16)), cache4, at::Tensor(),
         at::Tensor(), at::empty({1, 2048}, meta.dtype(at::kInt)), at::empty({1}, meta.dtype(at::kInt)),
         0.1f, decode_workspace_views(ws_buf, 1, hq, d),
         at::empty({1, hq, d}, meta.dtype(at::kBFloat16)));
  EXPECT_EQ(rt.cached_kernels(), expected + 1);
}

TEST(PagedCompileOnly, ValidationNamesTheArgument) {
  jit::JitRuntime rt(compile_only_options());
  const auto meta = at::TensorOptions().device(at::kMeta);
  const PagedLayout l = PagedLayout::make(128, 16, 8, kFP8);
  const at::Tensor cache = at::empty(cache_shape(l, 4), meta.dtype(at::kByte));
  const at::Tensor s = at::empty({1}, meta.dtype(at::kFloat));
  const at::Tensor good = at::empty({3, 8, 128}, meta.dtype(at::kBFloat16));
  const at::Tensor slots = at::empty({3}, meta.dtype(at::kLong));
  EXPECT_MENTIONS(store(rt, l, good.to(at::kFloat), good, slots, cache, s, s), "'key'");
  EXPECT_MENTIONS(store(rt, l, good, good, slots.to(at::kInt), cache, s, s), "'slot_mapping'");
  EXPECT_MENTIONS(store(rt, l, good, good, slots, at::empty({2, 4, 16, 8, 64}, meta.dtype(at::kByte)), s, s),
                  "'kv_cache'");
  EXPECT_MENTIONS(store(rt, l, good, good, slots, at::empty({4, 2, 16, 8, 128}, meta.dtype(at::kByte)), s, s),
                  "'kv_cache'");
  EXPECT_MENTIONS(store(rt, l, good, good, slots, cache.to(at::kBFloat16), s, s), "'kv_cache'");
  EXPECT_MENTIONS(store(rt, l, good, good, slots, cache, at::Tensor(), s), "'k_scale'");
  EXPECT_MENTIONS(store(rt, l, good, good, slots, cache, s, at::empty({2}, meta.dtype(at::kFloat))),
                  "'v_scale'");
  EXPECT_MENTIONS(store(rt, l, good, good, slots, cache, s, at::empty({1}, at::kFloat)),
                  "'v_scale' must be on a CUDA device");
  EXPECT_MENTIONS(store(rt, l, at::empty({3, 8, 128}, at::kBFloat16), good, slots, cache, s, s),
                  "CUDA device");
  EXPECT_MENTIONS(store(rt, l, good, at::empty({2, 8, 128}, meta.dtype(at::kBFloat16)), slots, cache, s, s),
                  "'value'");

  const at::Tensor q = at::empty({2, 12, 128}, meta.dtype(at::kBFloat16));  // 12 % 8 != 0
  const at::Tensor mid = at::empty({2, 12, 16, 129}, meta.dtype(at::kFloat));
  const at::Tensor bt = at::empty({2, 4}, meta.dtype(at::kInt));
  const at::Tensor lens = at::empty({2}, meta.dtype(at::kInt));
  EXPECT_MENTIONS(decode_stage1(rt, l, q, cache, s, s, bt, lens, 1.0f, mid), "'q'");
  const at::Tensor q16 = at::empty({2, 16, 128}, meta.dtype(at::kBFloat16));
  const at::Tensor mid16 = at::empty({2, 16, 16, 129}, meta.dtype(at::kFloat));
  EXPECT_MENTIONS(decode_stage1(rt, l, q16, cache, s, s, bt.narrow(0, 0, 1), lens, 1.0f, mid16),
                  "'block_table'");
  EXPECT_MENTIONS(decode_stage1(rt, l, q16, cache, s, s, bt, lens.narrow(0, 0, 1), 1.0f, mid16),
                  "'seq_lens'");
  EXPECT_MENTIONS(decode_stage1(rt, l, q16, cache, s, s, bt, lens, 1.0f, mid), "'mid_o'");
  EXPECT_MENTIONS(decode_stage2(rt, l, mid16, at::empty({2, 16, 64}, meta.dtype(at::kBFloat16)),
                                at::empty({2, 16}, meta.dtype(at::kFloat))),
                  "'out'");
  EXPECT_MENTIONS(decode_stage2(rt, l, mid16, q16, at::empty({2, 15}, meta.dtype(at::kFloat))),
                  "'lse'");
  const at::Tensor small = at::empty({100}, meta.dtype(at::kByte));
  EXPECT_MENTIONS(decode_workspace_views(small, 2, 16, 128), "'buffer'");

  const at::Tensor qsl = at::empty({3}, meta.dtype(at::kInt));
  EXPECT_MENTIONS(prefill(rt, l, q16, cache, s, s, bt, at::empty({1}, meta.dtype(at::kInt)), lens, 1.0f, q16),
                  "'query_start_loc'");
  EXPECT_MENTIONS(prefill(rt, l, q16, cache, s, s, bt, qsl, lens, 1.0f, q16.narrow(0, 0, 1)),
                  "'out'");
  EXPECT_MENTIONS(prefill(rt, l, q16, cache, s, s, bt, at::empty({4}, meta.dtype(at::kInt)), lens, 1.0f, q16),
                  "'block_table'");
  EXPECT_MENTIONS(prefill(rt, l, q16, cache, s, s, bt, qsl, lens.to(at::kLong), 1.0f, q16),
                  "'seq_lens'");
  EXPECT_MENTIONS(prefill(rt, l, q16, cache, s, s, bt, qsl, lens, 1.0f, q16), "(no error)");
  // Every message names the function.
  EXPECT_MENTIONS(prefill(rt, l, q, cache, s, s, bt, qsl, lens, 1.0f, q), "paged::prefill");
  EXPECT_EQ(rt.cached_kernels(), 1u);  // only the one valid prefill compiled
}

// ---------------------------------------------------------------------------------------------
// GPU

// Per-tensor scales for a dtype (fp8: chosen so |x| / scale spans the e4m3 range).
struct Scales {
  float k = 1.0f, v = 1.0f;
  at::Tensor k_t, v_t;  // float32 [1] on the GPU
};

Scales make_scales(CacheDtype dt, float k, float v) {
  Scales s;
  if (dt == kFP8) {
    s.k = k;
    s.v = v;
  }
  s.k_t = at::full({1}, s.k, cuda(at::kFloat));
  s.v_t = at::full({1}, s.v, cuda(at::kFloat));
  return s;
}

// A cache whose every byte is the sentinel, of `num_blocks` blocks.
at::Tensor poisoned_cache(const PagedLayout& l, int64_t num_blocks) {
  const std::vector<int64_t> shape = cache_shape(l, num_blocks);
  int64_t bytes = l.element_bytes();
  for (int64_t s : shape) bytes *= s;
  at::Tensor raw = at::full({bytes}, kSentinel, cuda(at::kByte));
  return raw.view(cache_scalar_type(l)).view(shape);
}

// Raw bytes of a cache as uint8 [2, num_slots, Hk, D * element_bytes] on the CPU.
at::Tensor cache_bytes(const PagedLayout& l, const at::Tensor& cache) {
  return cache.cpu().contiguous().view(at::kByte).view(
      {2, -1, l.num_kv_heads, static_cast<int64_t>(l.head_dim) * l.element_bytes()});
}

at::Tensor element_bytes_of(const at::Tensor& elements) {
  return elements.contiguous().view(at::kByte).view(
      {elements.size(0), elements.size(1), -1});
}

// Every sequence gets its own shuffled blocks of a sentinel-filled cache; the table has `stride`
// columns.
PagedCache make_paged(const PagedLayout& l, const std::vector<int64_t>& lens, int64_t stride,
                      uint64_t seed) {
  PagedCache p = shuffled_blocks(l.block_size, lens, stride, seed);
  p.cache = poisoned_cache(l, p.num_blocks);
  return p;
}

// Cache slots of tokens [first, first + n) of a sequence.
at::Tensor slots_of(const PagedLayout& l, const at::Tensor& bt_row, int64_t first, int64_t n) {
  return kernels::ref::token_slots(bt_row, l.block_size, first, n);
}

// |got - want| <= |want| * 2^-8 (bf16 output rounding) + 1e-4 * vmax (float32 accumulation).
// Returns the largest error as a fraction of its bound (<= 1 passes).
double worst_vs_bound(const at::Tensor& got, const at::Tensor& want, double vmax) {
  const at::Tensor bound = want.abs() * std::ldexp(1.0, -8) * 1.001 + 1e-4 * vmax;
  return ((got - want).abs() / bound).max().item<double>();
}

std::string dtype_tag(CacheDtype dt) { return dt == kBF16 ? "bf16" : "fp8"; }

// ---- store ----

struct StoreCase {
  int64_t tokens, hq, hk, d, bs;
  CacheDtype dtype;
};

std::string store_name(const testing::TestParamInfo<StoreCase>& i) {
  const StoreCase& c = i.param;
  return dtype_tag(c.dtype) + "_n" + std::to_string(c.tokens) + "_hq" + std::to_string(c.hq) +
         "_hk" + std::to_string(c.hk) + "_d" + std::to_string(c.d) + "_bs" + std::to_string(c.bs);
}

void PrintTo(const StoreCase& c, std::ostream* os) { *os << store_name({c, 0}); }

class PagedStoreGpu : public testing::TestWithParam<StoreCase> {};

TEST_P(PagedStoreGpu, BytesMatchReference) {
  CS_REQUIRE_GPU();
  const StoreCase c = GetParam();
  const PagedLayout l = PagedLayout::make(static_cast<int>(c.d), static_cast<int>(c.bs),
                                          static_cast<int>(c.hk), c.dtype);
  // key / value as strided views of a fused qkv tensor, as a serving engine passes them; a few
  // large and tiny coordinates exercise fp8 saturation and subnormals.
  at::Tensor qkv = random_bf16({c.tokens, c.hq + 2 * c.hk, c.d}, 11 + c.tokens + c.d, 2.0, 0.3);
  qkv.select(2, 0).fill_(40.0);
  qkv.select(2, 1).fill_(-1e-4);
  const at::Tensor key = qkv.narrow(1, c.hq, c.hk);
  const at::Tensor value = qkv.narrow(1, c.hq + c.hk, c.hk);
  const Scales sc = make_scales(c.dtype, 0.05f, 0.02f);  // 40 / 0.05 = 800: saturates
  const int64_t num_blocks = (c.tokens + c.bs - 1) / c.bs + 3;
  const int64_t total_slots = num_blocks * c.bs;
  // Distinct random slots; every 5th token skipped (negative slot).
  const at::Tensor slots = random_slots(c.tokens, total_slots);
  at::Tensor cache = poisoned_cache(l, num_blocks);
  store(gpu_runtime(), l, key, value, slots.to(at::kCUDA), cache, sc.k_t, sc.v_t);
  const at::Tensor bytes = cache_bytes(l, cache);  // [2, slots, Hk, D * elt]

  const at::Tensor tok = (slots >= 0).nonzero().squeeze(1);
  const at::Tensor kept_slots = slots.index_select(0, tok);
  at::Tensor unused = at::ones({total_slots}, at::kBool);
  unused.index_fill_(0, kept_slots, false);
  const at::Tensor unused_idx = unused.nonzero().squeeze(1);
  EXPECT_TRUE((bytes.index_select(1, unused_idx) == kSentinel).all().item<bool>())
      << "store wrote outside slot_mapping";

  const at::Tensor want_k = ref::cache_elements(l, key.cpu().index_select(0, tok), sc.k);
  const at::Tensor want_v = ref::cache_elements(l, value.cpu().index_select(0, tok), sc.v);
  const at::Tensor got_k = bytes[0].index_select(0, kept_slots);
  const at::Tensor got_v = bytes[1].index_select(0, kept_slots);
  const int64_t k_mismatch = (got_k != element_bytes_of(want_k)).sum().item<int64_t>();
  const int64_t v_mismatch = (got_v != element_bytes_of(want_v)).sum().item<int64_t>();
  int64_t saturated = 0, subnormal = 0;
  if (c.dtype == kFP8) {
    saturated = ((want_k & 0x7f) == 0x7e).sum().item<int64_t>();
    subnormal = (((want_k & 0x78) == 0) & ((want_k & 0x7) != 0)).sum().item<int64_t>() +
                (((want_v & 0x78) == 0) & ((want_v & 0x7) != 0)).sum().item<int64_t>();
  }
  std::printf("store %s: %lld tokens written, mismatching K bytes %lld, V bytes %lld "
              "(fp8 saturated %lld, subnormal %lld)\n",
              store_name({c, 0}).c_str(), static_cast<long long>(tok.size(0)),
              static_cast<long long>(k_mismatch), static_cast<long long>(v_mismatch),
              static_cast<long long>(saturated), static_cast<long long>(subnormal));
  EXPECT_EQ(k_mismatch, 0);
  EXPECT_EQ(v_mismatch, 0);
  if (c.dtype == kFP8) {
    EXPECT_GT(saturated, 0);
    EXPECT_GT(subnormal, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedStoreGpu,
    testing::Values(StoreCase{1, kHq, kHk, kD, 16, kBF16}, StoreCase{300, kHq, kHk, kD, 16, kFP8},
                    StoreCase{17, 8, 8, 64, 32, kFP8}, StoreCase{300, 16, 2, 256, 16, kBF16},
                    StoreCase{2053, 16, 2, 128, 32, kFP8}, StoreCase{33, 32, 4, 256, 32, kFP8},
                    StoreCase{17, 8, 8, 64, 16, kBF16}, StoreCase{1, kHq, kHk, kD, 16, kFP8}),
    store_name);

// ---- decode ----

struct DecodeCase {
  int64_t batch, ctx, hq, hk, d, bs;
  CacheDtype dtype;
  // > 0: the hybrid block-major layout with pages this many bytes longer than K + V, so the
  // block stride is not a multiple of 16 elements and stage 1 takes its element-load path.
  int64_t page_pad = 0;
};

std::string decode_name(const testing::TestParamInfo<DecodeCase>& i) {
  const DecodeCase& c = i.param;
  return dtype_tag(c.dtype) + "_b" + std::to_string(c.batch) + "_ctx" + std::to_string(c.ctx) +
         "_hq" + std::to_string(c.hq) + "_hk" + std::to_string(c.hk) + "_d" +
         std::to_string(c.d) + "_bs" + std::to_string(c.bs) +
         (c.page_pad > 0 ? "_pad" + std::to_string(c.page_pad) : "");
}

std::vector<DecodeCase> decode_cases() {
  std::vector<DecodeCase> out;
  for (CacheDtype dt : {kBF16, kFP8}) {
    out.push_back({1, 1, 8, 8, 128, 16, dt});        // one token, group 1
    out.push_back({3, 17, kHq, kHk, kD, 16, dt});      // crosses a block, 9 of 16 splits used
    out.push_back({4, 300, 32, 4, 64, 32, dt});      // group 8
    out.push_back({8, 2053, kHq, kHk, kD, 16, dt});    // batch 8, long, uneven last split
    out.push_back({2, 513, 16, 2, 256, 32, dt});     // D 256
    out.push_back({5, 16, 8, 1, 64, 16, dt});        // exactly one block, group 8, MQA-like
    out.push_back({1, 4096 + 7, 32, 8, 256, 16, dt});
    out.push_back({2, 700, 12, 2, 64, 16, dt});       // group 6: 3 heads a block
    out.push_back({3, 333, 6, 3, 96, 16, dt});        // D 96: 3 pieces a lane, group 2
    // Block-major pages padded by 2 elements: unaligned rows, element loads.
    out.push_back({2, 517, kHq, kHk, kD, 16, dt, 2 * cache_element_bytes(dt)});
  }
  return out;
}

void PrintTo(const DecodeCase& c, std::ostream* os) { *os << decode_name({c, 0}); }

class PagedDecodeGpu : public testing::TestWithParam<DecodeCase> {};

TEST_P(PagedDecodeGpu, MatchesFloat64Reference) {
  CS_REQUIRE_GPU();
  const DecodeCase c = GetParam();
  const PagedLayout l = PagedLayout::make(static_cast<int>(c.d), static_cast<int>(c.bs),
                                          static_cast<int>(c.hk), c.dtype);
  const uint64_t seed = static_cast<uint64_t>(c.batch * 1000003 + c.ctx * 131 + c.hq * 7 + c.d +
                                              static_cast<int>(c.dtype));
  std::vector<int64_t> lens;
  for (int64_t b = 0; b < c.batch; ++b) lens.push_back(std::max<int64_t>(1, c.ctx - 7 * b));
  const int64_t max_blocks = (c.ctx + c.bs - 1) / c.bs + 3;  // not a multiple of 16 on purpose
  PagedCache p = make_paged(l, lens, max_blocks, seed);
  if (c.page_pad > 0) {
    const int64_t page = l.page_size_bytes() + c.page_pad;
    const at::Tensor raw = at::full({p.num_blocks * page}, kSentinel, cuda(at::kByte));
    p.cache = block_major_view(l, raw, p.num_blocks, page);
  }
  const Scales sc = make_scales(c.dtype, 0.02f, 0.01f);
  for (int64_t b = 0; b < c.batch; ++b) {
    const at::Tensor k = random_bf16({lens[b], c.hk, c.d}, seed + 2 * b, 1.5, 0.2);
    const at::Tensor v = random_bf16({lens[b], c.hk, c.d}, seed + 2 * b + 1, 1.0, -0.1);
    store(gpu_runtime(), l, k, v, slots_of(l, p.block_table[b], 0, lens[b]).to(at::kCUDA),
          p.cache, sc.k_t, sc.v_t);
  }

  const at::Tensor qkv = random_bf16({c.batch, c.hq + 2 * c.hk, c.d}, seed + 99, 1.0, 0.0);
  const at::Tensor q = qkv.narrow(1, 0, c.hq);  // strided, like a view of the qkv projection
  const at::Tensor seq_lens =
      at::tensor(std::vector<int32_t>(lens.begin(), lens.end())).to(at::kCUDA);
  const at::Tensor bt = p.block_table.to(at::kCUDA);
  at::Tensor ws_buf = at::empty({decode_workspace_bytes(c.batch, c.hq, c.d)}, cuda(at::kByte));
  const DecodeWorkspace ws = decode_workspace_views(ws_buf, c.batch, c.hq, c.d);
  ws.mid_o.fill_(std::numeric_limits<float>::quiet_NaN());
  ws.lse.fill_(std::numeric_limits<float>::quiet_NaN());
  // The output is a view into a NaN buffer with two extra heads per row, which must stay NaN.
  at::Tensor out_buf = at::full({c.batch, c.hq + 2, c.d}, std::numeric_limits<float>::quiet_NaN(),
                                cuda(at::kBFloat16));
  const at::Tensor out = out_buf.narrow(1, 1, c.hq);
  const float sm_scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  decode(gpu_runtime(), l, q, p.cache, sc.k_t, sc.v_t, bt, seq_lens, sm_scale, ws, out);

  const at::Tensor mid = ws.mid_o.cpu();
  const at::Tensor got = out.cpu().to(at::kDouble);
  const at::Tensor lse = ws.lse.cpu().to(at::kDouble);
  const at::Tensor buf = out_buf.cpu();
  ASSERT_FALSE(mid.isnan().any().item<bool>()) << "stage 1 left part of mid_o unwritten";
  ASSERT_FALSE(got.isnan().any().item<bool>()) << "stage 2 left part of out unwritten";
  ASSERT_FALSE(lse.isnan().any().item<bool>()) << "stage 2 left part of lse unwritten";
  EXPECT_TRUE(buf.select(1, 0).isnan().all().item<bool>()) << "stage 2 wrote outside out";
  EXPECT_TRUE(buf.select(1, c.hq + 1).isnan().all().item<bool>()) << "stage 2 wrote outside out";
  // Empty splits carry lse = -inf and zeros.
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t per = (lens[b] + kNumKvSplits - 1) / kNumKvSplits;
    const int64_t nonempty = (lens[b] + per - 1) / per;
    const at::Tensor split_lse = mid[b].select(2, c.d);  // [Hq, S]
    EXPECT_EQ(split_lse.isinf().sum().item<int64_t>(), c.hq * (kNumKvSplits - nonempty));
    EXPECT_TRUE((mid[b].narrow(1, nonempty, kNumKvSplits - nonempty).narrow(2, 0, c.d) == 0)
                    .all()
                    .item<bool>());
  }

  std::vector<at::Tensor> kd, vd;
  double vmax = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    auto kv = ref::gather_sequence(l, p.cache, p.block_table[b], lens[b], sc.k, sc.v);
    vmax = std::max(vmax, kv.second.abs().max().item<double>());
    kd.push_back(kv.first);
    vd.push_back(kv.second);
  }
  const ref::Attention want = ref::decode_attention(q.cpu(), kd, vd, sm_scale);
  const double abs_err = (got - want.out).abs().max().item<double>();
  const double rel = ((got - want.out).norm() / want.out.norm()).item<double>();
  const double worst = worst_vs_bound(got, want.out, vmax);
  const double lse_err = (lse - want.lse).abs().max().item<double>();
  std::printf("decode %s: out max abs err %.3g (%.2f of bound), rel L2 %.3g, lse max abs err "
              "%.3g\n",
              decode_name({c, 0}).c_str(), abs_err, worst, rel, lse_err);
  EXPECT_LE(worst, 1.0);
  EXPECT_LT(lse_err, 1e-4 * std::max(1.0, want.lse.abs().max().item<double>()));
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedDecodeGpu, testing::ValuesIn(decode_cases()), decode_name);

// ---- continuation prefill ----

struct PrefillCase {
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (context tokens, chunk tokens)
  int64_t hq, hk, d, bs;
  CacheDtype dtype;
  bool block_major = false;  // the hybrid layout: block b's K then V in page b
};

std::string prefill_name(const testing::TestParamInfo<PrefillCase>& i) {
  const PrefillCase& c = i.param;
  std::string s = dtype_tag(c.dtype);
  for (const auto& sq : c.seqs) s += "_c" + std::to_string(sq.first) + "q" + std::to_string(sq.second);
  return s + "_hq" + std::to_string(c.hq) + "_hk" + std::to_string(c.hk) + "_d" +
         std::to_string(c.d) + "_bs" + std::to_string(c.bs) + (c.block_major ? "_blockmajor" : "");
}

std::vector<PrefillCase> prefill_cases() {
  std::vector<PrefillCase> out;
  for (CacheDtype dt : {kBF16, kFP8}) {
    out.push_back({{{0, 7}}, 8, 8, 128, 16, dt});                          // plain prefill
    out.push_back({{{16, 16}}, kHq, kHk, kD, 16, dt});                       // block-aligned
    out.push_back({{{17, 33}, {0, 1}, {100, 64}}, 32, 4, 64, 32, dt});     // group 8, 3 seqs
    out.push_back({{{513, 40}}, 16, 2, 256, 16, dt});                      // D 256
    out.push_back({{{31, 1}, {32, 5}, {33, 17}, {5, 100}}, kHq, kHk, kD, 32, dt});
    out.push_back({{{1000, 3}, {2048, 1}}, 8, 1, 64, 16, dt});            // long context, MQA
    // Qwen3-Next's gated attention in a hybrid cache: 544-token blocks, block-major pages.
    out.push_back({{{600, 70}, {0, 9}}, 16, 2, 256, 544, dt, true});
  }
  return out;
}

void PrintTo(const PrefillCase& c, std::ostream* os) { *os << prefill_name({c, 0}); }

class PagedPrefillGpu : public testing::TestWithParam<PrefillCase> {};

TEST_P(PagedPrefillGpu, MatchesFloat64Reference) {
  CS_REQUIRE_GPU();
  const PrefillCase c = GetParam();
  const PagedLayout l = PagedLayout::make(static_cast<int>(c.d), static_cast<int>(c.bs),
                                          static_cast<int>(c.hk), c.dtype);
  const int64_t nseq = static_cast<int64_t>(c.seqs.size());
  uint64_t seed = static_cast<uint64_t>(c.hq * 31 + c.d + c.bs + static_cast<int>(c.dtype));
  std::vector<int64_t> lens;
  std::vector<int32_t> qsl = {0};
  for (const auto& sq : c.seqs) {
    lens.push_back(sq.first + sq.second);
    qsl.push_back(qsl.back() + static_cast<int32_t>(sq.second));
    seed = seed * 1000003 + static_cast<uint64_t>(sq.first * 7 + sq.second);
  }
  const int64_t total_q = qsl.back();
  const int64_t padded = total_q + 2;  // two padding tokens, whose rows must stay untouched
  const int64_t max_lens = *std::max_element(lens.begin(), lens.end());
  PagedCache p = make_paged(l, lens, (max_lens + c.bs - 1) / c.bs + 1, seed);
  if (c.block_major) {
    at::Tensor raw = at::full({p.num_blocks * l.page_size_bytes()}, kSentinel, cuda(at::kByte));
    p.cache = block_major_view(l, raw, p.num_blocks, l.page_size_bytes());
    ASSERT_EQ(p.cache.stride(1), l.page_size_bytes() / l.element_bytes());
  }
  const Scales sc = make_scales(c.dtype, 0.03f, 0.015f);

  // The context was stored by earlier steps, the chunk just now: two store calls per sequence.
  std::vector<at::Tensor> ks, vs;
  for (int64_t b = 0; b < nseq; ++b) {
    const at::Tensor k = random_bf16({lens[b], c.hk, c.d}, seed + 2 * b, 1.5, 0.2);
    const at::Tensor v = random_bf16({lens[b], c.hk, c.d}, seed + 2 * b + 1, 1.0, -0.1);
    const int64_t ctx = c.seqs[b].first;
    const int64_t chunk = c.seqs[b].second;
    const at::Tensor row = p.block_table[b];
    if (ctx > 0) {
      store(gpu_runtime(), l, k.narrow(0, 0, ctx), v.narrow(0, 0, ctx),
            slots_of(l, row, 0, ctx).to(at::kCUDA), p.cache, sc.k_t, sc.v_t);
    }
    store(gpu_runtime(), l, k.narrow(0, ctx, chunk), v.narrow(0, ctx, chunk),
          slots_of(l, row, ctx, chunk).to(at::kCUDA), p.cache, sc.k_t, sc.v_t);
    ks.push_back(k);
    vs.push_back(v);
  }

  const at::Tensor qkv = random_bf16({padded, c.hq + 2 * c.hk, c.d}, seed + 99, 1.0, 0.0);
  const at::Tensor q = qkv.narrow(1, 0, c.hq);
  at::Tensor out_buf = at::full({padded + 1, c.hq, c.d}, std::numeric_limits<float>::quiet_NaN(),
                                cuda(at::kBFloat16));
  const at::Tensor out = out_buf.narrow(0, 0, padded);
  const float sm_scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  prefill(gpu_runtime(), l, q, p.cache, sc.k_t, sc.v_t, p.block_table.to(at::kCUDA),
          at::tensor(qsl).to(at::kCUDA),
          at::tensor(std::vector<int32_t>(lens.begin(), lens.end())).to(at::kCUDA), sm_scale, out);

  const at::Tensor got_all = out_buf.cpu().to(at::kDouble);
  EXPECT_TRUE(got_all.narrow(0, total_q, padded + 1 - total_q).isnan().all().item<bool>())
      << "prefill wrote padding rows or past out";
  const at::Tensor got = got_all.narrow(0, 0, total_q);
  ASSERT_FALSE(got.isnan().any().item<bool>()) << "prefill left part of out unwritten";

  double worst = 0, abs_err = 0, rel_num = 0, rel_den = 0;
  for (int64_t b = 0; b < nseq; ++b) {
    const auto kv = ref::gather_sequence(l, p.cache, p.block_table[b], lens[b], sc.k, sc.v);
    // The cache holds exactly what the reference encoder makes of the inputs.
    const at::Tensor k_enc = ref::element_values(l, ref::cache_elements(l, ks[b], sc.k), sc.k);
    const at::Tensor v_enc = ref::element_values(l, ref::cache_elements(l, vs[b], sc.v), sc.v);
    EXPECT_TRUE(at::equal(kv.first, k_enc)) << "sequence " << b << ": cached K differs";
    EXPECT_TRUE(at::equal(kv.second, v_enc)) << "sequence " << b << ": cached V differs";
    const int64_t chunk = c.seqs[b].second;
    const at::Tensor want =
        ref::prefill_attention(q.cpu().narrow(0, qsl[b], chunk), kv.first, kv.second, sm_scale);
    const at::Tensor g = got.narrow(0, qsl[b], chunk);
    worst = std::max(worst, worst_vs_bound(g, want, kv.second.abs().max().item<double>()));
    abs_err = std::max(abs_err, (g - want).abs().max().item<double>());
    rel_num += (g - want).pow(2).sum().item<double>();
    rel_den += want.pow(2).sum().item<double>();
  }
  std::printf("prefill %s: out max abs err %.3g (%.2f of bound), rel L2 %.3g\n",
              prefill_name({c, 0}).c_str(), abs_err, worst, std::sqrt(rel_num / rel_den));
  EXPECT_LE(worst, 1.0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedPrefillGpu, testing::ValuesIn(prefill_cases()),
                         prefill_name);

}  // namespace
}  // namespace coldstart::paged
