// DeepGEMM-style hyper-connection and sparse-indexer kernels: the split and stage formulas, the
// paged schedule against a host reimplementation (CPU), compile keys and validation in
// compile-only mode (CPU, NVRTC), and every kernel against a float64 libtorch reference on random
// non-zero inputs with poisoned outputs (GPU, sm_90+).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "harness/jit/driver.h"
#include "harness/kernels/deepgemm/deepgemm_indexer.h"
#include "harness/kernels/deepgemm/dg_reference.h"
#include "harness/kernels/test_util.h"

namespace coldstart::deepgemm {
namespace {

using kernels::test::compile_only_options;
using kernels::test::cuda;
using kernels::test::gpu_runtime;

at::TensorOptions meta(at::ScalarType t) { return at::TensorOptions().dtype(t).device(at::kMeta); }

jit::JitOptions sm90a_compile_only() {
  jit::JitOptions o = compile_only_options();
  o.arch = "sm_90a";
  return o;
}

// ---------------------------------------------------------------- host schedule

struct SchedEntry {
  int64_t q_atom = 0, split = 0;
  bool operator==(const SchedEntry& o) const { return q_atom == o.q_atom && split == o.split; }
};

int64_t last_len(const std::vector<int32_t>& lens, int64_t b, int64_t next_n) {
  return std::max<int64_t>(lens[b * next_n + next_n - 1], 0);
}

/// get_paged_mqa_logits_metadata on the host, written from the description in
/// dg_paged_mqa_metadata.cu (DeepGEMM scheduler/paged_mqa_logits.cuh): `lens` is [B, next_n]
/// row-major.
std::vector<SchedEntry> host_schedule(const std::vector<int32_t>& lens, int64_t batch, int64_t next_n, int64_t num_sms) {
  std::vector<int64_t> prefix(batch);
  int64_t run = 0;
  for (int64_t b = 0; b < batch; ++b) {
    run += (last_len(lens, b, next_n) + kPagedSplitKv - 1) / kPagedSplitKv;
    prefix[b] = run;
  }
  const int64_t atom = next_n >= 2 ? 2 : 1, atoms = (next_n + atom - 1) / atom;
  const int64_t total = run * atoms, per = total / num_sms, rem = total % num_sms;
  std::vector<SchedEntry> out(num_sms + 1);
  for (int64_t i = 0; i <= num_sms; ++i) {
    const int64_t start = i * per + std::min(i, rem);
    int64_t b = 0;
    while (b < batch && prefix[b] * atoms <= start) ++b;
    if (b == batch) {
      out[i] = {batch * atoms, 0};
      continue;
    }
    const int64_t before = b == 0 ? 0 : prefix[b - 1];
    const int64_t off = start - before * atoms, segs = prefix[b] - before;
    out[i] = {b * atoms + off / segs, off % segs};
  }
  return out;
}

/// Walks each block's share as fp8_paged_mqa_logits does (next_n <= 2: one atom a row) and
/// checks that every (row, split) task is processed exactly once and that the shares differ by
/// at most one task.
void expect_schedule_covers(const std::vector<SchedEntry>& sched, const std::vector<int32_t>& lens, int64_t batch,
                            int64_t next_n, const std::string& what) {
  const int64_t num_sms = static_cast<int64_t>(sched.size()) - 1;
  std::map<std::pair<int64_t, int64_t>, int> seen;
  int64_t fewest = INT64_MAX, most = 0;
  for (int64_t i = 0; i < num_sms; ++i) {
    int64_t b = sched[i].q_atom, split = sched[i].split, tasks = 0;
    const SchedEntry end = sched[i + 1];
    while (b < batch && (b < end.q_atom || (b == end.q_atom && split < end.split))) {
      const int64_t segs = (last_len(lens, b, next_n) + kPagedSplitKv - 1) / kPagedSplitKv;
      if (split < segs) {
        ++seen[{b, split}];
        ++tasks;
      }
      if (++split >= segs) {
        ++b;
        split = 0;
      }
    }
    fewest = std::min(fewest, tasks);
    most = std::max(most, tasks);
  }
  int64_t expected = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t segs = (last_len(lens, b, next_n) + kPagedSplitKv - 1) / kPagedSplitKv;
    for (int64_t s = 0; s < segs; ++s) {
      ++expected;
      const auto it = seen.find({b, s});
      ASSERT_TRUE(it != seen.end()) << what << ": task (" << b << ", " << s << ") is never processed";
      EXPECT_EQ(it->second, 1) << what << ": task (" << b << ", " << s << ") processed " << it->second << " times";
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), expected) << what;
  EXPECT_LE(most - fewest, 1) << what << ": shares of " << fewest << " .. " << most << " tasks";
  EXPECT_EQ(sched.back(), (SchedEntry{batch, 0})) << what << ": terminal entry";
}

/// Random context lengths [B, next_n]: row b's last token sees 0 (every `zero_every`-th row, when
/// > 0) or 1..max_len positions, token i of next_n sees next_n - 1 - i fewer.
std::vector<int32_t> random_lens(int64_t batch, int64_t next_n, int64_t max_len, int zero_every, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> len(1, max_len);
  std::vector<int32_t> out(batch * next_n);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t last = zero_every > 0 && b % zero_every == zero_every - 1 ? 0 : len(gen);
    for (int64_t i = 0; i < next_n; ++i) {
      out[b * next_n + i] = static_cast<int32_t>(std::max<int64_t>(last - (next_n - 1 - i), 0));
    }
  }
  return out;
}

// ---------------------------------------------------------------- formulas (CPU)

