// kernel_param_names: the argument names read from a kernel file's extern "C" signature, on the
// forms the family .cu files use and on the ones it must refuse. Torch-free, no GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/kernels/source_util.h"

namespace coldstart::kernels {
namespace {

using Names = std::vector<std::string>;

// The Error text of kernel_param_names(text, entry); fails the test when it does not throw.
std::string error_of(const char* text, const char* entry) {
  try {
    kernel_param_names(text, entry);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << entry;
  return "";
}

TEST(KernelParamNames, LaunchBoundsQualifiersAndMacroTypes) {
  const char* text = R"(
#include "whatever.cuh"
constexpr int kThreads = 128;
extern "C" __global__ void __launch_bounds__(kThreads * 2, 1)
paged_thing(const cs_u16* __restrict__ q, const pa_cache_t* __restrict__ key_cache,
            pa_u16 *value, float sm_scale, cs_i64 stride, unsigned char* __restrict__ flags,
            const __grid_constant__ TensorMap tmap_a, long long ld) {
  const int x = q[0] < 2 ? 1 : 0;  // a '<' in the body
}
)";
  EXPECT_EQ(kernel_param_names(text, "paged_thing"),
            (Names{"q", "key_cache", "value", "sm_scale", "stride", "flags", "tmap_a", "ld"}));
}

// The same signature's types: known scalars and pointees are checked, a family's macro types are
// pointers of any element, template-dependent and struct types are not checked.
TEST(KernelParamTypes, KnownTypesAreCheckedOthersAreNot) {
  const char* text = R"(
extern "C" __global__ void k(const cs_u16* __restrict__ q, const pa_cache_t* kc, float* out,
    float sm_scale, cs_i64 stride, unsigned char* flags, const __grid_constant__ CUtensorMap tm,
    long long ld, unsigned long long bits, int n, const int* __restrict__ idx,
    typename X<int>::T* dep, Params p, float** table) {}
)";
  using K = jit::ParamType::Kind;
  using E = jit::ParamType::Elem;
  const std::vector<jit::ParamType> t = kernel_param_types(text, "k");
  ASSERT_EQ(t.size(), 14u);
  auto is = [&](size_t i, K kind, int bytes, E elem, const char* txt) {
    EXPECT_EQ(t[i].kind, kind) << i;
    EXPECT_EQ(t[i].elem_bytes, bytes) << i;
    EXPECT_EQ(t[i].elem, elem) << i;
    EXPECT_EQ(t[i].text, txt) << i;
  };
  is(0, K::kPointer, 2, E::kAny, "cs_u16*");
  is(1, K::kPointer, 0, E::kAny, "pa_cache_t*");
  is(2, K::kPointer, 4, E::kFloat, "float*");
  is(3, K::kF32, 0, E::kAny, "float");
  is(4, K::kI64, 0, E::kAny, "cs_i64");
  is(5, K::kPointer, 1, E::kAny, "unsigned char*");
  is(6, K::kTensorMap, 0, E::kAny, "CUtensorMap");
  is(7, K::kI64, 0, E::kAny, "long long");
  is(8, K::kU64, 0, E::kAny, "unsigned long long");
  is(9, K::kI32, 0, E::kAny, "int");
  is(10, K::kPointer, 4, E::kInt, "int*");
  EXPECT_EQ(t[11].kind, K::kUnchecked);
  EXPECT_EQ(t[12].kind, K::kUnchecked);
  EXPECT_EQ(t[12].text, "Params");
  EXPECT_EQ(t[13].kind, K::kUnchecked);  // a pointer to pointers
  const std::vector<jit::ParamType> w =
      kernel_param_types("extern \"C\" __global__ void w(long a, size_t b, bool c) {}", "w");
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].kind, K::kI64);
  EXPECT_EQ(w[1].kind, K::kU64);
  EXPECT_EQ(w[2].kind, K::kUnchecked);  // no KernelArg kind for a bool
}

