// Tests of the JIT runtime: specialization, compile keys, NVRTC for sm_86/sm_90/sm_100, the
// monitor, the in-memory and on-disk caches, and (with a GPU) a real launch.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "harness/jit/api_timer.h"
#include "harness/jit/compiled_kernel.h"
#include "harness/jit/driver.h"
#include "harness/common/paths.h"
#include "harness/jit/jit.h"
#include "harness/jit/nvrtc_archs.h"

extern char** environ;

namespace coldstart::jit {
namespace {

namespace fs = std::filesystem;

// A small kernel that uses bf16 (so the CUDA include path is exercised) and the specialization
// macros: y[i] = a * x[i] + b[i], n elements.
const char* const kAxpySource = R"(
#include <cuda_bf16.h>
extern "C" __global__ void axpy(float* y, const float* x, const __nv_bfloat16* b, int n, float a) {
#if defined(CS_SPEC_n) && CS_SPEC_n == 16
  static_assert(BLOCK % 16 == 0, "BLOCK from -D");
#endif
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = a * x[i] + __bfloat162float(b[i]);
}
)";

KernelSource axpy_kernel() {
  return KernelSource{"axpy", "axpy", kAxpySource, {"y", "x", "b", "n", "a"}, {}};
}

std::vector<KernelArg> axpy_args(uint64_t base, int n) {
  return {KernelArg::pointer(base, DType::kF32), KernelArg::pointer(base + 4096, DType::kF32),
          KernelArg::pointer(base + 8192, DType::kBF16), KernelArg::i32(n),
          KernelArg::f32(2.0f)};
}

const std::vector<Constexpr> kBlock128 = {{"BLOCK", 128}};

const char* const kBrokenSource = R"(
extern "C" __global__ void broken(float* y) {
  y[0] = undeclared_identifier_xyz;
}
)";