TEST(DeepGemmIndexerSpecs, HcNumSplitsIsTheSeedsFormula) {
  // grid = ceil(m / 64); split = num_sms / grid, at most ceil(k / 64) / 4, at least 1.
  EXPECT_EQ(hc_num_splits(1, 16384, 132), 64);     // 132 / 1, capped at 256 / 4
  EXPECT_EQ(hc_num_splits(64, 16384, 132), 64);
  EXPECT_EQ(hc_num_splits(65, 16384, 132), 64);    // grid 2 -> 66, capped
  EXPECT_EQ(hc_num_splits(300, 16384, 132), 26);   // grid 5
  EXPECT_EQ(hc_num_splits(4096, 16384, 132), 2);   // grid 64
  EXPECT_EQ(hc_num_splits(8192, 16384, 132), 1);   // grid 128
  EXPECT_EQ(hc_num_splits(100000, 16384, 132), 1); // 0 -> 1
  EXPECT_EQ(hc_num_splits(1, 1024, 132), 4);       // 16 blocks / 4
  EXPECT_EQ(hc_num_splits(1, 192, 132), 1);        // 3 blocks / 4 = 0 -> 1
  EXPECT_EQ(hc_num_splits(1, 100, 132), 1);        // ceil(100 / 64) = 2
  EXPECT_EQ(hc_num_splits(1, 16384, 148), 64);
  EXPECT_EQ(hc_num_splits(1000, 16384, 148), 9);   // grid 16
  EXPECT_THROW(hc_num_splits(0, 16384, 132), InputError);
}

TEST(DeepGemmIndexerSpecs, HcStagesAndShapeRulesPerArch) {
  for (int n : {8, 16, 24, 32}) {
    EXPECT_EQ(hc_num_stages(90, n), 12) << n;
    EXPECT_EQ(hc_num_stages(100, n), 12) << n;
  }
  // SM100 takes N up to 128: BLOCK_N 64 -> 24576 bytes a stage, 9 fit; 128 -> 40960, 5 fit.
  EXPECT_EQ(hc_num_stages(100, 64), 9);
  EXPECT_EQ(hc_num_stages(100, 128), 5);
  for (int sm : {90, 100}) {
    for (int n = 8; n <= (sm == 90 ? 32 : 128); n += 8) {
      EXPECT_LE(hc_prenorm_smem_bytes(hc_block_n(n), hc_num_stages(sm, n)), kSmemCapacity) << sm << " " << n;
    }
  }
  EXPECT_EQ(hc_block_n(24), 32);
  EXPECT_EQ(hc_block_n(8), 16);
  EXPECT_NO_THROW(check_hc_prenorm_shape(90, 24, 16384, 64));
  EXPECT_THROW(check_hc_prenorm_shape(90, 40, 16384, 1), InputError);  // N <= 32 on SM90
  EXPECT_NO_THROW(check_hc_prenorm_shape(100, 40, 16384, 1));
  EXPECT_THROW(check_hc_prenorm_shape(100, 136, 16384, 1), InputError);
  EXPECT_THROW(check_hc_prenorm_shape(90, 20, 16384, 1), InputError);  // N % 8
  EXPECT_THROW(check_hc_prenorm_shape(90, 24, 16032, 1), InputError);  // K % 64
  EXPECT_THROW(check_hc_prenorm_shape(90, 24, 16384, 0), InputError);
  EXPECT_THROW(check_hc_prenorm_shape(89, 24, 16384, 1), jit::UnsupportedArchError);
  // The other kernels' shared memory fits too, at every head count / dim.
  for (int h : {32, 64}) {
    for (int d : {32, 64, 128}) {
      EXPECT_LE(mqa_logits_smem_bytes(h, d), kSmemCapacity);
      for (int sm : {90, 100}) {
        for (int next_n : {1, 2}) EXPECT_LE(paged_mqa_logits_smem_bytes(sm, next_n, h, d), kSmemCapacity);
      }
    }
  }
}

TEST(DeepGemmIndexerSpecs, HostScheduleCoversEveryTaskOnce) {
  for (int64_t batch : {1, 2, 5, 31, 32, 33, 100, 300}) {
    for (int64_t next_n : {1, 2}) {
      for (int64_t sms : {1, 7, 132, 300}) {
        for (int zero_every : {0, 3}) {
          const uint64_t seed = batch * 1000 + next_n * 100 + sms + zero_every;
          const std::vector<int32_t> lens = random_lens(batch, next_n, 3000, zero_every, seed);
          const std::string what = "B=" + std::to_string(batch) + " next_n=" + std::to_string(next_n) +
                                   " sms=" + std::to_string(sms) + " zero_every=" + std::to_string(zero_every);
          expect_schedule_covers(host_schedule(lens, batch, next_n, sms), lens, batch, next_n, what);
        }
      }
    }
  }
  // Nothing to do: every block gets the terminal entry.
  const std::vector<int32_t> none(4, 0);
  for (const SchedEntry& e : host_schedule(none, 4, 1, 8)) EXPECT_EQ(e, (SchedEntry{4, 0}));
}

// ---------------------------------------------------------------- compile-only keys (CPU, NVRTC)

std::vector<jit::CompileRecord> records_of(jit::JitRuntime& rt, const std::string& kernel) {
  std::vector<jit::CompileRecord> out;
  for (const jit::CompileRecord& r : rt.monitor().records()) {
    if (r.kernel == kernel) out.push_back(r);
  }
  return out;
}

