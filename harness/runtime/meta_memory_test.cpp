// The counting meta-device allocator: every meta storage counted in caching-allocator blocks,
// freed storages given back, views free, the peak window resettable, and memory_stats reading it
// in compile-only mode.
#include "harness/runtime/meta_memory.h"

#include <ATen/ATen.h>
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

}  // namespace
}  // namespace coldstart
