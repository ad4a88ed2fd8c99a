// GoogleTest helpers the kernel families' test binaries share (cs_kernels_test_util): the
// compile-only runtime, error-text checks, GPU skip logic, the GPU runtime, random inputs, and
// poisoned paged caches' block tables and slot mappings.
#pragma once

#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/jit/jit.h"
#include "harness/jit/nvrtc_archs.h"

namespace coldstart::kernels::test {

/// Options of a compile-only runtime: arch sm_90, no launches (tensors on the meta device).
jit::JitOptions compile_only_options();

/// The text of the coldstart::Error that `fn` throws; "(no error)" when it throws none.
std::string message_of(const std::function<void()>& fn);

/// Whether a CUDA GPU can run the GPU tests; when not, `why` says what is missing.
bool gpu_available(std::string* why);

/// One runtime (the current GPU's arch) for all GPU tests of a binary, so each kernel compiles
/// once. Deliberately never destroyed: at static-destruction time libtorch may already have torn
/// its CUDA state down.
jit::JitRuntime& gpu_runtime();

/// Tensor options of dtype `t` on the current CUDA device.
at::TensorOptions cuda(at::ScalarType t);

/// The byte every poisoned buffer starts with; whatever still holds it was not written.
constexpr uint8_t kSentinel = 0xAB;

/// Random non-zero bf16 of `shape` on the GPU: randn * scale + shift, generated on the CPU from
/// `seed` (exact zeros become 1e-3).
at::Tensor random_bf16(std::vector<int64_t> shape, uint64_t seed, double scale, double shift);

/// A paged cache for GPU tests: a block table giving every sequence its own blocks, shuffled, and
/// the cache those blocks index (left for the family to allocate, poisoned with kSentinel).
struct PagedCache {
  at::Tensor cache;        ///< cuda; undefined from shuffled_blocks()
  at::Tensor block_table;  ///< cpu int32 [lens.size(), stride]; unused entries 0
  int64_t num_blocks = 0;  ///< blocks the cache needs: the sequences' blocks plus 5 spare
};

/// The block table of sequences of `lens` tokens in blocks of `block_size` tokens, with `stride`
/// columns, shuffled from `seed`; the cache is left undefined.
PagedCache shuffled_blocks(int64_t block_size, const std::vector<int64_t>& lens, int64_t stride,
                           uint64_t seed);

/// A slot mapping of `tokens` tokens into a cache of `total_slots` slots, int64 CPU [tokens]:
/// distinct slots in a fixed random order, every 5th token (t % 5 == 3) skipped (-1).
at::Tensor random_slots(int64_t tokens, int64_t total_slots);

}  // namespace coldstart::kernels::test

/// Skips the current test unless gpu_available(). A GPU test's GoogleTest suite name must contain
/// "Gpu": CTest labels tests `gpu` by that name (cmake/Testing.cmake), and a GPU test labelled
/// otherwise would run unthrottled and unlocked beside the GPU tests; such a test fails here,
/// on CPU machines too.
#define CS_REQUIRE_GPU()                                                              \
  do {                                                                                \
    const ::testing::TestInfo* info_ =                                                \
        ::testing::UnitTest::GetInstance()->current_test_info();                      \
    ASSERT_TRUE(info_ != nullptr && std::string(info_->test_suite_name()).find("Gpu") != \
                                         std::string::npos)                            \
        << "CS_REQUIRE_GPU in suite '" << (info_ ? info_->test_suite_name() : "?")    \
        << "': name GPU test suites *Gpu* so CTest labels them gpu";                  \
    std::string why_;                                                                 \
    if (!::coldstart::kernels::test::gpu_available(&why_)) {                          \
      GTEST_SKIP() << "needs a CUDA GPU and a CUDA libtorch: " << why_;               \
    }                                                                                 \
  } while (0)

/// Skips the current test, with NVRTC's version and targets as the reason, unless this NVRTC
/// compiles for `arch` ("sm_100", "sm_90a"; see jit::nvrtc_can_target). An older toolkit (a
/// distribution's CUDA 11.8) lacks them.
#define CS_REQUIRE_NVRTC_TARGET(arch)                                                 \
  do {                                                                                \
    if (!::coldstart::jit::nvrtc_can_target(arch)) {                                  \
      GTEST_SKIP() << ::coldstart::jit::nvrtc_cannot_target_text(arch);               \
    }                                                                                 \
  } while (0)

/// Expects the error text of `call` to contain `text` (printing the text otherwise).
#define EXPECT_MENTIONS(call, text)                                                    \
  EXPECT_NE(::coldstart::kernels::test::message_of([&] { call; }).find(text),          \
            std::string::npos)                                                         \
      << ::coldstart::kernels::test::message_of([&] { call; })