TEST(DeepGemmIndexerCompileOnly, HcKeyHoldsNKAndSplitsButNotM) {
  CS_REQUIRE_NVRTC_TARGET("sm_90a");
  jit::JitRuntime rt(sm90a_compile_only());
  const int64_t n = 24, k = 16384;
  const at::Tensor fn = at::empty({n, k}, meta(at::kFloat));
  auto run = [&](int64_t m) {
    const int splits = hc_num_splits(m, k, 132);
    const at::Tensor x = at::empty({m, k}, meta(at::kBFloat16));
    return tf32_hc_prenorm_gemm(rt, {90, 132}, x, fn, at::empty({splits, m, n}, meta(at::kFloat)),
                                at::empty({splits, m}, meta(at::kFloat)));
  };
  const jit::Selection s300 = run(300);
  run(301);  // also 26 splits
  EXPECT_EQ(rt.cached_kernels(), 1u) << "M = 300 and 301 (26 splits each) share a kernel";
  EXPECT_EQ(s300.selector, "");
  EXPECT_EQ(s300.config.name, "64x32x64 s12 split26");
  run(1);
  run(2);  // 64 splits each; M = 1 is not specialized either
  EXPECT_EQ(rt.cached_kernels(), 2u);
  const auto recs = records_of(rt, "tf32_hc_prenorm_gemm");
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_NE(recs[0].key.find("[SHAPE_N=24,SHAPE_K=16384,BLOCK_M=64,BLOCK_N=32,BLOCK_K=64,NUM_SPLITS=26,NUM_STAGES=12]"),
            std::string::npos)
      << recs[0].key;
  EXPECT_NE(recs[0].key.find("(tmap,tmap,*fp32,*fp32,i32,i64,i64)@sm_90a"), std::string::npos) << recs[0].key;
  EXPECT_NE(recs[1].key.find("NUM_SPLITS=64"), std::string::npos) << recs[1].key;
  EXPECT_EQ(recs[0].selector, "") << "a fixed config";
}

TEST(DeepGemmIndexerCompileOnly, MqaLogitsKeyHoldsHeadsDimsAndSmsButNoLengths) {
  CS_REQUIRE_NVRTC_TARGET("sm_90a");
  jit::JitRuntime rt(sm90a_compile_only());
  const int64_t h = 64, d = 128;
  auto run = [&](int64_t t, int64_t skv, int sms, bool clean) {
    return fp8_mqa_logits(rt, {90, sms}, at::empty({t, h, d}, meta(at::kByte)), at::empty({skv, d}, meta(at::kByte)),
                          at::empty({skv}, meta(at::kFloat)), at::empty({t, h}, meta(at::kFloat)),
                          at::empty({t}, meta(at::kInt)), at::empty({t}, meta(at::kInt)),
                          at::empty({t, skv + 8}, meta(at::kFloat)), clean);
  };
  run(1, 300, 132, false);
  EXPECT_EQ(rt.cached_kernels(), 1u) << "without clean_logits one kernel";
  run(256, 4096, 132, true);
  run(1000, 16, 132, true);
  EXPECT_EQ(rt.cached_kernels(), 2u) << "token and KV counts are not in the keys";
  run(7, 700, 78, true);
  EXPECT_EQ(rt.cached_kernels(), 3u) << "the SM count is in the logits key, not in clean_logits'";
  const auto logits = records_of(rt, "fp8_mqa_logits");
  const auto clean = records_of(rt, "clean_logits");
  ASSERT_EQ(logits.size(), 2u);
  ASSERT_EQ(clean.size(), 1u);
  EXPECT_NE(logits[0].key.find("[NUM_HEADS=64,HEAD_DIM=128,IS_COMPRESSED_LOGITS=0,BLOCK_Q=2,BLOCK_KV=256,"
                               "NUM_Q_STAGES=3,NUM_KV_STAGES=3,NUM_SMS=132]"),
            std::string::npos)
      << logits[0].key;
  EXPECT_NE(logits[0].key.find("(tmap,tmap,*fp32,*fp32,*i32,*i32,*fp32,i32,i32,i64,i64)"), std::string::npos)
      << logits[0].key;
  EXPECT_NE(logits[1].key.find("NUM_SMS=78"), std::string::npos) << logits[1].key;
  EXPECT_NE(clean[0].key.find("[NEXT_N=1,BLOCK_KV=8192,NUM_WARPS=8]"), std::string::npos) << clean[0].key;
  // 32 heads: four tokens a block.
  fp8_mqa_logits(rt, {90, 132}, at::empty({5, 32, 64}, meta(at::kByte)), at::empty({9, 64}, meta(at::kByte)),
                 at::empty({9}, meta(at::kFloat)), at::empty({5, 32}, meta(at::kFloat)), at::empty({5}, meta(at::kInt)),
                 at::empty({5}, meta(at::kInt)), at::empty({5, 9}, meta(at::kFloat)), false);
  EXPECT_NE(records_of(rt, "fp8_mqa_logits").back().key.find("NUM_HEADS=32,HEAD_DIM=64,IS_COMPRESSED_LOGITS=0,BLOCK_Q=4"),
            std::string::npos);
}