bool is_elf(const std::vector<char>& b) {
  return b.size() > 4 && b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

JitOptions compile_only(const std::string& cache_dir = "") {
  JitOptions o;
  o.arch = "sm_90";
  o.launch = false;
  o.cache_dir = cache_dir;
  return o;
}

/// A fresh directory for one test, removed afterwards.
struct TempDir : paths::ScopedTempDir {
  TempDir() : paths::ScopedTempDir("cs-jit-test-") {}
};

// ---------------------------------------------------------------- specialization

TEST(Specialization, Integers) {
  EXPECT_EQ(specialization(KernelArg::i32(1)), "1");
  EXPECT_EQ(specialization(KernelArg::i64(1)), "1");
  EXPECT_EQ(specialization(KernelArg::i32(16)), "16");
  EXPECT_EQ(specialization(KernelArg::i32(32)), "16");
  EXPECT_EQ(specialization(KernelArg::i64(int64_t{1} << 40)), "16");
  EXPECT_EQ(specialization(KernelArg::i32(0)), "16");  // 0 is divisible by 16
  EXPECT_EQ(specialization(KernelArg::i32(17)), "");
  EXPECT_EQ(specialization(KernelArg::i32(2)), "");
  EXPECT_EQ(specialization(KernelArg::i32(-1)), "");
  EXPECT_EQ(specialization(KernelArg::i32(-16)), "16");
  EXPECT_EQ(specialization(KernelArg::i32(-17)), "");
}

TEST(Specialization, Pointers) {
  EXPECT_EQ(specialization(KernelArg::pointer(0x7f0000000000, DType::kBF16)), "16");
  EXPECT_EQ(specialization(KernelArg::pointer(256, DType::kF32)), "16");
  EXPECT_EQ(specialization(KernelArg::pointer(0x7f0000000008, DType::kF32)), "");
  EXPECT_EQ(specialization(KernelArg::pointer(1, DType::kU8)), "");  // a pointer is never "1"
}

TEST(Specialization, FloatsNever) {
  EXPECT_EQ(specialization(KernelArg::f32(1.0f)), "");
  EXPECT_EQ(specialization(KernelArg::f32(16.0f)), "");
  EXPECT_EQ(specialization(KernelArg::f32(0.0f)), "");
}

// ---------------------------------------------------------------- compile keys

TEST(CompileKey, SignatureText) {
  KernelSource k{"k", "k", "src", {"out", "in", "n", "one", "odd", "big", "scale"}, {}};
  std::vector<KernelArg> args = {KernelArg::pointer(4096, DType::kBF16),
                                 KernelArg::pointer(4100, DType::kU8),
                                 KernelArg::i32(4096),
                                 KernelArg::i32(1),
                                 KernelArg::i32(7),
                                 KernelArg::i64(64),
                                 KernelArg::f32(1.0f)};
  CompileKey key = make_compile_key(k, {{"HEAD_DIM", 128}, {"SPLITS", 32}}, args, "sm_90",
                                    "nvrtc-13.0");
  EXPECT_EQ(key.signature, "*bf16:16,*u8,i32:16,i32:1,i32,i64:16,fp32");
  EXPECT_EQ(key.kernel, "k");
  EXPECT_EQ(key.str().rfind("k[HEAD_DIM=128,SPLITS=32](*bf16:16,*u8,i32:16,i32:1,i32,i64:16,fp32)"
                            "@sm_90/nvrtc-13.0#",
                            0),
            0u)
      << key.str();
  EXPECT_EQ(key.str().size(), key.str().find('#') + 1 + 16);
}

TEST(CompileKey, Fp8U64AndTensorMapArguments) {
  KernelSource k{"k", "k", "src", {"a", "tag", "one", "tmap"}, {}};
  TensorMapSpec spec;
  spec.dtype = DType::kF8E4M3;
  spec.address = 4096;
  spec.rank = 2;
  spec.dims[0] = 256;
  spec.dims[1] = 100;
  spec.strides[0] = 256;
  spec.box[0] = 128;
  spec.box[1] = 64;
  spec.swizzle = 128;
  std::vector<KernelArg> args = {KernelArg::pointer(4096, DType::kF8E4M3), KernelArg::u64(1ull << 40),
                                 KernelArg::u64(1), KernelArg::tmap(spec)};
  EXPECT_EQ(make_compile_key(k, {}, args, "sm_90a", "c").signature, "*fp8e4nv:16,u64:16,u64:1,tmap");
  EXPECT_EQ(dtype_bytes(DType::kF8E4M3), 1u);
  EXPECT_EQ(dtype_bytes(DType::kU64), 8u);
}

TEST(TensorMap, ValidationNamesTheBrokenRule) {
  TensorMapSpec ok;
  ok.dtype = DType::kBF16;
  ok.address = 256;
  ok.rank = 2;
  ok.dims[0] = 64;
  ok.dims[1] = 64;
  ok.strides[0] = 128;
  ok.box[0] = 64;
  ok.box[1] = 64;
  ok.swizzle = 128;
  EXPECT_NO_THROW(ok.validate("x"));
  auto expect_bad = [](TensorMapSpec s, const std::string& needle) {
    try {
      s.validate("layer.q_a");
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("layer.q_a"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  TensorMapSpec s = ok;
  s.address = 8;
  expect_bad(s, "16-byte aligned");
  s = ok;
  s.strides[0] = 120;
  expect_bad(s, "stride of dim 1");
  s = ok;
  s.box[1] = 257;
  expect_bad(s, "box[1] = 257");
  s = ok;
  s.box[0] = 128;  // 256 bytes > 128-byte swizzle
  expect_bad(s, "exceeds the 128-byte swizzle");
  s = ok;
  s.swizzle = 96;
  expect_bad(s, "swizzle 96");
  s = ok;
  s.rank = 6;
  expect_bad(s, "rank 6");
  EXPECT_THROW(KernelArg::tmap(s), InputError);
}

TEST(CompileKey, DoNotSpecialize) {
  KernelSource k{"k", "k", "src", {"p", "n", "m"}, {"n", "p"}};
  std::vector<KernelArg> args = {KernelArg::pointer(4096, DType::kF16), KernelArg::i32(1),
                                 KernelArg::i32(32)};
  EXPECT_EQ(make_compile_key(k, {}, args, "sm_90", "c").signature, "*fp16,i32,i32:16");
}

TEST(CompileKey, ArgCountMismatchThrows) {
  KernelSource k{"k", "k", "src", {"a", "b"}, {}};
  EXPECT_THROW(make_compile_key(k, {}, {KernelArg::i32(3)}, "sm_90", "c"), Error);
}

TEST(CompileKey, EveryComponentMatters) {
  KernelSource k{"k", "k", "source A", {"p", "n"}, {}};
  std::vector<KernelArg> args = {KernelArg::pointer(4096, DType::kF32), KernelArg::i32(3)};
  const CompileKey base = make_compile_key(k, {{"B", 64}}, args, "sm_90", "nvrtc-13.0");
  EXPECT_TRUE(base == make_compile_key(k, {{"B", 64}}, args, "sm_90", "nvrtc-13.0"));

  KernelSource renamed = k;
  renamed.name = "k2";
  EXPECT_FALSE(base == make_compile_key(renamed, {{"B", 64}}, args, "sm_90", "nvrtc-13.0"));
  EXPECT_FALSE(base == make_compile_key(k, {{"B", 128}}, args, "sm_90", "nvrtc-13.0"));
  EXPECT_FALSE(base == make_compile_key(k, {{"C", 64}}, args, "sm_90", "nvrtc-13.0"));
  EXPECT_FALSE(base == make_compile_key(k, {}, args, "sm_90", "nvrtc-13.0"));
  std::vector<KernelArg> spec = {KernelArg::pointer(4096, DType::kF32), KernelArg::i32(1)};
  EXPECT_FALSE(base == make_compile_key(k, {{"B", 64}}, spec, "sm_90", "nvrtc-13.0"));
  std::vector<KernelArg> dtype = {KernelArg::pointer(4096, DType::kBF16), KernelArg::i32(3)};
  EXPECT_FALSE(base == make_compile_key(k, {{"B", 64}}, dtype, "sm_90", "nvrtc-13.0"));
  std::vector<KernelArg> unaligned = {KernelArg::pointer(4104, DType::kF32), KernelArg::i32(3)};
  EXPECT_FALSE(base == make_compile_key(k, {{"B", 64}}, unaligned, "sm_90", "nvrtc-13.0"));
  EXPECT_FALSE(base == make_compile_key(k, {{"B", 64}}, args, "sm_100", "nvrtc-13.0"));
  EXPECT_FALSE(base == make_compile_key(k, {{"B", 64}}, args, "sm_90", "nvrtc-12.8"));
  KernelSource other_src = k;
  other_src.source = "source B";
  EXPECT_FALSE(base == make_compile_key(other_src, {{"B", 64}}, args, "sm_90", "nvrtc-13.0"));

  // Same values, different unspecialized ones: same key (3 and 5 both unspecialized).
  std::vector<KernelArg> five = {KernelArg::pointer(8192, DType::kF32), KernelArg::i32(5)};
  EXPECT_TRUE(base == make_compile_key(k, {{"B", 64}}, five, "sm_90", "nvrtc-13.0"));
}

TEST(CompileKey, DigestIsStable) {
  KernelSource k{"k", "k", "abc", {"n"}, {}};
  const CompileKey a = make_compile_key(k, {{"X", 1}}, {KernelArg::i32(16)}, "sm_90", "nvrtc-13.0");
  const CompileKey b = make_compile_key(k, {{"X", 1}}, {KernelArg::i32(32)}, "sm_90", "nvrtc-13.0");
  EXPECT_EQ(a.digest(), b.digest());
  EXPECT_EQ(a.digest().size(), 16u);
  EXPECT_EQ(a.digest().find_first_not_of("0123456789abcdef"), std::string::npos);
  // FNV-1a 64 of a fixed text is a fixed value: the on-disk names survive rebuilds.
  CompileKey fixed;
  fixed.kernel = "k";
  fixed.source_hash = 0;
  fixed.arch = "sm_90";
  fixed.compiler = "nvrtc-13.0";
  EXPECT_EQ(fixed.str(), "k[]()@sm_90/nvrtc-13.0#0000000000000000");
  EXPECT_EQ(fixed.digest(), fixed.digest());
  EXPECT_NE(a.digest(), fixed.digest());
  // source_hash is FNV-1a 64: of "" it is the offset basis.
  KernelSource empty{"e", "e", "", {}, {}};
  EXPECT_EQ(make_compile_key(empty, {}, {}, "sm_90", "c").source_hash, 0xcbf29ce484222325ull);
  // The hash is remembered per source text: a text rewritten in place (same address, same
  // length) hashes anew, and the first text's hash comes back with its text.
  char text[] = "__global__ void k() {}";
  KernelSource in_place{"k", "k", text, {}, {}};
  const uint64_t first = make_compile_key(in_place, {}, {}, "sm_90", "c").source_hash;
  EXPECT_EQ(make_compile_key(in_place, {}, {}, "sm_90", "c").source_hash, first);
  text[16] = 'j';
  const uint64_t second = make_compile_key(in_place, {}, {}, "sm_90", "c").source_hash;
  EXPECT_NE(second, first);
  KernelSource copy{"k", "k", "__global__ void j() {}", {}, {}};
  EXPECT_EQ(make_compile_key(copy, {}, {}, "sm_90", "c").source_hash, second);
  text[16] = 'k';
  EXPECT_EQ(make_compile_key(in_place, {}, {}, "sm_90", "c").source_hash, first);
}

// ---------------------------------------------------------------- NVRTC

TEST(Nvrtc, VersionLooksRight) {
  const std::string v = nvrtc_version();
  EXPECT_NE(v.find('.'), std::string::npos);
  EXPECT_GE(std::stoi(v), 11);  // a distribution's toolkit (Debian 12: 11.8) is supported
}

class NvrtcArch : public ::testing::TestWithParam<const char*> {};

TEST_P(NvrtcArch, CompilesToCubin) {
  if (!nvrtc_can_target(GetParam())) GTEST_SKIP() << nvrtc_cannot_target_text(GetParam());
  const std::vector<char> cubin =
      compile_to_cubin(axpy_kernel(), kBlock128, axpy_args(1 << 20, 4096), GetParam());
  EXPECT_TRUE(is_elf(cubin)) << "not an ELF cubin, " << cubin.size() << " bytes";
}

INSTANTIATE_TEST_SUITE_P(AllTargets, NvrtcArch, ::testing::Values("sm_86", "sm_90", "sm_100"));

TEST(Nvrtc, BrokenKernelReportsLog) {
  KernelSource k{"broken", "broken", kBrokenSource, {"y"}, {}};
  try {
    compile_to_cubin(k, {}, {KernelArg::pointer(4096, DType::kF32)}, "sm_90");
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("undeclared_identifier_xyz"), std::string::npos) << text;
    EXPECT_NE(text.find("broken[](*fp32:16)@sm_90/nvrtc-"), std::string::npos) << text;
    EXPECT_NE(text.find("NVRTC_ERROR_COMPILATION"), std::string::npos) << text;
  }
}

TEST(Nvrtc, BadArchIsAnError) {
  EXPECT_THROW(compile_to_cubin(axpy_kernel(), kBlock128, axpy_args(4096, 64), "90"), Error);
}

// ---------------------------------------------------------------- monitor

CompileKey some_key() {
  KernelSource k{"kern", "kern", "s", {}, {}};
  return make_compile_key(k, {}, {}, "sm_90", "nvrtc-13.0");
}

TEST(Monitor, RecordsPhaseAndHotPath) {
  JitMonitor m;
  EXPECT_EQ(m.phase(), "init");
  m.set_phase("kernel_warmup");
  m.record({"a", "ka", 1.5, "", false, "nvrtc"});
  m.activate();
  EXPECT_TRUE(m.active());
  m.set_phase("first_decode");
  m.record({"b", "kb", 2.5, "", false, "nvrtc"});
  const auto recs = m.records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].phase, "kernel_warmup");
  EXPECT_FALSE(recs[0].hot_path);
  EXPECT_EQ(recs[1].phase, "first_decode");
  EXPECT_TRUE(recs[1].hot_path);
}

// Compile-only charges for memo-served compiles: serial ones add up, a pool of N threads costs
// what N threads pulling from one queue would take; real compiles are not charged.
TEST(Monitor, MemoChargeLaysAPoolsCompilesOnItsThreads) {
  JitMonitor m;
  auto served = [](double ms) {
    CompileRecord r{"k", "k", ms, "", false, "nvrtc"};
    r.reused = true;
    return r;
  };
  m.record(served(10));
  m.record({"real", "real", 1000, "", false, "nvrtc"});  // compiled here: its wall time counts
  const size_t pool_start = m.num_records();
  {
    JitMonitor::ParallelCompiles pool(m, 2);
    for (double ms : {40.0, 30.0, 20.0, 10.0, 10.0}) m.record(served(ms));
  }
  m.record(served(5));  // after the scope: serial again
  // Two threads, longest first: 40 | 30 -> 30+20=50 -> 40+10=50 -> 50+10=60: the longest, 60.
  EXPECT_DOUBLE_EQ(m.memo_charge_ms_since(pool_start), 60.0 + 5.0);
  // Whatever order the pool's threads recorded them in (record order would give 10|10 -> 30|40
  // -> 70|40: 70).
  JitMonitor shuffled;
  {
    JitMonitor::ParallelCompiles pool(shuffled, 2);
    for (double ms : {10.0, 10.0, 20.0, 30.0, 40.0}) shuffled.record(served(ms));
  }
  EXPECT_DOUBLE_EQ(shuffled.memo_charge_ms_since(0), 60.0);
  EXPECT_DOUBLE_EQ(m.memo_charge_ms_since(0), 10.0 + 60.0 + 5.0);
  EXPECT_DOUBLE_EQ(m.compile_ms_since(0, /*reused_only=*/true), 125.0);  // the plain sum
  // One thread: the sum, as before.
  JitMonitor one;
  {
    JitMonitor::ParallelCompiles pool(one, 1);
    for (double ms : {40.0, 30.0}) one.record(served(ms));
  }
  EXPECT_DOUBLE_EQ(one.memo_charge_ms_since(0), 70.0);
  EXPECT_EQ(one.records()[0].parallel_threads, 1);
  EXPECT_EQ(m.records()[2].parallel_threads, 2);
  EXPECT_EQ(m.records()[2].parallel_scope, m.records()[6].parallel_scope);
  EXPECT_EQ(m.records()[7].parallel_scope, 0);
}

// What the JIT held the host for: every record's time plus autotune benchmarking.
TEST(Monitor, HostStallCountsCompilesLoadsAndBenchmarking) {
  JitMonitor m;
  EXPECT_DOUBLE_EQ(m.host_stall_ms(), 0.0);
  m.record({"a", "ka", 7.5, "", false, "nvrtc"});
  m.record({"b", "kb", 0.5, "", false, "disk"});
  AutotuneRecord t;
  t.tune_ms = 30;
  t.compile_ms = 20;  // already in the compile records
  m.record_autotune(t);
  EXPECT_DOUBLE_EQ(m.host_stall_ms(), 7.5 + 0.5 + 10.0);
}

TEST(Monitor, AutotuneObserverSeesEachTuningWithItsPhase) {
  JitMonitor m;
  std::vector<std::string> seen;
  m.set_autotune_observer([&](const AutotuneRecord& r) {
    // Called outside the lock: calling back into the monitor must not deadlock.
    seen.push_back(r.kernel + "@" + r.phase + (m.autotunes().empty() ? "" : "+"));
  });
  m.set_phase("prefill");
  AutotuneRecord t;
  t.kernel = "kern";
  m.record_autotune(t);
  m.set_phase("first_decode");
  m.record_autotune(t);
  EXPECT_EQ(seen, (std::vector<std::string>{"kern@prefill+", "kern@first_decode+"}));
}

TEST(Monitor, ErrorModeThrowsOnlyWhenActive) {
  JitMonitor m(MonitorMode::kError);
  m.set_phase("kernel_warmup");
  EXPECT_NO_THROW(m.before_compile(some_key()));
  m.activate();
  m.set_phase("first_decode");
  try {
    m.before_compile(some_key());
    FAIL() << "expected HotPathCompileError";
  } catch (const HotPathCompileError& e) {
    EXPECT_EQ(std::string(e.what()),
              "hot-path compile of kern in phase first_decode with --jit-monitor error: key " +
                  some_key().str());
  }
}

TEST(Monitor, WarnModePrintsOneLinePerHotPathCompile) {
  JitMonitor m(MonitorMode::kWarn);
  ::testing::internal::CaptureStderr();
  m.record({"startup", "k0", 1, "", false, "nvrtc"});  // before activate: silent
  m.activate();
  m.set_phase("prefill");
  EXPECT_NO_THROW(m.before_compile(some_key()));
  m.record({"kern", "k1", 2, "", false, "nvrtc"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("hot-path compile of kern in phase prefill"), std::string::npos) << err;
  EXPECT_NE(err.find("key k1"), std::string::npos) << err;
}

TEST(Monitor, ObserverSeesEachRecord) {
  JitMonitor m;
  std::vector<std::string> seen;
  m.set_observer([&](const CompileRecord& r) { seen.push_back(r.kernel); });
  m.record({"a", "ka", 1, "", false, "nvrtc"});
  m.record({"b", "kb", 1, "", false, "disk"});
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b"}));
}

TEST(Monitor, RuntimeErrorModeThrowsBeforeCompiling) {
  JitOptions o = compile_only();
  o.monitor = MonitorMode::kError;
  JitRuntime rt(o);
  const KernelSource k = axpy_kernel();
  rt.ensure(k, kBlock128, axpy_args(4096, 64));  // startup compile: allowed
  rt.monitor().activate();
  rt.monitor().set_phase("prefill");
  EXPECT_NO_THROW(rt.ensure(k, kBlock128, axpy_args(4096, 64)));  // a hit is no compile
  EXPECT_THROW(rt.ensure(k, kBlock128, axpy_args(4096, 1)), HotPathCompileError);
  // The refused compile is recorded as a hot-path compile that took no time...
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[1].source, "refused");
  EXPECT_TRUE(recs[1].hot_path);
  EXPECT_EQ(recs[1].phase, "prefill");
  EXPECT_EQ(recs[1].compile_ms, 0.0);
  EXPECT_NE(recs[1].key, recs[0].key);
  EXPECT_EQ(rt.cached_kernels(), 1u);  // ...and nothing was compiled
  EXPECT_EQ(list_dir(rt.cache_dir()).size(), 1u);
}

TEST(Monitor, RuntimeRecordModeKeepsGoing) {
  JitRuntime rt(compile_only());
  const KernelSource k = axpy_kernel();
  rt.ensure(k, kBlock128, axpy_args(4096, 64));
  rt.monitor().activate();
  rt.monitor().set_phase("first_decode");
  EXPECT_NO_THROW(rt.ensure(k, kBlock128, axpy_args(4096, 1)));
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_FALSE(recs[0].hot_path);
  EXPECT_EQ(recs[0].phase, "init");
  EXPECT_TRUE(recs[1].hot_path);
  EXPECT_EQ(recs[1].phase, "first_decode");
  EXPECT_EQ(recs[1].source, "nvrtc");
  EXPECT_GT(recs[1].compile_ms, 0.0);
  EXPECT_NE(recs[1].key.find("i32:1"), std::string::npos) << recs[1].key;
}

// ---------------------------------------------------------------- runtime (compile-only)

TEST(Runtime, SecondEnsureIsAHit) {
  JitRuntime rt(compile_only());
  EXPECT_EQ(rt.arch(), "sm_90");
  EXPECT_EQ(rt.compiler(), "nvrtc-" + nvrtc_version());
  const KernelSource k = axpy_kernel();
  const CompiledKernel& a = rt.ensure(k, kBlock128, axpy_args(4096, 64));
  EXPECT_TRUE(is_elf(a.cubin));
  EXPECT_EQ(a.function, nullptr);  // compile-only: never loaded
  // Other values with the same specialization: same key, no new record.
  const CompiledKernel& b = rt.ensure(k, kBlock128, axpy_args(8192, 4096));
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(rt.monitor().records().size(), 1u);
  EXPECT_EQ(rt.cached_kernels(), 1u);
  // A KernelSource rebuilt per call (same text pointer) still hits.
  KernelSource again = axpy_kernel();
  EXPECT_EQ(&rt.ensure(again, kBlock128, axpy_args(4096, 64)), &a);
  EXPECT_EQ(rt.monitor().records().size(), 1u);
}

TEST(Runtime, NewSpecializationCompilesNewKey) {
  JitRuntime rt(compile_only());
  const KernelSource k = axpy_kernel();
  const CompiledKernel& a = rt.ensure(k, kBlock128, axpy_args(4096, 64));
  const CompiledKernel& b = rt.ensure(k, kBlock128, axpy_args(4096, 1));         // n == 1
  const CompiledKernel& c = rt.ensure(k, kBlock128, axpy_args(4096 + 4, 64));    // unaligned
  const CompiledKernel& d = rt.ensure(k, {{"BLOCK", 256}}, axpy_args(4096, 64));  // constexpr
  EXPECT_NE(&a, &b);
  EXPECT_NE(&a, &c);
  EXPECT_NE(&a, &d);
  EXPECT_EQ(rt.cached_kernels(), 4u);
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_NE(recs[0].key, recs[1].key);
  EXPECT_EQ(b.key.signature, "*fp32:16,*fp32:16,*bf16:16,i32:1,fp32");
  EXPECT_EQ(c.key.signature, "*fp32,*fp32,*bf16,i32:16,fp32");
}

TEST(Runtime, ConcurrentEnsureCompilesOnce) {
  JitRuntime rt(compile_only());
  const KernelSource k = axpy_kernel();
  std::vector<std::thread> threads;
  std::atomic<const CompiledKernel*> first{nullptr};
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      const CompiledKernel* p = &rt.ensure(k, kBlock128, axpy_args(4096, 64));
      const CompiledKernel* expected = nullptr;
      if (!first.compare_exchange_strong(expected, p) && expected != p) ++mismatches;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(rt.monitor().records().size(), 1u);
}

// Misses of distinct keys compile on their own threads (a warmer's pool); each key still compiles
// exactly once however many threads ask for it, and a failing key fails every thread that waited.
TEST(Runtime, DistinctKeysCompileConcurrentlyEachOnce) {
  JitRuntime rt(compile_only());
  const KernelSource k = axpy_kernel();
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      try {
        rt.ensure(k, {{"BLOCK", 32 << (t % 4)}}, axpy_args(4096, 64));
      } catch (...) {
        ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(rt.monitor().records().size(), 4u);
  EXPECT_EQ(rt.cached_kernels(), 4u);
  KernelSource broken{"broken", "broken", kBrokenSource, {"y"}, {}};
  std::atomic<int> failures{0};
  threads.clear();
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      try {
        rt.ensure(broken, {}, {KernelArg::pointer(256, DType::kF32)});
      } catch (const CudaError&) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 4);
}

TEST(Runtime, NoArchWithoutGpuIsAnError) {
  if (driver_available()) GTEST_SKIP() << "a GPU is present: the arch comes from it";
  JitOptions o;
  o.launch = false;
  try {
    JitRuntime rt(o);
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("no arch given"), std::string::npos) << e.what();
  }
}

