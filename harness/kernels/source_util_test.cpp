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