TEST(DeepGemmIndexerCompileOnly, MetadataKeyFollowsTheBatchBucketAndPagedKeyDoesNot) {
  CS_REQUIRE_NVRTC_TARGET("sm_90a");
  jit::JitRuntime rt(sm90a_compile_only());
  const int64_t h = 64, d = 128;
  auto metadata = [&](int64_t batch, int64_t next_n, int sms) {
    get_paged_mqa_logits_metadata(rt, {90, sms}, at::empty({batch, next_n}, meta(at::kInt)), 64,
                                  at::empty({sms + 1, 2}, meta(at::kInt)));
  };
  auto paged = [&](int64_t batch, int64_t next_n, int sms) {
    return fp8_paged_mqa_logits(rt, {90, sms}, at::empty({batch, next_n, h, d}, meta(at::kByte)),
                                at::empty({100, 64 * (d + 4)}, meta(at::kByte)),
                                at::empty({batch * next_n, h}, meta(at::kFloat)), at::empty({batch, next_n}, meta(at::kInt)),
                                at::empty({batch, 40}, meta(at::kInt)), at::empty({sms + 1, 2}, meta(at::kInt)),
                                at::empty({batch * next_n, 2560}, meta(at::kFloat)));
  };
  metadata(1, 1, 132);
  metadata(32, 1, 132);
  metadata(17, 2, 132);
  EXPECT_EQ(records_of(rt, "get_paged_mqa_logits_metadata").size(), 1u) << "batches 1..32 share align(B, 32) = 32";
  metadata(33, 1, 132);
  EXPECT_EQ(records_of(rt, "get_paged_mqa_logits_metadata").size(), 2u) << "B = 33 is the 64 bucket";
  metadata(64, 1, 132);
  EXPECT_EQ(records_of(rt, "get_paged_mqa_logits_metadata").size(), 2u);
  metadata(5, 1, 78);
  const auto meta_recs = records_of(rt, "get_paged_mqa_logits_metadata");
  ASSERT_EQ(meta_recs.size(), 3u) << "the SM count is in the metadata key";
  EXPECT_NE(meta_recs[0].key.find("[ALIGNED_BATCH=32,SPLIT_KV=256,NUM_SMS=132,IS_VARLEN=0](i32,i32,*i32,*i32)"),
            std::string::npos)
      << meta_recs[0].key;
  EXPECT_NE(meta_recs[1].key.find("ALIGNED_BATCH=64"), std::string::npos) << meta_recs[1].key;
  EXPECT_NE(meta_recs[2].key.find("ALIGNED_BATCH=32,SPLIT_KV=256,NUM_SMS=78"), std::string::npos) << meta_recs[2].key;

  const jit::Selection sel = paged(1, 1, 132);
  paged(33, 1, 132);
  paged(200, 1, 78);
  auto paged_recs = records_of(rt, "fp8_paged_mqa_logits");
  ASSERT_EQ(paged_recs.size(), 1u) << "neither the batch size nor the SM count is in the paged key";
  EXPECT_NE(paged_recs[0].key.find("[NEXT_N=1,NUM_HEADS=64,HEAD_DIM=128,BLOCK_KV=64,IS_CONTEXT_LENS_2D=1,IS_VARLEN=0,"
                                   "NUM_Q_STAGES=3,NUM_KV_STAGES=3,SPLIT_KV=256]"),
            std::string::npos)
      << paged_recs[0].key;
  EXPECT_EQ(paged_recs[0].key.find("NUM_SMS"), std::string::npos) << paged_recs[0].key;
  EXPECT_EQ(sel.config.name, "next_n1 kv64 split256 s3+3");
  paged(4, 2, 132);
  paged_recs = records_of(rt, "fp8_paged_mqa_logits");
  ASSERT_EQ(paged_recs.size(), 2u) << "next_n is";
  EXPECT_NE(paged_recs[1].key.find("NEXT_N=2"), std::string::npos);
  // SM100 keeps four KV stages (DeepGEMM's kv stages on arch 10).
  EXPECT_EQ(paged_mqa_logits_constexprs(100, 1, 64, 128, 64)[7].value, 4);
}

TEST(DeepGemmIndexerCompileOnly, ValidationNamesTheArgument) {
  CS_REQUIRE_NVRTC_TARGET("sm_90a");
  jit::JitRuntime rt(compile_only_options());
  const GemmTarget t{90, 132};
  // tf32_hc_prenorm_gemm
  {
    const at::Tensor x = at::empty({64, 1024}, meta(at::kBFloat16)), fn = at::empty({24, 1024}, meta(at::kFloat));
    const at::Tensor out = at::empty({2, 64, 24}, meta(at::kFloat)), sq = at::empty({2, 64}, meta(at::kFloat));
    EXPECT_MENTIONS(tf32_hc_prenorm_gemm(rt, t, x.to(at::kFloat), fn, out, sq), "argument 'x'");
    EXPECT_MENTIONS(tf32_hc_prenorm_gemm(rt, t, x.narrow(1, 0, 1000), fn.narrow(1, 0, 1000).contiguous(), out, sq),
                    "multiple of 64");
    const at::Tensor fn40 = at::empty({40, 1024}, meta(at::kFloat)), out40 = at::empty({2, 64, 40}, meta(at::kFloat));
    EXPECT_MENTIONS(tf32_hc_prenorm_gemm(rt, t, x, fn40, out40, sq), "argument 'fn'");  // N <= 32 on sm_90
    EXPECT_MENTIONS(tf32_hc_prenorm_gemm(rt, t, x, fn, out, at::empty({3, 64}, meta(at::kFloat))), "argument 'sqrsum'");
    EXPECT_MENTIONS(tf32_hc_prenorm_gemm(rt, t, x, fn, out.narrow(2, 0, 16), sq), "argument 'out_mul'");
    // A row stride of 1004 bf16 (2008 bytes) is no TMA stride.
    EXPECT_MENTIONS(tf32_hc_prenorm_gemm(rt, t, at::empty({64, 1004}, meta(at::kBFloat16)).narrow(1, 0, 960),
                                         fn.narrow(1, 0, 960).contiguous(), out, sq),
                    "argument 'x'");
    EXPECT_THROW(tf32_hc_prenorm_gemm(rt, {89, 132}, x, fn, out, sq), jit::UnsupportedArchError);
  }
  // fp8_mqa_logits
  {
    const at::Tensor q = at::empty({8, 64, 128}, meta(at::kByte)), kv = at::empty({100, 128}, meta(at::kByte));
    const at::Tensor sf = at::empty({100}, meta(at::kFloat)), w = at::empty({8, 64}, meta(at::kFloat));
    const at::Tensor ks = at::empty({8}, meta(at::kInt)), lg = at::empty({8, 100}, meta(at::kFloat));
    const at::Tensor q48 = at::empty({8, 48, 128}, meta(at::kByte)), w48 = at::empty({8, 48}, meta(at::kFloat));
    EXPECT_MENTIONS(fp8_mqa_logits(rt, t, q48, kv, sf, w48, ks, ks, lg), "argument 'q'");
    EXPECT_MENTIONS(fp8_mqa_logits(rt, t, q, at::empty({100, 64}, meta(at::kByte)), sf, w, ks, ks, lg), "argument 'kv'");
    EXPECT_MENTIONS(fp8_mqa_logits(rt, t, q, kv, at::empty({99}, meta(at::kFloat)), w, ks, ks, lg), "argument 'kv_sf'");
    EXPECT_MENTIONS(fp8_mqa_logits(rt, t, q, kv, sf, w, ks.to(at::kLong), ks, lg), "argument 'ks'");
    EXPECT_MENTIONS(fp8_mqa_logits(rt, t, q, kv, sf, w, ks, at::empty({7}, meta(at::kInt)), lg), "argument 'ke'");
    EXPECT_MENTIONS(fp8_mqa_logits(rt, t, q, kv, sf, w, ks, ks, at::empty({8, 99}, meta(at::kFloat))), "argument 'logits'");
    EXPECT_MENTIONS(fp8_mqa_logits(rt, t, q, kv, sf, at::empty({8, 32}, meta(at::kFloat)), ks, ks, lg), "argument 'weights'");
  }
  // metadata and paged logits
  {
    const at::Tensor lens = at::empty({4, 1}, meta(at::kInt)), sched = at::empty({133, 2}, meta(at::kInt));
    EXPECT_MENTIONS(get_paged_mqa_logits_metadata(rt, t, lens, 32, sched), "argument 'block_kv'");
    EXPECT_MENTIONS(get_paged_mqa_logits_metadata(rt, t, lens, 64, at::empty({132, 2}, meta(at::kInt))),
                    "argument 'schedule_meta'");
    EXPECT_MENTIONS(get_paged_mqa_logits_metadata(rt, t, lens.to(at::kLong), 64, sched), "argument 'context_lens'");
    EXPECT_MENTIONS(get_paged_mqa_logits_metadata(rt, t, at::empty({0, 1}, meta(at::kInt)), 64, sched),
                    "argument 'context_lens'");
    const at::Tensor q = at::empty({4, 1, 64, 128}, meta(at::kByte)), cache = at::empty({10, 64 * 132}, meta(at::kByte));
    const at::Tensor w = at::empty({4, 64}, meta(at::kFloat)), table = at::empty({4, 3}, meta(at::kInt));
    const at::Tensor lg = at::empty({4, 192}, meta(at::kFloat));
    EXPECT_NO_THROW(fp8_paged_mqa_logits(rt, t, q, cache, w, lens, table, sched, lg));
    EXPECT_MENTIONS(fp8_paged_mqa_logits(rt, t, at::empty({4, 3, 64, 128}, meta(at::kByte)), cache, w, lens, table, sched, lg),
                    "argument 'q'");
    EXPECT_MENTIONS(fp8_paged_mqa_logits(rt, t, q, at::empty({10, 32 * 132}, meta(at::kByte)), w, lens, table, sched, lg),
                    "argument 'kv_cache'");
    EXPECT_MENTIONS(fp8_paged_mqa_logits(rt, t, q, cache, w, at::empty({4, 2}, meta(at::kInt)), table, sched, lg),
                    "argument 'context_lens'");
    EXPECT_MENTIONS(fp8_paged_mqa_logits(rt, t, q, cache, w, lens, table.to(at::kFloat), sched, lg), "argument 'block_table'");
    EXPECT_MENTIONS(fp8_paged_mqa_logits(rt, t, q, cache, w, lens, table, at::empty({79, 2}, meta(at::kInt)), lg),
                    "argument 'schedule_meta'");
    EXPECT_MENTIONS(fp8_paged_mqa_logits(rt, t, q, cache, w, lens, table, sched, at::empty({3, 192}, meta(at::kFloat))),
                    "argument 'logits'");
    EXPECT_MENTIONS(fp8_paged_mqa_logits(rt, t, q, cache, at::empty({4, 32}, meta(at::kFloat)), lens, table, sched, lg),
                    "argument 'weights'");
    // A block row stride that is not a multiple of 16 bytes cannot be a TMA stride.
    const at::Tensor odd = at::empty({10, 64 * 132 + 8}, meta(at::kByte)).narrow(1, 0, 64 * 132);
    EXPECT_MENTIONS(fp8_paged_mqa_logits(rt, t, q, odd, w, lens, table, sched, lg), "argument 'kv_cache'");
  }
}