TEST(Runtime, LaunchWithoutDriverIsAnError) {
  if (driver_available()) GTEST_SKIP() << "a GPU is present";
  JitOptions o;
  o.arch = "sm_90";
  o.launch = true;
  EXPECT_THROW(JitRuntime rt(o), CudaError);
}

TEST(Runtime, LaunchInCompileOnlyModeOnlyEnsures) {
  JitRuntime rt(compile_only());
  LaunchDims dims;
  rt.launch(axpy_kernel(), kBlock128, axpy_args(4096, 64), dims, nullptr);
  EXPECT_EQ(rt.cached_kernels(), 1u);
}

TEST(Runtime, ClusterMustDivideTheGrid) {
  JitRuntime rt(compile_only());
  LaunchDims dims;
  dims.grid[0] = 3;
  dims.cluster[0] = 2;
  try {
    rt.launch(axpy_kernel(), kBlock128, axpy_args(4096, 64), dims, nullptr);
    ADD_FAILURE() << "a grid of 3 with clusters of 2 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of cluster 2x1x1"), std::string::npos) << e.what();
  }
  dims.grid[0] = 4;
  EXPECT_NO_THROW(rt.launch(axpy_kernel(), kBlock128, axpy_args(4096, 64), dims, nullptr));
}

// Key-only mode (what `coldstart coverage` enumerates keys with): a new key is recorded once as
// "key" with nothing compiled or written, a held key is only noted as reached, and after the
// mode ends the recorded key compiles for real on its next ensure().
TEST(Runtime, KeyOnlyModeRecordsNewKeysWithoutCompiling) {
  TempDir dir;
  JitRuntime rt(compile_only(dir.path));
  const KernelSource k = axpy_kernel();
  const CompiledKernel& held = rt.ensure(k, kBlock128, axpy_args(4096, 64));  // compiled
  ASSERT_EQ(rt.monitor().records().size(), 1u);
  const size_t files = list_dir(dir.path).size();
  rt.set_key_only(true);
  EXPECT_TRUE(rt.key_only());
  EXPECT_EQ(&rt.ensure(k, kBlock128, axpy_args(4096, 64)), &held);  // held: no record
  const std::vector<Constexpr> block256 = {{"BLOCK", 256}};
  const CompiledKernel& p1 = rt.ensure(k, block256, axpy_args(4096, 64));
  const CompiledKernel& p2 = rt.ensure(k, block256, axpy_args(8192, 64));  // same key
  EXPECT_EQ(&p1, &p2);
  EXPECT_TRUE(p1.cubin.empty());
  rt.ensure(k, block256, axpy_args(4096, 63));  // n no longer divisible by 16: another key
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[1].source, "key");
  EXPECT_EQ(recs[1].compile_ms, 0.0);
  EXPECT_EQ(recs[1].key, p1.key_text);
  EXPECT_NE(recs[2].key, recs[1].key);
  EXPECT_EQ(list_dir(dir.path).size(), files) << "key-only mode wrote to the kernel cache";
  const std::vector<std::string> reached = rt.reached_keys();
  ASSERT_EQ(reached.size(), 3u);
  EXPECT_EQ(rt.reached_key_count(), 3u);
  EXPECT_TRUE(std::is_sorted(reached.begin(), reached.end()));
  EXPECT_NE(std::find(reached.begin(), reached.end(), held.key_text), reached.end());
  rt.clear_reached_keys();
  EXPECT_TRUE(rt.reached_keys().empty());
  EXPECT_EQ(rt.reached_key_count(), 0u);
  rt.set_key_only(false);
  const CompiledKernel& real = rt.ensure(k, block256, axpy_args(4096, 64));
  EXPECT_TRUE(is_elf(real.cubin));
  ASSERT_EQ(rt.monitor().records().size(), 4u);
  EXPECT_EQ(rt.monitor().records()[3].source, "nvrtc");
  EXPECT_TRUE(rt.reached_keys().empty()) << "reached is collected only while the mode is on";
  // A second process on the same kernel cache: a key on disk would be loaded, recorded so.
  JitRuntime other(compile_only(dir.path));
  other.set_key_only(true);
  other.ensure(k, block256, axpy_args(4096, 64));       // compiled above, on disk now
  other.ensure(k, {{"BLOCK", 512}}, axpy_args(4096, 64));  // nowhere
  ASSERT_EQ(other.monitor().records().size(), 2u);
  EXPECT_EQ(other.monitor().records()[0].source, "disk");
  EXPECT_EQ(other.monitor().records()[1].source, "key");
}

