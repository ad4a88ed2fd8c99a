// The counting meta-device allocator: every meta storage counted in caching-allocator blocks,
// freed storages given back, views free, the peak window resettable, and memory_stats reading it
// in compile-only mode.
#include "harness/runtime/meta_memory.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness/runtime/graph.h"

namespace coldstart {
namespace {

TEST(MetaMemory, BlocksAreRoundedLikeTheCachingAllocator) {
  EXPECT_EQ(meta_block_bytes(0), 0);
  EXPECT_EQ(meta_block_bytes(1), 512);
  EXPECT_EQ(meta_block_bytes(512), 512);
  EXPECT_EQ(meta_block_bytes(513), 1024);
  EXPECT_EQ(meta_block_bytes(8 << 20), 8 << 20);
}

TEST(MetaMemory, CountsMetaStoragesUntilTheyAreFreed) {
  track_meta_memory();
  track_meta_memory();  // idempotent
  ASSERT_TRUE(meta_memory_tracked());
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(at::kMeta);
  const int64_t base = meta_allocated_bytes();
  reset_meta_peak();
  EXPECT_EQ(meta_peak_bytes(), base);
  {
    at::Tensor x = at::empty({1024, 4096}, bf16);  // 8 MiB
    at::Tensor w = at::empty({4096, 4096}, bf16);  // 32 MiB
    EXPECT_EQ(meta_allocated_bytes() - base, 40 << 20);
    at::Tensor v = w.view({-1}).narrow(0, 0, 10);  // a view takes no storage
    EXPECT_EQ(meta_allocated_bytes() - base, 40 << 20);
    at::Tensor y = at::matmul(x, w);  // an op's output is counted: 8 MiB
    EXPECT_EQ(meta_allocated_bytes() - base, 48 << 20);
    at::Tensor z = at::silu(y) * y;  // the silu temporary is freed again, its peak stays
    EXPECT_EQ(meta_allocated_bytes() - base, 56 << 20);
    EXPECT_EQ(meta_peak_bytes() - base, 64 << 20);
    at::Tensor s = at::zeros({10}, bf16);  // 20 bytes take one 512-byte block
    EXPECT_EQ(meta_allocated_bytes() - base, (56 << 20) + 512);
    const MemoryStats m = memory_stats(DeviceMode::kCompileOnly);
    EXPECT_EQ(m.allocated, meta_allocated_bytes());
    EXPECT_EQ(m.peak_allocated, meta_peak_bytes());
    EXPECT_EQ(m.total_device, 0);
  }
  EXPECT_EQ(meta_allocated_bytes(), base);
  EXPECT_EQ(meta_peak_bytes() - base, 64 << 20);
  reset_peak_memory(DeviceMode::kCompileOnly);
  EXPECT_EQ(meta_peak_bytes(), base);
  // CPU tensors are not device memory.
  at::Tensor cpu = at::empty({1 << 20}, at::TensorOptions().dtype(at::kFloat));
  EXPECT_EQ(meta_allocated_bytes(), base);
}

TEST(MetaMemory, SizesAreSpelledAsTorchSpellsThem) {
  EXPECT_EQ(torch_format_size(20), "20 bytes");
  EXPECT_EQ(torch_format_size(1024), "1024 bytes");
  EXPECT_EQ(torch_format_size(1536), "1.50 KiB");
  EXPECT_EQ(torch_format_size(1 << 20), "1024.00 KiB");
  EXPECT_EQ(torch_format_size((2 << 20) + 1), "2.00 MiB");
  EXPECT_EQ(torch_format_size(150111977472LL), "139.80 GiB");
}

TEST(MetaMemory, AnAllocationPastTheLimitRaisesTorchsOutOfMemoryAndTakesNothing) {
  track_meta_memory();
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(at::kMeta);
  const int64_t base = meta_allocated_bytes();
  set_meta_memory_limit(base + (48 << 20));
  EXPECT_EQ(meta_memory_limit(), base + (48 << 20));
  {
    at::Tensor w = at::empty({4096, 4096}, bf16);  // 32 MiB: fits
    const MemoryStats m = memory_stats(DeviceMode::kCompileOnly);
    EXPECT_EQ(m.total_device, base + (48 << 20));
    EXPECT_EQ(m.free_device, 16 << 20);
    EXPECT_EQ(m.total_device - m.free_device - m.reserved, 0);  // nothing outside the allocator
    try {
      at::Tensor x = at::empty({4096, 4096}, bf16);  // another 32 MiB: 16 MiB left
      FAIL() << "no out-of-memory error";
    } catch (const DeviceOutOfMemoryError& e) {
      EXPECT_EQ(e.requested_bytes(), 32 << 20);
      EXPECT_EQ(e.allocated_bytes(), base + (32 << 20));
      const std::string text = e.what();
      EXPECT_EQ(text.rfind("CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total "
                           "capacity of ", 0), 0u) << text;
      EXPECT_NE(text.find(" of which 16.00 MiB is free."), std::string::npos) << text;
    }
    EXPECT_EQ(meta_allocated_bytes(), base + (32 << 20));  // the failed one took nothing
    at::Tensor s = at::empty({1024, 4096}, bf16);  // 8 MiB still fits
  }
  set_meta_memory_limit(0);
  EXPECT_EQ(meta_memory_limit(), 0);
  at::Tensor big = at::empty({1LL << 40}, bf16);  // 2 TiB: unlimited again
  EXPECT_EQ(memory_stats(DeviceMode::kCompileOnly).total_device, 0);
}

TEST(MetaMemory, MemoryOutsideTheAllocatorIsNeverFreeAndCountsAsInUse) {
  track_meta_memory();
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(at::kMeta);
  const int64_t base = meta_allocated_bytes();
  set_meta_memory_limit(base + (64 << 20));
  set_meta_outside_allocator_bytes(24 << 20);  // a "CUDA context"
  EXPECT_EQ(meta_outside_allocator_bytes(), 24 << 20);
  {
    at::Tensor w = at::empty({4096, 4096}, bf16);  // 32 MiB: 8 MiB left beside the context
    const MemoryStats m = memory_stats(DeviceMode::kCompileOnly);
    EXPECT_EQ(m.free_device, 8 << 20);
    EXPECT_EQ(m.total_device - m.free_device - m.reserved, 24 << 20);  // as cudaMemGetInfo sees it
    try {
      at::Tensor x = at::empty({2048, 4096}, bf16);  // 16 MiB: would fit without the context
      FAIL() << "no out-of-memory error";
    } catch (const DeviceOutOfMemoryError& e) {
      const std::string text = e.what();
      EXPECT_NE(text.find(" of which 8.00 MiB is free."), std::string::npos) << text;
      // torch: "this process has" includes non-PyTorch memory; "allocated by PyTorch" does not.
      EXPECT_NE(text.find(fmt::format("this process has {} memory in use. Of the allocated memory {} "
                                      "is allocated by PyTorch",
                                      torch_format_size(base + (56 << 20)),
                                      torch_format_size(base + (32 << 20)))),
                std::string::npos)
          << text;
    }
  }
  set_meta_outside_allocator_bytes(0);
  set_meta_memory_limit(0);
}

}  // namespace
}  // namespace coldstart