// ---------------------------------------------------------------- GPU

/// The GPU's compute capability family (90 / 100) and SM count.
GemmTarget gpu_target() {
  int sms = 0;
  CUdevice dev = 0;
  CS_CU_CHECK(jit::driver().cuDeviceGet(&dev, 0));
  CS_CU_CHECK(jit::driver().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  return {jit::arch_sm(gpu_runtime().arch()) >= 100 ? 100 : 90, sms};
}

#define CS_REQUIRE_SM90()                                                                            \
  CS_REQUIRE_GPU();                                                                                  \
  if (jit::arch_sm(gpu_runtime().arch()) < 90) GTEST_SKIP() << "needs sm_90+, this GPU is " << gpu_runtime().arch()

/// Fails with the worst element unless, wherever `mask` is set, `got` is not NaN and
/// |got - want| <= tol. All tensors the same shape (any device; compared in float64 on the CPU).
void expect_within(const at::Tensor& got, const at::Tensor& want, const at::Tensor& tol, const at::Tensor& mask,
                   const std::string& what) {
  const at::Tensor g = got.to(at::kCPU).to(at::kDouble), w = want.to(at::kCPU).to(at::kDouble);
  const at::Tensor m = mask.to(at::kCPU).to(at::kBool), tl = tol.to(at::kCPU).to(at::kDouble);
  const at::Tensor nan_hit = at::isnan(g).logical_and(m);
  if (nan_hit.any().item<bool>()) {
    const int64_t idx = nan_hit.reshape(-1).to(at::kInt).argmax().item<int64_t>();
    FAIL() << what << ": NaN at flat index " << idx << " (an unwritten poisoned element?)";
  }
  const at::Tensor excess = at::where(m, (g - w).abs() - tl, at::full_like(g, -1.0));
  const double worst = excess.max().item<double>();
  if (worst > 0) {
    const int64_t idx = excess.argmax().item<int64_t>();
    FAIL() << what << ": flat index " << idx << " got " << g.reshape(-1)[idx].item<double>() << " want "
           << w.reshape(-1)[idx].item<double>() << " tolerance " << tl.reshape(-1)[idx].item<double>();
  }
}

// ---------------------------------------------------------------- tf32_hc_prenorm_gemm

struct HcCase {
  int64_t m, n, k;
  int splits;         ///< 0: hc_num_splits on this GPU
  bool strided_x;     ///< x a view with row stride K + 64
};

std::string hc_name(const testing::TestParamInfo<HcCase>& i) {
  return "M" + std::to_string(i.param.m) + "_N" + std::to_string(i.param.n) + "_K" + std::to_string(i.param.k) +
         "_S" + std::to_string(i.param.splits) + (i.param.strided_x ? "_strided" : "");
}
void PrintTo(const HcCase& c, std::ostream* os) { *os << hc_name({c, 0}); }

class DeepGemmHcGpu : public testing::TestWithParam<HcCase> {};

TEST_P(DeepGemmHcGpu, MatchesFloat64Reference) {
  CS_REQUIRE_SM90();
  const HcCase& c = GetParam();
  const GemmTarget target = gpu_target();
  if (c.n > (target.sm == 90 ? 32 : 128)) GTEST_SKIP() << "N = " << c.n << " needs sm_100";
  const int splits = c.splits > 0 ? c.splits : hc_num_splits(c.m, c.k, target.num_sms);
  at::Tensor x = kernels::test::random_bf16({c.m, c.k + (c.strided_x ? 64 : 0)}, 100 + c.m + c.k, 1.0, 0.0);
  if (c.strided_x) x = x.narrow(1, 0, c.k);
  at::manual_seed(7 + c.n);
  at::Tensor fn = at::randn({c.n, c.k}, at::kFloat) * 0.1;
  fn = at::where(fn == 0, at::full_like(fn, 1e-3), fn).to(at::kCUDA);
  at::Tensor out = at::full({splits, c.m, c.n}, std::nan(""), cuda(at::kFloat));
  at::Tensor sq = at::full({splits, c.m}, std::nan(""), cuda(at::kFloat));
  const jit::Selection sel = tf32_hc_prenorm_gemm(gpu_runtime(), target, x, fn, out, sq);
  const reference::HcPrenorm ref = reference::hc_prenorm_gemm(x, fn, splits);
  const std::string what = "M=" + std::to_string(c.m) + " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k) +
                           " S=" + std::to_string(splits) + " (" + sel.config.name + ")";
  // fp32-grade products (fn split into two TF32 halves) and fp32 sums: within 3e-5 of the
  // products' l2 norm (TF32-rounded fn alone would be ~1e-4 off); splits without K blocks are 0.
  expect_within(out, ref.out_mul, ref.out_mul_l2 * 3e-5, at::ones_like(ref.out_mul, at::kBool), what + " out_mul");
  expect_within(sq, ref.sqrsum, ref.sqrsum * 3e-5, at::ones_like(ref.sqrsum, at::kBool), what + " sqrsum");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DeepGemmHcGpu,
    testing::Values(HcCase{1, 24, 16384, 0, false},     // V4-Flash decode: 64 splits of 4 blocks
                    HcCase{300, 24, 16384, 0, false},   // 26 splits, some one block longer
                    HcCase{2049, 24, 4096, 1, true},    // one split, partial last row block, strided x
                    HcCase{130, 32, 1024, 3, false},    // N = BLOCK_N
                    HcCase{77, 8, 640, 4, false},       // one n8 tile, 10 blocks over 4 splits
                    HcCase{64, 16, 128, 3, false},      // 2 blocks over 3 splits: one empty split
                    HcCase{200, 128, 2048, 5, false}),  // sm_100 only (N <= 128)
    hc_name);

// ---------------------------------------------------------------- fp8_mqa_logits

enum class Ranges { kPacked, kRandom };

struct MqaCase {
  int64_t tokens, kv_len, heads, dim;
  Ranges ranges;
  bool clean;
};

std::string mqa_name(const testing::TestParamInfo<MqaCase>& i) {
  return "T" + std::to_string(i.param.tokens) + "_Skv" + std::to_string(i.param.kv_len) + "_H" +
         std::to_string(i.param.heads) + "_D" + std::to_string(i.param.dim) +
         (i.param.ranges == Ranges::kPacked ? "_packed" : "_random") + (i.param.clean ? "_clean" : "");
}
void PrintTo(const MqaCase& c, std::ostream* os) { *os << mqa_name({c, 0}); }

/// ks / ke [T] (CPU int32). kPacked: three sequences packed along T, each with its own KV region
/// (a cached prefix, then its tokens), causal within it; kRandom: random [ks, ke), every 8th empty.
std::pair<at::Tensor, at::Tensor> make_ranges(int64_t tokens, int64_t kv_len, Ranges r, uint64_t seed) {
  at::Tensor ks = at::empty({tokens}, at::kInt), ke = at::empty({tokens}, at::kInt);
  std::mt19937_64 gen(seed);
  if (r == Ranges::kRandom) {
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t a = std::uniform_int_distribution<int64_t>(0, kv_len)(gen);
      const int64_t b = t % 8 == 5 ? a : std::uniform_int_distribution<int64_t>(a, kv_len)(gen);
      ks[t] = static_cast<int32_t>(a);
      ke[t] = static_cast<int32_t>(b);
    }
    return {ks, ke};
  }
  const int64_t parts = std::min<int64_t>(3, tokens);
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t t0 = tokens * p / parts, t1 = tokens * (p + 1) / parts;
    const int64_t k0 = kv_len * p / parts, k1 = kv_len * (p + 1) / parts;
    const int64_t n = t1 - t0, region = k1 - k0, cached = std::max<int64_t>(region - n, 0);
    for (int64_t t = t0; t < t1; ++t) {
      ks[t] = static_cast<int32_t>(k0);
      ke[t] = static_cast<int32_t>(k0 + std::min(region, cached + (t - t0) + 1));
    }
  }
  return {ks, ke};
}