// compile_key_only_misses: the keys a key-only pass recorded as "key" are compiled once each,
// in the order reached, with their compile time recorded; a key held or compiled since is not.
TEST(Runtime, CompileKeyOnlyMissesCompilesEachColdKeyOnce) {
  TempDir dir;
  JitRuntime rt(compile_only(dir.path));
  const KernelSource k = axpy_kernel();
  rt.ensure(k, kBlock128, axpy_args(4096, 64));  // held
  rt.set_key_only(true);
  rt.ensure(k, kBlock128, axpy_args(4096, 64));
  rt.ensure(k, {{"BLOCK", 256}}, axpy_args(4096, 64));
  rt.ensure(k, {{"BLOCK", 256}}, axpy_args(4096, 63));
  rt.ensure(k, {{"BLOCK", 256}}, axpy_args(4096, 64));  // same key again
  EXPECT_THROW(rt.compile_key_only_misses(), Error) << "refused while the mode is on";
  rt.set_key_only(false);
  EXPECT_EQ(rt.compile_key_only_misses(), 2u);
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 5u);  // 1 startup compile, 2 keys, 2 compiles
  EXPECT_EQ(recs[3].source, "nvrtc");
  EXPECT_EQ(recs[3].key, recs[1].key);
  EXPECT_EQ(recs[4].key, recs[2].key);
  EXPECT_GT(recs[3].compile_ms, 0.0);
  EXPECT_EQ(rt.compile_key_only_misses(), 0u) << "each recorded key is compiled once";
}