// check_launch_args against those types: kinds, element sizes and classes.
TEST(KernelParamTypes, LaunchArgumentsAreCheckedAgainstThem) {
  jit::KernelSource k;
  k.name = "k";
  k.arg_names = {"q", "out", "n", "idx"};
  k.arg_types = kernel_param_types(
      "extern \"C\" __global__ void k(const cs_u16* q, float* out, int n, const int* idx) {}", "k");
  using jit::DType;
  using jit::KernelArg;
  const auto ok = std::vector<KernelArg>{KernelArg::pointer(256, DType::kBF16),
                                         KernelArg::pointer(0, DType::kF32), KernelArg::i32(3),
                                         KernelArg::pointer(512, DType::kI32)};
  EXPECT_NO_THROW(jit::check_launch_args(k, ok));
  auto with = [&](size_t i, KernelArg a) {
    std::vector<KernelArg> v = ok;
    v[i] = a;
    try {
      jit::check_launch_args(k, v);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NO_THROW(jit::check_launch_args(k, {KernelArg::pointer(0, DType::kI16), ok[1], ok[2], ok[3]}));
  EXPECT_EQ(with(0, KernelArg::pointer(0, DType::kF32)),
            "kernel k: argument 1 'q' is declared cs_u16* but the launch passes a pointer to fp32");
  EXPECT_EQ(with(1, KernelArg::pointer(0, DType::kI32)),
            "kernel k: argument 2 'out' is declared float* but the launch passes a pointer to i32");
  EXPECT_EQ(with(2, KernelArg::i64(3)),
            "kernel k: argument 3 'n' is declared int but the launch passes an i64");
  EXPECT_EQ(with(3, KernelArg::pointer(0, DType::kF32)),
            "kernel k: argument 4 'idx' is declared int* but the launch passes a pointer to fp32");
  EXPECT_EQ(with(3, KernelArg::f32(1.f)),
            "kernel k: argument 4 'idx' is declared int* but the launch passes an fp32");
  k.arg_types.clear();  // a hand-written source without types: nothing is checked
  EXPECT_NO_THROW(jit::check_launch_args(k, {KernelArg::i64(1), ok[1], ok[2], ok[3]}));
}

TEST(KernelParamNames, CommentsAndLineBreaksInsideTheList) {
  const char* text =
      "extern \"C\"  // entry\n"
      "__global__ void __launch_bounds__(32)\n"
      "    k(/* first, with a comma */ const float* a,\n"
      "      // b, c: the two outputs (commas, parens)\n"
      "      float* b, float*\n"
      "      c /* the last one */, int\n"
      "      n) {}\n";
  EXPECT_EQ(kernel_param_names(text, "k"), (Names{"a", "b", "c", "n"}));
}

TEST(KernelParamNames, DependentTypesAttributesAndArrays) {
  const char* text = R"(
extern "C" __global__ void __launch_bounds__(kMsThreads) scan(
    const typename CsType<W_DTYPE, 2>::T* __restrict__ weight, typename MsOut::T* out,
    __align__(16) float* aligned, float w[4], int m[2][3], int& ref,
    const int* __attribute__((unused)) unused_ptr) {}
)";
  EXPECT_EQ(kernel_param_names(text, "scan"),
            (Names{"weight", "out", "aligned", "w", "m", "ref", "unused_ptr"}));
}

TEST(KernelParamNames, PicksTheNamedEntryAmongSeveral) {
  const char* text = R"src(
// extern "C" __global__ void second(int from_a_comment) {}
#define DECLARE extern "C" __global__ void second(int from_a_macro)
const char* s = "extern \"C\" __global__ void second(int from_a_string)";
const char* r = R"x(extern "C" __global__ void second(int from_a_raw_string))x";
__device__ void second_helper(int x) {}
__device__ void helper() { second(1, 2); }
extern "C" __global__ void __launch_bounds__(NUM_WARPS * 32, 1) first(int a, int b) {
  second(a, b);  // a call in a body is not a declaration
}
extern "C" __global__ void __launch_bounds__(32) second(const int* __restrict__ ks, float* logits) {}
)src";
  EXPECT_EQ(kernel_param_names(text, "first"), (Names{"a", "b"}));
  EXPECT_EQ(kernel_param_names(text, "second"), (Names{"ks", "logits"}));
}