class DeepGemmMqaGpu : public testing::TestWithParam<MqaCase> {};

TEST_P(DeepGemmMqaGpu, MatchesFloat64Reference) {
  CS_REQUIRE_SM90();
  const MqaCase& c = GetParam();
  const uint64_t seed = 31 * c.tokens + c.kv_len + c.heads + c.dim;
  const at::Tensor q = reference::random_e4m3({c.tokens, c.heads, c.dim}, seed).to(at::kCUDA);
  const at::Tensor kv = reference::random_e4m3({c.kv_len, c.dim}, seed + 1).to(at::kCUDA);
  at::manual_seed(seed);
  const at::Tensor kv_sf = (at::rand({c.kv_len}) + 0.5).to(at::kCUDA);
  // Weights with a row stride past H (a view), signed as the indexer's are.
  const at::Tensor weights = at::randn({c.tokens, c.heads + 8}).to(at::kCUDA).narrow(1, 0, c.heads);
  const auto [ks, ke] = make_ranges(c.tokens, c.kv_len, c.ranges, seed);
  // Logits with 40 columns past Skv and a row stride past that: those columns must stay NaN.
  const int64_t width = c.kv_len + 40;
  at::Tensor logits = at::full({c.tokens, width + 24}, std::nan(""), cuda(at::kFloat)).narrow(1, 0, width);
  const jit::Selection sel = fp8_mqa_logits(gpu_runtime(), gpu_target(), q, kv, kv_sf, weights, ks.to(at::kCUDA),
                                            ke.to(at::kCUDA), logits, c.clean);
  const reference::IndexerLogits ref = reference::mqa_logits(q, kv, kv_sf, weights);
  const at::Tensor got = logits.cpu().to(at::kDouble);
  const at::Tensor cols = at::arange(c.kv_len, at::kLong).unsqueeze(0);
  const at::Tensor inside = (cols >= ks.to(at::kLong).unsqueeze(1)).logical_and(cols < ke.to(at::kLong).unsqueeze(1));
  const std::string what = "T=" + std::to_string(c.tokens) + " Skv=" + std::to_string(c.kv_len) + " H=" +
                           std::to_string(c.heads) + " D=" + std::to_string(c.dim) + " (" + sel.config.name + ")";
  // FP8 products are exact in fp32; the tensor core's sums and the fp32 head sum stay within
  // 5e-4 of the sum of |terms|.
  const at::Tensor mag = ref.magnitude.cpu();
  expect_within(got.narrow(1, 0, c.kv_len), ref.logits.cpu(), mag * 5e-4 + 1e-30, inside, what);
  if (c.clean) {
    const at::Tensor is_neg_inf = at::isinf(got.narrow(1, 0, c.kv_len)).logical_and(got.narrow(1, 0, c.kv_len) < 0);
    EXPECT_TRUE(is_neg_inf.logical_or(inside).all().item<bool>()) << what << ": a column outside [ks, ke) is not -inf";
    EXPECT_FALSE(is_neg_inf.logical_and(inside).any().item<bool>()) << what;
  }
  EXPECT_TRUE(at::isnan(got.narrow(1, c.kv_len, 40)).all().item<bool>()) << what << ": a column >= Skv was written";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DeepGemmMqaGpu,
    testing::Values(MqaCase{1, 300, 64, 128, Ranges::kPacked, true},     // one token: one block does it all
                    MqaCase{300, 2048, 64, 128, Ranges::kPacked, true},  // V4-Flash indexer heads
                    MqaCase{300, 2048, 64, 128, Ranges::kRandom, false},
                    MqaCase{257, 1000, 32, 64, Ranges::kRandom, true},   // 32 heads: 4 tokens a block
                    MqaCase{257, 1000, 32, 64, Ranges::kPacked, false},
                    MqaCase{100, 513, 32, 32, Ranges::kRandom, true},
                    MqaCase{130, 700, 64, 64, Ranges::kPacked, true},
                    MqaCase{64, 256, 32, 128, Ranges::kRandom, true},
                    MqaCase{2000, 3000, 64, 128, Ranges::kPacked, false}),  // many blocks per SM
    mqa_name);

