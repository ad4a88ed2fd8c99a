// GDN decode kernels: CPU tests of the tile rules, the reference and the compile-only path of the
// wrappers (which arguments enter the compile key); GPU tests of both kernels against the float64
// token-by-token reference, with strided views as the engine passes them, shuffled and padded
// state slots, poisoned outputs and untouched-slot checks (they skip without a CUDA GPU).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/gdn_decode/gdn_decode.h"
#include "harness/kernels/gdn_decode/gdn_decode_reference.h"
#include "harness/kernels/test_util.h"

namespace coldstart::gdn_decode {
namespace {

using namespace kernels::test;  // test_util.h

const GdnDims kQwen = gdn_dims(kernels::shapes::kQwen3NextGdnTp1);
constexpr int64_t kConvDim = 2 * 16 * 128 + 32 * 128;
const float kScale = 1.0f / std::sqrt(128.0f);

// ---------------------------------------------------------------------------------------------
// CPU: tile rules and dims

TEST(GdnDecodeTiles, MtpValueTileFollowsTheSeedOn132Sms) {
  EXPECT_EQ(mtp_warmup_request_counts(132, kQwen), (std::vector<int>{1, 5, 17}));
  // The seed's three request counts select 32, 64 and V; the tile holds until the next one.
  EXPECT_EQ(mtp_value_tile(1, 132, kQwen), 32);
  EXPECT_EQ(mtp_value_tile(4, 132, kQwen), 32);
  EXPECT_EQ(mtp_value_tile(5, 132, kQwen), 64);
  EXPECT_EQ(mtp_value_tile(16, 132, kQwen), 64);
  EXPECT_EQ(mtp_value_tile(17, 132, kQwen), 128);
  EXPECT_EQ(mtp_value_tile(256, 132, kQwen), 128);
  // Other targets: B200 148 SMs -> {1, 5, 19}; 48 SMs -> {1, 2, 7}.
  EXPECT_EQ(mtp_warmup_request_counts(148, kQwen), (std::vector<int>{1, 5, 19}));
  EXPECT_EQ(mtp_value_tile(18, 148, kQwen), 64);
  EXPECT_EQ(mtp_value_tile(19, 148, kQwen), 128);
  EXPECT_EQ(mtp_warmup_request_counts(48, kQwen), (std::vector<int>{1, 2, 7}));
  EXPECT_THROW(mtp_value_tile(0, 132, kQwen), InputError);
  EXPECT_EQ(update_value_tile(kQwen), 32);
  EXPECT_EQ(update_value_tile(GdnDims{2, 4, 64, 64}), 32);
}

TEST(GdnDecodeTiles, RejectsBadDims) {
  EXPECT_THROW(check_dims("t", GdnDims{16, 24, 128, 128}), InputError);
  EXPECT_THROW(check_dims("t", GdnDims{16, 32, 96, 128}), InputError);
  EXPECT_THROW(check_dims("t", GdnDims{0, 32, 128, 128}), InputError);
  EXPECT_NO_THROW(check_dims("t", GdnDims{2, 4, 64, 256}));
  EXPECT_THROW(mtp_constexprs(GdnDims{2, 4, 64, 64}, MtpConfig{}), InputError);   // K = V = 128
  EXPECT_THROW(mtp_constexprs(GdnDims{2, 12, 128, 128}, MtpConfig{}), InputError);  // ratio 6
}

// ---------------------------------------------------------------------------------------------
// CPU: the reference agrees with itself

TEST(GdnDecodeReference, SpecTokensEqualSuccessiveSteps) {
  const GdnDims d{1, 2, 32, 32};
  at::manual_seed(5);
  const at::Tensor q = at::randn({3, 1, 32}), k = at::randn({3, 1, 32}), v = at::randn({3, 2, 32});
  const at::Tensor a = at::randn({3, 2}), b = at::randn({3, 2}), A = at::rand({2}) + 0.5;
  const at::Tensor dtb = at::randn({2}), state = at::randn({6, 2, 32, 32}) * 0.1;
  // One request of 3 tokens, slots [4, 1, 5]; accepted 1 -> reads slot 4.
  const at::Tensor idx = at::tensor(std::vector<int32_t>{4, 1, 5}).view({1, 3});
  const ref::Result spec =
      ref::decode_update(d, A, a, b, dtb, q, k, v, state, idx, at::tensor(std::vector<int32_t>{0, 3}),
                         at::tensor(std::vector<int32_t>{1}), 0.3, true);
  // The same as three plain steps, each reading the slot the previous one wrote.
  at::Tensor st = state.to(at::kDouble);
  const std::vector<int32_t> slots = {4, 1, 5};
  for (int t = 0; t < 3; ++t) {
    const at::Tensor one_idx = at::tensor(std::vector<int32_t>{t == 0 ? 4 : slots[t - 1]});
    at::Tensor s2 = st.clone();
    ref::Result r = ref::decode_update(d, A, a.narrow(0, t, 1), b.narrow(0, t, 1), dtb,
                                       q.narrow(0, t, 1), k.narrow(0, t, 1), v.narrow(0, t, 1), s2,
                                       one_idx, at::Tensor(), at::Tensor(), 0.3, true);
    EXPECT_TRUE(at::allclose(r.out[0], spec.out[t], 1e-12, 1e-12)) << "token " << t;
    // move the carried state to the slot the spec call stores token t at
    st[slots[t]].copy_(r.state[t == 0 ? 4 : slots[t - 1]]);
  }
  for (int s : slots) EXPECT_TRUE(at::allclose(st[s], spec.state[s], 1e-12, 1e-12)) << "slot " << s;
  EXPECT_TRUE(at::equal(spec.state[0], state.to(at::kDouble)[0]));  // untouched
  EXPECT_EQ(spec.written.sum().item<int64_t>(), 3);
}

// ---------------------------------------------------------------------------------------------
// CPU: compile-only mode (meta tensors; which arguments enter the compile key)

struct MetaUpdate {
  at::Tensor conv, ba, A_log, dt_bias, state, out;
};

MetaUpdate meta_update(int64_t tokens, int64_t slot_stride, at::ScalarType state_t) {
  const auto meta = at::TensorOptions().device(at::kMeta);
  MetaUpdate m;
  m.conv = at::empty({tokens, kConvDim}, meta.dtype(at::kBFloat16));
  m.ba = at::empty({tokens, 64}, meta.dtype(at::kBFloat16));
  m.A_log = at::empty({32}, meta.dtype(at::kFloat));
  m.dt_bias = at::empty({32}, meta.dtype(at::kBFloat16));
  m.state = at::empty({40 * slot_stride}, meta.dtype(state_t))
                .as_strided({40, 32, 128, 128}, {slot_stride, 128 * 128, 128, 1});
  m.out = at::empty({tokens, 32, 128}, meta.dtype(at::kBFloat16));
  return m;
}

void call_update(jit::JitRuntime& rt, const MetaUpdate& m, const at::Tensor& idx,
                 const at::Tensor& cu, const at::Tensor& acc) {
  const int64_t t = m.conv.size(0);
  fused_sigmoid_gating_delta_rule_update(
      rt, kQwen, m.A_log, m.ba.narrow(1, 32, 32), m.ba.narrow(1, 0, 32), m.dt_bias,
      m.conv.narrow(1, 0, 2048).view({t, 16, 128}), m.conv.narrow(1, 2048, 2048).view({t, 16, 128}),
      m.conv.narrow(1, 4096, 4096).view({t, 32, 128}), m.state, idx, cu, acc, m.out, kScale, true);
}

TEST(GdnDecodeCompileOnly, BatchSizeStaysOutOfTheKeyStridesEnterIt) {
  jit::JitRuntime rt(compile_only_options());
  const auto meta = at::TensorOptions().device(at::kMeta).dtype(at::kInt);
  const int64_t ssm = 32 * 128 * 128;
  // Plain decode as vLLM serves it (cu_seqlens given): one key for every batch size.
  for (int64_t b : {1, 8, 33, 256}) {
    const MetaUpdate m = meta_update(b, ssm, at::kBFloat16);
    call_update(rt, m, at::empty({b}, meta), at::empty({b + 1}, meta), at::Tensor());
  }
  EXPECT_EQ(rt.cached_kernels(), 1u);
  // Spec decode (num_accepted_tokens, 2-D indices [B, 4]): a second key, for every batch size.
  for (int64_t b : {1, 8, 64}) {
    const MetaUpdate m = meta_update(4 * b, ssm, at::kBFloat16);
    call_update(rt, m, at::empty({b, 4}, meta), at::empty({b + 1}, meta), at::empty({b}, meta));
  }
  EXPECT_EQ(rt.cached_kernels(), 2u);
  // Another indices row stride (3 tokens per request) is another key (STRIDE_INDICES_SEQ) ...
  call_update(rt, meta_update(6, ssm, at::kBFloat16), at::empty({2, 3}, meta),
              at::empty({3}, meta), at::empty({2}, meta));
  EXPECT_EQ(rt.cached_kernels(), 3u);
  // ... as is the same width sliced from a wider table (stride 8, not the width).
  call_update(rt, meta_update(6, ssm, at::kBFloat16), at::empty({2, 8}, meta).narrow(1, 0, 3),
              at::empty({3}, meta), at::empty({2}, meta));
  EXPECT_EQ(rt.cached_kernels(), 4u);
  // A padded state slot (vLLM's hybrid page) is another key (STRIDE_*_STATE_TOKEN) ...
  call_update(rt, meta_update(8, ssm + 3 * kConvDim, at::kBFloat16), at::empty({8}, meta),
              at::empty({9}, meta), at::Tensor());
  EXPECT_EQ(rt.cached_kernels(), 5u);
  // ... and a float32 state (STATE_DTYPE and the pointer dtype).
  call_update(rt, meta_update(8, ssm, at::kFloat), at::empty({8}, meta), at::empty({9}, meta),
              at::Tensor());
  EXPECT_EQ(rt.cached_kernels(), 6u);
  // Without cu_seqlens this is vLLM's non-varlen kernel: its B constexpr is the batch size.
  call_update(rt, meta_update(8, ssm, at::kBFloat16), at::empty({8}, meta), at::Tensor(), at::Tensor());
  call_update(rt, meta_update(8, ssm, at::kBFloat16), at::empty({8}, meta), at::Tensor(), at::Tensor());
  EXPECT_EQ(rt.cached_kernels(), 7u);
  call_update(rt, meta_update(9, ssm, at::kBFloat16), at::empty({9}, meta), at::Tensor(), at::Tensor());
  EXPECT_EQ(rt.cached_kernels(), 8u);
}

struct MetaMtp {
  at::Tensor qkvz, ba, A_log, dt_bias, state, norm_w, out;
};

MetaMtp meta_mtp(int64_t reqs, int64_t per_req) {
  const auto meta = at::TensorOptions().device(at::kMeta);
  const int64_t l = reqs * per_req;
  MetaMtp m;
  m.qkvz = at::empty({l, kConvDim + 32 * 128}, meta.dtype(at::kBFloat16));
  m.ba = at::empty({l, 64}, meta.dtype(at::kBFloat16));
  m.A_log = at::empty({32}, meta.dtype(at::kFloat));
  m.dt_bias = at::empty({32}, meta.dtype(at::kBFloat16));
  m.state = at::empty({8, 32, 128, 128}, meta.dtype(at::kFloat));
  m.norm_w = at::empty({128}, meta.dtype(at::kBFloat16));
  m.out = at::empty({l, 32, 128}, meta.dtype(at::kBFloat16));
  return m;
}

void call_mtp(jit::JitRuntime& rt, int64_t reqs, int64_t per_req, const std::string& act = "silu") {
  const MetaMtp m = meta_mtp(reqs, per_req);
  const auto ints = at::TensorOptions().device(at::kMeta).dtype(at::kInt);
  const int64_t l = reqs * per_req;
  fused_gdn_decode_post_conv_mtp(
      rt, kQwen, m.qkvz.narrow(1, 0, kConvDim), m.ba.narrow(1, 32, 32), m.ba.narrow(1, 0, 32),
      m.A_log, m.dt_bias, at::empty({reqs, per_req}, ints), at::empty({reqs + 1}, ints),
      at::empty({reqs}, ints), m.state, m.qkvz.narrow(1, kConvDim, 32 * 128).view({l, 32, 128}),
      m.norm_w, m.out, kScale, 1e-6f, act, 132);
}

TEST(GdnDecodeCompileOnly, MtpKeysAreTheThreeValueTiles) {
  jit::JitRuntime rt(compile_only_options());
  for (int reqs : mtp_warmup_request_counts(132, kQwen)) call_mtp(rt, reqs, 4);
  EXPECT_EQ(rt.cached_kernels(), 3u);  // BV = 32, 64, 128
  for (int reqs : {2, 3, 4, 6, 16, 18, 64, 256}) call_mtp(rt, reqs, 4);
  EXPECT_EQ(rt.cached_kernels(), 3u);  // every other request count hits one of them
  call_mtp(rt, 17, 4, "sigmoid");
  EXPECT_EQ(rt.cached_kernels(), 4u);  // the gate activation is a constexpr
  // Tokens per request is a specialized int (Triton-style): 3 and 4 share a key, 1 would not.
  call_mtp(rt, 17, 3);
  EXPECT_EQ(rt.cached_kernels(), 4u);
  call_mtp(rt, 17, 1);
  EXPECT_EQ(rt.cached_kernels(), 5u);
}

TEST(GdnDecodeCompileOnly, ValidationNamesTheArgument) {
  jit::JitRuntime rt(compile_only_options());
  const auto meta = at::TensorOptions().device(at::kMeta).dtype(at::kInt);
  const MetaUpdate m = meta_update(4, 32 * 128 * 128, at::kBFloat16);
  const at::Tensor q = m.conv.narrow(1, 0, 2048).view({4, 16, 128});
  const at::Tensor v = m.conv.narrow(1, 4096, 4096).view({4, 32, 128});
  const at::Tensor a = m.ba.narrow(1, 32, 32), idx = at::empty({4}, meta), cu = at::empty({5}, meta);
  auto call = [&](const at::Tensor& qq, const at::Tensor& aa, const at::Tensor& st,
                  const at::Tensor& ii, const at::Tensor& cc, const at::Tensor& acc,
                  const at::Tensor& out) {
    fused_sigmoid_gating_delta_rule_update(rt, kQwen, m.A_log, aa, aa, m.dt_bias, qq, qq, v, st, ii,
                                           cc, acc, out, kScale, true);
  };
  EXPECT_MENTIONS(call(q.to(at::kFloat), a, m.state, idx, cu, at::Tensor(), m.out), "'q'");
  EXPECT_MENTIONS(call(q, a.narrow(0, 0, 3), m.state, idx, cu, at::Tensor(), m.out), "'a'");
  EXPECT_MENTIONS(call(q, a, m.state.narrow(1, 0, 16), idx, cu, at::Tensor(), m.out), "'state'");
  EXPECT_MENTIONS(call(q, a, m.state.to(at::kHalf), idx, cu, at::Tensor(), m.out), "'state'");
  EXPECT_MENTIONS(call(q, a, m.state, idx.narrow(0, 0, 2), cu, at::Tensor(), m.out), "'state_indices'");
  EXPECT_MENTIONS(call(q, a, m.state, idx.to(at::kLong), cu, at::Tensor(), m.out), "'state_indices'");
  EXPECT_MENTIONS(call(q, a, m.state, idx, cu.to(at::kLong), at::Tensor(), m.out), "'cu_seqlens'");
  EXPECT_MENTIONS(call(q, a, m.state, idx, at::Tensor(), at::empty({4}, meta), m.out),
                  "'num_accepted_tokens'");
  EXPECT_MENTIONS(call(q, a, m.state, idx, cu, at::empty({4}, meta), m.out), "'state_indices'");
  EXPECT_MENTIONS(call(q, a, m.state, idx, cu, at::Tensor(), m.out.transpose(0, 1)), "'out'");
  EXPECT_MENTIONS(call(q, a, m.state, idx, cu, at::Tensor(), m.out), "(no error)");
  EXPECT_MENTIONS(call(q, a, m.state, idx, cu, at::Tensor(), m.out.to(at::kFloat)),
                  "gdn_decode::fused_sigmoid_gating_delta_rule_update");
  EXPECT_EQ(rt.cached_kernels(), 1u);
  EXPECT_MENTIONS(call_mtp(rt, 2, 9), "'state_indices'");  // more than 8 tokens per request
  EXPECT_MENTIONS(call_mtp(rt, 2, 2, "gelu"), "activation");
}

// ---------------------------------------------------------------------------------------------
// GPU

// A state cache of `slots` slots padded to `slot_stride` elements, random everywhere (the padding
// included), as [slots, Hv, V, K]; `raw` is the whole buffer.
struct StateCache {
  at::Tensor raw, state;
};

StateCache make_state(int64_t slots, int64_t slot_stride, at::ScalarType dtype, uint64_t seed) {
  at::manual_seed(seed);
  StateCache c;
  c.raw = (at::randn({slots * slot_stride}) * 0.2).to(dtype).to(at::kCUDA);
  c.state = c.raw.as_strided({slots, 32, 128, 128}, {slot_stride, 128 * 128, 128, 1});
  return c;
}

// Distinct random slots in [first, first + count), shuffled.
std::vector<int32_t> shuffled_slots(int64_t count, int64_t first, uint64_t seed) {
  std::vector<int32_t> s(count);
  std::iota(s.begin(), s.end(), static_cast<int32_t>(first));
  std::shuffle(s.begin(), s.end(), std::mt19937(static_cast<uint32_t>(seed)));
  return s;
}

// Largest |got - want| / (|want| * rel + atol * max|want|) over finite `want` (<= 1 passes).
double worst(const at::Tensor& got, const at::Tensor& want, double rel, double atol) {
  const at::Tensor bound = want.abs() * rel + atol * want.abs().max().item<double>() + 1e-30;
  return ((got - want).abs() / bound).max().item<double>();
}

// Raw state bytes outside the written slots are unchanged.
void expect_untouched(const StateCache& c, const at::Tensor& before, const at::Tensor& written,
                      int64_t slot_stride) {
  const at::Tensor keep = written.logical_not().repeat_interleave(slot_stride).to(at::kCUDA);
  const at::Tensor now = c.raw.view(c.raw.scalar_type() == at::kFloat ? at::kInt : at::kShort);
  const at::Tensor old = before.view(now.scalar_type());
  EXPECT_TRUE(at::equal(now.masked_select(keep), old.masked_select(keep)))
      << "a slot the call must not store to changed";
  // padding of written slots too
  const int64_t ssm = 32 * 128 * 128;
  if (slot_stride > ssm) {
    const at::Tensor pad = now.view({-1, slot_stride}).narrow(1, ssm, slot_stride - ssm);
    EXPECT_TRUE(at::equal(pad, old.view({-1, slot_stride}).narrow(1, ssm, slot_stride - ssm)))
        << "slot padding changed";
  }
}

struct UpdateCase {
  int64_t batch;
  int64_t per_req;  // 0: plain decode; >= 2: spec decode with this many tokens per request
  bool f32_state;
  bool varlen;
  bool pad;  // one sequence's initial slot is PAD_SLOT_ID (-1)
};

std::string update_name(const testing::TestParamInfo<UpdateCase>& i) {
  const UpdateCase& c = i.param;
  return std::string(c.f32_state ? "f32" : "bf16") + "_b" + std::to_string(c.batch) +
         (c.per_req ? "_spec" + std::to_string(c.per_req) : "_plain") + (c.varlen ? "" : "_novarlen") +
         (c.pad ? "_pad" : "");
}
void PrintTo(const UpdateCase& c, std::ostream* os) { *os << update_name({c, 0}); }

class GdnUpdateGpu : public testing::TestWithParam<UpdateCase> {};

TEST_P(GdnUpdateGpu, MatchesFloat64Reference) {
  CS_REQUIRE_GPU();
  const UpdateCase c = GetParam();
  const int64_t per = std::max<int64_t>(c.per_req, 1);
  const int64_t t = c.batch * per;
  const uint64_t seed = static_cast<uint64_t>(c.batch * 131 + c.per_req * 7 + c.f32_state);
  // q/k/v as views of a conv output with a padded row (row stride conv dim + 64).
  const at::Tensor conv = random_bf16({t, kConvDim + 64}, seed, 1.0, 0.1).narrow(1, 32, kConvDim);
  const at::Tensor q = conv.narrow(1, 0, 2048).view({t, 16, 128});
  const at::Tensor k = conv.narrow(1, 2048, 2048).view({t, 16, 128});
  const at::Tensor v = conv.narrow(1, 4096, 4096).view({t, 32, 128});
  const at::Tensor ba = random_bf16({t, 64}, seed + 1, 1.5, 0.0);
  const at::Tensor b = ba.narrow(1, 0, 32), a = ba.narrow(1, 32, 32);
  at::manual_seed(seed + 2);
  const at::Tensor A_log = (at::rand({32}) * 2.5).to(at::kCUDA);
  const at::Tensor dt_bias = (at::randn({32}) * 0.5).to(c.f32_state ? at::kFloat : at::kBFloat16).to(at::kCUDA);
  const int64_t ssm = 32 * 128 * 128, slot_stride = ssm + 64;
  const int64_t slots = c.batch * per + 9;
  StateCache cache = make_state(slots, slot_stride, c.f32_state ? at::kFloat : at::kBFloat16, seed + 3);
  const at::Tensor before = cache.raw.clone();
  // Indices: plain [B] (a view of a wider table for spec: [B, per] of a [B, per + 1] table).
  const std::vector<int32_t> perm = shuffled_slots(slots - 2, 1, seed + 4);
  at::Tensor idx_cpu = at::tensor(std::vector<int32_t>(perm.begin(), perm.begin() + c.batch * per));
  at::Tensor acc_cpu;
  if (c.per_req) {
    idx_cpu = at::cat({idx_cpu.view({c.batch, per}), at::full({c.batch, 1}, 0, at::kInt)}, 1);
    std::mt19937 g(static_cast<uint32_t>(seed));
    std::vector<int32_t> acc(c.batch);
    for (auto& x : acc) x = 1 + static_cast<int32_t>(g() % per);
    acc_cpu = at::tensor(acc);
    if (c.pad) idx_cpu[1][acc[1] - 1] = -1;
    if (c.batch > 2) idx_cpu[2][per - 1] = -1;  // a skipped store of one token
  } else if (c.pad) {
    idx_cpu[1] = -1;
  }
  const at::Tensor idx_full = idx_cpu.to(at::kCUDA);
  const at::Tensor idx = c.per_req ? idx_full.narrow(1, 0, per) : idx_full;
  std::vector<int32_t> cu(c.batch + 1);
  for (int64_t i = 0; i <= c.batch; ++i) cu[i] = static_cast<int32_t>(i * per);
  const at::Tensor cu_t = c.varlen ? at::tensor(cu).to(at::kCUDA) : at::Tensor();
  const at::Tensor acc_t = c.per_req ? acc_cpu.to(at::kCUDA) : at::Tensor();
  at::Tensor out = at::full({t, 32, 128}, std::numeric_limits<float>::quiet_NaN(), cuda(at::kBFloat16));

  fused_sigmoid_gating_delta_rule_update(gpu_runtime(), kQwen, A_log, a, b, dt_bias, q, k, v,
                                         cache.state, idx, cu_t, acc_t, out, kScale, true);
  const ref::Result want = ref::decode_update(kQwen, A_log, a, b, dt_bias, q, k, v, before.as_strided(
      {slots, 32, 128, 128}, {slot_stride, 128 * 128, 128, 1}), idx, cu_t, acc_t, kScale, true);

  const at::Tensor got = out.cpu().to(at::kDouble);
  const at::Tensor rows_written = want.out.isnan().logical_not();
  EXPECT_TRUE(at::equal(got.isnan().logical_not(), rows_written))
      << "the kernel wrote other rows than the reference (or left some unwritten)";
  const double out_worst = worst(got.masked_select(rows_written), want.out.masked_select(rows_written),
                                 std::ldexp(1.0, -8), 2e-3);
  const at::Tensor w_idx = want.written.nonzero().squeeze(1);
  const at::Tensor got_state = cache.state.cpu().to(at::kDouble).index_select(0, w_idx);
  const at::Tensor want_state = want.state.index_select(0, w_idx);
  const double st_worst = worst(got_state, want_state, c.f32_state ? 1e-5 : std::ldexp(1.0, -8), 1e-4);
  std::printf("update %s: out worst %.3f of bound, state worst %.3f of bound, %lld slots written\n",
              update_name({c, 0}).c_str(), out_worst, st_worst,
              static_cast<long long>(w_idx.size(0)));
  EXPECT_LE(out_worst, 1.0);
  EXPECT_LE(st_worst, 1.0);
  expect_untouched(cache, before, want.written, slot_stride);
}

std::vector<UpdateCase> update_cases() {
  std::vector<UpdateCase> out;
  for (bool f32 : {false, true}) {
    for (int64_t bsz : {1, 3, 17, 64}) out.push_back({bsz, 0, f32, true, false});
    out.push_back({3, 2, f32, true, false});
    out.push_back({17, 3, f32, true, true});
    out.push_back({5, 4, f32, true, true});
    out.push_back({6, 0, f32, false, true});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GdnUpdateGpu, testing::ValuesIn(update_cases()), update_name);

struct MtpCase {
  int reqs;  // 1, 5, 17 select BV 32, 64, 128 on 132 SMs
  int per_req;
  bool f32_state;
  bool sigmoid;
};

std::string mtp_name(const testing::TestParamInfo<MtpCase>& i) {
  const MtpCase& c = i.param;
  return std::string(c.f32_state ? "f32" : "bf16") + "_r" + std::to_string(c.reqs) + "_t" +
         std::to_string(c.per_req) + (c.sigmoid ? "_sigmoid" : "_silu");
}
void PrintTo(const MtpCase& c, std::ostream* os) { *os << mtp_name({c, 0}); }

class GdnMtpGpu : public testing::TestWithParam<MtpCase> {};

TEST_P(GdnMtpGpu, MatchesFloat64Reference) {
  CS_REQUIRE_GPU();
  const MtpCase c = GetParam();
  const int64_t l = int64_t{c.reqs} * c.per_req;
  const uint64_t seed = static_cast<uint64_t>(c.reqs * 97 + c.per_req * 5 + c.f32_state * 3 + c.sigmoid);
  const at::Tensor qkvz = random_bf16({l, kConvDim + 32 * 128}, seed, 1.0, 0.05);
  const at::Tensor mixed_qkv = qkvz.narrow(1, 0, kConvDim);
  const at::Tensor gate = qkvz.narrow(1, kConvDim, 32 * 128).view({l, 32, 128});
  const at::Tensor ba = random_bf16({l, 64}, seed + 1, 1.5, 0.0);
  const at::Tensor b = ba.narrow(1, 0, 32), a = ba.narrow(1, 32, 32);
  at::manual_seed(seed + 2);
  const at::Tensor A_log = (at::rand({32}) * 2.5).to(at::kCUDA);
  const at::Tensor dt_bias = (at::randn({32}) * 0.5).to(at::kBFloat16).to(at::kCUDA);
  const at::Tensor norm_w = (at::rand({128}) + 0.5).to(c.f32_state ? at::kFloat : at::kBFloat16).to(at::kCUDA);
  const int64_t ssm = 32 * 128 * 128, slot_stride = ssm + 128;
  const int64_t slots = l + 6;
  StateCache cache = make_state(slots, slot_stride, c.f32_state ? at::kFloat : at::kBFloat16, seed + 3);
  const at::Tensor before = cache.raw.clone();
  const std::vector<int32_t> perm = shuffled_slots(slots - 1, 1, seed + 4);  // never slot 0
  at::Tensor idx_cpu = at::tensor(std::vector<int32_t>(perm.begin(), perm.begin() + l)).view({c.reqs, c.per_req});
  std::mt19937 g(static_cast<uint32_t>(seed));
  std::vector<int32_t> acc(c.reqs);
  for (auto& x : acc) x = 1 + static_cast<int32_t>(g() % c.per_req);
  if (c.reqs >= 5) {
    idx_cpu[1][acc[1] - 1] = 0;  // source is the null block: zero outputs, no stores
    acc[3] = c.per_req + 1;      // accepted out of range: the same
    idx_cpu[4][c.per_req - 1] = 0;  // one skipped store
  }
  std::vector<int32_t> cu(c.reqs + 1);
  for (int i = 0; i <= c.reqs; ++i) cu[i] = i * c.per_req;
  const at::Tensor idx = idx_cpu.contiguous().to(at::kCUDA), cu_t = at::tensor(cu).to(at::kCUDA),
                   acc_t = at::tensor(acc).to(at::kCUDA);
  const std::string act = c.sigmoid ? "sigmoid" : "silu";
  const ref::Result want = ref::mtp(kQwen, mixed_qkv, a, b, A_log, dt_bias, idx, cu_t, acc_t,
                                    before.as_strided({slots, 32, 128, 128}, {slot_stride, 128 * 128, 128, 1}),
                                    gate, norm_w, kScale, 1e-6, act);
  const int bv = mtp_value_tile(c.reqs, 132, kQwen);
  // Twice from the same state: the second launch checks the split-V arrival counters reset.
  for (int run = 0; run < 2; ++run) {
    cache.raw.copy_(before);
    at::Tensor out = at::full({l, 32, 128}, std::numeric_limits<float>::quiet_NaN(), cuda(at::kBFloat16));
    fused_gdn_decode_post_conv_mtp(gpu_runtime(), kQwen, mixed_qkv, a, b, A_log, dt_bias, idx, cu_t,
                                   acc_t, cache.state, gate, norm_w, out, kScale, 1e-6f, act, 132);
    const at::Tensor got = out.cpu().to(at::kDouble);
    ASSERT_FALSE(got.isnan().any().item<bool>()) << "MTP left part of out unwritten";
    const double out_worst = worst(got, want.out, std::ldexp(1.0, -7), 2e-3);
    const at::Tensor w_idx = want.written.nonzero().squeeze(1);
    const double st_worst =
        worst(cache.state.cpu().to(at::kDouble).index_select(0, w_idx), want.state.index_select(0, w_idx),
              c.f32_state ? 1e-5 : std::ldexp(1.0, -8), 1e-4);
    std::printf("mtp %s (BV %d) run %d: out worst %.3f of bound, state worst %.3f, %lld slots written\n",
                mtp_name({c, 0}).c_str(), bv, run, out_worst, st_worst,
                static_cast<long long>(w_idx.size(0)));
    EXPECT_LE(out_worst, 1.0);
    EXPECT_LE(st_worst, 1.0);
    if (c.reqs >= 5) {
      EXPECT_TRUE((got.narrow(0, 1 * c.per_req, c.per_req) == 0).all().item<bool>());
      EXPECT_TRUE((got.narrow(0, 3 * c.per_req, c.per_req) == 0).all().item<bool>());
    }
    expect_untouched(cache, before, want.written, slot_stride);
  }
}

std::vector<MtpCase> mtp_cases() {
  std::vector<MtpCase> out;
  for (int reqs : {1, 5, 17}) {
    out.push_back({reqs, 2, true, false});
    out.push_back({reqs, 4, false, true});
  }
  out.push_back({17, 3, true, true});
  out.push_back({5, 3, false, false});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Tiles, GdnMtpGpu, testing::ValuesIn(mtp_cases()), mtp_name);

}  // namespace
}  // namespace coldstart::gdn_decode