TEST(KernelParamNames, ExternBlockAndAgreeingDeclarations) {
  const char* text = R"(
extern "C" {
__global__ void inner(int a, float* b);
__device__ int unrelated(int x) { return x < 3 ? x : 3; }
__global__ void inner(int a, float* b) { unrelated(a); }
}
)";
  EXPECT_EQ(kernel_param_names(text, "inner"), (Names{"a", "b"}));
  const char* disagree = "extern \"C\" {\n__global__ void inner(int a);\n__global__ void inner(int b) {}\n}";
  EXPECT_NE(error_of(disagree, "inner").find("lines 2 and 3 disagree"), std::string::npos);
}

TEST(KernelParamNames, EmptyLists) {
  EXPECT_EQ(kernel_param_names("extern \"C\" __global__ void e() {}", "e"), Names{});
  EXPECT_EQ(kernel_param_names("extern \"C\" __global__ void e(void) {}", "e"), Names{});
}

TEST(KernelParamNames, RefusesWhatItCannotRead) {
  // Not there (only as a non-extern function, or under another name): the error names the kernel.
  {
    const std::string e = error_of("__global__ void gone(int a) {}", "gone");
    EXPECT_NE(e.find("kernel gone:"), std::string::npos) << e;
    EXPECT_NE(e.find("no extern \"C\" function"), std::string::npos) << e;
  }
  EXPECT_NE(error_of("extern \"C\" __global__ void other(int a) {}", "gone").find("kernel gone"),
            std::string::npos);

  struct Bad {
    const char* text;
    const char* why;
  };
  const Bad bad[] = {
      {"extern \"C\" __global__ void k(int a, int) {}", "parameter 2 (line 1) has no name"},
      {"extern \"C\" __global__ void k(const cs_u16*, int n) {}", "parameter 1 (line 1) has no name"},
      {"extern \"C\" __global__ void k(unsigned long long) {}", "has no name"},
      {"extern \"C\" __global__ void k(int a = 3) {}", "default argument"},
      {"extern \"C\" __global__ void k(int a, ...) {}", "variadic"},
      {"extern \"C\" __global__ void k(void (*fn)(int)) {}", "unsupported form"},
      {"extern \"C\" __global__ void k(int a, , int b) {}", "parameter 2 (line 1) is empty"},
      {"extern \"C\" __global__ void k(int a,\n#if X\nint b\n#endif\n) {}", "directive at line 2"},
      {"extern \"C\" __global__ void k(int a, float* b", "not closed"},
      {"extern \"C\" __global__ void k(int a);\nextern \"C\" __global__ void k(int b) {}",
       "declarations at lines 1 and 2 disagree: (a) vs (b)"},
      {"/* unterminated\nextern \"C\" __global__ void k(int a) {}", "unterminated comment"},
  };
  for (const Bad& b : bad) {
    const std::string e = error_of(b.text, "k");
    EXPECT_EQ(e.rfind("kernel k: ", 0), 0u) << b.text << "\n-> " << e;
    EXPECT_NE(e.find(b.why), std::string::npos) << b.text << "\n-> " << e;
  }
}

// make_kernel_source's arg_names are the signature's, and a compile case must match their count.
TEST(KernelSource, ArgNamesComeFromTheEntryAndCompileCasesMatchThem) {
  static std::string storage;
  const jit::KernelSource k = make_kernel_source(
      "", "two_entries", "extern \"C\" __global__ void a(int x) {}\n"
      "extern \"C\" __global__ void b(const float* __restrict__ p, int n) {}\n",
      storage, "b");
  EXPECT_EQ(k.name, "two_entries");
  EXPECT_EQ(k.entry, "b");
  EXPECT_EQ(k.arg_names, (Names{"p", "n"}));
  const KernelCompileCase ok = make_compile_case(
      "fam", k, {}, {jit::KernelArg::pointer(1u << 20, jit::DType::kF32), jit::KernelArg::i32(4)});
  EXPECT_EQ(ok.args.size(), 2u);
  try {
    make_compile_case("fam", k, {}, {jit::KernelArg::i32(4)});
    ADD_FAILURE() << "a one-argument case of a two-parameter kernel was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fam: compile case two_entries[] gives 1 arguments, but "
                                         "kernel b takes 2 (p, n)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace coldstart::kernels