// ---------------------------------------------------------------- metadata

TEST(DeepGemmPagedMetadataGpu, MatchesTheHostSchedule) {
  CS_REQUIRE_SM90();
  jit::JitRuntime& rt = gpu_runtime();
  const GemmTarget gpu = gpu_target();
  for (int64_t batch : {1, 5, 32, 33, 200}) {
    for (int64_t next_n : {1, 2, 3}) {
      for (int sms : {gpu.num_sms, 8, 1}) {
        const std::vector<int32_t> lens = random_lens(batch, next_n, 5000, batch > 1 ? 4 : 0, batch * 7 + next_n + sms);
        const at::Tensor lens_t = at::tensor(lens, at::kInt).view({batch, next_n}).to(at::kCUDA);
        const at::Tensor sched = at::full({sms + 1, 2}, -7, cuda(at::kInt));
        get_paged_mqa_logits_metadata(rt, {gpu.sm, sms}, lens_t, 64, sched);
        const at::Tensor got = sched.cpu();
        const std::vector<SchedEntry> want = host_schedule(lens, batch, next_n, sms);
        const std::string what =
            "B=" + std::to_string(batch) + " next_n=" + std::to_string(next_n) + " sms=" + std::to_string(sms);
        for (int i = 0; i <= sms; ++i) {
          const SchedEntry e{got[i][0].item<int>(), got[i][1].item<int>()};
          ASSERT_EQ(e, want[i]) << what << ": entry " << i << " is (" << e.q_atom << ", " << e.split << "), want ("
                                << want[i].q_atom << ", " << want[i].split << ")";
        }
        std::vector<SchedEntry> as_read(sms + 1);
        for (int i = 0; i <= sms; ++i) as_read[i] = {got[i][0].item<int>(), got[i][1].item<int>()};
        if (next_n <= 2) expect_schedule_covers(as_read, lens, batch, next_n, what);
      }
    }
  }
}

// ---------------------------------------------------------------- fp8_paged_mqa_logits

struct PagedCase {
  int64_t batch, next_n, heads, dim, max_len;
  int num_sms;      ///< 0: the GPU's
  bool zero_rows;   ///< every 4th row without context
  bool padded;      ///< cache rows 16 bytes apart from the block size
};