// ---------------------------------------------------------------- disk cache

TEST(DiskCache, SharedDirGivesDiskHit) {
  TempDir dir;
  const KernelSource k = axpy_kernel();
  std::string key;
  {
    JitRuntime first(compile_only(dir.path));
    EXPECT_EQ(first.cache_dir(), dir.path);
    first.ensure(k, kBlock128, axpy_args(4096, 64));
    ASSERT_EQ(first.monitor().records().size(), 1u);
    EXPECT_EQ(first.monitor().records()[0].source, "nvrtc");
    key = first.monitor().records()[0].key;
  }
  ASSERT_TRUE(fs::exists(dir.path));  // a given cache_dir is persistent
  JitRuntime second(compile_only(dir.path));
  const CompiledKernel& ck = second.ensure(k, kBlock128, axpy_args(4096, 64));
  ASSERT_EQ(second.monitor().records().size(), 1u);
  EXPECT_EQ(second.monitor().records()[0].source, "disk");
  EXPECT_EQ(second.monitor().records()[0].key, key);
  EXPECT_TRUE(is_elf(ck.cubin));
  // The file is named by the digest and starts with the key text.
  const std::string file = dir.path + "/" + ck.key.digest() + ".cubin";
  ASSERT_TRUE(fs::exists(file));
  std::ifstream in(file, std::ios::binary);
  std::string header;
  std::getline(in, header);
  EXPECT_NE(header.find(key), std::string::npos) << header;
}

TEST(DiskCache, ErrorModeAllowsDiskLoadsAndRecordsThem) {
  TempDir dir;
  const KernelSource k = axpy_kernel();
  { JitRuntime warm(compile_only(dir.path)); warm.ensure(k, kBlock128, axpy_args(4096, 64)); }
  JitOptions o = compile_only(dir.path);
  o.monitor = MonitorMode::kError;
  JitRuntime rt(o);
  rt.monitor().activate();
  EXPECT_NO_THROW(rt.ensure(k, kBlock128, axpy_args(4096, 64)));
  ASSERT_EQ(rt.monitor().records().size(), 1u);
  EXPECT_TRUE(rt.monitor().records()[0].hot_path);
  EXPECT_EQ(rt.monitor().records()[0].source, "disk");
}

TEST(DiskCache, DefaultDirIsFreshAndRemoved) {
  std::string path;
  std::string other;
  {
    JitRuntime rt(compile_only());
    JitRuntime rt2(compile_only());
    path = rt.cache_dir();
    other = rt2.cache_dir();
    EXPECT_NE(path, other);  // cold by default: never shared between runtimes
    ASSERT_TRUE(fs::is_directory(path));
    rt.ensure(axpy_kernel(), kBlock128, axpy_args(4096, 64));
    rt2.ensure(axpy_kernel(), kBlock128, axpy_args(4096, 64));
    EXPECT_EQ(rt2.monitor().records()[0].source, "nvrtc");
    EXPECT_EQ(list_dir(path).size(), 1u);
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(other));
}

TEST(DiskCache, AtomicWriteLeavesNoTempFiles) {
  TempDir dir;
  JitRuntime rt(compile_only(dir.path));
  const KernelSource k = axpy_kernel();
  rt.ensure(k, kBlock128, axpy_args(4096, 64));
  rt.ensure(k, kBlock128, axpy_args(4096, 1));
  rt.ensure(k, kBlock128, axpy_args(4100, 3));
  const auto names = list_dir(dir.path);
  EXPECT_EQ(names.size(), 3u);
  for (const std::string& n : names) {
    EXPECT_EQ(n.size(), 16u + 6u) << n;
    EXPECT_EQ(n.substr(16), ".cubin") << n;
  }
}

TEST(DiskCache, ForeignFileUnderDigestIsAMiss) {
  TempDir dir;
  const KernelSource k = axpy_kernel();
  const CompileKey key = make_compile_key(k, kBlock128, axpy_args(4096, 64), "sm_90",
                                          "nvrtc-" + nvrtc_version());
  {
    std::ofstream out(dir.path + "/" + key.digest() + ".cubin", std::ios::binary);
    out << "coldstart-cubin/1 some other key\n\x7f" << "ELFgarbage";
  }
  JitRuntime rt(compile_only(dir.path));
  rt.ensure(k, kBlock128, axpy_args(4096, 64));
  ASSERT_EQ(rt.monitor().records().size(), 1u);
  EXPECT_EQ(rt.monitor().records()[0].source, "nvrtc");
}

