// Mamba2 selective state update: CPU tests of vLLM's config choice (tuned table by batch * nheads,
// ties, heuristic, bad files), the float64 reference, argument validation and the compile keys
// (compile-only runtime, meta tensors: None-ness, TIE_HDIM, state dtype, specialization); GPU
// tests against the float64 reference with MambaMixer2's expanded views, page-strided float32 and
// bf16 states, null-block rows, poisoned outputs and untouched-byte checks (GPU tests skip without
// a CUDA GPU and a CUDA libtorch).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/kernels/mamba_ssu/mamba_ssu.h"
#include "harness/kernels/mamba_ssu/mamba_ssu_reference.h"
#include "harness/kernels/model_shapes.h"
#include "harness/kernels/test_util.h"

namespace coldstart::mamba_ssu {
namespace {

using namespace kernels::test;  // test_util.h
namespace fs = std::filesystem;

std::string fixture_dir() {
  const char* root = std::getenv("COLDSTART_SOURCE_DIR");
  return std::string(root ? root : ".") + "/fixtures/tuned-configs/selective_state_update";
}

// A fresh directory holding `name` with `text` (each test its own: tables are cached by path).
std::string write_table(const std::string& tag, const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() /
                       ("mamba_ssu_test_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / name) << text;
  return dir.string();
}

int64_t bm_of(const jit::Selection& s) {
  for (const jit::Constexpr& c : s.config.constexprs) {
    if (c.name == "BLOCK_SIZE_M") return c.value;
  }
  return -1;
}

// ---------------------------------------------------------------------------------------------
// CPU: names, heuristic, table lookup

TEST(MambaSsuConfig, DeviceAndFileNames) {
  EXPECT_EQ(ssm_device_name("NVIDIA H200"), "NVIDIA_H200");
  EXPECT_EQ(ssm_device_name("NVIDIA H100 80GB HBM3"), "NVIDIA_H100_80GB_HBM3");
  EXPECT_EQ(ssm_device_name("NVIDIA H200 NVL"), "NVIDIA_H200_NVL");  // not fused_moe's mapping
  EXPECT_EQ(ssm_device_name("NVIDIA A100-SXM4-80GB"), "NVIDIA_A100_SXM4_80GB");
  EXPECT_EQ(ssm_device_name("Intel(R) Arc(TM) Pro B60 Graphics"),
            "Intel(R)_Arc(TM)_Pro_B60_Graphics");
  EXPECT_EQ(ssm_device_name("a /- b:c"), "a_bc");
  EXPECT_EQ(config_file_name(64, 128, "NVIDIA H200", "float32"),
            "headdim=64,dstate=128,device_name=NVIDIA_H200,cache_dtype=float32.json");
  EXPECT_EQ(config_file_name(64, 128, "NVIDIA H200", "bfloat16"),
            "headdim=64,dstate=128,device_name=NVIDIA_H200,cache_dtype=float16.json");
  EXPECT_THROW(canonical_cache_dtype("float8"), InputError);
  EXPECT_TRUE(is_blackwell_arch("sm_100"));
  EXPECT_TRUE(is_blackwell_arch("sm_103a"));
  EXPECT_FALSE(is_blackwell_arch("sm_90"));
  EXPECT_FALSE(is_blackwell_arch("sm_120"));
}

TEST(MambaSsuConfig, DefaultHeuristic) {
  auto cfg = [](int64_t n, bool bw) {
    const jit::KernelConfig c = default_config(n, bw);
    return std::make_pair(c.constexprs.at(0).value, c.num_warps);
  };
  EXPECT_EQ(cfg(16, false), std::make_pair(int64_t{32}, 4));
  EXPECT_EQ(cfg(32, true), std::make_pair(int64_t{16}, 4));
  EXPECT_EQ(cfg(64, false), std::make_pair(int64_t{8}, 4));
  EXPECT_EQ(cfg(128, false), std::make_pair(int64_t{4}, 4));
  EXPECT_EQ(cfg(128, true), std::make_pair(int64_t{32}, 8));
  EXPECT_EQ(cfg(256, false), std::make_pair(int64_t{4}, 8));
  EXPECT_EQ(default_config(128, false).name, "BLOCK_SIZE_M=4,warps=4,stages=1");
}

TEST(MambaSsuConfig, H200TableNearestEffectiveBatch) {
  const ConfigSource src{fixture_dir(), "NVIDIA H200", ""};
  auto pick = [&](int64_t batch, int64_t heads) {
    const jit::Selection s = select_config(src, 64, 128, "float32", batch, heads);
    EXPECT_EQ(s.selector, "table");
    return std::make_pair(bm_of(s), s.config.num_warps);
  };
  // Nemotron-3 Nano TP1 (64 heads) at decode batch 1, 8, 64, 256: effective 64, 512, 4096, 16384.
  EXPECT_EQ(pick(1, 64), std::make_pair(int64_t{4}, 1));
  EXPECT_EQ(pick(64, 64), std::make_pair(int64_t{4}, 1));
  EXPECT_EQ(pick(256, 64), std::make_pair(int64_t{8}, 1));
  EXPECT_EQ(pick(2048, 64), std::make_pair(int64_t{32}, 4));  // 131072
  EXPECT_EQ(pick(1, 1), std::make_pair(int64_t{8}, 4));       // below the smallest key (8)
  EXPECT_EQ(pick(8192, 64), std::make_pair(int64_t{16}, 1));  // above the largest (262144)
  // Ties take the earlier key of the file, as Python's min(): 12 is 4 from "8" and "16".
  EXPECT_EQ(pick(3, 4), std::make_pair(int64_t{8}, 4));
  EXPECT_EQ(pick(160, 64), std::make_pair(int64_t{4}, 1));  // 10240: "8192" before "12288"
  EXPECT_EQ(pick(161, 64), std::make_pair(int64_t{8}, 1));  // 10304: nearer 12288
  const jit::Selection s = select_config(src, 64, 128, "float32", 256, 64);
  EXPECT_EQ(s.tuning_key, "batch*nheads=16384 -> 16384");
  EXPECT_EQ(s.config.name, "BLOCK_SIZE_M=8,warps=1,stages=1");
  EXPECT_EQ(s.candidates.size(), 21u);
  EXPECT_NE(s.table_file.find("device_name=NVIDIA_H200,cache_dtype=float32.json"),
            std::string::npos);
}

TEST(MambaSsuConfig, MissingFileFallsBackToHeuristic) {
  const ConfigSource src{fixture_dir(), "NVIDIA H200", ""};
  // bf16 states look for cache_dtype=float16, which the fixtures do not have.
  jit::Selection s = select_config(src, 64, 128, "bfloat16", 8, 64);
  EXPECT_EQ(s.selector, "heuristic");
  EXPECT_EQ(s.tuning_key, "dstate=128,is_blackwell=0");
  EXPECT_EQ(s.config.name, "BLOCK_SIZE_M=4,warps=4,stages=1");
  EXPECT_TRUE(s.table_file.empty());
  s = select_config(ConfigSource{fixture_dir(), "NVIDIA H200 NVL", ""}, 64, 128, "float32", 8,
                    64, /*is_blackwell=*/true);
  EXPECT_EQ(s.selector, "heuristic");
  EXPECT_EQ(s.config.name, "BLOCK_SIZE_M=32,warps=8,stages=1");
  s = select_config(ConfigSource{"", "NVIDIA H200", ""}, 64, 128, "float32", 8, 64);
  EXPECT_EQ(s.selector, "heuristic");
  EXPECT_THROW(select_config(src, 64, 0, "float32", 8, 64), InputError);
}

TEST(MambaSsuConfig, UserFolderIsSearchedFirst) {
  const std::string name = config_file_name(64, 128, "NVIDIA H200", "float32");
  const std::string user =
      write_table("user", name, R"({"triton_version": "3.6.0", "1": {"BLOCK_SIZE_M": 16, "num_warps": 2}})");
  jit::Selection s = select_config(ConfigSource{fixture_dir(), "NVIDIA H200", user}, 64, 128,
                                   "float32", 256, 64);
  EXPECT_EQ(s.config.name, "BLOCK_SIZE_M=16,warps=2,stages=1");
  EXPECT_EQ(s.tuning_key, "batch*nheads=16384 -> 1");
  EXPECT_EQ(s.table_file, user + "/" + name);
  // A user folder without the file: the packaged folder.
  s = select_config(ConfigSource{fixture_dir(), "NVIDIA H200", fs::temp_directory_path().string()},
                    64, 128, "float32", 256, 64);
  EXPECT_EQ(s.config.name, "BLOCK_SIZE_M=8,warps=1,stages=1");
}

TEST(MambaSsuConfig, MalformedTablesNameFileAndKey) {
  const std::string name = config_file_name(64, 128, "NVIDIA H200", "float32");
  auto error = [&](const std::string& tag, const std::string& text, int64_t batch) {
    const std::string dir = write_table(tag, name, text);
    const std::string msg =
        message_of([&] { select_config(ConfigSource{dir, "NVIDIA H200", ""}, 64, 128, "float32", batch, 1); });
    EXPECT_NE(msg.find(dir + "/" + name), std::string::npos) << msg;
    return msg;
  };
  EXPECT_NE(error("nowarps", R"({"8": {"BLOCK_SIZE_M": 4}, "64": {"BLOCK_SIZE_M": 4, "num_warps": 1}})", 8)
                .find("key \"8\": the entry has no \"num_warps\""),
            std::string::npos);
  EXPECT_NE(error("string", R"({"8": {"BLOCK_SIZE_M": "4", "num_warps": 1}})", 8)
                .find("key \"8\" -> \"BLOCK_SIZE_M\": expected an integer"),
            std::string::npos);
  EXPECT_NE(error("badkey", R"({"eight": {"BLOCK_SIZE_M": 4, "num_warps": 1}})", 8).find("key \"eight\""),
            std::string::npos);
  EXPECT_NE(error("bm3", R"({"8": {"BLOCK_SIZE_M": 3, "num_warps": 1}})", 8)
                .find("key \"8\" -> \"BLOCK_SIZE_M\": 3 must be a power of two"),
            std::string::npos);
  EXPECT_NE(error("json", "{\"8\": {", 8).find("not a valid JSON"), std::string::npos);
  EXPECT_NE(error("empty", "{}", 8).find("no batch-size entry"), std::string::npos);
  // vLLM only reads the chosen entry: a bad entry elsewhere does not fail this batch.
  const std::string dir = write_table("other", name, R"({"8": {"BLOCK_SIZE_M": 4}, "64": {"BLOCK_SIZE_M": 4, "num_warps": 1}})");
  EXPECT_EQ(select_config(ConfigSource{dir, "NVIDIA H200", ""}, 64, 128, "float32", 64, 1).config.name,
            "BLOCK_SIZE_M=4,warps=1,stages=1");
}

// ---------------------------------------------------------------------------------------------
// CPU: the reference

TEST(MambaSsuReference, OneElementByHandAndNullRows) {
  at::manual_seed(3);
  const int64_t H = 2, P = 3, N = 4, G = 1;
  const at::Tensor state = at::randn({4, H, P, N}, at::kDouble);
  const at::Tensor x = at::randn({2, H, P}, at::kDouble), dt = at::randn({2, H, P}, at::kDouble);
  const at::Tensor A = -at::rand({H, P, N}, at::kDouble), B = at::randn({2, G, N}, at::kDouble);
  const at::Tensor C = at::randn({2, G, N}, at::kDouble), D = at::randn({H, P}, at::kDouble);
  const at::Tensor dtb = at::randn({H, P}, at::kDouble);
  const at::Tensor idx = at::tensor(std::vector<int32_t>{2, 0});  // row 1: the null block
  const ref::Result r =
      ref::selective_state_update(state, x, dt, A, B, C, D, dtb, true, idx, idx, kNullBlockId);
  // Row 0, head 1, p 2 by hand.
  const double d = std::log1p(std::exp(dt[0][1][2].item<double>() + dtb[1][2].item<double>()));
  double y = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double s = state[2][1][2][n].item<double>() * std::exp(d * A[1][2][n].item<double>()) +
                     d * B[0][0][n].item<double>() * x[0][1][2].item<double>();
    EXPECT_NEAR(r.state[2][1][2][n].item<double>(), s, 1e-12);
    y += s * C[0][0][n].item<double>();
  }
  EXPECT_NEAR(r.out[0][1][2].item<double>(), y + D[1][2].item<double>() * x[0][1][2].item<double>(),
              1e-12);
  // The null row starts from zeros, stores nothing, and still has an output.
  EXPECT_TRUE(at::equal(r.state[0], state[0]));
  EXPECT_TRUE(at::isfinite(r.out[1]).all().item<bool>());
  EXPECT_EQ(r.written.sum().item<int64_t>(), 1);
}

// ---------------------------------------------------------------------------------------------
// Inputs as MambaMixer2 passes them: x / B / C columns of the conv output, dt a column slice of
// in_proj's output expanded over P, A (float32) / D / dt_bias (bf16) expanded, the state a view
// into per-request pages of `page` = H * P * N + pad elements. On CUDA the values are random
// (never all zero); untied: dt, A, dt_bias and D are full float32 tensors.

struct Dims {
  int64_t H, P, G, N;
};

Dims dims_of(const kernels::shapes::Mamba2Heads& m) { return {m.nheads, m.head_dim, m.ngroups, m.dstate}; }

struct Inputs {
  at::Tensor buffer, state, conv, x, dt, A, B, C, D, dt_bias, idx, out;
};

at::Tensor filled(const at::TensorOptions& o, std::vector<int64_t> shape, uint64_t seed,
                  double scale, double shift) {
  if (o.device().is_meta()) return at::empty(shape, o);
  at::manual_seed(seed);
  at::Tensor t = at::randn(shape, at::kDouble) * scale + shift;
  t = at::where(t == 0, at::full_like(t, 1e-3), t);
  return t.to(o.dtype().toScalarType()).to(o.device());
}

Inputs make_inputs(at::Device dev, const Dims& d, int64_t batch, at::ScalarType state_t,
                   int64_t pad, bool tied, int64_t slots, uint64_t seed) {
  const auto o = at::TensorOptions().device(dev);
  const int64_t conv_dim = d.H * d.P + 2 * d.G * d.N;
  const int64_t page = d.H * d.P * d.N + pad;
  Inputs in;
  in.buffer = filled(o.dtype(state_t), {slots, page}, seed, 0.5, 0.0);
  in.state = in.buffer.as_strided({slots, d.H, d.P, d.N}, {page, d.P * d.N, d.N, 1},
                                  in.buffer.storage_offset() + (pad >= 16 ? 16 : 0));
  in.conv = filled(o.dtype(at::kBFloat16), {batch, conv_dim}, seed + 1, 1.0, 0.0);
  in.x = in.conv.narrow(1, 0, d.H * d.P).view({batch, d.H, d.P});
  in.B = in.conv.narrow(1, d.H * d.P, d.G * d.N).view({batch, d.G, d.N});
  in.C = in.conv.narrow(1, d.H * d.P + d.G * d.N, d.G * d.N).view({batch, d.G, d.N});
  if (tied) {
    const at::Tensor proj = filled(o.dtype(at::kBFloat16), {batch, 3 * d.H}, seed + 2, 1.0, 0.0);
    in.dt = proj.narrow(1, 2 * d.H, d.H).unsqueeze(2).expand({batch, d.H, d.P});
    in.A = filled(o.dtype(at::kFloat), {d.H}, seed + 3, 0.3, -1.0).view({d.H, 1, 1}).expand({d.H, d.P, d.N});
    in.D = filled(o.dtype(at::kBFloat16), {d.H}, seed + 4, 0.5, 0.5).view({d.H, 1}).expand({d.H, d.P});
    in.dt_bias = filled(o.dtype(at::kBFloat16), {d.H}, seed + 5, 0.3, -1.5).view({d.H, 1}).expand({d.H, d.P});
  } else {
    in.dt = filled(o.dtype(at::kFloat), {batch, d.H, d.P}, seed + 2, 1.0, 0.0);
    in.A = filled(o.dtype(at::kFloat), {d.H, d.P, d.N}, seed + 3, 0.3, -1.0);
    in.D = filled(o.dtype(at::kFloat), {d.H, d.P}, seed + 4, 0.5, 0.5);
    in.dt_bias = filled(o.dtype(at::kFloat), {d.H, d.P}, seed + 5, 0.3, -1.5);
  }
  in.out = o.device().is_meta()
               ? at::empty({batch, d.H, d.P}, o.dtype(at::kBFloat16))
               : at::full({batch, d.H, d.P}, std::numeric_limits<float>::quiet_NaN(),
                          o.dtype(at::kBFloat16));
  in.idx = at::empty({batch}, o.dtype(at::kInt));
  return in;
}

// Distinct slots 1..slots-1 in a seeded order; rows with b % 5 == 3 get `null_id` when `nulls`.
at::Tensor slot_indices(int64_t batch, int64_t slots, bool nulls, int64_t null_id, uint64_t seed) {
  std::vector<int32_t> ids(slots - 1);
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(static_cast<uint32_t>(seed)));
  ids.resize(batch);
  if (nulls) {
    for (int64_t b = 3; b < batch; b += 5) ids[b] = static_cast<int32_t>(null_id);
  }
  return at::tensor(ids).to(at::kCUDA);
}

// ---------------------------------------------------------------------------------------------
// CPU: validation and compile keys (compile-only runtime, meta tensors)

const Dims kNano = dims_of(kernels::shapes::kNemotronNanoMambaTp1);
const int64_t kNanoPad = 3 * 6144 / 2;  // the conv state's share of the page, in float32 elements

std::set<std::string> keys(jit::JitRuntime& rt) {
  std::set<std::string> out;
  for (const jit::CompileRecord& r : rt.monitor().records()) out.insert(r.key);
  return out;
}

jit::Selection call(jit::JitRuntime& rt, const Inputs& in, const ConfigSource& src,
                    int64_t null_id = kNullBlockId) {
  return selective_state_update(rt, src, in.state, in.x, in.dt, in.A, in.B, in.C, in.D, in.dt_bias,
                                true, in.idx, in.idx, in.out, null_id);
}

TEST(MambaSsuCompileOnly, TableConfigsAndNonenessMakeTheKeys) {
  jit::JitRuntime rt(compile_only_options());
  const ConfigSource src{fixture_dir(), "NVIDIA H200", ""};
  // Batch 1, 8, 64 (H200 table: BLOCK_SIZE_M 4, 1 warp) and 256 (8, 1 warp): N is not specialized.
  for (int64_t b : {1, 8, 64, 256}) {
    const jit::Selection s = call(rt, make_inputs(at::kMeta, kNano, b, at::kFloat, kNanoPad, true, 300, 0), src);
    EXPECT_EQ(s.selector, "table");
  }
  EXPECT_EQ(rt.cached_kernels(), 2u);
  const std::string k = *keys(rt).begin();
  for (const char* part : {"DT_SOFTPLUS=1,TIE_HDIM=1,", "HAS_DT_BIAS=1,HAS_D=1,HAS_Z=0,",
                           "HAS_STATE_BATCH_INDICES=1,IS_SPEC_DECODING=0,IS_VARLEN=0,",
                           "BLOCK_SIZE_DSTATE=128,USE_RS_ROUNDING=0,PHILOX_ROUNDS=0,NUM_WARPS=1,",
                           "STATE_DTYPE=0,X_DTYPE=2,DT_DTYPE=2,DT_BIAS_DTYPE=2,A_DTYPE=0,"}) {
    EXPECT_NE(k.find(part), std::string::npos) << part << " in " << k;
  }
  for (const jit::CompileRecord& r : rt.monitor().records()) EXPECT_EQ(r.selector, "table");
  size_t n = rt.cached_kernels();
  auto expect_new_key = [&](const Inputs& in, int64_t null_id, const char* what) {
    call(rt, in, src, null_id);
    EXPECT_EQ(rt.cached_kernels(), ++n) << what;
  };
  const auto in = [](int64_t b) { return make_inputs(at::kMeta, kNano, b, at::kFloat, kNanoPad, true, 300, 0); };
  Inputs i = in(8);
  i.D = at::Tensor();
  expect_new_key(i, 0, "D None: HAS_D=0");
  i = in(8);
  i.dt_bias = at::Tensor();
  expect_new_key(i, 0, "dt_bias None: HAS_DT_BIAS=0");
  i = in(8);
  i.idx = at::Tensor();
  expect_new_key(i, 0, "no state indices: HAS_STATE_BATCH_INDICES=0");
  i = in(8);
  i.dt = at::empty({8, 64, 64}, i.dt.options());
  expect_new_key(i, 0, "a full dt: TIE_HDIM=0");
  expect_new_key(in(8), kPadSlotId, "null_block_id -1 instead of 0 (a specialized integer)");
  expect_new_key(make_inputs(at::kMeta, kNano, 8, at::kFloat, kNanoPad + 8, true, 300, 0), 0,
                 "a page stride that is not a multiple of 16");
  // A bf16 state: no float16 table, the heuristic (4, 4 warps) and STATE_DTYPE=2.
  const jit::Selection s =
      call(rt, make_inputs(at::kMeta, kNano, 8, at::kBFloat16, 2 * kNanoPad, true, 300, 0), src);
  EXPECT_EQ(s.selector, "heuristic");
  EXPECT_EQ(rt.cached_kernels(), ++n);
  // Another dst tensor of the same layout, or a different batch: cache hits.
  i = in(33);
  selective_state_update(rt, src, i.state, i.x, i.dt, i.A, i.B, i.C, i.D, i.dt_bias, true, i.idx,
                         at::empty({40}, i.idx.options()), i.out);
  EXPECT_EQ(rt.cached_kernels(), n);
  // Empty batch: nothing compiles.
  call(rt, in(0), src);
  EXPECT_EQ(rt.cached_kernels(), n);
}

TEST(MambaSsuCompileOnly, BlackwellTargetUsesItsHeuristic) {
  CS_REQUIRE_NVRTC_TARGET("sm_100");
  jit::JitOptions o = compile_only_options();
  o.arch = "sm_100";
  jit::JitRuntime rt(o);
  const jit::Selection s = call(
      rt, make_inputs(at::kMeta, kNano, 8, at::kFloat, kNanoPad, true, 300, 0), ConfigSource{"", "NVIDIA B200", ""});
  EXPECT_EQ(s.config.name, "BLOCK_SIZE_M=32,warps=8,stages=1");
  ASSERT_EQ(rt.monitor().records().size(), 1u);
  EXPECT_EQ(rt.monitor().records()[0].selector, "heuristic");
}

TEST(MambaSsuCompileOnly, ValidationNamesTheArgument) {
  jit::JitRuntime rt(compile_only_options());
  const ConfigSource src{"", "NVIDIA H200", ""};
  const std::string fn = "mamba_ssu::selective_state_update: argument ";
  Inputs i = make_inputs(at::kMeta, kNano, 8, at::kFloat, kNanoPad, true, 300, 0);
  i.idx = at::empty({8}, i.idx.options().dtype(at::kLong));
  EXPECT_MENTIONS(call(rt, i, src), fn + "'state_batch_indices' must be int32");
  i = make_inputs(at::kMeta, kNano, 8, at::kFloat, kNanoPad, true, 300, 0);
  i.B = at::empty({8, 3, 128}, i.B.options());
  EXPECT_MENTIONS(call(rt, i, src), fn + "'B' has 3 groups (dimension 1); they must divide the 64");
  i = make_inputs(at::kMeta, kNano, 8, at::kFloat, kNanoPad, true, 300, 0);
  i.C = at::empty({8, 4, 128}, i.C.options());
  EXPECT_MENTIONS(call(rt, i, src), fn + "'C' has shape [8, 4, 128]; dimension 1 must be 8");
  i = make_inputs(at::kMeta, kNano, 8, at::kFloat, kNanoPad, true, 300, 0);
  i.out = at::empty({8, 64, 32}, i.out.options());
  EXPECT_MENTIONS(call(rt, i, src), fn + "'out' has shape [8, 64, 32]");
  i = make_inputs(at::kMeta, kNano, 8, at::kFloat, kNanoPad, true, 300, 0);
  i.idx = at::empty({4}, i.idx.options());
  EXPECT_MENTIONS(call(rt, i, src), fn + "'state_batch_indices' has shape [4]");
  i = make_inputs(at::kMeta, kNano, 8, at::kFloat, kNanoPad, true, 300, 0);
  EXPECT_MENTIONS(selective_state_update(rt, src, i.state, i.x, i.dt, i.A, i.B, i.C, i.D,
                                         i.dt_bias, true, at::Tensor(), i.idx, i.out),
                  fn + "'dst_state_batch_indices' is given without");
  i.A = at::empty({64, 64, 128}, i.A.options().dtype(at::kInt));
  EXPECT_MENTIONS(call(rt, i, src), fn + "'A' must have dtype Float, BFloat16 or Half");
  EXPECT_EQ(rt.cached_kernels(), 0u);
}

// ---------------------------------------------------------------------------------------------
// GPU: against the float64 reference

struct GpuCase {
  Dims d;
  int64_t batch;
  at::ScalarType state_t;
  int64_t pad;        // page = H * P * N + pad (pad % 16 != 0: the scalar state path)
  bool tied = true;   // MambaMixer2's expanded views
  bool nulls = true;  // rows with the null block
  int bm = 0, warps = 0;  // 0: select_config (H200 table / heuristic); else forced
};

// e.g. H8P64G2N128_B33_Float_pad32_tied_BM8w1: the test name and the printed parameter.
std::string gpu_case_name(const ::testing::TestParamInfo<GpuCase>& i) {
  const GpuCase& c = i.param;
  return "H" + std::to_string(c.d.H) + "P" + std::to_string(c.d.P) + "G" + std::to_string(c.d.G) +
         "N" + std::to_string(c.d.N) + "_B" + std::to_string(c.batch) + "_" +
         c10::toString(c.state_t) + "_pad" + std::to_string(c.pad) + (c.tied ? "_tied" : "_untied") +
         (c.nulls ? "" : "_no_nulls") +
         (c.bm ? "_BM" + std::to_string(c.bm) + "w" + std::to_string(c.warps) : "");
}
void PrintTo(const GpuCase& c, std::ostream* os) { *os << gpu_case_name({c, 0}); }

// out and the written slots against the reference; every other byte of the pages unchanged.
void check_against_reference(const Inputs& in, const at::Tensor& before, const ref::Result& want,
                             double state_rtol) {
  const at::Tensor got = in.out.cpu().to(at::kDouble);
  ASSERT_FALSE(at::isnan(got).any().item<bool>()) << "out rows left unwritten (NaN poison)";
  const double out_scale = want.out.abs().max().item<double>();
  const at::Tensor out_err = (got - want.out).abs() - (want.out.abs() * 1e-2 + out_scale * 2e-3);
  EXPECT_LE(out_err.max().item<double>(), 0.0) << "out max error "
                                                << (got - want.out).abs().max().item<double>();
  const at::Tensor after = in.buffer.cpu();
  at::Tensor expected = before.clone();
  const at::Tensor st_after = after.as_strided(in.state.sizes(), in.state.strides(),
                                               in.state.storage_offset());
  at::Tensor st_expected = expected.as_strided(in.state.sizes(), in.state.strides(),
                                               in.state.storage_offset());
  const double s_scale = want.state.abs().max().item<double>();
  for (int64_t s = 0; s < in.state.size(0); ++s) {
    if (!want.written[s].item<bool>()) continue;
    const at::Tensor g = st_after[s].to(at::kDouble);
    const double err = ((g - want.state[s]).abs() - want.state[s].abs() * state_rtol -
                        s_scale * state_rtol * 0.1).max().item<double>();
    EXPECT_LE(err, 0.0) << "slot " << s << " max error "
                        << (g - want.state[s]).abs().max().item<double>();
    st_expected[s].copy_(st_after[s]);
  }
  EXPECT_TRUE(at::equal(after, expected)) << "bytes outside the written slots changed";
}

class MambaSsuGpu : public ::testing::TestWithParam<GpuCase> {};

TEST_P(MambaSsuGpu, MatchesReference) {
  CS_REQUIRE_GPU();
  const GpuCase c = GetParam();
  jit::JitRuntime& rt = gpu_runtime();
  const int64_t slots = c.batch + 5;
  Inputs in = make_inputs(at::kCUDA, c.d, c.batch, c.state_t, c.pad, c.tied, slots, 40 + c.batch);
  in.idx = slot_indices(c.batch, slots, c.nulls, kNullBlockId, 7 + c.batch);
  const at::Tensor before = in.buffer.cpu();
  const ref::Result want = ref::selective_state_update(in.state, in.x, in.dt, in.A, in.B, in.C,
                                                       in.D, in.dt_bias, true, in.idx, in.idx,
                                                       kNullBlockId);
  if (c.bm == 0) {
    call(rt, in, ConfigSource{fixture_dir(), "NVIDIA H200", ""});
  } else {
    selective_state_update_with(rt, jit::select_by_heuristic("forced", jit::make_config({{"BLOCK_SIZE_M", c.bm}}, c.warps)),
                                in.state, in.x, in.dt, in.A, in.B, in.C, in.D, in.dt_bias, true,
                                in.idx, in.idx, in.out);
  }
  check_against_reference(in, before, want, c.state_t == at::kFloat ? 1e-4 : 8e-3);
}

const Dims kSmall{8, 64, 2, 128};
INSTANTIATE_TEST_SUITE_P(
    Shapes, MambaSsuGpu,
    ::testing::Values(
        // MambaMixer2 decode, float32 state (H200 table), batch 1, 3, 64, 257, G < H
        GpuCase{kSmall, 1, at::kFloat, 32}, GpuCase{kSmall, 3, at::kFloat, 32},
        GpuCase{kSmall, 64, at::kFloat, 32}, GpuCase{kSmall, 257, at::kFloat, 32},
        // bf16 state (heuristic), vector and scalar state paths
        GpuCase{kSmall, 1, at::kBFloat16, 24}, GpuCase{kSmall, 3, at::kBFloat16, 32},
        GpuCase{kSmall, 64, at::kBFloat16, 24}, GpuCase{kSmall, 257, at::kBFloat16, 32},
        GpuCase{kSmall, 3, at::kHalf, 32},  // float16 state (vLLM's float16 tables)
        // Nemotron-3 Nano TP1 and Super TP8 shapes
        GpuCase{kNano, 64, at::kFloat, kNanoPad}, GpuCase{dims_of(kernels::shapes::kNemotronSuperMambaTp8), 9, at::kFloat, 3456},
        // untied dt / A / dt_bias / D, head dim and dstate not powers of two
        GpuCase{Dims{4, 50, 2, 48}, 5, at::kBFloat16, 32, false},
        GpuCase{Dims{4, 50, 2, 48}, 6, at::kFloat, 8, false},
        // forced configs: the table's, the heuristics' (Blackwell's too) and more
        GpuCase{kSmall, 33, at::kFloat, 32, true, true, 8, 1},
        GpuCase{kSmall, 33, at::kFloat, 32, true, true, 16, 1},
        GpuCase{kSmall, 33, at::kFloat, 32, true, true, 32, 4},
        GpuCase{kSmall, 33, at::kFloat, 32, true, true, 32, 8},
        GpuCase{kSmall, 33, at::kFloat, 32, true, true, 4, 8},
        GpuCase{kSmall, 33, at::kFloat, 24, true, true, 2, 1},
        GpuCase{kSmall, 33, at::kBFloat16, 32, true, true, 64, 2},
        GpuCase{Dims{4, 64, 2, 16}, 7, at::kFloat, 32, true, true, 32, 4},
        GpuCase{Dims{4, 64, 4, 256}, 7, at::kFloat, 32, true, true, 4, 8}),
    gpu_case_name);

TEST(MambaSsuGpuSlots, NoIndicesNoDNoBias) {
  CS_REQUIRE_GPU();
  Inputs in = make_inputs(at::kCUDA, kSmall, 6, at::kFloat, 32, true, 6, 90);
  const at::Tensor before = in.buffer.cpu();
  const ref::Result want = ref::selective_state_update(in.state, in.x, in.dt, in.A, in.B, in.C,
                                                       at::Tensor(), at::Tensor(), true,
                                                       at::Tensor(), at::Tensor(), kNullBlockId);
  selective_state_update(gpu_runtime(), ConfigSource{}, in.state, in.x, in.dt, in.A, in.B, in.C,
                         at::Tensor(), at::Tensor(), true, at::Tensor(), at::Tensor(), in.out);
  check_against_reference(in, before, want, 1e-4);
}

TEST(MambaSsuGpuSlots, PadSlotIdAndSeparateDestinations) {
  CS_REQUIRE_GPU();
  // null_block_id = PAD_SLOT_ID (-1): slot 0 is an ordinary slot; 2-D indices [B, 2]; the
  // destinations are other slots than the sources (prefix-caching style), sources stay intact.
  const int64_t batch = 10, slots = 24;
  Inputs in = make_inputs(at::kCUDA, kSmall, batch, at::kBFloat16, 32, true, slots, 91);
  std::vector<int32_t> src(2 * batch), dst(batch);
  for (int64_t b = 0; b < batch; ++b) {
    src[2 * b] = static_cast<int32_t>(b == 4 ? kPadSlotId : b);  // slot 0 used by row 0
    src[2 * b + 1] = 99;
    dst[b] = static_cast<int32_t>(slots - 1 - b);
  }
  const at::Tensor si = at::tensor(src).view({batch, 2}).to(at::kCUDA);
  const at::Tensor di = at::tensor(dst).to(at::kCUDA);
  const at::Tensor before = in.buffer.cpu();
  const ref::Result want = ref::selective_state_update(in.state, in.x, in.dt, in.A, in.B, in.C,
                                                       in.D, in.dt_bias, true, si, di, kPadSlotId);
  selective_state_update(gpu_runtime(), ConfigSource{}, in.state, in.x, in.dt, in.A, in.B, in.C,
                         in.D, in.dt_bias, true, si, di, in.out, kPadSlotId);
  check_against_reference(in, before, want, 8e-3);
  EXPECT_EQ(want.written.sum().item<int64_t>(), batch - 1);
}

}  // namespace
}  // namespace coldstart::mamba_ssu