std::string paged_name(const testing::TestParamInfo<PagedCase>& i) {
  return "B" + std::to_string(i.param.batch) + "_n" + std::to_string(i.param.next_n) + "_H" +
         std::to_string(i.param.heads) + "_D" + std::to_string(i.param.dim) + "_L" + std::to_string(i.param.max_len) +
         (i.param.num_sms ? "_sms" + std::to_string(i.param.num_sms) : "") + (i.param.zero_rows ? "_zero" : "") +
         (i.param.padded ? "_padded" : "");
}
void PrintTo(const PagedCase& c, std::ostream* os) { *os << paged_name({c, 0}); }

class DeepGemmPagedGpu : public testing::TestWithParam<PagedCase> {};

TEST_P(DeepGemmPagedGpu, MatchesFloat64Reference) {
  CS_REQUIRE_SM90();
  const PagedCase& c = GetParam();
  jit::JitRuntime& rt = gpu_runtime();
  GemmTarget target = gpu_target();
  if (c.num_sms > 0) target.num_sms = c.num_sms;
  const uint64_t seed = 17 * c.batch + c.next_n * 5 + c.heads + c.dim + c.max_len;
  const int64_t block_kv = kPagedBlockKv, row_bytes = block_kv * (c.dim + 4);
  const std::vector<int32_t> lens = random_lens(c.batch, c.next_n, c.max_len, c.zero_rows ? 4 : 0, seed);
  std::vector<int64_t> last(c.batch);
  int64_t longest = 0;
  for (int64_t b = 0; b < c.batch; ++b) longest = std::max(longest, last[b] = last_len(lens, b, c.next_n));
  const kernels::test::PagedCache pc =
      kernels::test::shuffled_blocks(block_kv, last, (c.max_len + block_kv - 1) / block_kv + 2, seed);
  // Each cache block: block_kv * D e4m3 values, then block_kv float scales.
  const at::Tensor values = reference::random_e4m3({pc.num_blocks, block_kv * c.dim}, seed + 1);
  at::manual_seed(seed);
  const at::Tensor scales = (at::rand({pc.num_blocks, block_kv}) + 0.5).contiguous().view(at::kByte);
  at::Tensor cache = at::cat({values, scales}, 1);
  if (c.padded) {
    at::Tensor wide = at::zeros({pc.num_blocks, row_bytes + 16}, at::kByte);
    wide.narrow(1, 0, row_bytes).copy_(cache);
    cache = wide.to(at::kCUDA).narrow(1, 0, row_bytes);
  } else {
    cache = cache.to(at::kCUDA);
  }
  const at::Tensor q = reference::random_e4m3({c.batch, c.next_n, c.heads, c.dim}, seed + 2).to(at::kCUDA);
  const at::Tensor weights = at::randn({c.batch * c.next_n, c.heads}).to(at::kCUDA);
  const at::Tensor lens_t = at::tensor(lens, at::kInt).view({c.batch, c.next_n}).to(at::kCUDA);
  const at::Tensor table = pc.block_table.to(at::kCUDA);
  const int64_t width = longest + 13;
  at::Tensor logits = at::full({c.batch * c.next_n, width}, std::nan(""), cuda(at::kFloat));
  at::Tensor sched = at::full({target.num_sms + 1, 2}, -7, cuda(at::kInt));
  get_paged_mqa_logits_metadata(rt, target, lens_t, static_cast<int>(block_kv), sched);
  const jit::Selection sel = fp8_paged_mqa_logits(rt, target, q, cache, weights, lens_t, table, sched, logits);
  const reference::IndexerLogits ref = reference::paged_mqa_logits(q, cache, weights, lens_t, table, static_cast<int>(block_kv));
  const at::Tensor got = logits.cpu().to(at::kDouble);
  // Row b * next_n + i: positions below context_lens[b, i] are compared; positions at or past
  // the row's last length were never written.
  at::Tensor row_len = at::empty({c.batch * c.next_n, 1}, at::kLong), row_last = at::empty({c.batch * c.next_n, 1}, at::kLong);
  for (int64_t r = 0; r < c.batch * c.next_n; ++r) {
    row_len[r][0] = static_cast<int64_t>(std::max<int32_t>(lens[r], 0));
    row_last[r][0] = last[r / c.next_n];
  }
  const at::Tensor cols = at::arange(longest, at::kLong).unsqueeze(0);
  const std::string what = "B=" + std::to_string(c.batch) + " next_n=" + std::to_string(c.next_n) + " H=" +
                           std::to_string(c.heads) + " D=" + std::to_string(c.dim) + " sms=" + std::to_string(target.num_sms) +
                           " (" + sel.config.name + ")";
  expect_within(got.narrow(1, 0, longest), ref.logits.cpu(), ref.magnitude.cpu().nan_to_num(0) * 5e-4 + 1e-30,
                cols < row_len, what);
  const at::Tensor all_cols = at::arange(width, at::kLong).unsqueeze(0);
  const at::Tensor untouched = at::isnan(got).logical_or(all_cols < row_last);
  EXPECT_TRUE(untouched.all().item<bool>()) << what << ": a column at or past the row's context was written";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DeepGemmPagedGpu,
    testing::Values(PagedCase{1, 1, 64, 128, 300, 0, false, false},     // V4-Flash, one sequence
                    PagedCase{3, 2, 64, 128, 2000, 0, false, false},    // MTP: two tokens a row
                    PagedCase{37, 1, 32, 64, 3000, 0, true, false},     // rows without context
                    PagedCase{8, 2, 32, 32, 1000, 0, false, true},      // padded cache rows
                    PagedCase{20, 2, 64, 128, 5000, 8, true, false},    // 8 blocks: long walks
                    PagedCase{64, 1, 64, 128, 4000, 0, false, true},
                    PagedCase{5, 1, 64, 64, 64, 0, false, false}),      // at most one cache block
    paged_name);

}  // namespace
}  // namespace coldstart::deepgemm