TEST(DiskCache, DamagedEntryIsRecompiledWarnedAndReplaced) {
  const KernelSource k = axpy_kernel();
  // Truncated body, then one flipped bit in the body: neither may load.
  for (int damage = 0; damage < 2; ++damage) {
    TempDir dir;
    std::string file;
    {
      JitRuntime first(compile_only(dir.path));
      file = dir.path + "/" + first.ensure(k, kBlock128, axpy_args(4096, 64)).key.digest() + ".cubin";
    }
    std::string bytes;
    {
      std::ifstream in(file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    ASSERT_GT(bytes.size(), 200u);
    if (damage == 0) bytes.resize(bytes.size() - 100);
    else bytes[bytes.size() - 50] ^= 0x10;
    { std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes; }
    JitRuntime second(compile_only(dir.path));
    second.ensure(k, kBlock128, axpy_args(4096, 64));
    ASSERT_EQ(second.monitor().records().size(), 1u);
    EXPECT_EQ(second.monitor().records()[0].source, "nvrtc") << "damage " << damage;
    ASSERT_EQ(second.monitor().warnings().size(), 1u) << "damage " << damage;
    EXPECT_NE(second.monitor().warnings()[0].find("is damaged"), std::string::npos);
    EXPECT_NE(second.monitor().warnings()[0].find(damage == 0 ? "cubin bytes" : "checksum"),
              std::string::npos)
        << second.monitor().warnings()[0];
    JitRuntime third(compile_only(dir.path));  // the entry was replaced by the fresh compile
    third.ensure(k, kBlock128, axpy_args(4096, 64));
    EXPECT_EQ(third.monitor().records()[0].source, "disk");
    EXPECT_TRUE(third.monitor().warnings().empty());
  }
}

TEST(DiskCache, AnEntryThatCannotBeWrittenIsAWarningNotAnError) {
  TempDir dir;
  const KernelSource k = axpy_kernel();
  const CompileKey key = make_compile_key(k, kBlock128, axpy_args(4096, 64), "sm_90",
                                          "nvrtc-" + nvrtc_version());
  // A directory where the entry would go: the atomic rename fails, even for root (a read-only
  // cache directory fails the same way for other users).
  fs::create_directory(dir.path + "/" + key.digest() + ".cubin");
  JitRuntime rt(compile_only(dir.path));
  EXPECT_NO_THROW(rt.ensure(k, kBlock128, axpy_args(4096, 64)));
  EXPECT_NO_THROW(rt.ensure(k, kBlock128, axpy_args(4096, 1)));
  EXPECT_EQ(rt.monitor().records().size(), 2u);
  // The directory in the entry's place is a damaged entry (a warning), and the write that would
  // replace it fails: warned once, not per compile.
  int damaged = 0, unwritable = 0;
  for (const std::string& w : rt.monitor().warnings()) {
    damaged += w.find("is damaged: is a directory") != std::string::npos;
    unwritable += w.find("cannot be written") != std::string::npos;
  }
  EXPECT_EQ(damaged, 1);
  EXPECT_EQ(unwritable, 1) << "warned once";
}

// ---------------------------------------------------------------- processes sharing a cache

// A kernel that compiles in a few tens of milliseconds; every K is another compile key.
const char* const kFillSource = R"(
extern "C" __global__ void fill(float* y) { y[threadIdx.x] = K; }
)";

KernelSource fill_kernel() { return KernelSource{"fill", "fill", kFillSource, {"y"}, {}}; }

constexpr int kSharedKeys = 64;
constexpr const char* kWorkerDirEnv = "COLDSTART_JIT_TEST_WORKER_DIR";

// One of the processes of DiskCache.ConcurrentColdProcessesCompileEachKeyOnce (run by it, never
// on its own): waits for <dir>/../go, then ensures kSharedKeys keys on the cache <dir> and
// writes "<nvrtc compiles> <disk loads> <warnings>" to <dir>/../count-<pid>.
TEST(DiskCacheWorker, DISABLED_CompileSharedKeys) {
  const char* dir = std::getenv(kWorkerDirEnv);
  if (dir == nullptr) GTEST_SKIP() << "run by DiskCache.ConcurrentColdProcessesCompileEachKeyOnce";
  const std::string base = paths::parent(dir);
  for (int i = 0; i < 6000 && !fs::exists(base + "/go"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  JitRuntime rt(compile_only(dir));
  for (int k = 0; k < kSharedKeys; ++k) {
    rt.ensure(fill_kernel(), {{"K", k}}, {KernelArg::pointer(256, DType::kF32)});
  }
  int nvrtc = 0, disk = 0;
  for (const CompileRecord& r : rt.monitor().records()) (r.source == "nvrtc" ? nvrtc : disk) += 1;
  std::ofstream(base + "/count-" + std::to_string(::getpid()))
      << nvrtc << " " << disk << " " << rt.monitor().warnings().size() << "\n";
}

// 8 cold processes on one cache directory, each needing the same 64 keys at the same moment:
// every key is compiled once in all (the others wait on its entry lock and load it), no entry
// is damaged, and no lock or temporary file is left. Without the entry locks 24 to 32 of the 64
// keys were compiled twice or more.
TEST(DiskCache, ConcurrentColdProcessesCompileEachKeyOnce) {
  constexpr int kProcesses = 8;
  TempDir base;
  const std::string cache = base.path + "/cache";
  fs::create_directory(cache);
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
  env_s.push_back(std::string(kWorkerDirEnv) + "=" + cache);
  std::vector<char*> env;
  for (auto& e : env_s) env.push_back(e.data());
  env.push_back(nullptr);
  std::string exe = paths::self_executable();
  std::string filter = "--gtest_filter=DiskCacheWorker.DISABLED_CompileSharedKeys";
  std::string disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {exe.data(), filter.data(), disabled.data(), nullptr};
  posix_spawn_file_actions_t quiet;  // the workers' own gtest output is not this test's
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcesses; ++p) {
    pid_t pid = -1;
    EXPECT_EQ(::posix_spawn(&pid, exe.c_str(), &quiet, nullptr, argv, env.data()), 0);
    if (pid > 0) pids.push_back(pid);
  }
  posix_spawn_file_actions_destroy(&quiet);
  std::ofstream(base.path + "/go") << "go\n";
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "worker " << pid << " failed";
  }
  int compiles = 0, loads = 0, warnings = 0, reports = 0;
  for (pid_t pid : pids) {
    std::ifstream in(base.path + "/count-" + std::to_string(pid));
    int n = 0, d = 0, w = 0;
    if (in >> n >> d >> w) ++reports;
    compiles += n;
    loads += d;
    warnings += w;
  }
  ASSERT_EQ(reports, kProcesses);
  std::cout << kProcesses << " cold processes x " << kSharedKeys << " keys: " << compiles
            << " compiles (" << compiles - kSharedKeys << " duplicated), " << loads
            << " loads from the shared cache\n";
  EXPECT_EQ(compiles, kSharedKeys) << compiles - kSharedKeys << " keys compiled more than once";
  EXPECT_EQ(compiles + loads, kProcesses * kSharedKeys);
  EXPECT_EQ(warnings, 0);
  // Every entry intact, and nothing else left in the directory.
  const auto names = list_dir(cache);
  EXPECT_EQ(names.size(), static_cast<size_t>(kSharedKeys));
  for (const std::string& n : names) EXPECT_EQ(n.substr(n.size() - 6), ".cubin") << n;
  JitRuntime check(compile_only(cache));
  for (int k = 0; k < kSharedKeys; ++k) {
    check.ensure(fill_kernel(), {{"K", k}}, {KernelArg::pointer(256, DType::kF32)});
  }
  for (const CompileRecord& r : check.monitor().records()) EXPECT_EQ(r.source, "disk") << r.key;
  EXPECT_TRUE(check.monitor().warnings().empty());
}

// A process that holds an entry's lock and does not finish (stuck) is waited for only
// disk_lock_timeout_s: then the key is compiled anyway, with a warning.
TEST(DiskCache, StuckLockHolderIsNotWaitedForeverAndDeadHoldersReleaseIt) {
  TempDir dir;
  const KernelSource k = fill_kernel();
  const std::vector<KernelArg> args = {KernelArg::pointer(256, DType::kF32)};
  auto digest = [&](int v) {
    return make_compile_key(k, {{"K", v}}, args, "sm_90", "nvrtc-" + nvrtc_version()).digest();
  };
  const std::string lock_path = dir.path + "/" + digest(1) + ".cubin.lock";
  {
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);  // "another process", stuck
    JitOptions o = compile_only(dir.path);
    o.disk_lock_timeout_s = 0.3;
    JitRuntime rt(o);
    const auto t0 = std::chrono::steady_clock::now();
    rt.ensure(k, {{"K", 1}}, args);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(waited, 0.3);
    ASSERT_EQ(rt.monitor().records().size(), 1u);
    EXPECT_EQ(rt.monitor().records()[0].source, "nvrtc");
    ASSERT_EQ(rt.monitor().warnings().size(), 1u);
    EXPECT_NE(rt.monitor().warnings()[0].find("held its lock"), std::string::npos)
        << rt.monitor().warnings()[0];
    ::close(fd);  // a holder that dies releases the lock with its fds
  }
  // The entry was written all the same; the next key locks and unlocks without waiting.
  JitOptions o = compile_only(dir.path);
  o.disk_lock_timeout_s = 0.3;
  JitRuntime rt(o);
  rt.ensure(k, {{"K", 1}}, args);
  rt.ensure(k, {{"K", 2}}, args);
  EXPECT_EQ(rt.monitor().records()[0].source, "disk");
  EXPECT_EQ(rt.monitor().records()[1].source, "nvrtc");
  EXPECT_TRUE(rt.monitor().warnings().empty());
  EXPECT_FALSE(fs::exists(dir.path + "/" + digest(2) + ".cubin.lock"))
      << "the holder removes its lock file";
}

// ---------------------------------------------------------------- compile memo

TEST(CompileMemo, SecondRuntimeReusesTheCubinAndTheMeasuredTime) {
  TempDir memo;
  const KernelSource k = axpy_kernel();
  JitOptions o = compile_only();
  o.compile_memo_dir = memo.path;
  CompileRecord first;
  std::vector<char> cubin;
  {
    JitRuntime rt(o);
    cubin = rt.ensure(k, kBlock128, axpy_args(4096, 64)).cubin;
    first = rt.monitor().records().at(0);
    EXPECT_FALSE(first.reused);
  }
  JitRuntime rt(o);  // its own fresh kernel cache: still a compile, but served by the memo
  rt.monitor().activate();
  const CompiledKernel& ck = rt.ensure(k, kBlock128, axpy_args(4096, 64));
  ASSERT_EQ(rt.monitor().records().size(), 1u);
  const CompileRecord again = rt.monitor().records()[0];  // records() returns a copy
  EXPECT_TRUE(again.reused);
  EXPECT_EQ(again.source, "nvrtc");
  EXPECT_TRUE(again.hot_path) << "a reused compile is still a compile after startup";
  EXPECT_NEAR(again.compile_ms, first.compile_ms, 1e-3);
  EXPECT_EQ(ck.cubin, cubin);
  // Another specialization is not in the memo: compiled for real.
  rt.ensure(k, kBlock128, axpy_args(4096, 1));
  EXPECT_FALSE(rt.monitor().records().at(1).reused);
}

