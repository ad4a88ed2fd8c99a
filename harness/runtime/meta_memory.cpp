// The counting meta-device allocator (meta_memory.h).
#include "harness/runtime/meta_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <fmt/format.h>

#include <atomic>
#include <mutex>

namespace coldstart {
namespace {

std::atomic<int64_t> g_allocated{0};
std::atomic<int64_t> g_peak{0};
std::atomic<bool> g_tracked{false};
std::atomic<int64_t> g_limit{0};
std::atomic<int64_t> g_outside{0};

// What a storage's DataPtr carries so that its deleter can give its bytes back. The data pointer
// itself stays null, as the meta device's own allocator leaves it.
struct MetaBlock {
  int64_t bytes;
};

void free_meta_block(void* ctx) {
  auto* block = static_cast<MetaBlock*>(ctx);
  g_allocated.fetch_sub(block->bytes, std::memory_order_relaxed);
  delete block;
}

c10::DataPtr allocate_meta_block(size_t nbytes) {
  const int64_t bytes = meta_block_bytes(static_cast<int64_t>(nbytes));
  const int64_t limit = g_limit.load(std::memory_order_relaxed);
  if (limit > 0) {
    const int64_t held = g_allocated.load(std::memory_order_relaxed);
    const int64_t outside = g_outside.load(std::memory_order_relaxed);
    if (held + outside + bytes > limit) throw DeviceOutOfMemoryError(bytes, held, limit, outside);
  }
  auto* block = new MetaBlock{bytes};
  const int64_t now = g_allocated.fetch_add(block->bytes, std::memory_order_relaxed) + block->bytes;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return c10::DataPtr(nullptr, block, &free_meta_block, c10::Device(c10::kMeta));
}

// c10::Allocator changed between the libtorch versions coldstart builds against: 1.x declares
// `DataPtr allocate(size_t) const`; 2.x (from 2.3) `DataPtr allocate(size_t)` and a pure
// `copy_data`. Both signatures are declared without `override`: each libtorch overrides the one
// it has, the other is an unused overload.
struct CountingMetaAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) const { return allocate_meta_block(nbytes); }
  c10::DataPtr allocate(size_t nbytes) { return allocate_meta_block(nbytes); }
  // Meta storages hold no bytes: nothing to copy.
  void copy_data(void*, const void*, size_t) const {}
};

}  // namespace

std::string torch_format_size(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes <= 1024) return fmt::format("{} bytes", bytes);
  if (bytes <= 1048576) return fmt::format("{:.2f} KiB", b / 1024.0);
  if (bytes <= 1073741824LL) return fmt::format("{:.2f} MiB", b / 1048576.0);
  return fmt::format("{:.2f} GiB", b / 1073741824.0);
}

DeviceOutOfMemoryError::DeviceOutOfMemoryError(int64_t requested_bytes, int64_t allocated_bytes,
                                               int64_t capacity_bytes, int64_t outside_bytes)
    // The sentences of torch 2.x's message, with what the compile-only model knows: nothing is
    // cached unused and no other process shares the device, so "in use" is what tensors hold
    // plus the memory outside the allocator (the CUDA context: torch's "non-PyTorch memory").
    : Error(fmt::format(
          "CUDA out of memory. Tried to allocate {}. GPU 0 has a total capacity of {} of which {} "
          "is free. Including non-PyTorch memory, this process has {} memory in use. Of the "
          "allocated memory {} is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
          "unallocated.",
          torch_format_size(requested_bytes), torch_format_size(capacity_bytes),
          torch_format_size(capacity_bytes - allocated_bytes - outside_bytes),
          torch_format_size(allocated_bytes + outside_bytes), torch_format_size(allocated_bytes))),
      requested_(requested_bytes),
      allocated_(allocated_bytes),
      capacity_(capacity_bytes) {}

int64_t meta_block_bytes(int64_t nbytes) {
  if (nbytes <= 0) return 0;
  constexpr int64_t kMinBlock = 512;
  return nbytes < kMinBlock ? kMinBlock : (nbytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

void track_meta_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingMetaAllocator allocator;
    // Priority above the meta device's own registration (priority 0), which is static.
    c10::SetAllocator(c10::kMeta, &allocator, /*priority=*/1);
    g_tracked = true;
  });
}

bool meta_memory_tracked() { return g_tracked; }

int64_t meta_allocated_bytes() { return g_allocated.load(std::memory_order_relaxed); }

int64_t meta_peak_bytes() { return g_peak.load(std::memory_order_relaxed); }

void reset_meta_peak() { g_peak.store(g_allocated.load(std::memory_order_relaxed)); }

void set_meta_memory_limit(int64_t bytes) { g_limit.store(bytes > 0 ? bytes : 0); }

int64_t meta_memory_limit() { return g_limit.load(std::memory_order_relaxed); }

void set_meta_outside_allocator_bytes(int64_t bytes) { g_outside.store(bytes > 0 ? bytes : 0); }

int64_t meta_outside_allocator_bytes() { return g_outside.load(std::memory_order_relaxed); }

}  // namespace coldstart