TEST(CompileMemo, ForeignFileUnderDigestIsAMiss) {
  TempDir memo;
  const KernelSource k = axpy_kernel();
  const CompileKey key = make_compile_key(k, kBlock128, axpy_args(4096, 64), "sm_90",
                                          "nvrtc-" + nvrtc_version());
  {
    std::ofstream out(memo.path + "/" + key.digest() + ".memo", std::ios::binary);
    out << "coldstart-memo/2 some other key\n12.5\n\x7f" << "ELFgarbage";
  }
  JitOptions o = compile_only();
  o.compile_memo_dir = memo.path;
  JitRuntime rt(o);
  rt.ensure(k, kBlock128, axpy_args(4096, 64));
  EXPECT_FALSE(rt.monitor().records().at(0).reused);
}

// ---------------------------------------------------------------- driver

TEST(Driver, UnavailableHasAReason) {
  if (driver_available()) {
    EXPECT_TRUE(driver_unavailable_reason().empty());
    EXPECT_FALSE(driver_version().empty());
  } else {
    EXPECT_FALSE(driver_unavailable_reason().empty());
    EXPECT_THROW(driver(), CudaError);
    EXPECT_EQ(driver_version(), "");
  }
}

TEST(DriverGpu, CheckMacroNamesCallAndError) {
  if (!driver_available()) {
    GTEST_SKIP() << "no CUDA driver/GPU: " << driver_unavailable_reason();
  }
  try {
    CUdevice dev;
    CS_CU_CHECK(driver().cuDeviceGet(&dev, 1 << 20));
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("jit_test.cpp:"), std::string::npos) << text;
    EXPECT_NE(text.find("cuDeviceGet(&dev, 1 << 20) failed: CUDA_ERROR_INVALID_DEVICE"),
              std::string::npos)
        << text;
  }
}

TEST(Driver, NvrtcCheckMacroNamesCall) {
  try {
    CS_NVRTC_CHECK(nvrtcCreateProgram(nullptr, "x", "x.cu", 0, nullptr, nullptr));
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("nvrtcCreateProgram(nullptr"), std::string::npos) << text;
    EXPECT_NE(text.find("NVRTC_ERROR_INVALID_PROGRAM"), std::string::npos) << text;
  }
}

// ---------------------------------------------------------------- CUDA API timer

TEST(ApiTimer, ClassifiesCallsByName) {
  EXPECT_EQ(classify_api_call("cudaMalloc_v3020"), HostPart::kAllocator);
  EXPECT_EQ(classify_api_call("cudaFree_v3020"), HostPart::kAllocator);
  EXPECT_EQ(classify_api_call("cuMemAlloc_v2"), HostPart::kAllocator);
  EXPECT_EQ(classify_api_call("cuMemCreate"), HostPart::kAllocator);
  EXPECT_EQ(classify_api_call("cuMemSetAccess"), HostPart::kAllocator);
  EXPECT_EQ(classify_api_call("cudaHostAlloc_v3020"), HostPart::kAllocator);
  EXPECT_EQ(classify_api_call("cudaLaunchKernel_v7000"), HostPart::kLaunch);
  EXPECT_EQ(classify_api_call("cuLaunchKernelEx"), HostPart::kLaunch);
  EXPECT_EQ(classify_api_call("cudaGraphLaunch_v10000"), HostPart::kGraphLaunch);
  EXPECT_EQ(classify_api_call("cuGraphUpload"), HostPart::kGraphLaunch);
  EXPECT_EQ(classify_api_call("cuModuleLoadData"), HostPart::kModule);
  EXPECT_EQ(classify_api_call("cuLibraryLoadData"), HostPart::kModule);
  EXPECT_EQ(classify_api_call("cudaFuncGetAttributes_v3020"), HostPart::kModule);
  // Copies and synchronization wait for the GPU, asynchronous ones included.
  EXPECT_EQ(classify_api_call("cudaMemcpyAsync_v3020"), HostPart::kWait);
  EXPECT_EQ(classify_api_call("cuMemcpyDtoH_v2"), HostPart::kWait);
  EXPECT_EQ(classify_api_call("cudaStreamSynchronize_v3020"), HostPart::kWait);
  EXPECT_EQ(classify_api_call("cudaMemset_v3020"), HostPart::kWait);
  EXPECT_EQ(classify_api_call("cudaMemsetAsync_v3020"), HostPart::kOtherApi);
  EXPECT_EQ(classify_api_call("cudaEventRecord_v3020"), HostPart::kOtherApi);
  EXPECT_EQ(classify_api_call(""), HostPart::kOtherApi);
  HostTimes t{};
  t[static_cast<size_t>(HostPart::kAllocator)] = 2;
  t[static_cast<size_t>(HostPart::kWait)] = 100;
  t[static_cast<size_t>(HostPart::kOtherApi)] = 0.5;
  t[static_cast<size_t>(HostPart::kModelHost)] = 7;
  EXPECT_DOUBLE_EQ(api_stall_ms(t), 2.5);  // waits and frames outside the API are not API stalls
  EXPECT_STREQ(host_part_name(HostPart::kGraphLaunch), "graph_launch");
  EXPECT_STREQ(host_part_name(HostPart::kEngineHost), "engine_host");
}

TEST(ApiTimerGpu, ChargesEachMomentOfItsThreadToOnePart) {
  if (!driver_available()) GTEST_SKIP() << "no CUDA driver/GPU: " << driver_unavailable_reason();
  std::string why;
  // start() itself (CUPTI's set-up) may take a while on a loaded machine; the timer's
  // clock starts somewhere inside it, so the sum lies between the wall from after and
  // the wall from before that call.
  const auto before_start = std::chrono::steady_clock::now();
  ApiTimer* timer = ApiTimer::start(&why);
  const auto after_start = std::chrono::steady_clock::now();
  ASSERT_NE(timer, nullptr) << why;
  const DriverApi& d = driver();
  ensure_context();
  auto alloc_free = [&] {
    CUdeviceptr p = 0;
    CS_CU_CHECK(d.cuMemAlloc(&p, size_t{256} << 20));
    CS_CU_CHECK(d.cuMemFree(p));
  };
  auto at = [](const HostTimes& h, HostPart p) { return h[static_cast<size_t>(p)]; };
  const HostTimes t0 = timer->totals();
  alloc_free();
  const HostTimes t1 = timer->totals();
  const double alloc = at(t1, HostPart::kAllocator) - at(t0, HostPart::kAllocator);
  EXPECT_GT(alloc, 0.0);
  EXPECT_NEAR(timer->stall_ms() - api_stall_ms(t0), alloc, 1e-6);
  {
    // A frame takes its own time; an API call inside it is the API's, not the frame's.
    const HostFrame model(HostPart::kModelHost);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    alloc_free();
  }
  const HostTimes t2 = timer->totals();
  EXPECT_GE(at(t2, HostPart::kModelHost) - at(t1, HostPart::kModelHost), 19.0);
  EXPECT_LT(at(t2, HostPart::kModelHost) - at(t1, HostPart::kModelHost), 20.0 + 200.0);
  EXPECT_GT(at(t2, HostPart::kAllocator), at(t1, HostPart::kAllocator));
  {
    // An opaque frame (the JIT's own timed window) keeps the API calls inside to itself.
    const ApiTimeExcluded excluded;
    alloc_free();
  }
  std::thread other([&] {  // another thread's calls are not this thread's time
    ensure_context();
    alloc_free();
  });
  other.join();
  const HostTimes t3 = timer->totals();
  EXPECT_DOUBLE_EQ(at(t3, HostPart::kAllocator), at(t2, HostPart::kAllocator));
  EXPECT_GT(at(t3, HostPart::kJitTimed), at(t2, HostPart::kJitTimed));
  // Every moment since start() is charged to exactly one part.
  double sum = 0;
  for (double ms : t3) sum += ms;
  const auto now = std::chrono::steady_clock::now();
  const double wall_outer = std::chrono::duration<double, std::milli>(now - before_start).count();
  const double wall_inner = std::chrono::duration<double, std::milli>(now - after_start).count();
  EXPECT_LE(sum, wall_outer);
  EXPECT_GT(sum, 0.9 * wall_inner - 1.0);
}

// ---------------------------------------------------------------- GPU launch

TEST(Gpu, LaunchesAndComputes) {
  if (!driver_available()) {
    GTEST_SKIP() << "no CUDA driver/GPU: " << driver_unavailable_reason();
  }
  JitOptions o;  // arch from the GPU, launching on
  JitRuntime rt(o);
  const DriverApi& d = driver();
  ensure_context();
  const int n = 1000;
  CUdeviceptr y = 0, x = 0, b = 0;
  CS_CU_CHECK(d.cuMemAlloc(&y, n * sizeof(float)));
  CS_CU_CHECK(d.cuMemAlloc(&x, n * sizeof(float)));
  CS_CU_CHECK(d.cuMemAlloc(&b, n * 2));
  std::vector<float> hx(n);
  std::vector<uint16_t> hb(n);
  for (int i = 0; i < n; ++i) {
    hx[i] = static_cast<float>(i);
    hb[i] = 0x3f80;  // bf16 1.0
  }
  CS_CU_CHECK(d.cuMemcpyHtoD(x, hx.data(), n * sizeof(float)));
  CS_CU_CHECK(d.cuMemcpyHtoD(b, hb.data(), n * 2));
  CS_CU_CHECK(d.cuMemsetD8(y, 0xff, n * sizeof(float)));  // poison: NaN everywhere
  std::vector<KernelArg> args = {KernelArg::pointer(y, DType::kF32),
                                 KernelArg::pointer(x, DType::kF32),
                                 KernelArg::pointer(b, DType::kBF16), KernelArg::i32(n),
                                 KernelArg::f32(3.0f)};
  LaunchDims dims;
  dims.grid[0] = (n + 127) / 128;
  dims.block[0] = 128;
  rt.launch(axpy_kernel(), kBlock128, args, dims, nullptr);
  CS_CU_CHECK(d.cuStreamSynchronize(nullptr));
  std::vector<float> hy(n);
  CS_CU_CHECK(d.cuMemcpyDtoH(hy.data(), y, n * sizeof(float)));
  for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(hy[i], 3.0f * i + 1.0f) << "at " << i;
  const auto recs = rt.monitor().records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_NE(rt.ensure(axpy_kernel(), kBlock128, args).function, nullptr);
  d.cuMemFree(y);
  d.cuMemFree(x);
  d.cuMemFree(b);
}

// A TMA tile load (cp.async.bulk.tensor through a by-value CUtensorMap) inside a 2-CTA cluster
// launch: each CTA loads rows [16 * blockIdx.x, +16) x columns [0, 16) of a float matrix and
// writes them out plus the u64 tag, and records its rank in the cluster.
const char* kTmaClusterSource = R"(
struct __align__(64) TensorMap { unsigned long long opaque[16]; };
extern "C" __global__ void tma_cluster_copy(const __grid_constant__ TensorMap tmap, float* out,
                                            unsigned long long tag, int* ranks) {
  __shared__ __align__(128) float tile[16 * 16];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned bar_addr = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  const unsigned tile_addr = static_cast<unsigned>(__cvta_generic_to_shared(tile));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_addr));
    asm volatile("fence.mbarrier_init.release.cluster;");
    asm volatile("fence.proxy.async.shared::cta;");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar_addr), "r"(16 * 16 * 4));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(tile_addr), "l"(&tmap), "r"(0), "r"(static_cast<int>(16 * blockIdx.x)), "r"(bar_addr) : "memory");
  }
  unsigned done = 0;
  while (!done) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar_addr) : "memory");
  }
  const unsigned t = threadIdx.x;
  out[blockIdx.x * 256 + t] = tile[t] + static_cast<float>(tag >> 40);
  if (t == 0) {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    ranks[blockIdx.x] = static_cast<int>(rank);
  }
}
)";

TEST(Nvrtc, TmaClusterKernelCompilesForSm90) {
  // TMA, mbarrier and cluster PTX came with PTX ISA 8.0 (CUDA 12.0), as the sm_90a target did.
  if (!nvrtc_can_target("sm_90a")) GTEST_SKIP() << nvrtc_cannot_target_text("sm_90a");
  KernelSource k{"tma_cluster_copy", "tma_cluster_copy", kTmaClusterSource, {"tmap", "out", "tag", "ranks"}, {}};
  TensorMapSpec spec;
  spec.dtype = DType::kF32;
  spec.address = 256;
  spec.dims[0] = 32;
  spec.dims[1] = 64;
  spec.strides[0] = 128;
  spec.box[0] = 16;
  spec.box[1] = 16;
  std::vector<KernelArg> args = {KernelArg::tmap(spec), KernelArg::pointer(256, DType::kF32),
                                 KernelArg::u64(7), KernelArg::pointer(256, DType::kI32)};
  EXPECT_FALSE(compile_to_cubin(k, {}, args, "sm_90").empty());
}

TEST(Gpu, TensorMapArgumentInAClusterLaunch) {
  if (!driver_available()) GTEST_SKIP() << "no CUDA driver/GPU: " << driver_unavailable_reason();
  JitOptions o;
  JitRuntime rt(o);
  if (arch_sm(rt.arch()) < 90) GTEST_SKIP() << "TMA and clusters need sm_90+, this GPU is " << rt.arch();
  KernelSource k{"tma_cluster_copy", "tma_cluster_copy", kTmaClusterSource, {"tmap", "out", "tag", "ranks"}, {}};
  k.min_sm = 90;
  const DriverApi& d = driver();
  ensure_context();
  const int rows = 64, cols = 32;  // the map covers a 64 x 32 float matrix; CTAs read 16 x 16 tiles
  CUdeviceptr in = 0, out = 0, ranks = 0;
  CS_CU_CHECK(d.cuMemAlloc(&in, rows * cols * 4));
  CS_CU_CHECK(d.cuMemAlloc(&out, 4 * 256 * 4));
  CS_CU_CHECK(d.cuMemAlloc(&ranks, 4 * 4));
  std::vector<float> hin(rows * cols);
  for (int i = 0; i < rows * cols; ++i) hin[i] = static_cast<float>((i * 37) % 1001) - 500.f;
  CS_CU_CHECK(d.cuMemcpyHtoD(in, hin.data(), hin.size() * 4));
  CS_CU_CHECK(d.cuMemsetD8(out, 0xff, 4 * 256 * 4));
  CS_CU_CHECK(d.cuMemsetD8(ranks, 0xff, 16));
  TensorMapSpec spec;
  spec.dtype = DType::kF32;
  spec.address = in;
  spec.rank = 2;
  spec.dims[0] = cols;
  spec.dims[1] = rows;
  spec.strides[0] = cols * 4;
  spec.box[0] = 16;
  spec.box[1] = 16;
  const uint64_t tag = 3ull << 40;
  std::vector<KernelArg> args = {KernelArg::tmap(spec), KernelArg::pointer(out, DType::kF32),
                                 KernelArg::u64(tag), KernelArg::pointer(ranks, DType::kI32)};
  LaunchDims dims;
  dims.grid[0] = 4;
  dims.block[0] = 256;
  dims.cluster[0] = 2;
  rt.launch(k, {}, args, dims, nullptr);
  CS_CU_CHECK(d.cuStreamSynchronize(nullptr));
  std::vector<float> hout(4 * 256);
  std::vector<int> hranks(4);
  CS_CU_CHECK(d.cuMemcpyDtoH(hout.data(), out, hout.size() * 4));
  CS_CU_CHECK(d.cuMemcpyDtoH(hranks.data(), ranks, 16));
  for (int b = 0; b < 4; ++b) {
    EXPECT_EQ(hranks[b], b % 2) << "block " << b;
    for (int t = 0; t < 256; ++t) {
      const float want = hin[(16 * b + t / 16) * cols + t % 16] + 3.f;
      ASSERT_EQ(hout[b * 256 + t], want) << "block " << b << " element " << t;
    }
  }
  d.cuMemFree(in);
  d.cuMemFree(out);
  d.cuMemFree(ranks);
}

}  // namespace
}  // namespace coldstart::jit
